"""What every OTLP/HTTP body shares, whatever signal it carries (traces, logs): media types,
``Content-Encoding``, the errors a receiver answers, and ``AnyValue`` / attribute / id conversion
for both encodings.

The OTLP specification (opentelemetry-proto ``docs/specification.md``, "OTLP/HTTP") defines two
encodings of each export request:

- ``application/x-protobuf``: binary protobuf, decoded with the generated classes of
  ``opentelemetry-proto`` (upb, C);
- ``application/json``: the protobuf JSON mapping with OTLP's deviations: ``traceId`` / ``spanId``
  are hex strings (not base64), enum fields are integers, keys are lowerCamelCase, 64-bit integers
  may be strings, and unknown fields are ignored. A base64 id (what a generic protobuf JSON
  marshaller writes) is accepted too when it decodes to the right length.

Either may be gzip-compressed (``Content-Encoding: gzip``). What cannot be read at all raises
`OtlpError` (400, 413 or 415) naming the problem, with the JSON path of a bad field.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import msgspec

__all__ = [
    "JSON",
    "PROTOBUF",
    "ZERO_SPAN",
    "ZERO_TRACE",
    "JsonPath",
    "OtlpError",
    "decompress",
    "finite",
    "json_array",
    "json_attributes",
    "json_document",
    "json_id",
    "json_integer",
    "json_object",
    "json_string",
    "json_value",
    "kind_of",
    "media_type_of",
    "object_or_empty",
    "pb_attributes",
    "pb_value",
    "unsupported_media",
]

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"
ZERO_TRACE: Final = "0" * 32
ZERO_SPAN: Final = "0" * 16


class OtlpError(ValueError):
    """A body that cannot be read: ``status`` is the HTTP status to answer (400, 413 or 415)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def media_type_of(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` header: lowercased, parameters dropped."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def unsupported_media(media_type: str) -> OtlpError:
    return OtlpError(
        415,
        f"unsupported Content-Type {media_type or '(none)'!r}: OTLP/HTTP sends application/x-protobuf "
        "or application/json",
    )


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


# -- protobuf ----------------------------------------------------------------------------------------


def pb_attributes(pairs: Iterable[Any]) -> dict[str, Any]:
    """Repeated ``KeyValue`` -> a dict of plain values (`pb_value`; strings and integers, most
    values, without the call)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        value = pair.value
        which = value.WhichOneof("value")
        if which == "string_value":
            out[pair.key] = value.string_value
        elif which == "int_value":
            out[pair.key] = value.int_value
        else:
            out[pair.key] = pb_value(value)
    return out


def pb_value(value: Any) -> Any:
    """An ``AnyValue`` as a plain value: bytes as ``{"$base64": ...}``, a non-finite double as its
    proto3 JSON name, an empty value as ``None``."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "bool_value":
        return value.bool_value
    if which == "double_value":
        return finite(value.double_value)
    if which == "array_value":
        return [pb_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {pair.key: pb_value(pair.value) for pair in value.kvlist_value.values}
    if which == "bytes_value":
        return {"$base64": base64.b64encode(value.bytes_value).decode()}
    return None  # an empty AnyValue (or a string-table index this version does not use)


def finite(number: float) -> float | str:
    """A double as JSON can hold it: NaN and the infinities become their proto3 JSON names."""
    if number != number:
        return "NaN"
    if number in (float("inf"), float("-inf")):
        return "Infinity" if number > 0 else "-Infinity"
    return number


# -- JSON --------------------------------------------------------------------------------------------

_json_decoder = msgspec.json.Decoder()
_HEX: Final = frozenset("0123456789abcdef")


class JsonPath:
    """Where in the JSON document a value sits, for error messages (``resourceSpans[0].scopeSpans``)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def key(self, name: str) -> JsonPath:
        return JsonPath(f"{self.text}.{name}" if self.text else name)

    def index(self, number: int) -> JsonPath:
        return JsonPath(f"{self.text}[{number}]")


def json_document(body: bytes, request: str, top: str, snake: str) -> dict[str, Any] | None:
    """The request object of an OTLP/JSON body (``None`` for an empty body, a full success).
    ``request`` names the message, ``top`` its first field in lowerCamelCase, ``snake`` the
    snake_case spelling refused with a clear message."""
    if not body.strip():
        return None
    try:
        document = _json_decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise OtlpError(400, f"malformed JSON: {exc}") from None
    if not isinstance(document, dict):
        raise OtlpError(400, f"expected an {request} object, got a JSON {kind_of(document)}")
    if snake in document:
        raise OtlpError(
            400,
            f"field `{snake}`: OTLP/JSON uses lowerCamelCase field names (`{top}`, `traceId`, ...)",
        )
    return document


def json_id(value: Any, size: int) -> str | None:
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


def json_attributes(value: Any, where: JsonPath) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise OtlpError(
            400, f"field `{where.text}`: expected an array of key/value objects, got {kind_of(value)}"
        )
    out: dict[str, Any] = {}
    for index, pair in enumerate(value):
        pair_where = where.index(index)
        if not isinstance(pair, dict) or not isinstance(pair.get("key"), str):
            raise OtlpError(400, f'field `{pair_where.text}`: expected {{"key": string, "value": AnyValue}}')
        out[pair["key"]] = json_value(pair.get("value"), pair_where.key("value"))
    return out


def json_value(value: Any, where: JsonPath) -> Any:
    """An OTLP/JSON ``AnyValue`` (``{"stringValue": ...}``, ``{"arrayValue": {"values": [...]}}``, ...)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise OtlpError(400, f"field `{where.text}`: expected an AnyValue object, got {kind_of(value)}")
    if "stringValue" in value:
        return json_string(value["stringValue"], where.key("stringValue"))
    if "intValue" in value:
        return json_integer(value["intValue"], where.key("intValue"))
    if "boolValue" in value:
        flag = value["boolValue"]
        if not isinstance(flag, bool):
            raise OtlpError(400, f"field `{where.text}.boolValue`: expected a boolean, got {kind_of(flag)}")
        return flag
    if "doubleValue" in value:
        return _double(value["doubleValue"], where.key("doubleValue"))
    if "arrayValue" in value:
        items = json_array(object_or_empty(value["arrayValue"], where.key("arrayValue")), "values", where)
        return [json_value(item, where.key("arrayValue").index(i)) for i, item in enumerate(items)]
    if "kvlistValue" in value:
        kv = object_or_empty(value["kvlistValue"], where.key("kvlistValue"))
        return json_attributes(kv.get("values"), where.key("kvlistValue").key("values"))
    if "bytesValue" in value:
        data = value["bytesValue"]
        if not isinstance(data, str):
            raise OtlpError(400, f"field `{where.text}.bytesValue`: expected a base64 string")
        return {"$base64": data}
    return None  # an empty AnyValue


def json_array(container: Any, name: str, where: JsonPath) -> Sequence[Any]:
    value = container.get(name) if isinstance(container, dict) else None
    if value is None:
        return ()
    if not isinstance(value, list):
        raise OtlpError(400, f"field `{where.key(name).text}`: expected an array, got {kind_of(value)}")
    return value


def json_object(container: dict[str, Any], name: str, where: JsonPath) -> dict[str, Any]:
    value = container.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OtlpError(400, f"field `{where.key(name).text}`: expected an object, got {kind_of(value)}")
    return value


def json_items(
    document: dict[str, Any], resources: str, scopes: str, items: str
) -> Iterator[tuple[dict[str, Any], JsonPath, dict[str, Any], dict[str, Any]]]:
    """Every item of an OTLP/JSON request (spans, log records), in order, with where it sits, its
    resource's attributes and its scope: the ``resources`` / ``scopes`` / ``items`` arrays walked
    (``resourceSpans`` / ``scopeSpans`` / ``spans``; ``resourceLogs`` / ``scopeLogs`` /
    ``logRecords``). A value of the wrong JSON type is an `OtlpError` naming its path."""
    root = JsonPath("")
    for index, resource_items in enumerate(json_array(document, resources, root)):
        where = root.key(resources).index(index)
        resource_obj = json_object(object_or_empty(resource_items, where), "resource", where)
        resource = json_attributes(resource_obj.get("attributes"), where.key("resource").key("attributes"))
        for scope_index, scope_items in enumerate(json_array(resource_items, scopes, where)):
            scope_where = where.key(scopes).index(scope_index)
            scope = json_object(object_or_empty(scope_items, scope_where), "scope", scope_where)
            for item_index, raw in enumerate(json_array(scope_items, items, scope_where)):
                item_where = scope_where.key(items).index(item_index)
                yield object_or_empty(raw, item_where), item_where, resource, scope


def object_or_empty(value: Any, where: JsonPath) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OtlpError(400, f"field `{where.text}`: expected an object, got {kind_of(value)}")
    return value


def json_string(value: Any, where: JsonPath) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise OtlpError(400, f"field `{where.text}`: expected a string, got {kind_of(value)}")
    return value


def json_integer(value: Any, where: JsonPath) -> int:
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


def _double(value: Any, where: JsonPath) -> float | str:
    if isinstance(value, bool):
        raise OtlpError(400, f"field `{where.text}`: expected a number, got a boolean")
    if isinstance(value, int | float):
        return finite(float(value))
    if isinstance(value, str):
        try:
            return finite(float(value))
        except ValueError:
            pass
    raise OtlpError(400, f"field `{where.text}`: expected a number, got {value!r:.60}")


def kind_of(value: Any) -> str:
    """The JSON type of ``value``, for error messages."""
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
