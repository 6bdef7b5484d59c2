"""GenAI spans -> events (`convograph.integrations.otlp.genai` and `.messages`): each span kind, each
shape instrumentations record messages in, and what is kept beside the mapped fields."""

from __future__ import annotations

import json
from typing import Any

from convograph.events import (
    Error,
    HarnessEnd,
    HarnessStart,
    Reasoning,
    Text,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
    User,
    encode_event,
    parse_event,
)
from convograph.integrations.otlp import Span, SpanEvent
from convograph.integrations.otlp.genai import (
    agent_events,
    classify,
    content_parent,
    inference_events,
    tool_events,
)

TRACE = "0af7651916cd43dd8448eb211c80319c"
AGENT = "b7ad6b7169203331"
CHAT = "00f067aa0ba902b7"


def chat(attributes: dict[str, Any], **fields: Any) -> Span:
    base = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-test"}
    return Span(
        trace_id=TRACE,
        span_id=fields.pop("span_id", CHAT),
        parent_span_id=AGENT,
        name="chat gpt-test",
        kind=3,
        start_ns=1_700_000_000_000_000_000,
        end_ns=1_700_000_001_500_000_000,
        attributes=base | attributes,
        resource={"service.name": "svc"},
        scope_name="lib",
        **fields,
    )


def messages(*items: dict[str, Any]) -> str:
    return json.dumps(list(items))


def test_classify_by_operation_name() -> None:
    def kind(attributes: dict[str, Any]) -> str:
        return classify(Span(trace_id=TRACE, span_id=CHAT, attributes=attributes))

    assert kind({"gen_ai.operation.name": "chat"}) == "inference"
    assert kind({"gen_ai.operation.name": "generate_content"}) == "inference"
    assert kind({"gen_ai.operation.name": "invoke_agent"}) == "agent"
    assert kind({"gen_ai.operation.name": "invoke_workflow"}) == "agent"
    assert kind({"gen_ai.operation.name": "execute_tool"}) == "tool"
    assert kind({"gen_ai.operation.name": "embeddings"}) == "genai"
    assert kind({"gen_ai.request.model": "m"}) == "inference"  # before gen_ai.operation.name existed
    assert kind({"http.method": "GET"}) == "other"


