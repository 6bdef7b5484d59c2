"""AG-UI in: streams made by the ``ag-ui-protocol`` package itself (its models and its
``EventEncoder``) become convograph events; a convograph conversation sent out as AG-UI and read
back projects to the same messages; bad input names the bad event; re-reading gives the same ids."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    MessagesSnapshotEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.encoder import EventEncoder

from convograph.events import Event, event_to_wire
from convograph.integrations.ag_ui import AGUIEventStream
from convograph.integrations.ag_ui_ingest import AGUIConverter, AGUIInputError, read_ag_ui_events
from tests.support.conversations import projected_messages, recorded_conversations, sse_bytes

CONVERSATIONS = recorded_conversations()


def producer_stream() -> bytes:
    """What an agent built on the AG-UI Python SDK sends for one run: the request's history in
    ``input``, a step, streamed text and a call, a subagent (chunk shorthand inside), a result."""
    encoder = EventEncoder()
    history = [UserMessage(id="u1", content="Find flights to Lisbon")]
    events: list[Any] = [
        RunStartedEvent(
            thread_id="t",
            run_id="run-1",
            protocol_version="1.0",
            input=RunAgentInput(thread_id="t", run_id="run-1", messages=history),
        ),
        StateSnapshotEvent(snapshot={"plan": []}),
        StepStartedEvent(step_name="plan"),
        ReasoningMessageStartEvent(message_id="th1", role="reasoning"),
        ReasoningMessageContentEvent(message_id="th1", delta="Search first."),
        ReasoningMessageEndEvent(message_id="th1"),
        TextMessageStartEvent(message_id="m1", role="assistant"),
        TextMessageContentEvent(message_id="m1", delta="Let me "),
        TextMessageContentEvent(message_id="m1", delta="search."),
        TextMessageEndEvent(message_id="m1"),
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="search", parent_message_id="m1"),
        ToolCallArgsEvent(tool_call_id="c1", delta='{"to": '),
        ToolCallArgsEvent(tool_call_id="c1", delta='"LIS"}'),
        ToolCallEndEvent(tool_call_id="c1"),
        SubagentStartedEvent(subagent_run_id="sub-1", name="pricer", parent_tool_call_id="c1"),
        TextMessageChunkEvent(message_id="sm1", role="assistant", delta="Checking ", subagent_run_id="sub-1"),
        TextMessageChunkEvent(delta="fares.", subagent_run_id="sub-1"),
        ToolCallChunkEvent(tool_call_id="sc1", tool_call_name="fares", delta="{}", subagent_run_id="sub-1"),
        ToolCallResultEvent(message_id="sr1", tool_call_id="sc1", content="120 EUR", subagent_run_id="sub-1"),
        SubagentFinishedEvent(subagent_run_id="sub-1"),
        ToolCallResultEvent(message_id="r1", tool_call_id="c1", content='{"cheapest": 120}'),
        StepFinishedEvent(step_name="plan"),
        TextMessageStartEvent(message_id="m2"),
        TextMessageContentEvent(message_id="m2", delta="The cheapest is 120 EUR."),
        TextMessageEndEvent(message_id="m2"),
        RunFinishedEvent(thread_id="t", run_id="run-1"),
    ]
    return "".join(encoder.encode(event) for event in events).encode()


def convert(
    body: bytes, media: str = "text/event-stream", known: Any = ()
) -> tuple[list[Event], dict[str, int]]:
    conversion = AGUIConverter(known=known).convert(read_ag_ui_events(body, media))
    return conversion.events, conversion.skipped


def test_a_producer_stream_becomes_a_conversation() -> None:
    events, skipped = convert(producer_stream())
    assert skipped == {"STATE_SNAPSHOT": 1, "STEP_STARTED": 1, "STEP_FINISHED": 1}
    wires = [event_to_wire(event) for event in events]
    assert wires[0] == {
        "type": "user",
        "runId": "user:u1",
        "content": "Find flights to Lisbon",
        "eventId": "ag-ui:message:u1",
    }
    assert wires[1] == {
        "type": "harness_start",
        "runId": "run-1",
        "parentId": "user:u1:user",
        "eventId": "ag-ui:run-1:0",
    }
    call = next(wire for wire in wires if wire["type"] == "tool_call" and wire["id"] == "c1")
    assert call["input"] == {"to": "LIS"}
    sub = next(wire for wire in wires if wire["type"] == "harness_start" and wire["runId"] == "sub-1")
    assert sub["parentId"] == "c1"
    assert sub["agentId"] == "pricer"
    chunked = [wire["content"] for wire in wires if wire["type"] == "text" and wire["id"] == "sm1"]
    assert chunked == ["Checking ", "fares."]
    assert projected_messages(events) == [
        {"role": "user", "content": "Find flights to Lisbon"},
        {
            "role": "assistant",
            "content": "Let me search.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"to":"LIS"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"cheapest": 120}'},
        {"role": "assistant", "content": "The cheapest is 120 EUR."},
    ]
    assert len({event.event_id for event in events}) == len(events)


def test_reading_the_same_stream_again_gives_the_same_event_ids() -> None:
    first, _ = convert(producer_stream())
    again, _ = convert(producer_stream())
    assert [event.event_id for event in first] == [event.event_id for event in again]


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_a_conversation_sent_as_ag_ui_reads_back_to_the_same_messages(name: str) -> None:
    events = CONVERSATIONS[name]
    back, skipped = convert(sse_bytes(AGUIEventStream("c"), events))
    assert projected_messages(back) == projected_messages(events)
    assert set(skipped) <= {
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "STEP_STARTED",
        "STEP_FINISHED",
        "REASONING_START",
        "REASONING_END",
    }
    kinds = {event.type for event in events} - {"connected", "usage"}
    assert kinds <= {event.type for event in back}  # relays, decisions, errors, progress, REPL: back too


def test_snapshot_and_input_messages_already_stored_are_not_stored_again() -> None:
    snapshot = MessagesSnapshotEvent(
        messages=[
            UserMessage(id="u1", content="hi"),
            AssistantMessage(
                id="a1",
                content="calling",
                tool_calls=[ToolCall(id="c9", function=FunctionCall(name="f", arguments="{}"))],
            ),
            ToolMessage(id="r9", tool_call_id="c9", content="done"),
        ]
    )
    body = EventEncoder().encode(RunStartedEvent(thread_id="t", run_id="r")) + EventEncoder().encode(snapshot)
    events, _ = convert(body.encode())
    assert [event.type for event in events] == ["harness_start", "user", "text", "tool_call", "tool_result"]
    events, _ = convert(body.encode(), known={"u1", "a1", "c9", "r9"})
    assert [event.type for event in events] == ["harness_start"]


def test_json_and_ndjson_bodies() -> None:
    run = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"},
    ]
    as_json, _ = convert(
        b'[{"type":"RUN_STARTED","threadId":"t","runId":"r"},{"type":"RUN_FINISHED","threadId":"t","runId":"r"}]',
        "application/json",
    )
    as_ndjson, _ = convert(
        b"\n".join(__import__("json").dumps(item).encode() for item in run), "application/x-ndjson"
    )
    assert as_json == as_ndjson
    assert [event.type for event in as_json] == ["harness_start", "harness_end"]


@pytest.mark.parametrize(
    ("body", "index", "message"),
    [
        (
            b'[{"type":"RUN_STARTED","threadId":"t","runId":"r"},{"type":"TEXT_MESSAGE_START"}]',
            1,
            "messageId",
        ),
        (b'[{"type":"RUN_STARTED","threadId":"t","runId":"r"},{"type":"NOT_AN_EVENT"}]', 1, "tag"),
        (b'[{"type":"TEXT_MESSAGE_START","messageId":"m"}]', 0, "begins with RUN_STARTED"),
        (
            b'[{"type":"RUN_STARTED","threadId":"t","runId":"r"},{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}]',
            1,
            "never started",
        ),
        (
            b'[{"type":"RUN_STARTED","threadId":"t","runId":"r"},{"type":"TOOL_CALL_END","toolCallId":"c"}]',
            1,
            "no open tool",
        ),
        (
            b'[{"type":"RUN_STARTED","threadId":"t","runId":"r"},{"type":"RUN_FINISHED","threadId":"t","runId":"other"}]',
            1,
            "not the open run",
        ),
    ],
)
def test_bad_events_are_named(body: bytes, index: int, message: str) -> None:
    with pytest.raises(AGUIInputError) as caught:
        convert(body, "application/json")
    problem = caught.value.problems[0]
    assert problem["index"] == index
    assert message in problem["message"] or message in str(caught.value)


def test_every_invalid_event_is_listed_with_its_field() -> None:
    body = b'[{"type":"RUN_STARTED","threadId":"t"},{"type":"TOOL_CALL_ARGS","toolCallId":"c"},{"type":"RUN_FINISHED","threadId":"t","runId":"r"}]'
    with pytest.raises(AGUIInputError) as caught:
        read_ag_ui_events(body, "application/json")
    assert [(p["index"], p["type"], p["field"]) for p in caught.value.problems] == [
        (0, "RUN_STARTED", "runId"),
        (1, "TOOL_CALL_ARGS", "delta"),
    ]
    assert str(caught.value).startswith("2 of 3 AG-UI events are invalid")


def test_unparsable_bodies_say_where() -> None:
    with pytest.raises(AGUIInputError, match="SSE message 1 is not JSON"):
        read_ag_ui_events(
            b'data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\ndata: {oops\n\n', "text/event-stream"
        )
    with pytest.raises(AGUIInputError, match="line 2 is not JSON"):
        read_ag_ui_events(
            b'{"type":"RUN_STARTED","threadId":"t","runId":"r"}\n{oops\n', "application/x-ndjson"
        )
    with pytest.raises(AGUIInputError, match="no AG-UI events"):
        read_ag_ui_events(b"[]", "application/json")


def test_arguments_that_are_not_json_are_kept_as_a_parse_error() -> None:
    body = EventEncoder().encode(RunStartedEvent(thread_id="t", run_id="r"))
    body += EventEncoder().encode(ToolCallStartEvent(tool_call_id="c", tool_call_name="f"))
    body += EventEncoder().encode(ToolCallArgsEvent(tool_call_id="c", delta="{not json"))
    body += EventEncoder().encode(ToolCallEndEvent(tool_call_id="c"))
    events, _ = convert(body.encode())
    call = event_to_wire(events[-1])
    assert call["input"]["__toolParseError"] is True
    assert call["input"]["rawArguments"] == "{not json"
