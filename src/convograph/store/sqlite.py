"""SQLite event log: the embedded default (one file under the data directory).

Design:
- WAL journal; one **writer thread** owns the only write connection. Appends from any task are queued;
  the writer takes everything queued (up to ``max_group_events``) and commits it as one transaction
  (**group commit**), each request inside its own SAVEPOINT so one bad request fails alone.
- **Durability policy: an append is acknowledged only after its transaction commits.** With the default
  ``synchronous=FULL`` the commit fsyncs the WAL, so an acknowledged event survives a process crash and
  a power loss; ``synchronous=NORMAL`` (URL ``?synchronous=normal``) survives a process crash only.
- Reads use a small pool of read connections (WAL readers never block the writer).
- Range reads use the primary key ``(conversation_id, seq)``; duplicate checks use a partial unique
  index on ``(conversation_id, event_id)``. Appending costs O(batch · log n): flat in the history size.
- At open, a leftover WAL (the previous process did not close cleanly) is inspected; a torn tail is
  logged and kept in `SQLiteEventLog.recovery` (see `convograph.store.wal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from convograph.events import Event, pack_event, unpack_event
from convograph.store.base import (
    AppendResult,
    BackendUnavailable,
    ConversationInfo,
    Snapshot,
    StoredEvent,
    read_range,
    validate_conversation_id,
)
from convograph.store.batch import assign_seqs, check_events, event_ids_of
from convograph.store.status import RunTally, fold_status
from convograph.store.tail import ChangeSignal, follow
from convograph.store.wal import WalReport, inspect_wal

__all__ = ["SQLiteEventLog"]

log = logging.getLogger("convograph.store.sqlite")

Synchronous = Literal["FULL", "NORMAL", "EXTRA"]

_MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: events, conversations, snapshots
    """
    CREATE TABLE events (
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        event_id TEXT,
        type TEXT NOT NULL,
        received_at REAL NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX events_by_event_id ON events (conversation_id, event_id)
        WHERE event_id IS NOT NULL;
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        event_count INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        last_activity REAL NOT NULL,
        tally BLOB NOT NULL,
        created_at REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX conversations_by_activity ON conversations (last_activity);
    CREATE TABLE snapshots (
        conversation_id TEXT NOT NULL,
        name TEXT NOT NULL,
        seq INTEGER NOT NULL,
        data BLOB NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (conversation_id, name)
    ) WITHOUT ROWID;
    """,
)

_STOP: Final = object()
_CHECKPOINT_INTERVAL: Final = 0.2
_WAL_SIZE_LIMIT: Final = 64 * 1024 * 1024
_IN_CHUNK: Final = 500
_tally_encoder = msgspec.json.Encoder()
_tally_decoder = msgspec.json.Decoder(RunTally)


class _Request:
    __slots__ = ("fn", "future", "loop", "size")

    def __init__(
        self, fn: Callable[[sqlite3.Connection], Any], size: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.fn = fn
        self.size = size
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def _migrate(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > len(_MIGRATIONS):
            raise RuntimeError(
                f"event log schema version {version} is newer than this convograph ({len(_MIGRATIONS)})"
            )
        for number, script in enumerate(_MIGRATIONS[version:], start=version + 1):
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version={number}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _unavailable(exc: BaseException) -> BackendUnavailable:
    return BackendUnavailable("sqlite", f"{type(exc).__name__}: {exc}")


class SQLiteEventLog:
    """`EventLog` in one SQLite file (``sqlite:///relative.db`` or ``sqlite:////abs/path.db``).

    Open with ``await SQLiteEventLog.open(path)``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        max_group_events: int = 50_000,
        readers: int = 2,
        recovery: WalReport | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.synchronous = synchronous
        self.recovery = recovery
        """Set when the previous process left a torn WAL tail (reported at open)."""
        self._max_group = max_group_events
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._signal = ChangeSignal()
        self._closed = False
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_local = threading.local()
        self._readers = ThreadPoolExecutor(max_workers=readers, thread_name_prefix="convograph-sqlite-read")
        self._writer = threading.Thread(
            target=self._writer_main, name="convograph-sqlite-writer", daemon=True
        )
        self._writer_conn: sqlite3.Connection | None = None
        self._writer_ready = threading.Event()
        self._commits = 0
        self._checkpoint_wake = threading.Event()
        self._checkpoint_stop = False
        self._checkpointer = threading.Thread(
            target=self._checkpointer_main, name="convograph-sqlite-checkpoint", daemon=True
        )
        self._writer_error: BaseException | None = None

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        max_group_events: int = 50_000,
    ) -> SQLiteEventLog:
        """Create the file (and its directory) if needed, check for a torn tail, migrate the schema."""
        target = Path(path)
        if str(target) != ":memory:":
            target.parent.mkdir(parents=True, exist_ok=True)
        recovery = await asyncio.to_thread(inspect_wal, target)
        if recovery is not None and recovery.torn:
            log.warning("event log %s: %s", target, recovery.describe())
        elif recovery is not None:
            recovery = None  # a leftover WAL with only committed frames: a crash, but nothing torn
        self = cls(path, synchronous=synchronous, max_group_events=max_group_events, recovery=recovery)
        self._writer.start()
        await asyncio.to_thread(self._writer_ready.wait)
        if self._writer_error is not None:
            raise _unavailable(self._writer_error)
        self._checkpointer.start()
        return self

    # -- writer thread ---------------------------------------------------------------------------------

    def _writer_main(self) -> None:
        try:
            conn = _connect(self.path, self.synchronous)
            _migrate(conn)
            # Checkpoints run on their own thread (PASSIVE: never blocks this writer), so a commit
            # never pays for copying the WAL back into the database file.
            conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
        except BaseException as exc:
            self._writer_error = exc
            self._writer_ready.set()
            return
        self._writer_conn = conn
        self._writer_ready.set()
        stop = False
        while not stop:
            first = self._queue.get()
            if first is _STOP:
                break
            assert isinstance(first, _Request)
            group = [first]
            size = first.size
            while size < self._max_group:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                assert isinstance(nxt, _Request)
                group.append(nxt)
                size += nxt.size
            self._commit_group(conn, group)
            self._commits += 1
            self._checkpoint_wake.set()
        conn.close()

    def _checkpointer_main(self) -> None:
        """Copy committed WAL frames into the database file in the background (PASSIVE checkpoints)."""
        conn = _connect(self.path, self.synchronous)
        seen = 0
        try:
            while not self._checkpoint_stop:
                self._checkpoint_wake.wait(_CHECKPOINT_INTERVAL)
                self._checkpoint_wake.clear()
                if self._commits == seen:
                    continue
                seen = self._commits
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as exc:  # busy or I/O trouble: retried on the next round
                    log.debug("checkpoint skipped: %s", exc)
                time.sleep(_CHECKPOINT_INTERVAL)  # batch checkpoints under a steady write load
        finally:
            conn.close()

    def _commit_group(self, conn: sqlite3.Connection, group: list[_Request]) -> None:
        outcomes: list[tuple[_Request, Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for request in group:
                conn.execute("SAVEPOINT request")
                try:
                    result = request.fn(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO request")
                    conn.execute("RELEASE request")
                    error: BaseException = _unavailable(exc) if isinstance(exc, sqlite3.Error) else exc
                    outcomes.append((request, None, error))
                else:
                    conn.execute("RELEASE request")
                    outcomes.append((request, result, None))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            error = _unavailable(exc)
            outcomes = [(request, None, error) for request in group]
        touched: set[str] = set()
        for request, result, failure in outcomes:
            if isinstance(result, AppendResult) and result.accepted:
                touched.add(result.stored[0].conversation_id)
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone: nobody to tell
                request.loop.call_soon_threadsafe(_resolve, request.future, result, failure)
        for cid in touched:
            self._signal.notify_threadsafe(cid)

    async def _submit(self, fn: Callable[[sqlite3.Connection], Any], size: int = 1) -> Any:
        if self._closed:
            raise RuntimeError("event log is closed")
        if not self._writer.is_alive():
            raise BackendUnavailable("sqlite", "the writer thread is not running")
        request = _Request(fn, size, asyncio.get_running_loop())
        self._queue.put(request)
        return await request.future

    # -- operations ------------------------------------------------------------------------------------

    async def append(self, conversation_id: str, events: Sequence[Event]) -> AppendResult:
        validate_conversation_id(conversation_id)
        check_events(events)
        self._signal.token(conversation_id)  # binds the signal to this loop before the writer notifies
        batch = list(events)

        def write(conn: sqlite3.Connection) -> AppendResult:
            return _append(conn, conversation_id, batch)

        result: AppendResult = await self._submit(write, max(len(batch), 1))
        return result

    async def _on_reader(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        if self._closed:
            raise RuntimeError("event log is closed")

        def run() -> Any:
            conn: sqlite3.Connection | None = getattr(self._reader_local, "conn", None)
            if conn is None:
                conn = _connect(self.path, self.synchronous)
                conn.execute("PRAGMA query_only=1")
                self._reader_local.conn = conn
                self._reader_conns.append(conn)
            try:
                return fn(conn)
            except sqlite3.Error as exc:
                raise _unavailable(exc) from exc

        return await asyncio.get_running_loop().run_in_executor(self._readers, run)

    async def read(
        self, conversation_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        validate_conversation_id(conversation_id)
        bounds = read_range(after_seq, limit)
        if bounds is None:
            return []
        after_seq, limit = bounds

        def run(conn: sqlite3.Connection) -> list[StoredEvent]:
            rows = conn.execute(
                "SELECT seq, received_at, data FROM events WHERE conversation_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (conversation_id, after_seq, -1 if limit is None else limit),
            ).fetchall()
            return [
                StoredEvent(
                    seq=seq, conversation_id=conversation_id, event=unpack_event(data), received_at=at
                )
                for seq, at, data in rows
            ]

        result: list[StoredEvent] = await self._on_reader(run)
        return result

    def subscribe(self, conversation_id: str, after_seq: int = 0) -> AsyncIterator[StoredEvent]:
        validate_conversation_id(conversation_id)
        return follow(self.read, self._signal, conversation_id, after_seq)

    async def list_conversations(self) -> list[ConversationInfo]:
        def run(conn: sqlite3.Connection) -> list[ConversationInfo]:
            rows = conn.execute(
                "SELECT id, event_count, last_seq, last_activity, tally FROM conversations "
                "ORDER BY last_activity DESC"
            ).fetchall()
            return [_info(*row) for row in rows]

        result: list[ConversationInfo] = await self._on_reader(run)
        return result

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        validate_conversation_id(conversation_id)

        def run(conn: sqlite3.Connection) -> ConversationInfo | None:
            row = conn.execute(
                "SELECT id, event_count, last_seq, last_activity, tally FROM conversations WHERE id = ?",
                (conversation_id,),
            ).fetchone()
            return None if row is None else _info(*row)

        result: ConversationInfo | None = await self._on_reader(run)
        return result

    async def delete(self, conversation_id: str) -> bool:
        validate_conversation_id(conversation_id)

        def write(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM events WHERE conversation_id = ?", (conversation_id,))
            conn.execute("DELETE FROM snapshots WHERE conversation_id = ?", (conversation_id,))
            return conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0

        result: bool = await self._submit(write)
        return result

    async def save_snapshot(self, conversation_id: str, snapshot: Snapshot) -> None:
        validate_conversation_id(conversation_id)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO snapshots (conversation_id, name, seq, data, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (conversation_id, name) DO UPDATE SET seq = excluded.seq, data = excluded.data, "
                "created_at = excluded.created_at WHERE excluded.seq >= snapshots.seq",
                (conversation_id, snapshot.name, snapshot.seq, snapshot.data, time.time()),
            )

        await self._submit(write, max(len(snapshot.data) // 200, 1))

    async def load_snapshot(self, conversation_id: str, name: str) -> Snapshot | None:
        validate_conversation_id(conversation_id)

        def run(conn: sqlite3.Connection) -> Snapshot | None:
            row = conn.execute(
                "SELECT seq, data FROM snapshots WHERE conversation_id = ? AND name = ?",
                (conversation_id, name),
            ).fetchone()
            return None if row is None else Snapshot(name=name, seq=row[0], data=bytes(row[1]))

        result: Snapshot | None = await self._on_reader(run)
        return result

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._readers.shutdown(wait=True)
        for conn in self._reader_conns:
            conn.close()
        self._queue.put(_STOP)
        self._checkpoint_stop = True
        self._checkpoint_wake.set()
        if self._checkpointer.ident is not None:
            await asyncio.to_thread(self._checkpointer.join)
        await asyncio.to_thread(self._writer.join)  # the last connection to close checkpoints fully


def _info(cid: str, count: int, last_seq: int, last_activity: float, tally: bytes) -> ConversationInfo:
    return ConversationInfo(
        id=cid,
        event_count=count,
        last_seq=last_seq,
        last_activity=last_activity,
        status=_tally_decoder.decode(tally).status,
    )


def _known_ids(conn: sqlite3.Connection, conversation_id: str, ids: list[str]) -> set[str]:
    known: set[str] = set()
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = ids[start : start + _IN_CHUNK]
        marks = ",".join("?" * len(chunk))
        known.update(
            row[0]
            for row in conn.execute(
                f"SELECT event_id FROM events WHERE conversation_id = ? AND event_id IN ({marks})",
                (conversation_id, *chunk),
            )
        )
    return known


def _insert(conn: sqlite3.Connection, conversation_id: str, stored: list[StoredEvent], now: float) -> None:
    conn.executemany(
        "INSERT INTO events (conversation_id, seq, event_id, type, received_at, data) VALUES (?, ?, ?, ?, ?, ?)",
        [(conversation_id, s.seq, s.event.event_id, s.event.type, now, pack_event(s.event)) for s in stored],
    )


def _append(conn: sqlite3.Connection, conversation_id: str, events: list[Event]) -> AppendResult:
    """Runs on the writer thread inside the group's transaction."""
    row = conn.execute(
        "SELECT event_count, last_seq, tally FROM conversations WHERE id = ?", (conversation_id,)
    ).fetchone()
    if row is None:
        count, last_seq, tally = 0, 0, RunTally()
    else:
        count, last_seq, tally = row[0], row[1], _tally_decoder.decode(row[2])
    now = time.time()
    # Optimistic path: assume no eventId is stored yet (repeats inside the batch are caught in Python)
    # and let the unique index prove it; only on a conflict pay for the lookup. Seqs stay gap-free
    # because the failed attempt is rolled back before seqs are assigned again.
    stored, dups = assign_seqs(conversation_id, events, (), last_seq, now)
    if stored:
        conn.execute("SAVEPOINT optimistic")
        try:
            _insert(conn, conversation_id, stored, now)
            conn.execute("RELEASE optimistic")
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK TO optimistic")
            conn.execute("RELEASE optimistic")
            known = _known_ids(conn, conversation_id, event_ids_of(events))
            stored, dups = assign_seqs(conversation_id, events, known, last_seq, now)
            if stored:
                _insert(conn, conversation_id, stored, now)
    if stored:
        tally = fold_status(tally, (s.event for s in stored))
        last_seq = stored[-1].seq
        conn.execute(
            "INSERT INTO conversations (id, event_count, last_seq, last_activity, tally, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET event_count = excluded.event_count, "
            "last_seq = excluded.last_seq, last_activity = excluded.last_activity, tally = excluded.tally",
            (conversation_id, count + len(stored), last_seq, now, _tally_encoder.encode(tally), now),
        )
    return AppendResult(
        accepted=len(stored),
        duplicates=len(dups),
        first_seq=stored[0].seq if stored else None,
        last_seq=stored[-1].seq if stored else None,
        conversation_last_seq=last_seq,
        stored=stored,
        duplicate_indexes=dups,
    )