def test_a_model_call_gives_its_messages_usage_and_keeps_everything_else() -> None:
    span = chat(
        {
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Be brief."}]),
            "gen_ai.input.messages": messages(
                {"role": "system", "parts": [{"type": "text", "content": "history system"}]},
                {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
            ),
            "gen_ai.output.messages": messages(
                {
                    "role": "assistant",
                    "parts": [
                        {"type": "reasoning", "content": "look it up"},
                        {"type": "text", "content": "Checking."},
                        {
                            "type": "tool_call",
                            "id": "call_1",
                            "name": "weather",
                            "arguments": {"city": "Paris"},
                        },
                        {"type": "x-custom", "payload": 1},
                    ],
                    "finish_reason": "tool_calls",
                },
                {"role": "assistant", "parts": [{"type": "text", "content": "second choice"}]},
            ),
            "gen_ai.usage.input_tokens": 12,
            "gen_ai.usage.output_tokens": 7,
            "gen_ai.usage.cache_read.input_tokens": 4,
            "gen_ai.response.id": "chatcmpl-1",
        }
    )
    events = inference_events(span)
    kinds = [type(event) for event in events]
    assert kinds == [User, Reasoning, Text, ToolCall, Usage]
    user, reasoning, text, call, usage = events
    assert isinstance(user, User)
    assert user.content == "Weather in Paris?"
    assert user.run_id.startswith("otel:u:")
    assert user.parent_id == f"otel:{AGENT}"
    assert isinstance(reasoning, Reasoning)
    assert reasoning.content == "look it up"
    assert isinstance(text, Text)
    assert text.content == "Checking."
    assert text.run_id == f"otel:{AGENT}/m"
    assert isinstance(call, ToolCall)
    assert (call.id, call.name, call.input) == (
        "call_1",
        "weather",
        {"city": "Paris"},
    )
    assert call.event_id == "otel:call:call_1"
    assert isinstance(usage, Usage)
    assert usage.run_id == f"otel:{CHAT}"
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (12, 7, 4)
    otel = usage.extra["otel"] if usage.extra else {}
    assert otel["spanId"] == CHAT
    assert otel["parentSpanId"] == AGENT
    assert otel["traceId"] == TRACE
    assert otel["usageReported"] is True
    assert otel["operation"] == "chat"
    assert otel["attributes"]["gen_ai.response.id"] == "chatcmpl-1"  # unmapped: kept
    assert "gen_ai.input.messages" not in otel["attributes"]  # mapped to events: not repeated
    assert otel["systemInstructions"] == [{"type": "text", "content": "Be brief."}]
    assert otel["unmappedParts"] == [{"type": "x-custom", "payload": 1}]
    assert otel["resource"] == {"service.name": "svc"}
    assert otel["scope"]["name"] == "lib"
    assert user.timestamp == "2023-11-14T22:13:20.000000Z"
    assert text.timestamp == "2023-11-14T22:13:21.500000Z"
    for event in events:  # every event is valid on the wire and round-trips
        assert parse_event(encode_event(event)) == event


def test_a_model_call_without_usage_or_content_still_has_its_anchor() -> None:
    (usage,) = inference_events(chat({}))
    assert isinstance(usage, Usage)
    assert (usage.input_tokens, usage.output_tokens) == (0, 0)
    assert usage.extra is not None
    assert usage.extra["otel"]["usageReported"] is False


def test_a_failed_model_call_is_an_error_of_its_own_run() -> None:
    events = inference_events(
        chat({"error.type": "RateLimitError"}, status_code=2, status_message="429 slow down")
    )
    error = events[-1]
    assert isinstance(error, Error)
    assert error.message == "429 slow down"
    assert error.run_id == f"otel:{CHAT}"


def test_the_same_message_seen_again_gets_the_same_ids() -> None:
    """Every call re-sends the history: the second call's copy of the first call's messages has
    the same event ids (so the log stores them once), even with reasoning dropped from the history
    and the tool arguments re-serialized; only what is new gets new ids."""
    question = {"role": "user", "parts": [{"type": "text", "content": "q"}]}
    answer_parts = [
        {"type": "reasoning", "content": "hm"},
        {"type": "tool_call", "id": "c1", "name": "t", "arguments": {"a": 1}},
    ]
    first = inference_events(
        chat(
            {
                "gen_ai.input.messages": messages(question),
                "gen_ai.output.messages": messages({"role": "assistant", "parts": answer_parts}),
            }
        )
    )
    second = inference_events(
        chat(
            {
                "gen_ai.input.messages": messages(
                    question,
                    {
                        "role": "assistant",
                        "parts": [{"type": "tool_call", "id": "c1", "name": "t", "arguments": '{"a": 1}'}],
                    },
                    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "r"}]},
                ),
                "gen_ai.output.messages": messages(
                    {"role": "assistant", "parts": [{"type": "text", "content": "done"}]}
                ),
            },
            span_id="00f067aa0ba902b8",
        )
    )
    ids_first = {event.event_id for event in first if not isinstance(event, Usage | Reasoning)}
    ids_second = [event.event_id for event in second if not isinstance(event, Usage)]
    assert len(ids_first) == 2  # the question and the tool call
    assert ids_first.issubset(ids_second)
    new = [event for event in second if event.event_id not in ids_first and not isinstance(event, Usage)]
    assert [type(event) for event in new] == [ToolResult, Text]
    result = new[0]
    assert isinstance(result, ToolResult)
    assert (result.id, result.name, result.output) == ("c1", "t", "r")


def test_different_instructions_make_different_conversations() -> None:
    def ids(instructions: str) -> set[str | None]:
        span = chat(
            {
                "gen_ai.system_instructions": instructions,
                "gen_ai.input.messages": messages(
                    {"role": "user", "parts": [{"type": "text", "content": "same task"}]}
                ),
            }
        )
        return {event.event_id for event in inference_events(span) if isinstance(event, User)}

    assert ids("You review security.") != ids("You review style.")


