"""OTLP/HTTP bodies -> spans: protobuf made by the OpenTelemetry SDK's own encoder, OTLP/JSON as the
specification writes it, gzip, and every way a body can be unreadable."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from convograph.integrations.otlp.decode import JSON, PROTOBUF, OtlpError, decode_request, decompress

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"
PARENT = "eee19b7ec3c1b173"


def sdk_request() -> bytes:
    """Two spans (a parent and a failed child with an event) made and encoded by the SDK."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("scope-x", "1.2")
    with tracer.start_as_current_span("invoke_agent a", kind=SpanKind.INTERNAL) as parent:
        parent.set_attribute("gen_ai.operation.name", "invoke_agent")
        with tracer.start_as_current_span("chat m", kind=SpanKind.CLIENT) as child:
            child.set_attributes(
                {"gen_ai.usage.input_tokens": 7, "temperature": 0.5, "flag": True, "tags": ["a", "b"]}
            )
            child.add_event("gen_ai.user.message", {"content": "hi"})
            child.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()
    body: bytes = encode_spans(exporter.get_finished_spans()).SerializeToString()
    return body


def test_protobuf_from_the_sdk_encoder() -> None:
    decoded = decode_request(sdk_request(), PROTOBUF)
    assert decoded.rejected == {}
    child, parent = decoded.spans
    assert parent.parent_span_id is None
    assert child.parent_span_id == parent.span_id
    assert len(child.trace_id) == 32
    assert len(child.span_id) == 16
    assert child.kind == 3
    assert parent.kind == 1
    assert child.attributes == {
        "gen_ai.usage.input_tokens": 7,
        "temperature": 0.5,
        "flag": True,
        "tags": ["a", "b"],
    }
    assert child.events[0].name == "gen_ai.user.message"
    assert child.events[0].attributes == {"content": "hi"}
    assert (child.status_code, child.status_message) == (2, "boom")
    assert child.resource["service.name"] == "svc"
    assert (child.scope_name, child.scope_version) == ("scope-x", "1.2")
    assert child.end_ns >= child.start_ns > 0


def otlp_json(span: dict[str, Any] | None = None, **resource_spans: Any) -> bytes:
    span = {
        "traceId": TRACE.upper(),  # hex ids are case-insensitive
        "spanId": SPAN,
        "parentSpanId": PARENT,
        "name": "chat gpt",
        "kind": 3,
        "startTimeUnixNano": "1544712660000000000",
        "endTimeUnixNano": 1544712661000000000,
        "attributes": [
            {"key": "s", "value": {"stringValue": "x"}},
            {"key": "i", "value": {"intValue": "42"}},
            {"key": "d", "value": {"doubleValue": 1.5}},
            {"key": "nan", "value": {"doubleValue": "NaN"}},
            {"key": "b", "value": {"boolValue": False}},
            {"key": "arr", "value": {"arrayValue": {"values": [{"intValue": 1}, {"stringValue": "two"}]}}},
            {
                "key": "kv",
                "value": {"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": "v"}}]}},
            },
            {"key": "raw", "value": {"bytesValue": "AAE="}},
            {"key": "empty", "value": {}},
        ],
        "events": [{"timeUnixNano": "1544712660500000000", "name": "e", "attributes": []}],
        "status": {"code": 2, "message": "failed"},
        "unknownField": {"ignored": True},
    } | (span or {})
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                "scopeSpans": [{"scope": {"name": "lib", "version": "1"}, "spans": [span]}],
            }
            | resource_spans
        ]
    }
    return json.dumps(document).encode()


def test_json_encoding_as_the_spec_writes_it() -> None:
    decoded = decode_request(otlp_json(), JSON)
    (span,) = decoded.spans
    assert (span.trace_id, span.span_id, span.parent_span_id) == (TRACE, SPAN, PARENT)
    assert span.start_ns == 1544712660000000000
    assert span.end_ns == 1544712661000000000
    assert span.attributes == {
        "s": "x",
        "i": 42,
        "d": 1.5,
        "nan": "NaN",
        "b": False,
        "arr": [1, "two"],
        "kv": {"k": "v"},
        "raw": {"$base64": "AAE="},
        "empty": None,
    }
    assert span.events[0].time_ns == 1544712660500000000
    assert (span.status_code, span.status_message) == (2, "failed")
    assert span.resource == {"service.name": "svc"}
    assert span.scope_name == "lib"


