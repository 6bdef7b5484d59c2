"""Feeds conversation events into the context-intelligence graph in the background.

The event log is the source of truth; the graph is an index of it. So ingest only marks a
conversation dirty (O(1), never waits), and one task feeds each dirty conversation from the log,
after a per-conversation cursor that is persisted in ``<data_dir>/intelligence-feed.json``. At
startup every conversation whose log is ahead of its cursor is fed (backfill): events stored while
the graph service was down, or just before a crash, reach the graph anyway. Feeding the same
event twice is harmless (the intelligence journal deduplicates by
``convograph-conversation:{cid}:{seq}``), so the cursor may lag but never skips.

Where instances share a journal in PostgreSQL (`PostgresJournal`), the cursors live there too
(``ci_feed_cursors``, moved only forward), and each feed starts from the furthest of this
instance's cursor and the shared one: a conversation posted to through several instances is fed
by whichever instance got its events, mostly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Final

from convograph.store import EventLog

__all__ = ["IntelligenceFeeder"]

log = logging.getLogger("convograph.server")

PAGE: Final = 2000


class IntelligenceFeeder:
    """Background feeder from the event log to an `IntelligenceService`."""

    def __init__(self, event_log: EventLog, service: Any, cursor_path: Path) -> None:
        self._log = event_log
        self._service = service
        self._cursor_path = cursor_path
        journal = getattr(service, "journal", None)
        self._shared: Any = journal if hasattr(journal, "feed_cursors") else None
        self._cursors: dict[str, int] = (
            self._shared.feed_cursors() if self._shared is not None else self._load()
        )
        self._moved: dict[str, int] = {}  # cursors moved since the last save (shared cursors)
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._feeding = asyncio.Lock()  # held while a conversation is fed; `forget` waits for it
        self._save_lock = threading.Lock()  # `_save` runs in worker threads, one at a time
        self.last_error: str | None = None

    def _load(self) -> dict[str, int]:
        try:
            data = json.loads(self._cursor_path.read_text())
        except (OSError, ValueError):
            return {}
        return {str(key): int(value) for key, value in data.items()} if isinstance(data, dict) else {}

    def _save(self) -> None:
        """Save the cursors (in a worker thread: `forget` and the feed loop may save at once, so
        saves take turns; two writers of one temporary file lost it, a 500 on an OTLP move)."""
        with self._save_lock:
            if self._shared is not None:
                moved, self._moved = self._moved, {}
                try:
                    self._shared.save_feed_cursors(moved)
                except Exception:
                    for cid, seq in moved.items():  # saved next time
                        self._moved[cid] = max(seq, self._moved.get(cid, 0))
                    raise
                return
            tmp = self._cursor_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(dict(self._cursors)))
            os.replace(tmp, self._cursor_path)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="convograph-intelligence-feeder")

    def mark(self, conversation_id: str) -> None:
        """``conversation_id`` has new events. O(1); never blocks."""
        self._dirty.add(conversation_id)
        self._wake.set()

    async def idle(self, timeout: float = 30.0) -> bool:
        """Wait until nothing is left to feed (for tests and shutdown). False on timeout."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._dirty or self._wake.is_set():
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def forget(self, conversation_id: str) -> None:
        """The conversation was deleted from the event log: drop its cursor and forget its
        session in the graph (no tombstones: the id may start again from seq 1). Waits for a
        feed in progress, so nothing read before the deletion is ingested after it."""
        from convograph.intelligence.conversations import conversation_target
        from convograph.intelligence.envelope import EnvelopeError
        from convograph.intelligence.service import NotFound

        async with self._feeding:
            self._dirty.discard(conversation_id)
            self._cursors.pop(conversation_id, None)
            if self._shared is not None:
                await asyncio.to_thread(self._shared.drop_feed_cursor, conversation_id)
            else:
                await asyncio.to_thread(self._save)
            workspace, session_id = conversation_target(conversation_id)
            with contextlib.suppress(NotFound, EnvelopeError):  # never fed (or an id no session can have)
                await asyncio.to_thread(self._service.forget_session, workspace, session_id, tombstone=False)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(OSError):
            await asyncio.to_thread(self._save)

    async def _run(self) -> None:
        try:
            for info in await self._log.list_conversations():  # backfill
                if info.last_seq > self._cursors.get(info.id, 0):
                    self._dirty.add(info.id)
        except Exception as exc:
            self.last_error = f"backfill listing failed: {exc}"
            log.warning("intelligence feeder: %s", self.last_error)
        while True:
            if not self._dirty:
                self._wake.clear()
                await self._wake.wait()
            batch, self._dirty = self._dirty, set()
            for conversation_id in batch:
                try:
                    async with self._feeding:
                        await self._feed(conversation_id)
                except Exception as exc:  # the graph is down or failed: keep the cursor, retry later
                    self.last_error = f"feeding {conversation_id!r} failed: {exc}"
                    log.warning("intelligence feeder: %s", self.last_error)
                    self._dirty.add(conversation_id)
                    await asyncio.sleep(1.0)
            self._wake.clear()
            try:
                await asyncio.to_thread(self._save)
            except Exception as exc:  # the cursors may lag (re-feeding is deduplicated), never skip
                self.last_error = f"saving feed cursors failed: {exc}"
                log.warning("intelligence feeder: %s", self.last_error)

    async def _feed(self, conversation_id: str) -> None:
        from convograph.intelligence.conversations import conversation_envelopes

        service = self._service
        cursor = self._cursors.get(conversation_id, 0)
        if self._shared is not None:  # another instance may have fed it further
            shared = await asyncio.to_thread(self._shared.feed_cursors, [conversation_id])
            cursor = max(cursor, shared.get(conversation_id, 0))
        while True:
            page = await self._log.read(conversation_id, cursor, PAGE)
            if not page:
                return
            envelopes = conversation_envelopes(conversation_id, page)
            if envelopes:  # raises when the service fails: the cursor then stays where it was
                await asyncio.to_thread(service.ingest_many, envelopes)
            cursor = page[-1].seq
            self._cursors[conversation_id] = cursor
            self._moved[conversation_id] = cursor
            if len(page) < PAGE:
                return
