"""The agent harness on the scripted provider, into an in-memory event log through `LogPort`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convograph.events import (
    Edit,
    Error,
    Event,
    HarnessEnd,
    HarnessStart,
    Regenerate,
    Relay,
    RelayResolved,
    SwitchBranch,
    Text,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
    User,
)
from convograph.harness import Agent, Budget, Decision, LogPort, ToolContext, tool
from convograph.hypergraph import create_conversation, default_active
from convograph.hypergraph.commands import reduce_with_commands_events
from convograph.projections import project_messages, project_thread
from convograph.testing import MemoryEventLog
from convograph.testing.providers import ScriptedCall, ScriptedProvider, ScriptedTurn


@pytest.fixture
async def port() -> AsyncIterator[LogPort]:
    async with LogPort(MemoryEventLog(), "conv-1") as port:
        yield port


async def events_of(port: LogPort) -> list[Event]:
    return [stored.event for stored in await port._log.read(port.conversation_id)]  # type: ignore[attr-defined]


def of_type[E](events: list[Event], kind: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, kind)]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def fail(message: str) -> str:
    """Always raises."""
    raise ValueError(message)


@tool(timeout=0.2)
async def hang() -> str:
    """Never answers."""
    await asyncio.Event().wait()
    return "unreachable"


def turn_calling(*calls: ScriptedCall, text: str = "", usage: Any = "auto") -> ScriptedTurn:
    return ScriptedTurn(text=text, tool_calls=calls, usage=usage)


async def test_the_tool_loop_emits_the_seed_events_in_order(port: LogPort) -> None:
    provider = ScriptedProvider(
        [
            turn_calling(ScriptedCall("add", {"a": 2, "b": 3}, id="raw-1"), text="Adding."),
            ScriptedTurn(text="It is 5.", usage=(40, 4)),
        ]
    )
    result = await Agent(provider, model="m", tools=[add]).run(port, "2 + 3?")
    events = await events_of(port)
    assert [e.type for e in events] == [
        "user",
        "harness_start",
        "text",
        "usage",
        "tool_call",
        "tool_result",
        "text",
        "usage",
        "harness_end",
    ]
    start = of_type(events, HarnessStart)[0]
    user = of_type(events, User)[0]
    assert start.parent_id == f"{user.run_id}:user"
    assert start.run_id == result.run_id
    call = of_type(events, ToolCall)[0]
    assert call.id == f"{result.run_id}/raw-1"
    assert call.run_id == result.run_id
    assert of_type(events, ToolResult)[0].output == {"context": "5", "result": 5}
    for text in of_type(events, Text):  # provider events: their own run, parent = the agent run
        assert text.run_id != result.run_id
        assert text.parent_id == result.run_id
    end = of_type(events, HarnessEnd)[0]
    assert events[-1] == end
    assert (end.reason, end.iterations) == ("final", 2)
    usage = of_type(events, Usage)
    assert end.total_usage is not None
    assert end.total_usage.input_tokens == sum(u.input_tokens for u in usage)
    assert end.total_usage.output_tokens == sum(u.output_tokens for u in usage)
    assert (result.reason, result.text, result.ok) == ("final", "It is 5.", True)


async def test_every_event_carries_a_unique_event_id(port: LogPort) -> None:
    provider = ScriptedProvider([turn_calling(ScriptedCall("add", {"a": 1, "b": 1})), ScriptedTurn(text="2")])
    await Agent(provider, model="m", tools=[add]).run(port, "1 + 1?")
    ids = [e.event_id for e in await events_of(port)]
    assert None not in ids
    assert len(set(ids)) == len(ids)


async def test_the_next_turn_sees_the_results_through_the_projection(port: LogPort) -> None:
    provider = ScriptedProvider([turn_calling(ScriptedCall("add", {"a": 2, "b": 3})), ScriptedTurn(text="5")])
    await Agent(provider, model="m", tools=[add], system="Be brief.").run(port, "2 + 3?")
    first, second = provider.requests
    assert first.messages == [{"role": "user", "content": "2 + 3?"}]
    assert first.system == "Be brief."
    assert [t.name for t in first.tools] == ["add"]
    assert [m["role"] for m in second.messages] == ["user", "assistant", "tool"]
    assert second.messages[2]["content"] == "5"  # the model reads the output's context
    assert second.messages == project_messages(*_conversation(await events_of(port)))[:3]


def _conversation(events: list[Event]) -> tuple[Any, Any]:
    conv = reduce_with_commands_events(create_conversation(), events)
    return conv, default_active(conv)


@pytest.mark.parametrize("message_format", ["openai", "anthropic"])
@pytest.mark.parametrize("ask", [False, True])
async def test_consecutive_tool_only_turns_reach_the_model_as_the_turns_they_were(
    message_format: str, ask: bool
) -> None:
    """Two model calls that answer with a tool call only (each call of the agent's run, each model
    call's usage between them; with ``ask``, a relay too): the next request holds two assistant
    turns, each followed by its own result, as the calls were made, not one turn with both."""

    async def approve(relay: Relay) -> Decision:
        return Decision(True)

    provider = ScriptedProvider(
        [
            turn_calling(ScriptedCall("add", {"a": 1, "b": 2})),
            turn_calling(ScriptedCall("add", {"a": 3, "b": 4})),
            ScriptedTurn(text="3 and 7"),
        ],
        message_format=message_format,
    )
    agent = Agent(provider, model="m", tools=[add], permissions={"add": "ask"} if ask else None, ask=approve)
    async with LogPort(MemoryEventLog(), "conv-t") as port:
        result = await agent.run(port, "sums")
        events = await events_of(port)
    assert result.reason == "final"
    messages = provider.requests[2].messages
    if message_format == "openai":
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
        assert [len(m["tool_calls"]) for m in messages if m["role"] == "assistant"] == [1, 1]
    else:
        assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
        assert [[b["type"] for b in m["content"]] for m in messages[1:]] == [
            ["tool_use"],
            ["tool_result"],
            ["tool_use"],
            ["tool_result"],
        ]
    assert messages == project_messages(*_conversation(events), format=message_format)[:5]


async def test_anthropic_format_requests_are_valid_too() -> None:
    provider = ScriptedProvider(
        [
            turn_calling(ScriptedCall("add", {"a": 1, "b": 2}), ScriptedCall("add", {"a": 3, "b": 4})),
            ScriptedTurn(text="3, 7"),
        ],
        message_format="anthropic",
    )
    async with LogPort(MemoryEventLog(), "conv-a") as port:
        result = await Agent(provider, model="m", tools=[add]).run(port, "sums")
    assert result.reason == "final"  # the scripted provider refuses a request the API would refuse
    roles = [m["role"] for m in provider.requests[1].messages]
    assert roles == ["user", "assistant", "user"]


async def test_parallel_tool_calls_run_concurrently(port: LogPort) -> None:
    first_in, second_in = asyncio.Event(), asyncio.Event()

    @tool(timeout=5)
    async def ping() -> str:
        """Waits for pong."""
        first_in.set()
        await second_in.wait()
        return "ping done"

    @tool(timeout=5)
    async def pong() -> str:
        """Waits for ping."""
        second_in.set()
        await first_in.wait()
        return "pong done"

    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("ping"), ScriptedCall("pong")), ScriptedTurn(text="ok")]
    )
    await Agent(provider, model="m", tools=[ping, pong]).run(port, "go")
    outputs = [r.output for r in of_type(await events_of(port), ToolResult)]
    assert {o["context"] for o in outputs} == {"ping done", "pong done"}  # each waited for the other


async def test_each_result_is_emitted_when_its_tool_finishes(port: LogPort) -> None:
    release = asyncio.Event()

    @tool
    async def slow() -> str:
        """Slow."""
        await release.wait()
        return "slow"

    @tool
    async def fast() -> str:
        """Fast."""
        return "fast"

    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("slow"), ScriptedCall("fast")), ScriptedTurn(text="ok")]
    )
    run = Agent(provider, model="m", tools=[slow, fast]).start(port, "go")
    for _ in range(2000):
        if of_type(await events_of(port), ToolResult):
            break
        await asyncio.sleep(0.01)
    results = of_type(await events_of(port), ToolResult)
    assert [r.name for r in results] == ["fast"]  # not held back by the slow one
    release.set()
    assert (await run.wait()).reason == "final"


async def test_bad_tool_calls_end_as_events_and_the_loop_goes_on(port: LogPort) -> None:
    provider = ScriptedProvider(
        [
            turn_calling(
                ScriptedCall("add", '{"a": 1,', id="malformed"),
                ScriptedCall("missing", {}, id="unknown"),
                ScriptedCall("fail", {"message": "boom"}, id="raises"),
                ScriptedCall("hang", {}, id="hangs"),
                ScriptedCall("add", {"a": "x", "b": 1}, id="badtype"),
            ),
            ScriptedTurn(text="Recovered."),
        ]
    )
    result = await Agent(provider, model="m", tools=[add, fail, hang]).run(port, "try things")
    events = await events_of(port)
    calls = {c.id.split("/")[1]: c for c in of_type(events, ToolCall)}
    outputs = {r.id.split("/")[1]: r.output for r in of_type(events, ToolResult)}
    assert calls["malformed"].input["__toolParseError"] is True
    assert calls["malformed"].input["rawArguments"] == '{"a": 1,'
    assert outputs["malformed"]["error"].startswith("Tool call had malformed arguments. Parse error: ")
    assert outputs["unknown"] == {"error": "unknown tool 'missing'; available tools: add, fail, hang"}
    assert outputs["raises"] == {"error": "ValueError: boom"}
    assert outputs["hangs"] == {"error": "tool 'hang' timed out after 0.2 s"}
    assert "Expected `int`, got `str` - at `$.a`" in outputs["badtype"]["error"]
    assert (result.reason, result.text) == ("final", "Recovered.")
    assert not of_type(events, Error)
    # The model saw every call answered.
    assert sum(m["role"] == "tool" for m in provider.requests[1].messages) == 5


async def test_a_reused_raw_id_gets_a_distinct_namespaced_id(port: LogPort) -> None:
    provider = ScriptedProvider(
        [
            turn_calling(ScriptedCall("add", {"a": 1, "b": 1}, id="functions.add:0"), text="First."),
            turn_calling(ScriptedCall("add", {"a": 2, "b": 2}, id="functions.add:0"), text="Again."),
            ScriptedTurn(text="done"),
        ]
    )
    result = await Agent(provider, model="m", tools=[add]).run(port, "twice")
    ids = [c.id for c in of_type(await events_of(port), ToolCall)]
    assert ids == [f"{result.run_id}/functions.add:0", f"{result.run_id}/functions.add:0#2"]
    assert [m["role"] for m in provider.requests[2].messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]


# --- permissions ------------------------------------------------------------------------------------


async def test_a_denied_policy_answers_without_running_the_tool(port: LogPort) -> None:
    ran: list[str] = []

    @tool
    def remove(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("remove", {"path": "/"})), ScriptedTurn(text="I may not.")]
    )
    await Agent(provider, model="m", tools=[remove], permissions={"remove": "deny"}).run(port, "rm /")
    events = await events_of(port)
    assert ran == []
    assert of_type(events, ToolResult)[0].output == {"status": "denied", "reason": "denied by policy"}
    assert len(of_type(events, ToolCall)) == 1  # the model's call stays in the history
    assert provider.requests[1].messages[2]["content"] == '{"status":"denied","reason":"denied by policy"}'


@tool(policy="ask")
def deploy(target: str) -> str:
    """Deploy."""
    return f"deployed to {target}"


async def test_ask_with_an_approving_callback(port: LogPort) -> None:
    asked: list[Relay] = []

    async def approve(relay: Relay) -> Decision:
        asked.append(relay)
        return Decision(True)

    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("deploy", {"target": "prod"}, id="d1")), ScriptedTurn(text="Done.")]
    )
    result = await Agent(provider, model="m", tools=[deploy], ask=approve).run(port, "ship it")
    events = await events_of(port)
    kinds = [e.type for e in events if e.type in ("relay", "relay_resolved", "tool_call", "tool_result")]
    assert kinds == ["relay", "relay_resolved", "tool_call", "tool_result"]
    relay = of_type(events, Relay)[0]
    assert (relay.tool_call_id, relay.tool, relay.params) == (
        f"{result.run_id}/d1",
        "deploy",
        {"target": "prod"},
    )
    assert asked == [msgspec.structs.replace(relay, seq=None)]  # the log adds the seq
    assert of_type(events, RelayResolved)[0].event_id == f"relay-decision:{relay.id}"
    assert of_type(events, ToolResult)[0].output["context"] == "deployed to prod"


async def test_ask_denied_emits_no_tool_call_and_the_model_sees_the_denial(port: LogPort) -> None:
    async def refuse(relay: Relay) -> Decision:
        return Decision(False, "not on a Friday")

    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("deploy", {"target": "prod"})), ScriptedTurn(text="OK, later.")]
    )
    await Agent(provider, model="m", tools=[deploy], ask=refuse).run(port, "ship it")
    events = await events_of(port)
    assert not of_type(events, ToolCall)  # seed 003: only approved calls are re-yielded
    assert of_type(events, ToolResult)[0].output == {"status": "denied", "reason": "not on a Friday"}
    tool_messages = [m for m in provider.requests[1].messages if m["role"] == "tool"]
    assert tool_messages[0]["content"] == '{"status":"denied","reason":"not on a Friday"}'


async def test_ask_waits_for_a_decision_recorded_in_the_log(port: LogPort) -> None:
    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("deploy", {"target": "staging"})), ScriptedTurn(text="Done.")]
    )
    run = Agent(provider, model="m", tools=[deploy]).start(port, "ship it")
    relay = await _wait_for(port, Relay)
    await asyncio.sleep(0.05)
    assert not run.done()
    assert not of_type(await events_of(port), ToolCall)  # waiting
    await port.emit([RelayResolved(relay_id=relay.id, approved=True, event_id=f"relay-decision:{relay.id}")])
    result = await asyncio.wait_for(run.wait(), 10)
    assert result.reason == "final"
    assert of_type(await events_of(port), ToolResult)[0].output["context"] == "deployed to staging"


async def test_a_callback_that_returns_none_leaves_the_decision_to_a_human(port: LogPort) -> None:
    async def no_opinion(relay: Relay) -> None:
        return None

    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("deploy", {"target": "x"})), ScriptedTurn(text="Done.")]
    )
    run = Agent(provider, model="m", tools=[deploy], ask=no_opinion).start(port, "ship it")
    relay = await _wait_for(port, Relay)
    await asyncio.sleep(0.05)
    assert not run.done()
    await port.emit([RelayResolved(relay_id=relay.id, approved=False, reason="no")])
    await asyncio.wait_for(run.wait(), 10)
    assert of_type(await events_of(port), ToolResult)[0].output == {"status": "denied", "reason": "no"}


async def test_an_unanswered_relay_is_refused_after_the_relay_timeout(port: LogPort) -> None:
    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("deploy", {"target": "x"})), ScriptedTurn(text="Gave up.")]
    )
    await Agent(provider, model="m", tools=[deploy], relay_timeout=0.1).run(port, "ship it")
    events = await events_of(port)
    assert of_type(events, RelayResolved)[0].approved is False
    assert of_type(events, ToolResult)[0].output == {"status": "denied", "reason": "no decision within 0.1 s"}


async def test_the_agent_permissions_override_the_tool_policy(port: LogPort) -> None:
    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("deploy", {"target": "x"})), ScriptedTurn(text="ok")]
    )
    await Agent(provider, model="m", tools=[deploy], permissions={"*": "allow"}).run(port, "go")
    events = await events_of(port)
    assert not of_type(events, Relay)
    assert of_type(events, ToolResult)[0].output["context"] == "deployed to x"


async def _wait_for[E](port: LogPort, kind: type[E], count: int = 1) -> E:
    for _ in range(3000):
        found = of_type(await events_of(port), kind)
        if len(found) >= count:
            return found[count - 1]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind.__name__} event arrived")


# --- subagents --------------------------------------------------------------------------------------


async def test_a_subagent_is_a_child_run_of_the_tool_call(port: LogPort) -> None:
    child_provider = ScriptedProvider(
        [
            turn_calling(ScriptedCall("add", {"a": 20, "b": 22})),
            ScriptedTurn(text="The answer is 42.", usage=(100, 10)),
        ]
    )
    researcher = Agent(child_provider, model="small", tools=[add], name="researcher")

    @tool
    async def delegate(task: str, ctx: ToolContext) -> str:
        """Ask the researcher."""
        result = await ctx.spawn(researcher, task)
        return result.text

    parent_provider = ScriptedProvider(
        [
            turn_calling(ScriptedCall("delegate", {"task": "compute 20 + 22"}, id="t1"), usage=(50, 5)),
            ScriptedTurn(text="42 it is.", usage=(60, 6)),
        ]
    )
    result = await Agent(parent_provider, model="big", tools=[delegate], name="lead").run(
        port, "What is 20 + 22?"
    )
    events = await events_of(port)
    starts = of_type(events, HarnessStart)
    child_start = next(s for s in starts if s.agent_id == "researcher")
    assert child_start.parent_id == f"{result.run_id}/t1"
    # The child's history is its own run: its task, then its own turns (not the parent's conversation).
    assert child_provider.requests[0].messages == [{"role": "user", "content": "compute 20 + 22"}]
    assert [m["role"] for m in child_provider.requests[1].messages] == ["user", "assistant", "tool"]
    # The parent's history holds the subagent's answer, not its internals.
    parent_second = parent_provider.requests[1].messages
    assert [m["role"] for m in parent_second] == ["user", "assistant", "tool"]
    assert "The answer is 42." in parent_second[2]["content"]
    # Usage rolled up: the parent's totalUsage includes the child's.
    ends = {e.agent_id: e for e in of_type(events, HarnessEnd)}
    child_total, lead_total = ends["researcher"].total_usage, ends["lead"].total_usage
    assert child_total is not None
    assert lead_total is not None
    assert lead_total.input_tokens == 50 + 60 + child_total.input_tokens
    assert child_total.input_tokens >= 100
    # In the graph: the child is a nested thread under the call; the main path is the parent's.
    conv, active = _conversation(events)
    thread = project_thread(conv, active)
    assert any(view.branches for view in thread)


# --- budgets, cancellation, failures --------------------------------------------------------------


async def test_max_turns_ends_with_a_last_turn_told_to_answer(port: LogPort) -> None:
    looping = [turn_calling(ScriptedCall("add", {"a": 1, "b": 1})) for _ in range(3)]
    provider = ScriptedProvider(looping)
    result = await Agent(provider, model="m", tools=[add], budget=Budget(max_turns=3)).run(port, "loop")
    assert (result.reason, result.iterations) == ("max_turns", 3)
    assert provider.requests[0].system is None
    assert provider.requests[2].system is not None
    assert "turn limit" in provider.requests[2].system
    last_output = of_type(await events_of(port), ToolResult)[-1].output
    assert last_output == {"error": "turn limit reached: tools are disabled"}


async def test_max_tokens_is_checked_before_each_turn(port: LogPort) -> None:
    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("add", {"a": 1, "b": 1}), usage=(900, 200)), ScriptedTurn(text="x")]
    )
    result = await Agent(provider, model="m", tools=[add], budget=Budget(max_tokens=1000)).run(port, "go")
    assert (result.reason, result.iterations) == ("max_tokens", 1)
    assert of_type(await events_of(port), HarnessEnd)[0].reason == "max_tokens"


async def test_max_seconds_stops_a_hanging_model_call(port: LogPort) -> None:
    provider = ScriptedProvider([ScriptedTurn(text="thinking...", hang=True)])
    result = await Agent(provider, model="m", budget=Budget(max_seconds=0.2)).run(port, "go")
    assert result.reason == "max_seconds"
    assert (await events_of(port))[-1].type == "harness_end"


async def test_cancel_ends_the_run_with_an_event_and_answers_open_calls(port: LogPort) -> None:
    @tool
    async def forever() -> str:
        """Runs forever."""
        await asyncio.Event().wait()
        return ""

    provider = ScriptedProvider([turn_calling(ScriptedCall("forever", {}))])
    run = Agent(provider, model="m", tools=[forever]).start(port, "go")
    await _wait_for(port, ToolCall)
    run.cancel()
    result = await asyncio.wait_for(run.wait(), 10)
    events = await events_of(port)
    assert result.reason == "cancelled"
    assert of_type(events, ToolResult)[0].output == {
        "error": "not run to the end: the run stopped (cancelled)"
    }
    assert events[-1].type == "harness_end"
    assert of_type(events, HarnessEnd)[0].reason == "cancelled"


async def test_cancel_while_waiting_for_a_relay(port: LogPort) -> None:
    provider = ScriptedProvider([turn_calling(ScriptedCall("deploy", {"target": "x"}))])
    run = Agent(provider, model="m", tools=[deploy]).start(port, "go")
    await _wait_for(port, Relay)
    run.cancel()
    result = await asyncio.wait_for(run.wait(), 10)
    assert result.reason == "cancelled"
    assert "stopped" in of_type(await events_of(port), ToolResult)[0].output["error"]


async def test_cancelling_the_parent_cancels_its_subagent(port: LogPort) -> None:
    child = Agent(ScriptedProvider([ScriptedTurn(text="...", hang=True)]), model="m", name="child")

    @tool
    async def delegate(task: str, ctx: ToolContext) -> str:
        """Delegate."""
        return (await ctx.spawn(child, task)).text

    provider = ScriptedProvider([turn_calling(ScriptedCall("delegate", {"task": "wait"}))])
    run = Agent(provider, model="m", tools=[delegate], name="parent").start(port, "go")
    await _wait_for(port, HarnessStart, count=2)
    await asyncio.sleep(0.05)
    run.cancel()
    await asyncio.wait_for(run.wait(), 10)
    ends = {e.agent_id: e.reason for e in of_type(await events_of(port), HarnessEnd)}
    assert ends == {"child": "cancelled", "parent": "cancelled"}


async def test_cancelling_the_waiter_cancels_the_run(port: LogPort) -> None:
    provider = ScriptedProvider([ScriptedTurn(text="...", hang=True)])
    waiter = asyncio.ensure_future(Agent(provider, model="m").run(port, "go"))
    await _wait_for(port, Text)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert of_type(await events_of(port), HarnessEnd)[0].reason == "cancelled"


async def test_a_failed_model_call_ends_the_run_with_error(port: LogPort) -> None:
    provider = ScriptedProvider([ScriptedTurn(text="partial", error="503 upstream unavailable")])
    result = await Agent(provider, model="m").run(port, "go")
    events = await events_of(port)
    errors = of_type(events, Error)
    assert [e.message for e in errors] == [
        "503 upstream unavailable",
        "model call failed: 503 upstream unavailable",
    ]
    assert errors[0].run_id != result.run_id
    assert errors[1].run_id == result.run_id
    assert (result.reason, result.error) == ("error", "model call failed: 503 upstream unavailable")
    assert events[-1].type == "harness_end"


async def test_an_error_the_provider_recovered_from_does_not_end_the_run(port: LogPort) -> None:
    class RetryingProvider(ScriptedProvider):
        async def invoke(self, request: Any) -> AsyncIterator[Event]:
            yield Error(
                run_id="attempt-1", parent_id=request.parent_id, message="429 rate limited (retrying)"
            )
            async for event in super().invoke(request):
                yield event

    result = await Agent(RetryingProvider([ScriptedTurn(text="fine")]), model="m").run(port, "go")
    assert (result.reason, result.text) == ("final", "fine")


async def test_a_run_past_the_script_ends_with_error_not_a_hang(port: LogPort) -> None:
    result = await Agent(ScriptedProvider([]), model="m").run(port, "go")
    assert result.reason == "error"
    assert "no turn left" in (result.error or "")


# --- history follows the conversation ------------------------------------------------------------


async def test_an_edit_in_the_log_changes_what_the_model_sees_next(port: LogPort) -> None:
    provider = ScriptedProvider([ScriptedTurn(text="Paris."), ScriptedTurn(text="Rome.")])
    agent = Agent(provider, model="m")
    await agent.run(port, "Capital of France?")
    # A viewer edits the question (the server records an `edit` command in the log).
    await port.emit([Edit(message_id="msg:1", content="Capital of Italy?")])
    await agent.run(port)  # continue the conversation's active path
    assert provider.requests[1].messages == [{"role": "user", "content": "Capital of Italy?"}]


async def test_the_live_fold_equals_a_replay_of_the_stored_events(port: LogPort) -> None:
    provider = ScriptedProvider(
        [
            turn_calling(ScriptedCall("add", {"a": 1, "b": 2}), ScriptedCall("fail", {"message": "x"})),
            ScriptedTurn(reasoning="hmm", signature="sig", text="3"),
        ]
    )
    await Agent(provider, model="m", tools=[add, fail]).run(port, "1 + 2?")
    await port.sync()
    live = port.state.projector.conversation
    replayed, active = _conversation(await events_of(port))
    assert replayed == live
    assert project_thread(replayed, active) == project_thread(live, default_active(live))


async def test_tool_progress_is_emitted_for_its_call(port: LogPort) -> None:
    @tool
    async def download(url: str, ctx: ToolContext) -> str:
        """Download."""
        for pct in (50, 100):
            await ctx.progress({"percent": pct})
        return "saved"

    provider = ScriptedProvider(
        [turn_calling(ScriptedCall("download", {"url": "u"})), ScriptedTurn(text="ok")]
    )
    result = await Agent(provider, model="m", tools=[download]).run(port, "fetch")
    progress = of_type(await events_of(port), ToolProgress)
    assert [p.content for p in progress] == [{"percent": 50}, {"percent": 100}]
    assert {p.tool_call_id for p in progress} == {f"{result.run_id}/call_1"}


def test_bad_agent_configuration_is_refused() -> None:
    provider = ScriptedProvider([])
    with pytest.raises(ValueError, match="repeated: add"):
        Agent(provider, model="m", tools=[add, add])
    with pytest.raises(ValueError, match="allow, deny or ask"):
        Agent(provider, model="m", permissions={"add": "maybe"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="max_turns"):
        Budget(max_turns=0)


# --- property: completion order does not change the history ----------------------------------------


def _canonical_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every tool call id replaced by its rank of first appearance (run ids differ
    between runs)."""
    names: dict[str, str] = {}

    def rename(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: names.setdefault(v, f"id-{len(names)}")
                if k in ("id", "tool_call_id", "tool_use_id")
                else rename(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [rename(v) for v in value]
        return value

    return [rename(m) for m in messages]


async def _history_after_completions(order: list[int], message_format: Any) -> list[dict[str, Any]]:
    finished = 0
    changed = asyncio.Condition()

    @tool
    async def step(k: int) -> str:
        """Finish in the given order."""
        nonlocal finished
        async with changed:
            await changed.wait_for(lambda: order[finished] == k)
            finished += 1
            changed.notify_all()
        return f"step {k} done"

    calls = [ScriptedCall("step", {"k": k}, id=f"c{k}") for k in range(len(order))]
    provider = ScriptedProvider(
        [turn_calling(*calls, text="Go."), ScriptedTurn(text="All done.")], message_format=message_format
    )
    async with LogPort(MemoryEventLog(), "prop") as port:
        result = await Agent(provider, model="m", tools=[step]).run(port, "run the steps")
        assert result.reason == "final"
        results = [r.id.rsplit("/", 1)[1] for r in of_type(await events_of(port), ToolResult)]
    assert results == [f"c{k}" for k in order]  # they did complete in that order
    return _canonical_ids(list(provider.requests[1].messages))


@settings(max_examples=25, deadline=None)
@given(st.permutations(range(4)), st.sampled_from(["openai", "anthropic"]))
def test_any_completion_order_of_parallel_tools_gives_the_same_history(order: list[int], fmt: str) -> None:
    in_order = asyncio.run(_history_after_completions(sorted(order), fmt))
    assert asyncio.run(_history_after_completions(list(order), fmt)) == in_order


async def test_a_regenerate_in_the_log_makes_the_next_run_answer_again(port: LogPort) -> None:
    provider = ScriptedProvider([ScriptedTurn(text="First answer."), ScriptedTurn(text="Second answer.")])
    agent = Agent(provider, model="m")
    await agent.run(port, "Question?")
    await port.emit([Regenerate(message_id="msg:2")])  # the viewer's "Regenerate" on the reply
    await agent.run(port)
    assert provider.requests[1].messages == [{"role": "user", "content": "Question?"}]
    await port.sync()
    conv = port.state.projector.conversation
    history = project_messages(conv, default_active(conv))
    assert history == [
        {"role": "user", "content": "Question?"},
        {"role": "assistant", "content": "Second answer."},
    ]
    await port.emit([SwitchBranch(message_id="msg:2")])  # back to the first answer
    assert (await port.history("openai"))[-1] == {"role": "assistant", "content": "First answer."}


async def test_a_run_without_a_task_on_an_empty_conversation_says_so(port: LogPort) -> None:
    provider = ScriptedProvider([ScriptedTurn(text="never")])
    result = await Agent(provider, model="m").run(port)
    assert result.reason == "error"
    assert (
        result.error
        == "model call failed: the conversation has no message to answer (start the run with a task)"
    )
    assert provider.requests == []


# --- property: any mix of good and bad tool calls keeps every request valid -------------------------

CALL_KINDS = st.sampled_from(["ok", "raises", "unknown", "malformed", "denied", "bad_type"])


def _scripted_call(kind: str, n: int) -> ScriptedCall:
    return {
        "ok": ScriptedCall("add", {"a": n, "b": 1}),
        "raises": ScriptedCall("fail", {"message": f"boom {n}"}),
        "unknown": ScriptedCall("missing", {"n": n}),
        "malformed": ScriptedCall("add", '{"a": ' + str(n)),
        "denied": ScriptedCall("remove", {"path": f"/tmp/{n}"}),
        "bad_type": ScriptedCall("add", {"a": "many", "b": n}),
    }[kind]


@tool
def remove(path: str) -> str:
    """Delete a file (denied by the agent's permissions in the property test)."""
    return "deleted"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.lists(CALL_KINDS, min_size=1, max_size=3)), min_size=0, max_size=3),
    st.sampled_from(["openai", "anthropic"]),
)
def test_any_mix_of_tool_calls_keeps_requests_valid_and_the_log_whole(
    turns: list[tuple[bool, list[str]]], fmt: Any
) -> None:
    script = [
        turn_calling(
            *(_scripted_call(kind, i * 10 + j) for j, kind in enumerate(kinds)), text="Step." if said else ""
        )
        for i, (said, kinds) in enumerate(turns)
    ]
    script.append(ScriptedTurn(text="Finished."))

    async def scenario() -> None:
        provider = ScriptedProvider(script, message_format=fmt)  # refuses a request the API would refuse
        async with LogPort(MemoryEventLog(), "prop-mix") as port:
            agent = Agent(provider, model="m", tools=[add, fail, remove], permissions={"remove": "deny"})
            result = await agent.run(port, "do things")
            assert (result.reason, result.error) == ("final", None)
            events = await events_of(port)
            calls = [e.id for e in events if isinstance(e, ToolCall)]
            results = [e.id for e in events if isinstance(e, ToolResult)]
            assert sorted(calls) == sorted(results)
            assert len(set(calls)) == len(calls)
            assert len({e.event_id for e in events}) == len(events)
            assert events[-1].type == "harness_end"
            await port.sync()
            live = port.state.projector.conversation
            assert _conversation(events)[0] == live

    asyncio.run(scenario())


