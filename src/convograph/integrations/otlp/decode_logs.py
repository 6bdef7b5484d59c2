"""OTLP/HTTP log bodies -> `LogRecord` values (``POST /v1/logs``).

An ``ExportLogsServiceRequest`` (``resourceLogs`` / ``scopeLogs`` / ``logRecords``) in either
encoding `wire` describes. A record may belong to no trace (empty or all-zero ids: kept, with
``None`` ids); a record whose ids have the wrong length is *rejected* (counted with its reason in
`DecodedLogs.rejected`) and the others go on. What cannot be read at all raises `OtlpError`.

Cost: O(body), one Python pass over the records after upb parsed the protobuf.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from convograph.integrations.otlp.model import LogRecord
from convograph.integrations.otlp.wire import (
    JSON,
    PROTOBUF,
    ZERO_SPAN,
    ZERO_TRACE,
    JsonPath,
    OtlpError,
    json_attributes,
    json_document,
    json_id,
    json_integer,
    json_items,
    json_string,
    json_value,
    pb_attributes,
    pb_value,
    unsupported_media,
)

__all__ = ["EVENT_NAME_ATTRIBUTE", "DecodedLogs", "decode_logs_request"]

EVENT_NAME_ATTRIBUTE: Final = "event.name"
"""Where SDKs before the ``event_name`` field (OTLP 1.5) put an event's name."""


class DecodedLogs(msgspec.Struct, kw_only=True):
    """What a request carried: the readable records, and why others were rejected (reason -> count)."""

    records: list[LogRecord] = msgspec.field(default_factory=list)
    rejected: dict[str, int] = msgspec.field(default_factory=dict)

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1


def decode_logs_request(body: bytes, media_type: str) -> DecodedLogs:
    """The records of an ``ExportLogsServiceRequest`` encoded as ``media_type`` (`PROTOBUF` or `JSON`)."""
    if media_type == PROTOBUF:
        return _decode_protobuf(body)
    if media_type == JSON:
        return _decode_json(body)
    raise unsupported_media(media_type)


def _ids(trace_hex: str, span_hex: str) -> tuple[str | None, str | None, str | None]:
    """``(trace id, span id, problem)``: absent (empty or zero) ids are ``None``; a wrong length is
    a problem."""
    trace_id = trace_hex or None
    span_id = span_hex or None
    if trace_id is not None and len(trace_id) != 32:
        return None, None, "traceId must be 16 bytes, hex-encoded"
    if span_id is not None and len(span_id) != 16:
        return None, None, "spanId must be 8 bytes, hex-encoded"
    return (
        None if trace_id == ZERO_TRACE else trace_id,
        None if span_id == ZERO_SPAN else span_id,
        None,
    )


def _event_name(name: str, attributes: dict[str, Any]) -> str:
    if name:
        return name
    legacy = attributes.get(EVENT_NAME_ATTRIBUTE)
    return legacy if isinstance(legacy, str) else ""


# -- protobuf ----------------------------------------------------------------------------------------


def _decode_protobuf(body: bytes) -> DecodedLogs:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    try:
        request = ExportLogsServiceRequest.FromString(body)
    except DecodeError as exc:
        raise OtlpError(400, f"malformed protobuf ExportLogsServiceRequest: {exc}") from None
    out = DecodedLogs()
    for resource_logs in request.resource_logs:
        resource = pb_attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope
            for pb in scope_logs.log_records:
                trace_id, span_id, problem = _ids(pb.trace_id.hex(), pb.span_id.hex())
                if problem is not None:
                    out.reject(problem)
                    continue
                attributes = pb_attributes(pb.attributes)
                out.records.append(
                    LogRecord(
                        trace_id=trace_id,
                        span_id=span_id,
                        event_name=_event_name(pb.event_name, attributes),
                        time_ns=pb.time_unix_nano,
                        observed_ns=pb.observed_time_unix_nano,
                        severity_number=pb.severity_number,
                        severity_text=pb.severity_text,
                        body=pb_value(pb.body) if pb.HasField("body") else None,
                        attributes=attributes,
                        resource=resource,
                        scope_name=scope.name,
                        scope_version=scope.version,
                        flags=pb.flags,
                        dropped_attributes=pb.dropped_attributes_count,
                    )
                )
    return out


# -- JSON --------------------------------------------------------------------------------------------


def _decode_json(body: bytes) -> DecodedLogs:
    document = json_document(body, "ExportLogsServiceRequest", "resourceLogs", "resource_logs")
    out = DecodedLogs()
    if document is None:
        return out  # an empty request is a success (spec: "Full Success")
    for raw, where, resource, scope in json_items(document, "resourceLogs", "scopeLogs", "logRecords"):
        record = _json_record(raw, where, resource, scope, out)
        if record is not None:
            out.records.append(record)
    return out


def _json_record(
    raw: dict[str, Any], where: JsonPath, resource: dict[str, Any], scope: dict[str, Any], out: DecodedLogs
) -> LogRecord | None:
    trace_hex = _json_hex(raw.get("traceId"), 16)
    span_hex = _json_hex(raw.get("spanId"), 8)
    trace_id, span_id, problem = _ids(trace_hex, span_hex)
    if problem is not None:
        out.reject(problem)
        return None
    attributes = json_attributes(raw.get("attributes"), where.key("attributes"))
    return LogRecord(
        trace_id=trace_id,
        span_id=span_id,
        event_name=_event_name(json_string(raw.get("eventName"), where.key("eventName")), attributes),
        time_ns=json_integer(raw.get("timeUnixNano"), where.key("timeUnixNano")),
        observed_ns=json_integer(raw.get("observedTimeUnixNano"), where.key("observedTimeUnixNano")),
        severity_number=json_integer(raw.get("severityNumber"), where.key("severityNumber")),
        severity_text=json_string(raw.get("severityText"), where.key("severityText")),
        body=json_value(raw.get("body"), where.key("body")),
        attributes=attributes,
        resource=resource,
        scope_name=json_string(scope.get("name"), where.key("scope.name")),
        scope_version=json_string(scope.get("version"), where.key("scope.version")),
        flags=json_integer(raw.get("flags"), where.key("flags")),
        dropped_attributes=json_integer(
            raw.get("droppedAttributesCount"), where.key("droppedAttributesCount")
        ),
    )


def _json_hex(value: Any, size: int) -> str:
    """An id as hex ("" when absent); a present value that is not an id of ``size`` bytes gives a
    hex string of the wrong length, so `_ids` names the problem."""
    if value is None or value == "":
        return ""
    parsed = json_id(value, size)
    return parsed if parsed is not None else "?"
