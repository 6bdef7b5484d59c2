"""``POST /v1/logs`` on a real ``convograph serve``: the OpenTelemetry project's OpenAI
instrumentation sends message content as log records, correlated with its spans by trace and span
id. With the SDK's OTLP/HTTP span and log exporters pointed at the server, the conversation shows
the user message, the tool call, its result and the answer, whichever of the two exporters
delivers first, and a re-sent export changes nothing. Both shapes the instrumentation emits:

- ``OpenAIInstrumentor().instrument()`` with default settings (no semantic-convention opt-in) and
  content capture on through ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``: with the
  installed ``opentelemetry-util-genai`` (1.0b0, whose ``is_experimental_mode()`` is always true)
  this is the latest-conventions path, where ``EVENT_ONLY`` sends one
  ``gen_ai.client.inference.operation.details`` log record per call (and ``true``, the value
  documented for the 1.30 path, captures nothing);
- its conventions-1.30 path (per-message ``gen_ai.user.message`` ... ``gen_ai.choice`` records, the
  message in the body), which ``instrument()`` takes with an older util-genai and
  ``..._CAPTURE_MESSAGE_CONTENT=true``: the instrumentation's own wrapper
  (``chat_completions_create_v_old``) applied to the SDK as ``instrument()`` applies it.

And the receiver speaks OTLP/HTTP like ``/v1/traces``.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from tests.integration.test_otlp_server import flatten, status_of, weather_loop
from tests.support.server import ServerProcess, running_server

from convograph.testing import ModelServer
from convograph.testing.model_script import Reply, Say, ScriptUsage, ToolUse

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("otlp-logs") / "data") as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=20) as client:
        yield client


SCRIPT = [
    Reply(
        content=[ToolUse(name="get_weather", arguments={"city": "Paris"}, id="call_w1")],
        usage=ScriptUsage(input_tokens=30, output_tokens=7),
    ),
    Reply(content=[Say(text="It is rainy in Paris.")], usage=ScriptUsage(input_tokens=52, output_tokens=6)),
]


def conversation_of_service(http: httpx.Client, service: str) -> str:
    """The conversation whose events name ``service`` (the trace id: the app sets no conversation id)."""
    found = {
        row["id"]
        for row in http.get("/v1/conversations").json()["conversations"]
        for line in http.get(f"/v1/conversations/{row['id']}/events").text.splitlines()
        if f'"{service}"' in line
    }
    assert len(found) == 1, found
    return found.pop()


class Sent:
    """What the instrumentation made, kept to send again (an exporter retrying)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.records: list[Any] = []

    def resend(self, server: ServerProcess) -> None:
        """Every log record and span again, logs first, two per export."""
        logs = OTLPLogExporter(endpoint=f"{server.url}/v1/logs")
        traces = OTLPSpanExporter(endpoint=f"{server.url}/v1/traces")
        for i in range(0, len(self.records), 2):
            logs.export(self.records[i : i + 2])
        for i in range(0, len(self.spans), 2):
            traces.export(self.spans[i : i + 2])


def run_instrumented(
    server: ServerProcess,
    service: str,
    *,
    legacy: bool,
    stream: bool,
    logs_first: bool | None,
    gzip_body: bool = False,
) -> Sent:
    """The plain ``openai`` SDK under the OpenAI instrumentation with both OTLP/HTTP exporters.

    ``logs_first``: ``None`` lets both batch exporters send as they like; ``True`` / ``False``
    sends everything of one side before the other side sends anything, one item per export."""
    import openai

    resource = Resource.create({"service.name": service})
    compression = Compression.Gzip if gzip_body else Compression.NoCompression
    span_exporter = OTLPSpanExporter(endpoint=f"{server.url}/v1/traces", compression=compression)
    log_exporter = OTLPLogExporter(endpoint=f"{server.url}/v1/logs", compression=compression)
    tracer_provider = TracerProvider(resource=resource)
    logger_provider = LoggerProvider(resource=resource)
    sent = Sent()
    tracer_provider.add_span_processor(SimpleSpanProcessor(_Collect(sent.spans)))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(_Collect(sent.records)))
    if logs_first is None:
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter, schedule_delay_millis=20))
        logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(log_exporter, schedule_delay_millis=20, max_export_batch_size=2)
        )
    with instrumented(tracer_provider, logger_provider, legacy=legacy):
        with ModelServer(SCRIPT) as model:
            client = openai.OpenAI(base_url=model.openai_base_url, api_key="k", max_retries=0)
            weather_loop(client, tracer_provider.get_tracer("app"), stream=stream)
        assert tracer_provider.force_flush(10_000)
        assert logger_provider.force_flush(10_000)
    tracer_provider.shutdown()
    logger_provider.shutdown()
    if logs_first is not None:
        sends = [
            lambda: [log_exporter.export([record]) for record in sent.records],
            lambda: [span_exporter.export([span]) for span in sent.spans],
        ]
        for send in sends if logs_first else reversed(sends):
            send()
    return sent


