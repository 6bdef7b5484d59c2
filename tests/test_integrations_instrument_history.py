"""The request diff and the shadow fold behind the instrumentation (pure functions, properties).

- `new_start` finds the new entries of an extended history, of a sliding window, and the first
  difference otherwise;
- any history an app sends, recorded and projected back, reads as the same entries (so the next
  request that repeats it records nothing again), for each SDK adapter;
- folding a call's output with its deltas compacted projects exactly like folding every delta.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

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
from convograph.harness.ports import ConversationState
from convograph.integrations.instrument.anthropic_sdk import MESSAGES
from convograph.integrations.instrument.history import Shadow, compact_blocks, new_start, strip_repairs
from convograph.integrations.instrument.openai_sdk import CHAT, RESPONSES
from convograph.projections.history import OPENING_USER_TEXT, PLACEHOLDER_OUTPUT

keys = st.integers(min_value=0, max_value=5)


@given(st.lists(keys, max_size=12), st.lists(keys, max_size=6))
def test_an_extended_history_starts_after_what_was_recorded(expected: list[int], new: list[int]) -> None:
    assert new_start(expected, expected + new) == (len(expected), False)


@given(st.lists(keys, min_size=1, max_size=12), st.lists(keys, max_size=12))
def test_the_start_is_always_consistent_with_both_histories(expected: list[int], request: list[int]) -> None:
    start, diverged = new_start(expected, request)
    assert 0 <= start <= len(request)
    if diverged:  # the common prefix, ended by a difference or by either history's end
        assert request[:start] == expected[:start]
        assert start in (len(request), len(expected)) or request[start] != expected[start]
    else:  # the recorded history, or a suffix of it, opens the request
        assert request[:start] == expected[len(expected) - start :]


@given(st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=7), st.integers(0, 3))
def test_a_sliding_window_starts_after_the_overlap(length: int, dropped: int, new: int) -> None:
    expected = list(range(length + dropped))
    request = expected[dropped:] + [100 + i for i in range(new)]
    assert new_start(expected, request) == (length, False)


def test_a_history_that_stops_early_or_changes_is_a_divergence() -> None:
    assert new_start([1, 2, 3, 4], [1, 2]) == (2, True)
    assert new_start([1, 2, 3, 4], [1, 9, 3]) == (1, True)
    assert new_start([1, 2], [7, 8]) == (0, True)
    assert new_start([], [1]) == (0, False)


# -- recorded histories read back as the same entries ----------------------------------------------------------

texts = st.text(alphabet="abc xyz", min_size=1, max_size=8)
arguments = st.dictionaries(st.sampled_from(["city", "days", "unit"]), st.integers(0, 9) | texts, max_size=3)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A neutral conversation: user turns, assistant turns (text and / or tool calls), results."""
    turns: list[dict[str, Any]] = []
    calls = 0
    for _ in range(draw(st.integers(1, 4))):
        turns.append({"role": "user", "text": draw(texts)})
        for _ in range(draw(st.integers(1, 2))):
            made = [
                {
                    "id": f"call_{(calls := calls + 1)}",
                    "name": draw(st.sampled_from(["weather", "time"])),
                    "input": draw(arguments),
                }
                for _ in range(draw(st.integers(0, 2)))
            ]
            text = draw(st.none() | texts) if made else draw(texts)
            turns.append({"role": "assistant", "text": text, "calls": made})
            for call in made:
                turns.append({"role": "result", "id": call["id"], "output": draw(texts)})
            if not made:
                break
    return turns


def as_chat(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for turn in turns:
        if turn["role"] == "user":
            out.append({"role": "user", "content": turn["text"]})
        elif turn["role"] == "result":
            out.append({"role": "tool", "tool_call_id": turn["id"], "content": turn["output"]})
        else:
            message: dict[str, Any] = {"role": "assistant", "content": turn["text"]}
            if turn["calls"]:
                message["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": json.dumps(c["input"])},
                    }
                    for c in turn["calls"]
                ]
            out.append(message)
    return out


def as_responses(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for turn in turns:
        if turn["role"] == "user":
            out.append({"role": "user", "content": [{"type": "input_text", "text": turn["text"]}]})
        elif turn["role"] == "result":
            out.append({"type": "function_call_output", "call_id": turn["id"], "output": turn["output"]})
        else:
            if turn["text"]:
                out.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": turn["text"]}],
                    }
                )
            out.extend(
                {
                    "type": "function_call",
                    "call_id": c["id"],
                    "name": c["name"],
                    "arguments": json.dumps(c["input"]),
                }
                for c in turn["calls"]
            )
    return out


