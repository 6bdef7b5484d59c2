"""The Vercel AI SDK UI message stream: read with the ``ai`` package's own parser and reducer
under node (every chunk validated against ``uiMessageChunkSchema``, the messages it folds and the
subagent transcripts they carry validated by ``validateUIMessages``), and what it folds carries the
conversation the messages projection gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convograph.events import Event, parse_event
from convograph.integrations.ai_sdk import SUBAGENT_FLUSH_DELTAS, AISDKStream, UIMessageBuilder
from convograph.projections.history import serialize_output
from tests.support.conversations import (
    encode_all,
    projected_messages,
    random_streams,
    recorded_conversations,
    sse_bytes,
    stored,
)
from tests.support.node_tools import run_node_reader
from tests.test_hypergraph_properties import wire_events

CONVERSATIONS = recorded_conversations()


def read_with_ai(tmp_path: Path, streams: dict[str, list[Event]]) -> dict[str, dict[str, Any]]:
    paths = []
    for name, events in streams.items():
        path = tmp_path / f"{name}.sse"
        path.write_bytes(sse_bytes(AISDKStream("c"), events))
        paths.append(path)
    return dict(zip(streams, run_node_reader("ai-sdk-read.mjs", *paths), strict=True))


def turns_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A UI message's parts as assistant turns, by the messages projection's rule (text or
    reasoning after tool calls starts a new turn): [{"text", "calls": [part, ...]}]."""
    turns: list[dict[str, Any]] = []
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in message["parts"]:
        if part["type"] in ("text", "reasoning") and calls:
            turns.append({"text": "".join(text), "calls": calls})
            text, calls = [], []
        if part["type"] == "text":
            text.append(part["text"])
        elif part["type"] == "dynamic-tool":
            calls.append(part)
    if text or calls:
        turns.append({"text": "".join(text), "calls": calls})
    return turns


def test_recorded_conversations_parse_and_carry_the_projection(tmp_path: Path) -> None:
    reports = read_with_ai(tmp_path, CONVERSATIONS)
    for name, report in reports.items():
        events = CONVERSATIONS[name]
        chunks = [chunk for _, chunk in encode_all(AISDKStream("c"), events)]
        assert report["chunks"] == len(chunks), name
        if name == "rlm":  # REPL-spawned runs are subagents here, text of the parent in the projection
            continue
        expected = [message for message in projected_messages(events) if message["role"] != "user"]
        got: list[dict[str, Any]] = []
        for message in report["messages"]:
            for turn in turns_of(message):
                calls = turn["calls"]
                if turn["text"] or calls:
                    got.append(
                        {"text": turn["text"] or None, "calls": [call["toolCallId"] for call in calls]}
                    )
        want = [
            {"text": message.get("content"), "calls": [call["id"] for call in message.get("tool_calls", [])]}
            for message in expected
            if message["role"] == "assistant"
        ]
        assert [turn["text"] for turn in got] == [turn["text"] for turn in want], name
        assert [len(turn["calls"]) for turn in got] == [len(turn["calls"]) for turn in want], name


def test_the_multi_agent_example_folds_as_expected(tmp_path: Path) -> None:
    events = CONVERSATIONS["multi-agent"]
    (report,) = read_with_ai(tmp_path, {"multi-agent": events}).values()
    (message,) = report["messages"]
    assert message["id"] == "run-agent"
    assert message["metadata"]["convograph"]["usage"]["inputTokens"] == 5803
    tools = {part["toolCallId"]: part for part in message["parts"] if part["type"] == "dynamic-tool"}
    assert tools["run-agent/call-read-a"]["state"] == "output-available"
    assert tools["run-agent/call-read-a"]["approval"] == {"id": "relay-read-1", "approved": True}
    assert tools["run-agent/call-exec"]["state"] == "output-denied"
    assert tools["run-agent/call-exec"]["approval"]["reason"] == "not on my laptop"
    (subagent,) = [part for part in message["parts"] if part["type"] == "data-subagent"]
    assert subagent["data"]["status"] == "done"
    assert subagent["data"]["toolCallId"] == "run-agent/call-agent"
    texts = [part["text"] for part in subagent["data"]["message"]["parts"] if part["type"] == "text"]
    assert (
        texts[-1] == "Found INC-231: client A's unbounded retries without backoff amplified a billing outage."
    )
    reasoning = [part for part in message["parts"] if part["type"] == "reasoning"]
    assert reasoning[0]["providerMetadata"] == {"convograph": {"signature": "sig-demo-p1"}}
    (user,) = report["transient"]
    assert user["type"] == "data-user"
    assert user["data"]["content"].startswith("Compare the retry policies")


