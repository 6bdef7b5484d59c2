"""`convograph.demo`: the bundled scripts, the player against the real app, and ``convograph demo``."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from convograph.demo import DEMO_CONVERSATIONS, AwaitRelay, Step, play_script
from convograph.demo.conversations import research_script, retry_policies_script, rlm_script
from convograph.events import parse_event
from convograph.graph import create_graph, reduce_events
from convograph.jsonable import to_jsonable
from convograph.projections import project_thread
from convograph.server import create_app
from convograph.server.config import ServerConfig


def all_steps(steps: list[Step | AwaitRelay]) -> list[Step]:
    out: list[Step] = []
    for step in steps:
        if isinstance(step, Step):
            out.append(step)
        else:
            out += all_steps(step.approved) + all_steps(step.denied)
    return out


@pytest.mark.parametrize("factory", DEMO_CONVERSATIONS)
def test_every_scripted_event_is_valid_with_a_unique_event_id(factory: Any) -> None:
    script = factory()
    steps = all_steps(script.steps)
    for step in steps:
        parse_event(step.event)
        assert step.delay >= 0
    ids = [step.event["eventId"] for step in steps]
    assert len(ids) == len(set(ids))


def depth(views: list[dict[str, Any]]) -> int:
    return max((1 + max((depth(b) for b in v["branches"]), default=0) for v in views), default=0)


def test_research_script_has_what_the_demo_promises() -> None:
    script = research_script()
    events = script.events()
    types = [e["type"] for e in events]
    # Ends on a pending relay: no decision, the lead run still open.
    assert types[-1] == "relay"
    assert "relay_resolved" not in types
    assert {"reasoning", "usage", "error", "tool_progress"} <= set(types)
    # Parallel tools: three calls issued before any result.
    first_result = types.index("tool_result")
    assert types[:first_result].count("tool_call") >= 3
    # Nested subagents two levels deep (a branch inside a branch) in the server's projection.
    thread = to_jsonable(project_thread(reduce_events(create_graph(), events)))
    assert depth(thread) >= 3


@pytest.mark.parametrize(
    ("approved", "last_text"), [(True, "Saved the report"), (False, "won't write the file")]
)
def test_relay_decision_selects_the_continuation(approved: bool, last_text: str) -> None:
    events = research_script().events(decisions={"relay-write-report": approved})
    resolved = [e for e in events if e["type"] == "relay_resolved"]
    assert resolved == [
        {
            "type": "relay_resolved",
            "relayId": "relay-write-report",
            "approved": approved,
            "eventId": "relay-decision:relay-write-report",
        }
    ]
    assert events[-1]["type"] == "harness_end"
    text = "".join(e["content"] for e in events if e["type"] == "text" and e["id"] == "lead-text-3")
    assert last_text in text
    calls = [e for e in events if e["type"] == "tool_call" and e["name"] == "write_file"]
    assert len(calls) == (1 if approved else 0)  # a denied call emits no tool_call (upstream §6.4)


def test_rlm_script_has_repl_turns_a_child_run_and_a_failed_turn() -> None:
    events = rlm_script().events()
    inputs = [e for e in events if e["type"] == "repl_input"]
    outputs = {e["id"]: e for e in events if e["type"] == "repl_output"}
    assert len(inputs) == 5
    assert set(outputs) == {e["id"] for e in inputs}
    assert any(outputs[k].get("error") for k in outputs)
    assert outputs["repl-5"]["done"] is True
    child_start = next(e for e in events if e["type"] == "harness_start" and e["runId"] == "run-rlm-child-1")
    assert child_start["parentId"] == "repl-3"
    assert any(e["type"] == "repl_progress" for e in events)


def test_text_streams_at_a_human_pace() -> None:
    """~30-60 tokens/s: the delay of each text delta matches its length at 45 tokens/s."""
    steps = [s for s in all_steps(research_script().steps) if s.event["type"] in ("text", "reasoning")]
    chars = sum(len(s.event["content"]) for s in steps)
    seconds = sum(s.delay for s in steps)
    tokens_per_second = chars / 4 / seconds
    assert 30 <= tokens_per_second <= 60


def test_retry_policies_script_replays_the_bundled_example() -> None:
    from convograph.examples import multi_agent_events

    ours = [{k: v for k, v in e.items() if k != "eventId"} for e in retry_policies_script().events()]
    theirs = [{k: v for k, v in e.items() if k not in ("eventId", "timestamp")} for e in multi_agent_events()]
    assert ours == theirs


# --- the player against the real application ---------------------------------------------------------


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[AsyncTestClient[Any]]:
    config = ServerConfig(data_dir=tmp_path, database_url="memory://", intelligence=False)
    async with AsyncTestClient(create_app(config)) as test_client:
        yield test_client


async def test_player_posts_script_and_stops_at_pending_relay(client: AsyncTestClient[Any]) -> None:
    script = research_script()
    result = await play_script(client, script, speed=None, wait_for_relays=False)
    expected = script.events()
    assert result.pending_relay == "relay-write-report"
    assert result.posted == len(expected)
    info = (await client.get("/v1/conversations/demo-research")).json()
    assert info["lastSeq"] == len(expected)
    assert info["pendingRelays"] == ["relay-write-report"]
    # Played again: nothing new, everything a duplicate.
    again = await play_script(client, script, speed=None, wait_for_relays=False)
    assert (again.posted, again.duplicates) == (0, len(expected))


async def test_player_continues_after_a_decision_in_the_viewer(client: AsyncTestClient[Any]) -> None:
    script = research_script()
    task = asyncio.create_task(play_script(client, script, speed=None, relay_poll=0.02))
    for _ in range(500):
        if (await client.get("/v1/conversations")).json()["conversations"]:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    assert not task.done()  # waiting for a person
    decided = await client.post(
        "/v1/conversations/demo-research/relays/relay-write-report", json={"approved": False}
    )
    assert decided.status_code == 200
    result = await asyncio.wait_for(task, timeout=10)
    assert result.pending_relay is None
    replay = (await client.get("/v1/conversations/demo-research/events")).text.splitlines()
    assert len(replay) == len(script.events(decisions={"relay-write-report": False}))
    thread = (await client.get("/v1/conversations/demo-research/thread")).json()
    assert "won't write the file" in thread[-1]["content"]["text"]


async def test_player_paces_events(client: AsyncTestClient[Any]) -> None:
    script = rlm_script()
    total_delay = sum(s.delay for s in all_steps(script.steps))
    started = time.monotonic()
    seen: list[str] = []
    result = await play_script(
        client, script, speed=total_delay / 0.5, on_event=lambda cid, e: seen.append(e["type"])
    )
    assert time.monotonic() - started >= 0.45
    assert result.posted == len(script.events()) == len(seen)


# --- the command -------------------------------------------------------------------------------------


def test_demo_command_serves_plays_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convograph",
            "demo",
            "--port",
            "0",
            "--fast",
            "--no-browser",
            "--data-dir",
            str(tmp_path / "d"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        assert process.stdout is not None
        url = None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and url is None:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = re.search(r"Open (http://127\.0\.0\.1:\d+)/c/demo-research", line)
            if match:
                url = match.group(1)
        assert url is not None, "".join(lines)
        assert _eventually(lambda: len(httpx.get(f"{url}/v1/conversations").json()["conversations"]) == 3)
        ids = {c["id"] for c in httpx.get(f"{url}/v1/conversations").json()["conversations"]}
        assert ids == {"demo-research", "demo-rlm", "demo-retry-policies"}
        page = httpx.get(f"{url}/c/demo-research")
        assert page.status_code == 200
        assert "/static/js/app.js" in page.text
        # The research agent (the live harness) waits for a person; deciding lets it go on.
        relay_id = _pending_relay(url, "demo-research")
        decided = httpx.post(
            f"{url}/v1/conversations/demo-research/relays/{relay_id}", json={"approved": True}
        )
        assert decided.status_code == 200
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            lines.append(line)
            if "Played 3 conversations" in line or not line:
                break
        assert "Played 3 conversations live with the agent harness" in "".join(lines)
        runs = httpx.get(f"{url}/v1/conversations/demo-research/runs").json()
        assert [(r["agentId"], r["reason"]) for r in runs["runs"]] == [("lead", "final")]
        assert [a["name"] for a in runs["agents"]] == ["lead"]  # it keeps serving the conversation
        # The graph explorer holds the demo's sessions (hook envelopes of the live events).
        query = {
            "query": "MATCH (s:Session {workspace: $workspace}) RETURN count(s) AS n",
            "workspace": "demo",
        }
        assert _eventually(lambda: httpx.post(f"{url}/cypher", json=query).json()["results"][0]["n"] >= 7)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/openapi.json", timeout=1)


def _eventually(check: Any, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except (httpx.HTTPError, KeyError, IndexError):
            pass
        time.sleep(0.2)
    return False


def _pending_relay(url: str, cid: str) -> str:
    """The id of the conversation's undecided relay, once there is one."""
    found: list[str] = []

    def pending() -> bool:
        relays = httpx.get(f"{url}/v1/conversations/{cid}/relays").json()["relays"]
        found[:] = [r["id"] for r in relays if r["decision"] is None]
        return bool(found)

    assert _eventually(pending), f"{cid} never asked for permission"
    return found[0]