def test_anthropic_style_tool_results_inside_a_user_message() -> None:
    span = chat(
        {
            "gen_ai.input.messages": messages(
                {
                    "role": "assistant",
                    "parts": [{"type": "tool_call", "id": "toolu_1", "name": "ls", "arguments": {}}],
                },
                {
                    "role": "user",
                    "parts": [
                        {"type": "tool_call_response", "id": "toolu_1", "response": ["a.txt"]},
                        {"type": "text", "content": "and now?"},
                    ],
                },
            )
        }
    )
    _call, result, user, _usage = inference_events(span)
    assert isinstance(result, ToolResult)
    assert result.output == ["a.txt"]
    assert result.name == "ls"
    assert isinstance(user, User)
    assert user.content == "and now?"


def test_user_media_parts() -> None:
    span = chat(
        {
            "gen_ai.input.messages": messages(
                {
                    "role": "user",
                    "parts": [
                        {"type": "text", "content": "what is this?"},
                        {
                            "type": "blob",
                            "modality": "image",
                            "mime_type": "image/png",
                            "content": "iVBORw0K",
                        },
                        {"type": "uri", "modality": "image", "uri": "https://x/y.png"},
                    ],
                }
            )
        }
    )
    user = inference_events(span)[0]
    assert isinstance(user, User)
    assert isinstance(user.content, list)
    assert [type(part).__name__ for part in user.content] == ["TextPart", "ImagePart"]
    assert user.extra == {"otelParts": [{"type": "uri", "modality": "image", "uri": "https://x/y.png"}]}


def test_older_per_message_span_events() -> None:
    """Semantic conventions up to 1.36: one span event per message, fields as attributes."""
    events = (
        SpanEvent(name="gen_ai.system.message", attributes={"content": "Be brief."}),
        SpanEvent(name="gen_ai.user.message", attributes={"content": "Weather?"}),
        SpanEvent(
            name="gen_ai.assistant.message",
            attributes={
                "tool_calls": json.dumps(
                    [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"c":"P"}'},
                        }
                    ]
                )
            },
        ),
        SpanEvent(name="gen_ai.tool.message", attributes={"id": "call_9", "content": "rainy"}),
        SpanEvent(
            name="gen_ai.choice",
            attributes={
                "index": 0,
                "finish_reason": "stop",
                "message": json.dumps({"role": "assistant", "content": "Rainy."}),
            },
        ),
        SpanEvent(name="exception", attributes={"exception.type": "ValueError"}),
    )
    mapped = inference_events(chat({}, events=events))
    assert [type(event) for event in mapped] == [User, ToolCall, ToolResult, Text, Usage]
    call = mapped[1]
    assert isinstance(call, ToolCall)
    assert call.input == {"c": "P"}
    usage = mapped[-1]
    assert usage.extra is not None
    otel = usage.extra["otel"]
    assert otel["systemInstructions"] == [{"type": "text", "content": "Be brief."}]
    assert [event["name"] for event in otel["events"]] == [
        "exception"
    ]  # message events consumed, the rest kept


def test_the_inference_details_event() -> None:
    details = SpanEvent(
        name="gen_ai.client.inference.operation.details",
        attributes={
            "gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}],
            "gen_ai.output.messages": [
                {"role": "assistant", "parts": [{"type": "text", "content": "hello"}]}
            ],
        },
    )
    mapped = inference_events(chat({}, events=(details,)))
    assert [type(event) for event in mapped] == [User, Text, Usage]


def test_unreadable_message_json_is_kept_and_reported() -> None:
    (usage,) = inference_events(chat({"gen_ai.input.messages": "[{broken"}))
    assert usage.extra is not None
    otel = usage.extra["otel"]
    assert otel["attributes"]["gen_ai.input.messages"] == "[{broken"
    assert otel["problems"] == ["`gen_ai.input.messages` is not a JSON array of messages"]


