"""GenAI message events sent as OTLP log records: decoding (protobuf from the SDK's own encoder, and
OTLP/JSON), which records are messages, and `OtlpIngestor.ingest_logs` joining them to their spans
whatever arrives first, over a real in-memory event log."""

from __future__ import annotations

import gzip
import json
from typing import Any

import msgspec
import pytest
from opentelemetry._logs import LogRecord as ApiLogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from convograph.events import Text, User
from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
from convograph.integrations.otlp import LogRecord, OtlpIngestor, decode_logs_request
from convograph.integrations.otlp.logs import NO_MESSAGES, NO_SPAN, NOT_GENAI, message_event, record_key
from convograph.integrations.otlp.wire import JSON, PROTOBUF, OtlpError, decompress
from convograph.jsonable import to_jsonable
from convograph.projections import project_thread
from convograph.testing import MemoryEventLog
from tests.support.genai_traces import TRACE, logged, weather_trace
from tests.test_integrations_otlp_ingest import history, stored

# -- decoding ------------------------------------------------------------------------------------------


def sdk_logs_body() -> tuple[bytes, str, str]:
    """Two records emitted through the SDK inside a span and encoded by the exporter's own encoder:
    a GenAI event (``event_name``, a map body) and a plain log line. Returns (body, trace, span)."""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("scope-y", "3.4")
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("chat m") as span:
        logger.emit(
            ApiLogRecord(
                event_name="gen_ai.user.message",
                body={"content": "hi", "n": 2, "tags": ["a"]},
                attributes={"gen_ai.system": "openai"},
            )
        )
        logger.emit(ApiLogRecord(body="GET / 200", severity_text="INFO"))
        context = span.get_span_context()
    provider.shutdown()
    body: bytes = encode_logs(exporter.get_finished_logs()).SerializeToString()
    return body, f"{context.trace_id:032x}", f"{context.span_id:016x}"


def test_protobuf_from_the_sdk_encoder() -> None:
    body, trace_id, span_id = sdk_logs_body()
    decoded = decode_logs_request(body, PROTOBUF)
    assert decoded.rejected == {}
    event, line = decoded.records
    assert (event.trace_id, event.span_id, event.event_name) == (trace_id, span_id, "gen_ai.user.message")
    assert event.body == {"content": "hi", "n": 2, "tags": ["a"]}
    assert event.attributes == {"gen_ai.system": "openai"}
    assert event.resource["service.name"] == "svc"
    assert (event.scope_name, event.scope_version) == ("scope-y", "3.4")
    assert event.observed_ns > 0
    assert (line.event_name, line.body, line.severity_text) == ("", "GET / 200", "INFO")


def test_json_as_the_specification_writes_it_with_event_name_attribute_and_absent_ids() -> None:
    document = {
        "resourceLogs": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                "scopeLogs": [
                    {
                        "scope": {"name": "s"},
                        "logRecords": [
                            {
                                "traceId": "A" * 32,
                                "spanId": "b" * 16,
                                "timeUnixNano": "1700000000000000001",
                                "attributes": [
                                    {"key": "event.name", "value": {"stringValue": "gen_ai.choice"}}
                                ],
                                "body": {
                                    "kvlistValue": {"values": [{"key": "index", "value": {"intValue": "0"}}]}
                                },
                            },
                            {"traceId": "0" * 32, "spanId": "", "body": {"stringValue": "x"}},
                        ],
                    }
                ],
            }
        ]
    }
    body = gzip.compress(json.dumps(document).encode())
    decoded = decode_logs_request(decompress(body, "gzip", limit=10_000), JSON)
    choice, plain = decoded.records
    assert (choice.trace_id, choice.span_id, choice.event_name) == ("a" * 32, "b" * 16, "gen_ai.choice")
    assert (choice.time_ns, choice.body) == (1_700_000_000_000_000_001, {"index": 0})
    assert choice.resource == {"service.name": "svc"}
    assert (plain.trace_id, plain.span_id, plain.body) == (None, None, "x")
    assert decode_logs_request(b"", JSON).records == []


@pytest.mark.parametrize(
    ("body", "media", "status", "words"),
    [
        (b"\xff\xff\xff\x07garbage", PROTOBUF, 400, "malformed protobuf ExportLogsServiceRequest"),
        (b"[]", JSON, 400, "expected an ExportLogsServiceRequest object, got a JSON array"),
        (b'{"resource_logs": []}', JSON, 400, "lowerCamelCase"),
        (
            b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"severityNumber": "high"}]}]}]}',
            JSON,
            400,
            "resourceLogs[0].scopeLogs[0].logRecords[0].severityNumber",
        ),
        (b"x", "text/plain", 415, "unsupported Content-Type"),
    ],
)
def test_unreadable_bodies(body: bytes, media: str, status: int, words: str) -> None:
    with pytest.raises(OtlpError) as caught:
        decode_logs_request(body, media)
    assert caught.value.status == status
    assert words in caught.value.message