async def test_an_agent_as_a_tool(port: LogPort) -> None:
    researcher = Agent(ScriptedProvider([ScriptedTurn(text="It is 42.")]), model="m", name="researcher")
    broken = Agent(ScriptedProvider([ScriptedTurn(error="500 down")]), model="m", name="broken")
    as_tool = researcher.as_tool()
    assert as_tool.name == "researcher"
    assert as_tool.parameters["properties"]["task"]["description"].startswith("Everything the agent needs")
    assert as_tool.parameters["required"] == ["task"]
    provider = ScriptedProvider(
        [
            turn_calling(
                ScriptedCall("researcher", {"task": "find it"}), ScriptedCall("broken", {"task": "try"})
            ),
            ScriptedTurn(text="Done."),
        ]
    )
    lead = Agent(provider, model="m", tools=[as_tool, broken.as_tool(description="Unreliable.")], name="lead")
    assert lead.tools["broken"].description == "Unreliable."
    await lead.run(port, "go")
    outputs = {r.name: r.output for r in of_type(await events_of(port), ToolResult)}
    assert outputs["researcher"] == {"context": "It is 42.", "result": "It is 42."}
    assert outputs["broken"] == {
        "error": "RuntimeError: the broken agent ended without an answer (error: model call failed: 500 down)"
    }