def agent_span(**fields: Any) -> Span:
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Weather bot"} | fields.pop(
        "attributes", {}
    )
    return Span(
        trace_id=TRACE,
        span_id=AGENT,
        name="invoke_agent Weather bot",
        kind=fields.pop("kind", 1),
        start_ns=1_700_000_000_000_000_000,
        end_ns=1_700_000_009_000_000_000,
        attributes=attributes,
        **fields,
    )


def test_an_agent_is_a_run() -> None:
    span = agent_span(attributes={"gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 20, "x": 1})
    start, end = agent_events(span, "call_7")
    assert isinstance(start, HarnessStart)
    assert start.run_id == f"otel:{AGENT}"
    assert start.parent_id == "call_7"
    assert start.agent_id == "Weather bot"
    assert start.extra is not None
    assert start.extra["otel"]["attributes"] == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "Weather bot",
        "x": 1,
    }
    assert isinstance(end, HarnessEnd)
    assert end.reason == "stop"
    assert end.total_usage is not None
    assert (end.total_usage.input_tokens, end.total_usage.output_tokens) == (100, 20)


def test_a_failed_agent_ends_with_an_error() -> None:
    span = agent_span(
        status_code=2,
        events=(
            SpanEvent(name="exception", attributes={"exception.type": "KeyError", "exception.message": "x"}),
        ),
    )
    _start, error, end = agent_events(span, None)
    assert isinstance(error, Error)
    assert error.message == "KeyError: x"
    assert isinstance(end, HarnessEnd)
    assert end.reason == "error"


def test_a_remote_agent_brings_its_own_messages() -> None:
    """A CLIENT ``invoke_agent`` span (a remote agent) has no local model calls carrying its
    messages: its own input and output become the content."""
    span = agent_span(
        kind=3,
        attributes={
            "gen_ai.input.messages": messages(
                {"role": "user", "parts": [{"type": "text", "content": "book a flight"}]}
            ),
            "gen_ai.output.messages": messages(
                {"role": "assistant", "parts": [{"type": "text", "content": "booked"}]}
            ),
        },
    )
    kinds = [type(event) for event in agent_events(span, None)]
    assert kinds == [HarnessStart, User, Text, HarnessEnd]
    local = agent_span(attributes={"gen_ai.input.messages": "[]"})
    assert [type(event) for event in agent_events(local, None)] == [HarnessStart, HarnessEnd]


def tool_span(attributes: dict[str, Any], **fields: Any) -> Span:
    return Span(
        trace_id=TRACE,
        span_id="1111111111111111",
        parent_span_id=AGENT,
        name="execute_tool weather",
        start_ns=1_700_000_002_000_000_000,
        end_ns=1_700_000_002_250_000_000,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather"} | attributes,
        **fields,
    )


def test_a_tool_execution() -> None:
    span = tool_span(
        {
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": '{"city": "Paris"}',
            "gen_ai.tool.call.result": '{"temp": 14}',
        }
    )
    call, progress, result = tool_events(span)
    assert isinstance(call, ToolCall)
    assert call.input == {"city": "Paris"}
    assert call.event_id == "otel:call:call_1"
    assert isinstance(progress, ToolProgress)
    assert progress.tool_call_id == "call_1"
    assert progress.content == {"status": "ok", "durationMs": 250.0}
    assert isinstance(result, ToolResult)
    assert result.output == {"temp": 14}
    assert result.run_id == f"otel:{AGENT}/m"
    assert content_parent(span) == f"otel:{AGENT}"


def test_a_tool_without_a_recorded_result_leaves_it_to_the_history() -> None:
    events = tool_events(tool_span({"gen_ai.tool.call.id": "call_1"}))
    assert [type(event) for event in events] == [ToolCall, ToolProgress]


def test_a_failed_tool_has_an_error_result() -> None:
    events = tool_events(tool_span({}, status_code=2, status_message="timeout"))
    result = events[-1]
    assert isinstance(result, ToolResult)
    assert result.output == {"error": "timeout"}
    assert result.id == "otel:call:1111111111111111"  # no gen_ai.tool.call.id: one made from the span
