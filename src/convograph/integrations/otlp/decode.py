"""OTLP/HTTP trace bodies -> `Span` values (the wire side of ingest).

The OTLP specification (opentelemetry-proto ``docs/specification.md``, "OTLP/HTTP") defines two
encodings of ``ExportTraceServiceRequest``:

- ``application/x-protobuf``: binary protobuf, decoded with the generated classes of
  ``opentelemetry-proto``;
- ``application/json``: the protobuf JSON mapping with OTLP's deviations: ``traceId`` / ``spanId``
  are hex strings (not base64), enum fields are integers, keys are lowerCamelCase, 64-bit integers
  may be strings, and unknown fields are ignored. A base64 id (what a generic protobuf JSON
  marshaller writes) is accepted too when it decodes to the right length, since some exporters
  send it; a body using the original snake_case names is refused (400) rather than read as empty.

Either may be gzip-compressed (``Content-Encoding: gzip``). What cannot be read at all raises
`OtlpError` (400, 413 or 415) naming the problem; a span that can be read but has unusable ids is
*rejected* (counted with its reason in `Decoded.rejected`), and the other spans go on.

Cost: O(body); protobuf parsing is done by upb (C), the conversion to `Span` is one Python pass.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from convograph.integrations.otlp.model import Span, SpanEvent

__all__ = ["JSON", "PROTOBUF", "Decoded", "OtlpError", "decode_request", "decompress", "media_type_of"]

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"

_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16


class OtlpError(ValueError):
    """A body that cannot be read: ``status`` is the HTTP status to answer (400, 413 or 415)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Decoded(msgspec.Struct, kw_only=True):
    """What a request carried: the readable spans, and why others were rejected (reason -> count)."""

    spans: list[Span] = msgspec.field(default_factory=list)
    rejected: dict[str, int] = msgspec.field(default_factory=dict)

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1


