"""Event generators for the hypergraph benchmark (lazy: memory stays bounded by the consumer).

- `rlm_stream(turns, progress, runs)`: upstream's perf generator (spec §8.1), event for event the
  same as /work/shared/workloads/w2-hg-<turns>x<progress>x<runs>.ndjson.
- `chat_stream()`: an endless realistic chat session: user turns answered by an agent run whose
  provider calls (their own runs, parented to the agent) stream reasoning and text and report usage;
  tool calls, some behind a permission relay (approved or denied), some spawning a subagent with its
  own provider call, and REPL turns with progress. Every event carries a unique ``eventId``.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from convograph.events import (
    Event,
    HarnessEnd,
    HarnessStart,
    Reasoning,
    Relay,
    ReplInput,
    ReplOutput,
    ReplProgress,
    Text,
    ToolCall,
    ToolResult,
    TotalUsage,
    Usage,
    User,
)

__all__ = ["chat_stream", "rlm_stream"]


def _single(
    run: str, agent: str, turns: int, progress: int, parent_id: str | None, depth: int
) -> Iterator[Event]:
    yield HarnessStart(run_id=run, agent_id=agent, parent_id=parent_id, depth=depth, max_iterations=turns)
    for t in range(turns):
        yield Text(run_id=run, agent_id=agent, id=f"{run}:turn{t}:text", content=f"Reasoning for turn {t}...")
        yield ReplInput(
            run_id=run, agent_id=agent, id=f"{run}:turn{t}", code=f'console.log("turn {t}")', iteration=t + 1
        )
        for p in range(progress):
            yield ReplProgress(
                run_id=run, agent_id=agent, id=f"{run}:turn{t}", chunk=f"output chunk {p}\n", stream="stdout"
            )
        yield ReplOutput(
            run_id=run,
            agent_id=agent,
            id=f"{run}:turn{t}",
            stdout=f"turn {t} done\n",
            done=t == turns - 1,
            iteration=t + 1,
            duration_ms=100,
        )
    yield HarnessEnd(
        run_id=run,
        agent_id=agent,
        reason="final",
        iterations=turns,
        total_usage=TotalUsage(input_tokens=turns * 1000, output_tokens=turns * 500),
    )


def rlm_stream(turns: int, progress: int, runs: int = 1) -> Iterator[Event]:
    """Upstream's generator: ``1 + N(M+3) + 1`` events for one run; a root spawning R runs else."""
    if runs == 1:
        yield from _single("run-0", "rlm-0", turns, progress, None, 0)
        return
    root, agent = "run-root", "rlm-root"
    yield HarnessStart(run_id=root, agent_id=agent, depth=0, max_iterations=runs)
    for r in range(runs):
        yield Text(run_id=root, agent_id=agent, id=f"{root}:spawn-text-{r}", content=f"Spawning agent {r}...")
        call = f"{root}:spawn{r}"
        yield ToolCall(run_id=root, agent_id=agent, id=call, name="spawn_agent", input={"task": f"task-{r}"})
        yield from _single(f"run-{r}", f"rlm-{r}", turns, progress, call, 1)
        yield ToolResult(run_id=root, agent_id=agent, id=call, name="spawn_agent", output={"status": "done"})
    yield HarnessEnd(run_id=root, agent_id=agent, reason="final", iterations=runs)


def _provider(agent: str, run: str, text_chunks: int, reasoning_chunks: int) -> Iterator[Event]:
    for c in range(reasoning_chunks):
        yield Reasoning(run_id=run, parent_id=agent, id=f"{run}:r", content=f"thinking {c} ")
    for c in range(text_chunks):
        yield Text(run_id=run, parent_id=agent, id=f"{run}:t", content=f"token{c} ")
    yield Usage(run_id=run, parent_id=agent, input_tokens=1000, output_tokens=text_chunks)


def _turn(turn: int) -> Iterator[Event]:
    user = f"u{turn}"
    agent = f"a{turn}"
    yield User(run_id=user, content=f"question {turn}")
    yield HarnessStart(run_id=agent, parent_id=f"{user}:user", agent_id=agent)
    for step in range(3):
        provider = f"{agent}:p{step}"
        yield from _provider(agent, provider, 30, 8)
        call = f"{agent}/call{step}"
        if step == 0:
            relay = f"{agent}:relay{step}"
            yield Relay(
                run_id=agent,
                id=relay,
                kind="permission",
                tool_call_id=call,
                tool="bash",
                params={"cmd": "ls"},
            )
            if turn % 5 == 4:  # denied: no tool_call event at all
                yield ToolResult(
                    run_id=agent, id=call, name="bash", output={"status": "denied", "reason": "no"}
                )
                continue
        if step == 1 and turn % 3 == 0:  # a subagent with its own provider call
            yield ToolCall(run_id=agent, id=call, name="agent", input={"task": "search"})
            sub = f"{agent}:sub{step}"
            yield HarnessStart(run_id=sub, parent_id=call, agent_id=sub)
            yield from _provider(sub, f"{sub}:p0", 20, 0)
            yield HarnessEnd(run_id=sub)
            yield ToolResult(run_id=agent, id=call, name="agent", output={"result": "found"})
            continue
        if step == 2 and turn % 4 == 1:  # a REPL turn with progress
            repl = f"{agent}:repl{step}"
            yield ReplInput(run_id=agent, id=repl, code="print(1)", iteration=1)
            for p in range(10):
                yield ReplProgress(run_id=agent, id=repl, chunk=f"line {p}\n")
            yield ReplOutput(run_id=agent, id=repl, stdout="done\n", done=True)
            continue
        yield ToolCall(run_id=agent, id=call, name="bash", input={"cmd": f"echo {turn}"})
        yield ToolResult(run_id=agent, id=call, name="bash", output={"context": f"{turn}\n"})
    yield from _provider(agent, f"{agent}:final", 40, 0)
    yield HarnessEnd(run_id=agent)


def chat_stream() -> Iterator[Event]:
    """Endless; take what you need with `itertools.islice`. Events carry ``eventId`` ``e<n>``."""
    n = 0
    turn = 0
    while True:
        for event in _turn(turn):
            n += 1
            yield msgspec.structs.replace(event, event_id=f"e{n}")
        turn += 1
