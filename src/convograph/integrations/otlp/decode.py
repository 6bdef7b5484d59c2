"""OTLP/HTTP trace bodies -> `Span` values (the wire side of ingest).

An ``ExportTraceServiceRequest`` as `wire` describes the encodings (protobuf or OTLP/JSON, gzip).
What cannot be read at all raises `OtlpError` (400, 413 or 415) naming the problem; a span that can
be read but has unusable ids is *rejected* (counted with its reason in `Decoded.rejected`), and
the other spans go on. A body using the original snake_case names is refused (400) rather than
read as empty.

Cost: O(body); protobuf parsing is done by upb (C), the conversion to `Span` is one Python pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from convograph.integrations.otlp.model import Span, SpanEvent
from convograph.integrations.otlp.wire import (
    JSON,
    PROTOBUF,
    ZERO_SPAN,
    ZERO_TRACE,
    JsonPath,
    OtlpError,
    decompress,
    json_array,
    json_attributes,
    json_document,
    json_id,
    json_integer,
    json_items,
    json_object,
    json_string,
    media_type_of,
    object_or_empty,
    pb_attributes,
    unsupported_media,
)

__all__ = ["JSON", "PROTOBUF", "Decoded", "OtlpError", "decode_request", "decompress", "media_type_of"]


class Decoded(msgspec.Struct, kw_only=True):
    """What a request carried: the readable spans, and why others were rejected (reason -> count)."""

    spans: list[Span] = msgspec.field(default_factory=list)
    rejected: dict[str, int] = msgspec.field(default_factory=dict)

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1


def decode_request(body: bytes, media_type: str) -> Decoded:
    """The spans of an ``ExportTraceServiceRequest`` encoded as ``media_type`` (`PROTOBUF` or `JSON`)."""
    if media_type == PROTOBUF:
        return _decode_protobuf(body)
    if media_type == JSON:
        return _decode_json(body)
    raise unsupported_media(media_type)


# -- protobuf ----------------------------------------------------------------------------------------


def _decode_protobuf(body: bytes) -> Decoded:
    """One pass over upb's parse; per span only what it has (most have no events or links).
    ~6 us per span of 15 attributes."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise OtlpError(400, f"malformed protobuf ExportTraceServiceRequest: {exc}") from None
    out = Decoded()
    append = out.spans.append
    for resource_spans in request.resource_spans:
        resource = pb_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope
            scope_name, scope_version = scope.name, scope.version
            for pb in scope_spans.spans:
                trace_id = pb.trace_id.hex()
                span_id = pb.span_id.hex()
                if (
                    len(trace_id) != 32
                    or len(span_id) != 16
                    or trace_id == ZERO_TRACE
                    or span_id == ZERO_SPAN
                ):
                    out.reject(_id_problem(trace_id, span_id) or "")
                    continue
                parent = pb.parent_span_id.hex()
                status = pb.status
                append(
                    Span(
                        trace_id=trace_id,
                        span_id=span_id,
                        parent_span_id=parent if len(parent) == 16 and parent != ZERO_SPAN else None,
                        name=pb.name,
                        kind=pb.kind,
                        start_ns=pb.start_time_unix_nano,
                        end_ns=pb.end_time_unix_nano,
                        attributes=pb_attributes(pb.attributes),
                        events=_pb_events(pb.events) if pb.events else (),
                        links=_pb_links(pb.links) if pb.links else (),
                        status_code=status.code,
                        status_message=status.message,
                        resource=resource,
                        scope_name=scope_name,
                        scope_version=scope_version,
                        trace_state=pb.trace_state,
                        flags=pb.flags,
                        dropped_attributes=pb.dropped_attributes_count,
                        dropped_events=pb.dropped_events_count,
                        dropped_links=pb.dropped_links_count,
                    )
                )
    return out


def _pb_events(events: Iterable[Any]) -> tuple[SpanEvent, ...]:
    return tuple(
        SpanEvent(name=event.name, time_ns=event.time_unix_nano, attributes=pb_attributes(event.attributes))
        for event in events
    )