def test_json_base64_ids_from_generic_marshallers_are_accepted() -> None:
    import base64

    ids = {
        "traceId": base64.b64encode(bytes.fromhex(TRACE)).decode(),
        "spanId": base64.b64encode(bytes.fromhex(SPAN)).decode(),
    }
    (span,) = decode_request(otlp_json(ids), JSON).spans
    assert (span.trace_id, span.span_id) == (TRACE, SPAN)


def test_spans_with_unusable_ids_are_rejected_and_counted() -> None:
    body = otlp_json({"traceId": "0" * 32})
    decoded = decode_request(body, JSON)
    assert decoded.spans == []
    assert decoded.rejected == {"traceId must be 16 bytes, not all zero": 1}
    decoded = decode_request(otlp_json({"spanId": "xyz"}), JSON)
    assert decoded.rejected == {"spanId must be 8 bytes, hex-encoded": 1}


def test_empty_bodies_are_a_success() -> None:
    assert decode_request(b"", PROTOBUF).spans == []
    assert decode_request(b"", JSON).spans == []
    assert decode_request(b"{}", JSON).spans == []


@pytest.mark.parametrize(
    ("body", "media", "status", "words"),
    [
        (b"\xff\xff\xff\x07garbage", PROTOBUF, 400, "malformed protobuf ExportTraceServiceRequest"),
        (b"{not json", JSON, 400, "malformed JSON"),
        (b"[1, 2]", JSON, 400, "expected an ExportTraceServiceRequest object, got a JSON array"),
        (b'{"resource_spans": []}', JSON, 400, "lowerCamelCase"),
        (b'{"resourceSpans": {"a": 1}}', JSON, 400, "field `resourceSpans`: expected an array, got object"),
        (b"x", "text/plain", 415, "unsupported Content-Type 'text/plain'"),
        (b"x", "", 415, "unsupported Content-Type '(none)'"),
    ],
)
def test_unreadable_bodies_name_the_problem(body: bytes, media: str, status: int, words: str) -> None:
    with pytest.raises(OtlpError) as caught:
        decode_request(body, media)
    assert caught.value.status == status
    assert words in caught.value.message


def test_bad_field_types_name_the_path() -> None:
    body = otlp_json({"attributes": [{"key": "k", "value": {"intValue": "forty"}}]})
    with pytest.raises(OtlpError, match=r"resourceSpans\[0\]\.scopeSpans\[0\]\.spans\[0\]\.attributes\[0\]"):
        decode_request(body, JSON)
    with pytest.raises(OtlpError, match="expected an integer"):
        decode_request(otlp_json({"kind": "SPAN_KIND_CLIENT"}), JSON)  # enums are integers in OTLP/JSON


def test_gzip_and_its_failures() -> None:
    raw = sdk_request()
    assert decompress(gzip.compress(raw), "gzip", limit=10**6) == raw
    assert decompress(raw, None, limit=10**6) == raw
    with pytest.raises(OtlpError) as caught:
        decompress(b"not gzip", "gzip", limit=10**6)
    assert caught.value.status == 400
    with pytest.raises(OtlpError) as caught:
        decompress(gzip.compress(b"a" * 100_000), "gzip", limit=1000)  # a small body that inflates
    assert caught.value.status == 413
    with pytest.raises(OtlpError) as caught:
        decompress(gzip.compress(raw)[:-10], "gzip", limit=10**6)
    assert caught.value.status == 400
    assert "truncated" in caught.value.message
    with pytest.raises(OtlpError) as caught:
        decompress(raw, "br", limit=10**6)
    assert caught.value.status == 415
