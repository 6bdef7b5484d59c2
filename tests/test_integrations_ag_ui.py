"""AG-UI out: every event validates against the ``ag-ui-protocol`` models (no unknown fields),
follows the reference client's sequencing rules, and what a client folds from the stream equals the
``MESSAGES_SNAPSHOT`` and the convograph messages projection; the reference TypeScript client
(``@ag-ui/client`` under node) agrees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Event as AGUIEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from convograph.events import Event, parse_event
from convograph.integrations.ag_ui import AGUIEventStream
from tests.support.ag_ui_client import MessageList, Verifier
from tests.support.conversations import (
    ag_ui_to_openai,
    encode_all,
    projected_messages,
    random_streams,
    recorded_conversations,
    sse_bytes,
    stored,
)
from tests.support.node_tools import run_node_reader
from tests.test_hypergraph_properties import wire_events

AGUI = TypeAdapter(AGUIEvent)
CONVERSATIONS = recorded_conversations()


def as_logged(wires: list[dict[str, Any]]) -> list[Event]:
    """The events an event log would store: a repeated ``eventId`` is stored once."""
    seen: set[str] = set()
    events = []
    for wire in wires:
        event_id = wire.get("eventId")
        if event_id is None or event_id not in seen:
            seen.add(event_id or "")
            events.append(parse_event(wire))
    return events


def check_chunk(chunk: dict[str, Any]) -> None:
    """Valid for the ag-ui-protocol models, with nothing they do not know (they keep extras)."""
    model = AGUI.validate_python(chunk)
    assert not model.model_extra, f"fields the protocol does not define: {model.model_extra}"
    assert model.model_dump(mode="json", by_alias=True) == json.loads(json.dumps(chunk))


def check_stream(events: list[Event]) -> list[dict[str, Any]]:
    """Validate every chunk and its place in the sequence. The ``MESSAGES_SNAPSHOT`` that ends a
    run must equal what a client folded from the stream so far (one sent for a command says what
    the stream could not: the client holds it once applied). Returns the chunks."""
    verifier = Verifier()
    client = MessageList()
    chunks = [chunk for _, chunk in encode_all(AGUIEventStream("c"), events)]
    for index, chunk in enumerate(chunks):
        check_chunk(chunk)
        verifier.check(chunk)
        ends_run = index + 1 < len(chunks) and chunks[index + 1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
        if chunk["type"] == "MESSAGES_SNAPSHOT" and ends_run:
            assert client.messages == chunk["messages"]
        client.apply(chunk)
        if chunk["type"] == "MESSAGES_SNAPSHOT":
            assert client.messages == chunk["messages"]
    return chunks


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_every_event_is_valid_and_a_client_holds_the_snapshot(name: str) -> None:
    chunks = check_stream(CONVERSATIONS[name])
    kinds = {chunk["type"] for chunk in chunks}
    assert {"RUN_STARTED", "TEXT_MESSAGE_CONTENT", "RUN_FINISHED", "MESSAGES_SNAPSHOT"} <= kinds
    assert chunks[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")


# Not "rlm": the messages projection folds the text of runs a REPL turn spawned into the parent's
# message (the seed's thread keeps no REPL turns); the UI streams attribute them to a subagent.
@pytest.mark.parametrize("name", sorted(set(CONVERSATIONS) - {"rlm"}))
def test_the_last_snapshot_is_the_messages_projection(name: str) -> None:
    events = CONVERSATIONS[name]
    chunks = [chunk for _, chunk in encode_all(AGUIEventStream("c"), events)]
    snapshot = [chunk for chunk in chunks if chunk["type"] == "MESSAGES_SNAPSHOT"][-1]
    assert ag_ui_to_openai(snapshot["messages"]) == projected_messages(events)


def test_the_mapping_of_a_multi_agent_run() -> None:
    chunks = check_stream(CONVERSATIONS["multi-agent"])
    runs = [chunk["runId"] for chunk in chunks if chunk["type"] == "RUN_STARTED"]
    assert runs == ["run-user-1", "run-agent"]
    assert all(
        chunk["threadId"] == "c" for chunk in chunks if chunk["type"] in ("RUN_STARTED", "RUN_FINISHED")
    )
    started = next(chunk for chunk in chunks if chunk["type"] == "SUBAGENT_STARTED")
    assert started == {
        "type": "SUBAGENT_STARTED",
        "subagentRunId": "run-sub",
        "name": "agent-research",
        "parentToolCallId": "run-agent/call-agent",
        "parentMessageId": "p2-text",
    }
    inside = [
        chunk for chunk in chunks if chunk.get("subagentRunId") == "run-sub" and "TEXT" in chunk["type"]
    ]
    assert {chunk["messageId"] for chunk in inside} == {"sp1-text", "sp2-text"}
    steps = [
        chunk["stepName"]
        for chunk in chunks
        if chunk["type"] == "STEP_STARTED" and "subagentRunId" not in chunk
    ]
    assert steps == ["run-provider-1", "run-provider-2", "run-provider-3", "run-provider-4"]
    calls = {
        chunk["toolCallId"]: chunk.get("parentMessageId")
        for chunk in chunks
        if chunk["type"] == "TOOL_CALL_START"
    }
    assert calls["run-agent/call-read-a"] == calls["run-agent/call-read-b"] == "p1-text"
    # the denied call never had a tool_call event: it is rebuilt from its relay
    assert calls["run-agent/call-exec"] == "p3-text"
    finished = chunks[-1]
    assert finished["type"] == "RUN_FINISHED"
    assert finished["usage"] == [{"inputTokens": 5803, "outputTokens": 266, "totalTokens": 6069}]
    relays = [
        chunk
        for chunk in chunks
        if chunk["type"] == "STATE_DELTA" and "pendingRelays" in chunk["delta"][0]["path"]
    ]
    assert [delta["delta"][0]["op"] for delta in relays] == ["add", "remove", "add", "remove"]


def test_a_reasoning_block_keeps_its_signature_and_redacted_data() -> None:
    events = [
        parse_event(wire)
        for wire in (
            {"type": "harness_start", "runId": "a"},
            {"type": "reasoning", "runId": "a", "id": "th", "content": "hmm"},
            {"type": "reasoning", "runId": "a", "id": "th", "content": "", "signature": "sig"},
            {"type": "reasoning", "runId": "a", "id": "red", "content": "", "redactedData": "opaque"},
            {"type": "harness_end", "runId": "a", "reason": "final"},
        )
    ]
    chunks = check_stream(events)
    ends = [chunk for chunk in chunks if chunk["type"] == "REASONING_MESSAGE_END"]
    assert ends[0]["metadata"] == {"convograph": {"signature": "sig"}}
    encrypted = [chunk for chunk in chunks if chunk["type"] == "REASONING_ENCRYPTED_VALUE"]
    assert encrypted == [
        {
            "type": "REASONING_ENCRYPTED_VALUE",
            "subtype": "message",
            "entityId": "red",
            "encryptedValue": "opaque",
        }
    ]


def test_an_error_reason_ends_the_run_with_run_error_and_closes_what_was_open() -> None:
    events = [
        parse_event(wire)
        for wire in (
            {"type": "harness_start", "runId": "a"},
            {"type": "text", "runId": "p", "parentId": "a", "id": "t", "content": "partial"},
            {"type": "tool_call", "runId": "a", "id": "c1", "name": "agent"},
            {"type": "harness_start", "runId": "s", "parentId": "c1", "agentId": "helper"},
            {"type": "text", "runId": "s", "id": "st", "content": "working"},
            {"type": "error", "runId": "a", "message": "provider crashed"},
            {"type": "harness_end", "runId": "a", "reason": "error"},
        )
    ]
    chunks = check_stream(events)
    tail = [chunk["type"] for chunk in chunks[-5:]]
    assert tail == ["TEXT_MESSAGE_END", "SUBAGENT_ERROR", "STEP_FINISHED", "MESSAGES_SNAPSHOT", "RUN_ERROR"]
    assert chunks[-4]["code"] == "interrupted"
    assert chunks[-1] == {"type": "RUN_ERROR", "message": "provider crashed", "code": "error"}


def test_commands_and_user_parts_send_a_snapshot_of_the_active_path() -> None:
    events = [
        parse_event(wire)
        for wire in (
            {"type": "user", "runId": "u1", "content": "first question"},
            {"type": "harness_start", "runId": "a1"},
            {"type": "text", "runId": "a1", "id": "t1", "content": "first answer"},
            {"type": "harness_end", "runId": "a1", "reason": "final"},
            {"type": "edit", "messageId": "msg:1", "content": "better question"},
            {"type": "harness_start", "runId": "a2"},
            {"type": "text", "runId": "a2", "id": "t2", "content": "better answer"},
            {"type": "harness_end", "runId": "a2", "reason": "final"},
            {"type": "user", "runId": "u2", "content": [{"type": "text", "text": "and this"}]},
        )
    ]
    chunks = check_stream(events)
    snapshots = [chunk["messages"] for chunk in chunks if chunk["type"] == "MESSAGES_SNAPSHOT"]
    after_edit = snapshots[1]
    assert [message.get("content") for message in after_edit] == ["better question"]
    assert ag_ui_to_openai(snapshots[2]) == projected_messages(events[:8])
    assert snapshots[-1][-1]["content"] == [{"type": "text", "text": "and this"}]
    assert any(chunk["type"] == "CUSTOM" and chunk["name"] == "convograph.edit" for chunk in chunks)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(wire_events(), max_size=40))
def test_any_event_stream_gives_valid_ag_ui(wires: list[dict[str, Any]]) -> None:
    check_stream(as_logged(wires))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(wire_events(), min_size=1, max_size=30), st.data())
def test_replaying_a_prefix_silently_gives_the_same_frames(wires: list[dict[str, Any]], data: Any) -> None:
    items = stored(as_logged(wires))
    one = AGUIEventStream("c")
    whole = [one.feed(item) for item in items]
    cut = data.draw(st.integers(0, len(items)))
    resumed = AGUIEventStream("c")
    for item in items[:cut]:
        resumed.feed(item)
    assert [resumed.feed(item) for item in items[cut:]] == whole[cut:]


@pytest.mark.parametrize("name", ["multi-agent", "research-denied", "rlm"])
def test_the_reference_client_verifies_and_folds_the_stream(name: str, tmp_path: Path) -> None:
    events = CONVERSATIONS[name]
    path = tmp_path / f"{name}.sse"
    path.write_bytes(sse_bytes(AGUIEventStream("c"), events))
    (report,) = run_node_reader("ag-ui-read.mjs", path)
    chunks = [chunk for _, chunk in encode_all(AGUIEventStream("c"), events)]
    assert report["events"] == len(chunks)
    last_snapshot = [chunk for chunk in chunks if chunk["type"] == "MESSAGES_SNAPSHOT"][-1]["messages"]
    assert report["messages"] == last_snapshot
    assert report["state"]["pendingRelays"] == {}


def test_the_reference_client_accepts_random_streams(tmp_path: Path) -> None:
    paths = []
    for index, events in enumerate(random_streams(40, seed=7)):
        path = tmp_path / f"random-{index}.sse"
        path.write_bytes(sse_bytes(AGUIEventStream("c"), events))
        paths.append(path)
    reports = run_node_reader("ag-ui-read.mjs", *paths)
    assert len(reports) == len(paths)
