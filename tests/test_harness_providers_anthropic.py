"""The Anthropic Messages provider, driven through the real ``anthropic`` SDK against the scripted
model server: thinking with signatures, redacted thinking, tool use, usage with cache tokens,
retries, failures, cancellation, and the round trip through convograph's projections."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from convograph.events import Error, Reasoning, Text, ToolCall, Usage
from convograph.harness import ModelRequest, ToolSpec
from convograph.harness.providers.anthropic_messages import AnthropicProvider
from convograph.harness.retry import RetryPolicy
from convograph.testing import (
    ModelServer,
    RedactedThinking,
    Reply,
    Say,
    ScriptUsage,
    Think,
    ToolUse,
    check_request,
)
from tests.support.providers import agent_record, errors, projections, run_call, texts

FAST = RetryPolicy(base_delay=0.01, max_delay=0.05)
READ = ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
THINKING = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
REQUEST = ModelRequest(
    model="claude-test",
    messages=[{"role": "user", "content": "Compare a.py and b.py."}],
    system="You review code.",
    tools=[READ],
    parent_id="agent-run",
    options=THINKING,
)
ANSWER = Reply(
    content=[
        Think(text="I should read both files before judging.", signature="sig-1"),
        RedactedThinking(data="redacted-blob"),
        Say(text="Reading both files."),
        ToolUse(name="read_file", arguments={"path": "a.py"}),
        ToolUse(name="read_file", arguments={"path": "b.py"}),
    ],
    usage=ScriptUsage(input_tokens=500, output_tokens=60, cache_read_tokens=300, cache_creation_tokens=100),
)
FINAL = Reply(
    content=[Think(text="b.py is safer.", signature="sig-2"), Say(text="b.py is safer: it backs off.")]
)

MADE: list[AnthropicProvider] = []


def provider(server: ModelServer, **kwargs: Any) -> AnthropicProvider:
    kwargs.setdefault("api_key", "sk-ant-test")
    kwargs.setdefault("retry", FAST)
    made = AnthropicProvider(base_url=server.anthropic_base_url, **kwargs)
    MADE.append(made)
    return made


@pytest.fixture(autouse=True)
async def _close_clients() -> Any:
    """Close the SDK clients made by `provider` when the test ends (their connections belong to the
    test's event loop)."""
    yield
    while MADE:
        await MADE.pop().aclose()


async def test_thinking_signature_redacted_text_tools_and_usage() -> None:
    async with ModelServer([ANSWER]) as server:
        events = await run_call(provider(server), REQUEST)
    reasoning = [e for e in events if isinstance(e, Reasoning)]
    thinking = [e for e in reasoning if e.redacted_data is None]
    assert len({e.id for e in thinking}) == 1
    assert "".join(e.content for e in thinking) == "I should read both files before judging."
    assert thinking[-1].signature == "sig-1"
    assert thinking[-1].content == ""
    assert all(e.signature is None for e in thinking[:-1])
    (redacted,) = [e for e in reasoning if e.redacted_data is not None]
    assert redacted.redacted_data == "redacted-blob"
    assert redacted.content == ""
    assert redacted.id != thinking[0].id
    assert list(texts(events).values()) == ["Reading both files."]
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.id, c.input) for c in calls] == [
        ("toolu_0000_00", {"path": "a.py"}),
        ("toolu_0000_01", {"path": "b.py"}),
    ]
    usage = events[-1]
    assert isinstance(usage, Usage)
    assert (usage.input_tokens, usage.output_tokens) == (500, 60)  # the whole prompt, cached included
    assert (usage.cache_read_tokens, usage.cache_creation_tokens) == (300, 100)
    run_id = events[0].run_id
    assert [e.event_id for e in events] == [f"{run_id}:{n}" for n in range(len(events))]
    assert {e.parent_id for e in events} == {"agent-run"}


