"""``POST /v1/traces`` and ``POST /v1/logs``: the OTLP/HTTP receivers on the server's own port.

`receive` answers one export request once the server has checked the caller (its routes, in
`convograph.server.otlp`, read the request and pass in what this needs: no import of the server).

Follows the OTLP specification's OTLP/HTTP section: protobuf or JSON bodies, optionally gzip; the
reply uses the request's encoding (``Content-Type`` echoed). 200 with an empty
``Export{Trace,Logs}ServiceResponse`` on full success; 200 with ``partial_success
{rejected_spans | rejected_log_records, error_message}`` when some items were rejected (the client
must not retry those), or with only a message when nothing in the request was conversation content;
400 for a body that cannot be read, 413 for one too large, 415 for an unsupported media type or
encoding, 401 / 403 for keys, 503 with ``Retry-After`` when the event log is unreachable
(retryable: the client re-sends and duplicates are dropped). Every 4xx/5xx body is a
``google.rpc.Status`` (``code``, ``message``) in the request's encoding, as the spec requires.

The conversation id is ``[<workspace>:]<gen_ai.conversation.id or trace id>``; the workspace is the
``workspace`` query parameter, else the one workspace a restricted API key names.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Final

import msgspec
from litestar import Response

from convograph.integrations.otlp.decode import decode_request
from convograph.integrations.otlp.decode_logs import decode_logs_request
from convograph.integrations.otlp.ingest import IngestReport, OtlpIngestor
from convograph.integrations.otlp.wire import JSON, PROTOBUF, OtlpError, decompress, media_type_of
from convograph.store import BackendUnavailable

__all__ = [
    "LOGS",
    "TRACES",
    "OtlpReceiver",
    "Signal",
    "export_response",
    "partial_success_message",
    "receive",
    "status_response",
]

_GRPC_CODES: Final = {400: 3, 401: 16, 403: 7, 404: 5, 413: 8, 415: 3, 429: 8, 503: 14}
"""``google.rpc.Code`` for each HTTP status we answer (INVALID_ARGUMENT, UNAUTHENTICATED, ...)."""

_json = msgspec.json.Encoder()
log = logging.getLogger("convograph.server")

Ingest = Callable[..., Awaitable[IngestReport]]


class Signal(msgspec.Struct, frozen=True):
    """What differs between the trace and the log receiver."""

    name: str
    """``traces`` / ``logs``, in metric names."""
    items: str
    """What a request carries, in messages: ``span(s)``, ``log record(s)``."""
    nothing: str
    """The warning when none of them was conversation content."""
    decode: Callable[[bytes, str], tuple[Sequence[Any], dict[str, int]]]
    ingest: Callable[[OtlpIngestor], Ingest]
    reply: Callable[[int, str], bytes]
    """The protobuf ``Export*ServiceResponse`` for (rejected count, message)."""
    rejected_field: str
    """The partial success's count field in OTLP/JSON."""


def _trace_reply(count: int, message: str) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    reply = ExportTraceServiceResponse()
    if message:
        reply.partial_success.rejected_spans = count
        reply.partial_success.error_message = message
    data: bytes = reply.SerializeToString()
    return data


def _logs_reply(count: int, message: str) -> bytes:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    reply = ExportLogsServiceResponse()
    if message:
        reply.partial_success.rejected_log_records = count
        reply.partial_success.error_message = message
    data: bytes = reply.SerializeToString()
    return data


def _decode_traces(body: bytes, media: str) -> tuple[Sequence[Any], dict[str, int]]:
    decoded = decode_request(body, media)
    return decoded.spans, decoded.rejected


def _decode_logs(body: bytes, media: str) -> tuple[Sequence[Any], dict[str, int]]:
    decoded = decode_logs_request(body, media)
    return decoded.records, decoded.rejected


TRACES: Final = Signal(
    name="spans",
    items="span(s)",
    nothing="no GenAI conversation spans in this export",
    decode=_decode_traces,
    ingest=lambda ingestor: ingestor.ingest,
    reply=_trace_reply,
    rejected_field="rejectedSpans",
)
LOGS: Final = Signal(
    name="log_records",
    items="log record(s)",
    nothing="no GenAI message events in this export",
    decode=_decode_logs,
    ingest=lambda ingestor: ingestor.ingest_logs,
    reply=_logs_reply,
    rejected_field="rejectedLogRecords",
)


