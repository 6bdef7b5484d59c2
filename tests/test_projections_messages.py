"""Messages projection: seed shapes, repairs, and validity against the official SDK request types."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pydantic
import pytest
from anthropic.types import ContentBlockParam, MessageParam
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam

from convograph import create_graph, reduce_events, to_jsonable
from convograph.projections import project_messages
from convograph.projections.history import (
    EMPTY_RESULT_TEXT,
    EMPTY_USER_TEXT,
    OPENING_USER_TEXT,
    PLACEHOLDER_OUTPUT,
    is_anthropic_tool_id,
    safe_tool_id,
    stand_in_tool_id,
)

STRICT = pydantic.ConfigDict(extra="forbid")
OPENAI_MESSAGE = pydantic.TypeAdapter(ChatCompletionMessageParam, config=STRICT)
ANTHROPIC_MESSAGE = pydantic.TypeAdapter(MessageParam, config=STRICT)
ANTHROPIC_BLOCK = pydantic.TypeAdapter(ContentBlockParam, config=STRICT)


def _materialise(value: Any) -> Any:
    """Pydantic validates ``Iterable`` fields lazily: drain them so every item is checked."""
    if isinstance(value, dict):
        return {key: _materialise(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_materialise(item) for item in value]
    if hasattr(value, "__next__"):
        return [_materialise(item) for item in value]
    return value


def assert_valid_openai(messages: list[dict[str, Any]]) -> None:
    """SDK types, plus the API's rules: a user message first (as Anthropic requires: one history
    for every provider behind the Chat Completions API), every call answered right after its
    message, no empty content (user, assistant text, tool result, text part)."""
    assert not messages or messages[0]["role"] == "user", "a history opens with a user message"
    for message in messages:
        _materialise(OPENAI_MESSAGE.validate_python(message))
        content = message.get("content")
        if isinstance(content, list):
            assert content, f"empty content: {message}"
            assert all(part.get("text", "x") for part in content), f"empty text part: {message}"
        elif message["role"] != "assistant" or content is not None:
            assert content, f"empty content: {message}"
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message["role"] != "tool", f"tool message without a call at {i}"
        if message["role"] == "assistant":
            assert message["content"] is not None or message.get("tool_calls"), message
            calls = [call["id"] for call in message.get("tool_calls", [])]
            assert len(set(calls)) == len(calls)
            for call in message.get("tool_calls", []):
                assert len(call["id"]) <= 40
                json.loads(call["function"]["arguments"])
            answered = []
            j = i + 1
            while j < len(messages) and messages[j]["role"] == "tool":
                answered.append(messages[j]["tool_call_id"])
                j += 1
            assert sorted(answered) == sorted(calls), (calls, answered)
            i = j
        else:
            i += 1


def assert_valid_anthropic(messages: list[dict[str, Any]]) -> None:
    """SDK types, a user message first, alternation, tool_use/tool_result pairing, id pattern, no
    empty message / text block / tool result, thinking blocks in assistant messages only."""
    assert not messages or messages[0]["role"] == "user", "the first message must be a user message"
    for message in messages:
        _materialise(ANTHROPIC_MESSAGE.validate_python(message))
        assert message["content"], "empty message"
        for block in message["content"]:
            _materialise(ANTHROPIC_BLOCK.validate_python(block))
            if block["type"] == "text":
                assert block["text"], "empty text block"
            elif block["type"] == "tool_result":
                assert block["content"], "empty tool result"
            elif block["type"] in ("thinking", "redacted_thinking"):
                assert message["role"] == "assistant", "thinking outside an assistant message"
    for a, b in itertools.pairwise(messages):
        assert a["role"] != b["role"], "roles must alternate"
    for i, message in enumerate(messages):
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"]
        if message["role"] == "assistant":
            types = [b["type"] for b in message["content"]]
            if uses:  # tool_use blocks close the message
                assert all(t == "tool_use" for t in types[types.index("tool_use") :])
                nxt = messages[i + 1]
                answered = [b["tool_use_id"] for b in nxt["content"] if b["type"] == "tool_result"]
                assert sorted(answered) == sorted(uses)
                lead = [b["type"] for b in nxt["content"]][: len(answered)]
                assert lead == ["tool_result"] * len(answered), "tool results lead the next message"
            for use in message["content"]:
                if use["type"] == "tool_use":
                    assert pydantic.TypeAdapter(str).validate_python(use["id"])
                    assert all(c.isalnum() or c in "_-" for c in use["id"])
                    assert isinstance(use["input"], dict)
        elif results:
            prev = messages[i - 1]
            assert prev["role"] == "assistant"
            previous_uses = [b["id"] for b in prev["content"] if b["type"] == "tool_use"]
            assert sorted(results) == sorted(previous_uses), "result without its call"


def graph_of(events: list[dict[str, Any]]) -> Any:
    return reduce_events(create_graph(), events)


# --- seed shapes -------------------------------------------------------------------------------------

BASIC = [
    {"type": "user", "runId": "u1", "content": "List files"},
    {"type": "harness_start", "runId": "a1", "parentId": "u1:user"},
    {"type": "text", "runId": "a1", "id": "t1", "content": "I'll list "},
    {"type": "text", "runId": "a1", "id": "t1", "content": "the files"},
    {"type": "tool_call", "runId": "a1", "id": "tc1", "name": "bash", "input": {"command": "ls"}},
    {"type": "tool_result", "runId": "a1", "id": "tc1", "name": "bash", "output": {"context": "a\nb"}},
    {"type": "text", "runId": "a1", "id": "t2", "content": "Two files."},
    {"type": "harness_end", "runId": "a1"},
]


def test_openai_shape_matches_the_seed() -> None:
    messages = project_messages(graph_of(BASIC))
    assert messages == [
        {"role": "user", "content": "List files"},
        {
            "role": "assistant",
            "content": "I'll list the files",
            "tool_calls": [
                {
                    "id": "tc1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command":"ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "tc1", "content": "a\nb"},  # what the model reads: the context
        {"role": "assistant", "content": "Two files."},
    ]
    assert_valid_openai(messages)


def test_gateway_format_keeps_parsed_arguments() -> None:
    messages = project_messages(graph_of(BASIC), format="gateway")
    assert messages[1]["tool_calls"] == [{"id": "tc1", "name": "bash", "arguments": {"command": "ls"}}]
    assert messages[2] == {"role": "tool", "tool_call_id": "tc1", "content": '{"context":"a\\nb"}'}
    assert "tool_calls" not in messages[3]


def test_anthropic_shape() -> None:
    messages = project_messages(graph_of(BASIC), format="anthropic")
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "List files"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll list the files"},
                {"type": "tool_use", "id": "tc1", "name": "bash", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tc1", "content": "a\nb"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Two files."}]},
    ]
    assert_valid_anthropic(messages)


def test_unknown_format_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown message format 'gemini'"):
        project_messages(graph_of(BASIC), format="gemini")


def test_dangling_call_gets_a_neutral_placeholder_and_the_log_is_untouched() -> None:
    events = BASIC[:5]
    graph = graph_of(events)
    before = list(graph.nodes)
    messages = project_messages(graph)
    assert messages[-1] == {"role": "tool", "tool_call_id": "tc1", "content": PLACEHOLDER_OUTPUT}
    assert list(graph.nodes) == before
    anthropic = project_messages(graph, format="anthropic")
    assert anthropic[-1]["content"][0]["is_error"] is True
    assert_valid_openai(messages)
    assert_valid_anthropic(anthropic)


def test_orphan_result_is_dropped_and_denied_call_is_rebuilt_from_its_relay() -> None:
    events = [
        {"type": "user", "runId": "u1", "content": "go"},
        {"type": "harness_start", "runId": "a1", "parentId": "u1:user"},
        {"type": "tool_result", "runId": "a1", "id": "ghost", "name": "bash", "output": "?"},
        {
            "type": "relay",
            "kind": "permission",
            "runId": "a1",
            "id": "r1",
            "toolCallId": "a1/x",
            "tool": "rm",
            "params": {"path": "/"},
        },
        {
            "type": "tool_result",
            "runId": "a1",
            "id": "a1/x",
            "name": "rm",
            "output": {"status": "denied", "reason": "no"},
        },
        {"type": "text", "runId": "a1", "id": "t1", "content": "Denied."},
    ]
    messages = project_messages(graph_of(events))
    calls = [c for m in messages for c in m.get("tool_calls", [])]
    assert [c["function"]["name"] for c in calls] == ["rm"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"path": "/"}
    assert all(m.get("tool_call_id") != "ghost" for m in messages)
    assert_valid_openai(messages)
    anthropic = project_messages(graph_of(events), format="anthropic")
    assert_valid_anthropic(anthropic)
    result = anthropic[2]["content"][0]
    assert result["is_error"] is True
    assert result["tool_use_id"] == safe_tool_id("a1/x", api="anthropic")


def test_subagent_internals_stay_out_of_the_parent_history() -> None:
    events = [
        {"type": "user", "runId": "u1", "content": "search"},
        {"type": "harness_start", "runId": "a1", "parentId": "u1:user"},
        {"type": "tool_call", "runId": "a1", "id": "tc1", "name": "agent", "input": {"task": "x"}},
        {"type": "harness_start", "runId": "s1", "parentId": "tc1"},
        {"type": "text", "runId": "s1", "id": "st", "content": "secret internals"},
        {"type": "tool_call", "runId": "s1", "id": "tc2", "name": "grep", "input": {}},
        {"type": "tool_result", "runId": "s1", "id": "tc2", "name": "grep", "output": "hit"},
        {"type": "harness_end", "runId": "s1"},
        {"type": "tool_result", "runId": "a1", "id": "tc1", "name": "agent", "output": "found it"},
    ]
    for fmt in ("openai", "anthropic", "gateway"):
        dumped = json.dumps(project_messages(graph_of(events), format=fmt))
        assert "secret internals" not in dumped
        assert "tc2" not in dumped
        assert "found it" in dumped


def test_provider_runs_keep_their_turn_order() -> None:
    """Spec §9 #1: each provider call's text stays in its own assistant turn, around the tool call."""
    events = [
        {"type": "harness_start", "runId": "A"},
        {"type": "text", "runId": "P1", "parentId": "A", "id": "x1", "content": "Let me check"},
        {"type": "tool_call", "runId": "A", "id": "A/x", "name": "ls", "input": {}},
        {"type": "tool_result", "runId": "A", "id": "A/x", "name": "ls", "output": "ok"},
        {"type": "text", "runId": "P2", "parentId": "A", "id": "x2", "content": "Done"},
        {"type": "harness_end", "runId": "A"},
    ]
    messages = project_messages(graph_of(events))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["content"] == "Let me check"
    assert messages[3]["content"] == "Done"


