"""The live demo (`convograph.demo.live`) against a real ``convograph serve``: every scenario runs with
the real harness through the official SDKs against the scripted model server (each request checked
as the API would), and shows what the demo promises; the rolling schedule stays bounded."""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from convograph.demo.live import LiveDemo, Round
from convograph.demo.scenario import SCENARIOS, load_scenario
from tests.support.server import ServerProcess, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(tmp_path_factory.mktemp("demo-live") / "data", "--no-intelligence")
    try:
        yield process
    finally:
        process.stop()


def events_of(server: ServerProcess, cid: str) -> list[dict[str, Any]]:
    text = httpx.get(f"{server.url}/v1/conversations/{cid}/events").text
    return [json.loads(line) for line in text.splitlines()]


def assert_requests_valid(round_: Round) -> None:
    assert round_.model_server is not None
    for recorded in round_.model_server.requests:
        assert recorded.problems == [], (recorded.index, recorded.problems)
        assert recorded.status in (200, 429, 529), (recorded.index, recorded.status)


async def run_round(
    server: ServerProcess, name: str, *, approve: bool = True
) -> tuple[Round, list[dict[str, Any]]]:
    person = httpx.AsyncClient(base_url=server.url)
    decisions: list[asyncio.Task[Any]] = []

    async def decide(url: str) -> None:
        while (await person.post(url, json={"approved": approve})).status_code == 404:
            await asyncio.sleep(0.05)  # the relay is not stored yet: a person sees it only once it is

    def on_relay(cid: str, relay_id: str) -> None:  # a person in the viewer decides
        decisions.append(
            asyncio.get_running_loop().create_task(decide(f"/v1/conversations/{cid}/relays/{relay_id}"))
        )

    demo = LiveDemo(server.url, speed=math.inf, on_relay=on_relay)
    try:
        round_ = await demo.start_round(name, f"live-{name}-{uuid.uuid4().hex[:6]}")
        result = await asyncio.wait_for(round_.answered, 120)
        assert result.reason == "final", result
        assert_requests_valid(round_)
        return round_, events_of(server, round_.conversation_id)
    finally:
        await demo.close()
        await asyncio.gather(*decisions, return_exceptions=True)
        await person.aclose()


async def test_the_research_scenario(server: ServerProcess) -> None:
    round_, events = await run_round(server, "research")
    starts = {e["agentId"] for e in events if e["type"] == "harness_start"}
    assert starts == {"lead", "researcher-qdrant", "researcher-milvus", "code-reader"}
    types = {e["type"] for e in events}
    assert {"reasoning", "usage", "error", "tool_progress", "relay", "relay_resolved"} <= types
    assert any(e["type"] == "reasoning" and e.get("signature") for e in events)
    assert any("overloaded" in e.get("message", "") for e in events if e["type"] == "error")
    calls = [e for e in events if e["type"] == "tool_call"]
    first_result = next(i for i, e in enumerate(events) if e["type"] == "tool_result")
    assert sum(e["type"] == "tool_call" for e in events[:first_result]) >= 3  # parallel calls
    assert any(c["name"] == "write_file" for c in calls)  # approved: the call ran
    final = "".join(e["content"] for e in events if e["type"] == "text")
    assert "Saved the report" in final
    assert round_.model_server is not None
    assert len(round_.model_server.unused) == 1  # the denied branch's reply


async def test_the_research_scenario_denied(server: ServerProcess) -> None:
    _, events = await run_round(server, "research", approve=False)
    assert not any(e["type"] == "tool_call" and e["name"] == "write_file" for e in events)
    assert "won't write the file" in "".join(e["content"] for e in events if e["type"] == "text")


async def test_the_rlm_scenario(server: ServerProcess) -> None:
    _, events = await run_round(server, "rlm")
    inputs = [e for e in events if e["type"] == "repl_input"]
    outputs = [e for e in events if e["type"] == "repl_output"]
    assert len(inputs) == len(outputs) == 5
    assert "KeyError" in (outputs[3].get("error") or "")
    assert outputs[4]["done"] is True
    child = [e for e in events if e.get("parentId") == inputs[2]["id"]]  # the llm_query call
    assert any(e["type"] == "usage" for e in child)
    end = next(e for e in events if e["type"] == "harness_end")
    assert end["reason"] == "final"
    answer = [e for e in events if e["type"] == "text"][-1]["content"]
    assert "of the 1,200 tickets ask for a refund" in answer
    assert "resolved within 24 hours" in answer


