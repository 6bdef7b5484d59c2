"""`convograph.testing.providers.ScriptedProvider`: the provider event rules, and request checks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from convograph.events import Error, Event, Reasoning, Text, ToolCall, Usage
from convograph.harness import ModelRequest, Provider, ToolSpec
from convograph.testing.providers import (
    ScriptedCall,
    ScriptedProvider,
    ScriptedTurn,
    check_request,
    parse_arguments,
)

HELLO: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]


async def play(provider: ScriptedProvider, messages: list[dict[str, Any]] = HELLO, **kw: Any) -> list[Event]:
    request = ModelRequest(model="m", messages=messages, parent_id="agent-run", **kw)
    return [event async for event in provider.invoke(request)]


async def test_a_turn_follows_the_provider_event_rules() -> None:
    provider = ScriptedProvider(
        [
            ScriptedTurn(
                reasoning="Think first.",
                signature="sig-1",
                text="Hello there, world!",
                tool_calls=[ScriptedCall("look", {"q": "x"}, id="c1"), ScriptedCall("look", '{"q": "y"}')],
                usage=(12, 7),
            )
        ],
        chunk_size=8,
    )
    assert isinstance(provider, Provider)
    events = await play(provider)
    assert [e.type for e in events] == ["reasoning"] * 2 + ["text"] * 3 + ["tool_call"] * 2 + ["usage"]
    assert len({e.run_id for e in events}) == 1  # type: ignore[union-attr]
    assert {e.parent_id for e in events} == {"agent-run"}
    reasoning = [e for e in events if isinstance(e, Reasoning)]
    texts = [e for e in events if isinstance(e, Text)]
    assert len({e.id for e in reasoning}) == 1
    assert len({e.id for e in texts}) == 1
    assert reasoning[0].id != texts[0].id
    assert [r.signature for r in reasoning] == [None, "sig-1"]
    assert "".join(t.content for t in texts) == "Hello there, world!"
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.id, c.input) for c in calls] == [("c1", {"q": "x"}), ("call_1", {"q": "y"})]
    usage = events[-1]
    assert isinstance(usage, Usage)
    assert (usage.input_tokens, usage.output_tokens) == (12, 7)


async def test_each_call_is_a_fresh_run_and_plays_the_next_turn() -> None:
    provider = ScriptedProvider(
        [ScriptedTurn(text="one"), lambda request: ScriptedTurn(text=f"{len(request.messages)}")]
    )
    first, second = await play(provider), await play(provider)
    assert first[0].run_id != second[0].run_id  # type: ignore[union-attr]
    assert [e.content for e in second if isinstance(e, Text)] == ["1"]
    assert provider.remaining == 0
    assert len(provider.requests) == 2
    ran_out = await play(provider)
    assert isinstance(ran_out[0], Error)
    assert "no turn left (2 played)" in ran_out[0].message


async def test_errors_stop_the_call() -> None:
    provider = ScriptedProvider(
        [ScriptedTurn(text="part", error="overloaded", tool_calls=[ScriptedCall("x")])]
    )
    events = await play(provider)
    assert [e.type for e in events] == ["text", "error"]


async def test_a_hanging_turn_waits_until_the_consumer_stops() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="so far", hang=True)])
    request = ModelRequest(model="m", messages=HELLO)
    stream = provider.invoke(request)
    first = await anext(stream)
    assert isinstance(first, Text)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(stream), 0.05)


async def test_auto_usage_estimates_from_the_request_and_answer() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="x" * 40)])
    usage = (await play(provider))[-1]
    assert isinstance(usage, Usage)
    assert usage.output_tokens == 10
    assert usage.input_tokens > 0


def test_malformed_arguments_become_a_parse_error_input() -> None:
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("") == {}
    bad = parse_arguments('{"a": ')
    assert bad["__toolParseError"] is True
    assert bad["rawArguments"] == '{"a": '
    assert "Expecting value" in bad["parseError"]
    assert parse_arguments("[1]")["parseError"] == "expected a JSON object, got list"


async def test_an_invalid_request_is_answered_with_an_error_like_a_400() -> None:
    provider = ScriptedProvider([ScriptedTurn(text="never")])
    events = await play(provider, [{"role": "tool", "tool_call_id": "x", "content": "r"}])
    assert [e.type for e in events] == ["error"]
    provider_a = ScriptedProvider([ScriptedTurn(text="never")], message_format="anthropic")
    events = await play(provider_a, [{"role": "assistant", "content": "hi"}])
    assert isinstance(events[0], Error)
    assert (
        events[0].message
        == "invalid request: messages[0]: expected role 'user', got 'assistant' (roles alternate, user first)"
    )
    assert provider_a.remaining == 1  # the turn was not used


def _request(messages: list[dict[str, Any]], tools: list[ToolSpec] | None = None) -> ModelRequest:
    return ModelRequest(model="m", messages=messages, tools=tools or [])


def test_openai_rules() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    good = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    assert check_request(_request(good), "openai") is None
    assert check_request(_request([]), "openai") == "messages must not be empty"
    assert "have no tool message" in str(check_request(_request(good[:2]), "openai"))
    assert "answers no preceding tool call" in str(check_request(_request([good[0], good[2]]), "openai"))
    bad_args = [
        good[0],
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{**call, "function": {"name": "f", "arguments": "{"}}],
        },
        good[2],
    ]
    assert "no JSON arguments" in str(check_request(_request(bad_args), "openai"))
    spec = ToolSpec("f", "", {"type": "object"})
    assert "unique" in str(check_request(_request(good, [spec, spec]), "openai"))


def test_anthropic_rules() -> None:
    use = {"type": "tool_use", "id": "tu_1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "tu_1", "content": "r"}
    good = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}, use]},
        {"role": "user", "content": [result, {"type": "text", "text": "more"}]},
    ]
    assert check_request(_request(good), "anthropic") is None
    assert "have no tool_result" in str(check_request(_request(good[:2]), "anthropic"))
    late = [*good[:2], {"role": "user", "content": [{"type": "text", "text": "more"}, result]}]
    assert "first in the message" in str(check_request(_request(late), "anthropic"))
    slash = [good[0], {"role": "assistant", "content": [{**use, "id": "run/1"}]}, good[2]]
    assert "does not match" in str(check_request(_request(slash), "anthropic"))
    empty = [{"role": "user", "content": [{"type": "text", "text": ""}]}]
    assert "must not be empty" in str(check_request(_request(empty), "anthropic"))
    assert "roles alternate" in str(check_request(_request([good[0], good[0]]), "anthropic"))
