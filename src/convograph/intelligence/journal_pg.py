"""`PostgresJournal`: the ingest journal in PostgreSQL, shared by every `convograph serve` instance.

Same protocol and semantics as `SqliteJournal` (`convograph.intelligence.journal`): durable
before the 202, deduplicated by idempotency key per session and by content per workspace (the
same 128-bit digests, in unique indexes), tombstones for forgotten sessions, dead letters as
rows, collision groups by base-id key. Tables are prefixed ``ci_`` and live in the event log's
database.

Seq order across processes. An append is **one statement** (autocommit): a data-modifying CTE
bumps the single row of ``ci_head`` by the batch size (the row lock serialises appends from every
process until the commit) and inserts the rows at ``head+1 ..`` with ``ON CONFLICT DO NOTHING``
(duplicates and tombstoned rows leave gaps, which the protocol allows). Because the head row stays
locked until the transaction's commit is visible, a transaction that takes seqs after another
commits after it: a reader that saw seq ``s`` has already been able to see every seq below ``s``,
so the applier's "read ``seq > cursor``" never skips a record another instance was still
committing. Cost: appends from all instances commit one after another (one short critical
section, the batch's insert and commit, per append; single-envelope POSTs are group-committed per
instance, see `convograph.intelligence.http`).

Errors reaching PostgreSQL raise `JournalUnavailable` (the HTTP routes answer 503; nothing of the
call was stored unless the commit itself was cut off, and a retry is then deduplicated).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from typing import Any, Literal

import msgspec
import psycopg
import psycopg_pool

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

__all__ = ["JournalUnavailable", "PostgresJournal"]

_json = msgspec.json.Encoder()
log = logging.getLogger("convograph.intelligence.journal")

_LOCK_KEY = 0x63695F6A6E6C  # advisory lock id for creating the tables ("ci_jnl")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ci_meta (k text PRIMARY KEY, v text NOT NULL);
CREATE TABLE IF NOT EXISTS ci_head (one boolean PRIMARY KEY DEFAULT true CHECK (one), seq bigint NOT NULL);
INSERT INTO ci_head (one, seq) VALUES (true, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS ci_events (
    seq bigint PRIMARY KEY,
    workspace text NOT NULL,
    session_id text NOT NULL,
    event text NOT NULL,
    epoch_ms bigint NOT NULL,
    fingerprint text NOT NULL,
    base_id text NOT NULL,
    created_by text,
    received_ms bigint NOT NULL,
    data bytea NOT NULL,
    content_key bytea NOT NULL,
    idem_key bytea,
    base_key bigint NOT NULL,
    session_key bigint NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS ci_events_base_content ON ci_events (base_key, content_key);
CREATE UNIQUE INDEX IF NOT EXISTS ci_events_session_keys ON ci_events (session_key, idem_key);
CREATE TABLE IF NOT EXISTS ci_dead_letters (seq bigint PRIMARY KEY, error text NOT NULL, ts double precision NOT NULL);
CREATE INDEX IF NOT EXISTS ci_dead_letters_ts ON ci_dead_letters (ts);
CREATE TABLE IF NOT EXISTS ci_feed_cursors (conversation_id text PRIMARY KEY, seq bigint NOT NULL);
CREATE TABLE IF NOT EXISTS ci_tombstones (content_key bytea PRIMARY KEY, idem_key bytea);
CREATE INDEX IF NOT EXISTS ci_tombstones_idem ON ci_tombstones (idem_key) WHERE idem_key IS NOT NULL;
"""
# Unique indexes hold any number of NULLs (NULLS DISTINCT, the default), so a row without an
# idempotency key conflicts with none, as in SQLite.

_COLUMNS = "seq, workspace, session_id, event, epoch_ms, fingerprint, base_id, data, created_by, base_key"
_APPEND = """
WITH head AS (UPDATE ci_head SET seq = seq + %(n)s RETURNING seq - %(n)s AS base)
INSERT INTO ci_events (seq, workspace, session_id, event, epoch_ms, fingerprint, base_id, created_by,
                       received_ms, data, content_key, idem_key, base_key, session_key)
SELECT head.base + u.ord, u.workspace, u.session_id, u.event, u.epoch_ms, u.fingerprint, u.base_id,
       %(created_by)s, %(now)s, u.data, u.content_key, u.idem_key, u.base_key, u.session_key
FROM head, unnest(%(workspace)s::text[], %(session_id)s::text[], %(event)s::text[], %(epoch_ms)s::int8[],
                  %(fingerprint)s::text[], %(base_id)s::text[], %(data)s::bytea[], %(content_key)s::bytea[],
                  %(idem_key)s::bytea[], %(base_key)s::int8[], %(session_key)s::int8[])
     WITH ORDINALITY AS u(workspace, session_id, event, epoch_ms, fingerprint, base_id, data, content_key,
                          idem_key, base_key, session_key, ord)
WHERE NOT EXISTS (SELECT 1 FROM ci_tombstones t WHERE t.content_key = u.content_key)
  AND (u.idem_key IS NULL OR NOT EXISTS (SELECT 1 FROM ci_tombstones t WHERE t.idem_key = u.idem_key))
ON CONFLICT DO NOTHING
RETURNING seq, (SELECT base FROM head)
"""
"""Parameters: `PostgresJournal._append_params`. Returns ``(seq, base)`` of every row inserted: its
input position is ``seq - base`` (1-based; a row repeating an earlier one of the same batch
conflicts with it and is left out)."""

