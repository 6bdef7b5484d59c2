"""Durable ingest journal for hook envelopes: accepted → durable → acknowledged.

`Journal` is the protocol; `SqliteJournal` (WAL) is the durable implementation and
`MemoryJournal` the in-memory double with identical semantics.

Invariants:

- ``append`` is atomic per call and returns only after commit ("durable before 202"; with
  ``synchronous="normal"`` a committed append survives a process crash, with ``"full"`` also
  power loss).
- Deduplication survives restarts: an envelope is a duplicate when its ``idempotency_key`` was
  already accepted *for the same session* (workspace and ``data.session_id``) or its content
  fingerprint *in the same workspace* (the key is recorded in the same transaction as the
  event, never before it — upstream §10 B7). The unique indexes hold 128-bit BLAKE2b digests of
  ``(workspace, key)`` (after the session's 64-bit key) and ``(workspace, fingerprint)`` (after
  the base-id key): short fixed-size keys make an append ~2x cheaper than indexing the text, and
  both indexes grow where current events go, not on random pages. A forgotten session's key
  digests stay refused in its whole workspace (tombstones).
- ``seq`` is a global, strictly increasing integer; records become visible to ``read_after`` in
  seq order, so per-session order is arrival order.
- Events sharing a seed-format base id but differing in content (same session, type and
  millisecond; upstream §10 B4) form *collision groups* (`collision_groups`, an indexed query);
  the writer gives the bare id to the smallest fingerprint and suffixes the others, whatever the
  arrival order. The base-id key that index holds starts with the event's millisecond, so
  appends land near the index's end instead of on random pages (schema 4).
- Dead letters reference journal rows. Replay moves the rows to the tail (new seq), purge
  forgets the dead-letter entries (the event stays known for deduplication).
- ``forget_session`` deletes a session's rows (payloads included) and keeps only their dedupe
  digests as tombstones, so a redelivered copy of a forgotten event is a duplicate, never a
  resurrection. Tombstones hold 128-bit digests, no content.
"""

from __future__ import annotations

import bisect
import collections
import hashlib
import logging
import sqlite3
import threading
import time
import uuid
import zlib
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec

from convograph.intelligence.envelope import Envelope

__all__ = [
    "AppendResult",
    "DeadLetterGroup",
    "Journal",
    "JournalRecord",
    "MemoryJournal",
    "RecentRecord",
    "SqliteJournal",
    "event_base_key",
]

_json = msgspec.json.Encoder()
log = logging.getLogger("convograph.intelligence.journal")


# gc=False: never part of a reference cycle (it holds only decoded JSON values), so the cyclic
# GC need not track it; the ingest path makes one per event and GC passes were ~20 % of its CPU
class JournalRecord(msgspec.Struct, frozen=True, gc=False):
    """One accepted envelope as stored. ``data`` is the compact JSON of the original payload."""

    seq: int
    workspace: str
    session_id: str
    event: str
    epoch_ms: int
    fingerprint: str
    base_id: str
    data: bytes
    created_by: str | None = None
    base_key: int | None = None
    """`event_base_key` of ``(workspace, base_id, epoch_ms)`` as the journal indexed it (None: not
    known, compute it)."""


class RecentRecord(msgspec.Struct, frozen=True):
    """One of the newest records (`Journal.recent`): what the status page shows of it."""

    seq: int
    workspace: str
    session_id: str
    event: str
    received_ms: int
    error: str | None = None
    """Its dead-letter error, if it was dead-lettered."""


class AppendResult(msgspec.Struct, frozen=True, gc=False):
    """Outcome for one envelope: ``queued`` with its seq, or ``duplicate``."""

    status: Literal["queued", "duplicate"]
    seq: int | None = None


class DeadLetterGroup(msgspec.Struct, frozen=True):
    """Dead letters of one session key (upstream: per worker key)."""

    key: str
    workspace: str
    item_count: int
    last_error: str
    last_ts: float


