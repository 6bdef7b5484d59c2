"""``convograph serve --otlp-endpoint URL``: stored conversations forwarded as GenAI spans to an
OTLP/HTTP endpoint (an OpenTelemetry Collector, Langfuse, Phoenix, Jaeger).

Like the context-intelligence feeder, ingest only *marks* a conversation (O(1), never waits); one
background task rebuilds the marked conversation's spans (`encode.conversation_spans`, the same as
``convograph export --format otlp``) and sends those that are **due** and not sent yet, as
protobuf, gzip-compressed, at most ``batch_size`` spans per request:

- an agent span when its run has ended (``harness_end``, or an error / abort);
- a model-call or tool span once something follows it in its agent (its turn is over), or its
  agent has ended;
- everything still open (a run that streams, or stopped without saying so) once the conversation
  has been quiet for ``flush_after`` seconds: flushed as it is, with the time it had then. If the
  run goes on, the same span ids are sent again later with their new end (backends that key spans
  by id, as Langfuse and Phoenix do, keep the newest; Jaeger may show both).

A failed request is retried with exponential backoff (0.5 s doubling to ``max_backoff``, or the
``Retry-After`` the endpoint gives) for 429, 502, 503, 504 and connection errors, as the OTLP spec
asks; any other refusal is logged and those spans are dropped (sending them again cannot help).
What was sent is remembered per conversation (span id -> end time) in ``state_path``, so a restart
does not send it again; conversations are forwarded from their next activity after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from convograph.events import Event
from convograph.hypergraph import create_conversation, reduce_conversation_events
from convograph.hypergraph import queries as q
from convograph.hypergraph.model import Conversation
from convograph.integrations.otlp.encode import first_timestamp_ns, spans_of, to_otlp_protobuf
from convograph.integrations.otlp.model import Span
from convograph.store import EventLog

__all__ = ["OtlpForwarder", "due_spans", "traces_url"]

log = logging.getLogger("convograph.server")

RETRYABLE: Final = frozenset({429, 502, 503, 504})
PAGE: Final = 5000


def traces_url(endpoint: str) -> str:
    """The URL spans are POSTed to: ``endpoint`` itself when it names a path, else
    ``<endpoint>/v1/traces`` (as ``OTEL_EXPORTER_OTLP_ENDPOINT`` is read)."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--otlp-endpoint must be an http(s) URL, got {endpoint!r}")
    if parts.path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint


def due_spans(spans: Sequence[Span], conv: Conversation, *, flush: bool) -> list[Span]:
    """The spans that will not change any more (module docstring), or all of them with ``flush``."""
    if flush:
        return list(spans)
    running: set[str] = set()
    for span in spans:
        run = span.attributes.get("convograph.run_id")
        if isinstance(run, str) and q.run_status(conv, run) == "streaming":
            running.add(span.span_id)
    last_child: dict[str | None, Span] = {}
    for span in spans:
        if span.attributes.get("gen_ai.operation.name") == "chat":
            current = last_child.get(span.parent_span_id)
            if current is None or span.end_ns > current.end_ns:
                last_child[span.parent_span_id] = span
    open_ids = set(running)
    for parent, span in last_child.items():
        if parent is None or parent in running:
            open_ids.add(span.span_id)  # the latest turn of a running agent (or of the top level)
    return [span for span in spans if span.span_id not in open_ids]


