"""Where instrumented calls are recorded: the sink's ports, driven by one background worker.

- `Worker`: one daemon thread running an asyncio loop (`worker()` starts it on first use, again
  after a fork). The SDK wrappers hand it work with `Worker.submit`, a deque append that never
  blocks and never does I/O on the caller's thread, sync or async; the worker wakes when idle,
  lingers a few milliseconds and drains everything queued in one pass, so a fast stream costs one
  append per chunk on the caller's thread and one thread switch per batch. Past
  `Worker.max_pending` items (a sink that cannot keep up, a server down for long) new items are
  dropped and counted, so memory stays bounded; the caller never waits.
- `Sink`: where one instrumentation's conversations go, as the harness ports: a ``convograph
  serve`` URL (`RemotePort`: batched, retried, idempotent by ``eventId``), an event-log URL or an
  `EventLog` (`LogPort`), or a `ConvographClient`.
- `Conversation`: one conversation's port, its `Shadow` (what was recorded) and the events waiting
  for the next emit.

Errors on the worker (a sink that refuses events, a bug) are logged at debug level on the
``convograph.instrument`` logger and counted in `Sink.lost`; they never reach the caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

from convograph.client import ApiError, ConvographClient
from convograph.events import Event
from convograph.harness.base import ConversationPort
from convograph.harness.ports import LogPort
from convograph.harness.remote import RemotePort
from convograph.integrations.instrument.history import Shadow
from convograph.store import EventLog, default_url, open_event_log
from convograph.store.url import check_event_log_url

__all__ = ["BARRIER", "Conversation", "Handler", "Sink", "Worker", "wait", "worker"]

log = logging.getLogger("convograph.instrument")

SinkTarget = str | EventLog | ConvographClient | None
"""What ``sink=`` takes (`Sink`)."""

_PAGE: Final = 1000


class Handler(Protocol):
    """What a queued item is for: `handle` folds one item on the worker and returns the
    conversation it added events to (they go out in the pass's emit), or None."""

    async def handle(self, kind: int, payload: Any) -> Conversation | None: ...


BARRIER: Final = -1
"""The kind of a `Worker.run_after_pending` item."""


class Conversation:
    """One conversation of a sink, on the worker: its port, what was recorded, what waits."""

    __slots__ = ("conversation_id", "expected", "outbox", "port", "shadow", "sink")

    def __init__(self, sink: Sink, conversation_id: str, port: ConversationPort, shadow: Shadow) -> None:
        self.sink = sink
        self.conversation_id = conversation_id
        self.port = port
        self.shadow = shadow
        self.outbox: list[Event] = []
        self.expected: dict[str, list[Hashable]] = {}
        """Per API: the entry keys its next request should start with (the last request and its
        answer), so a call does not render the whole conversation to compare."""


class Sink:
    """Where an instrumentation's conversations go (module docstring). Built on the caller's
    thread (a bad target is a `ValueError` / `TypeError` there, at once); used on the worker."""

    def __init__(self, target: SinkTarget = None, *, api_key: str | None = None) -> None:
        self._server: str | None = None
        self._log_url: str | None = None
        self._log: EventLog | None = None
        self._client: ConvographClient | None = None
        self._owns = True
        if target is None:
            target = default_url()
        if isinstance(target, str):
            if target.startswith(("http://", "https://")):
                self._server = target.rstrip("/")
            else:
                check_event_log_url(target)
                self._log_url = target
            self.description = target
        elif isinstance(target, ConvographClient):
            self._client, self._owns = target, False
            self.description = "a ConvographClient"
        elif all(hasattr(target, name) for name in ("append", "read", "subscribe")):
            self._log, self._owns = target, False
            self.description = type(target).__name__
        else:
            raise TypeError(
                "sink must be a convograph serve URL (http://...), an event log URL (sqlite:///..., "
                f"memory://, postgresql://..., redis://...), an EventLog or a ConvographClient, not {target!r}"
            )
        self._api_key = api_key
        self._opening: asyncio.Future[None] | None = None
        _SINKS.add(self)
        self.conversations: dict[str, Conversation] = {}
        self.lost = 0
        """Events that could not be stored (the sink refused them, or they were dropped)."""
        self.closed = False

    def forget_connections(self) -> None:
        """In a forked child: the ports, the shadows and what this sink opened belong to the
        parent's worker; the child opens its own (and reads the stored history again)."""
        self.conversations.clear()
        self._opening = None
        if self._owns:
            self._client = None
            self._log = None

    async def conversation(self, conversation_id: str) -> Conversation:
        """The worker-side state of ``conversation_id``, opened on first use: its port, and its
        history already stored in the sink folded into the shadow (so a restarted app does not
        record it again)."""
        known = self.conversations.get(conversation_id)
        if known is not None:
            return known
        if self.closed:
            raise RuntimeError(f"the instrumentation into {self.description} has ended")
        port = await self._port(conversation_id)
        shadow = Shadow()
        try:
            shadow.apply(await self._stored(conversation_id))
            shadow.opened = True
        except Exception:
            log.debug("could not read the stored history of %r", conversation_id, exc_info=True)
        conversation = self.conversations[conversation_id] = Conversation(self, conversation_id, port, shadow)
        return conversation

    async def open(self) -> None:
        """Open what the sink needs (the event log, the HTTP client) now, while threads can still
        start: an SQLite log starts its own threads, and resolving a server's host name uses the
        loop's executor, which Python 3.12 cannot start at interpreter exit, where a short script
        may make its first emit. `instrument` waits for it; the ports wait for the same opening
        (a failed one is tried again by the next call)."""
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        opening = self._opening
        try:
            await asyncio.shield(opening)
        except Exception:
            if self._opening is opening:
                self._opening = None
            raise

    async def _open(self) -> None:
        if self._server is not None and self._client is None:
            self._client = ConvographClient(self._server, api_key=self._api_key)
            parts = urlsplit(self._server)
            with contextlib.suppress(OSError):  # (a server that is down is the ports' business)
                port = parts.port or (443 if parts.scheme == "https" else 80)
                await asyncio.get_running_loop().getaddrinfo(parts.hostname, port)
        if self._client is None and self._log is None:
            self._log = await open_event_log(self._log_url)

    async def _port(self, conversation_id: str) -> ConversationPort:
        await self.open()
        if self._client is not None:
            return RemotePort(self._client, conversation_id)
        assert self._log is not None
        return LogPort(self._log, conversation_id)

    async def _stored(self, conversation_id: str) -> list[Event]:
        if self._client is not None:
            try:
                return await self._client.replay(conversation_id)
            except ApiError as exc:
                if exc.status == 404:
                    return []
                raise
        assert self._log is not None
        events: list[Event] = []
        while True:
            page = await self._log.read(conversation_id, len(events), _PAGE)
            events.extend(stored.event for stored in page)
            if len(page) < _PAGE:
                return events

    async def emit(self, conversation: Conversation) -> None:
        """Hand the conversation's waiting events to its port. A port that failed for good (the
        server refused events, or stayed down past its retry limit) is replaced by a fresh one."""
        events, conversation.outbox = conversation.outbox, []
        if not events:
            return
        try:
            await conversation.port.emit(events)
        except Exception:
            self.lost += len(events)
            log.debug(
                "could not record %d events of %r", len(events), conversation.conversation_id, exc_info=True
            )
            with contextlib.suppress(Exception):
                conversation.port = await self._port(conversation.conversation_id)

    async def flush(self) -> None:
        """Wait until every event emitted so far is stored (remote ports confirm each batch)."""
        for conversation in list(self.conversations.values()):
            flush = getattr(conversation.port, "flush", None)
            if flush is not None:
                try:
                    await flush()
                except Exception:
                    log.debug("flushing %r failed", conversation.conversation_id, exc_info=True)

    async def aclose(self, timeout: float) -> bool:
        """Flush (for at most ``timeout`` seconds), then close the ports and what this sink opened.
        Returns whether everything was stored. After a timeout the queued events are abandoned."""
        self.closed = True
        try:
            await asyncio.wait_for(self.flush(), timeout)
            flushed = True
        except TimeoutError:
            flushed = False
        if not flushed and self._client is not None:
            # Closing the HTTP client ends the remote ports' retries at once.
            await self._client.aclose()
        for conversation in self.conversations.values():
            close = getattr(conversation.port, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
        self.conversations.clear()
        if self._owns and self._client is not None and flushed:
            await self._client.aclose()
        if self._owns and self._log is not None:
            with contextlib.suppress(Exception):
                await self._log.close()
        self._client = None if self._owns else self._client
        self._log = None if self._owns else self._log
        return flushed


class Worker:
    """The background thread and loop every instrumentation records on (module docstring)."""

    max_pending = 200_000
    """Items queued at most; more are dropped (counted in `dropped`)."""
    linger = 0.005
    """Seconds the worker waits, once woken, for more items before a pass: a streamed answer's
    chunks are then handled a few dozen at a time, not one thread switch each."""

    def __init__(self) -> None:
        self._pending: deque[tuple[Any, int, Any]] = deque()
        self._scheduled = False
        self.dropped = 0
        self._loop = asyncio.new_event_loop()
        self._wake = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="convograph-instrument", daemon=True)
        self._thread.start()

    def submit(self, handler: Handler, kind: int, payload: Any) -> None:
        """Queue one item for ``handler`` (any thread; never blocks; drops past `max_pending`)."""
        pending = self._pending
        if len(pending) >= self.max_pending:
            self.dropped += 1
            return
        pending.append((handler, kind, payload))
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop closed at interpreter exit
                self._scheduled = False

    def run_after_pending(self, work: Callable[[], Awaitable[Any]]) -> concurrent.futures.Future[Any]:
        """Run ``work`` on the worker, as its own task, once everything queued before it was handed
        to the ports (so a slow sink never stalls the recording of new calls); its future."""
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.submit(_NO_HANDLER, BARRIER, (work, done))
        return done

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(self.linger)
            self._scheduled = False
            await self._drain()

    async def _drain(self) -> None:
        touched: dict[Conversation, None] = {}
        pending = self._pending
        while pending:
            handler, kind, payload = pending.popleft()
            if kind == BARRIER:
                await _emit_all(touched)
                touched.clear()
                _start_barrier(*payload)
                continue
            try:
                conversation = await handler.handle(kind, payload)
            except Exception:
                log.debug("recording a call failed", exc_info=True)
                continue
            if conversation is not None:
                touched[conversation] = None
        await _emit_all(touched)


_NO_HANDLER: Final[Any] = None


async def _emit_all(touched: dict[Conversation, None]) -> None:
    for conversation in touched:
        await conversation.sink.emit(conversation)


def _start_barrier(work: Callable[[], Awaitable[Any]], done: concurrent.futures.Future[Any]) -> None:
    async def finish() -> None:
        try:
            result = await work()
        except Exception as exc:
            done.set_exception(exc)
        else:
            done.set_result(result)

    task = asyncio.ensure_future(finish())
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


_BACKGROUND: set[asyncio.Task[None]] = set()
"""Barrier tasks running (a reference keeps each alive until it ends)."""
_WORKER: Worker | None = None
_WORKER_LOCK = threading.Lock()


def worker() -> Worker:
    """The process's worker, started on first use."""
    global _WORKER
    current = _WORKER
    if current is not None:
        return current
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = Worker()
        return _WORKER


_SINKS: weakref.WeakSet[Sink] = weakref.WeakSet()


def _forget_after_fork() -> None:
    """A forked child has no worker thread: it starts a fresh one on its first call, with its own
    connections."""
    global _WORKER
    _WORKER = None
    for sink in list(_SINKS):
        sink.forget_connections()


os.register_at_fork(after_in_child=_forget_after_fork)


def wait(future: concurrent.futures.Future[Any], timeout: float | None) -> tuple[bool, Any]:
    """``(finished, result)`` of a worker future, waiting at most ``timeout`` seconds."""
    started = time.monotonic()
    try:
        return True, future.result(timeout)
    except concurrent.futures.TimeoutError:
        log.debug("gave up waiting for the instrumentation after %.1f s", time.monotonic() - started)
        return False, None