class Journal(Protocol):
    """Durable, ordered, deduplicating store of accepted envelopes."""

    journal_id: str

    def append(self, envelopes: Sequence[Envelope], created_by: str | None = None) -> list[AppendResult]: ...

    def read_after(self, seq: int, limit: int) -> list[JournalRecord]: ...

    def last_seq(self) -> int: ...

    def collision_groups(self, workspace: str, events: Collection[tuple[str, int]]) -> dict[str, list[str]]:
        """Sorted fingerprints of every base id among ``events`` (``(base_id, epoch_ms)`` pairs
        of appended events) that distinct events of ``workspace`` share."""
        ...

    def base_keys(self) -> Iterator[int]:
        """`event_base_key` of every record held (any order; repeats allowed). O(N): the
        applier reads it once at start (`GraphApplier.start`)."""
        ...

    def dead_letter(self, seq: int, error: str) -> None: ...

    def dead_letters(self, workspaces: frozenset[str] | None = None) -> list[DeadLetterGroup]: ...

    def replay_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int: ...

    def purge_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int: ...

    def forget_session(
        self, workspace: str, session_id: str, *, tombstone: bool = True, idle_before_ms: int | None = None
    ) -> int:
        """Delete one session's records, keeping their dedupe digests as tombstones unless
        ``tombstone`` is false (then a re-sent copy is new data); returns how many. With
        ``idle_before_ms``, only if its newest record was received before then (checked in the
        same transaction: a session that just became active again is kept, and 0 returned)."""
        ...

    def session_count(self, workspace: str, session_id: str) -> int:
        """How many records the session has in ``workspace``."""
        ...

    def idle_sessions(self, received_before_ms: int, workspace: str | None = None) -> list[tuple[str, str]]:
        """``(workspace, session_id)`` of every session (of ``workspace``, or all) whose newest
        record was received before ``received_before_ms``, sorted."""
        ...

    def recent(self, limit: int) -> list[RecentRecord]:
        """The newest ``limit`` records, newest first. O(limit)."""
        ...

    def dead_letters_since(self, ts: float) -> int:
        """How many records were dead-lettered at or after ``ts`` (epoch seconds)."""
        ...

    def read_workspace(
        self, workspace: str, after_seq: int, upto_seq: int, limit: int
    ) -> list[JournalRecord]:
        """Up to ``limit`` live (not dead-lettered) records of ``workspace`` with
        ``after_seq < seq <= upto_seq``, in seq order (a workspace rebuild replays them)."""
        ...

    def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace TEXT NOT NULL,
    session_id TEXT NOT NULL,
    event TEXT NOT NULL,
    epoch_ms INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    base_id TEXT NOT NULL,
    created_by TEXT,
    received_ms INTEGER NOT NULL,
    data BLOB NOT NULL,
    content_key BLOB NOT NULL,
    idem_key BLOB,
    base_key INTEGER NOT NULL,
    session_key INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS dead_letters (
    seq INTEGER PRIMARY KEY, error TEXT NOT NULL, ts REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tombstones (content_key BLOB PRIMARY KEY, idem_key BLOB) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tombstones_idem ON tombstones (idem_key) WHERE idem_key IS NOT NULL;
"""
# One unique index on (base_key, content_key) does the work of a unique index on content_key
# and a plain one on base_key: the base id is a function of the content (session id, event
# name, timestamp, tool_call_id all come from {event, data}), so equal (workspace, content)
# implies equal base_key, and collision groups are read by its base_key prefix. One B-tree
# less per append (measured ~1.5 us of SQLite CPU per event).
# base_key starts with the event's millisecond (`_base_key`), so this index grows at its end
# like the table: a random 64-bit hash put every append on a random leaf page, and each commit
# wrote every page it touched to the WAL (schema 4).
# A session's rows are found through a 64-bit key of (workspace, session_id) (`_session_key`;
# queries compare the exact columns too): a ~20-byte index entry instead of both texts and the
# seq (schema 5; the rowid the entry carries gives seq order).
# Idempotency digests are unique per session and indexed after the session key, so a batch's
# digests land on its sessions' few pages of the index instead of one random page each (schema
# 5; schema 4's index on the digest alone wrote about one page per event to the WAL once the log
# held a few hundred thousand events). Tombstones keep the digest alone: a forgotten key stays
# refused in every session of its workspace.
# Schema 6: one index on (session_key, idem_key) for every row does both jobs (schema 5 had a
# partial unique one and a plain one on session_key): SQLite's unique indexes hold any number of
# NULLs, so a row without a key conflicts with none, and a session's rows are its key prefix
# (read in seq order with a sort, O(k log k) per session read). One B-tree less per append:
# ci-large appended alone, 8.9-9.2 -> 7.9-8.1 us of CPU per event.
_INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS events_base_content ON events (base_key, content_key);
CREATE UNIQUE INDEX IF NOT EXISTS events_session_keys ON events (session_key, idem_key);
"""
_SCHEMA_VERSION = "6"
_REKEY = (
    "DROP INDEX IF EXISTS events_base_content;"
    " UPDATE events SET base_key = convograph_base_key(workspace, base_id, epoch_ms);"
)
_TO_5 = (
    " ALTER TABLE events ADD COLUMN session_key INTEGER NOT NULL DEFAULT 0;"
    " UPDATE events SET session_key = convograph_session_key(workspace, session_id);"
    " DROP INDEX IF EXISTS events_session; DROP INDEX IF EXISTS events_idem_key;"
    " DROP INDEX IF EXISTS tombstones_idem_key;"  # unique: two sessions may now share a key
)
_TO_6 = " DROP INDEX IF EXISTS events_session_idem; DROP INDEX IF EXISTS events_session_key;"
_MIGRATIONS = {
    "2": "DROP INDEX IF EXISTS events_content_key; DROP INDEX IF EXISTS events_base_key;"
    + _REKEY
    + _TO_5
    + _TO_6,
    "3": _REKEY + _TO_5 + _TO_6,  # schema 3 keyed base ids by a random 64-bit hash (`_base_key`)
    "4": _TO_5 + _TO_6,  # schema 4 indexed sessions on (workspace, session_id, seq), digests alone
    "5": _TO_6,  # schema 5 had a partial unique (session_key, idem_key) index and one on session_key
}
"""Older schema version -> SQL that, followed by `_INDEXES`, makes it the current one (with
``convograph_base_key`` / ``convograph_session_key`` registered as `_base_key` / `_session_key`)."""
_PAGE_SIZE = 8192
"""Page size of a new journal file (SQLite's default is 4,096; existing files keep theirs)."""


_rows_decoder = msgspec.json.Decoder(list[list[Any]])


def now_ms() -> int:
    """Server time of an append (``received_ms``), in epoch milliseconds; tests may replace it."""
    return int(time.time() * 1000)


def _first(row: list[Any]) -> Any:
    return row[0]


def _digest16(*parts: str) -> bytes:
    return hashlib.blake2b("\x00".join(parts).encode(), digest_size=16).digest()


_KEY_MS = 1 << 46  # |milliseconds| kept in a base key: ~2,230 years either side of 1970


def _base_key(workspace: str, base_id: str, epoch_ms: int) -> int:
    """The collision index's key of a base id: its millisecond (clamped to +-2**46) in the high
    bits, 16 bits of CRC-32 of ``(workspace, base_id)`` below; a signed 64-bit integer. Keys
    follow time, so appends of current events touch the index's last pages; any two events with
    one base id share the key (the base id holds its millisecond), and an equal key of another
    base id is told apart on the exact workspace and base id (`collision_groups`)."""
    ms = epoch_ms if -_KEY_MS <= epoch_ms < _KEY_MS else (_KEY_MS - 1 if epoch_ms > 0 else -_KEY_MS)
    return (ms << 16) | (zlib.crc32(f"{workspace}\x00{base_id}".encode()) & 0xFFFF)


def event_base_key(workspace: str, base_id: str, epoch_ms: int) -> int:
    """The collision index's key of a base id (`_base_key`; any two events with one base id share
    it, and two base ids may share one)."""
    return _base_key(workspace, base_id, epoch_ms)


def _session_key(workspace: str, session_id: str) -> int:
    """The session index's key: 64 bits of BLAKE2b of ``(workspace, session_id)``, signed. Two
    sessions with one key only cost extra rows read: queries compare the exact columns too."""
    digest = hashlib.blake2b(f"{workspace}\x00{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


_SESSION = "session_key = ? AND workspace = ? AND session_id = ?"
"""One session's rows, through ``events_session_keys`` (parameters: `_session_params`)."""


def _session_params(workspace: str, session_id: str) -> tuple[int, str, str]:
    return (_session_key(workspace, session_id), workspace, session_id)


_INSERT_HEAD = (
    "INSERT OR IGNORE INTO events (workspace, session_id, event, epoch_ms, fingerprint, base_id,"
    " created_by, received_ms, data, content_key, idem_key, base_key, session_key) VALUES "
)
_ROW_MARKS = "(?,?,?,?,?,?,?,?,?,?,?,?,?)"
_INSERT_ONE = _INSERT_HEAD + _ROW_MARKS
_CACHE_KIB = 65536  # write connection's page cache
_CHECKPOINT_BYTES = 40_960_000  # WAL bytes between automatic checkpoints
_INSERT_CHUNK = 2000  # 13 parameters a row: 26,000 < SQLite's 32,766 variable limit


def _insert_rows(cur: sqlite3.Cursor, rows: Sequence[tuple[object, ...]]) -> int:
    """Insert ``rows`` in order with multi-row ``INSERT OR IGNORE`` statements; returns how many
    were new. One statement step per 2,000 rows, not one per row: the sqlite3 module releases the
    GIL around every step, and a thread that gives the GIL away waits up to the switch interval
    (5 ms) to get it back while another thread computes. ``executemany`` therefore slowed batch
    appends ~140x when the applier's planner was busy (measured: 21 → 3,070 µs per event)."""
    inserted = 0
    for start in range(0, len(rows), _INSERT_CHUNK):
        chunk = rows[start : start + _INSERT_CHUNK]
        cur.execute(
            _INSERT_HEAD + ",".join([_ROW_MARKS] * len(chunk)),
            [value for row in chunk for value in row],
        )
        inserted += cur.rowcount
    return inserted


class SqliteJournal:
    """`Journal` in one SQLite file (WAL). Safe for many threads: one writer lock, one reader lock."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Literal["normal", "full"] = "normal",
        tail_records: int = 50_000,
    ) -> None:
        self.path = Path(path)
        self.tail_records = tail_records
        self._tail: dict[int, JournalRecord] = {}  # seq -> record of the latest appends
        self._tail_order: collections.deque[int] = collections.deque()
        self._tail_lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        # only takes effect on a new file (before its first write): fewer, larger pages per
        # commit (measured with the time-ordered base keys: 4 KiB -> 8 KiB, ~1.5 us less per event)
        self._write.execute(f"PRAGMA page_size={_PAGE_SIZE}")
        self._write.execute("PRAGMA journal_mode=WAL")
        self._write.execute(f"PRAGMA synchronous={synchronous.upper()}")
        self._write.execute("PRAGMA busy_timeout=10000")
        # The unique indexes take random keys, so appends touch index pages all over the file:
        # a 64 MiB page cache (default 2 MiB) and a checkpoint every ~40 MiB of WAL (default 4)
        # cut an append from 18-20 to ~14 us of CPU per event (ci-large, batches of 2,000).
        self._write.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
        page_size = self._write.execute("PRAGMA page_size").fetchone()[0]
        self._write.execute(f"PRAGMA wal_autocheckpoint={_CHECKPOINT_BYTES // page_size}")
        self._write.create_function("convograph_base_key", 3, _base_key, deterministic=True)
        self._write.create_function("convograph_session_key", 2, _session_key, deterministic=True)
        self._write.executescript(_SCHEMA)
        self._read = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._read.execute("PRAGMA busy_timeout=10000")
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        version = self._write.execute("SELECT v FROM meta WHERE k = 'schema'").fetchone()
        if version is None:
            self._write.executescript(_INDEXES)
            self._write.execute("INSERT INTO meta (k, v) VALUES ('schema', ?)", (_SCHEMA_VERSION,))
        elif version[0] in _MIGRATIONS:
            # from schema 4 and older it rewrites every row (~10 s per million events), from 5 it
            # builds an index: say why the start is slow
            log.info("migrating %s from journal schema %s to %s", self.path, version[0], _SCHEMA_VERSION)
            self._write.executescript(
                "BEGIN IMMEDIATE;" + _MIGRATIONS[version[0]] + _INDEXES
                + f"UPDATE meta SET v = '{_SCHEMA_VERSION}' WHERE k = 'schema'; COMMIT;"
            )  # fmt: skip
        elif version[0] != _SCHEMA_VERSION:
            raise RuntimeError(
                f"{self.path}: journal schema {version[0]}, this version reads {_SCHEMA_VERSION}"
            )
        row = self._write.execute("SELECT v FROM meta WHERE k = 'journal_id'").fetchone()
        if row is None:
            self.journal_id = uuid.uuid4().hex
            self._write.execute("INSERT INTO meta (k, v) VALUES ('journal_id', ?)", (self.journal_id,))
        else:
            self.journal_id = row[0]
        self._has_tombstones = self._write.execute("SELECT 1 FROM tombstones LIMIT 1").fetchone() is not None

    def _tombstoned(self, cur: sqlite3.Cursor, rows: list[tuple[Any, ...]]) -> set[bytes]:
        """Content keys of ``rows`` whose content or idempotency key was forgotten. One indexed
        query per 2,000 rows, only once something was forgotten (never on the common path)."""
        found: set[bytes] = set()
        for start in range(0, len(rows), _INSERT_CHUNK):
            chunk = rows[start : start + _INSERT_CHUNK]
            contents = [row[9] for row in chunk]
            idems = [row[10] for row in chunk if row[10] is not None]
            hits = {
                key
                for (key,) in cur.execute(
                    f"SELECT content_key FROM tombstones WHERE content_key IN ({','.join('?' * len(contents))})",
                    contents,
                )
            }
            if idems:
                dead_idems = {
                    key
                    for (key,) in cur.execute(
                        f"SELECT idem_key FROM tombstones WHERE idem_key IN ({','.join('?' * len(idems))})",
                        idems,
                    )
                }
                hits.update(row[9] for row in chunk if row[10] is not None and row[10] in dead_idems)
            found |= hits
        return found

    def append(self, envelopes: Sequence[Envelope], created_by: str | None = None) -> list[AppendResult]:
        """Insert all envelopes in one transaction. O(n log N).

        Batches go through one ``executemany``; which rows were new is read back by seq (the first
        occurrence of a fingerprint in the batch is the one that was inserted).
        """
        rows = self._rows(envelopes, created_by)
        with self._write_lock:
            return self._append_locked(envelopes, rows)

    def append_nowait(
        self, envelopes: Sequence[Envelope], created_by: str | None = None
    ) -> list[AppendResult] | None:
        """`append` if the write lock is free right now, else None (nothing done): lets an event
        loop commit a few envelopes itself (~30 µs) instead of handing them to a thread, without
        ever waiting behind a large batch."""
        rows = self._rows(envelopes, created_by)
        if not self._write_lock.acquire(blocking=False):
            return None
        try:
            return self._append_locked(envelopes, rows)
        finally:
            self._write_lock.release()

    def _rows(self, envelopes: Sequence[Envelope], created_by: str | None) -> list[tuple[Any, ...]]:
        now = now_ms()
        sessions: dict[tuple[str, str], int] = {}  # a batch holds few sessions: one digest each
        rows = []
        for env in envelopes:
            session = (env.workspace, env.session_id)
            session_key = sessions.get(session)
            if session_key is None:
                session_key = sessions[session] = _session_key(*session)
            rows.append((
                env.workspace, env.session_id, env.event, env.epoch_ms, env.fingerprint, env.base_id, created_by, now,
                env.data_json or _json.encode(env.data), _digest16(env.workspace, env.fingerprint),
                None if env.idempotency_key is None else _digest16(env.workspace, env.idempotency_key),
                _base_key(env.workspace, env.base_id, env.epoch_ms), session_key,
            ))  # fmt: skip
        return rows

    def _append_locked(
        self, envelopes: Sequence[Envelope], rows: list[tuple[Any, ...]]
    ) -> list[AppendResult]:
        """The transaction of `append` (the caller holds the write lock)."""
        insert = _INSERT_ONE
        cur = self._write.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            if self._has_tombstones:
                forgotten = self._tombstoned(cur, rows)
                if forgotten:
                    results = self._append_past_tombstones(cur, envelopes, rows, forgotten)
                    cur.execute("COMMIT")
                    self._remember(envelopes, rows, results)
                    return results
            if len(rows) == 1:
                cur.execute(insert, rows[0])
                results = [
                    AppendResult("queued", cur.lastrowid) if cur.rowcount else AppendResult("duplicate")
                ]
            else:
                before = cur.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
                inserted = _insert_rows(cur, rows)
                after = cur.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
                if inserted == len(rows) and after - before == len(rows):
                    # every row was new and AUTOINCREMENT seqs only grow: they are before+1..after
                    # in input order (no read-back of the batch needed)
                    results = [AppendResult("queued", before + 1 + i) for i in range(len(rows))]
                    cur.execute("COMMIT")
                    self._remember(envelopes, rows, results)
                    return results
                new = {
                    (ws, fp): seq
                    for seq, ws, fp in cur.execute(
                        "SELECT seq, workspace, fingerprint FROM events WHERE seq > ?", (before,)
                    )
                }
                results = []
                for env in envelopes:
                    seq = new.pop((env.workspace, env.fingerprint), None)
                    results.append(
                        AppendResult("queued", seq) if seq is not None else AppendResult("duplicate")
                    )
            cur.execute("COMMIT")
            self._remember(envelopes, rows, results)
        except BaseException:
            if self._write.in_transaction:
                cur.execute("ROLLBACK")
            raise
        return results

    def _append_past_tombstones(
        self,
        cur: sqlite3.Cursor,
        envelopes: Sequence[Envelope],
        rows: list[tuple[Any, ...]],
        forgotten: set[bytes],
    ) -> list[AppendResult]:
        """Insert the rows not forgotten one by one (rare path); forgotten ones are duplicates."""
        insert = _INSERT_ONE
        results = []
        for row in rows:
            if row[9] in forgotten:
                results.append(AppendResult("duplicate"))
                continue
            cur.execute(insert, row)
            results.append(
                AppendResult("queued", cur.lastrowid) if cur.rowcount else AppendResult("duplicate")
            )
        return results

    def forget_session(
        self, workspace: str, session_id: str, *, tombstone: bool = True, idle_before_ms: int | None = None
    ) -> int:
        """Delete the session's rows and dead letters in one transaction, keeping their dedupe
        digests as tombstones (unless ``tombstone`` is false). O(session rows · log N)."""
        params = _session_params(workspace, session_id)
        with self._write_lock:
            self._write.execute("BEGIN IMMEDIATE")
            try:
                selected = f"FROM events WHERE {_SESSION}"
                if idle_before_ms is not None:
                    newest = self._write.execute(f"SELECT max(received_ms) {selected}", params).fetchone()[0]
                    if newest is None or newest >= idle_before_ms:
                        self._write.execute("COMMIT")
                        return 0
                if tombstone:
                    self._write.execute(
                        "INSERT OR IGNORE INTO tombstones (content_key, idem_key)"
                        f" SELECT content_key, idem_key {selected}",
                        params,
                    )
                seqs = [seq for (seq,) in self._write.execute(f"SELECT seq {selected}", params)]
                self._write.execute(f"DELETE FROM dead_letters WHERE seq IN (SELECT seq {selected})", params)
                count = self._write.execute(f"DELETE {selected}", params).rowcount
                self._write.execute("COMMIT")
            except BaseException:
                self._write.execute("ROLLBACK")
                raise
            if count and tombstone:
                self._has_tombstones = True
            if count:
                with self._tail_lock:  # O(session rows), plus O(tail) only when the tail held some
                    dropped = {seq for seq in seqs if self._tail.pop(seq, None) is not None}
                    if dropped:
                        self._tail_order = collections.deque(s for s in self._tail_order if s not in dropped)
        return count

    def idle_sessions(self, received_before_ms: int, workspace: str | None = None) -> list[tuple[str, str]]:
        """One grouped scan of the events table: O(N), for a retention sweep, not a hot path."""
        where, params = ("WHERE workspace = ?", (workspace,)) if workspace is not None else ("", ())
        with self._read_lock:
            rows = self._read.execute(
                f"SELECT workspace, session_id FROM events {where} GROUP BY workspace, session_id"
                " HAVING max(received_ms) < ? ORDER BY workspace, session_id",
                (*params, received_before_ms),
            ).fetchall()
        return [(ws, sid) for ws, sid in rows]

    def session_count(self, workspace: str, session_id: str) -> int:
        """Indexed count (``events_session_keys``)."""
        with self._read_lock:
            row = self._read.execute(
                f"SELECT count(*) FROM events WHERE {_SESSION}", _session_params(workspace, session_id)
            ).fetchone()
        return int(row[0])

    def recent(self, limit: int) -> list[RecentRecord]:
        """The primary key read backwards, O(limit)."""
        with self._read_lock:
            rows = self._read.execute(
                "SELECT e.seq, e.workspace, e.session_id, e.event, e.received_ms, d.error FROM events e"
                " LEFT JOIN dead_letters d ON d.seq = e.seq ORDER BY e.seq DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [RecentRecord(*row) for row in rows]

    def dead_letters_since(self, ts: float) -> int:
        with self._read_lock:
            row = self._read.execute("SELECT count(*) FROM dead_letters WHERE ts >= ?", (ts,)).fetchone()
        return int(row[0])

    def read_workspace(
        self, workspace: str, after_seq: int, upto_seq: int, limit: int
    ) -> list[JournalRecord]:
        """A rowid range scan filtered on the workspace: O(rows scanned) per page."""
        return self._read_records(
            "workspace = ? AND seq > ? AND seq <= ? AND seq NOT IN (SELECT seq FROM dead_letters)"
            " ORDER BY seq LIMIT ?",
            (workspace, after_seq, upto_seq, limit),
        )

    def _remember(
        self, envelopes: Sequence[Envelope], rows: list[tuple[Any, ...]], results: list[AppendResult]
    ) -> None:
        """Put just-committed records into the in-memory tail (caller holds the write lock, so
        seqs arrive in increasing order); the oldest leave beyond ``tail_records``. O(batch)."""
        if self.tail_records <= 0:
            return
        with self._tail_lock:
            tail, order = self._tail, self._tail_order
            for env, row, result in zip(envelopes, rows, results, strict=True):
                seq = result.seq
                if seq is None:
                    continue
                tail[seq] = JournalRecord(
                    seq, env.workspace, env.session_id, env.event, env.epoch_ms, env.fingerprint,
                    env.base_id, row[8], row[6], row[11],
                )  # fmt: skip
                order.append(seq)
            while len(order) > self.tail_records:
                tail.pop(order.popleft(), None)

    def _forget_tail(self) -> None:
        with self._tail_lock:
            self._tail.clear()
            self._tail_order.clear()

    def read_after(self, seq: int, limit: int) -> list[JournalRecord]:
        """Up to ``limit`` records after ``seq``, in seq order.

        A contiguous run of seqs held by the in-memory tail is served from there; otherwise the
        rows come back as one JSON array built by SQLite (a single statement step, so the GIL is
        released once, not once per row; see `_insert_rows`). O(limit)."""
        with self._tail_lock:
            tail = self._tail
            first = tail.get(seq + 1)
            if first is not None:
                out = [first]
                get = tail.get
                for next_seq in range(seq + 2, seq + 1 + limit):
                    record = get(next_seq)
                    if record is None:
                        break
                    out.append(record)
        if first is not None:
            if len(out) < limit and out[-1].seq < self._head():
                out.extend(self.read_after(out[-1].seq, limit - len(out)))  # past a gap in the tail
            return out
        return self._read_records("seq > ? ORDER BY seq LIMIT ?", (seq, limit))

    def _head(self) -> int:
        """Highest seq committed (from the tail when it holds it, else SQLite)."""
        with self._tail_lock:
            if self._tail_order:
                return self._tail_order[-1]
        return self.last_seq()

    def _read_records(self, where: str, params: tuple[object, ...]) -> list[JournalRecord]:
        """Records matching ``where``, in seq order, fetched as one JSON row (one statement step)."""
        with self._read_lock:
            row = self._read.execute(
                "SELECT json_group_array(json_array(seq, workspace, session_id, event, epoch_ms,"
                " fingerprint, base_id, CAST(data AS TEXT), created_by, base_key)) FROM ("
                "SELECT seq, workspace, session_id, event, epoch_ms, fingerprint, base_id, data, created_by,"
                f" base_key FROM events WHERE {where})",
                params,
            ).fetchone()
        items = _rows_decoder.decode(row[0]) if row and row[0] else []
        items.sort(key=_first)  # already in order in practice; aggregate order is not a promise
        return [
            JournalRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7].encode(), r[8], r[9]) for r in items
        ]

    def read_session(self, workspace: str, session_id: str, before_seq: int) -> list[JournalRecord]:
        """One session's records with ``seq < before_seq`` in seq order (indexed; semantic layers)."""
        return self._read_records(
            f"{_SESSION} AND seq < ? ORDER BY seq", (*_session_params(workspace, session_id), before_seq)
        )

    def last_seq(self) -> int:
        with self._read_lock:
            row = self._read.execute("SELECT max(seq) FROM events").fetchone()
        return int(row[0] or 0)

    def base_keys(self) -> Iterator[int]:
        """Every row's base-id key, read from the ``events_base_content`` index (in key order,
        repeats included) in pages of 50,000. O(N); ~0.6 s of CPU per million rows (with the filter fill)."""
        after: int | None = None
        while True:
            with self._read_lock:
                if after is None:
                    page = self._read.execute("SELECT base_key FROM events ORDER BY base_key LIMIT 50000")
                else:
                    page = self._read.execute(
                        "SELECT base_key FROM events WHERE base_key > ? ORDER BY base_key LIMIT 50000",
                        (after,),
                    )
                keys = [key for (key,) in page]
            if not keys:
                return
            yield from keys
            after = keys[-1]

    def collision_groups(self, workspace: str, events: Collection[tuple[str, int]]) -> dict[str, list[str]]:
        """Sorted fingerprints of every base id among ``events`` (``(base_id, epoch_ms)``) shared
        by distinct events.

        One indexed ``GROUP BY`` on the base-id key (`_base_key`) per 5,000 ids (collisions are
        rare, so the answer is usually empty); key hits are confirmed on the exact workspace and id.
        """
        unique = set(events)
        ids = {base_id for base_id, _ in unique}
        keys = list({_base_key(workspace, base_id, ms) for base_id, ms in unique})  # ids may share one
        out: dict[str, list[str]] = {}
        with self._read_lock:
            for start in range(0, len(keys), 5000):
                chunk = keys[start : start + 5000]
                marks = ",".join("?" * len(chunk))
                rows = self._read.execute(
                    "SELECT workspace, base_id, fingerprint FROM events WHERE base_key IN ("
                    f" SELECT base_key FROM events WHERE base_key IN ({marks})"
                    " GROUP BY base_key HAVING count(*) > 1) ORDER BY fingerprint",
                    chunk,
                ).fetchall()
                for ws, base_id, fingerprint in rows:
                    if ws == workspace and base_id in ids:
                        out.setdefault(base_id, []).append(fingerprint)
        return {base_id: fps for base_id, fps in out.items() if len(fps) > 1}

    def dead_letter(self, seq: int, error: str) -> None:
        with self._write_lock:
            self._write.execute(
                "INSERT OR REPLACE INTO dead_letters (seq, error, ts) VALUES (?, ?, ?)",
                (seq, error, time.time()),
            )

    def dead_letters(self, workspaces: frozenset[str] | None = None) -> list[DeadLetterGroup]:
        with self._read_lock:
            rows = self._read.execute(
                "SELECT e.session_id, e.workspace, count(*), max(d.ts),"
                " (SELECT d2.error FROM dead_letters d2 JOIN events e2 ON e2.seq = d2.seq"
                "  WHERE e2.session_id = e.session_id AND e2.workspace = e.workspace ORDER BY d2.ts DESC LIMIT 1)"
                " FROM dead_letters d JOIN events e ON e.seq = d.seq GROUP BY e.session_id, e.workspace"
                " ORDER BY e.session_id"
            ).fetchall()
        return [
            DeadLetterGroup(key=key, workspace=ws, item_count=n, last_error=err or "", last_ts=ts)
            for key, ws, n, ts, err in rows
            if workspaces is None or ws in workspaces
        ]

    def _dead_seqs(self, key: str, workspaces: frozenset[str] | None) -> list[int]:
        rows = self._write.execute(
            "SELECT d.seq, e.workspace FROM dead_letters d JOIN events e ON e.seq = d.seq"
            " WHERE e.session_id = ? ORDER BY d.seq",
            (key,),
        ).fetchall()
        return [seq for seq, ws in rows if workspaces is None or ws in workspaces]

    def replay_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int:
        with self._write_lock:
            self._forget_tail()  # seqs move: the tail would name rows that are no longer there
            self._write.execute("BEGIN IMMEDIATE")
            try:
                seqs = self._dead_seqs(key, workspaces)
                for seq in seqs:
                    self._write.execute(
                        "UPDATE events SET seq = (SELECT max(seq) FROM events) + 1 WHERE seq = ?", (seq,)
                    )
                    self._write.execute("DELETE FROM dead_letters WHERE seq = ?", (seq,))
                self._write.execute("COMMIT")
            except BaseException:
                self._write.execute("ROLLBACK")
                raise
        return len(seqs)

    def purge_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int:
        with self._write_lock:
            seqs = self._dead_seqs(key, workspaces)
            self._write.executemany("DELETE FROM dead_letters WHERE seq = ?", [(s,) for s in seqs])
        return len(seqs)

    def close(self) -> None:
        with self._write_lock, self._read_lock:
            self._write.close()
            self._read.close()


class MemoryJournal:
    """In-memory `Journal` with the same semantics (tests and ephemeral services)."""

    def __init__(self) -> None:
        self.journal_id = uuid.uuid4().hex
        self._records: dict[int, JournalRecord] = {}
        self._order: list[int] = []  # seqs in increasing order (replay appends a bigger seq)
        self._keys: set[tuple[str, str, str]] = set()  # (workspace, session_id, idempotency key)
        self._forgotten_keys: set[tuple[str, str]] = set()  # (workspace, key): tombstones
        self._fingerprints: set[tuple[str, str]] = set()
        self._bases: dict[tuple[str, str], set[str]] = {}
        self._dead: dict[int, tuple[str, float]] = {}
        self._idem_of: dict[int, str] = {}  # seq -> idempotency key (to forget without a tombstone)
        self._received: dict[int, int] = {}  # seq -> received_ms
        self._next = 1
        self._lock = threading.Lock()

    def append(self, envelopes: Sequence[Envelope], created_by: str | None = None) -> list[AppendResult]:
        results: list[AppendResult] = []
        now = now_ms()
        with self._lock:
            for env in envelopes:
                fp_key = (env.workspace, env.fingerprint)
                idem = (
                    (env.workspace, env.session_id, env.idempotency_key)
                    if env.idempotency_key is not None
                    else None
                )
                if fp_key in self._fingerprints or (
                    idem is not None
                    and (idem in self._keys or (env.workspace, env.idempotency_key) in self._forgotten_keys)
                ):
                    results.append(AppendResult("duplicate"))
                    continue
                self._fingerprints.add(fp_key)
                if idem is not None:
                    self._keys.add(idem)
                self._bases.setdefault((env.workspace, env.base_id), set()).add(env.fingerprint)
                seq = self._next
                self._next += 1
                if env.idempotency_key is not None:
                    self._idem_of[seq] = env.idempotency_key
                self._received[seq] = now
                self._records[seq] = JournalRecord(
                    seq,
                    env.workspace,
                    env.session_id,
                    env.event,
                    env.epoch_ms,
                    env.fingerprint,
                    env.base_id,
                    env.data_json or _json.encode(env.data),
                    created_by,
                    _base_key(env.workspace, env.base_id, env.epoch_ms),
                )
                self._order.append(seq)
                results.append(AppendResult("queued", seq))
        return results

    def read_after(self, seq: int, limit: int) -> list[JournalRecord]:
        """O(log N + limit)."""
        with self._lock:
            start = bisect.bisect_right(self._order, seq)
            return [self._records[s] for s in self._order[start : start + limit]]

    def read_session(self, workspace: str, session_id: str, before_seq: int) -> list[JournalRecord]:
        """One session's records with ``seq < before_seq`` in seq order."""
        with self._lock:
            return [
                r
                for s, r in sorted(self._records.items())
                if s < before_seq and r.workspace == workspace and r.session_id == session_id
            ]

    def last_seq(self) -> int:
        with self._lock:
            return max(self._records, default=0)

    def base_keys(self) -> Iterator[int]:
        with self._lock:
            keys = [
                r.base_key if r.base_key is not None else _base_key(r.workspace, r.base_id, r.epoch_ms)
                for r in self._records.values()
            ]
        return iter(keys)

    def collision_groups(self, workspace: str, events: Collection[tuple[str, int]]) -> dict[str, list[str]]:
        with self._lock:
            out = {}
            for base_id in {base_id for base_id, _ in events}:
                fps = self._bases.get((workspace, base_id), set())
                if len(fps) > 1:
                    out[base_id] = sorted(fps)
            return out

    def dead_letter(self, seq: int, error: str) -> None:
        with self._lock:
            self._dead[seq] = (error, time.time())

    def dead_letters(self, workspaces: frozenset[str] | None = None) -> list[DeadLetterGroup]:
        with self._lock:
            groups: dict[tuple[str, str], list[tuple[float, str]]] = {}
            for seq, (error, ts) in self._dead.items():
                record = self._records[seq]
                if workspaces is None or record.workspace in workspaces:
                    groups.setdefault((record.session_id, record.workspace), []).append((ts, error))
            return [
                DeadLetterGroup(key, ws, len(items), max(items)[1], max(items)[0])
                for (key, ws), items in sorted(groups.items())
            ]

    def _dead_seqs(self, key: str, workspaces: frozenset[str] | None) -> list[int]:
        return sorted(
            seq
            for seq in self._dead
            if self._records[seq].session_id == key
            and (workspaces is None or self._records[seq].workspace in workspaces)
        )

    def replay_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int:
        with self._lock:
            seqs = self._dead_seqs(key, workspaces)
            for seq in seqs:
                record = self._records.pop(seq)
                del self._dead[seq]
                self._order.remove(seq)
                new_seq = self._next
                self._next += 1
                if seq in self._idem_of:
                    self._idem_of[new_seq] = self._idem_of.pop(seq)
                self._received[new_seq] = self._received.pop(seq)
                self._records[new_seq] = msgspec.structs.replace(record, seq=new_seq)
                self._order.append(new_seq)
            return len(seqs)

    def purge_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int:
        with self._lock:
            seqs = self._dead_seqs(key, workspaces)
            for seq in seqs:
                del self._dead[seq]
            return len(seqs)

    def forget_session(
        self, workspace: str, session_id: str, *, tombstone: bool = True, idle_before_ms: int | None = None
    ) -> int:
        """Drop the records; their fingerprints and keys stay in the dedupe sets (tombstones)
        unless ``tombstone`` is false."""
        with self._lock:
            gone = [
                seq
                for seq, r in self._records.items()
                if r.workspace == workspace and r.session_id == session_id
            ]
            if (
                idle_before_ms is not None
                and max((self._received[s] for s in gone), default=idle_before_ms) >= idle_before_ms
            ):
                return 0
            for seq in gone:
                record = self._records.pop(seq)
                self._dead.pop(seq, None)
                fingerprints = self._bases.get((workspace, record.base_id))
                if fingerprints is not None:
                    fingerprints.discard(record.fingerprint)
                key = self._idem_of.get(seq)
                if key is not None:
                    self._keys.discard((workspace, session_id, key))
                    if tombstone:  # as SQLite's tombstones: refused in every session of the workspace
                        self._forgotten_keys.add((workspace, key))
                if not tombstone:
                    self._fingerprints.discard((workspace, record.fingerprint))
                self._idem_of.pop(seq, None)
                self._received.pop(seq, None)
            if gone:
                dropped = set(gone)
                self._order = [s for s in self._order if s not in dropped]
            return len(gone)

    def idle_sessions(self, received_before_ms: int, workspace: str | None = None) -> list[tuple[str, str]]:
        with self._lock:
            newest: dict[tuple[str, str], int] = {}
            for seq, record in self._records.items():
                if workspace is None or record.workspace == workspace:
                    key = (record.workspace, record.session_id)
                    newest[key] = max(newest.get(key, 0), self._received[seq])
            return sorted(key for key, ms in newest.items() if ms < received_before_ms)

    def session_count(self, workspace: str, session_id: str) -> int:
        with self._lock:
            return sum(
                1 for r in self._records.values() if r.workspace == workspace and r.session_id == session_id
            )

    def recent(self, limit: int) -> list[RecentRecord]:
        with self._lock:
            newest = sorted(self._records, reverse=True)[:limit]
            return [
                RecentRecord(
                    seq,
                    self._records[seq].workspace,
                    self._records[seq].session_id,
                    self._records[seq].event,
                    self._received[seq],
                    self._dead[seq][0] if seq in self._dead else None,
                )
                for seq in newest
            ]

    def dead_letters_since(self, ts: float) -> int:
        with self._lock:
            return sum(1 for _, when in self._dead.values() if when >= ts)

    def read_workspace(
        self, workspace: str, after_seq: int, upto_seq: int, limit: int
    ) -> list[JournalRecord]:
        with self._lock:
            start = bisect.bisect_right(self._order, after_seq)
            out: list[JournalRecord] = []
            for seq in self._order[start:]:
                if seq > upto_seq or len(out) >= limit:
                    break
                record = self._records[seq]
                if record.workspace == workspace and seq not in self._dead:
                    out.append(record)
            return out

    def close(self) -> None:
        return None
