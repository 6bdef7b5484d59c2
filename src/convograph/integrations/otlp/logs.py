"""GenAI event log records -> the message events of the spans they belong to.

Most instrumentations send a model call's messages by default not on its span but as *events* of
the OpenTelemetry Logs API: log records named ``gen_ai.system.message``, ``gen_ai.user.message``,
``gen_ai.assistant.message``, ``gen_ai.tool.message``, ``gen_ai.choice`` (semantic conventions up
to 1.36; the message's fields in the record's *body*), or one
``gen_ai.client.inference.operation.details`` (the latest conventions; the messages in its
attributes), each carrying the trace and span id of the call's span. A record's event name is
its ``event_name`` field, else its ``event.name`` attribute (older SDKs).

`message_event` turns such a record into the `SpanEvent` the span would have carried (the body's
fields over the record's attributes), which `messages.span_messages` reads like the span's own;
any other record is skipped with a reason. `record_key` identifies a record, so a re-sent export
is recognised; `in_order` sorts a span's records (by their time, stable for equal times: the
order they arrived in, which is the order one exporter emitted them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

import msgspec

from convograph.integrations.otlp.genai import MESSAGE_EVENTS
from convograph.integrations.otlp.messages import DETAILS_EVENT
from convograph.integrations.otlp.model import LogRecord, SpanEvent

__all__ = [
    "FINAL_EVENTS",
    "MESSAGE_EVENTS",
    "NOT_GENAI",
    "NO_MESSAGES",
    "NO_SPAN",
    "in_order",
    "message_event",
    "record_key",
]

FINAL_EVENTS: Final = frozenset({"gen_ai.choice", DETAILS_EVENT})
"""Events an instrumentation emits last for a call (after its input messages): once one of them and
the span have arrived, no more of the call's messages are coming."""

NOT_GENAI: Final = "not a GenAI event"
NO_MESSAGES: Final = "GenAI event that carries no conversation messages"
NO_SPAN: Final = "GenAI message event without a trace and span id (nothing to join it to)"

_key_encoder = msgspec.msgpack.Encoder(order="deterministic")


def message_event(record: LogRecord) -> SpanEvent | str:
    """The span event a GenAI message record stands for, or why the record is skipped."""
    name = record.event_name
    if name not in MESSAGE_EVENTS:
        return NO_MESSAGES if name.startswith("gen_ai.") else NOT_GENAI
    if record.trace_id is None or record.span_id is None:
        return NO_SPAN
    attributes = record.attributes
    body = record.body
    if isinstance(body, dict):
        attributes = {**attributes, **body}
    elif body is not None and "content" not in attributes:
        attributes = {**attributes, "content": body}  # a bare body: the message's content
    return SpanEvent(name=name, time_ns=record.time_ns or record.observed_ns, attributes=attributes)


def record_key(record: LogRecord) -> bytes:
    """16 bytes identifying a record (its span, name, times, body and attributes): the same record
    sent again has the same key. O(size of the record)."""
    encoded = _key_encoder.encode(
        (
            record.span_id,
            record.event_name,
            record.time_ns,
            record.observed_ns,
            record.body,
            record.attributes,
        )
    )
    return hashlib.blake2b(encoded, digest_size=16).digest()


def in_order(events: Iterable[SpanEvent]) -> list[SpanEvent]:
    """``events`` by time; events of equal time keep their order (Python's sort is stable)."""
    return sorted(events, key=_time)


def _time(event: SpanEvent) -> int:
    return event.time_ns
