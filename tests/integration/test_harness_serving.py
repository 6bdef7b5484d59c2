"""Steering a live agent over HTTP: a real ``convograph serve`` subprocess, agents serving a
conversation through `RemotePort` on the OpenAI SDK against the scripted model server. A message
posted to ``POST .../runs``, an edit and a regenerate through the branch endpoints each start the
next turn from the active path (the model server's recorded request holds the edited history);
with two agents attached exactly one answers each turn; a cancel over HTTP ends the run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from tests.support.server import ServerProcess, start_server

from convograph.client import ApiError, ConvographClient
from convograph.harness import Agent
from convograph.harness.providers import OpenAIChatProvider
from convograph.harness.remote import RemotePort
from convograph.harness.retry import RetryPolicy
from convograph.testing import ModelServer, Reply, Say

FAST = RetryPolicy(base_delay=0.01, max_delay=0.05)
CID = "served-http"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(tmp_path_factory.mktemp("serving") / "data", "--no-intelligence")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[ConvographClient]:
    async with ConvographClient(server.url) as client:
        yield client


async def until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    async with asyncio.timeout(timeout):
        while not (found := await check()):
            await asyncio.sleep(0.05)
        return found


class Served:
    """Agents serving one conversation through their own `RemotePort`s, each with its own model server."""

    def __init__(self, url: str, cid: str) -> None:
        self.url, self.cid = url, cid
        self.models: list[ModelServer] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.ports: list[RemotePort] = []

    async def add(self, name: str, replies: list[Reply], *, default: str | None = None) -> ModelServer:
        model = ModelServer(replies)
        if default is not None:
            model.default = Reply(content=[Say(text=default)])
        await model.start()
        provider = OpenAIChatProvider(base_url=model.openai_base_url, api_key="sk-test", retry=FAST)
        port = RemotePort.connect(self.url, self.cid)
        agent = Agent(provider, model="scripted", name=name)
        self.models.append(model)
        self.ports.append(port)
        self.tasks.append(asyncio.create_task(agent.serve(port)))
        return model

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for port in self.ports:
            await port.aclose()
        for model in self.models:
            await model.aclose()


@pytest.fixture
async def served(server: ServerProcess, request: pytest.FixtureRequest) -> AsyncIterator[Served]:
    group = Served(server.url, f"{CID}-{request.node.name[:40].replace('_', '-')}")
    try:
        yield group
    finally:
        await group.close()


async def attached(client: ConvographClient, cid: str, count: int) -> bool:
    return len((await client.agents(cid))["agents"]) >= count


async def ended(client: ConvographClient, cid: str, count: int) -> list[dict[str, Any]] | None:
    try:
        runs = (await client.runs(cid))["runs"]
    except ApiError:
        return None
    done = [run for run in runs if run["reason"] is not None]
    return runs if len(done) >= count else None


def texts(model: ModelServer) -> list[list[Any]]:
    return [[m.get("content") for m in r.body["messages"]] for r in model.requests_to("chat")]


async def test_a_message_posted_over_http_starts_the_agents_turn(
    client: ConvographClient, served: Served
) -> None:
    model = await served.add("helper", [Reply(content=[Say(text="Hello! How can I help?")])])
    await until(lambda: attached(client, served.cid, 1))
    agents = (await client.agents(served.cid))["agents"]
    assert [(a["name"], a["serving"], a["connected"]) for a in agents] == [("helper", True, True)]
    started = await client.start_run(served.cid, "hi there")
    assert started["pending"]["kind"] == "message"
    assert [a["name"] for a in started["agents"]] == ["helper"]
    runs = await until(lambda: ended(client, served.cid, 1))
    assert [(r["agentId"], r["reason"]) for r in runs] == [("helper", "final")]
    assert texts(model) == [["hi there"]]
    thread = await client.projection(served.cid, "thread")
    assert thread[-1]["content"]["text"] == "Hello! How can I help?"
    # Answered: nothing awaits a reply any more.
    with pytest.raises(ApiError) as refused:
        await client.start_run(served.cid)
    assert refused.value.code == "nothing_to_answer"


async def test_edit_and_regenerate_start_a_turn_from_the_edited_path(
    server: ServerProcess, client: ConvographClient, served: Served
) -> None:
    replies = [Reply(content=[Say(text=f"answer {n}")]) for n in range(3)]
    model = await served.add("helper", replies)
    await until(lambda: attached(client, served.cid, 1))
    await client.start_run(served.cid, "What is 2 + 2?")
    await until(lambda: ended(client, served.cid, 1))
    async with httpx.AsyncClient(base_url=server.url) as http:
        path = (await http.get(f"/v1/conversations/{served.cid}/path")).json()["path"]
        user_id = path[0]["id"]
        edit = await http.post(
            f"/v1/conversations/{served.cid}/messages/{user_id}/edit", json={"content": "What is 3 + 3?"}
        )
        assert edit.status_code == 200, edit.text
        await until(lambda: ended(client, served.cid, 2))
        path = (await http.get(f"/v1/conversations/{served.cid}/path")).json()["path"]
        assert [m["role"] for m in path] == ["user", "assistant"]
        regenerate = await http.post(f"/v1/conversations/{served.cid}/messages/{path[1]['id']}/regenerate")
        assert regenerate.status_code == 200, regenerate.text
        await until(lambda: ended(client, served.cid, 3))
    assert texts(model) == [["What is 2 + 2?"], ["What is 3 + 3?"], ["What is 3 + 3?"]]
    messages = await client.projection(served.cid, "messages", format="openai")
    assert messages == [
        {"role": "user", "content": "What is 3 + 3?"},
        {"role": "assistant", "content": "answer 2"},
    ]


async def test_with_two_agents_attached_exactly_one_answers_each_turn(
    client: ConvographClient, served: Served
) -> None:
    first = await served.add("twin", [], default="from the first")
    second = await served.add("twin", [], default="from the second")
    await until(lambda: attached(client, served.cid, 2))
    for n in range(3):
        await client.start_run(served.cid, f"question {n}")
        await until(lambda n=n: ended(client, served.cid, n + 1))  # type: ignore[misc]
    await asyncio.sleep(0.3)  # a second answer, if any, would have started by now
    runs = (await client.runs(served.cid))["runs"]
    assert len(runs) == 3
    assert len(first.requests) + len(second.requests) == 3
    events = await client.replay(served.cid)
    assert sum(e.type == "harness_start" for e in events) == 3


async def test_a_cancel_over_http_ends_the_run_cancelled(client: ConvographClient, served: Served) -> None:
    slow = Reply(content=[Say(text="Let me think about this for a long while.")], stall_after=2, stall=60)
    await served.add("helper", [slow])
    await until(lambda: attached(client, served.cid, 1))
    await client.start_run(served.cid, "take your time")

    async def running() -> str | None:
        runs = (await client.runs(served.cid))["runs"]
        return runs[0]["runId"] if runs and runs[0]["status"] == "streaming" else None

    run_id = await until(running)
    with pytest.raises(ApiError) as busy:
        await client.start_run(served.cid, "another question")
    assert busy.value.code == "run_in_progress"
    sent = await client.cancel_run(served.cid, run_id, reason="changed my mind")
    assert sent == {"runId": run_id, "delivered": 1, "ended": False}
    runs = await until(lambda: ended(client, served.cid, 1), timeout=15)
    assert runs[0]["reason"] == "cancelled"
    with pytest.raises(ApiError) as again:
        await client.cancel_run(served.cid, run_id)
    assert again.value.code == "run_ended"


async def test_a_convograph_run_is_attached_and_stoppable_from_the_api(
    server: ServerProcess, client: ConvographClient
) -> None:
    """``convograph run --server`` (not serving) is listed while it runs and honours a cancel."""
    import os
    import sys

    cid = "served-plain-run"
    async with ModelServer(
        [Reply(content=[Say(text="Working on it slowly")], stall_after=2, stall=120)]
    ) as model:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "convograph", "run", "a long task", "--name", "worker",
            "--model", "openai:scripted", "--base-url", model.openai_base_url,
            "--server", server.url, "--conversation", cid,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "OPENAI_API_KEY": "sk-test"},
        )  # fmt: skip
        try:
            agents = await until(lambda: _agents(client, cid), timeout=60)
            assert [(a["name"], a["serving"]) for a in agents] == [("worker", False)]

            async def running() -> str | None:
                runs = (await client.runs(cid))["runs"]
                return runs[0]["runId"] if runs and runs[0]["status"] == "streaming" else None

            run_id = await until(running)
            assert (await client.cancel_run(cid, run_id))["delivered"] == 1
            out, _ = await asyncio.wait_for(process.communicate(), 60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert process.returncode == 130, out.decode()
    assert "interrupted: the run was cancelled" in out.decode()
    assert [r["reason"] for r in (await client.runs(cid))["runs"]] == ["cancelled"]


async def _agents(client: ConvographClient, cid: str) -> list[dict[str, Any]] | None:
    agents: list[dict[str, Any]] = (await client.agents(cid))["agents"]
    return agents or None
