"""The OpenAI Chat Completions provider, driven through the real ``openai`` SDK against the
scripted model server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from convograph.events import Error, Reasoning, Text, ToolCall, Usage
from convograph.harness import ModelRequest, ToolSpec
from convograph.harness.providers.openai_chat import OpenAIChatProvider
from convograph.harness.retry import RetryPolicy, Timeouts
from convograph.testing import ModelServer, Reply, Say, ScriptUsage, Think, ToolUse, check_request
from tests.support.providers import agent_record, errors, projections, run_call, texts

FAST = RetryPolicy(base_delay=0.01, max_delay=0.05)
WEATHER = ToolSpec(
    "weather", "Weather for a city.", {"type": "object", "properties": {"city": {"type": "string"}}}
)
REQUEST = ModelRequest(
    model="gpt-test",
    messages=[{"role": "user", "content": "Weather in Paris and Rome?"}],
    system="Be brief.",
    tools=[WEATHER],
    parent_id="agent-run",
    max_tokens=256,
)
ANSWER = Reply(
    content=[
        Think(text="Two cities, so two calls."),
        Say(text="Checking both cities."),
        ToolUse(name="weather", arguments={"city": "Paris"}),
        ToolUse(name="weather", arguments={"city": "Rome"}),
    ],
    usage=ScriptUsage(input_tokens=200, output_tokens=40, cache_read_tokens=128),
)

MADE: list[OpenAIChatProvider] = []


def provider(server: ModelServer, **kwargs: Any) -> OpenAIChatProvider:
    kwargs.setdefault("api_key", "sk-test")
    kwargs.setdefault("retry", FAST)
    made = OpenAIChatProvider(base_url=server.openai_base_url, **kwargs)
    MADE.append(made)
    return made


@pytest.fixture(autouse=True)
async def _close_clients() -> Any:
    """Close the SDK clients made by `provider` when the test ends (their connections belong to the
    test's event loop)."""
    yield
    while MADE:
        await MADE.pop().aclose()


async def test_streams_reasoning_text_parallel_calls_and_usage() -> None:
    async with ModelServer([ANSWER]) as server:
        events = await run_call(provider(server), REQUEST)
    run_ids = {e.run_id for e in events}
    assert len(run_ids) == 1
    assert {e.parent_id for e in events} == {"agent-run"}
    run_id = run_ids.pop()
    assert [e.event_id for e in events] == [f"{run_id}:{n}" for n in range(len(events))]
    assert list(texts(events, Reasoning).values()) == ["Two cities, so two calls."]
    assert list(texts(events).values()) == ["Checking both cities."]
    assert len({e.id for e in events if isinstance(e, Text)}) == 1  # one id across the block's chunks
    assert sum(isinstance(e, Text) for e in events) > 1
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.id, c.name, c.input) for c in calls] == [
        ("call_0000_00", "weather", {"city": "Paris"}),
        ("call_0000_01", "weather", {"city": "Rome"}),
    ]
    usage = events[-1]
    assert isinstance(usage, Usage)
    assert (usage.input_tokens, usage.output_tokens) == (200, 40)
    assert usage.cache_read_tokens == 128
    assert usage.cache_creation_tokens is None
    assert isinstance(events[-3], ToolCall)  # tool calls come after the stream, then the usage


async def test_the_request_is_what_the_sdk_types_and_the_api_accept() -> None:
    async with ModelServer([ANSWER]) as server:
        await run_call(provider(server), REQUEST)
    body = server.requests[0].body
    assert check_request("chat", body) == []
    assert server.requests[0].problems == []
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 256  # a custom base URL gets the field local servers read
    assert body["tools"][0]["function"]["name"] == "weather"
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"
    assert server.requests[0].headers["x-stainless-retry-count"] == "0"


async def test_max_completion_tokens_for_openai_itself() -> None:
    chat = OpenAIChatProvider(api_key="sk-test")
    assert "max_completion_tokens" in chat.request_params(REQUEST)
    assert "max_tokens" in OpenAIChatProvider(base_url="http://x/v1").request_params(REQUEST)