async def receive(
    signal: Signal,
    receiver: OtlpReceiver | None,
    body: bytes,
    *,
    content_type: str | None,
    content_encoding: str | None,
    max_body_bytes: int,
    prefix: str,
    can_write: Callable[[str], bool],
) -> tuple[Response[bytes], IngestReport | None]:
    """Answer one export request of an authorised caller: decode ``body`` (at most
    ``max_body_bytes`` once decompressed), store its conversation content through ``receiver``
    under conversation ids starting ``prefix`` (those ``can_write`` allows) and count it. The reply
    in the request's encoding, and the ingest report (None when nothing was ingested)."""
    media = media_type_of(content_type)
    reply_media = reply_media_of(content_type)
    try:
        items, decode_rejected = signal.decode(
            decompress(body, content_encoding, limit=max_body_bytes), media
        )
    except OtlpError as exc:
        return status_response(exc.status, exc.message, reply_media), None
    if receiver is None:
        return status_response(503, "the OTLP receiver is not running", reply_media), None
    try:
        report = await signal.ingest(receiver.ingestor)(items, prefix=prefix, can_write=can_write)
    except BackendUnavailable as exc:
        return status_response(503, str(exc), reply_media, headers={"Retry-After": "1"}), None
    receiver.observe(signal, report, decode_rejected)
    rejected = dict(decode_rejected)
    for reason, count in report.rejected.items():
        rejected[reason] = rejected.get(reason, 0) + count
    return export_response(signal, rejected, report, reply_media), report


def reply_media_of(content_type: str | None) -> str:
    """The media type of the reply: the request's when it is protobuf or JSON, else JSON."""
    media = media_type_of(content_type)
    return media if media in (PROTOBUF, JSON) else JSON


class OtlpReceiver:
    """The server's OTLP side: the ingestor, its counters (on ``/metrics``:
    ``convograph_otlp_{spans,log_records}_{received,mapped,skipped,rejected}``, the agents held and
    the log records waiting for their span), and the task that writes held agents and waiting
    records when their wait is over."""

    def __init__(self, ingestor: OtlpIngestor, gauges: MutableMapping[str, Callable[[], float]]) -> None:
        """``gauges``: the server's gauges by metric name, where the receiver adds its own."""
        self.ingestor = ingestor
        self.counts: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        for signal in (TRACES, LOGS):
            for what in ("received", "mapped", "skipped", "rejected"):
                name = f"{signal.name}_{what}"
                self.counts[name] = 0
                gauges[f"convograph_otlp_{name}"] = functools.partial(self.counts.__getitem__, name)
        gauges["convograph_otlp_agents_held"] = lambda: self.ingestor.held_count
        gauges["convograph_otlp_log_records_waiting"] = lambda: self.ingestor.waiting_records

    def observe(self, signal: Signal, report: IngestReport, decode_rejected: dict[str, int]) -> None:
        refused = sum(decode_rejected.values())
        self.counts[f"{signal.name}_received"] += report.spans + refused
        self.counts[f"{signal.name}_mapped"] += report.mapped
        self.counts[f"{signal.name}_skipped"] += sum(report.skipped.values())
        self.counts[f"{signal.name}_rejected"] += sum(report.rejected.values()) + refused

    def start(self, interval: float = 1.0) -> None:
        async def release_loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.ingestor.release_expired()
                except Exception as exc:  # the log may be down: try again next time
                    log.warning("OTLP: writing held agent spans or waiting log records failed: %s", exc)

        self._task = asyncio.create_task(release_loop(), name="convograph-otlp-holds")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            await self.ingestor.close()
        except Exception as exc:
            log.warning("OTLP: writing held agent spans or waiting log records at shutdown failed: %s", exc)


def partial_success_message(
    signal: Signal, rejected: dict[str, int], report: IngestReport
) -> tuple[int, str]:
    """``(rejected count, error_message)``: every rejection reason with its count; with nothing
    rejected, a warning only when nothing in the request was conversation content."""
    total = sum(rejected.values())
    items = signal.items
    if total:
        reasons = "; ".join(f"{count} {items}: {reason}" for reason, count in sorted(rejected.items()))
        return total, f"{total} {items} rejected: {reasons}"
    if report.spans and not report.mapped:
        skipped = "; ".join(f"{count} {items}: {reason}" for reason, count in sorted(report.skipped.items()))
        return 0, f"{signal.nothing} ({skipped}); nothing was stored"
    return 0, ""


def export_response(
    signal: Signal, rejected: dict[str, int], report: IngestReport, media: str
) -> Response[bytes]:
    count, message = partial_success_message(signal, rejected, report)
    if media == PROTOBUF:
        return Response(signal.reply(count, message), status_code=200, media_type=PROTOBUF)
    body: dict[str, Any] = {}
    if message:
        body["partialSuccess"] = {signal.rejected_field: str(count), "errorMessage": message}
    return Response(_json.encode(body), status_code=200, media_type=JSON)


def status_response(
    status: int, message: str, media: str, headers: dict[str, str] | None = None
) -> Response[bytes]:
    """A failure as a ``google.rpc.Status`` in ``media`` (protobuf encoded by hand: two fields)."""
    code = _GRPC_CODES.get(status, 2)
    if media == PROTOBUF:
        text = message.encode()
        body = b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
    else:
        body = _json.encode({"code": code, "message": message})
    return Response(body, status_code=status, media_type=media, headers=headers)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
