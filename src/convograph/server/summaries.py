"""A live list of conversations: summary rows pushed over Server-Sent Events.

`ConversationListFeed` serves ``GET /v1/live/conversations``. A subscriber first gets one
``snapshot`` frame (every conversation it may see), then a ``conversation`` frame whenever a row
changes (event count, last activity, status) and a ``deleted`` frame when one is deleted. The feed
is state-based, not event-based: a reconnecting client simply gets a fresh snapshot, so there is no
cursor to resume from and nothing can be missed.

A row is a `ConversationInfo` plus, with a `DigestIndex`, its digest (``title``, ``tools``,
``agents``, ``errors``: `convograph.server.digests`). A snapshot waits for the digests it lacks
for at most ``digest_budget_seconds`` (the first snapshot after a start folds every conversation
once); rows whose digest comes later go out again as ``conversation`` frames when it is done.

Where changes come from:

- appends made by this process (`mark`): the changed rows are re-read with one
  `EventLog.get_conversation` each, coalesced over ``coalesce_seconds`` (a burst of 1,000 appends to
  one conversation costs one read, not 1,000);
- appends by other processes sharing the log (another server on the same Postgres, a producer
  writing to Redis): one `EventLog.list_conversations` every ``refresh_seconds``, diffed against the
  rows already sent.

Both run only while someone listens; with no subscriber the feed does nothing. Every frame is
encoded once and offered to each subscriber that may see it. A subscriber's pending frames are kept
per conversation (newer replaces older), so a slow reader holds at most one frame per conversation
and never slows ingest or the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec

from convograph.jsonable import to_jsonable
from convograph.server.digests import DigestIndex
from convograph.server.live import Wakeable
from convograph.server.sse import HEARTBEAT_FRAME
from convograph.store import ConversationInfo, EventLog

__all__ = ["ConversationListFeed", "ListListener"]

log = logging.getLogger("convograph.server")

_encode = msgspec.json.encode


def _frame(event: str, payload: object) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (event.encode(), _encode(payload))


class ListListener(Wakeable):
    """One subscriber: the conversations it may see, and its pending frames (one per conversation)."""

    __slots__ = ("can_see", "pending")

    def __init__(self, can_see: Callable[[str], bool]) -> None:
        super().__init__()
        self.can_see = can_see
        self.pending: dict[str, bytes] = {}

    def offer(self, conversation_id: str, frame: bytes) -> None:
        if self.can_see(conversation_id):
            self.pending.pop(conversation_id, None)  # re-insert: frames go out in change order
            self.pending[conversation_id] = frame
            self._wakeup.set()

    def take(self) -> bytes:
        frames = b"".join(self.pending.values())
        self.pending.clear()
        return frames


class ConversationListFeed:
    """Pushes conversation summary rows to subscribers (see the module docstring)."""

    def __init__(
        self,
        log: EventLog,
        *,
        digests: DigestIndex | None = None,
        refresh_seconds: float = 5.0,
        coalesce_seconds: float = 0.1,
        digest_budget_seconds: float = 0.5,
    ) -> None:
        self._log = log
        self._digests = digests
        self._refresh = refresh_seconds
        self._coalesce = coalesce_seconds
        self._digest_budget = digest_budget_seconds
        self._digesting: set[asyncio.Task[None]] = set()
        self._listeners: set[ListListener] = set()
        self._sent: dict[str, dict[str, Any]] = {}
        """Rows as last sent (or snapshotted); valid only while someone listens."""
        self._dirty: set[str] = set()
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()

    @property
    def listener_count(self) -> int:
        return len(self._listeners)

    def mark(self, conversation_id: str) -> None:
        """This process appended to ``conversation_id``: its row goes out shortly. O(1)."""
        if self._listeners:
            self._dirty.add(conversation_id)
            self._kick.set()

    def deleted(self, conversation_id: str) -> None:
        """``conversation_id`` was deleted by this process."""
        if self._digests is not None:
            self._digests.forget(conversation_id)
        if self._listeners:
            self._sent.pop(conversation_id, None)
            self._dirty.discard(conversation_id)
            frame = _frame("deleted", {"id": conversation_id})
            for listener in tuple(self._listeners):
                listener.offer(conversation_id, frame)

    async def frames(
        self, can_see: Callable[[str], bool], *, heartbeat: float, listener: ListListener | None = None
    ) -> AsyncIterator[bytes]:
        """The byte stream of one subscriber (``listener``, or a new one): a snapshot, then
        changes; heartbeats while idle. Ends when the feed closes or the listener is ended."""
        listener = listener or ListListener(can_see)
        first = not self._listeners
        self._listeners.add(listener)  # before reading the list: no change can fall in between
        try:
            rows = await self._log.list_conversations()
            visible = [info for info in rows if can_see(info.id)]
            await self._digest(visible)
            if first:
                self._sent = {info.id: self._row(info) for info in rows}
            self._ensure_running()
            yield _frame("snapshot", {"conversations": [self._row(info) for info in visible]})
            while not self.closed.is_set() and listener.end_reason is None:
                if listener.pending:
                    yield listener.take()
                    continue
                if not await listener.wait(heartbeat) and not self.closed.is_set():
                    yield HEARTBEAT_FRAME
        finally:
            self._listeners.discard(listener)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="convograph-conversation-list")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_reconcile = loop.time() + self._refresh
        while not self.closed.is_set() and self._listeners:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), max(0.0, next_reconcile - loop.time()))
            if self.closed.is_set() or not self._listeners:
                break
            try:
                if self._kick.is_set():
                    self._kick.clear()
                    await asyncio.sleep(self._coalesce)  # let a burst of appends pile up
                    dirty, self._dirty = self._dirty, set()
                    for conversation_id in dirty:
                        info = await self._log.get_conversation(conversation_id)
                        if info is not None:
                            if self._digests is not None:
                                await self._digests.catch_up(info.id, info.last_seq)
                            self._publish(info)
                if loop.time() >= next_reconcile:  # also while this server's own appends keep coming
                    next_reconcile = loop.time() + self._refresh
                    await self._reconcile()
            except Exception:  # the backend may be down (appends spool meanwhile); try again later
                log.warning("conversation list feed: reading the event log failed", exc_info=True)
        self._task = None

    async def _reconcile(self) -> None:
        """Diff the whole list against what was sent: catches other processes' appends."""
        rows = {info.id: info for info in await self._log.list_conversations()}
        if self._digests is not None:
            await self._digests.catch_up_all(list(rows.values()))
        for info in rows.values():
            self._publish(info)
        for conversation_id in [cid for cid in self._sent if cid not in rows]:
            self.deleted(conversation_id)

    def _row(self, info: ConversationInfo) -> dict[str, Any]:
        """The row sent for ``info``: the summary, plus its digest when there is one."""
        row: dict[str, Any] = to_jsonable(info)
        digest = self._digests.get(info.id) if self._digests is not None else None
        if digest is not None:
            row.update(digest.row_fields())
        return row

    async def _digest(self, rows: list[ConversationInfo]) -> None:
        """Catch the digests of ``rows`` up, waiting at most the budget; the rest continue in the
        background, and each row finished after the wait is marked, so it goes out again."""
        if self._digests is None:
            return
        stale = [info for info in rows if not self._digests.current(info)]
        if not stale:
            return
        late = asyncio.Event()
        task = asyncio.create_task(self._catch_up(stale, late), name="convograph-list-digests")
        self._digesting.add(task)
        task.add_done_callback(self._digesting.discard)
        await asyncio.wait({task}, timeout=self._digest_budget)
        late.set()

    async def _catch_up(self, rows: list[ConversationInfo], late: asyncio.Event) -> None:
        assert self._digests is not None
        for info in rows:
            try:
                await self._digests.catch_up(info.id, info.last_seq)
            except Exception:  # the backend may be down: the rows go out without their digest
                log.warning(
                    "conversation list feed: reading %r for its digest failed", info.id, exc_info=True
                )
                return
            if late.is_set():
                self.mark(info.id)

    def _publish(self, info: ConversationInfo) -> None:
        row = self._row(info)
        if self._sent.get(info.id) == row:
            return
        self._sent[info.id] = row
        frame = _frame("conversation", row)
        for listener in tuple(self._listeners):
            listener.offer(info.id, frame)

    async def close(self) -> None:
        self.closed.set()
        self._kick.set()
        for listener in tuple(self._listeners):
            listener.wake()
        for task in (self._task, *self._digesting):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