def _pb_links(links: Iterable[Any]) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "traceId": link.trace_id.hex(),
            "spanId": link.span_id.hex(),
            "attributes": pb_attributes(link.attributes),
        }
        for link in links
    )


def _id_problem(trace_id: str, span_id: str) -> str | None:
    if len(trace_id) != 32 or trace_id == ZERO_TRACE:
        return "traceId must be 16 bytes, not all zero"
    if len(span_id) != 16 or span_id == ZERO_SPAN:
        return "spanId must be 8 bytes, not all zero"
    return None


# -- JSON --------------------------------------------------------------------------------------------


def _decode_json(body: bytes) -> Decoded:
    document = json_document(body, "ExportTraceServiceRequest", "resourceSpans", "resource_spans")
    if document is None:
        return Decoded()  # an empty request is a success (spec: "Full Success")
    out = Decoded()
    for raw, where, resource, scope in json_items(document, "resourceSpans", "scopeSpans", "spans"):
        span = _json_span(raw, where, resource, scope, out)
        if span is not None:
            out.spans.append(span)
    return out


def _json_span(
    raw: dict[str, Any], where: JsonPath, resource: dict[str, Any], scope: dict[str, Any], out: Decoded
) -> Span | None:
    trace_id = json_id(raw.get("traceId"), 16)
    span_id = json_id(raw.get("spanId"), 8)
    if trace_id is None or span_id is None:
        out.reject(
            "traceId must be 16 bytes and spanId 8 bytes, hex-encoded"
            if trace_id is None
            else "spanId must be 8 bytes, hex-encoded"
        )
        return None
    problem = _id_problem(trace_id, span_id)
    if problem is not None:
        out.reject(problem)
        return None
    parent = json_id(raw.get("parentSpanId"), 8)
    status = json_object(raw, "status", where)
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent if parent is not None and parent != ZERO_SPAN else None,
        name=json_string(raw.get("name"), where.key("name")),
        kind=json_integer(raw.get("kind"), where.key("kind")),
        start_ns=json_integer(raw.get("startTimeUnixNano"), where.key("startTimeUnixNano")),
        end_ns=json_integer(raw.get("endTimeUnixNano"), where.key("endTimeUnixNano")),
        attributes=json_attributes(raw.get("attributes"), where.key("attributes")),
        events=tuple(_json_events(raw, where)),
        links=tuple(_json_links(raw, where)),
        status_code=json_integer(status.get("code"), where.key("status").key("code")),
        status_message=json_string(status.get("message"), where.key("status").key("message")),
        resource=resource,
        scope_name=json_string(scope.get("name"), where.key("scope.name")),
        scope_version=json_string(scope.get("version"), where.key("scope.version")),
        trace_state=json_string(raw.get("traceState"), where.key("traceState")),
        flags=json_integer(raw.get("flags"), where.key("flags")),
        dropped_attributes=json_integer(
            raw.get("droppedAttributesCount"), where.key("droppedAttributesCount")
        ),
        dropped_events=json_integer(raw.get("droppedEventsCount"), where.key("droppedEventsCount")),
        dropped_links=json_integer(raw.get("droppedLinksCount"), where.key("droppedLinksCount")),
    )


def _json_events(raw: dict[str, Any], where: JsonPath) -> Iterable[SpanEvent]:
    for index, event in enumerate(json_array(raw, "events", where)):
        event_where = where.key("events").index(index)
        event = object_or_empty(event, event_where)
        yield SpanEvent(
            name=json_string(event.get("name"), event_where.key("name")),
            time_ns=json_integer(event.get("timeUnixNano"), event_where.key("timeUnixNano")),
            attributes=json_attributes(event.get("attributes"), event_where.key("attributes")),
        )


def _json_links(raw: dict[str, Any], where: JsonPath) -> Iterable[dict[str, Any]]:
    for index, link in enumerate(json_array(raw, "links", where)):
        link_where = where.key("links").index(index)
        link = object_or_empty(link, link_where)
        yield {
            "traceId": json_id(link.get("traceId"), 16) or "",
            "spanId": json_id(link.get("spanId"), 8) or "",
            "attributes": json_attributes(link.get("attributes"), link_where.key("attributes")),
        }