class OtlpForwarder:
    """Background forwarder from the event log to an OTLP/HTTP endpoint (module docstring)."""

    def __init__(
        self,
        event_log: EventLog,
        endpoint: str,
        *,
        headers: Mapping[str, str] | None = None,
        state_path: Path | None = None,
        flush_after: float = 30.0,
        batch_size: int = 512,
        timeout: float = 10.0,
        max_backoff: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = event_log
        self.url = traces_url(endpoint)
        self._headers = {
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "gzip",
            **(headers or {}),
        }
        self._state_path = state_path
        self.flush_after = flush_after
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_backoff = max_backoff
        self.clock = clock
        self.sent: dict[str, dict[str, int]] = self._load()
        self._dirty: dict[str, float] = {}
        self._open: dict[str, float] = {}
        """Conversations with spans held back, and when they were last active."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self.spans_sent = 0
        self.last_error: str | None = None

    def _load(self) -> dict[str, dict[str, int]]:
        if self._state_path is None:
            return {}
        try:
            data = json.loads(self._state_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self) -> None:
        if self._state_path is None:
            return
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.sent))
        os.replace(tmp, self._state_path)

    def mark(self, conversation_id: str) -> None:
        """``conversation_id`` has new events. O(1); never blocks."""
        self._dirty[conversation_id] = self.clock()
        self._open.pop(conversation_id, None)
        self._wake.set()

    def forget(self, conversation_id: str) -> None:
        self._dirty.pop(conversation_id, None)
        self._open.pop(conversation_id, None)
        self.sent.pop(conversation_id, None)

    def start(self) -> None:
        self._client = httpx.AsyncClient(timeout=self.timeout)
        self._task = asyncio.create_task(self._run(), name="convograph-otlp-forwarder")

    async def idle(self, timeout: float = 30.0) -> bool:
        """Wait until nothing is marked (tests). False on timeout."""
        deadline = self.clock() + timeout
        while self._dirty:
            if self.clock() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._client is not None:
            await self._client.aclose()
        with contextlib.suppress(OSError):
            await asyncio.to_thread(self._save)

    async def _run(self) -> None:
        while True:
            wait = self._next_flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait)
            self._wake.clear()
            now = self.clock()
            due = [cid for cid, quiet in self._open.items() if now - quiet >= self.flush_after]
            for cid in due:
                self._open.pop(cid, None)
            work = [(cid, False) for cid in self._dirty] + [(cid, True) for cid in due]
            self._dirty = {}
            for cid, flush in work:
                try:
                    await self.forward(cid, flush=flush)
                except Exception as exc:  # the log or the endpoint failed: try this one again
                    self.last_error = f"forwarding {cid!r} failed: {exc}"
                    log.warning("OTLP forwarder: %s", self.last_error)
                    self._dirty.setdefault(cid, self.clock())
                    await asyncio.sleep(1.0)
            await asyncio.to_thread(self._save)

    def _next_flush(self) -> float | None:
        if self._dirty:
            return 0.0
        if not self._open:
            return None
        return max(0.0, min(self._open.values()) + self.flush_after - self.clock())

    async def forward(self, conversation_id: str, *, flush: bool = False) -> int:
        """Send what is due of one conversation now (all of it with ``flush``); the spans sent."""
        events: list[Event] = []
        cursor = 0
        while True:
            page = await self._log.read(conversation_id, cursor, PAGE)
            events.extend(stored.event for stored in page)
            if len(page) < PAGE:
                break
            cursor = page[-1].seq
        if not events:
            return 0
        conv = reduce_conversation_events(create_conversation(), events)
        spans = spans_of(conv, conversation_id, first_timestamp_ns(events))
        due = due_spans(spans, conv, flush=flush)
        if len(due) < len(spans):
            self._open[conversation_id] = self.clock()
        sent = self.sent.setdefault(conversation_id, {})
        fresh = [span for span in due if sent.get(span.span_id) != span.end_ns]
        for start in range(0, len(fresh), self.batch_size):
            batch = fresh[start : start + self.batch_size]
            if await self._post(batch):
                self.spans_sent += len(batch)
            for span in batch:  # sent, or refused for good: not sent again either way
                sent[span.span_id] = span.end_ns
        return len(fresh)

    async def _post(self, spans: list[Span]) -> bool:
        """POST one batch, retrying what the spec says to retry. False when refused for good."""
        assert self._client is not None, "start() the forwarder first"
        body = gzip.compress(to_otlp_protobuf(spans))
        delay = 0.5
        while True:
            try:
                response = await self._client.post(self.url, content=body, headers=self._headers)
            except httpx.TransportError as exc:
                self.last_error = f"{self.url}: {exc!r}"
                await self._backoff(delay, None)
                delay = min(delay * 2, self.max_backoff)
                continue
            if response.status_code == 200:
                _log_partial_success(response)
                return True
            if response.status_code in RETRYABLE:
                self.last_error = f"{self.url} answered {response.status_code}"
                await self._backoff(delay, response.headers.get("retry-after"))
                delay = min(delay * 2, self.max_backoff)
                continue
            self.last_error = (
                f"{self.url} refused {len(spans)} spans: {response.status_code} {response.text[:300]}"
            )
            log.error("OTLP forwarder: %s", self.last_error)
            return False

    async def _backoff(self, delay: float, retry_after: str | None) -> None:
        wait = delay
        if retry_after is not None:
            with contextlib.suppress(ValueError):
                wait = min(float(retry_after), self.max_backoff)
        log.warning("OTLP forwarder: %s; retrying in %.1f s", self.last_error, wait)
        await asyncio.sleep(wait)


def _log_partial_success(response: httpx.Response) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    reply: Any
    try:
        reply = ExportTraceServiceResponse.FromString(response.content)
    except Exception:
        return
    if reply.partial_success.error_message:
        log.warning(
            "OTLP forwarder: the endpoint rejected %d spans: %s",
            reply.partial_success.rejected_spans,
            reply.partial_success.error_message,
        )