_SESSION = "session_key = %s AND workspace = %s AND session_id = %s"


class JournalUnavailable(Exception):
    """PostgreSQL could not be reached (or the connection broke) during a journal call."""


def _session_params(workspace: str, session_id: str) -> tuple[int, str, str]:
    return (session_index_key(workspace, session_id), workspace, session_id)


class PostgresJournal:
    """`Journal` in PostgreSQL; see the module docstring. Thread-safe (a connection pool)."""

    def __init__(
        self,
        conninfo: str,
        *,
        pool_max: int = 8,
        connect_timeout: float = 5.0,
        synchronous: Literal["normal", "full"] = "full",
    ) -> None:
        self.conninfo = conninfo
        options = {} if synchronous == "full" else {"options": "-c synchronous_commit=off"}
        self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_max,
            open=False,
            timeout=connect_timeout,
            kwargs={"autocommit": True, "connect_timeout": max(1, round(connect_timeout)), **options},
            check=psycopg_pool.ConnectionPool.check_connection,
            name="convograph-ci-journal",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise JournalUnavailable(f"cannot reach PostgreSQL for the journal: {exc}") from None
        with self._conn() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute(_SCHEMA)
            conn.execute(
                "INSERT INTO ci_meta (k, v) VALUES ('journal_id', %s) ON CONFLICT DO NOTHING",
                (uuid.uuid4().hex,),
            )
            row = conn.execute("SELECT v FROM ci_meta WHERE k = 'journal_id'").fetchone()
        assert row is not None
        self.journal_id: str = row[0]

    @contextlib.contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled autocommit connection; connection failures become `JournalUnavailable`."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise JournalUnavailable(f"PostgreSQL journal: {' '.join(str(exc).split())}") from None

    def _records(self, where: str, params: Sequence[object]) -> list[JournalRecord]:
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM ci_events WHERE {where}", params, binary=True
            ).fetchall()
        return [JournalRecord(*row) for row in rows]

    # -- append ----------------------------------------------------------------------------------
    def append(self, envelopes: Sequence[Envelope], created_by: str | None = None) -> list[AppendResult]:
        """One statement (see the module docstring). O(n log N) in the indexes."""
        if not envelopes:
            return []
        with self._conn() as conn:
            rows = conn.execute(_APPEND, self._append_params(envelopes, created_by)).fetchall()
        seqs = {seq - base: seq for seq, base in rows}
        return [
            AppendResult("queued", seqs[position]) if position in seqs else AppendResult("duplicate")
            for position in range(1, len(envelopes) + 1)
        ]

    @staticmethod
    def _append_params(envelopes: Sequence[Envelope], created_by: str | None) -> dict[str, Any]:
        sessions: dict[tuple[str, str], int] = {}
        columns: dict[str, list[Any]] = {
            name: []
            for name in (
                "workspace", "session_id", "event", "epoch_ms", "fingerprint", "base_id", "data",
                "content_key", "idem_key", "base_key", "session_key",
            )
        }  # fmt: skip
        for env in envelopes:
            session = (env.workspace, env.session_id)
            key = sessions.get(session)
            if key is None:
                key = sessions[session] = session_index_key(*session)
            columns["workspace"].append(env.workspace)
            columns["session_id"].append(env.session_id)
            columns["event"].append(env.event)
            columns["epoch_ms"].append(env.epoch_ms)
            columns["fingerprint"].append(env.fingerprint)
            columns["base_id"].append(env.base_id)
            columns["data"].append(env.data_json or _json.encode(env.data))
            columns["content_key"].append(digest16(env.workspace, env.fingerprint))
            columns["idem_key"].append(
                None if env.idempotency_key is None else digest16(env.workspace, env.idempotency_key)
            )
            columns["base_key"].append(event_base_key(env.workspace, env.base_id, env.epoch_ms))
            columns["session_key"].append(key)
        return {"n": len(envelopes), "created_by": created_by, "now": journal_base.now_ms(), **columns}

    # -- reads -----------------------------------------------------------------------------------
    def read_after(self, seq: int, limit: int) -> list[JournalRecord]:
        """Up to ``limit`` records after ``seq`` in seq order (a primary-key range). O(limit)."""
        return self._records("seq > %s ORDER BY seq LIMIT %s", (seq, limit))

    def read_session(self, workspace: str, session_id: str, before_seq: int) -> list[JournalRecord]:
        """One session's records with ``seq < before_seq`` in seq order (``ci_events_session_keys``)."""
        return self._records(
            f"{_SESSION} AND seq < %s ORDER BY seq", (*_session_params(workspace, session_id), before_seq)
        )

    def read_workspace(
        self, workspace: str, after_seq: int, upto_seq: int, limit: int
    ) -> list[JournalRecord]:
        return self._records(
            "workspace = %s AND seq > %s AND seq <= %s"
            " AND NOT EXISTS (SELECT 1 FROM ci_dead_letters d WHERE d.seq = ci_events.seq)"
            " ORDER BY seq LIMIT %s",
            (workspace, after_seq, upto_seq, limit),
        )

    def last_seq(self) -> int:
        """The highest committed seq. O(log N)."""
        with self._conn() as conn:
            row = conn.execute("SELECT max(seq) FROM ci_events").fetchone()
        return int(row[0] or 0) if row else 0

    def base_keys(self) -> Iterator[int]:
        """Every row's base-id key in key order, in pages of 50,000 (an index-only scan). O(N)."""
        after: int | None = None
        while True:
            with self._conn() as conn:
                if after is None:
                    page = conn.execute(
                        "SELECT base_key FROM ci_events ORDER BY base_key LIMIT 50000"
                    ).fetchall()
                else:
                    page = conn.execute(
                        "SELECT base_key FROM ci_events WHERE base_key > %s ORDER BY base_key LIMIT 50000",
                        (after,),
                    ).fetchall()
            keys = [key for (key,) in page]
            if not keys:
                return
            yield from keys
            after = keys[-1]

    def collision_groups(self, workspace: str, events: Collection[tuple[str, int]]) -> dict[str, list[str]]:
        """As `SqliteJournal.collision_groups`: one grouped, indexed query per 5,000 keys."""
        unique = set(events)
        ids = {base_id for base_id, _ in unique}
        keys = list({event_base_key(workspace, base_id, ms) for base_id, ms in unique})
        out: dict[str, list[str]] = {}
        with self._conn() as conn:
            for start in range(0, len(keys), 5000):
                rows = conn.execute(
                    "SELECT workspace, base_id, fingerprint FROM ci_events WHERE base_key IN ("
                    " SELECT base_key FROM ci_events WHERE base_key = ANY(%s::int8[])"
                    " GROUP BY base_key HAVING count(*) > 1) ORDER BY fingerprint",
                    (keys[start : start + 5000],),
                ).fetchall()
                for ws, base_id, fingerprint in rows:
                    if ws == workspace and base_id in ids:
                        out.setdefault(base_id, []).append(fingerprint)
        return {base_id: fps for base_id, fps in out.items() if len(fps) > 1}

    def session_count(self, workspace: str, session_id: str) -> int:
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT count(*) FROM ci_events WHERE {_SESSION}", _session_params(workspace, session_id)
            ).fetchone()
        return int(row[0]) if row else 0

    def idle_sessions(self, received_before_ms: int, workspace: str | None = None) -> list[tuple[str, str]]:
        where, params = ("WHERE workspace = %s", (workspace,)) if workspace is not None else ("", ())
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT workspace, session_id FROM ci_events {where} GROUP BY workspace, session_id"
                " HAVING max(received_ms) < %s ORDER BY workspace, session_id",
                (*params, received_before_ms),
            ).fetchall()
        return [(ws, sid) for ws, sid in rows]

    def recent(self, limit: int) -> list[RecentRecord]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT e.seq, e.workspace, e.session_id, e.event, e.received_ms, d.error FROM ci_events e"
                " LEFT JOIN ci_dead_letters d ON d.seq = e.seq ORDER BY e.seq DESC LIMIT %s",
                (limit,),
            ).fetchall()
        return [RecentRecord(*row) for row in rows]

    # -- dead letters ------------------------------------------------------------------------------
    def dead_letter(self, seq: int, error: str) -> None:
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO ci_dead_letters (seq, error, ts) VALUES (%s, %s, %s)"
                " ON CONFLICT (seq) DO UPDATE SET error = excluded.error, ts = excluded.ts",
                (seq, error, time.time()),
            )

    def dead_letters(self, workspaces: frozenset[str] | None = None) -> list[DeadLetterGroup]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT e.session_id, e.workspace, count(*), max(d.ts),"
                " (array_agg(d.error ORDER BY d.ts DESC))[1]"
                " FROM ci_dead_letters d JOIN ci_events e ON e.seq = d.seq"
                " GROUP BY e.session_id, e.workspace ORDER BY e.session_id"
            ).fetchall()
        return [
            DeadLetterGroup(key=key, workspace=ws, item_count=n, last_error=err or "", last_ts=ts)
            for key, ws, n, ts, err in rows
            if workspaces is None or ws in workspaces
        ]

    def dead_letters_since(self, ts: float) -> int:
        with self._conn() as conn:
            row = conn.execute("SELECT count(*) FROM ci_dead_letters WHERE ts >= %s", (ts,)).fetchone()
        return int(row[0]) if row else 0

    @staticmethod
    def _dead_seqs(conn: psycopg.Connection[Any], key: str, workspaces: frozenset[str] | None) -> list[int]:
        rows = conn.execute(
            "SELECT d.seq, e.workspace FROM ci_dead_letters d JOIN ci_events e ON e.seq = d.seq"
            " WHERE e.session_id = %s ORDER BY d.seq",
            (key,),
        ).fetchall()
        return [seq for seq, ws in rows if workspaces is None or ws in workspaces]

    def replay_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int:
        """Move the dead letters' rows to the journal tail (new seqs taken from ``ci_head``, whose
        row lock orders this with every append), in one transaction."""
        with self._conn() as conn, conn.transaction():
            seqs = self._dead_seqs(conn, key, workspaces)
            if seqs:
                row = conn.execute("UPDATE ci_head SET seq = seq + %s RETURNING seq", (len(seqs),)).fetchone()
                assert row is not None
                first = int(row[0]) - len(seqs) + 1
                for offset, seq in enumerate(seqs):
                    conn.execute("UPDATE ci_events SET seq = %s WHERE seq = %s", (first + offset, seq))
                conn.execute("DELETE FROM ci_dead_letters WHERE seq = ANY(%s::int8[])", (seqs,))
        return len(seqs)

    def purge_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int:
        with self._conn() as conn, conn.transaction():
            seqs = self._dead_seqs(conn, key, workspaces)
            conn.execute("DELETE FROM ci_dead_letters WHERE seq = ANY(%s::int8[])", (seqs,))
        return len(seqs)

    # -- forgetting --------------------------------------------------------------------------------
    def forget_session(
        self, workspace: str, session_id: str, *, tombstone: bool = True, idle_before_ms: int | None = None
    ) -> int:
        """As `SqliteJournal.forget_session`, in one transaction. O(session rows · log N)."""
        params = _session_params(workspace, session_id)
        selected = f"FROM ci_events WHERE {_SESSION}"
        with self._conn() as conn, conn.transaction():
            if idle_before_ms is not None:
                row = conn.execute(f"SELECT max(received_ms) {selected}", params).fetchone()
                if row is None or row[0] is None or row[0] >= idle_before_ms:
                    return 0
            if tombstone:
                conn.execute(
                    f"INSERT INTO ci_tombstones (content_key, idem_key) SELECT content_key, idem_key {selected}"
                    " ON CONFLICT DO NOTHING",
                    params,
                )
            conn.execute(f"DELETE FROM ci_dead_letters WHERE seq IN (SELECT seq {selected})", params)
            cur = conn.execute(f"DELETE {selected}", params)
            return cur.rowcount

    # -- the server's conversation feed (`convograph.server.feeder`) ----------------------------------
    def feed_cursors(self, conversation_ids: Collection[str] | None = None) -> dict[str, int]:
        """How far each conversation's events were fed into this journal (all, or those named)."""
        with self._conn() as conn:
            if conversation_ids is None:
                rows = conn.execute("SELECT conversation_id, seq FROM ci_feed_cursors").fetchall()
            else:
                rows = conn.execute(
                    "SELECT conversation_id, seq FROM ci_feed_cursors WHERE conversation_id = ANY(%s)",
                    (list(conversation_ids),),
                ).fetchall()
        return {cid: int(seq) for cid, seq in rows}

    def save_feed_cursors(self, cursors: dict[str, int]) -> None:
        """Move cursors forward (never back: another instance may have fed further)."""
        if not cursors:
            return
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO ci_feed_cursors (conversation_id, seq) SELECT * FROM unnest(%s::text[], %s::int8[])"
                " ON CONFLICT (conversation_id) DO UPDATE SET seq = greatest(ci_feed_cursors.seq, excluded.seq)",
                (list(cursors), list(cursors.values())),
            )

    def drop_feed_cursor(self, conversation_id: str) -> None:
        """The conversation was deleted: its id may start again from seq 1."""
        with self._conn() as conn:
            conn.execute("DELETE FROM ci_feed_cursors WHERE conversation_id = %s", (conversation_id,))

    def close(self) -> None:
        self._pool.close()