async def test_the_request_is_what_the_sdk_types_and_the_api_accept() -> None:
    async with ModelServer([ANSWER]) as server:
        await run_call(provider(server), REQUEST)
    (record,) = server.requests
    assert record.problems == []
    assert check_request("messages", record.body) == []
    body = record.body
    assert body["system"] == "You review code."
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 8192
    assert body["tools"] == [
        {"name": "read_file", "description": "Read a file.", "input_schema": dict(READ.parameters)}
    ]
    assert "sk-ant-test" in (
        record.headers.get("x-api-key"),
        record.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert record.headers["x-stainless-retry-count"] == "0"


def test_max_tokens_rises_above_a_large_thinking_budget() -> None:
    big = ModelRequest(
        model="m", messages=[], options={"thinking": {"type": "enabled", "budget_tokens": 16000}}
    )
    assert AnthropicProvider(api_key="k").request_params(big)["max_tokens"] == 16000 + 4096


async def test_the_next_turn_sends_thinking_back_and_the_api_accepts_it() -> None:
    """Call, record as an agent would, project the history, call again: the second request carries
    the signed thinking and the redacted block first in the answered assistant turn (the API rejects
    it otherwise when thinking is on)."""
    async with ModelServer([ANSWER, FINAL]) as server:
        claude = provider(server)
        first = await run_call(claude, REQUEST)
        history = projections(agent_record("Compare a.py and b.py.", [first]))["anthropic"]
        second = await run_call(claude, _with(REQUEST, history))
    assert isinstance(second[-1], Usage)
    body = server.requests[1].body
    assert server.requests[1].problems == []
    assistant = body["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["thinking", "redacted_thinking", "text", "tool_use", "tool_use"]
    assert assistant[0] == {
        "type": "thinking",
        "thinking": "I should read both files before judging.",
        "signature": "sig-1",
    }
    assert assistant[1] == {"type": "redacted_thinking", "data": "redacted-blob"}
    results = body["messages"][2]["content"]
    # The history names calls by their namespaced ids ("agent-run/toolu_..."), made API-safe.
    assert [(b["type"], b["tool_use_id"]) for b in results] == [
        ("tool_result", b["id"]) for b in assistant[3:]
    ]


def _with(request: ModelRequest, messages: list[dict[str, Any]]) -> ModelRequest:
    return ModelRequest(
        model=request.model,
        messages=messages,
        system=request.system,
        tools=request.tools,
        parent_id=request.parent_id,
        options=request.options,
    )


async def test_thread_shows_signed_thinking_text_and_calls_under_the_agent() -> None:
    async with ModelServer([ANSWER, FINAL]) as server:
        claude = provider(server)
        first = await run_call(claude, REQUEST)
        second = await run_call(claude, REQUEST)
    thread = projections(agent_record("Compare a.py and b.py.", [first, second]))["thread"]
    kinds = [v.content.kind for v in thread]
    assert kinds == ["user", "reasoning", "reasoning", "text", "tool_call", "tool_call", "reasoning", "text"]
    assert all(v.status == "complete" for v in thread)
    assert thread[-1].content.text == "b.py is safer: it backs off."


async def test_529_overloaded_is_retried_after_retry_after() -> None:
    async with ModelServer([Reply(status=529, retry_after=0.3), ANSWER]) as server:
        events = await run_call(provider(server), REQUEST)
    first, second = server.requests
    assert second.received_at - first.received_at >= 0.3
    (error,) = errors(events)
    assert "overloaded (HTTP 529" in error.message
    assert "retrying" in error.message
    assert isinstance(events[-1], Usage)


async def test_429_honours_retry_after() -> None:
    async with ModelServer([Reply(status=429, retry_after=0.5), FINAL]) as server:
        events = await run_call(provider(server), REQUEST)
    assert server.requests[1].received_at - server.requests[0].received_at >= 0.5
    assert "rate limited (HTTP 429" in errors(events)[0].message


async def test_overloaded_error_event_mid_stream() -> None:
    early = Reply(content=[], stream_error="overloaded_error")
    late = Reply(content=[Say(text="Partly there")], stream_error="overloaded_error")
    async with ModelServer([early, FINAL, late]) as server:
        claude = provider(server)
        retried = await run_call(claude, REQUEST)
        failed = await run_call(claude, REQUEST)
    assert "error in the stream (overloaded_error" in errors(retried)[0].message
    assert isinstance(retried[-1], Usage)
    assert isinstance(failed[-1], Error)
    assert "not retried" in failed[-1].message
    assert len(server.requests) == 3


async def test_a_stream_cut_mid_answer_ends_with_an_error() -> None:
    cut = Reply(content=[Think(text="thinking about it at length", signature="s")], cut_after=5)
    async with ModelServer([cut]) as server:
        events = await run_call(provider(server), REQUEST)
    assert texts(events, Reasoning)
    assert isinstance(events[-1], Error)
    assert "dropped" in events[-1].message


async def test_a_stream_without_message_stop_is_a_failure() -> None:
    async with ModelServer([Reply(content=[Say(text="cut short")], end_after=4)]) as server:
        events = await run_call(provider(server), REQUEST)
    assert isinstance(events[-1], Error)
    assert "no message_stop" in events[-1].message


async def test_401_names_the_environment_variable() -> None:
    async with ModelServer([ANSWER], api_key="sk-ant-right") as server:
        (error,) = await run_call(provider(server, api_key="sk-ant-wrong"), REQUEST)
    assert isinstance(error, Error)
    assert "HTTP 401" in error.message
    assert "set ANTHROPIC_API_KEY" in error.message


async def test_no_key_at_all_names_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")  # no credential profiles either
    async with AnthropicProvider() as claude:
        (error,) = await run_call(claude, REQUEST)
    assert isinstance(error, Error)
    assert "set ANTHROPIC_API_KEY" in error.message


async def test_task_cancellation_ends_with_an_error_event() -> None:
    slow = Reply(content=[Say(text="a b c", chunks=["a", "b", "c"])], stall_after=4, stall=30)
    seen: list[Any] = []
    async with ModelServer([slow]) as server:
        claude = provider(server)

        async def consume() -> None:
            async for event in claude.invoke(REQUEST):
                seen.append(event)

        task = asyncio.create_task(consume())
        while not seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert isinstance(seen[0], Text)
    assert isinstance(seen[-1], Error)
    assert seen[-1].message.startswith("cancelled")
