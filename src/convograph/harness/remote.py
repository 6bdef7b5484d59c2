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
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import msgspec

from convograph.client import ApiError, ConvographClient
from convograph.events import Event, Relay, RelayResolved
from convograph.harness.base import MessageFormat
from convograph.harness.batching import BatchWriter
from convograph.harness.ids import new_id
from convograph.hypergraph.turns import PendingTurn
from convograph.store import validate_conversation_id

__all__ = ["RemotePort", "RemotePortError"]


class RemotePortError(RuntimeError):
    """The server refused the events, or could not be reached for too long."""


def _as_port_error(exc: Exception) -> Exception:
    if isinstance(exc, RemotePortError):
        return exc
    return RemotePortError(f"writing events failed: {type(exc).__name__}: {exc}")


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
        self.client = client
        self._cid = validate_conversation_id(conversation_id)
        self._writer = BatchWriter(
            self._post,
            name=f"convograph-remote-{self._cid}",
            batch_size=batch_size,
            queue_size=queue_size,
            linger=linger,
            fail=_as_port_error,
        )
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._give_up_after = give_up_after
        self._owns_client = owns_client
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
        stamped = [
            e if e.event_id is not None else msgspec.structs.replace(e, event_id=new_id()) for e in events
        ]
        await self._writer.put(stamped)

    async def flush(self) -> None:
        """Wait until every queued event is stored (or the port failed: then raise)."""
        await self._writer.flush()

    async def _post(self, batch: Sequence[Event]) -> None:
        """Post ``batch`` until it is stored (the same events every time: idempotent)."""
        answer, _ = await self._send(batch)
        last_seq = answer.get("last_seq")
        if isinstance(last_seq, int):
            floor = max(0, last_seq - len(batch))  # every event of the batch has a seq above this
            for event in batch:
                if event.type == "relay":
                    self._relay_floor[getattr(event, "id", "")] = floor

    async def _send(self, batch: Sequence[Event]) -> tuple[dict[str, Any], bool]:
        """Post ``batch``, retrying what retrying can fix; the server's answer, and whether an
        earlier attempt failed (then it may have stored the batch already)."""
        started = time.monotonic()
        delay = self._retry_initial
        retried = False
        while True:
            self.attempts += 1
            try:
                return await self.client.append(self._cid, batch), retried
            except (ApiError, httpx.TransportError, httpx.StreamError) as exc:
                if not _retryable(exc):
                    raise RemotePortError(f"the server refused events for {self._cid!r}: {exc}") from exc
                if time.monotonic() - started + delay > self._give_up_after:
                    raise RemotePortError(
                        f"could not store events for {self._cid!r} in {self._give_up_after:g} s: {exc!r}"
                    ) from exc
                retried = True
                await asyncio.sleep(delay)
                delay = min(self._retry_max, delay * 2)

    async def claim(self, event: Event) -> bool:
        """Store ``event`` now, after everything queued, unless its ``eventId`` is stored already;
        True when this call stored it (a run's claim: `convograph.harness.runs.open_run`). When a
        retried post finds it stored, the conversation's runs tell whether the first attempt did."""
        await self.flush()
        answer, retried = await self._send([event])
        if answer.get("accepted") or answer.get("spooled"):
            return True
        if not retried:
            return False
        runs = await self.client.runs(self._cid)
        run_id = getattr(event, "run_id", None)
        return any(row.get("runId") == run_id for row in runs.get("runs", []))

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

    async def standing_grants(self) -> list[Relay]:
        """Read from the server's relay list (``GET .../relays``): one request per call."""
        await self.flush()
        return [
            relay
            for relay, decision in await self.client.relays(self._cid)
            if decision is not None and decision.approved and decision.always
        ]

    async def _follow(self, after: int) -> None:
        async for event in self.client.stream(self._cid, after=after):
            if isinstance(event, RelayResolved) and event.relay_id not in self._decisions:
                self._decisions[event.relay_id] = event
                waiter = self._waiters.pop(event.relay_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(event)

    # -- serving (`convograph.harness.serving`) ----------------------------------------------------

    async def head(self) -> int:
        """The conversation's last seq (0 before it has events)."""
        try:
            info = await self.client.conversation(self._cid)
        except ApiError as exc:
            if exc.status == 404:
                return 0
            raise
        return int(info.get("lastSeq", 0))

    def changes(self, after: int) -> AsyncIterator[Event]:
        """Every event stored after seq ``after``, live (the resumable stream)."""
        return self.client.stream(self._cid, after=after)

    async def pending_turn(self) -> PendingTurn | None:
        """The reply the conversation awaits, as the server computes it (``GET .../runs``)."""
        try:
            runs = await self.client.runs(self._cid)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        pending = runs.get("pending")
        return None if pending is None else msgspec.convert(pending, PendingTurn)

    def control(self, agent_id: str, **info: Any) -> AsyncIterator[tuple[str, Any]]:
        """Attach to the server as ``agent_id`` and yield its control messages
        (`ConvographClient.control`)."""
        return self.client.control(self._cid, agent_id, **info)

    async def aclose(self) -> None:
        await self._writer.aclose()
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._follower
            self._follower = None
        if self._owns_client:
            await self.client.aclose()
