"""The REPL harness on the scripted provider: a real sandboxed interpreter, events into a log."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from convograph.events import (
    Error,
    Event,
    HarnessEnd,
    HarnessStart,
    ReplInput,
    ReplOutput,
    ReplProgress,
    Text,
    Usage,
)
from convograph.harness import LogPort, ReplHarness, SandboxLimits
from convograph.hypergraph import create_conversation
from convograph.hypergraph.commands import reduce_with_commands_events
from convograph.projections import project_repl
from convograph.testing import MemoryEventLog
from convograph.testing.providers import ScriptedProvider, ScriptedTurn

LIMITS = SandboxLimits(timeout=5, memory_bytes=512 * 1024**2)


def code(source: str, before: str = "Let me look.") -> ScriptedTurn:
    return ScriptedTurn(text=f"{before}\n```python\n{source}\n```\n", usage=(100, 20))


@pytest.fixture
async def port() -> AsyncIterator[LogPort]:
    async with LogPort(MemoryEventLog(), "repl-1") as port:
        yield port


async def events_of(port: LogPort) -> list[Event]:
    return [stored.event for stored in await port._log.read(port.conversation_id)]  # type: ignore[attr-defined]


def of_type[E](events: list[Event], kind: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, kind)]


async def test_the_loop_runs_code_feeds_output_back_and_ends_on_final(port: LogPort) -> None:
    provider = ScriptedProvider(
        [code("words = context.split()\nprint(len(words))"), code("FINAL(f'{len(words)} words')", "Done.")],
        chunk_size=1000,
    )
    agent = ReplHarness(provider, "m", limits=LIMITS)
    result = await agent.run(port, "How many words?", context="one two three")
    assert (result.reason, result.answer, result.iterations) == ("final", "3 words", 2)
    events = await events_of(port)
    assert [e.type for e in events] == [
        "user",
        "harness_start",
        "text",
        "usage",
        "repl_input",
        "repl_progress",
        "repl_output",
        "text",
        "usage",
        "repl_input",
        "repl_output",
        "text",
        "harness_end",
    ]
    start = of_type(events, HarnessStart)[0]
    assert (start.max_iterations, start.depth) == (20, None)
    # Provider events are re-tagged with the REPL run's id (the REPL view folds them into turns).
    assert {e.run_id for e in events[1:]} == {result.run_id}  # type: ignore[union-attr]
    inputs, outputs = of_type(events, ReplInput), of_type(events, ReplOutput)
    assert [(i.iteration, o.iteration) for i, o in zip(inputs, outputs, strict=True)] == [(0, 0), (1, 1)]
    assert [i.id for i in inputs] == [o.id for o in outputs]
    assert of_type(events, ReplProgress)[0].id == inputs[0].id
    assert (outputs[0].stdout, outputs[0].done, outputs[1].done) == ("3\n", False, True)
    assert of_type(events, Text)[-1].content == "3 words"
    end = of_type(events, HarnessEnd)[0]
    assert (end.reason, end.iterations) == ("final", 2)
    assert end.total_usage is not None
    assert (end.total_usage.input_tokens, end.total_usage.output_tokens) == (200, 40)
    # The model saw the output, and the REPL system prompt describes the context without holding it all.
    second = provider.requests[1]
    assert second.messages[-1]["content"] == '<repl_output iteration="0">\n3\n</repl_output>'
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    assert second.system is not None
    assert "`context` is a str of 13 characters" in second.system
    # The REPL view of the stored events.
    view = project_repl(reduce_with_commands_events(create_conversation(), events))
    agent_view = view.agents[0]
    assert (agent_view.status, agent_view.final_answer, len(agent_view.turns)) == ("done", "3 words", 2)


async def test_no_block_or_several_blocks_is_an_error_and_the_loop_goes_on(port: LogPort) -> None:
    provider = ScriptedProvider(
        [
            ScriptedTurn(text="I think the answer is 3."),
            ScriptedTurn(text="```python\nx = 1\n```\nand\n```repl\ny = 2\n```"),
            code("FINAL('3')"),
        ]
    )
    result = await ReplHarness(provider, "m", limits=LIMITS).run(port, "task")
    assert (result.reason, result.answer, result.iterations) == ("final", "3", 3)
    errors = [e.message for e in of_type(await events_of(port), Error)]
    assert errors == [
        "Response contained no code block. Expected exactly one ```python block per turn.",
        "Response contained 2 code blocks. Expected exactly one ```python block per turn.",
    ]
    fed_back = provider.requests[2].messages
    assert fed_back[2]["content"].startswith("<error>\nResponse contained no code block")
    assert [m["role"] for m in fed_back] == ["user", "assistant", "user", "assistant", "user"]


async def test_a_timeout_restarts_the_interpreter_and_the_model_is_told(port: LogPort) -> None:
    provider = ScriptedProvider(
        [code("x = 1\nwhile True:\n    pass"), code("print(x)"), code("FINAL('gave up')")]
    )
    limits = SandboxLimits(timeout=0.5)
    result = await ReplHarness(provider, "m", limits=limits).run(port, "task")
    assert result.answer == "gave up"
    outputs = of_type(await events_of(port), ReplOutput)
    assert outputs[0].error == "TimeoutError: the execution took longer than 0.5 s and was killed"
    assert "<sandbox_restarted>" in provider.requests[1].messages[-1]["content"]
    assert "NameError: name 'x' is not defined" in (outputs[1].error or "")


async def test_llm_query_is_a_child_model_call_under_the_repl_input(port: LogPort) -> None:
    sub = ScriptedProvider([ScriptedTurn(text="PARIS", usage=(7, 1))])
    provider = ScriptedProvider([code("a = llm_query('Capital of France?')\nprint(a)"), code("FINAL(a)")])
    result = await ReplHarness(provider, "m", sub_provider=sub, sub_model="small", limits=LIMITS).run(
        port, "t"
    )
    assert result.answer == "PARIS"
    events = await events_of(port)
    call = of_type(events, ReplInput)[0]
    child_text = [t for t in of_type(events, Text) if t.content == "PARIS" and t.run_id != result.run_id]
    assert child_text
    assert child_text[0].parent_id == call.id  # a child run of the repl_input
    assert sub.requests[0].model == "small"
    assert sub.requests[0].messages == [{"role": "user", "content": "Capital of France?"}]
    assert of_type(events, HarnessEnd)[0].total_usage.input_tokens == 100 + 100 + 7  # type: ignore[union-attr]
    assert of_type(events, Usage)[-1].input_tokens == 100


async def test_llm_query_recurses_into_a_child_repl_run_within_max_depth(port: LogPort) -> None:
    sub = ScriptedProvider([code("FINAL(str(6 * 7))")])
    provider = ScriptedProvider([code("a = llm_query('compute 6 * 7')"), code("FINAL(a)")])
    result = await ReplHarness(provider, "m", sub_provider=sub, max_depth=1, limits=LIMITS).run(port, "t")
    assert result.answer == "42"
    events = await events_of(port)
    starts = of_type(events, HarnessStart)
    child = next(s for s in starts if s.run_id != result.run_id)
    assert child.depth == 1
    assert child.parent_id == of_type(events, ReplInput)[0].id
    view = project_repl(reduce_with_commands_events(create_conversation(), events))
    assert view.agents[0].turns[0].child_agents[0].final_answer == "42"


async def test_a_failing_llm_query_raises_in_the_code(port: LogPort) -> None:
    sub = ScriptedProvider([ScriptedTurn(error="529 overloaded")])
    provider = ScriptedProvider([code("llm_query('x')"), code("FINAL('ok')")])
    await ReplHarness(provider, "m", sub_provider=sub, limits=LIMITS).run(port, "t")
    output = of_type(await events_of(port), ReplOutput)[0]
    assert "llm_query failed: RuntimeError: 529 overloaded" in (output.error or "")


async def test_a_prompt_over_the_budget_raises_in_the_code(port: LogPort) -> None:
    provider = ScriptedProvider([code("llm_query('x' * 50)"), code("FINAL('ok')")])
    await ReplHarness(provider, "m", max_prompt_chars=10, limits=LIMITS).run(port, "t")
    output = of_type(await events_of(port), ReplOutput)[0]
    assert "the prompt has 50 characters; the limit is 10" in (output.error or "")


async def test_max_iterations(port: LogPort) -> None:
    provider = ScriptedProvider([code("print(1)")] * 2)
    result = await ReplHarness(provider, "m", max_iterations=2, limits=LIMITS).run(port, "t")
    assert (result.reason, result.answer, result.iterations) == ("max_iterations", None, 2)


async def test_a_failed_model_call_ends_with_reason_error(port: LogPort) -> None:
    provider = ScriptedProvider([ScriptedTurn(error="401 invalid key: set OPENAI_API_KEY")])
    result = await ReplHarness(provider, "m", limits=LIMITS).run(port, "t")
    assert result.reason == "error"
    assert result.error == "model call failed: 401 invalid key: set OPENAI_API_KEY"
    assert of_type(await events_of(port), HarnessEnd)[0].reason == "error"


async def test_cancel_during_an_execution_kills_it_and_ends_the_run(port: LogPort) -> None:
    provider = ScriptedProvider([code("import time\ntime.sleep(60)")])
    run = ReplHarness(provider, "m", limits=SandboxLimits(timeout=120)).start(port, "t")
    for _ in range(500):
        if of_type(await events_of(port), ReplInput):
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    run.cancel()
    result = await asyncio.wait_for(run.wait(), 10)
    assert result.reason == "cancelled"
    assert (await events_of(port))[-1].type == "harness_end"


async def test_max_seconds(port: LogPort) -> None:
    provider = ScriptedProvider([code("import time\ntime.sleep(60)")])
    result = await ReplHarness(provider, "m", max_seconds=0.5, limits=SandboxLimits(timeout=120)).run(
        port, "t"
    )
    assert result.reason == "max_seconds"


def test_bad_configuration_is_refused() -> None:
    provider: Any = ScriptedProvider([])
    with pytest.raises(ValueError, match="max_iterations"):
        ReplHarness(provider, "m", max_iterations=0)
    with pytest.raises(ValueError, match="max_depth"):
        ReplHarness(provider, "m", max_depth=-1)