def _tool_only_turns(*, parallel: bool = False, relay: bool = False) -> list[dict[str, Any]]:
    """An agent whose model answers twice with tool calls only (usage at each model call's end;
    ``parallel``: the second call comes with the first, no usage between; ``relay``: each call
    asked first), then with text."""
    second_usage = (
        []
        if parallel
        else [{"type": "usage", "runId": "P2", "parentId": "A", "inputTokens": 2, "outputTokens": 1}]
    )
    events: list[dict[str, Any]] = [
        {"type": "user", "runId": "U", "content": "sums"},
        {"type": "harness_start", "runId": "A", "parentId": "U:user"},
        {"type": "usage", "runId": "P1", "parentId": "A", "inputTokens": 1, "outputTokens": 1},
    ]
    for n, tail in ((1, []), (2, second_usage)):
        asks = [
            {
                "type": "relay",
                "kind": "permission",
                "runId": "A",
                "id": f"r{n}",
                "toolCallId": f"A/c{n}",
                "tool": "add",
                "params": {"n": n},
            }
        ]
        events += tail + (asks if relay else [])
        events.append({"type": "tool_call", "runId": "A", "id": f"A/c{n}", "name": "add", "input": {"n": n}})
        if not parallel:
            events.append({"type": "tool_result", "runId": "A", "id": f"A/c{n}", "name": "add", "output": n})
    if parallel:
        events += [
            {"type": "tool_result", "runId": "A", "id": f"A/c{n}", "name": "add", "output": n} for n in (1, 2)
        ]
    events += [
        {"type": "text", "runId": "P3", "parentId": "A", "id": "t", "content": "3"},
        {"type": "usage", "runId": "P3", "parentId": "A", "inputTokens": 3, "outputTokens": 1},
        {"type": "harness_end", "runId": "A"},
    ]
    return events


