"""A local spool in front of a server backend: accept appends while Postgres/Redis is down.

`SpoolingEventLog` wraps any `EventLog`. When the inner log raises `BackendUnavailable`, the batch is
written to a local SQLite file (``synchronous=FULL``: fsynced before the append returns) and the
caller gets ``AppendResult(spooled=True)`` with no seqs yet. A background task drains the spool in
order, conversation by conversation, as soon as the backend answers again; while a conversation has
spooled events, its new appends are spooled too, so its order is kept.

Exactly-once drain: spooled events without an ``eventId`` get one (``spool-<uuid>``) before they are
written, so a drain interrupted between "backend committed" and "spool row deleted" is deduplicated
when it is retried. Reads, subscriptions and listing go to the inner log and see spooled events only
once they are drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import msgspec

from convograph.events import Event, pack_event, unpack_event
from convograph.store.base import (
    AppendResult,
    BackendUnavailable,
    ConversationInfo,
    EventLog,
    Snapshot,
    StoredEvent,
    validate_conversation_id,
)
from convograph.store.batch import check_events

__all__ = ["SpoolingEventLog"]

log = logging.getLogger("convograph.store.spool")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS spool (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL, "
    "data BLOB NOT NULL, spooled_at REAL NOT NULL)"
)


class SpoolingEventLog:
    """`EventLog` that spools appends locally while ``inner`` is unreachable."""

    def __init__(self, inner: EventLog, path: str, *, retry_interval: float = 1.0) -> None:
        self.inner = inner
        self.path = path
        self.retry_interval = retry_interval
        self._db: sqlite3.Connection | None = None
        self._pending: set[str] = set()
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._drainer: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def open(cls, inner: EventLog, path: str, *, retry_interval: float = 1.0) -> SpoolingEventLog:
        self = cls(inner, path, retry_interval=retry_interval)
        Path(path).parent.mkdir(parents=True, exist_ok=True)

        def setup() -> set[str]:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute(_SCHEMA)
            self._db = db
            return {row[0] for row in db.execute("SELECT DISTINCT conversation_id FROM spool")}

        self._pending = await asyncio.to_thread(setup)
        if self._pending:
            log.info("spool %s holds events of %d conversation(s); draining", path, len(self._pending))
        self._drainer = asyncio.create_task(self._drain_loop(), name="convograph-spool-drain")
        self._wake.set()
        return self

    async def pending_count(self) -> int:
        """Events waiting in the spool."""
        db = self._db
        assert db is not None
        row = await asyncio.to_thread(lambda: db.execute("SELECT count(*) FROM spool").fetchone())
        return int(row[0])

    async def append(self, conversation_id: str, events: Sequence[Event]) -> AppendResult:
        validate_conversation_id(conversation_id)
        check_events(events)
        if conversation_id not in self._pending:
            try:
                return await self.inner.append(conversation_id, events)
            except BackendUnavailable as exc:
                log.warning("spooling %d event(s) for %r: %s", len(events), conversation_id, exc)
        return await self._spool(conversation_id, events)

    async def _spool(self, conversation_id: str, events: Sequence[Event]) -> AppendResult:
        replace = msgspec.structs.replace
        rows = [
            pack_event(e if e.event_id is not None else replace(e, event_id=f"spool-{uuid.uuid4().hex}"))
            for e in events
        ]
        now = time.time()
        db = self._db
        assert db is not None

        def write() -> None:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "INSERT INTO spool (conversation_id, data, spooled_at) VALUES (?, ?, ?)",
                [(conversation_id, row, now) for row in rows],
            )
            db.execute("COMMIT")

        async with self._lock:
            await asyncio.to_thread(write)
            self._pending.add(conversation_id)
        self._wake.set()
        return AppendResult(
            accepted=len(rows),
            duplicates=0,
            first_seq=None,
            last_seq=None,
            conversation_last_seq=0,
            stored=[],
            spooled=True,
        )

    async def drain_once(self) -> bool:
        """Try to drain everything now. True when the spool is empty afterwards."""
        db = self._db
        assert db is not None

        def fetch(cid: str) -> list[tuple[int, bytes]]:
            return db.execute(
                "SELECT id, data FROM spool WHERE conversation_id = ? ORDER BY id LIMIT 1000", (cid,)
            ).fetchall()

        def remove(cid: str, last_id: int) -> None:
            db.execute("DELETE FROM spool WHERE conversation_id = ? AND id <= ?", (cid, last_id))

        for cid in sorted(self._pending):
            while True:
                async with self._lock:
                    rows = await asyncio.to_thread(fetch, cid)
                    if not rows:
                        self._pending.discard(cid)
                        break
                try:
                    await self.inner.append(cid, [unpack_event(data) for _, data in rows])
                except BackendUnavailable:
                    return False
                await asyncio.to_thread(remove, cid, rows[-1][0])
        return not self._pending

    async def _drain_loop(self) -> None:
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            while self._pending and not self._closed:
                try:
                    if await self.drain_once():
                        break
                except Exception as exc:  # keep draining whatever happens; report it
                    log.warning("spool drain failed: %s", exc)
                await asyncio.sleep(self.retry_interval)

    # -- delegation ------------------------------------------------------------------------------------

    async def read(
        self, conversation_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        return await self.inner.read(conversation_id, after_seq, limit)

    def subscribe(self, conversation_id: str, after_seq: int = 0) -> AsyncIterator[StoredEvent]:
        return self.inner.subscribe(conversation_id, after_seq)

    async def list_conversations(self) -> list[ConversationInfo]:
        return await self.inner.list_conversations()

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        return await self.inner.get_conversation(conversation_id)

    async def delete(self, conversation_id: str) -> bool:
        db = self._db
        assert db is not None
        async with self._lock:
            await asyncio.to_thread(
                lambda: db.execute("DELETE FROM spool WHERE conversation_id = ?", (conversation_id,))
            )
            self._pending.discard(conversation_id)
        return await self.inner.delete(conversation_id)

    async def save_snapshot(self, conversation_id: str, snapshot: Snapshot) -> None:
        await self.inner.save_snapshot(conversation_id, snapshot)

    async def load_snapshot(self, conversation_id: str, name: str) -> Snapshot | None:
        return await self.inner.load_snapshot(conversation_id, name)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._drainer is not None:
            self._drainer.cancel()
            with contextlib.suppress(BaseException):
                await self._drainer
        if self._db is not None:
            self._db.close()
        await self.inner.close()
