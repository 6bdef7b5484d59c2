"""Serving a conversation (`convograph.harness.serving`) in process: `LogPort` over an in-memory
log; messages, edits and regenerates written into the log by someone else start the next turn,
exactly one of two serving agents answers each, and a task run is never answered twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from convograph.events import Edit, Event, HarnessEnd, HarnessStart, Regenerate, Text, User
from convograph.harness import Agent, LogPort, ModelRequest, ReplHarness
from convograph.hypergraph.turns import pending_turn
from convograph.testing import MemoryEventLog
from convograph.testing.providers import ScriptedProvider, ScriptedTurn

CID = "served"


def echo(request: ModelRequest) -> ScriptedTurn:
    last = request.messages[-1]["content"]
    return ScriptedTurn(text=f"echo: {last}", delay=0.001)


def echo_provider(n: int = 50) -> ScriptedProvider:
    return ScriptedProvider([echo] * n)


@pytest.fixture
def log() -> MemoryEventLog:
    return MemoryEventLog()


async def stored(log: MemoryEventLog) -> list[Event]:
    return [item.event for item in await log.read(CID)]


async def until(check: Callable[[], Any], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.01)


def ends(events: list[Event]) -> list[HarnessEnd]:
    return [e for e in events if isinstance(e, HarnessEnd)]


async def answered(log: MemoryEventLog, count: int) -> bool:
    events = await stored(log)
    return len(ends(events)) >= count and pending_turn_of(events) is None


def pending_turn_of(events: list[Event]) -> Any:
    from convograph.harness import ConversationState

    state = ConversationState()
    for event in events:
        state.apply(event)
    return pending_turn(state.projector.conversation)


@pytest.fixture
async def served(log: MemoryEventLog) -> AsyncIterator[tuple[ScriptedProvider, asyncio.Task[None]]]:
    provider = echo_provider()
    port = LogPort(log, CID)
    task = asyncio.create_task(Agent(provider, model="m", name="helper").serve(port))
    try:
        yield provider, task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await port.aclose()


async def test_a_message_written_by_anyone_starts_the_next_turn(
    log: MemoryEventLog, served: tuple[ScriptedProvider, asyncio.Task[None]]
) -> None:
    provider, _ = served
    await log.append(CID, [User(run_id="u1", content="hello")])
    await until(lambda: answered(log, 1))
    events = await stored(log)
    start = next(e for e in events if isinstance(e, HarnessStart))
    assert start.parent_id == "u1:user"
    assert start.event_id == "turn:u1:user"  # the claim
    assert start.agent_id == "helper"
    assert "".join(e.content for e in events if isinstance(e, Text)) == "echo: hello"
    assert provider.requests[0].messages == [{"role": "user", "content": "hello"}]


async def test_edit_and_regenerate_start_a_turn_from_the_new_active_path(
    log: MemoryEventLog, served: tuple[ScriptedProvider, asyncio.Task[None]]
) -> None:
    provider, _ = served
    await log.append(CID, [User(run_id="u1", content="first question")])
    await until(lambda: answered(log, 1))
    await log.append(
        CID, [Edit(message_id="msg:1", content="edited question", run_id="e1", event_id="cmd-1")]
    )
    await until(lambda: answered(log, 2))
    assert provider.requests[-1].messages == [{"role": "user", "content": "edited question"}]
    await log.append(CID, [Regenerate(message_id="msg:4", event_id="cmd-2")])  # the edited branch's answer
    await until(lambda: answered(log, 3))
    assert provider.requests[-1].messages == [{"role": "user", "content": "edited question"}]
    starts = [e for e in await stored(log) if isinstance(e, HarnessStart)]
    assert [s.event_id for s in starts] == ["turn:u1:user", "turn:e1:user", "turn:msg:5"]
    assert len(provider.requests) == 3


async def test_a_reply_awaited_before_the_agent_attached_is_answered(log: MemoryEventLog) -> None:
    await log.append(CID, [User(run_id="u0", content="anyone there?")])
    provider = echo_provider()
    async with LogPort(log, CID) as port:
        task = asyncio.create_task(Agent(provider, model="m").serve(port))
        try:
            await until(lambda: answered(log, 1))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert len(provider.requests) == 1


async def test_two_serving_agents_answer_each_turn_exactly_once(log: MemoryEventLog) -> None:
    providers = [echo_provider(), echo_provider()]
    ports = [LogPort(log, CID), LogPort(log, CID)]
    outcomes: list[str] = []

    def on_run(turn: Any, handle: Any) -> None:
        handle.add_done_callback(lambda: outcomes.append(handle._task.result().reason))

    tasks = [
        asyncio.create_task(Agent(p, model="m", name=f"agent-{n}").serve(port, on_run=on_run))
        for n, (p, port) in enumerate(zip(providers, ports, strict=True))
    ]
    try:
        for n in range(4):
            await log.append(CID, [User(run_id=f"u{n}", content=f"question {n}")])
            await until(lambda n=n: answered(log, n + 1))  # type: ignore[misc]
        await asyncio.sleep(0.1)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for port in ports:
            await port.aclose()
    events = await stored(log)
    starts = [e for e in events if isinstance(e, HarnessStart)]
    assert [s.event_id for s in starts] == [f"turn:u{n}:user" for n in range(4)]
    assert len(ends(events)) == 4
    assert sum(len(p.requests) for p in providers) == 4  # nobody answered twice
    # Both agents tried (they race); every run that lost its claim ended without a trace.
    assert outcomes.count("final") == 4
    assert set(outcomes) <= {"final", "claimed"}


async def test_a_task_run_is_not_answered_again_by_a_serving_agent(
    log: MemoryEventLog, served: tuple[ScriptedProvider, asyncio.Task[None]]
) -> None:
    served_provider, _ = served
    other = echo_provider()
    async with LogPort(log, CID) as port:
        result = await Agent(other, model="m", name="producer").run(port, "do it")
    assert result.reason == "final"
    await asyncio.sleep(0.2)
    events = await stored(log)
    assert len([e for e in events if isinstance(e, HarnessStart)]) == 1
    assert served_provider.requests == []


async def test_a_new_request_supersedes_the_running_turn(log: MemoryEventLog) -> None:
    slow = ScriptedProvider([ScriptedTurn(text="thinking", hang=True), echo])
    async with LogPort(log, CID) as port:
        task = asyncio.create_task(Agent(slow, model="m").serve(port))
        try:
            await log.append(CID, [User(run_id="u1", content="a long one")])
            await until(lambda: _has(log, Text))
            await log.append(CID, [Edit(message_id="msg:1", content="short one", run_id="e1", event_id="c1")])
            await until(lambda: answered(log, 2))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    reasons = [e.reason for e in ends(await stored(log))]
    assert reasons == ["cancelled", "final"]
    assert slow.requests[-1].messages == [{"role": "user", "content": "short one"}]


async def _has(log: MemoryEventLog, kind: type[Any]) -> bool:
    return any(isinstance(e, kind) for e in await stored(log))


async def test_stopping_serve_cancels_the_running_turn_with_its_end(log: MemoryEventLog) -> None:
    hanging = ScriptedProvider([ScriptedTurn(text="working", hang=True)])
    async with LogPort(log, CID) as port:
        task = asyncio.create_task(Agent(hanging, model="m").serve(port))
        await log.append(CID, [User(run_id="u1", content="go")])
        await until(lambda: _has(log, Text))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [e.reason for e in ends(await stored(log))] == ["cancelled"]


async def test_the_repl_harness_serves_too(log: MemoryEventLog) -> None:
    code = ScriptedTurn(text='```python\nFINAL("forty-two")\n```')
    provider = ScriptedProvider([code])
    async with LogPort(log, CID) as port:
        task = asyncio.create_task(ReplHarness(provider, "m", name="rlm").serve(port))
        try:
            await log.append(CID, [User(run_id="u1", content="the answer?")])
            await until(lambda: answered(log, 1))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    events = await stored(log)
    assert [e.reason for e in ends(events)] == ["final"]
    assert provider.requests[0].messages == [{"role": "user", "content": "the answer?"}]