def test_random_streams_parse(tmp_path: Path) -> None:
    streams = {f"random-{index}": events for index, events in enumerate(random_streams(60, seed=11))}
    reports = read_with_ai(tmp_path, streams)
    assert len(reports) == 60


def test_a_late_result_of_an_earlier_message_is_a_transient_chunk() -> None:
    events = [
        parse_event(wire)
        for wire in (
            {"type": "harness_start", "runId": "a"},
            {"type": "tool_call", "runId": "a", "id": "c1", "name": "bash"},
            {"type": "harness_end", "runId": "a", "reason": "final"},
            {"type": "harness_start", "runId": "b"},
            {"type": "tool_result", "runId": "a", "id": "c1", "name": "bash", "output": "late"},
        )
    ]
    chunks = [chunk for _, chunk in encode_all(AISDKStream("c"), events)]
    assert chunks[-1] == {
        "type": "data-event",
        "data": {"type": "tool-output-available", "toolCallId": "c1", "output": "late"},
        "transient": True,
    }


def test_a_long_subagent_answer_is_resent_at_most_every_flush_interval() -> None:
    deltas = 200
    events = [
        parse_event(wire)
        for wire in (
            {"type": "harness_start", "runId": "a"},
            {"type": "tool_call", "runId": "a", "id": "c1", "name": "agent"},
            {"type": "harness_start", "runId": "s", "parentId": "c1"},
            *({"type": "text", "runId": "s", "id": "t", "content": "x"} for _ in range(deltas)),
            {"type": "harness_end", "runId": "s", "reason": "final"},
        )
    ]
    chunks = [chunk for _, chunk in encode_all(AISDKStream("c"), events)]
    sends = [chunk for chunk in chunks if chunk["type"] == "data-subagent"]
    assert len(sends) <= 2 + deltas // SUBAGENT_FLUSH_DELTAS + 1
    final = sends[-1]["data"]
    assert final["status"] == "done"
    assert final["message"]["parts"] == [{"type": "text", "text": "x" * deltas, "state": "done"}]


def test_the_transcript_builder_folds_tools_and_data_parts_in_place() -> None:
    builder = UIMessageBuilder("s")
    for chunk in (
        {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": "c", "toolName": "bash", "dynamic": True},
        {"type": "tool-input-available", "toolCallId": "c", "toolName": "bash", "input": {"cmd": "ls"}},
        {"type": "tool-approval-request", "approvalId": "r", "toolCallId": "c"},
        {"type": "tool-approval-response", "approvalId": "r", "approved": False, "reason": "no"},
        {"type": "tool-output-denied", "toolCallId": "c"},
        {"type": "data-tool-progress", "id": "c:progress", "data": {"n": 1}},
        {"type": "data-tool-progress", "id": "c:progress", "data": {"n": 2}},
    ):
        builder.apply(chunk)
    assert builder.to_wire()["parts"] == [
        {"type": "step-start"},
        {
            "type": "dynamic-tool",
            "toolName": "bash",
            "toolCallId": "c",
            "state": "output-denied",
            "input": {"cmd": "ls"},
            "approval": {"id": "r", "approved": False, "reason": "no"},
        },
        {"type": "data-tool-progress", "data": {"n": 2}, "id": "c:progress"},
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(wire_events(), min_size=1, max_size=30), st.data())
def test_replaying_a_prefix_silently_gives_the_same_frames(wires: list[dict[str, Any]], data: Any) -> None:
    items = stored([parse_event(wire) for wire in wires])
    one = AISDKStream("c")
    whole = [one.feed(item) for item in items]
    cut = data.draw(st.integers(0, len(items)))
    resumed = AISDKStream("c")
    for item in items[:cut]:
        resumed.feed(item)
    assert [resumed.feed(item) for item in items[cut:]] == whole[cut:]


@pytest.mark.parametrize("output", ["ok", {"context": "c", "result": 1}])
def test_a_result_keeps_its_output_as_data(output: Any) -> None:
    events = [
        parse_event(wire)
        for wire in (
            {"type": "harness_start", "runId": "a"},
            {"type": "tool_call", "runId": "a", "id": "c1", "name": "bash"},
            {"type": "tool_result", "runId": "a", "id": "c1", "name": "bash", "output": output},
        )
    ]
    chunks = [chunk for _, chunk in encode_all(AISDKStream("c"), events)]
    assert chunks[-1] == {"type": "tool-output-available", "toolCallId": "c1", "output": output}
    assert serialize_output(output)  # the AG-UI stream carries the same output as text