async def test_reasoning_field_spelled_reasoning() -> None:
    reply = Reply(content=[Think(text="thinking aloud"), Say(text="done")], reasoning_field="reasoning")
    async with ModelServer([reply]) as server:
        events = await run_call(provider(server), REQUEST)
    assert list(texts(events, Reasoning).values()) == ["thinking aloud"]


async def test_malformed_arguments_become_a_parse_error_input() -> None:
    reply = Reply(content=[ToolUse(name="weather", arguments='{"city": "Par')])
    async with ModelServer([reply]) as server:
        events = await run_call(provider(server), REQUEST)
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert call.input["__toolParseError"] is True
    assert call.input["rawArguments"] == '{"city": "Par'
    assert "Unterminated string" in call.input["parseError"]


async def test_429_waits_at_least_retry_after_then_succeeds() -> None:
    async with ModelServer([Reply(status=429, retry_after=0.4), ANSWER]) as server:
        events = await run_call(provider(server), REQUEST)
    first, second = server.requests
    assert second.received_at - first.received_at >= 0.4
    (error,) = errors(events)
    assert "rate limited (HTTP 429" in error.message
    assert "retrying in" in error.message
    assert "(attempt 1 of 4)" in error.message
    assert error.run_id != events[-1].run_id  # each attempt is its own run
    assert isinstance(events[-1], Usage)


async def test_server_errors_retry_until_the_attempts_run_out() -> None:
    script = [Reply(status=500), Reply(status=503), Reply(status=502)]
    async with ModelServer(script) as server:
        events = await run_call(provider(server, retry=RetryPolicy(max_attempts=3, base_delay=0.01)), REQUEST)
    assert len(server.requests) == 3
    messages = [e.message for e in events]
    assert all(isinstance(e, Error) for e in events)
    assert len(events) == 3
    assert "retrying" in messages[0]
    assert "attempt 2 of 3" in messages[1]
    assert "HTTP 502" in messages[2]
    assert "giving up" in messages[2]


async def test_a_stream_cut_after_text_is_not_retried() -> None:
    script = [Reply(content=[Say(text="The weather in Paris is")], cut_after=3), ANSWER]
    async with ModelServer(script) as server:
        events = await run_call(provider(server), REQUEST)
    assert len(server.requests) == 1
    assert "".join(texts(events).values()) != ""
    assert isinstance(events[-1], Error)
    assert "dropped" in events[-1].message
    assert "not retried" in events[-1].message


async def test_a_stream_cut_before_any_content_is_retried() -> None:
    script = [Reply(content=[Say(text="lost")], cut_after=1), ANSWER]
    async with ModelServer(script) as server:
        events = await run_call(provider(server), REQUEST)
    assert len(server.requests) == 2
    assert "retrying" in errors(events)[0].message
    assert isinstance(events[-1], Usage)


async def test_a_stream_that_ends_early_without_finish_reason_is_a_failure() -> None:
    # A complete HTTP body that stops before the model finished: role chunk and one text chunk.
    async with ModelServer([Reply(content=[Say(text="half", chunks=["ha", "lf"])], end_after=2)]) as server:
        events = await run_call(provider(server), REQUEST)
    assert list(texts(events).values()) == ["ha"]
    assert isinstance(events[-1], Error)
    assert "no finish_reason" in events[-1].message
    assert len(server.requests) == 1  # text had streamed: not retried


async def test_401_names_the_environment_variable() -> None:
    async with ModelServer([ANSWER], api_key="sk-right") as server:
        events = await run_call(provider(server, api_key="sk-wrong"), REQUEST)
    (error,) = events
    assert isinstance(error, Error)
    assert "OPENAI_API_KEY" in error.message
    assert "HTTP 401" in error.message
    assert len(server.requests) == 1  # not retried


async def test_no_key_at_all_names_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    async with OpenAIChatProvider() as chat:
        (error,) = await run_call(chat, REQUEST)
    assert isinstance(error, Error)
    assert "set OPENAI_API_KEY" in error.message


