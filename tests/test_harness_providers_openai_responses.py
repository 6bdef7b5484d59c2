"""The OpenAI Responses provider, driven through the real ``openai`` SDK against the scripted model
server, plus the model-spec factory."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from convograph.events import Error, Reasoning, ToolCall, Usage
from convograph.harness import ModelRequest, ToolSpec
from convograph.harness.providers import (
    AnthropicProvider,
    OpenAIChatProvider,
    OpenAIResponsesProvider,
    make_provider,
    parse_model_spec,
)
from convograph.harness.providers.openai_responses import responses_input
from convograph.harness.retry import RetryPolicy
from convograph.testing import ModelServer, Reply, Say, ScriptUsage, Think, ToolUse, check_request
from tests.support.providers import agent_record, errors, projections, run_call, texts

FAST = RetryPolicy(base_delay=0.01, max_delay=0.05)
ADD = ToolSpec("add", "Add two numbers.", {"type": "object", "properties": {"a": {"type": "number"}}})
REQUEST = ModelRequest(
    model="gpt-test",
    messages=[{"role": "user", "content": "Add 2 and 3, and 4 and 5."}],
    system="Use the tools.",
    tools=[ADD],
    parent_id="agent-run",
    max_tokens=500,
    options={"reasoning": {"summary": "auto"}},
)
ANSWER = Reply(
    content=[
        Think(text="Two additions: call add twice."),
        Say(text="Adding."),
        ToolUse(name="add", arguments={"a": 2, "b": 3}),
        ToolUse(name="add", arguments={"a": 4, "b": 5}),
    ],
    usage=ScriptUsage(input_tokens=90, output_tokens=25, cache_read_tokens=32),
)
MADE: list[OpenAIResponsesProvider] = []


def provider(server: ModelServer, **kwargs: Any) -> OpenAIResponsesProvider:
    kwargs.setdefault("api_key", "sk-test")
    kwargs.setdefault("retry", FAST)
    made = OpenAIResponsesProvider(base_url=server.openai_base_url, **kwargs)
    MADE.append(made)
    return made


@pytest.fixture(autouse=True)
async def _close_clients() -> Any:
    yield
    while MADE:
        await MADE.pop().aclose()


async def test_summary_text_parallel_calls_and_usage() -> None:
    async with ModelServer([ANSWER]) as server:
        events = await run_call(provider(server), REQUEST)
    assert list(texts(events, Reasoning).values()) == ["Two additions: call add twice."]
    assert list(texts(events).values()) == ["Adding."]
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.id, c.input) for c in calls] == [
        ("call_0000_00", {"a": 2, "b": 3}),
        ("call_0000_01", {"a": 4, "b": 5}),
    ]
    usage = events[-1]
    assert isinstance(usage, Usage)
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (90, 25, 32)
    run_id = events[0].run_id
    assert [e.event_id for e in events] == [f"{run_id}:{n}" for n in range(len(events))]


async def test_requests_and_the_next_turn_are_accepted() -> None:
    async with ModelServer([ANSWER, Reply(content=[Say(text="5 and 9.")])]) as server:
        responses = provider(server)
        first = await run_call(responses, REQUEST)
        views = projections(agent_record("Add 2 and 3, and 4 and 5.", [first]))
        history = views["openai"]
        second = await run_call(responses, _with(REQUEST, history))
    assert [v.content.kind for v in views["thread"]] == [
        "user",
        "reasoning",
        "text",
        "tool_call",
        "tool_call",
    ]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool"]
    assert list(texts(second).values()) == ["5 and 9."]
    for record in server.requests:
        assert record.problems == []
        assert check_request("responses", record.body) == []
    body = server.requests[0].body
    assert body["instructions"] == "Use the tools."
    assert body["max_output_tokens"] == 500
    assert body["reasoning"] == {"summary": "auto"}
    assert body["tools"][0] == {
        "type": "function",
        "name": "add",
        "description": "Add two numbers.",
        "parameters": dict(ADD.parameters),
        "strict": False,
    }
    kinds = [item.get("type", "message") for item in server.requests[1].body["input"]]
    assert kinds == [
        "message",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]


def _with(request: ModelRequest, messages: list[dict[str, Any]]) -> ModelRequest:
    return ModelRequest(
        model=request.model, messages=messages, tools=request.tools, parent_id=request.parent_id
    )


def test_input_conversion_of_content_parts() -> None:
    messages = [
        {"role": "system", "content": "sys"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {
                    "type": "file",
                    "file": {"file_data": "data:application/pdf;base64,BBBB", "filename": "doc.pdf"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    items = responses_input(messages)
    body = {"model": "m", "input": items, "stream": True}
    assert check_request("responses", body) == []
    assert items[1]["content"][1] == {
        "type": "input_image",
        "image_url": "data:image/png;base64,AAAA",
        "detail": "auto",
    }
    assert items[2] == {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    assert items[3] == {"type": "function_call_output", "call_id": "c1", "output": "done"}


async def test_rate_limit_then_failure_events() -> None:
    script = [
        Reply(status=429, retry_after=0.3),
        Reply(content=[], stream_error="server_error"),
        ANSWER,
        Reply(content=[Say(text="half an answer")], stream_error="server_error"),
    ]
    async with ModelServer(script) as server:
        responses = provider(server)
        recovered = await run_call(responses, REQUEST)
        failed = await run_call(responses, REQUEST)
    assert server.requests[1].received_at - server.requests[0].received_at >= 0.3
    first, second = errors(recovered)
    assert "rate limited (HTTP 429" in first.message
    assert "error in the stream (server_error" in second.message
    assert "retrying" in second.message
    assert isinstance(recovered[-1], Usage)
    assert isinstance(failed[-1], Error)
    assert "not retried" in failed[-1].message


async def test_cut_and_early_end() -> None:
    script = [
        Reply(content=[Say(text="some words here")], cut_after=6),
        Reply(content=[Say(text="x y z")], end_after=6),
    ]
    async with ModelServer(script) as server:
        responses = provider(server)
        cut = await run_call(responses, REQUEST)
        ended = await run_call(responses, REQUEST)
    assert "dropped" in cut[-1].message  # type: ignore[union-attr]
    assert "no response.completed" in ended[-1].message  # type: ignore[union-attr]


async def test_401_names_the_environment_variable() -> None:
    async with ModelServer([ANSWER], api_key="sk-right") as server:
        (error,) = await run_call(provider(server, api_key="sk-wrong"), REQUEST)
    assert isinstance(error, Error)
    assert "set OPENAI_API_KEY" in error.message


def test_model_specs() -> None:
    assert str(parse_model_spec("openai:llama3.1:8b")) == "openai:llama3.1:8b"
    assert parse_model_spec("openai:llama3.1:8b").model == "llama3.1:8b"
    assert parse_model_spec("anthropic:claude-x").api == "anthropic"
    with pytest.raises(ValueError, match="unknown API 'gemini'"):
        parse_model_spec("gemini:pro")
    with pytest.raises(ValueError, match="must be API:MODEL"):
        parse_model_spec("gpt-4o")
    chat, model = make_provider("openai:gpt-x", base_url="http://localhost:11434/v1")
    assert isinstance(chat, OpenAIChatProvider)
    assert model == "gpt-x"
    assert isinstance(make_provider("openai-responses:o9")[0], OpenAIResponsesProvider)
    claude, _ = make_provider("anthropic:claude-x", api_key="k")
    assert isinstance(claude, AnthropicProvider)
    assert claude.message_format == "anthropic"


async def test_task_cancellation_ends_with_an_error_event() -> None:
    slow = Reply(content=[Say(text="abc", chunks=["a", "b", "c"])], stall_after=6, stall=30)
    seen: list[Any] = []
    async with ModelServer([slow]) as server:
        responses = provider(server)

        async def consume() -> None:
            async for event in responses.invoke(REQUEST):
                seen.append(event)

        task = asyncio.create_task(consume())
        while not seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert isinstance(seen[-1], Error)
    assert seen[-1].message.startswith("cancelled")
    assert seen[-1].run_id == seen[0].run_id