@pytest.mark.parametrize("relay", [False, True])
def test_consecutive_tool_only_model_calls_stay_apart(relay: bool) -> None:
    """A model call's ``usage`` between two tool calls marks a new model call: two assistant turns,
    each followed by its result (was: one turn holding both calls), in both sources and formats,
    one-shot and kept current by a projector."""
    from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
    from convograph.projections import ConversationProjector

    events = _tool_only_turns(relay=relay)
    conversation = reduce_conversation_events(create_conversation(), events)
    projector = ConversationProjector()
    for event in events:
        projector.apply(event)
    for messages in (
        project_messages(graph_of(events)),
        project_messages(conversation, default_active(conversation)),
        projector.messages(),
    ):
        assert [m["role"] for m in messages] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
        assert [m["tool_calls"][0]["id"] for m in messages if m.get("tool_calls")] == ["A/c1", "A/c2"]
        assert_valid_openai(messages)
    anthropic = project_messages(graph_of(events), format="anthropic")
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert_valid_anthropic(anthropic)


def test_parallel_calls_of_one_model_call_stay_one_turn() -> None:
    events = _tool_only_turns(parallel=True)
    messages = project_messages(graph_of(events))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [call["id"] for call in messages[1]["tool_calls"]] == ["A/c1", "A/c2"]


