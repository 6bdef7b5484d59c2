"""The agent harness into a real ``convograph serve`` process through `RemotePort`: relays decided
through the HTTP API, a relay wait across a server restart, retries that store each event once,
back-pressure, refusals, steering through the server, and ``convograph run --server``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.server import ServerProcess, running_server, start_server

from convograph.client import ApiError, ConvographClient
from convograph.events import Event, HarnessEnd, Relay, Text, ToolResult, parse_event
from convograph.harness import Agent, ReplHarness, SandboxLimits, ToolContext, tool
from convograph.harness.remote import RemotePort, RemotePortError
from convograph.hypergraph import create_conversation, default_active
from convograph.hypergraph.commands import reduce_with_commands_events
from convograph.projections import project_thread
from convograph.testing.providers import ScriptedCall, ScriptedProvider, ScriptedTurn

FAST = {"CONVOGRAPH_SSE_HEARTBEAT_SECONDS": "0.3"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("harness") / "data", env=FAST) as proc:
        yield proc


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[ConvographClient]:
    async with ConvographClient(server.url) as client:
        yield client


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(policy="ask")
def deploy(target: str) -> str:
    """Deploy to a target."""
    return f"deployed to {target}"


def calling(*calls: ScriptedCall, text: str = "") -> ScriptedTurn:
    return ScriptedTurn(text=text, tool_calls=calls)


async def stored(client: ConvographClient, cid: str) -> list[Event]:
    return await client.replay(cid)


async def wait_for(client: ConvographClient, cid: str, kind: type[Any], timeout: float = 20) -> Any:
    for _ in range(int(timeout / 0.05)):
        try:
            found = [e for e in await client.replay(cid) if isinstance(e, kind)]
        except ApiError:  # not created yet
            found = []
        if found:
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind.__name__} in {cid} within {timeout} s")


async def test_a_run_streams_into_the_server_and_replays_to_the_same_graph(client: ConvographClient) -> None:
    provider = ScriptedProvider(
        [
            calling(ScriptedCall("add", {"a": 2, "b": 3}), text="Adding."),
            ScriptedTurn(reasoning="ok", text="5."),
        ]
    )
    async with RemotePort(client, "remote-basic") as port:
        result = await Agent(provider, model="m", tools=[add]).run(port, "2 + 3?")
    assert result.reason == "final"
    events = await stored(client, "remote-basic")
    assert len({e.event_id for e in events}) == len(events)
    assert None not in {e.event_id for e in events}
    # The second request's history came from the server's projection.
    assert [m["role"] for m in provider.requests[1].messages] == ["user", "assistant", "tool"]
    # Replaying the stored events gives the graph the server built live.
    replayed = reduce_with_commands_events(create_conversation(), events)
    thread = json.loads(json.dumps(_jsonable(project_thread(replayed, default_active(replayed)))))
    assert thread == await client.projection("remote-basic", "thread")


def _jsonable(value: Any) -> Any:
    from convograph import to_jsonable

    return to_jsonable(value)


async def test_a_relay_decided_through_the_http_api_lets_the_agent_go_on(client: ConvographClient) -> None:
    provider = ScriptedProvider(
        [calling(ScriptedCall("deploy", {"target": "prod"})), ScriptedTurn(text="Shipped.")]
    )
    async with RemotePort(client, "remote-relay") as port:
        run = Agent(provider, model="m", tools=[deploy]).start(port, "ship")
        relay = await wait_for(client, "remote-relay", Relay)
        await asyncio.sleep(0.2)
        assert not run.done()
        await client.decide_relay("remote-relay", relay.id, approved=True)
        result = await asyncio.wait_for(run.wait(), 30)
    assert (result.reason, result.text) == ("final", "Shipped.")
    results = [e for e in await stored(client, "remote-relay") if isinstance(e, ToolResult)]
    assert results[0].output["context"] == "deployed to prod"


async def test_a_denial_through_the_http_api(client: ConvographClient) -> None:
    provider = ScriptedProvider(
        [calling(ScriptedCall("deploy", {"target": "prod"})), ScriptedTurn(text="OK.")]
    )
    async with RemotePort(client, "remote-deny") as port:
        run = Agent(provider, model="m", tools=[deploy]).start(port, "ship")
        relay = await wait_for(client, "remote-deny", Relay)
        await client.decide_relay("remote-deny", relay.id, approved=False, reason="freeze week")
        await asyncio.wait_for(run.wait(), 30)
    results = [e for e in await stored(client, "remote-deny") if isinstance(e, ToolResult)]
    assert results[0].output == {"status": "denied", "reason": "freeze week"}


async def test_the_relay_wait_survives_a_server_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server(data, env=FAST)
    provider = ScriptedProvider(
        [calling(ScriptedCall("deploy", {"target": "eu"})), ScriptedTurn(text="Done after restart.")]
    )
    try:
        async with (
            ConvographClient(server.url) as client,
            RemotePort(client, "restart", retry_max=0.5) as port,
        ):
            run = Agent(provider, model="m", tools=[deploy]).start(port, "ship")
            relay = await wait_for(client, "restart", Relay)
            server.stop()
            await asyncio.sleep(0.5)
            assert not run.done()
            server = start_server(data, port=server.port, env=FAST)
            await client.decide_relay("restart", relay.id, approved=True)
            result = await asyncio.wait_for(run.wait(), 60)
            assert (result.reason, result.text) == ("final", "Done after restart.")
            await port.flush()  # the run's last events may still be queued
            events = await stored(client, "restart")
            assert [e.type for e in events].count("harness_end") == 1
            assert len({e.event_id for e in events}) == len(events)
    finally:
        server.stop()


async def test_events_emitted_while_the_server_is_down_are_retried_and_stored_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server(data, env=FAST)
    try:
        async with ConvographClient(server.url, timeout=15) as client:
            port = RemotePort(client, "outage", retry_initial=0.05, retry_max=0.3, linger=0)
            await port.emit([Text(run_id="r", id="t", content="before ")])
            await port.flush()
            server.stop()
            for i in range(20):
                await port.emit([Text(run_id="r", id="t", content=f"{i} ")])
            await asyncio.sleep(0.5)  # the sender keeps retrying the same batch
            assert port.attempts > 2
            server = start_server(data, port=server.port, env=FAST)
            await asyncio.wait_for(port.flush(), 30)
            await port.aclose()
            events = await stored(client, "outage")
            assert "".join(e.content for e in events if isinstance(e, Text)) == "before " + "".join(
                f"{i} " for i in range(20)
            )
            assert len({e.event_id for e in events}) == len(events) == 21
    finally:
        server.stop()


async def test_a_full_queue_makes_emit_wait(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server(data, env=FAST)
    try:
        async with ConvographClient(server.url, timeout=15) as client:
            port = RemotePort(
                client, "pressure", queue_size=4, batch_size=2, retry_initial=0.05, retry_max=0.2
            )
            await port.emit([Text(run_id="r", id="t", content="x")])
            await port.flush()
            server.stop()
            emitting = asyncio.ensure_future(
                port.emit([Text(run_id="r", id="t", content=str(i)) for i in range(12)])
            )
            await asyncio.sleep(0.5)
            assert not emitting.done()  # at most queue_size + one batch in flight
            server = start_server(data, port=server.port, env=FAST)
            await asyncio.wait_for(emitting, 30)
            await port.flush()
            await port.aclose()
            assert len(await stored(client, "pressure")) == 13
    finally:
        server.stop()


async def test_a_refused_event_fails_the_port_with_the_servers_reason(client: ConvographClient) -> None:
    port = RemotePort(client, "refused")
    await port.emit([Text(run_id="bad\u0000id", id="t", content="x")])
    with pytest.raises(RemotePortError, match="the server refused events for 'refused': 422"):
        await port.flush()
    with pytest.raises(RemotePortError):
        await port.emit([Text(run_id="r", id="t", content="x")])
    await port.aclose()


async def test_an_edit_through_the_server_changes_what_the_model_sees_next(client: ConvographClient) -> None:
    provider = ScriptedProvider([ScriptedTurn(text="Paris."), ScriptedTurn(text="Rome.")])
    agent = Agent(provider, model="m")
    async with RemotePort(client, "remote-edit") as port:
        await agent.run(port, "Capital of France?")
        path = (await client._http.get("/v1/conversations/remote-edit/path")).json()["path"]
        first_user = path[0]["id"]
        edited = await client._http.post(
            f"/v1/conversations/remote-edit/messages/{first_user}/edit", json={"content": "Capital of Italy?"}
        )
        assert edited.status_code == 200, edited.text
        await agent.run(port)
    assert provider.requests[1].messages == [{"role": "user", "content": "Capital of Italy?"}]


async def test_a_subagent_streams_into_the_same_conversation(client: ConvographClient) -> None:
    child = Agent(
        ScriptedProvider([ScriptedTurn(text="found it", usage=(30, 3))]), model="m", name="researcher"
    )

    @tool
    async def research(task: str, ctx: ToolContext) -> str:
        """Research."""
        return (await ctx.spawn(child, task)).text

    provider = ScriptedProvider(
        [calling(ScriptedCall("research", {"task": "look"})), ScriptedTurn(text="ok")]
    )
    async with RemotePort(client, "remote-sub") as port:
        await Agent(provider, model="m", tools=[research], name="lead").run(port, "go")
    ends = {e.agent_id: e for e in await stored(client, "remote-sub") if isinstance(e, HarnessEnd)}
    assert set(ends) == {"researcher", "lead"}
    thread = await client.projection("remote-sub", "thread")
    assert "found it" in json.dumps(thread)


def test_convograph_run_into_a_server_prints_the_viewer_url(server: ServerProcess) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "convograph",
            "run",
            "hi",
            "--model",
            "scripted:echo",
            "--server",
            server.url,
            "--conversation",
            "cli-remote",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"{server.url}/c/cli-remote" in done.stdout
    body = httpx.get(f"{server.url}/v1/conversations/cli-remote/events", timeout=10).text
    types = [parse_event(line).type for line in body.splitlines() if line.strip()]
    assert types[0] == "user"
    assert types[-1] == "harness_end"


def test_convograph_run_against_an_unreachable_server_fails_clearly(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "convograph",
            "run",
            "hi",
            "--model",
            "scripted:echo",
            "--server",
            "http://127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "cannot reach the convograph server at http://127.0.0.1:9" in done.stderr


async def test_a_repl_run_streams_into_the_server(client: ConvographClient) -> None:
    provider = ScriptedProvider(
        [
            ScriptedTurn(text="```python\nfor i in range(3):\n    print('line', i)\n```"),
            ScriptedTurn(text="```python\nFINAL('three lines')\n```"),
        ]
    )
    async with RemotePort(client, "remote-repl") as port:
        result = await ReplHarness(provider, "m", limits=SandboxLimits(timeout=10)).run(port, "print lines")
        await port.flush()
    assert result.answer == "three lines"
    thread = await client._http.get("/v1/conversations/remote-repl/thread", params={"repl": "1"})
    assert thread.status_code == 200
    body = json.dumps(thread.json())
    assert "line 2" in body
    assert "three lines" in body


async def test_a_log_port_on_the_servers_database_gets_the_viewers_decision(tmp_path: Path) -> None:
    """No --server: the agent writes to the SQLite file a `convograph serve` also serves; a decision
    posted to that server reaches the agent through the shared log."""
    from convograph.harness import LogPort
    from convograph.store import open_event_log

    data = tmp_path / "data"
    server = start_server(data, env=FAST)
    log = await open_event_log(f"sqlite:///{data / 'events.db'}")
    provider = ScriptedProvider(
        [calling(ScriptedCall("deploy", {"target": "local"})), ScriptedTurn(text="Done.")]
    )
    try:
        async with ConvographClient(server.url) as client, LogPort(log, "shared-db") as port:
            run = Agent(provider, model="m", tools=[deploy]).start(port, "ship")
            relay = await wait_for(client, "shared-db", Relay)
            await client.decide_relay("shared-db", relay.id, approved=True, reason="fine")
            result = await asyncio.wait_for(run.wait(), 30)
            assert (result.reason, result.text) == ("final", "Done.")
    finally:
        await log.close()
        server.stop()
