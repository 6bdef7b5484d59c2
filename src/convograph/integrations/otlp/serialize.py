"""Spans -> OTLP request bodies: ``ExportTraceServiceRequest`` as OTLP/JSON or binary protobuf.

The inverse of `decode` (``decode_request(to_otlp_json(spans)) == spans`` for spans made here):
spans grouped by resource and instrumentation scope; in JSON, hex ids, lowerCamelCase keys,
integer enums and 64-bit integers as decimal strings, as the OTLP specification writes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from convograph.integrations.otlp.model import Span

__all__ = ["to_otlp_json", "to_otlp_protobuf"]

_json = msgspec.json.Encoder()


def to_otlp_json(spans: Sequence[Span]) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` in OTLP/JSON (hex ids, lowerCamelCase, 64-bit ints as strings)."""
    groups: dict[tuple[str, str, str], list[Span]] = {}
    resources: dict[str, dict[str, Any]] = {}
    for span in spans:
        resource_key = _json.encode(span.resource).decode()
        resources[resource_key] = span.resource
        groups.setdefault((resource_key, span.scope_name, span.scope_version), []).append(span)
    by_resource: dict[str, list[dict[str, Any]]] = {}
    for (resource_key, scope, version), members in groups.items():
        by_resource.setdefault(resource_key, []).append(
            {"scope": {"name": scope, "version": version}, "spans": [_json_span(span) for span in members]}
        )
    return {
        "resourceSpans": [
            {"resource": {"attributes": _json_attributes(resources[key])}, "scopeSpans": scopes}
            for key, scopes in by_resource.items()
        ]
    }


def _json_span(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "name": span.name,
        "kind": span.kind,
        "startTimeUnixNano": str(span.start_ns),
        "endTimeUnixNano": str(span.end_ns),
        "attributes": _json_attributes(span.attributes),
        "status": {
            "code": span.status_code,
            **({"message": span.status_message} if span.status_message else {}),
        },
    }
    if span.parent_span_id is not None:
        out["parentSpanId"] = span.parent_span_id
    if span.events:
        out["events"] = [
            {
                "name": event.name,
                "timeUnixNano": str(event.time_ns),
                "attributes": _json_attributes(event.attributes),
            }
            for event in span.events
        ]
    return out


def _json_attributes(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _json_value(value)} for key, value in attributes.items()]


def _json_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_json_value(item) for item in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": _json_attributes(value)}}
    return {}


def to_otlp_protobuf(spans: Sequence[Span]) -> bytes:
    """The same request as binary protobuf (``application/x-protobuf``)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request_json = to_otlp_json(spans)
    for resource_spans in request_json["resourceSpans"]:
        pb_resource = request.resource_spans.add()
        _pb_attributes(pb_resource.resource.attributes, resource_spans["resource"]["attributes"])
        for scope_spans in resource_spans["scopeSpans"]:
            pb_scope = pb_resource.scope_spans.add()
            pb_scope.scope.name = scope_spans["scope"]["name"]
            pb_scope.scope.version = scope_spans["scope"]["version"]
            for span in scope_spans["spans"]:
                pb = pb_scope.spans.add()
                pb.trace_id = bytes.fromhex(span["traceId"])
                pb.span_id = bytes.fromhex(span["spanId"])
                if "parentSpanId" in span:
                    pb.parent_span_id = bytes.fromhex(span["parentSpanId"])
                pb.name = span["name"]
                pb.kind = span["kind"]
                pb.start_time_unix_nano = int(span["startTimeUnixNano"])
                pb.end_time_unix_nano = int(span["endTimeUnixNano"])
                pb.status.code = span["status"]["code"]
                pb.status.message = span["status"].get("message", "")
                _pb_attributes(pb.attributes, span["attributes"])
                for event in span.get("events", ()):
                    pb_event = pb.events.add()
                    pb_event.name = event["name"]
                    pb_event.time_unix_nano = int(event["timeUnixNano"])
                    _pb_attributes(pb_event.attributes, event["attributes"])
    data: bytes = request.SerializeToString()
    return data


def _pb_attributes(target: Any, attributes: list[dict[str, Any]]) -> None:
    for pair in attributes:
        item = target.add()
        item.key = pair["key"]
        _pb_value(item.value, pair["value"])


def _pb_value(target: Any, value: dict[str, Any]) -> None:
    if "stringValue" in value:
        target.string_value = value["stringValue"]
    elif "boolValue" in value:
        target.bool_value = value["boolValue"]
    elif "intValue" in value:
        target.int_value = int(value["intValue"])
    elif "doubleValue" in value:
        target.double_value = value["doubleValue"]
    elif "arrayValue" in value:
        for item in value["arrayValue"]["values"]:
            _pb_value(target.array_value.values.add(), item)
    elif "kvlistValue" in value:
        _pb_attributes(target.kvlist_value.values, value["kvlistValue"]["values"])
