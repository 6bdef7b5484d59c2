"""`PostgresBlobStore`: the content-addressed blob store in PostgreSQL, shared by every instance.

The same model as `LocalBlobStore` (`convograph.intelligence.blobs`): ``ci_blob_objects (sha256,
content)`` written once per distinct content, ``ci_blob_refs (session, key) -> sha256, size,
workspaces`` (``session`` is sha256 of the session id). A blob put through one instance is listed
and read by every other.

Across processes an object may only be deleted when no ref names it, and a put must not lose the
object it is naming to a concurrent forget. Both take a transaction-level advisory lock per object
(`_object_lock`, in sha256 order when a call touches several), and the "is it still named?"
check runs after the lock is held, in a statement of its own (READ COMMITTED: it sees every ref
committed before the lock was granted). Deadlock-free: locks are always taken in sha256 order.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Collection, Iterator
from typing import Any

import psycopg
import psycopg_pool

from convograph.intelligence.blobs import BlobRef, _visible, blob_uri
from convograph.intelligence.journal_pg import JournalUnavailable

__all__ = ["PostgresBlobStore"]

_LOCK_KEY = 0x63695F626C6F  # advisory lock id for creating the tables ("ci_blo")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS ci_blob_objects (sha256 text PRIMARY KEY, content bytea NOT NULL);
CREATE TABLE IF NOT EXISTS ci_blob_refs (
    session text NOT NULL, key text NOT NULL, sha256 text NOT NULL, size bigint NOT NULL,
    workspaces text[] NOT NULL, PRIMARY KEY (session, key)
);
CREATE INDEX IF NOT EXISTS ci_blob_refs_sha256 ON ci_blob_refs (sha256);
"""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _object_lock(conn: psycopg.Connection[Any], shas: Collection[str]) -> None:
    """Hold the advisory lock of each object until the transaction ends, in sha256 order."""
    for sha in sorted(set(shas)):
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (int(sha[:15], 16),))


class PostgresBlobStore:
    """`BlobStore` in PostgreSQL (see the module docstring). Thread-safe (a connection pool)."""

    def __init__(self, conninfo: str, *, pool_max: int = 4, connect_timeout: float = 5.0) -> None:
        self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_max,
            open=False,
            timeout=connect_timeout,
            kwargs={"autocommit": True, "connect_timeout": max(1, round(connect_timeout))},
            check=psycopg_pool.ConnectionPool.check_connection,
            name="convograph-ci-blobs",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise JournalUnavailable(f"cannot reach PostgreSQL for the blob store: {exc}") from None
        with self._conn() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute(_SCHEMA)

    @contextlib.contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise JournalUnavailable(f"PostgreSQL blob store: {' '.join(str(exc).split())}") from None

    def put(self, workspace: str, session_id: str, key: str, content: bytes) -> BlobRef:
        """Store ``content`` once per sha256 and name it ``(session_id, key)`` for ``workspace``;
        a key given other content lets its previous object go when nothing else names it."""
        sha = hashlib.sha256(content).hexdigest()
        session = _digest(session_id)
        with self._conn() as conn, conn.transaction():
            row = conn.execute(
                "SELECT sha256, workspaces FROM ci_blob_refs WHERE session = %s AND key = %s FOR UPDATE",
                (session, key),
            ).fetchone()
            if row is None or row[0] != sha or workspace not in row[1]:
                previous = row[0] if row is not None and row[0] != sha else None
                _object_lock(conn, [sha] if previous is None else [sha, previous])
                conn.execute(
                    "INSERT INTO ci_blob_objects (sha256, content) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    (sha, content),
                )
                names = sorted({*(row[1] if row is not None else ()), workspace})
                conn.execute(
                    "INSERT INTO ci_blob_refs (session, key, sha256, size, workspaces) VALUES (%s, %s, %s, %s, %s)"
                    " ON CONFLICT (session, key) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size,"
                    " workspaces = (SELECT array_agg(DISTINCT w ORDER BY w)"
                    " FROM unnest(ci_blob_refs.workspaces || excluded.workspaces) AS w)",
                    (session, key, sha, len(content), names),
                )
                if previous is not None:
                    self._drop_unnamed(conn, previous)
        return BlobRef(blob_uri(session_id, key), sha, len(content))

    @staticmethod
    def _drop_unnamed(conn: psycopg.Connection[Any], sha: str) -> None:
        """Delete object ``sha`` if no ref names it (caller holds its lock, in a transaction)."""
        conn.execute(
            "DELETE FROM ci_blob_objects WHERE sha256 = %s"
            " AND NOT EXISTS (SELECT 1 FROM ci_blob_refs WHERE sha256 = %s)",
            (sha, sha),
        )

    def get(self, session_id: str, key: str, workspaces: frozenset[str] | None = None) -> bytes | None:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT r.workspaces, o.content FROM ci_blob_refs r JOIN ci_blob_objects o ON o.sha256 = r.sha256"
                " WHERE r.session = %s AND r.key = %s",
                (_digest(session_id), key),
            ).fetchone()
        if row is None or not _visible(row[0], workspaces):
            return None
        return bytes(row[1])

    def list(self, session_id: str, workspaces: frozenset[str] | None = None) -> list[str]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT key, workspaces FROM ci_blob_refs WHERE session = %s", (_digest(session_id),)
            ).fetchall()
        return sorted(key for key, names in rows if _visible(names, workspaces))

    def forget_sessions(self, workspace: str, session_ids: Collection[str]) -> int:
        """O(refs of ``session_ids``), one transaction: ``workspace`` leaves each of their refs, a
        ref left to no workspace goes, and its object too when no other ref names it."""
        deleted = 0
        with self._conn() as conn, conn.transaction():
            sessions = [_digest(session_id) for session_id in set(session_ids)]
            conn.execute(
                "UPDATE ci_blob_refs SET workspaces = array_remove(workspaces, %s)"
                " WHERE session = ANY(%s) AND %s = ANY(workspaces) AND cardinality(workspaces) > 1",
                (workspace, sessions, workspace),
            )
            gone = conn.execute(
                "DELETE FROM ci_blob_refs WHERE session = ANY(%s) AND workspaces = ARRAY[%s]::text[]"
                " RETURNING sha256",
                (sessions, workspace),
            ).fetchall()
            deleted = len(gone)
            candidates = {sha for (sha,) in gone}
            _object_lock(conn, candidates)
            for sha in sorted(candidates):
                self._drop_unnamed(conn, sha)
        return deleted

    def object_count(self) -> int:
        with self._conn() as conn:
            row = conn.execute("SELECT count(*) FROM ci_blob_objects").fetchone()
        return int(row[0]) if row else 0

    def has_object(self, sha: str) -> bool:
        with self._conn() as conn:
            return (
                conn.execute("SELECT 1 FROM ci_blob_objects WHERE sha256 = %s", (sha,)).fetchone() is not None
            )

    def close(self) -> None:
        self._pool.close()