def test_thinking_survives_for_anthropic_with_its_signature() -> None:
    events = [
        {"type": "user", "runId": "u1", "content": "hi"},
        {
            "type": "reasoning",
            "runId": "a1",
            "parentId": "u1:user",
            "id": "r1",
            "content": "hmm",
            "signature": "sig",
        },
        {"type": "reasoning", "runId": "a1", "id": "r2", "content": "unsigned"},
        {"type": "text", "runId": "a1", "id": "t1", "content": "hello"},
        {"type": "tool_call", "runId": "a1", "id": "c1", "name": "f", "input": 3},
    ]
    messages = project_messages(graph_of(events), format="anthropic")
    blocks = messages[1]["content"]
    # the signed block exactly as sent (the unsigned one after it cannot be sent back: left out)
    assert blocks[0] == {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    assert [block["type"] for block in blocks] == ["thinking", "text", "tool_use"]
    assert blocks[-1] == {"type": "tool_use", "id": "c1", "name": "f", "input": {"input": 3}}
    assert_valid_anthropic(messages)
    assert "reasoning" not in json.dumps(project_messages(graph_of(events)))


THINKING_BLOCKS: list[dict[str, Any]] = [
    {"type": "user", "runId": "u1", "content": "hi"},
    {"type": "reasoning", "runId": "a1", "parentId": "u1:user", "id": "r1", "content": "first "},
    {"type": "reasoning", "runId": "a1", "id": "r1", "content": "block"},
    {"type": "reasoning", "runId": "a1", "id": "r1", "content": "", "signature": "sig-1"},
    {"type": "reasoning", "runId": "a1", "id": "r2", "content": "second block"},
    {"type": "reasoning", "runId": "a1", "id": "r2", "content": "", "signature": "sig-2"},
    {"type": "reasoning", "runId": "a1", "id": "r3", "content": "unsigned "},
    {"type": "reasoning", "runId": "a1", "id": "r4", "content": "notes"},
    {"type": "tool_call", "runId": "a1", "id": "c1", "name": "f", "input": {}},
    {"type": "tool_result", "runId": "a1", "id": "c1", "name": "f", "output": "ok"},
]


def _thinking(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [block for block in messages[1]["content"] if block["type"] == "thinking"]


def test_consecutive_signed_thinking_blocks_stay_apart() -> None:
    """A response with two thinking blocks: each signature covers its own block's text, so the
    thread keeps each signed block a view of its own (unsigned reasoning still merges, the seed's
    rule) and the Anthropic history sends both back verbatim. Flat graph, hypergraph and both
    incremental projectors agree, after every event."""
    from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
    from convograph.projections import project_thread

    expected = [
        {"type": "thinking", "thinking": "first block", "signature": "sig-1"},
        {"type": "thinking", "thinking": "second block", "signature": "sig-2"},
    ]
    graph = graph_of(THINKING_BLOCKS)
    conversation = reduce_conversation_events(create_conversation(), THINKING_BLOCKS)
    active = default_active(conversation)
    for messages in (
        project_messages(graph, format="anthropic"),
        project_messages(conversation, active, format="anthropic"),
    ):
        assert _thinking(messages) == expected
        assert_valid_anthropic(messages)
    texts = [
        (view.content.text, getattr(view.content, "signature", None))
        for view in project_thread(conversation, active)
        if view.content.kind == "reasoning"
    ]
    assert texts == [("first block", "sig-1"), ("second block", "sig-2"), ("unsigned notes", None)]
    flat, hyper = projectors_following(THINKING_BLOCKS)
    assert _thinking(flat.messages("anthropic")) == _thinking(hyper.messages("anthropic")) == expected


def projectors_following(events: list[dict[str, Any]]) -> tuple[Any, Any]:
    """A `ThreadProjector` and a `ConversationProjector` fed ``events``, each checked equal to the
    one-shot thread of its graph / conversation after every event."""
    from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
    from convograph.projections import ConversationProjector, ThreadProjector, project_thread

    flat, hyper = ThreadProjector(), ConversationProjector()
    for n, event in enumerate(events, start=1):
        flat.apply(event)
        hyper.apply(event)
        assert to_jsonable(flat.views) == to_jsonable(project_thread(graph_of(events[:n]))), n
        done = reduce_conversation_events(create_conversation(), events[:n])
        assert to_jsonable(hyper.views) == to_jsonable(project_thread(done, default_active(done))), n
    return flat, hyper


def test_redacted_thinking_goes_back_as_sent() -> None:
    """Anthropic may answer ``thinking``, ``redacted_thinking``, ``text``, ``tool_use``; the next
    request must carry both thinking blocks unchanged. A ``reasoning`` event with ``redactedData``
    is such a block: a thread view of its own, a ``redacted_thinking`` block for Anthropic,
    nothing for OpenAI."""
    from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
    from convograph.projections import ConversationProjector, ThreadProjector, project_thread

    events = [
        *THINKING_BLOCKS[:4],
        {"type": "reasoning", "runId": "a1", "id": "r9", "content": "", "redactedData": "EmwKAhgB"},
        {"type": "text", "runId": "a1", "id": "t1", "content": "Let me look."},
        *THINKING_BLOCKS[-2:],
    ]
    expected = [
        {"type": "thinking", "thinking": "first block", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "EmwKAhgB"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
    ]
    graph = graph_of(events)
    conversation = reduce_conversation_events(create_conversation(), events)
    active = default_active(conversation)
    flat, hyper = ThreadProjector(), ConversationProjector()
    for event in events:
        flat.apply(event)
        hyper.apply(event)
    for messages in (
        project_messages(graph, format="anthropic"),
        project_messages(conversation, active, format="anthropic"),
        flat.messages("anthropic"),
        hyper.messages("anthropic"),
    ):
        assert messages[1]["content"] == expected
        assert_valid_anthropic(messages)
    assert "EmwKAhgB" not in json.dumps(project_messages(graph, format="openai"))
    (redacted,) = [view for view in project_thread(graph) if view.id == "r9"]
    assert to_jsonable(redacted.content) == {
        "kind": "reasoning",
        "text": "",
        "signature": None,
        "redactedData": "EmwKAhgB",
    }
    contents = [to_jsonable(view.content) for view in project_thread(conversation, active)]
    assert contents == [to_jsonable(view.content) for view in project_thread(graph)]


def test_a_thinking_block_signed_after_others_merged_into_it_gets_its_own_view() -> None:
    """Out of order: the signature of the first block arrives after a second block merged into
    it while both were unsigned. The projectors rebuild and agree with the one-shot views."""
    events = [
        {"type": "user", "runId": "u1", "content": "hi"},
        {"type": "reasoning", "runId": "a1", "parentId": "u1:user", "id": "r1", "content": "one"},
        {"type": "reasoning", "runId": "a1", "id": "r2", "content": "two"},
        {"type": "reasoning", "runId": "a1", "id": "r1", "content": "", "signature": "sig-1"},
        {"type": "reasoning", "runId": "a1", "id": "r2", "content": "", "signature": "sig-2"},
    ]
    flat, _ = projectors_following(events)
    assert [view.content.text for view in flat.views[1:]] == ["one", "two"]
    assert flat.rebuilds >= 1


def test_a_history_without_a_user_message_opens_with_a_synthesised_one() -> None:
    """A run nobody asked for (the shared w2-hg workloads: an RLM run with no user event) gives
    a history whose first message is `OPENING_USER_TEXT`, in every format (the Messages API
    rejects a list that opens with an assistant message). Empty user messages read
    `EMPTY_USER_TEXT`; empty tool results `EMPTY_RESULT_TEXT`."""
    from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events

    events = [
        {"type": "harness_start", "runId": "run-0", "agentId": "rlm-0", "maxIterations": 2},
        {"type": "text", "id": "t0", "runId": "run-0", "content": "Reasoning for turn 0..."},
        {"type": "tool_call", "runId": "run-0", "id": "c1", "name": "f", "input": {}},
        {"type": "tool_result", "runId": "run-0", "id": "c1", "name": "f", "output": ""},
        {"type": "user", "runId": "u1", "parentId": "run-0", "content": ""},
        {"type": "text", "id": "t1", "runId": "run-1", "parentId": "u1:user", "content": "Answer."},
        {"type": "harness_end", "runId": "run-0"},
    ]
    conversation = reduce_conversation_events(create_conversation(), events)
    for source in (graph_of(events), conversation):
        active = default_active(source) if source is conversation else None
        anthropic = project_messages(source, active, format="anthropic")
        assert anthropic[0] == {"role": "user", "content": [{"type": "text", "text": OPENING_USER_TEXT}]}
        assert anthropic[2]["content"][0]["content"] == EMPTY_RESULT_TEXT
        assert anthropic[2]["content"][1] == {"type": "text", "text": EMPTY_USER_TEXT}
        assert_valid_anthropic(anthropic)
        openai = project_messages(source, active, format="openai")
        assert openai[0] == {"role": "user", "content": OPENING_USER_TEXT}
        assert openai[2] == {"role": "tool", "tool_call_id": "c1", "content": EMPTY_RESULT_TEXT}
        assert openai[3] == {"role": "user", "content": EMPTY_USER_TEXT}
        assert_valid_openai(openai)
        gateway = project_messages(source, active, format="gateway")
        assert gateway[0] == {"role": "user", "content": OPENING_USER_TEXT}
    assert project_messages(graph_of([]), format="anthropic") == []  # nothing to send yet


def test_distinct_text_streams_stay_paragraphs_apart_in_every_format() -> None:
    """Two text streams of one run (ids t1, t2) merge into one thread view, as the seed says, but
    a request history keeps them apart with a blank line: "First.Second." was what the model saw.
    Chunks of one stream (same id) still join as sent. Flat graph, hypergraph and both projectors."""
    from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events

    events = [
        {"type": "user", "runId": "u1", "content": "go"},
        {"type": "text", "runId": "a1", "parentId": "u1:user", "id": "t1", "content": "First "},
        {"type": "text", "runId": "a1", "id": "t1", "content": "part."},
        {"type": "text", "runId": "a1", "id": "t2", "content": "Second."},
        {"type": "reasoning", "runId": "a1", "id": "r1", "content": "unsigned"},
        {"type": "text", "runId": "a1", "id": "t3", "content": "Third."},
        {"type": "tool_call", "runId": "a1", "id": "c1", "name": "f", "input": {}},
        {"type": "tool_result", "runId": "a1", "id": "c1", "name": "f", "output": "ok"},
    ]
    text = "First part.\n\nSecond.\n\nThird."
    conversation = reduce_conversation_events(create_conversation(), events)
    flat, hyper = projectors_following(events)
    for source, projector in ((graph_of(events), flat), (conversation, hyper)):
        active = default_active(source) if source is conversation else None
        openai = project_messages(source, active, format="openai")
        assert openai[1]["content"] == text
        assert project_messages(source, active, format="gateway")[1]["content"] == text
        anthropic = project_messages(source, active, format="anthropic")
        assert anthropic[1]["content"][0] == {"type": "text", "text": text}  # unsigned thinking left out
        assert projector.messages("openai") == openai
        assert projector.messages("anthropic") == anthropic


def test_user_media_parts_map_to_each_api() -> None:
    events = [
        {
            "type": "user",
            "runId": "u1",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "mediaType": "image/png", "data": "AAAA"},
                {"type": "document", "mediaType": "application/pdf", "data": "BBBB"},
            ],
        },
    ]
    openai = project_messages(graph_of(events))
    assert openai[0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,AAAA"},
    }
    assert_valid_openai(openai)
    anthropic = project_messages(graph_of(events), format="anthropic")
    assert anthropic[0]["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "AAAA",
    }
    assert_valid_anthropic(anthropic)


def test_long_and_namespaced_ids_are_mapped_stably() -> None:
    long_id = "run-" + "x" * 60 + "/call"
    assert len(safe_tool_id(long_id, api="openai")) <= 40
    assert safe_tool_id(long_id, api="openai") == safe_tool_id(long_id, api="openai")
    assert safe_tool_id("a/b", api="anthropic") != safe_tool_id("a_b", api="anthropic")
    assert safe_tool_id("ok_id-1", api="anthropic") == "ok_id-1"


# --- property: any stream gives valid histories ----------------------------------------------------


@st.composite
def agent_streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Streams with interrupted, denied, parallel, nested and orphan tool calls, provider runs,
    reasoning (signed or not), user follow-ups and errors, in protocol-allowed orders."""
    events: list[dict[str, Any]] = []
    counter = [0]

    def fresh(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def agent(run: str, parent: str | None, depth: int) -> None:
        start: dict[str, Any] = {"type": "harness_start", "runId": run}
        if parent is not None:
            start["parentId"] = parent
        events.append(start)
        for _ in range(draw(st.integers(0, 4))):
            action = draw(
                st.sampled_from(
                    [
                        "text",
                        "provider",
                        "reasoning",
                        "calls",
                        "denied",
                        "orphan",
                        "subagent",
                        "error",
                        "user",
                        "repl",
                    ]
                )
            )
            if action == "text":
                events.append(
                    {"type": "text", "runId": run, "id": fresh("t"), "content": draw(st.text(max_size=5))}
                )
            elif action == "provider":
                p = fresh("p")
                events.append(
                    {"type": "text", "runId": p, "parentId": run, "id": fresh("t"), "content": "hi"}
                )
            elif action == "reasoning":  # one or more thinking blocks in a row, as in one response
                for _ in range(draw(st.integers(1, 3))):
                    reasoning_id = fresh("r")
                    event: dict[str, Any] = {
                        "type": "reasoning",
                        "runId": run,
                        "id": reasoning_id,
                        "content": f"th-{reasoning_id}",
                    }
                    signed = draw(st.sampled_from(["no", "at once", "later", "redacted"]))
                    if signed == "at once":
                        event["signature"] = f"sig-{reasoning_id}"
                    elif signed == "redacted":  # Anthropic's redacted_thinking: no text, an opaque payload
                        event.update(content="", redactedData=f"opaque-{reasoning_id}")
                    events.append(event)
                    if signed == "later":  # as providers send it: a last chunk of its own
                        events.append(
                            {
                                "type": "reasoning",
                                "runId": run,
                                "id": reasoning_id,
                                "content": "",
                                "signature": f"sig2-{reasoning_id}",
                            }
                        )
            elif action == "calls":
                ids = [f"{run}/{fresh('c')}" for _ in range(draw(st.integers(1, 3)))]
                for call in ids:
                    events.append(
                        {
                            "type": "tool_call",
                            "runId": run,
                            "id": call,
                            "name": "exec",
                            "input": draw(st.sampled_from([{"a": 1}, None, "raw", [1]])),
                        }
                    )
                answered = [c for c in ids if draw(st.booleans())]  # the rest are interrupted
                for call in draw(st.permutations(answered)):
                    events.append(
                        {
                            "type": "tool_result",
                            "runId": run,
                            "id": call,
                            "name": "exec",
                            "output": draw(st.sampled_from(["ok", {"x": 1}, "", None])),
                        }
                    )
            elif action == "denied":
                call = f"{run}/{fresh('d')}"
                events.append(
                    {
                        "type": "relay",
                        "kind": "permission",
                        "runId": run,
                        "id": fresh("relay"),
                        "toolCallId": call,
                        "tool": "rm",
                        "params": {"p": 1},
                    }
                )
                events.append(
                    {
                        "type": "tool_result",
                        "runId": run,
                        "id": call,
                        "name": "rm",
                        "output": {"status": "denied", "reason": "no"},
                    }
                )
            elif action == "orphan":
                events.append(
                    {"type": "tool_result", "runId": run, "id": fresh("ghost"), "name": "x", "output": 1}
                )
            elif action == "subagent" and depth < 2:
                call = f"{run}/{fresh('s')}"
                events.append({"type": "tool_call", "runId": run, "id": call, "name": "agent", "input": {}})
                agent(fresh("sub"), call, depth + 1)
                if draw(st.booleans()):
                    events.append(
                        {"type": "tool_result", "runId": run, "id": call, "name": "agent", "output": "r"}
                    )
            elif action == "error":
                events.append({"type": "error", "runId": run, "message": "boom"})
            elif action == "user":
                events.append({"type": "user", "runId": fresh("u"), "parentId": run, "content": "more"})
            elif action == "repl":  # a REPL turn (the hypergraph keeps it; the flat graph has no repl_*)
                turn = fresh("repl")
                code = f"print({turn!r})"
                if draw(st.booleans()):  # the model's own fenced block, as an RLM's text holds it
                    fenced = f"Next:\n```python\n{code}\n```"
                    events.append({"type": "text", "runId": run, "id": fresh("t"), "content": fenced})
                events.append({"type": "repl_input", "runId": run, "id": turn, "code": code})
                for stream in draw(st.lists(st.sampled_from(["stdout", "stderr"]), max_size=2)):
                    chunk = {
                        "type": "repl_progress",
                        "runId": run,
                        "id": turn,
                        "chunk": "o\n",
                        "stream": stream,
                    }
                    events.append(chunk)
                if depth < 2 and draw(st.booleans()):  # a child run of the turn (`llm_query`)
                    agent(fresh("child"), turn, depth + 1)
                outcome = draw(st.sampled_from(["printed", "raised", "silent", "final", "running"]))
                if outcome != "running":
                    output: dict[str, Any] = {"type": "repl_output", "runId": run, "id": turn}
                    output["stdout"] = "o\n" if outcome in ("printed", "final") else ""
                    output["error"] = "NameError: x" if outcome == "raised" else None
                    output["done"] = outcome == "final"
                    events.append(output)
        if draw(st.booleans()):
            events.append({"type": "harness_end", "runId": run})

    opens_with_user = draw(st.booleans())
    for turn in range(draw(st.integers(1, 3))):
        user = f"user{turn}"
        if turn == 0 and not opens_with_user:  # a run nobody asked for (the w2-hg workloads' shape)
            agent(f"agent{turn}", None, 0)
            continue
        events.append({"type": "user", "runId": user, "content": draw(USER_CONTENT)})
        agent(f"agent{turn}", f"{user}:user", 0)
    return events


USER_CONTENT: Any = st.sampled_from(
    ["q", "", [{"type": "text", "text": ""}], [{"type": "text", "text": "a"}, {"type": "text", "text": ""}]]
)
"""User message contents, the empty ones included."""


@settings(max_examples=150, deadline=None)
@given(agent_streams())
def test_every_projected_history_is_a_valid_request(events: list[dict[str, Any]]) -> None:
    graph = graph_of(events)
    assert_valid_openai(project_messages(graph, format="openai"))
    assert_valid_anthropic(project_messages(graph, format="anthropic"))
    gateway = project_messages(graph, format="gateway")
    calls = [c["id"] for m in gateway for c in m.get("tool_calls", [])]
    results = [m["tool_call_id"] for m in gateway if m["role"] == "tool"]
    assert calls == results


@given(agent_streams())
def test_thinking_blocks_go_back_verbatim(events: list[dict[str, Any]]) -> None:
    """Every ``thinking`` block sent to Anthropic is one signed reasoning node's text under its
    own signature, and every ``redacted_thinking`` one redacted node's payload: never a join of
    several blocks (the API would reject a signature over other text). Flat graph and hypergraph."""
    from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events

    graph = graph_of(events)
    reasoning = [node for node in graph.nodes.values() if node.kind == "reasoning"]
    signed = {(node.content, node.signature) for node in reasoning if node.signature is not None}  # type: ignore[attr-defined]
    redacted = {node.redacted_data for node in reasoning if node.redacted_data is not None}  # type: ignore[attr-defined]
    conversation = reduce_conversation_events(create_conversation(), events)
    for messages in (
        project_messages(graph, format="anthropic"),
        project_messages(conversation, default_active(conversation), format="anthropic"),
    ):
        for message in messages:
            for block in message["content"] if isinstance(message["content"], list) else ():
                if block["type"] == "thinking":
                    assert (block["thinking"], block["signature"]) in signed
                elif block["type"] == "redacted_thinking":
                    assert block["data"] in redacted


def test_reused_compact_encoder_gives_exactly_json_dumps() -> None:
    """`compact_json_encoder` (one C encoder per projection) encodes every value exactly as
    ``json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)``."""
    import datetime

    from convograph.projections.history import compact_json_encoder

    values: list[object] = [
        {"cmd": "echo 1", "n": [1, 2.5, -0.0, 1e16, 1e-7, True, None]},
        {"ü": "naïve — ✓", "ctrl": "a\nb\tc\x00\x7f\u2028", "quote": '"\\'},
        {7: "int key", 2.5: "float key", True: "bool key", None: "none key"},
        [float("nan"), float("inf"), -float("inf")],
        {"when": datetime.date(2026, 11, 22), "nested": {"deep": [{"x": ()}]}},
        "a plain string",
        "",
        42,
        None,
        [],
        {},
    ]
    encode = compact_json_encoder()
    for value in values:
        expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        assert encode(value) == expected
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="Circular"):
        encode(cyclic)
    cyclic_dict: dict[str, object] = {"a": 1}
    cyclic_dict["self"] = [cyclic_dict]
    with pytest.raises(ValueError, match="Circular"):
        encode(cyclic_dict)
    deep: list[object] = []
    for _ in range(200):  # deep, acyclic: encoded as json.dumps does
        deep = [1, {"d": deep}]
    assert encode(deep) == json.dumps(deep, ensure_ascii=False, separators=(",", ":"), default=str)
    too_deep: list[object] = []
    for _ in range(100_000):
        too_deep = [too_deep]
    with pytest.raises(RecursionError):
        json.dumps(too_deep, ensure_ascii=False, separators=(",", ":"), default=str)
    with pytest.raises(RecursionError):
        encode(too_deep)
    assert encode([1, {"a": 2}]) == '[1,{"a":2}]'  # still usable after the failures
    assert compact_json_encoder()([1, {"a": 2}]) == '[1,{"a":2}]'


def test_compact_encoder_flat_dicts_match_json_dumps_for_every_code_point() -> None:
    """The flat-dict fast path of `compact_json_encoder` (msgspec) writes what `json.dumps` writes:
    every code point as key and value (surrogates fall back), integers of any size up to the digit
    limit (and the same error past it), booleans, None, the empty dict."""
    from convograph.projections.history import compact_json_encoder

    encode = compact_json_encoder()

    def dumps(value: object) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)

    points = [chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    for start in range(0, len(points), 4096):
        chunk = "".join(points[start : start + 4096])
        value = {chunk: chunk, chunk[:7]: [chunk[7:9]], "n": -(2**70), "t": True, "f": False, "z": None}
        flat = {chunk: chunk, "n": 2**64 + start, "t": True, "z": None}
        assert encode(value) == dumps(value)
        assert encode(flat) == dumps(flat)
    for value in ({"s": "\ud800"}, {"\udfff": 1}, {}, {"x": 10**4299}, {"x": 1.5}, {1: "int key"}):
        assert encode(value) == dumps(value)
    with pytest.raises(ValueError, match="digits"):
        dumps({"x": 10**4300})
    with pytest.raises(ValueError, match="digits"):
        encode({"x": 10**4300})


@given(
    st.dictionaries(
        st.one_of(st.text(), st.integers()),
        st.one_of(
            st.text(),
            st.integers(),
            st.booleans(),
            st.none(),
            st.floats(),
            st.lists(st.integers(), max_size=2),
            st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=2),
        ),
        max_size=4,
    )
)
def test_compact_encoder_matches_json_dumps_on_generated_dicts(value: dict[Any, Any]) -> None:
    from convograph.projections.history import compact_json_encoder

    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    assert compact_json_encoder()(value) == expected


@pytest.mark.parametrize(
    "call_id",
    [
        "a/b",
        "a\x7f~!@#$%^&*()[]{}:;<>?,.`|\\ \t=+",
        "x" * 80,
        "",
        "ünï/cöde",
        "a\nb",
        "ok_id-1",
        "/" * 30 + "abc",
        "a" * 26 + "é" + "b" * 5,
        "abc\n",
    ],
)
def test_safe_tool_id_stand_in_is_the_documented_formula(call_id: str) -> None:
    """``<sanitised prefix (27 chars)>_<12 hex of sha256>``, the same for both APIs when rewritten."""
    import hashlib
    import re

    digest = hashlib.sha256(call_id.encode()).hexdigest()[:12]
    prefix = re.sub(r"[^A-Za-z0-9_-]", "_", call_id)[:27]
    stand_in = f"{prefix}_{digest}" if prefix else f"call_{digest}"
    openai_ok = 0 < len(call_id) <= 40
    anthropic_ok = re.fullmatch(r"[A-Za-z0-9_-]{1,64}", call_id) is not None
    assert safe_tool_id(call_id, api="openai") == (call_id if openai_ok else stand_in)
    assert safe_tool_id(call_id, api="anthropic") == (call_id if anthropic_ok else stand_in)
    assert stand_in_tool_id(call_id) == stand_in  # what the renderers call for a rejected id
    assert bool(is_anthropic_tool_id(call_id)) == anthropic_ok