def as_messages(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for turn in turns:
        if turn["role"] == "user":
            out.append({"role": "user", "content": turn["text"]})
        elif turn["role"] == "result":
            block = {"type": "tool_result", "tool_use_id": turn["id"], "content": turn["output"]}
            if out[-1]["role"] == "user":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        else:
            blocks: list[dict[str, Any]] = [{"type": "thinking", "thinking": "hmm", "signature": "sig"}]
            if turn["text"]:
                blocks.append({"type": "text", "text": turn["text"], "cache_control": {"type": "ephemeral"}})
            blocks.extend(
                {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["input"]}
                for c in turn["calls"]
            )
            out.append({"role": "assistant", "content": blocks})
    return out


def roundtrip(api: Any, request: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """(the request's entry keys, the keys of its recording projected back)."""
    entries = api.entries(request)
    shadow = Shadow()
    shadow.apply(api.request_events(entries, entries, {}, None))
    return [entry.key for entry in entries], api.history_keys(shadow.messages(api.format))


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_a_chat_history_reads_back_as_itself(turns: list[dict[str, Any]]) -> None:
    sent, recorded = roundtrip(CHAT, {"messages": as_chat(turns)})
    assert recorded == sent


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_a_responses_input_reads_back_as_itself(turns: list[dict[str, Any]]) -> None:
    sent, recorded = roundtrip(RESPONSES, {"input": as_responses(turns)})
    assert recorded == sent


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_a_messages_history_reads_back_as_itself(turns: list[dict[str, Any]]) -> None:
    sent, recorded = roundtrip(MESSAGES, {"messages": as_messages(turns)})
    assert recorded == sent


def test_content_convograph_cannot_hold_reads_back_as_its_stand_in() -> None:
    """An image by URL is recorded as a stand-in text part; the next request repeating it still
    matches what was recorded (so it is not recorded again)."""
    request = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.com/cat.png", "detail": "high"},
                    },
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                ],
            }
        ]
    }
    sent, recorded = roundtrip(CHAT, request)
    assert recorded == sent
    assert sent[0][1][1] == ("text", "[image: https://example.com/cat.png]")


# -- the compacted fold ---------------------------------------------------------------------------------------------


@st.composite
def call_outputs(draw: st.DrawFn) -> list[Event]:
    """One call's events as a translator yields them: blocks one after another, each in deltas."""
    run = "run-1"
    events: list[Event] = [User(run_id="u", content="hi"), HarnessStart(run_id=run)]
    for index in range(draw(st.integers(1, 4))):
        block = f"block-{index}"
        if draw(st.booleans()):
            events.extend(
                Text(run_id=run, id=block, content=piece)
                for piece in draw(st.lists(texts, min_size=1, max_size=4))
            )
        else:
            events.extend(
                Reasoning(run_id=run, id=block, content=piece)
                for piece in draw(st.lists(texts, min_size=1, max_size=4))
            )
            if draw(st.booleans()):
                events.append(Reasoning(run_id=run, id=block, content="", signature=draw(texts)))
    for index in range(draw(st.integers(0, 2))):
        events.append(ToolCall(run_id=run, id=f"call_{index}", name="weather", input={"n": index}))
    events += [Usage(run_id=run, input_tokens=3, output_tokens=4), HarnessEnd(run_id=run, reason="final")]
    return events


@settings(max_examples=80, deadline=None)
@given(call_outputs())
def test_compacting_deltas_projects_like_every_delta(events: list[Event]) -> None:
    every, compact = ConversationState(), ConversationState()
    for event in events:
        every.apply(event)
    for event in compact_blocks(events):
        compact.apply(event)
    for format in ("openai", "anthropic"):
        assert compact.messages(format) == every.messages(format)
    assert len(compact_blocks(events)) <= len(events)


def test_repairs_an_app_never_sends_are_not_expected() -> None:
    openai_messages = [
        {"role": "user", "content": OPENING_USER_TEXT},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c", "content": PLACEHOLDER_OUTPUT},
    ]
    assert strip_repairs(openai_messages, "openai") == [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]}
    ]
    placeholder = {"type": "tool_result", "tool_use_id": "c", "content": PLACEHOLDER_OUTPUT, "is_error": True}
    anthropic_messages = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "t", "input": {}}]},
        {"role": "user", "content": [placeholder]},
    ]
    assert strip_repairs(anthropic_messages, "anthropic") == anthropic_messages[:2]


def test_a_result_names_the_tool_of_its_recorded_call() -> None:
    shadow = Shadow()
    shadow.apply([ToolCall(run_id="r", id="call_9", name="weather", input={})])
    request = {"messages": [{"role": "tool", "tool_call_id": "call_9", "content": "ok"}]}
    entries = CHAT.entries(request)
    events = CHAT.request_events(entries, entries, shadow.call_names, None)
    assert [(e.id, e.name) for e in events if isinstance(e, ToolResult)] == [("call_9", "weather")]
