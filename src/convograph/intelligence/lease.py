"""Who applies the shared journal: one lease, held by one `convograph serve` instance at a time.

Several instances share one journal (`PostgresJournal`) and one graph server; exactly one of them
runs the graph applier (`GraphApplier` with a ``lease``), so no session is ever folded by two
processes at once and every batch is planned from the whole journal. The others only append.

`PostgresLease` is a session-level advisory lock (``pg_try_advisory_lock``) on a dedicated
connection: it is held exactly as long as that connection lives. An instance that is killed
(``kill -9``, a crash) loses its connection, PostgreSQL releases the lock at once, and the next
instance to try (every ``retry_s``, 0.5 s by default) takes over: it reads the applied cursor
from the graph store and carries on from there. The holder checks the connection before every
batch (`held`), so a holder whose connection broke stops applying before another can start;
TCP keepalives (5 s idle, 2 s interval, 3 probes, on both ends) bound how long a silently dead
peer keeps the lock. ``mutex()`` serialises short critical sections across instances (the
applier's rebuild marks, a read-modify-write of one key in the graph store).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import psycopg

__all__ = ["ApplierLease", "PostgresLease", "lease_key"]

log = logging.getLogger("convograph.intelligence.lease")

_KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "options": "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3",
}


class ApplierLease(Protocol):
    """The right to apply the journal; see the module docstring."""

    def acquire(self) -> bool:
        """Hold the lease if it is free (never blocks); True while this process holds it."""
        ...

    def held(self) -> bool:
        """Whether this process still holds it (one round trip to check)."""
        ...

    def mutex(self) -> contextlib.AbstractContextManager[None]:
        """A short critical section across every instance sharing the lease."""
        ...

    def close(self) -> None: ...


def lease_key(name: str) -> int:
    """A signed 64-bit advisory lock id for ``name``."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


class PostgresLease:
    """`ApplierLease` as a PostgreSQL advisory lock named ``name``. Thread-safe."""

    def __init__(self, conninfo: str, name: str, *, connect_timeout: float = 5.0) -> None:
        self.conninfo = conninfo
        self.name = name
        self.key = lease_key(name)
        self.mutex_key = lease_key(name + ":mutex")
        self.connect_timeout = max(1, round(connect_timeout))
        self._conn: psycopg.Connection[Any] | None = None
        self._held = False
        self._lock = threading.Lock()

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            self.conninfo, autocommit=True, connect_timeout=self.connect_timeout, **_KEEPALIVES
        )

    def acquire(self) -> bool:
        with self._lock:
            if self._held:
                return True
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
            except psycopg.Error as exc:
                log.warning("applier lease %r: cannot reach PostgreSQL: %s", self.name, exc)
                self._drop()
                return False
            self._held = bool(row and row[0])
            return self._held

    def held(self) -> bool:
        with self._lock:
            if not self._held or self._conn is None:
                return False
            try:
                self._conn.execute("SELECT 1")
            except psycopg.Error as exc:
                log.warning("applier lease %r lost with its connection: %s", self.name, exc)
                self._drop()
                return False
            return True

    def _drop(self) -> None:
        self._held = False
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    @contextlib.contextmanager
    def mutex(self) -> Iterator[None]:
        """``pg_advisory_lock`` on a connection of its own, held for the block (released by
        closing the connection, also when the process dies inside it)."""
        with self._connect() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (self.mutex_key,))
            yield

    def release(self) -> None:
        """Let the lease go (closing its connection), so another instance takes over at once."""
        with self._lock:
            self._drop()

    def close(self) -> None:
        self.release()
