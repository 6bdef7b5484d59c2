"""Deterministic event-stream generators for benchmarks (Event values, no parsing cost).

- `single_run(n)`: upstream's w1 shape: one run repeating [5 text chunks, tool_call, tool_result].
- `streaming(n)`: streaming-text heavy: an agent run whose provider runs each stream 40 text chunks
  and 10 reasoning chunks, then one usage event, with a tool call every third provider call.
- `subagents(n)`: an agent whose tool calls each spawn a subagent run (its own provider runs
  parented to it), so the stream holds thousands of runs and cross-run edges.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice

from convograph.events import (
    Event,
    HarnessEnd,
    HarnessStart,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    Usage,
    User,
)

__all__ = ["WORKLOADS", "single_run", "streaming", "subagents"]


def _take(n: int, events: Iterator[Event]) -> list[Event]:
    return list(islice(events, n))


def _single_run() -> Iterator[Event]:
    run = "run-0"
    yield HarnessStart(run_id=run, agent_id="agent-0")
    i = 0
    while True:
        for chunk in range(5):
            yield Text(run_id=run, id=f"{run}:text-{i}", content=f"text {i} chunk {chunk}. ")
        yield ToolCall(run_id=run, id=f"{run}:call-{i}", name="exec", input={"cmd": f"echo {i}"})
        yield ToolResult(run_id=run, id=f"{run}:call-{i}", name="exec", output=f"out {i}\n")
        i += 1


def _provider_call(agent: str, provider: str, *, text_chunks: int, reasoning_chunks: int) -> Iterator[Event]:
    for chunk in range(reasoning_chunks):
        yield Reasoning(run_id=provider, parent_id=agent, id=f"{provider}:r", content=f"thinking {chunk} ")
    for chunk in range(text_chunks):
        yield Text(run_id=provider, parent_id=agent, id=f"{provider}:t", content=f"token{chunk} ")
    yield Usage(run_id=provider, parent_id=agent, input_tokens=100, output_tokens=text_chunks)


def _streaming() -> Iterator[Event]:
    agent = "agent"
    yield User(run_id="user", content="go")
    yield HarnessStart(run_id=agent, parent_id="user:user", agent_id="main")
    i = 0
    while True:
        yield from _provider_call(agent, f"p{i}", text_chunks=40, reasoning_chunks=10)
        if i % 3 == 2:
            call = f"{agent}/call-{i}"
            yield ToolCall(run_id=agent, id=call, name="read", input={"i": i})
            yield ToolResult(run_id=agent, id=call, name="read", output={"context": "ok"})
        i += 1


def _subagents() -> Iterator[Event]:
    agent = "agent"
    yield User(run_id="user", content="go")
    yield HarnessStart(run_id=agent, parent_id="user:user", agent_id="main")
    i = 0
    while True:
        yield from _provider_call(agent, f"p{i}", text_chunks=5, reasoning_chunks=0)
        call = f"{agent}/call-{i}"
        yield ToolCall(run_id=agent, id=call, name="agent", input={"task": i})
        sub = f"sub-{i}"
        yield HarnessStart(run_id=sub, parent_id=call, agent_id=f"a{i}")
        for j in range(2):
            yield from _provider_call(sub, f"{sub}-p{j}", text_chunks=5, reasoning_chunks=2)
        yield HarnessEnd(run_id=sub, parent_id=call, agent_id=f"a{i}")
        yield ToolResult(run_id=agent, id=call, name="agent", output={"context": f"done {i}"})
        i += 1


def single_run(n: int) -> list[Event]:
    return _take(n, _single_run())


def streaming(n: int) -> list[Event]:
    return _take(n, _streaming())


def subagents(n: int) -> list[Event]:
    return _take(n, _subagents())


WORKLOADS: dict[str, Callable[[int], list[Event]]] = {
    "single_run": single_run,
    "streaming": streaming,
    "subagents": subagents,
}