async def test_the_retry_policies_scenario(server: ServerProcess) -> None:
    _, events = await run_round(server, "retry-policies")
    decisions = [(e["tool"], e["approved"], e.get("reason")) for e in events if e["type"] == "relay_resolved"]
    assert decisions == [
        ("read_file", True, None),
        ("read_file", True, None),
        ("exec", False, "not on my laptop"),
    ]
    assert any("rate limited" in e.get("message", "") for e in events if e["type"] == "error")
    assert {e["agentId"] for e in events if e["type"] == "harness_start"} == {"agent-main", "agent-research"}
    assert any(e["type"] == "tool_progress" for e in events)


def test_every_scenario_file_loads() -> None:
    for name in SCENARIOS:
        scenario = load_scenario(name)
        assert scenario.model.replies
        assert scenario.model.default is not None  # a message typed later still gets an answer


async def test_the_rolling_schedule_keeps_the_newest_rounds(server: ServerProcess, tmp_path: Path) -> None:
    started: list[str] = []
    demo = LiveDemo(
        server.url, speed=20, interval=2, keep=2, on_round=lambda r: started.append(r.conversation_id)
    )
    rolling = asyncio.create_task(demo.rolling(("retry-policies",)))
    try:
        async with asyncio.timeout(120):
            while len(started) < 5:
                await asyncio.sleep(0.05)
    finally:
        rolling.cancel()
        await asyncio.gather(rolling, return_exceptions=True)
        kept = [r.conversation_id for r in demo.rounds if r.rolling]
        await demo.close()
    assert len(kept) <= 2
    assert kept == started[-len(kept) :]
    listed = {c["id"] for c in httpx.get(f"{server.url}/v1/conversations").json()["conversations"]}
    assert not set(started[:2]) & listed  # the oldest were deleted


@pytest.mark.parametrize("after", [0, 1, 2, 3, 5, 8])
async def test_a_drop_cancelled_half_way_leaves_nothing_running_after_close(
    server: ServerProcess, after: int
) -> None:
    """The rolling schedule is stopped by cancelling it, at any await of a round's drop (CI once
    hung in teardown on a half-closed round): `close` then ends every task the demo started."""
    before = asyncio.all_tasks()
    demo = LiveDemo(server.url, speed=20)
    round_ = await demo.start_round("retry-policies", f"drop-{after}-{uuid.uuid4().hex[:6]}")
    dropping = asyncio.create_task(demo.drop(round_))
    for _ in range(after):
        await asyncio.sleep(0)
    dropping.cancel()
    await asyncio.gather(dropping, return_exceptions=True)
    async with asyncio.timeout(60):
        await demo.close()
    for _ in range(20):  # callbacks of closed connections run on the next loop turns
        await asyncio.sleep(0.01)
    left = {t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()}
    assert left == set(), [t.get_name() for t in left]


async def test_a_real_model_runs_the_same_agents_and_tools(server: ServerProcess) -> None:
    """``demo --model openai:MODEL --base-url URL``: every agent on that model (here an
    OpenAI-compatible server at the URL), offered the scenario's tools, without the script's
    provider options (Anthropic ``thinking`` would be refused by another API)."""
    from convograph.demo.live import ModelChoice
    from convograph.testing import ModelServer, Reply, Say

    async with ModelServer([], check_requests=True) as model_server:
        model_server.default = Reply(content=[Say(text="A real model's answer.")])
        choice = ModelChoice("openai:gpt-test", base_url=model_server.openai_base_url)
        demo = LiveDemo(server.url, speed=math.inf, model=choice)
        try:
            round_ = await demo.start_round("research", f"live-real-{uuid.uuid4().hex[:6]}")
            result = await asyncio.wait_for(round_.answered, 60)
        finally:
            await demo.close()
    assert (result.reason, result.text) == ("final", "A real model's answer.")
    request = model_server.requests_to("chat")[0]
    assert request.problems == []
    assert request.body["model"] == "gpt-test"
    assert "thinking" not in request.body
    assert sorted(t["function"]["name"] for t in request.body["tools"]) == [
        "researcher",
        "web_search",
        "write_file",
    ]