def test_wrong_length_ids_are_rejected_one_by_one() -> None:
    document = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {"traceId": "ab", "spanId": "c" * 16},
                            {"traceId": "a" * 32, "spanId": "c" * 15},
                            {"traceId": "a" * 32, "spanId": "c" * 16},
                        ]
                    }
                ]
            }
        ]
    }
    decoded = decode_logs_request(json.dumps(document).encode(), JSON)
    assert len(decoded.records) == 1
    assert decoded.rejected == {
        "traceId must be 16 bytes, hex-encoded": 1,
        "spanId must be 8 bytes, hex-encoded": 1,
    }


# -- which records are messages --------------------------------------------------------------------


def record(name: str, body: Any = None, **fields: Any) -> LogRecord:
    return LogRecord(
        **({"trace_id": TRACE, "span_id": "1" * 16, "observed_ns": 5} | fields), event_name=name, body=body
    )


def test_message_events_and_the_reasons_others_are_skipped() -> None:
    event = message_event(record("gen_ai.user.message", {"content": "hi"}, attributes={"gen_ai.system": "x"}))
    assert not isinstance(event, str)
    assert (event.name, event.time_ns, event.attributes) == (
        "gen_ai.user.message",
        5,
        {"gen_ai.system": "x", "content": "hi"},
    )
    bare = message_event(record("gen_ai.user.message", "plain text"))
    assert not isinstance(bare, str)
    assert bare.attributes == {"content": "plain text"}
    assert message_event(record("", "GET /")) == NOT_GENAI
    assert message_event(record("gen_ai.evaluation.result", {})) == NO_MESSAGES
    assert message_event(record("gen_ai.choice", {}, span_id=None)) == NO_SPAN


def test_a_record_key_names_the_record_not_its_delivery() -> None:
    one = record("gen_ai.user.message", {"content": "hi"})
    assert record_key(one) == record_key(record("gen_ai.user.message", {"content": "hi"}))
    assert record_key(one) != record_key(record("gen_ai.user.message", {"content": "hi"}, observed_ns=6))
    assert record_key(one) != record_key(record("gen_ai.user.message", {"content": "ho"}))


# -- joining records to their spans ----------------------------------------------------------------

WEATHER_HISTORY = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "research", "arguments": '{"city":"Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "rainy, 57F"},
    {"role": "assistant", "content": "It is rainy in Paris, 57F."},
]


async def ingest_all(deliveries: list[tuple[str, list[Any]]], ingestor: OtlpIngestor | None = None) -> Any:
    log = MemoryEventLog()
    ingestor = ingestor or OtlpIngestor(log)
    for kind, items in deliveries:
        await (ingestor.ingest(items) if kind == "spans" else ingestor.ingest_logs(items))
    return log, ingestor


def other_trace(items: list[Any], trace_id: str = "f" * 32) -> list[Any]:
    return [msgspec.structs.replace(item, trace_id=trace_id) for item in items]


@pytest.mark.parametrize("order", ["logs-first", "spans-first", "interleaved", "one-record-at-a-time"])
async def test_records_join_their_spans_in_any_order(order: str) -> None:
    """Any order, once the receiver has seen this source send messages as records (an earlier
    trace): a tool span waits for the logged messages of the call that requested it."""
    spans, records = logged(weather_trace(subagent=False))
    deliveries: list[tuple[str, list[Any]]] = [("logs", other_trace(records)), ("spans", other_trace(spans))]
    if order == "logs-first":
        deliveries += [("logs", records), ("spans", spans)]
    elif order == "spans-first":
        deliveries += [("spans", spans), ("logs", records)]
    elif order == "interleaved":
        deliveries += [
            ("logs", records[:2]),
            ("spans", spans[:2]),
            ("logs", records[2:]),
            ("spans", spans[2:]),
        ]
    else:
        deliveries += [("spans", spans[:2])] + [("logs", [item]) for item in records] + [("spans", spans[2:])]
    log, ingestor = await ingest_all(deliveries)
    events = await stored(log, TRACE)
    assert history(events) == WEATHER_HISTORY
    assert flatten_thread(events) == [
        ("user", "What's the weather in Paris?"),
        ("tool_call", "research"),
        ("text", "It is rainy in Paris, 57F."),
    ]
    assert ingestor.waiting_records == 0
    assert ingestor.held_count == 0
    # everything sent again, in one request each: nothing new
    before = len(events)
    report = await ingestor.ingest_logs(records)
    await ingestor.ingest(spans)
    assert (report.mapped, report.accepted_events) == (len(records), 0)
    assert len(await stored(log, TRACE)) == before


