"""`check_request`: the SDK request types and each API's structural rules; convograph's own request
histories pass them."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from convograph import create_graph, reduce_events
from convograph.projections import project_messages
from convograph.testing import check_request
from tests.test_projections_messages import agent_streams

USER = {"role": "user", "content": "hi"}


def chat(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), "stream": True, **extra}


def claude(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 4096, "messages": list(messages), "stream": True, **extra}


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "f", "input": {}}


def result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}


def test_types_required_unknown_and_nested() -> None:
    assert check_request("chat", chat(USER)) == []
    problems = check_request(
        "chat", {"messages": [{"role": "user", "content": 5}], "stream": True, "temprature": 1}
    )
    assert "body: missing required key 'model'" in problems
    assert "body: unknown key 'temprature' (not in CompletionCreateParamsStreaming)" in problems
    assert any(p.startswith("body.messages[0].content: expected") for p in problems)
    assert check_request("chat", chat(USER, stream_options={"include_usage": "yes"})) == [
        "body.stream_options.include_usage: expected bool, got a string"
    ]
    assert check_request("messages", {"model": "m", "messages": [USER], "stream": True}) == [
        "body: missing required key 'max_tokens'"
    ]
    assert check_request("chat", "nope") == ["body: expected a JSON object, got a string"]  # type: ignore[arg-type]


def test_chat_tool_pairing() -> None:
    answered = chat(
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
    )
    assert check_request("chat", answered) == []
    unanswered = chat(
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        USER,
    )
    assert any("unanswered: ['b']" in p for p in check_request("chat", unanswered))
    stray = chat(USER, {"role": "tool", "tool_call_id": "x", "content": "1"})
    assert any("'x' is not one" in p for p in check_request("chat", stray))
    long_id = chat(
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("c" * 41)]},
        {"role": "tool", "tool_call_id": "c" * 41, "content": "1"},
    )
    assert any("longer than 40" in p for p in check_request("chat", long_id))
    assert any(
        "needs content or tool_calls" in p
        for p in check_request("chat", chat(USER, {"role": "assistant", "content": ""}))
    )
    assert check_request("chat", chat()) == ["messages: at least one message is required"]


def test_messages_rules() -> None:
    ok = claude(
        USER,
        {"role": "assistant", "content": [use("t1")]},
        {"role": "user", "content": [result("t1"), {"type": "text", "text": "go on"}]},
    )
    assert check_request("messages", ok) == []
    assert "messages[0]: the first message must use the 'user' role" in check_request(
        "messages", claude({"role": "assistant", "content": "hi"})
    )
    missing = claude(USER, {"role": "assistant", "content": [use("t1")]}, USER)
    assert any(
        "without tool_result blocks immediately after: ['t1']" in p
        for p in check_request("messages", missing)
    )
    unexpected = claude(USER, {"role": "user", "content": [result("zz")]})
    assert any("unexpected tool_use_id" in p for p in check_request("messages", unexpected))
    late = claude(
        USER,
        {"role": "assistant", "content": [use("t1")]},
        {"role": "user", "content": [{"type": "text", "text": "x"}, result("t1")]},
    )
    assert any("must come first" in p for p in check_request("messages", late))
    assert any(
        "must match" in p
        for p in check_request("messages", claude(USER, {"role": "assistant", "content": [use("a/b")]}))
    )
    assert any(
        "non-empty" in p
        for p in check_request(
            "messages", claude({"role": "user", "content": [{"type": "text", "text": ""}]})
        )
    )
    # consecutive turns of one role are merged before pairing, as the API does
    merged = claude(
        USER, {"role": "assistant", "content": [use("t1")]}, {"role": "user", "content": [result("t1")]}, USER
    )
    assert check_request("messages", merged) == []


def test_messages_thinking_rules() -> None:
    thinking = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    signed = {"type": "thinking", "thinking": "hmm", "signature": "s"}
    ok = claude(
        USER,
        {"role": "assistant", "content": [signed, use("t1")]},
        {"role": "user", "content": [result("t1")]},
        **thinking,
    )
    assert check_request("messages", ok) == []
    bare = claude(
        USER,
        {"role": "assistant", "content": [use("t1")]},
        {"role": "user", "content": [result("t1")]},
        **thinking,
    )
    assert any("must start with a thinking" in p for p in check_request("messages", bare))
    small = claude(USER, thinking={"type": "enabled", "budget_tokens": 512})
    assert "thinking.budget_tokens: must be >= 1024" in check_request("messages", small)
    large = claude(USER, thinking={"type": "enabled", "budget_tokens": 5000})
    assert "thinking.budget_tokens: must be less than max_tokens" in check_request("messages", large)


def test_responses_rules() -> None:
    ok = {
        "model": "m",
        "stream": True,
        "input": [
            USER,
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "1"},
        ],
    }
    assert check_request("responses", ok) == []
    orphan = {
        "model": "m",
        "stream": True,
        "input": [USER, {"type": "function_call_output", "call_id": "c", "output": "1"}],
    }
    assert check_request("responses", orphan) == [
        "input[1]: no tool call found for function call output with call_id 'c'"
    ]


@given(agent_streams())
def test_convograph_histories_pass_the_checks(events: list[dict[str, Any]]) -> None:
    """What `project_messages` builds is what the APIs accept (when it starts with a user turn,
    which a conversation that an agent answers always does)."""
    graph = reduce_events(create_graph(), events)
    openai_history = project_messages(graph, format="openai")
    if openai_history and openai_history[0]["role"] == "user":
        assert check_request("chat", chat(*openai_history)) == []
    anthropic_history = project_messages(graph, format="anthropic")
    if anthropic_history and anthropic_history[0]["role"] == "user":
        assert check_request("messages", claude(*anthropic_history)) == []
