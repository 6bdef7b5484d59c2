"""Postgres event log (psycopg 3, async, pooled): events, conversations, messages and snapshots.

- **seq**: each append locks its conversation's row (``INSERT .. ON CONFLICT DO UPDATE .. RETURNING``),
  so appends to one conversation are serialised across every process and commit in seq order;
  appends to different conversations run in parallel. Rows go in with ``COPY``.
- **Durability**: acknowledged only after ``COMMIT`` returns (with the server's ``synchronous_commit``,
  default on). If the connection dies during the commit the caller gets `BackendUnavailable` with
  ``outcome_unknown=True``; retrying events that carry ``eventId`` is then safe.
- **Live tail**: every append does ``pg_notify('convograph_events', <conversation id>)`` inside its
  transaction (delivered on commit); one LISTEN connection per log wakes local subscribers, who then
  read ``seq > cursor`` (`convograph.store.tail.follow`), polling every second as a fallback.
- **Messages** (seed 000): user messages and finished top-level runs become rows of ``messages`` with
  ``parent_message_id``; ``conversations.active_leaf_id`` is the current branch tip. Branches are read
  with a recursive CTE (`PostgresEventLog.message_path`).
- **NUL**: ``text`` and ``jsonb`` cannot hold U+0000. Ids never do (`convograph.events.check_ids`
  refuses them before anything is stored); events are stored as bytes, exactly. Only the derived
  ``messages`` rows replace NUL in ``text`` and in ``parts`` (strings and keys) by U+FFFD.
- **Migrations**: numbered scripts in `convograph.store.postgres_rows.MIGRATIONS`; applied in order under an advisory lock and
  recorded in ``convograph_schema``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

import psycopg
import psycopg_pool
from psycopg.types.json import Jsonb

from convograph.events import Event, HarnessEnd, HarnessStart, User, pack_event, unpack_event
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
from convograph.store.messages import Message, is_top_level_start, run_message, user_message
from convograph.store.postgres_rows import (
    MESSAGE_COLUMNS,
    MIGRATIONS,
    conversation_info,
    jsonb_dumps,
    message_from_row,
    missing_database_hint,
    text_without_nul,
)
from convograph.store.status import RunTally, fold_status
from convograph.store.tail import ChangeSignal, follow

__all__ = ["CHANNEL", "PostgresEventLog"]

log = logging.getLogger("convograph.store.postgres")

CHANNEL: Final = "convograph_events"
_LOCK_KEY: Final = 0x636F6E766F  # advisory lock id for migrations ("convo")

_CONNECTION_ERRORS: Final = (psycopg.OperationalError, psycopg_pool.PoolTimeout, OSError)


class PostgresEventLog:
    """`EventLog` on PostgreSQL. Open with ``await PostgresEventLog.open(conninfo)``."""

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool[Any], conninfo: str) -> None:
        self._pool = pool
        self._conninfo = conninfo
        self._signal = ChangeSignal()
        self._listener: asyncio.Task[None] | None = None
        self._closed = False
        self._migrated = False

    @classmethod
    async def open(
        cls, conninfo: str, *, pool_max: int = 8, connect_timeout: float = 5.0, lazy: bool = False
    ) -> PostgresEventLog:
        """Open a pool and apply pending migrations. Raises `BackendUnavailable` if unreachable,
        unless ``lazy``: then the log opens anyway and migrates on its first successful connection
        (used behind a spool, so a server can start while Postgres is down). When not ``lazy``, one
        direct connection is tried first, so the error names the reason (refused, unknown role, bad
        password) instead of the pool's bare timeout."""
        if not lazy:
            try:
                probe = await psycopg.AsyncConnection.connect(
                    conninfo, connect_timeout=max(1, round(connect_timeout))
                )
            except psycopg.Error as exc:
                message = " ".join(str(exc).split())
                raise BackendUnavailable(
                    "postgres", message + missing_database_hint(conninfo, message)
                ) from exc
            await probe.close()
        pool: psycopg_pool.AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_max,
            open=False,
            timeout=connect_timeout,
            kwargs={"autocommit": True, "connect_timeout": max(1, round(connect_timeout))},
            check=psycopg_pool.AsyncConnectionPool.check_connection,
            name="convograph-events",
        )
        await pool.open(wait=False)
        self = cls(pool, conninfo)
        try:
            async with self._connection():
                pass  # connecting migrates
        except BackendUnavailable as exc:
            if not lazy:
                await pool.close()
                raise
            log.warning("%s; continuing, the schema is migrated once it answers", exc)
        except BaseException:
            await pool.close()
            raise
        return self

    # -- plumbing --------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _connection(self, *, writes: bool = False) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._closed:
            raise RuntimeError("event log is closed")
        try:
            async with self._pool.connection() as conn:
                try:
                    if not self._migrated:
                        await self._migrate(conn)
                    yield conn
                except _CONNECTION_ERRORS as exc:
                    raise BackendUnavailable("postgres", str(exc).strip(), outcome_unknown=writes) from exc
        except psycopg_pool.PoolTimeout as exc:
            raise BackendUnavailable(
                "postgres", f"no connection within {self._pool.timeout:g} s ({exc})"
            ) from exc
        except psycopg.OperationalError as exc:
            raise BackendUnavailable("postgres", str(exc).strip(), outcome_unknown=writes) from exc

    async def _migrate(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS convograph_schema "
                "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT coalesce(max(version), 0) FROM convograph_schema")
            row = await cur.fetchone()
            version = int(row[0]) if row else 0
            if version > len(MIGRATIONS):
                raise RuntimeError(
                    f"event log schema version {version} is newer than this convograph ({len(MIGRATIONS)})"
                )
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                await conn.execute(script)
                await conn.execute("INSERT INTO convograph_schema (version) VALUES (%s)", (number,))
        self._migrated = True

    async def schema_version(self) -> int:
        async with self._connection() as conn:
            cur = await conn.execute("SELECT coalesce(max(version), 0) FROM convograph_schema")
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    # -- appends ---------------------------------------------------------------------------------------

    async def append(self, conversation_id: str, events: Sequence[Event]) -> AppendResult:
        validate_conversation_id(conversation_id)
        check_events(events)
        async with self._connection(writes=True) as conn, conn.transaction():
            return await self._append_in(conn, conversation_id, list(events))

    async def _lock_conversation(
        self, conn: psycopg.AsyncConnection[Any], conversation_id: str, now: float
    ) -> tuple[int, int, RunTally, str | None]:
        cur = await conn.execute(
            "INSERT INTO conversations AS c (id, created_at) VALUES (%s, %s) "
            "ON CONFLICT (id) DO UPDATE SET id = c.id "
            "RETURNING c.event_count, c.last_seq, c.open_runs, c.last_outcome, c.active_leaf_id",
            (conversation_id, now),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), RunTally(tuple(row[2]), row[3]), row[4]

    async def _append_in(
        self, conn: psycopg.AsyncConnection[Any], conversation_id: str, events: list[Event]
    ) -> AppendResult:
        now = time.time()
        count, last_seq, tally, leaf = await self._lock_conversation(conn, conversation_id, now)
        # Optimistic path: let the unique index prove no eventId repeats; look ids up only on a
        # conflict (the savepoint rollback keeps seqs gap-free).
        stored, dups = assign_seqs(conversation_id, events, (), last_seq, now)
        if stored:
            try:
                async with conn.transaction():
                    await self._write(conn, conversation_id, stored, count, tally, leaf, now)
            except psycopg.errors.UniqueViolation:
                cur = await conn.execute(
                    "SELECT event_id FROM events WHERE conversation_id = %s AND event_id = ANY(%s)",
                    (conversation_id, event_ids_of(events)),
                )
                known = {row[0] for row in await cur.fetchall()}
                stored, dups = assign_seqs(conversation_id, events, known, last_seq, now)
                if stored:
                    await self._write(conn, conversation_id, stored, count, tally, leaf, now)
        return AppendResult(
            accepted=len(stored),
            duplicates=len(dups),
            first_seq=stored[0].seq if stored else None,
            last_seq=stored[-1].seq if stored else None,
            conversation_last_seq=stored[-1].seq if stored else last_seq,
            stored=stored,
            duplicate_indexes=dups,
        )

    async def _write(
        self,
        conn: psycopg.AsyncConnection[Any],
        conversation_id: str,
        stored: list[StoredEvent],
        count: int,
        tally: RunTally,
        leaf: str | None,
        now: float,
    ) -> None:
        rows = [
            (
                conversation_id,
                s.seq,
                s.event.event_id,
                s.event.type,
                getattr(s.event, "run_id", None),
                s.received_at,
                pack_event(s.event),
            )
            for s in stored
        ]
        async with conn.cursor().copy(
            "COPY events (conversation_id, seq, event_id, type, run_id, received_at, data) FROM STDIN"
        ) as pipe:
            for row in rows:
                await pipe.write_row(row)
        added = len(rows)
        tally = fold_status(tally, (s.event for s in stored))
        leaf = await self._write_messages(conn, conversation_id, stored, leaf)
        await conn.execute(
            "UPDATE conversations SET event_count = %s, last_seq = greatest(last_seq, %s), last_activity = %s, "
            "open_runs = %s, last_outcome = %s, active_leaf_id = %s WHERE id = %s",
            (
                count + added,
                stored[-1].seq,
                now,
                list(tally.open_runs),
                tally.last_outcome,
                leaf,
                conversation_id,
            ),
        )
        await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, conversation_id))

    async def _write_messages(
        self,
        conn: psycopg.AsyncConnection[Any],
        conversation_id: str,
        stored: list[StoredEvent],
        leaf: str | None,
    ) -> str | None:
        """Insert user messages and finished top-level runs of ``stored``; return the new active leaf.

        A run that started in this batch is built from the batch alone; only a run that started in an
        earlier append reads its events back (index ``events_by_run``). One INSERT round trip per batch.
        """
        by_run: dict[str, list[StoredEvent]] = {}
        messages: list[Message] = []
        created: set[str] = set()
        for item in stored:
            event = item.event
            run_id: str | None = getattr(event, "run_id", None)
            if run_id is not None:
                by_run.setdefault(run_id, []).append(item)
            parent: str | None
            if isinstance(event, User):
                parent = await self._message_parent(conn, conversation_id, event.parent_id, leaf, created)
                message = user_message(item, parent)
            elif isinstance(event, HarnessEnd):
                run_events = by_run.get(event.run_id, [])
                if not run_events or not isinstance(run_events[0].event, HarnessStart):
                    run_events = await self._run_events(conn, conversation_id, event.run_id)
                start = run_events[0].event if run_events else None
                if not isinstance(start, HarnessStart) or start.depth:
                    continue
                if start.parent_id is not None:
                    if start.parent_id not in created and not await self._message_exists(
                        conn, conversation_id, start.parent_id
                    ):
                        continue  # a sub-agent run: its parent is a node, not a message
                    parent = start.parent_id
                else:
                    parent = leaf
                if not is_top_level_start(start, {start.parent_id} if start.parent_id else set()):
                    continue
                message = run_message(run_events, parent)
            else:
                continue
            messages.append(message)
            created.add(message.id)
            leaf = message.id
        if messages:
            async with conn.cursor() as cur:
                await cur.executemany(
                    f"INSERT INTO messages (conversation_id, {MESSAGE_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (conversation_id, id) "
                    "DO UPDATE SET parts = excluded.parts, text = excluded.text, last_seq = excluded.last_seq",
                    [
                        (
                            conversation_id,
                            m.id,
                            m.role,
                            m.parent_message_id,
                            m.run_id,
                            m.agent_id,
                            Jsonb(m.parts, dumps=jsonb_dumps),
                            text_without_nul(m.text),
                            m.first_seq,
                            m.last_seq,
                            m.created_at,
                        )
                        for m in messages
                    ],
                )
        return leaf

    async def _run_events(
        self, conn: psycopg.AsyncConnection[Any], conversation_id: str, run_id: str
    ) -> list[StoredEvent]:
        cur = await conn.cursor(binary=True).execute(
            "SELECT seq, received_at, data FROM events WHERE conversation_id = %s AND run_id = %s ORDER BY seq",
            (conversation_id, run_id),
        )
        return [
            StoredEvent(seq=r[0], conversation_id=conversation_id, event=unpack_event(r[2]), received_at=r[1])
            for r in await cur.fetchall()
        ]

    async def _message_exists(self, conn: psycopg.AsyncConnection[Any], cid: str, message_id: str) -> bool:
        cur = await conn.execute(
            "SELECT 1 FROM messages WHERE conversation_id = %s AND id = %s", (cid, message_id)
        )
        return await cur.fetchone() is not None

    async def _message_parent(
        self,
        conn: psycopg.AsyncConnection[Any],
        cid: str,
        parent_id: str | None,
        leaf: str | None,
        created: set[str],
    ) -> str | None:
        if parent_id is not None and (
            parent_id in created or await self._message_exists(conn, cid, parent_id)
        ):
            return parent_id
        return leaf

    async def known_event_ids(self, conversation_id: str, event_ids: Sequence[str]) -> set[str]:
        """The subset of ``event_ids`` already stored for the conversation."""
        validate_conversation_id(conversation_id)
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT event_id FROM events WHERE conversation_id = %s AND event_id = ANY(%s)",
                (conversation_id, list(event_ids)),
            )
            return {row[0] for row in await cur.fetchall()}

    async def import_events(self, conversation_id: str, stored: Sequence[StoredEvent]) -> int:
        """Store events that already have seqs (Redis finalisation). Idempotent; returns rows added."""
        validate_conversation_id(conversation_id)
        if not stored:
            return 0
        async with self._connection(writes=True) as conn, conn.transaction():
            now = time.time()
            count, last_seq, tally, leaf = await self._lock_conversation(conn, conversation_id, now)
            fresh = [s for s in stored if s.seq > last_seq]
            if not fresh:
                return 0
            await self._write(conn, conversation_id, fresh, count, tally, leaf, now)
            return len(fresh)

    # -- reads -----------------------------------------------------------------------------------------

    async def read(
        self, conversation_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        validate_conversation_id(conversation_id)
        bounds = read_range(after_seq, limit)
        if bounds is None:
            return []
        after_seq, limit = bounds
        async with self._connection() as conn:
            cur = await conn.cursor(binary=True).execute(
                "SELECT seq, received_at, data FROM events WHERE conversation_id = %s AND seq > %s "
                "ORDER BY seq LIMIT %s",
                (conversation_id, after_seq, limit),
            )
            rows = await cur.fetchall()
        return [
            StoredEvent(seq=seq, conversation_id=conversation_id, event=unpack_event(data), received_at=at)
            for seq, at, data in rows
        ]

    async def _subscribe(self, conversation_id: str, after_seq: int) -> AsyncIterator[StoredEvent]:
        self._signal.token(conversation_id)
        if self._listener is None or self._listener.done():
            self._listener = asyncio.create_task(self._listen(), name="convograph-pg-listen")
        async for stored in follow(self.read, self._signal, conversation_id, after_seq):
            yield stored

    def subscribe(self, conversation_id: str, after_seq: int = 0) -> AsyncIterator[StoredEvent]:
        validate_conversation_id(conversation_id)
        return self._subscribe(conversation_id, after_seq)

    async def _listen(self) -> None:
        """Forward NOTIFY payloads to local subscribers; reconnect with backoff after a failure."""
        delay = 0.2
        while not self._closed:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, connect_timeout=5
                )
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._signal.notify_all()  # anything appended while we were not listening
                    delay = 0.2
                    async for note in conn.notifies():
                        self._signal.notify(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("LISTEN connection lost: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def list_conversations(self) -> list[ConversationInfo]:
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT id, event_count, last_seq, last_activity, open_runs, last_outcome FROM conversations "
                "WHERE event_count > 0 ORDER BY last_activity DESC"
            )
            return [conversation_info(row) for row in await cur.fetchall()]

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        validate_conversation_id(conversation_id)
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT id, event_count, last_seq, last_activity, open_runs, last_outcome FROM conversations "
                "WHERE id = %s AND event_count > 0",
                (conversation_id,),
            )
            row = await cur.fetchone()
        return None if row is None else conversation_info(row)

    async def delete(self, conversation_id: str) -> bool:
        validate_conversation_id(conversation_id)
        async with self._connection(writes=True) as conn, conn.transaction():
            for table in ("events", "messages", "snapshots"):
                await conn.execute(f"DELETE FROM {table} WHERE conversation_id = %s", (conversation_id,))
            cur = await conn.execute("DELETE FROM conversations WHERE id = %s", (conversation_id,))
            return cur.rowcount > 0

    async def save_snapshot(self, conversation_id: str, snapshot: Snapshot) -> None:
        validate_conversation_id(conversation_id)
        async with self._connection(writes=True) as conn:
            await conn.execute(
                "INSERT INTO snapshots AS s (conversation_id, name, seq, data, created_at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (conversation_id, name) DO UPDATE "
                "SET seq = excluded.seq, data = excluded.data, created_at = excluded.created_at "
                "WHERE excluded.seq >= s.seq",
                (conversation_id, snapshot.name, snapshot.seq, snapshot.data, time.time()),
            )

    async def load_snapshot(self, conversation_id: str, name: str) -> Snapshot | None:
        validate_conversation_id(conversation_id)
        async with self._connection() as conn:
            cur = await conn.cursor(binary=True).execute(
                "SELECT seq, data FROM snapshots WHERE conversation_id = %s AND name = %s",
                (conversation_id, name),
            )
            row = await cur.fetchone()
        return None if row is None else Snapshot(name=name, seq=int(row[0]), data=bytes(row[1]))

    # -- messages --------------------------------------------------------------------------------------

    async def list_messages(self, conversation_id: str) -> list[Message]:
        """Every message of the conversation (all branches) in creation order."""
        validate_conversation_id(conversation_id)
        async with self._connection() as conn:
            cur = await conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = %s ORDER BY first_seq",
                (conversation_id,),
            )
            return [message_from_row(row) for row in await cur.fetchall()]

    async def active_leaf(self, conversation_id: str) -> str | None:
        validate_conversation_id(conversation_id)
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT active_leaf_id FROM conversations WHERE id = %s", (conversation_id,)
            )
            row = await cur.fetchone()
        return None if row is None else row[0]

    async def set_active_leaf(self, conversation_id: str, message_id: str) -> None:
        """Switch branch: make ``message_id`` the tip. Raises KeyError for an unknown message."""
        validate_conversation_id(conversation_id)
        async with self._connection(writes=True) as conn:
            cur = await conn.execute(
                "UPDATE conversations SET active_leaf_id = %s WHERE id = %s AND EXISTS "
                "(SELECT 1 FROM messages WHERE conversation_id = %s AND id = %s)",
                (message_id, conversation_id, conversation_id, message_id),
            )
            if cur.rowcount == 0:
                raise KeyError(f"conversation {conversation_id!r} has no message {message_id!r}")

    async def message_path(self, conversation_id: str, leaf_id: str | None = None) -> list[Message]:
        """Root-to-leaf path ending at ``leaf_id`` (default: the active leaf), via a recursive CTE."""
        validate_conversation_id(conversation_id)
        if leaf_id is None:
            leaf_id = await self.active_leaf(conversation_id)
            if leaf_id is None:
                return []
        async with self._connection() as conn:
            cur = await conn.execute(
                f"""
                WITH RECURSIVE path AS (
                    SELECT m.*, 0 AS depth FROM messages m WHERE m.conversation_id = %s AND m.id = %s
                    UNION ALL
                    SELECT m.*, p.depth + 1 FROM messages m
                    JOIN path p ON m.conversation_id = p.conversation_id AND m.id = p.parent_message_id
                    WHERE p.depth < 100000
                )
                SELECT {MESSAGE_COLUMNS} FROM path ORDER BY depth DESC
                """,
                (conversation_id, leaf_id),
            )
            return [message_from_row(row) for row in await cur.fetchall()]

    async def message_children(self, conversation_id: str, message_id: str | None) -> list[Message]:
        """Direct replies to ``message_id`` (roots when None): the branches at that point."""
        validate_conversation_id(conversation_id)
        async with self._connection() as conn:
            cur = await conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = %s "
                "AND parent_message_id IS NOT DISTINCT FROM %s ORDER BY first_seq",
                (conversation_id, message_id),
            )
            return [message_from_row(row) for row in await cur.fetchall()]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(BaseException):
                await self._listener
        await self._pool.close()
