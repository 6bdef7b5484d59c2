"""API keys in PostgreSQL, so that every instance of a deployment knows every key.

``convograph keys create ID --database-url postgresql://…`` stores the key's SHA-256 (never the key)
in ``convograph_api_keys``; ``convograph keys revoke ID --database-url …`` deletes it. A server whose
event log names that database (``--database-url postgresql://…``, or ``redis://…?finalize=…``)
serves the keys of its key file (if any) together with the database's, and reads the table again
every ``refresh_seconds`` (5 s): a key created or revoked on any machine is honoured by every
instance within that time, with no restart. A table that cannot be read leaves the keys as they
were (logged). One small query per refresh, O(keys).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

import msgspec
import psycopg

from convograph.server.auth import ApiKey, Scope, new_api_key

__all__ = ["PostgresKeyStore", "start_key_refresh"]

log = logging.getLogger("convograph.server")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS convograph_api_keys (
    id text PRIMARY KEY,
    hash text NOT NULL UNIQUE,
    scopes text[] NOT NULL,
    workspaces text[],
    name text,
    created_at double precision NOT NULL
)
"""
_LOCK_KEY = 0x6B657973  # advisory lock id for creating the table ("keys")


class PostgresKeyStore:
    """The ``convograph_api_keys`` table (see the module docstring). One connection per call."""

    def __init__(self, conninfo: str, *, connect_timeout: float = 5.0) -> None:
        self.conninfo = conninfo
        self.connect_timeout = max(1, round(connect_timeout))
        self._ready = False

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=self.connect_timeout)
        if not self._ready:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                conn.execute(_SCHEMA)
            self._ready = True
        return conn

    def create(
        self,
        key_id: str,
        *,
        scopes: Iterable[Scope],
        workspaces: Iterable[str] | None = None,
        name: str | None = None,
    ) -> str:
        """Store a new key's hash and return the key. ValueError for a bad request or a taken id."""
        key, record = new_api_key(key_id=key_id, scopes=scopes, workspaces=workspaces, name=name)
        with self._connect() as conn:
            inserted = conn.execute(
                "INSERT INTO convograph_api_keys (id, hash, scopes, workspaces, name, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                (
                    record.id,
                    record.hash,
                    list(record.scopes),
                    _list(record.workspaces),
                    record.name,
                    time.time(),
                ),
            ).rowcount
        if not inserted:
            raise ValueError(f"a key with id {key_id!r} already exists in the database")
        return key

    def revoke(self, key_id: str) -> bool:
        """Delete the key; False when there was none of that id."""
        with self._connect() as conn:
            return conn.execute("DELETE FROM convograph_api_keys WHERE id = %s", (key_id,)).rowcount > 0

    def load(self) -> list[ApiKey]:
        """Every stored key, by id."""
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT id, hash, scopes, workspaces, name FROM convograph_api_keys ORDER BY id"
            ).fetchall()
        return [
            msgspec.convert(
                {"id": key_id, "hash": digest, "scopes": scopes, "workspaces": workspaces, "name": name},
                ApiKey,
            )
            for key_id, digest, scopes, workspaces, name in rows
        ]


def _list(values: tuple[str, ...] | None) -> list[str] | None:
    return None if values is None else list(values)


async def start_key_refresh(store: PostgresKeyStore, ring: Any, every: float = 5.0) -> asyncio.Task[None]:
    """Serve the key file's keys (what ``ring`` holds now) together with the database's, loaded now
    and every ``every`` seconds after (see the module docstring); the task refreshing them."""
    file_keys = list(ring.keys())
    try:
        ring.replace([*file_keys, *await asyncio.to_thread(store.load)])
    except psycopg.Error as exc:
        log.warning("cannot read API keys from the database (serving the key file's): %s", exc)

    async def refresh() -> None:
        while True:
            await asyncio.sleep(every)
            try:
                ring.replace([*file_keys, *await asyncio.to_thread(store.load)])
            except psycopg.Error as exc:
                log.warning("cannot refresh API keys from the database (keeping the last ones): %s", exc)

    return asyncio.create_task(refresh(), name="convograph-key-refresh")
