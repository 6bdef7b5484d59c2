"""Attached agents and their control messages shared by every instance of a deployment.

An agent holds its control stream open on one instance (`convograph.server.presence`); a viewer or
a client may reach any other (a round-robin balancer). A `PresenceShare` lets every instance list
the agents attached anywhere and deliver a control message (``cancel``) to the instance that holds
the agent's stream:

- each instance writes its own attachments (connected, or within their lease) under its instance
  id, on every attach and leave and again every `REFRESH_SECONDS`; it lists the others' rows;
- a control message is published once; every other instance queues it on its own connected
  streams of that conversation.

A row whose instance stopped refreshing (the instance died) counts as not connected after
``2 * REFRESH_SECONDS`` (its agent reconnects to another instance) and is forgotten after its
lease. Implementations: PostgreSQL (table ``convograph_agents`` + ``LISTEN/NOTIFY``), for a log in
PostgreSQL or a Redis log finalising into it; Redis (a hash per conversation + ``PUBLISH``), for a
log on one Redis. One round trip per listing, per publish and per control message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from typing import Any, Final

import msgspec

from convograph.server.presence import LEASE_SECONDS, REFRESH_SECONDS, AgentInfo, Deliver, PresenceShare

__all__ = [
    "MemoryPresenceShare",
    "PostgresPresenceShare",
    "PresenceRoom",
    "RedisPresenceShare",
    "open_presence_share",
]

log = logging.getLogger("convograph.server")

CHANNEL: Final = "convograph_control"


def _message(instance: str, conversation_id: str, frame: bytes) -> str:
    return json.dumps({"i": instance, "c": conversation_id, "f": frame.decode()})


def _heard(share: PresenceShare, payload: str | bytes, deliver: Deliver) -> None:
    """Deliver a published control message here unless this instance sent it."""
    try:
        message = json.loads(payload)
        if message["i"] != share.instance:
            deliver(message["c"], message["f"].encode())
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("ignored a malformed control message: %s", exc)


class PresenceRoom:
    """What `MemoryPresenceShare` instances of one process share: rows and listeners."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], tuple[AgentInfo, float]] = {}
        self.listeners: dict[str, Deliver] = {}