async def test_first_token_timeout_is_retried() -> None:
    slow = Reply(content=[Say(text="late")], first_delay=2.0)
    timeouts = Timeouts(first_token=0.2)
    async with ModelServer([slow, ANSWER]) as server:
        events = await run_call(provider(server, timeouts=timeouts), REQUEST)
    assert "no response within 0.2 s" in errors(events)[0].message
    assert isinstance(events[-1], Usage)


async def test_task_cancellation_ends_with_an_error_event_then_cancels() -> None:
    slow = Reply(
        content=[Say(text="one two three", chunks=["one ", "two ", "three"])], stall_after=2, stall=30
    )
    seen: list[Any] = []
    async with ModelServer([slow]) as server:
        chat = provider(server)

        async def consume() -> None:
            async for event in chat.invoke(REQUEST):
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
    assert seen[-1].run_id == seen[0].run_id


async def test_aclose_returns_the_event_that_ends_the_call() -> None:
    slow = Reply(content=[Say(text="abc", chunks=["a", "b", "c"])], stall_after=2, stall=30)
    async with ModelServer([slow]) as server:
        call = provider(server).invoke(REQUEST)
        first = await call.__anext__()
        ended = await call.aclose()
    assert isinstance(first, Text)
    assert isinstance(ended, Error)
    assert "cancelled" in ended.message
    assert ended.run_id == first.run_id
    assert ended.event_id == f"{first.run_id}:1"


async def test_events_project_into_one_assistant_turn_of_the_agent() -> None:
    async with ModelServer(
        [Reply(status=429, retry_after=0), ANSWER, Reply(content=[Say(text="Sunny, both.")])]
    ) as server:
        chat = provider(server)
        first = await run_call(chat, REQUEST)
        second = await run_call(chat, REQUEST)
    views = projections(agent_record("Weather in Paris and Rome?", [first, second]))
    thread = views["thread"]
    kinds = [v.content.kind for v in thread]
    assert kinds == ["user", "error", "reasoning", "text", "tool_call", "tool_call", "text"]
    by_kind = {v.content.kind: v for v in thread}
    assert by_kind["error"].status == "error"  # the failed attempt's own run
    assert by_kind["text"].status == "complete"
    assert by_kind["reasoning"].status == "complete"
    history = views["openai"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    assert history[1]["content"] == "Checking both cities."
    assert len(history[1]["tool_calls"]) == 2
    assert history[-1]["content"] == "Sunny, both."


async def test_a_stream_cut_while_only_tool_arguments_streamed_is_retried() -> None:
    cut = Reply(content=[ToolUse(name="weather", arguments={"city": "Paris"})], cut_after=3)
    async with ModelServer([cut, ANSWER]) as server:
        events = await run_call(provider(server), REQUEST)
    assert len(server.requests) == 2
    assert "retrying" in errors(events)[0].message
    assert isinstance(events[-1], Usage)


async def test_aclose_after_a_cancellation_re_raises_it() -> None:
    slow = Reply(content=[Say(text="abc", chunks=["a", "b", "c"])], stall_after=2, stall=30)
    async with ModelServer([slow]) as server:
        call = provider(server).invoke(REQUEST)
        await call.__anext__()
        reader = asyncio.create_task(call.__anext__())
        await asyncio.sleep(0.2)
        reader.cancel()
        ended = await reader  # the cancelled pull returns the event that records the cancellation
        with pytest.raises(asyncio.CancelledError):
            await call.aclose()
    assert isinstance(ended, Error)
    assert ended.message.startswith("cancelled")


async def test_an_error_chunk_before_any_content_is_retried() -> None:
    async with ModelServer([Reply(content=[], stream_error="server_error"), ANSWER]) as server:
        events = await run_call(provider(server), REQUEST)
    assert "error in the stream (server_error" in errors(events)[0].message
    assert isinstance(events[-1], Usage)


async def test_a_call_without_an_id_gets_one() -> None:
    """Some OpenAI-compatible servers send tool calls without ids; the agent needs one to pair the
    result with."""
    async with ModelServer([Reply(content=[ToolUse(name="weather", arguments={}, id="")])]) as server:
        events = await run_call(provider(server), REQUEST)
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert call.id.startswith("call_")
    assert len(call.id) == 29
