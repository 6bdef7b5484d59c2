"""`SqliteJournal`: the ingest journal in one SQLite file (WAL); the invariants every journal
keeps are in `convograph.intelligence.journal`."""

from __future__ import annotations

import collections
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from convograph.intelligence import journal_base
from convograph.intelligence.envelope import Envelope
from convograph.intelligence.journal_base import (
    AppendResult,
    DeadLetterGroup,
    JournalRecord,
    RecentRecord,
    digest16,
    event_base_key,
    session_index_key,
)
from convograph.intelligence.journal_schema import INDEXES, MIGRATIONS, SCHEMA, SCHEMA_VERSION

__all__ = ["SqliteJournal"]

_json = msgspec.json.Encoder()
log = logging.getLogger("convograph.intelligence.journal")

_PAGE_SIZE = 8192
"""Page size of a new journal file (SQLite's default is 4,096; existing files keep theirs)."""


_rows_decoder = msgspec.json.Decoder(list[list[Any]])


def _first(row: list[Any]) -> Any:
    return row[0]


_SESSION = "session_key = ? AND workspace = ? AND session_id = ?"
"""One session's rows, through ``events_session_keys`` (parameters: `_session_params`)."""


def _session_params(workspace: str, session_id: str) -> tuple[int, str, str]:
    return (session_index_key(workspace, session_id), workspace, session_id)


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
        self._write.create_function("convograph_base_key", 3, event_base_key, deterministic=True)
        self._write.create_function("convograph_session_key", 2, session_index_key, deterministic=True)
        self._write.executescript(SCHEMA)
        self._read = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._read.execute("PRAGMA busy_timeout=10000")
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        version = self._write.execute("SELECT v FROM meta WHERE k = 'schema'").fetchone()
        if version is None:
            self._write.executescript(INDEXES)
            self._write.execute("INSERT INTO meta (k, v) VALUES ('schema', ?)", (SCHEMA_VERSION,))
        elif version[0] in MIGRATIONS:
            # from schema 4 and older it rewrites every row (~10 s per million events), from 5 it
            # builds an index: say why the start is slow
            log.info("migrating %s from journal schema %s to %s", self.path, version[0], SCHEMA_VERSION)
            self._write.executescript(
                "BEGIN IMMEDIATE;" + MIGRATIONS[version[0]] + INDEXES
                + f"UPDATE meta SET v = '{SCHEMA_VERSION}' WHERE k = 'schema'; COMMIT;"
            )  # fmt: skip
        elif version[0] != SCHEMA_VERSION:
            raise RuntimeError(
                f"{self.path}: journal schema {version[0]}, this version reads {SCHEMA_VERSION}"
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
        now = journal_base.now_ms()
        sessions: dict[tuple[str, str], int] = {}  # a batch holds few sessions: one digest each
        rows = []
        for env in envelopes:
            session = (env.workspace, env.session_id)
            session_key = sessions.get(session)
            if session_key is None:
                session_key = sessions[session] = session_index_key(*session)
            rows.append((
                env.workspace, env.session_id, env.event, env.epoch_ms, env.fingerprint, env.base_id, created_by, now,
                env.data_json or _json.encode(env.data), digest16(env.workspace, env.fingerprint),
                None if env.idempotency_key is None else digest16(env.workspace, env.idempotency_key),
                event_base_key(env.workspace, env.base_id, env.epoch_ms), session_key,
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

        One indexed ``GROUP BY`` on the base-id key (`event_base_key`) per 5,000 ids (collisions are
        rare, so the answer is usually empty); key hits are confirmed on the exact workspace and id.
        """
        unique = set(events)
        ids = {base_id for base_id, _ in unique}
        keys = list({event_base_key(workspace, base_id, ms) for base_id, ms in unique})  # ids may share one
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
