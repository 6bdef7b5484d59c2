"""`RemotePort`: a harness's events into a ``convograph serve``, through `ConvographClient`.

- **Batching**: `emit` puts events on a bounded queue; one sender task posts them as NDJSON
  batches (up to ``batch_size`` events, gathered for at most ``linger`` seconds after the first).
- **Back-pressure**: when the server falls behind and the queue is full (``queue_size``), `emit`
  waits: a fast model cannot grow memory without bound.
- **Retries**: a transport error, a 5xx or a 429 is retried with exponential backoff (``retry_initial``
  doubling up to ``retry_max``), posting the *same* events: each carries an ``eventId`` (given one
  here when it has none), so the server stores each once whatever happened to an earlier attempt.
  Past ``give_up_after`` seconds of failures, or on a 4xx that retrying cannot fix (422 invalid
  event, 401/403), the port fails: the next `emit` / `flush` raises `RemotePortError` naming the
  cause.
- **History**: `history` flushes, then asks the server for the conversation's messages projection
  (``GET .../messages?format=``), which the server keeps incrementally with edits, regenerates and
  branch switches applied.
- **Relay decisions**: read from the conversation's event stream (``GET .../stream``, resumed with
  ``Last-Event-ID`` across disconnects and server restarts), from just before the relay was stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

import httpx
import msgspec

from convograph.client import ApiError, ConvographClient
from convograph.events import Event, RelayResolved
from convograph.harness.base import MessageFormat
from convograph.harness.ids import new_id
from convograph.store import validate_conversation_id

__all__ = ["RemotePort", "RemotePortError"]


class RemotePortError(RuntimeError):
    """The server refused the events, or could not be reached for too long."""


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, ApiError):
        return exc.status >= 500 or exc.status == 429
    return isinstance(exc, httpx.TransportError | httpx.StreamError)


class RemotePort:
    """A `ConversationPort` to a server (module docstring). Use ``async with``; `aclose` flushes
    what is queued, then stops (closing the client only when this port created it)."""

    def __init__(
        self,
        client: ConvographClient,
        conversation_id: str,
        *,
        batch_size: int = 256,
        queue_size: int = 4096,
        linger: float = 0.01,
        retry_initial: float = 0.2,
        retry_max: float = 5.0,
        give_up_after: float = 300.0,
        owns_client: bool = False,
    ) -> None:
        if batch_size < 1 or queue_size < 1:
            raise ValueError("batch_size and queue_size must be at least 1")
        self.client = client
        self._cid = validate_conversation_id(conversation_id)
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=queue_size)
        self._batch_size = batch_size
        self._linger = linger
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._give_up_after = give_up_after
        self._owns_client = owns_client
        self._sender: asyncio.Task[None] | None = None
        self._failure: RemotePortError | None = None
        self._acked_seq = 0
        self._relay_floor: dict[str, int] = {}
        self._decisions: dict[str, RelayResolved] = {}
        self._waiters: dict[str, asyncio.Future[RelayResolved]] = {}
        self._follower: asyncio.Task[None] | None = None
        self.attempts = 0
        """POST attempts made (retries included), for tests and metrics."""

    @classmethod
    def connect(
        cls, url: str, conversation_id: str, *, api_key: str | None = None, **options: Any
    ) -> RemotePort:
        """A port with its own client to the server at ``url``."""
        return cls(ConvographClient(url, api_key=api_key), conversation_id, owns_client=True, **options)

    @property
    def conversation_id(self) -> str:
        return self._cid

    async def __aenter__(self) -> RemotePort:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- events out ------------------------------------------------------------------------------

    async def emit(self, events: Sequence[Event]) -> None:
        """Queue ``events`` (waits while the queue is full). Raises `RemotePortError` once the port
        has failed."""
        self._check()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_loop(), name=f"convograph-remote-{self._cid}")
        for event in events:
            if event.event_id is None:
                event = msgspec.structs.replace(event, event_id=new_id())
            await self._queue.put(event)
            self._check()

    async def flush(self) -> None:
        """Wait until every queued event is stored (or the port failed: then raise)."""
        if self._sender is not None:
            join = asyncio.ensure_future(self._queue.join())
            racing: list[asyncio.Future[Any]] = [join, self._sender]
            try:
                await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            finally:
                join.cancel()
        self._check()

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def _send_loop(self) -> None:
        while True:
            batch = [await self._queue.get()]
            deadline = time.monotonic() + self._linger
            while len(batch) < self._batch_size:
                try:
                    batch.append(self._queue.get_nowait())
                except asyncio.QueueEmpty:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                    except TimeoutError:
                        break
            try:
                await self._post(batch)
            except RemotePortError as exc:
                self._failure = exc
            finally:
                for _ in batch:
                    self._queue.task_done()
            if self._failure is not None:
                while not self._queue.empty():  # nothing more can be stored: release the waiters
                    self._queue.get_nowait()
                    self._queue.task_done()
                return

    async def _post(self, batch: list[Event]) -> None:
        """Post ``batch`` until it is stored (the same events every time: idempotent)."""
        started = time.monotonic()
        delay = self._retry_initial
        while True:
            self.attempts += 1
            try:
                answer = await self.client.append(self._cid, batch)
            except (ApiError, httpx.TransportError, httpx.StreamError) as exc:
                if not _retryable(exc):
                    raise RemotePortError(f"the server refused events for {self._cid!r}: {exc}") from exc
                if time.monotonic() - started + delay > self._give_up_after:
                    raise RemotePortError(
                        f"could not store events for {self._cid!r} in {self._give_up_after:g} s: {exc!r}"
                    ) from exc
                await asyncio.sleep(delay)
                delay = min(self._retry_max, delay * 2)
                continue
            last_seq = answer.get("last_seq")
            if isinstance(last_seq, int):
                floor = max(0, last_seq - len(batch))  # every event of the batch has a seq above this
                for event in batch:
                    if event.type == "relay":
                        self._relay_floor[getattr(event, "id", "")] = floor
                self._acked_seq = max(self._acked_seq, last_seq)
            return

    # -- history and relays ----------------------------------------------------------------------

    async def history(self, format: MessageFormat) -> list[dict[str, Any]]:
        await self.flush()
        messages: list[dict[str, Any]] = await self.client.projection(self._cid, "messages", format=format)
        return messages

    async def relay_decision(self, relay_id: str) -> RelayResolved:
        """The decision on ``relay_id``, read from the conversation's stream (module docstring)."""
        await self.flush()
        decided = self._decisions.get(relay_id)
        if decided is not None:
            return decided
        if self._follower is None or self._follower.done():
            after = self._relay_floor.get(relay_id, 0)
            self._follower = asyncio.create_task(self._follow(after), name=f"convograph-relays-{self._cid}")
        waiter = self._waiters.get(relay_id)
        if waiter is None:
            waiter = self._waiters[relay_id] = asyncio.get_running_loop().create_future()
        follower = self._follower
        racing: list[asyncio.Future[Any]] = [waiter, follower]
        await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
        if waiter.done():
            return waiter.result()
        problem = follower.exception() if not follower.cancelled() else None
        raise RemotePortError(f"following conversation {self._cid!r} for relay decisions failed: {problem!r}")

    async def _follow(self, after: int) -> None:
        async for event in self.client.stream(self._cid, after=after):
            if isinstance(event, RelayResolved) and event.relay_id not in self._decisions:
                self._decisions[event.relay_id] = event
                waiter = self._waiters.pop(event.relay_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(event)

    async def aclose(self) -> None:
        with contextlib.suppress(RemotePortError):
            await self.flush()
        for task in (self._sender, self._follower):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._sender = self._follower = None
        if self._owns_client:
            await self.client.aclose()