async def test_spans_first_from_a_source_never_seen_logging_still_has_every_message() -> None:
    """The limit (docs/integrations.md): before a source's first record, nothing says its tool
    spans should wait, so a tool run can come before the messages that requested it; every
    message is there all the same."""
    spans, records = logged(weather_trace(subagent=False))
    log, _ = await ingest_all([("spans", spans), ("logs", records)])
    events = await stored(log, TRACE)
    assert sorted(flatten_thread(events)) == [
        ("text", "It is rainy in Paris, 57F."),
        ("tool_call", "research"),
        ("user", "What's the weather in Paris?"),
    ]


def flatten_thread(events: list[Any]) -> list[tuple[str, str]]:
    conversation = reduce_conversation_events(create_conversation(), events)
    views = to_jsonable(project_thread(conversation, default_active(conversation)))
    return [
        (content["kind"], content.get("text") or content.get("content") or content.get("name"))
        for content in (view["content"] for view in views)
    ]


async def test_a_new_process_stores_nothing_twice() -> None:
    spans, records = logged(weather_trace(subagent=False))
    log, _ = await ingest_all([("spans", spans), ("logs", records)])
    before = await stored(log, TRACE)
    restarted = OtlpIngestor(log)
    await restarted.ingest(spans)
    await restarted.ingest_logs(records)
    assert await stored(log, TRACE) == before


async def test_records_whose_span_never_comes_are_written_after_the_hold_or_at_close() -> None:
    now = [0.0]
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log, clock=lambda: now[0], hold_seconds=30)
    user = record("gen_ai.user.message", {"content": "anyone there?"})
    report = await ingestor.ingest_logs([user])
    assert (report.mapped, report.held, ingestor.waiting_records) == (1, 1, 1)
    assert await log.get_conversation(TRACE) is None
    now[0] = 29.0
    assert await ingestor.release_expired() == 0
    now[0] = 31.0
    assert await ingestor.release_expired() == 1
    [event] = await stored(log, TRACE)
    assert isinstance(event, User)
    assert (event.content, event.run_id.startswith("otel:u:"), event.parent_id) == (
        "anyone there?",
        True,
        None,
    )
    assert ingestor.waiting_records == 0
    # a record kept at shutdown is written by close()
    answer = record("gen_ai.choice", {"index": 0, "message": {"content": "yes"}}, span_id="2" * 16)
    await ingestor.ingest_logs([answer])
    await ingestor.close()
    assert isinstance((await stored(log, TRACE))[-1], Text)


async def test_a_call_whose_records_stop_short_keeps_them_and_its_tool_until_the_hold_ends() -> None:
    """The first call's span arrived, then only its user message (its choice is late): the call's
    end (its usage) and the tool it requested wait for the choice; when the hold ends, both are
    written all the same, the usage first, as if the messages had come."""
    spans, records = logged(weather_trace(subagent=False))
    now = [0.0]
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log, clock=lambda: now[0])
    await ingestor.ingest_logs(other_trace(records))  # this source logs its messages
    await ingestor.ingest(other_trace(spans))
    first_call = [r for r in records if r.span_id == records[0].span_id]
    chat, tool = spans[0], spans[1]
    await ingestor.ingest([chat])
    await ingestor.ingest_logs(first_call[:-1])
    report = await ingestor.ingest([tool])
    assert report.held == 1
    assert [type(e).__name__ for e in await stored(log, TRACE)] == ["User"]
    now[0] = 10.0
    assert await ingestor.release_expired() == 0
    now[0] = 31.0
    assert await ingestor.release_expired() == 3  # the call's end, the tool, the call's kept records
    assert [type(e).__name__ for e in await stored(log, TRACE)][1:] == [
        "Usage",
        "ToolCall",
        "ToolProgress",
        "ToolResult",
    ]
    assert ingestor.held_count == 0


async def test_skipped_and_rejected_records_are_counted() -> None:
    ingestor = OtlpIngestor(MemoryEventLog())
    report = await ingestor.ingest_logs(
        [
            record("", "GET /"),
            record("gen_ai.user.message", {"content": "hi"}, trace_id=None, span_id=None),
            record("gen_ai.user.message", {"content": "hi"}),
        ],
        can_write=lambda cid: False,
    )
    assert report.skipped == {NOT_GENAI: 1, NO_SPAN: 1}
    assert report.rejected == {f"this API key may not write conversation {TRACE!r}": 1}
    assert report.mapped == 0


async def test_records_follow_the_conversation_their_trace_names() -> None:
    """The agent span naming the conversation arrives last: records stored under the trace id
    move with the rest of the trace."""
    spans, records = logged(weather_trace(conversation="named-1", subagent=False))
    log, _ = await ingest_all(
        [("logs", records[:3]), ("spans", spans[:-1]), ("logs", records[3:]), ("spans", spans[-1:])]
    )
    assert await log.get_conversation(TRACE) is None
    assert history(await stored(log, "named-1")) == WEATHER_HISTORY