class MemoryPresenceShare:
    """`PresenceShare` between servers of one process (tests, embedding): one `PresenceRoom`."""

    def __init__(self, room: PresenceRoom, *, instance: str | None = None) -> None:
        self.room = room
        self.instance = instance or uuid.uuid4().hex

    async def start(self, deliver: Deliver) -> None:
        self.room.listeners[self.instance] = deliver

    async def write(self, conversation_id: str, agents: list[AgentInfo]) -> None:
        rows = self.room.rows
        for key in [k for k in rows if k[0] == conversation_id and k[1] == self.instance]:
            del rows[key]
        now = time.time()
        for agent in agents:
            rows[(conversation_id, self.instance, agent.id)] = (agent, now)

    async def others(self, conversation_id: str) -> list[tuple[AgentInfo, float]]:
        return [v for k, v in self.room.rows.items() if k[0] == conversation_id and k[1] != self.instance]

    async def publish(self, conversation_id: str, frame: bytes) -> None:
        for instance, deliver in list(self.room.listeners.items()):
            if instance != self.instance:
                deliver(conversation_id, frame)

    async def close(self) -> None:
        self.room.listeners.pop(self.instance, None)
        for key in [k for k in self.room.rows if k[1] == self.instance]:
            del self.room.rows[key]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS convograph_agents (
    conversation_id text NOT NULL,
    agent_id text NOT NULL,
    instance text NOT NULL,
    info jsonb NOT NULL,
    written_at double precision NOT NULL,
    PRIMARY KEY (conversation_id, instance, agent_id)
)
"""
_LOCK_KEY: Final = 0x61676E74  # advisory lock id for creating the table ("agnt")


class PostgresPresenceShare:
    """`PresenceShare` in PostgreSQL: one pooled-free connection for writes and reads (calls are
    serialised by a lock: presence traffic is a few statements per agent per refresh) and one
    ``LISTEN`` connection, reconnected with backoff."""

    def __init__(self, conninfo: str, *, instance: str | None = None) -> None:
        self.conninfo = conninfo
        self.instance = instance or uuid.uuid4().hex
        self._conn: Any = None
        self._lock = asyncio.Lock()
        self._listener: asyncio.Task[None] | None = None

    async def _connection(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True, connect_timeout=5)
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                await conn.execute(_SCHEMA)
            self._conn = conn
        return self._conn

    async def _run(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        async with self._lock:
            conn = await self._connection()
            try:
                cursor = await conn.execute(sql, params)
                return list(await cursor.fetchall()) if cursor.description else []
            except Exception:
                await conn.close()
                self._conn = None
                raise

    async def start(self, deliver: Deliver) -> None:
        """Never waits for the database (a server with a spool starts while it is down)."""
        self._listener = asyncio.create_task(self._listen(deliver), name="convograph-presence-listen")

    async def _listen(self, deliver: Deliver) -> None:
        import psycopg

        backoff = 0.1
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    backoff = 0.1
                    # rows of instances gone for ten minutes (a crash leaves its rows behind)
                    await self._run(
                        "DELETE FROM convograph_agents WHERE written_at < %s", (time.time() - 600,)
                    )
                    async for notice in conn.notifies():
                        _heard(self, notice.payload, deliver)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("control messages of other instances: LISTEN lost (%s); retrying", exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def write(self, conversation_id: str, agents: list[AgentInfo]) -> None:
        now = time.time()
        rows = [(a.id, msgspec.json.encode(a).decode()) for a in agents]
        await self._run(
            "WITH gone AS (DELETE FROM convograph_agents WHERE conversation_id = %s AND instance = %s"
            " AND NOT (agent_id = ANY(%s)))"
            " INSERT INTO convograph_agents (conversation_id, agent_id, instance, info, written_at)"
            " SELECT %s, a, %s, i::jsonb, %s FROM unnest(%s::text[], %s::text[]) AS t(a, i)"
            " ON CONFLICT (conversation_id, instance, agent_id)"
            " DO UPDATE SET info = EXCLUDED.info, written_at = EXCLUDED.written_at",
            (
                conversation_id, self.instance, [r[0] for r in rows],
                conversation_id, self.instance, now, [r[0] for r in rows], [r[1] for r in rows],
            ),
        )  # fmt: skip

    async def others(self, conversation_id: str) -> list[tuple[AgentInfo, float]]:
        found = await self._run(
            "SELECT info::text, written_at FROM convograph_agents"
            " WHERE conversation_id = %s AND instance <> %s AND written_at > %s",
            (conversation_id, self.instance, time.time() - LEASE_SECONDS - 2 * REFRESH_SECONDS),
        )
        return [(msgspec.json.decode(info, type=AgentInfo), written) for info, written in found]

    async def publish(self, conversation_id: str, frame: bytes) -> None:
        await self._run(
            "SELECT pg_notify(%s, %s)", (CHANNEL, _message(self.instance, conversation_id, frame))
        )

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
        with contextlib.suppress(Exception):
            await self._run("DELETE FROM convograph_agents WHERE instance = %s", (self.instance,))
        if self._conn is not None:
            await self._conn.close()


class RedisPresenceShare:
    """`PresenceShare` on one Redis: hash ``{prefix}agents:{cid}`` (field ``instance/agent`` ->
    ``{"info", "written"}``, expiring with the lease) and channel ``{prefix}control``."""

    def __init__(self, url: str, *, prefix: str = "convograph:", instance: str | None = None) -> None:
        import redis.asyncio as redis

        self.client: Any = redis.Redis.from_url(url)
        self.prefix = prefix
        self.instance = instance or uuid.uuid4().hex
        self._listener: asyncio.Task[None] | None = None

    def _key(self, conversation_id: str) -> str:
        return f"{self.prefix}agents:{{{conversation_id}}}"

    async def start(self, deliver: Deliver) -> None:
        self._listener = asyncio.create_task(self._listen(deliver), name="convograph-presence-listen")

    async def _listen(self, deliver: Deliver) -> None:
        backoff = 0.1
        while True:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(f"{self.prefix}control")
                backoff = 0.1
                async for message in pubsub.listen():
                    _heard(self, message["data"], deliver)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("control messages of other instances: SUBSCRIBE lost (%s); retrying", exc)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def write(self, conversation_id: str, agents: list[AgentInfo]) -> None:
        key, now = self._key(conversation_id), time.time()
        mine = f"{self.instance}/"
        fields = [f for f in await self.client.hkeys(key) if f.decode().startswith(mine)]
        async with self.client.pipeline(transaction=True) as pipe:
            if fields:
                pipe.hdel(key, *fields)
            for agent in agents:
                value = json.dumps({"info": msgspec.to_builtins(agent), "written": now})
                pipe.hset(key, f"{mine}{agent.id}", value)
            pipe.expire(key, int(LEASE_SECONDS + 4 * REFRESH_SECONDS))
            await pipe.execute()

    async def others(self, conversation_id: str) -> list[tuple[AgentInfo, float]]:
        rows = await self.client.hgetall(self._key(conversation_id))
        mine = f"{self.instance}/".encode()
        found = []
        for field, value in rows.items():
            if not field.startswith(mine):
                row = json.loads(value)
                found.append((msgspec.convert(row["info"], AgentInfo), float(row["written"])))
        return found

    async def publish(self, conversation_id: str, frame: bytes) -> None:
        await self.client.publish(f"{self.prefix}control", _message(self.instance, conversation_id, frame))

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
        await self.client.aclose()


def open_presence_share(database_url: str | None) -> PresenceShare | None:
    """The share an event log URL implies: PostgreSQL where the log names one (`shared_postgres`),
    else the log's single Redis; None for a log only this process holds (SQLite, memory) and for a
    Redis Cluster without a PostgreSQL archive (docs/deploy.md)."""
    from convograph.store.url import redis_presence_url, shared_postgres

    conninfo = shared_postgres(database_url)
    if conninfo is not None:
        return PostgresPresenceShare(conninfo)
    redis = redis_presence_url(database_url)
    if redis is not None:
        url, prefix = redis
        return RedisPresenceShare(url, prefix=prefix)
    return None