def test_demo_refuses_a_busy_port(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "convograph", "demo", "--port", str(port), "--no-browser", "--fast"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
            check=False,
        )
    assert done.returncode == 2
    assert f"port {port}" in done.stderr
    assert "--port 0" in done.stderr


def test_hook_envelopes_mirror_the_session_tree() -> None:
    from convograph.demo.intelligence import hook_envelopes
    from convograph.intelligence.envelope import parse_envelope

    envelopes = hook_envelopes(research_script().events(decisions={"relay-write-report": False}))
    for envelope in envelopes:
        parse_envelope(envelope)
    names = [e["event"] for e in envelopes]
    assert names.count("session:start") == 1
    assert names.count("session:fork") == 3  # two researchers and the code reader
    forks = {e["data"]["session_id"]: e["data"]["parent"] for e in envelopes if e["event"] == "session:fork"}
    assert forks["demo-run-code-reader"] == "demo-run-researcher-qdrant"
    assert (
        names.count("tool:pre") == names.count("tool:post") + names.count("tool:error") - 1
    )  # denied: no pre
    assert "llm:error" in names
    keys = [e["idempotency_key"] for e in envelopes]
    assert len(keys) == len(set(keys))


async def test_player_posts_envelopes_before_conversations(tmp_path: Path) -> None:
    from convograph.demo.intelligence import hook_envelopes
    from convograph.demo.player import post_envelopes

    config = ServerConfig(data_dir=tmp_path, database_url="memory://")
    async with AsyncTestClient(create_app(config)) as client:
        envelopes = hook_envelopes(rlm_script().events())
        assert await post_envelopes(client, envelopes) == len(envelopes)
        assert await post_envelopes(client, envelopes) == 0  # replayed: duplicates


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "65535"),  # was an OverflowError traceback from socket.bind
        (["--url", "ftp://x"], "--url must be an http:// or https:// URL"),  # was polled for 60 s
    ],
)
def test_demo_refuses_bad_arguments_at_once(args: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from convograph.cli import app

    result = CliRunner().invoke(app, ["demo", "--no-browser", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert message in result.output


def _start_demo(tmp_path: Path, *args: str, ignore_sigint: bool = False) -> tuple[subprocess.Popen[str], str]:
    """A `convograph demo` subprocess and its server URL, read from its "Open ..." line."""

    def ignore() -> None:  # what a shell does to a background job
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    process = subprocess.Popen(
        [sys.executable, "-m", "convograph", "demo", "--port", "0", "--no-browser", *args,
         "--data-dir", str(tmp_path / "d")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=ignore if ignore_sigint else None,
    )  # fmt: skip
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        match = re.search(r"Open (http://127\.0\.0\.1:\d+)/c/", line)
        if match:
            return process, match.group(1)
    process.kill()
    raise AssertionError("".join(lines))


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_ctrl_c_stops_a_demo_started_with_sigint_ignored(tmp_path: Path) -> None:
    """A background job (`convograph demo &`, then `fg`) starts with SIGINT ignored; Ctrl-C did nothing."""
    process, url = _start_demo(tmp_path, "--fast", ignore_sigint=True)
    try:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert not _answers(url)


def test_a_killed_demo_takes_its_server_with_it(tmp_path: Path) -> None:
    process, url = _start_demo(tmp_path, "--fast")
    assert _answers(url)
    process.kill()
    process.wait(10)
    deadline = time.monotonic() + 30
    while _answers(url) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _answers(url), "the demo's server outlived the killed demo"


def test_fast_into_a_running_server_ends_and_names_the_pending_relay(tmp_path: Path) -> None:
    """`demo --url ... --fast` waited forever at the research conversation's relay, silently."""
    from tests.support.server import start_server

    server = start_server(tmp_path / "server", "--no-intelligence")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "convograph", "demo", "--url", server.url, "--fast", "--no-browser"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "200"},
        )
    finally:
        server.stop()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo-research stops at permission request relay-write-report" in result.stdout
    assert "Played 3 conversations" in result.stdout
    assert "Still serving" not in result.stdout