@contextlib.contextmanager
def instrumented(tracer_provider: Any, logger_provider: Any, *, legacy: bool) -> Iterator[None]:
    """``OpenAIInstrumentor().instrument()``, or (``legacy``) its conventions-1.30 wrapper with
    content capture on, wrapped around the SDK the way ``instrument()`` wraps it."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    if not legacy:
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracer_provider, logger_provider=logger_provider)
        try:
            yield
        finally:
            instrumentor.uninstrument()
        return
    import openai
    from opentelemetry._logs import get_logger
    from opentelemetry.instrumentation.openai_v2.instruments import Instruments
    from opentelemetry.instrumentation.openai_v2.patch import chat_completions_create_v_old
    from opentelemetry.instrumentation.utils import unwrap
    from opentelemetry.metrics import get_meter
    from opentelemetry.semconv.schemas import Schemas
    from opentelemetry.trace import get_tracer
    from wrapt import wrap_function_wrapper

    name = "opentelemetry.instrumentation.openai_v2"
    schema = Schemas.V1_30_0.value
    tracer = get_tracer(name, "", tracer_provider, schema_url=schema)
    logger = get_logger(name, "", logger_provider=logger_provider, schema_url=schema)
    instruments = Instruments(get_meter(name, "", None, schema_url=schema))
    wrap_function_wrapper(
        "openai.resources.chat.completions",
        "Completions.create",
        chat_completions_create_v_old(tracer, logger, instruments, True),
    )
    try:
        yield
    finally:
        unwrap(openai.resources.chat.completions.Completions, "create")


class _Collect:
    """An exporter that keeps what it is given (to send it later, in a chosen order)."""

    def __init__(self, into: list[Any]) -> None:
        self.into = into

    def export(self, batch: Any) -> Any:
        self.into.extend(batch)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def expect_weather_conversation(http: httpx.Client, cid: str) -> None:
    thread = flatten(http.get(f"/v1/conversations/{cid}/thread").json())
    assert thread == [
        (0, "user", "What's the weather in Paris?"),
        (0, "tool_call", "get_weather"),
        (0, "text", "It is rainy in Paris."),
    ]
    messages = http.get(f"/v1/conversations/{cid}/messages?format=openai").json()
    assert messages == [
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w1", "content": "rainy, 14C"},
        {"role": "assistant", "content": "It is rainy in Paris."},
    ]
    events = [json.loads(line) for line in http.get(f"/v1/conversations/{cid}/events").text.splitlines()]
    usage = [(event["inputTokens"], event["outputTokens"]) for event in events if event["type"] == "usage"]
    assert usage == [(30, 7), (52, 6)]


ORDERS = [(False, None), (True, None), (False, True), (False, False), (True, True), (True, False)]
ORDER_IDS = ["plain", "streamed", "logs-first", "spans-first", "streamed-logs-first", "streamed-spans-first"]


@pytest.mark.parametrize(("stream", "logs_first"), ORDERS, ids=ORDER_IDS)
def test_default_settings_event_only_content_arrives_as_log_records(
    server: ServerProcess,
    http: httpx.Client,
    monkeypatch: pytest.MonkeyPatch,
    stream: bool,
    logs_first: bool | None,
) -> None:
    """``instrument()`` with default settings and ``EVENT_ONLY``: spans carry no content, one
    ``gen_ai.client.inference.operation.details`` record per call carries it."""
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "EVENT_ONLY")
    service = f"event-only-app-{stream}-{logs_first}"
    sent = run_instrumented(server, service, legacy=False, stream=stream, logs_first=logs_first)
    assert {record.log_record.event_name for record in sent.records} == {
        "gen_ai.client.inference.operation.details"
    }
    assert not any("gen_ai.input.messages" in (span.attributes or {}) for span in sent.spans)
    check_and_resend(server, http, service, sent)


@pytest.mark.parametrize(("stream", "logs_first"), ORDERS, ids=ORDER_IDS)
def test_conventions_1_30_per_message_log_records(
    server: ServerProcess, http: httpx.Client, stream: bool, logs_first: bool | None
) -> None:
    """The instrumentation's conventions-1.30 path: one record per message, the message in its
    body; gzip-compressed exports for the streamed runs."""
    service = f"legacy-app-{stream}-{logs_first}"
    sent = run_instrumented(
        server, service, legacy=True, stream=stream, logs_first=logs_first, gzip_body=stream
    )
    assert [record.log_record.event_name for record in sent.records] == [
        "gen_ai.user.message",
        "gen_ai.choice",
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
    ]
    check_and_resend(server, http, service, sent)


def check_and_resend(server: ServerProcess, http: httpx.Client, service: str, sent: Sent) -> None:
    cid = conversation_of_service(http, service)
    expect_weather_conversation(http, cid)
    before = http.get(f"/v1/conversations/{cid}").json()["lastSeq"]
    sent.resend(server)  # the whole run exported again, cut differently: nothing new
    assert http.get(f"/v1/conversations/{cid}").json()["lastSeq"] == before
    expect_weather_conversation(http, cid)


def logs_json(records: list[dict[str, Any]], trace_id: str = "a" * 32) -> bytes:
    for record in records:
        record.setdefault("traceId", trace_id)
    return json.dumps(
        {"resourceLogs": [{"resource": {}, "scopeLogs": [{"scope": {"name": "t"}, "logRecords": records}]}]}
    ).encode()


def user_log(span_id: str, content: str, observed: int) -> dict[str, Any]:
    return {
        "spanId": span_id,
        "observedTimeUnixNano": str(observed),
        "eventName": "gen_ai.user.message",
        "attributes": [{"key": "gen_ai.system", "value": {"stringValue": "openai"}}],
        "body": {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": content}}]}},
    }


def test_json_gzip_partial_success_and_skipped_logs(http: httpx.Client) -> None:
    good = user_log("1" * 16, "hello from a log", 1_700_000_000_000_000_000)
    bad = user_log("1" * 15, "bad span id", 1_700_000_000_000_000_001)
    plain = {"spanId": "2" * 16, "body": {"stringValue": "GET / 200"}, "severityNumber": 9}
    body = logs_json([good, bad, plain], trace_id="b" * 32)
    response = http.post("/v1/logs", content=gzip.compress(body), headers=JSON | {"Content-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.json() == {
        "partialSuccess": {
            "rejectedLogRecords": "1",
            "errorMessage": "1 log record(s) rejected: 1 log record(s): spanId must be 8 bytes, hex-encoded",
        }
    }
    metrics = http.get("/metrics").text
    assert "convograph_otlp_log_records_skipped" in metrics
    # only a log record: its span never comes, so it is written after the hold (30 s) or at shutdown
    # (tests/test_integrations_otlp_logs.py covers both); nothing is stored yet
    assert http.get(f"/v1/conversations/{'b' * 32}").status_code == 404


def test_protobuf_reply_and_warning_when_nothing_was_genai(http: httpx.Client) -> None:
    request = ExportLogsServiceRequest()
    record = request.resource_logs.add().scope_logs.add().log_records.add()
    record.body.string_value = "started"
    response = http.post("/v1/logs", content=request.SerializeToString(), headers=PROTOBUF)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-protobuf"
    reply = ExportLogsServiceResponse.FromString(response.content)
    assert reply.partial_success.rejected_log_records == 0
    assert "no GenAI message events" in reply.partial_success.error_message
    assert "1 log record(s): not a GenAI event" in reply.partial_success.error_message


@pytest.mark.parametrize(
    ("body", "headers", "http_status", "words"),
    [
        (b"\xff\xff\xff\x07garbage", PROTOBUF, 400, "malformed protobuf ExportLogsServiceRequest"),
        (b"{nope", JSON, 400, "malformed JSON"),
        (b'{"resource_logs": []}', JSON, 400, "lowerCamelCase"),
        (b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": 3}]}]}]}', JSON, 400, "body"),
        (b"x", {"Content-Type": "text/plain"}, 415, "unsupported Content-Type 'text/plain'"),
    ],
)
def test_unreadable_log_exports(
    http: httpx.Client, body: bytes, headers: dict[str, str], http_status: int, words: str
) -> None:
    response = http.post("/v1/logs", content=body, headers=headers)
    assert response.status_code == http_status
    assert words in status_of(response)[1]


def test_a_held_log_is_written_when_the_server_stops(tmp_path: Any) -> None:
    """A message whose span never arrives is not lost: a clean shutdown writes it."""
    with running_server(tmp_path / "data", "--no-intelligence") as proc:
        body = logs_json([user_log("3" * 16, "orphan message", 1_700_000_000_000_000_000)], trace_id="c" * 32)
        assert httpx.post(f"{proc.url}/v1/logs", content=body, headers=JSON).json() == {}
        proc.stop()
    with running_server(tmp_path / "data", "--no-intelligence") as proc:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            reply = httpx.get(f"{proc.url}/v1/conversations/{'c' * 32}/messages")
            if reply.status_code == 200:
                break
            time.sleep(0.1)
        assert reply.json() == [{"role": "user", "content": "orphan message"}]


def test_the_example_script_with_messages_as_log_records(server: ServerProcess) -> None:
    """``examples/otlp_openai.py --content logs`` against a running server prints the history."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "examples" / "otlp_openai.py"
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--server",
            server.url,
            "--conversation",
            "example-logs",
            "--content",
            "logs",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    history = json.loads(done.stdout)
    assert [message["role"] for message in history] == ["user", "assistant", "tool", "assistant"]
    assert history[-1]["content"] == "It is rainy in Paris, 14 °C."