def media_type_of(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` header: lowercased, parameters dropped."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def decompress(body: bytes, content_encoding: str | None, *, limit: int) -> bytes:
    """``body`` decoded per ``Content-Encoding`` (none or gzip, as OTLP allows); at most ``limit``
    bytes come out (a larger result is a 413, so a small compressed body cannot exhaust memory)."""
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise OtlpError(415, f"unsupported Content-Encoding {content_encoding!r}: OTLP allows gzip or none")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpError(400, f"body is not valid gzip: {exc}") from None
    if len(out) > limit:
        raise OtlpError(413, f"decompressed body is larger than the limit of {limit} bytes")
    if not inflater.eof:
        raise OtlpError(400, "gzip body is truncated")
    return out


def decode_request(body: bytes, media_type: str) -> Decoded:
    """The spans of an ``ExportTraceServiceRequest`` encoded as ``media_type`` (`PROTOBUF` or `JSON`)."""
    if media_type == PROTOBUF:
        return _decode_protobuf(body)
    if media_type == JSON:
        return _decode_json(body)
    raise OtlpError(
        415,
        f"unsupported Content-Type {media_type or '(none)'!r}: OTLP/HTTP sends application/x-protobuf "
        "or application/json",
    )


# -- protobuf ----------------------------------------------------------------------------------------


def _decode_protobuf(body: bytes) -> Decoded:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise OtlpError(400, f"malformed protobuf ExportTraceServiceRequest: {exc}") from None
    out = Decoded()
    for resource_spans in request.resource_spans:
        resource = _pb_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope
            for pb in scope_spans.spans:
                trace_id = pb.trace_id.hex()
                span_id = pb.span_id.hex()
                problem = _id_problem(trace_id, span_id)
                if problem is not None:
                    out.reject(problem)
                    continue
                parent = pb.parent_span_id.hex()
                status = pb.status
                out.spans.append(
                    Span(
                        trace_id=trace_id,
                        span_id=span_id,
                        parent_span_id=parent if len(parent) == 16 and parent != _ZERO_SPAN else None,
                        name=pb.name,
                        kind=pb.kind,
                        start_ns=pb.start_time_unix_nano,
                        end_ns=pb.end_time_unix_nano,
                        attributes=_pb_attributes(pb.attributes),
                        events=tuple(
                            SpanEvent(
                                name=event.name,
                                time_ns=event.time_unix_nano,
                                attributes=_pb_attributes(event.attributes),
                            )
                            for event in pb.events
                        ),
                        links=tuple(
                            {
                                "traceId": link.trace_id.hex(),
                                "spanId": link.span_id.hex(),
                                "attributes": _pb_attributes(link.attributes),
                            }
                            for link in pb.links
                        ),
                        status_code=status.code,
                        status_message=status.message,
                        resource=resource,
                        scope_name=scope.name,
                        scope_version=scope.version,
                        trace_state=pb.trace_state,
                        flags=pb.flags,
                        dropped_attributes=pb.dropped_attributes_count,
                        dropped_events=pb.dropped_events_count,
                        dropped_links=pb.dropped_links_count,
                    )
                )
    return out


def _pb_attributes(pairs: Iterable[Any]) -> dict[str, Any]:
    return {pair.key: _pb_value(pair.value) for pair in pairs}


def _pb_value(value: Any) -> Any:
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "bool_value":
        return value.bool_value
    if which == "double_value":
        return _finite(value.double_value)
    if which == "array_value":
        return [_pb_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {pair.key: _pb_value(pair.value) for pair in value.kvlist_value.values}
    if which == "bytes_value":
        return {"$base64": base64.b64encode(value.bytes_value).decode()}
    return None  # an empty AnyValue (or a string-table index this version does not use)


def _finite(number: float) -> float | str:
    """A double as JSON can hold it: NaN and the infinities become their proto3 JSON names."""
    if number != number:
        return "NaN"
    if number in (float("inf"), float("-inf")):
        return "Infinity" if number > 0 else "-Infinity"
    return number


def _id_problem(trace_id: str, span_id: str) -> str | None:
    if len(trace_id) != 32 or trace_id == _ZERO_TRACE:
        return "traceId must be 16 bytes, not all zero"
    if len(span_id) != 16 or span_id == _ZERO_SPAN:
        return "spanId must be 8 bytes, not all zero"
    return None


# -- JSON --------------------------------------------------------------------------------------------

_json_decoder = msgspec.json.Decoder()
_HEX: Final = frozenset("0123456789abcdef")


class _Path:
    """Where in the JSON document a value sits, for error messages (``resourceSpans[0].scopeSpans``)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def key(self, name: str) -> _Path:
        return _Path(f"{self.text}.{name}" if self.text else name)

    def index(self, number: int) -> _Path:
        return _Path(f"{self.text}[{number}]")


def _decode_json(body: bytes) -> Decoded:
    if not body.strip():
        return Decoded()  # an empty request is a success (spec: "Full Success")
    try:
        document = _json_decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise OtlpError(400, f"malformed JSON: {exc}") from None
    root = _Path("")
    if not isinstance(document, dict):
        raise OtlpError(400, f"expected an ExportTraceServiceRequest object, got a JSON {_kind(document)}")
    if "resource_spans" in document:
        raise OtlpError(
            400,
            "field `resource_spans`: OTLP/JSON uses lowerCamelCase field names (`resourceSpans`, "
            "`scopeSpans`, `traceId`, ...)",
        )
    out = Decoded()
    for index, resource_spans in enumerate(_array(document, "resourceSpans", root)):
        where = root.key("resourceSpans").index(index)
        resource_obj = _object(_object_or_empty(resource_spans, where), "resource", where)
        resource = _json_attributes(resource_obj.get("attributes"), where.key("resource").key("attributes"))
        for scope_index, scope_spans in enumerate(_array(resource_spans, "scopeSpans", where)):
            scope_where = where.key("scopeSpans").index(scope_index)
            scope = _object(_object_or_empty(scope_spans, scope_where), "scope", scope_where)
            for span_index, raw in enumerate(_array(scope_spans, "spans", scope_where)):
                span_where = scope_where.key("spans").index(span_index)
                span = _json_span(_object_or_empty(raw, span_where), span_where, resource, scope, out)
                if span is not None:
                    out.spans.append(span)
    return out


def _json_span(
    raw: dict[str, Any], where: _Path, resource: dict[str, Any], scope: dict[str, Any], out: Decoded
) -> Span | None:
    trace_id = _json_id(raw.get("traceId"), 16)
    span_id = _json_id(raw.get("spanId"), 8)
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
    parent = _json_id(raw.get("parentSpanId"), 8)
    status = _object(raw, "status", where)
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent if parent is not None and parent != _ZERO_SPAN else None,
        name=_string(raw.get("name"), where.key("name")),
        kind=_integer(raw.get("kind"), where.key("kind")),
        start_ns=_integer(raw.get("startTimeUnixNano"), where.key("startTimeUnixNano")),
        end_ns=_integer(raw.get("endTimeUnixNano"), where.key("endTimeUnixNano")),
        attributes=_json_attributes(raw.get("attributes"), where.key("attributes")),
        events=tuple(_json_events(raw, where)),
        links=tuple(_json_links(raw, where)),
        status_code=_integer(status.get("code"), where.key("status").key("code")),
        status_message=_string(status.get("message"), where.key("status").key("message")),
        resource=resource,
        scope_name=_string(scope.get("name"), where.key("scope.name")),
        scope_version=_string(scope.get("version"), where.key("scope.version")),
        trace_state=_string(raw.get("traceState"), where.key("traceState")),
        flags=_integer(raw.get("flags"), where.key("flags")),
        dropped_attributes=_integer(raw.get("droppedAttributesCount"), where.key("droppedAttributesCount")),
        dropped_events=_integer(raw.get("droppedEventsCount"), where.key("droppedEventsCount")),
        dropped_links=_integer(raw.get("droppedLinksCount"), where.key("droppedLinksCount")),
    )


def _json_events(raw: dict[str, Any], where: _Path) -> Iterable[SpanEvent]:
    for index, event in enumerate(_array(raw, "events", where)):
        event_where = where.key("events").index(index)
        event = _object_or_empty(event, event_where)
        yield SpanEvent(
            name=_string(event.get("name"), event_where.key("name")),
            time_ns=_integer(event.get("timeUnixNano"), event_where.key("timeUnixNano")),
            attributes=_json_attributes(event.get("attributes"), event_where.key("attributes")),
        )


def _json_links(raw: dict[str, Any], where: _Path) -> Iterable[dict[str, Any]]:
    for index, link in enumerate(_array(raw, "links", where)):
        link_where = where.key("links").index(index)
        link = _object_or_empty(link, link_where)
        yield {
            "traceId": _json_id(link.get("traceId"), 16) or "",
            "spanId": _json_id(link.get("spanId"), 8) or "",
            "attributes": _json_attributes(link.get("attributes"), link_where.key("attributes")),
        }


def _json_id(value: Any, size: int) -> str | None:
    """A trace/span id as lowercase hex: hex as OTLP/JSON says, or base64 of exactly ``size`` bytes."""
    if not isinstance(value, str) or not value:
        return None
    lowered = value.lower()
    if len(lowered) == 2 * size and _HEX.issuperset(lowered):
        return lowered
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == size else None


def _json_attributes(value: Any, where: _Path) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise OtlpError(
            400, f"field `{where.text}`: expected an array of key/value objects, got {_kind(value)}"
        )
    out: dict[str, Any] = {}
    for index, pair in enumerate(value):
        pair_where = where.index(index)
        if not isinstance(pair, dict) or not isinstance(pair.get("key"), str):
            raise OtlpError(400, f'field `{pair_where.text}`: expected {{"key": string, "value": AnyValue}}')
        out[pair["key"]] = _json_value(pair.get("value"), pair_where.key("value"))
    return out


def _json_value(value: Any, where: _Path) -> Any:
    """An OTLP/JSON ``AnyValue`` (``{"stringValue": ...}``, ``{"arrayValue": {"values": [...]}}``, ...)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise OtlpError(400, f"field `{where.text}`: expected an AnyValue object, got {_kind(value)}")
    if "stringValue" in value:
        return _string(value["stringValue"], where.key("stringValue"))
    if "intValue" in value:
        return _integer(value["intValue"], where.key("intValue"))
    if "boolValue" in value:
        flag = value["boolValue"]
        if not isinstance(flag, bool):
            raise OtlpError(400, f"field `{where.text}.boolValue`: expected a boolean, got {_kind(flag)}")
        return flag
    if "doubleValue" in value:
        return _double(value["doubleValue"], where.key("doubleValue"))
    if "arrayValue" in value:
        items = _array(_object_or_empty(value["arrayValue"], where.key("arrayValue")), "values", where)
        return [_json_value(item, where.key("arrayValue").index(i)) for i, item in enumerate(items)]
    if "kvlistValue" in value:
        kv = _object_or_empty(value["kvlistValue"], where.key("kvlistValue"))
        return _json_attributes(kv.get("values"), where.key("kvlistValue").key("values"))
    if "bytesValue" in value:
        data = value["bytesValue"]
        if not isinstance(data, str):
            raise OtlpError(400, f"field `{where.text}.bytesValue`: expected a base64 string")
        return {"$base64": data}
    return None  # an empty AnyValue


def _array(container: Any, name: str, where: _Path) -> Sequence[Any]:
    value = container.get(name) if isinstance(container, dict) else None
    if value is None:
        return ()
    if not isinstance(value, list):
        raise OtlpError(400, f"field `{where.key(name).text}`: expected an array, got {_kind(value)}")
    return value


def _object(container: dict[str, Any], name: str, where: _Path) -> dict[str, Any]:
    value = container.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OtlpError(400, f"field `{where.key(name).text}`: expected an object, got {_kind(value)}")
    return value


def _object_or_empty(value: Any, where: _Path) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OtlpError(400, f"field `{where.text}`: expected an object, got {_kind(value)}")
    return value


def _string(value: Any, where: _Path) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise OtlpError(400, f"field `{where.text}`: expected a string, got {_kind(value)}")
    return value


def _integer(value: Any, where: _Path) -> int:
    """An integer field: a JSON number, or a decimal string (how proto3 JSON writes 64-bit ints)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise OtlpError(400, f"field `{where.text}`: expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise OtlpError(400, f"field `{where.text}`: expected an integer, got {value!r:.60}")


def _double(value: Any, where: _Path) -> float | str:
    if isinstance(value, bool):
        raise OtlpError(400, f"field `{where.text}`: expected a number, got a boolean")
    if isinstance(value, int | float):
        return _finite(float(value))
    if isinstance(value, str):
        try:
            return _finite(float(value))
        except ValueError:
            pass
    raise OtlpError(400, f"field `{where.text}`: expected a number, got {value!r:.60}")


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"
