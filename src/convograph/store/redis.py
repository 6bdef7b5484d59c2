"""Redis Streams event log for in-flight conversations, finalised into Postgres.

Keys (``P`` = prefix, ``{C}`` = the conversation id as a Cluster hash tag, so one conversation's keys
share a slot):

- ``P:{C}:stream`` — the events. **An event's Redis entry id is ``<seq>-0``**: the stream id's
  millisecond part *is* the seq, so resuming "after seq s" is ``XREAD .. STREAMS key s-0`` and an SSE
  ``Last-Event-ID`` maps to a stream id without a lookup table. Fields: ``d`` (packed event without its
  seq; `read` sets it from the id) and ``t`` (receive time).
- ``P:{C}:meta`` — hash: ``last_seq``, ``count``, ``open`` (open run ids), ``outcome``,
  ``last_activity``, ``archived_seq``. ``P:{C}:ids`` — hash ``eventId -> seq`` for deduplication.
- ``P:conversations`` — sorted set of conversation ids by last activity (on a Redis Cluster one per
  slot instead, `convograph.store.redis_cluster`); ``P:finalize`` — set of conversations whose
  finalisation failed and is being retried (written before, and cleared after, the conversation's own
  keys change, so it always holds at least every conversation still to finalise).

Appends run one Lua script per batch, so dedup, seq assignment, XADD and the status fold are atomic.
Every append refreshes the keys' TTL (``ttl``, default one day of inactivity).

Finalisation (``archive`` = a `PostgresEventLog`): when a conversation's last open run ends, its
events not yet archived are imported into Postgres (same seqs; messages rows derived there), and only
after that commit do its keys get the short ``finalized_ttl`` (default 10 minutes, so clients can still
resume from Redis). A failed finalisation is retried in the background and the keys are made
persistent meanwhile, so nothing acknowledged expires unarchived. With an archive, streams are not
trimmed by MAXLEN; instead, once more than ``maxlen`` events are unarchived the prefix is archived and
trimmed (``XTRIM MINID``), keeping the last ``maxlen // 2``. Reads below the first id left in Redis
come from Postgres. Without an archive, ``XADD MAXLEN ~ maxlen`` bounds the stream and reads of a
trimmed range raise `EventsExpired` ("not resumable").

Durability: an append is acknowledged once Redis has applied the script. Whether that survives a
Redis restart is Redis's persistence setting (``appendonly yes`` + ``appendfsync always`` for none
lost; ``everysec`` may lose up to a second). See docs/store.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
import redis.asyncio as aioredis
import redis.exceptions

from convograph.events import Event, HarnessEnd, pack_event, unpack_event
from convograph.store.base import (
    MAX_SEQ,
    AppendResult,
    BackendUnavailable,
    ConversationInfo,
    EventsExpired,
    Snapshot,
    StoredEvent,
    read_range,
    validate_conversation_id,
)
from convograph.store.batch import check_events, event_ids_of
from convograph.store.postgres import PostgresEventLog
from convograph.store.redis_layout import (
    APPEND_SCRIPT,
    FLOOR_TTL_MS,
    INFO_FIELDS,
    UNAVAILABLE,
    info_from,
    seq_of_stream_id,
    stream_id_of_seq,
)

__all__ = ["RedisEventLog", "seq_of_stream_id", "stream_id_of_seq"]

log = logging.getLogger("convograph.store.redis")


class RedisEventLog:
    """`EventLog` on Redis Streams, optionally finalised into a `PostgresEventLog` (``archive``)."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        *,
        archive: PostgresEventLog | None,
        maxlen: int,
        ttl: float,
        finalized_ttl: float,
        prefix: str,
        retry_interval: float = 2.0,
    ) -> None:
        self._client: Any = client  # redis-py stubs type replies as unions; we use decode_responses=False
        self.archive = archive
        self.maxlen = maxlen
        self.ttl = ttl
        self.finalized_ttl = finalized_ttl
        self.prefix = prefix
        self.retry_interval = retry_interval
        self._script = client.register_script(APPEND_SCRIPT)
        self._tasks: set[asyncio.Task[None]] = set()
        self._archiving: set[str] = set()
        self._retry: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        archive: PostgresEventLog | None = None,
        maxlen: int = 100_000,
        ttl: float = 86_400.0,
        finalized_ttl: float = 600.0,
        prefix: str = "convograph",
        connect_timeout: float = 5.0,
        lazy: bool = False,
    ) -> RedisEventLog:
        """Connect. Raises `BackendUnavailable` if Redis does not answer, unless ``lazy`` (behind a
        spool): then the log opens anyway and every call reconnects."""
        client = aioredis.Redis.from_url(
            url, socket_connect_timeout=connect_timeout, socket_timeout=30.0, health_check_interval=10
        )
        self = cls(
            client, archive=archive, maxlen=maxlen, ttl=ttl, finalized_ttl=finalized_ttl, prefix=prefix
        )
        await self._start(lazy)
        return self

    async def _start(self, lazy: bool) -> None:
        """Check that the server answers (unless ``lazy``) and start the finalisation retries."""
        try:
            await self._check_server()
        except UNAVAILABLE as exc:
            if not lazy:
                await self._client.aclose()
                raise BackendUnavailable("redis", str(exc)) from exc
            log.warning("redis event log unavailable at open (%s); continuing behind the spool", exc)
        except ValueError:
            await self._client.aclose()
            raise
        if self.archive is not None:
            self._retry = asyncio.create_task(self._retry_loop(), name="convograph-redis-finalize")

    async def _check_server(self) -> None:
        """One round trip: refuse a Redis Cluster node (its keys would be spread over slots)."""
        try:
            info = await self._client.info("cluster")
        except redis.exceptions.ResponseError:  # INFO not allowed for this user: it cannot tell
            await self._client.ping()
            return
        if info.get("cluster_enabled"):
            raise ValueError(
                "this Redis is a Redis Cluster node: use redis+cluster://host:port[,host:port...] "
                "(docs/store.md, Redis Cluster)"
            )

    # -- keys ------------------------------------------------------------------------------------------

    def _floor_key(self, cid: str) -> str:
        """Last seq of a conversation, kept 30 days after its other keys expire (seqs never restart)."""
        return f"{self.prefix}:{{{cid}}}:floor"

    def _keys(self, cid: str) -> tuple[str, str, str]:
        base = f"{self.prefix}:{{{cid}}}"
        return f"{base}:stream", f"{base}:meta", f"{base}:ids"

    def _index_key(self, cid: str) -> str:
        """The sorted set listing ``cid`` (by last activity); the append script updates it."""
        return f"{self.prefix}:conversations"

    @property
    def _pending_key(self) -> str:
        return f"{self.prefix}:finalize"

    # -- appends ---------------------------------------------------------------------------------------

    async def append(self, conversation_id: str, events: Sequence[Event]) -> AppendResult:
        validate_conversation_id(conversation_id)
        check_events(events)
        batch = list(events)
        now = time.time()
        stream, meta, ids = self._keys(conversation_id)
        args: list[Any] = [
            conversation_id,
            repr(now),
            0 if self.archive is not None else self.maxlen,
            int(self.ttl * 1000),
            -1,
            len(batch),
        ]
        for event in batch:
            flag = "e" if isinstance(event, HarnessEnd) and event.reason == "error" else ""
            args += (
                event.event_id or "",
                event.type,
                getattr(event, "run_id", None) or "",
                flag,
                pack_event(event),
            )
        args += ("1" if self.archive is not None else "0", FLOOR_TTL_MS)
        script_keys = [stream, meta, ids, self._index_key(conversation_id), self._floor_key(conversation_id)]
        try:
            reply = await self._script(keys=script_keys, args=args)
            if reply[0] == b"SEED":
                base, known = await self._seed(conversation_id, batch)
                args[4] = base
                for index in known:
                    args[6 + index * 5 + 3] = "k"  # the flag slot: already archived
                reply = await self._script(keys=script_keys, args=args)
        except UNAVAILABLE as exc:
            raise BackendUnavailable("redis", str(exc), outcome_unknown=True) from exc
        last, finished, unarchived, seqs = int(reply[0]), int(reply[1]), int(reply[2]), reply[3]
        stored: list[StoredEvent] = []
        dups: list[int] = []
        replace = msgspec.structs.replace
        for index, (event, seq) in enumerate(zip(batch, seqs, strict=True)):
            if seq == 0:
                dups.append(index)
            else:
                stored.append(
                    StoredEvent(
                        seq=int(seq),
                        conversation_id=conversation_id,
                        event=replace(event, seq=int(seq)),
                        received_at=now,
                    )
                )
        if finished:
            self._spawn(self._finalize(conversation_id))
        elif self.archive is not None and unarchived > self.maxlen and conversation_id not in self._archiving:
            self._spawn(self._archive_in_background(conversation_id))
        return AppendResult(
            accepted=len(stored),
            duplicates=len(dups),
            first_seq=stored[0].seq if stored else None,
            last_seq=stored[-1].seq if stored else None,
            conversation_last_seq=last,
            stored=stored,
            duplicate_indexes=tuple(dups),
        )

    async def _seed(self, conversation_id: str, batch: list[Event]) -> tuple[int, list[int]]:
        """First append after the keys expired (or ever): continue from the archive's seq."""
        if self.archive is None:
            return 0, []
        info = await self.archive.get_conversation(conversation_id)
        if info is None:
            return 0, []
        wanted = set(event_ids_of(batch))
        known: list[int] = []
        if wanted:
            present = await self.archive.known_event_ids(conversation_id, sorted(wanted))
            known = [i for i, e in enumerate(batch) if e.event_id in present]
        return info.last_seq, known

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- finalisation ----------------------------------------------------------------------------------

    async def _archive(self, conversation_id: str, *, trim: bool) -> int:
        """Copy unarchived events into Postgres; return the archived seq. Raises on failure."""
        assert self.archive is not None
        stream, meta, _ = self._keys(conversation_id)
        archived = int(await self._client.hget(meta, "archived_seq") or 0)
        while True:
            page = await self._read_redis(conversation_id, archived, 5000)
            if not page:
                break
            await self.archive.import_events(conversation_id, page)
            archived = page[-1].seq
            await self._client.hset(meta, "archived_seq", archived)
        if trim:
            keep_from = max(archived - self.maxlen // 2 + 1, 1)
            await self._client.xtrim(stream, minid=stream_id_of_seq(keep_from), approximate=False)
        return archived

    async def _archive_in_background(self, conversation_id: str) -> None:
        self._archiving.add(conversation_id)
        try:
            await self._archive(conversation_id, trim=True)
        except Exception as exc:  # the stream keeps everything; the next append past maxlen retries
            log.warning("archiving conversation %r failed: %s", conversation_id, exc)
        finally:
            self._archiving.discard(conversation_id)

    async def _finalize(self, conversation_id: str) -> bool:
        """Archive a conversation whose runs ended; then let its keys expire. True on success."""
        keys = self._keys(conversation_id)
        try:
            if self.archive is not None:
                await self._archive(conversation_id, trim=False)
            outcome = await self._client.hmget(keys[1], ["open"])
            if outcome[0] in (None, b"[]"):  # no run reopened meanwhile
                async with self._client.pipeline(transaction=True) as pipe:  # one slot: cluster-safe
                    for key in keys:
                        pipe.pexpire(key, int(self.finalized_ttl * 1000))
                    await pipe.execute()
            await self._client.srem(self._pending_key, conversation_id)  # after: a superset meanwhile
            return True
        except Exception as exc:
            log.warning("finalising conversation %r failed (will retry): %s", conversation_id, exc)
            with contextlib.suppress(Exception):
                await self._client.sadd(self._pending_key, conversation_id)  # before the keys persist
                async with self._client.pipeline(transaction=True) as pipe:
                    for key in keys:
                        pipe.persist(key)
                    await pipe.execute()
            return False

    async def finalize_pending(self) -> int:
        """Retry every failed finalisation now; returns how many are still pending."""
        pending = await self._client.smembers(self._pending_key)
        for raw in pending:
            await self._finalize(raw.decode())
        count: int = await self._client.scard(self._pending_key)
        return count

    async def _retry_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.retry_interval)
            with contextlib.suppress(Exception):
                await self.finalize_pending()

    async def drain(self) -> None:
        """Wait for background finalisations started so far (tests, shutdown).

        Finished tasks are dropped here too, not only by their done callback: a callback is
        scheduled on the task's own loop, which may be gone (a test's loop), and a finished task
        left in the set made this loop spin forever (seen as a hung CI run)."""
        while True:
            done = {task for task in self._tasks if task.done()}
            self._tasks -= done
            if not self._tasks:
                return
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- reads -----------------------------------------------------------------------------------------

    def _decode(self, conversation_id: str, entries: list[Any]) -> list[StoredEvent]:
        out: list[StoredEvent] = []
        replace = msgspec.structs.replace
        for entry_id, fields in entries:
            seq = seq_of_stream_id(entry_id)
            out.append(
                StoredEvent(
                    seq=seq,
                    conversation_id=conversation_id,
                    event=replace(unpack_event(fields[b"d"]), seq=seq),
                    received_at=float(fields[b"t"]),
                )
            )
        return out

    async def _read_redis(self, conversation_id: str, after_seq: int, limit: int | None) -> list[StoredEvent]:
        stream = self._keys(conversation_id)[0]
        entries = await self._client.xrange(stream, min=stream_id_of_seq(after_seq + 1), max="+", count=limit)
        return self._decode(conversation_id, entries)

    async def read(
        self, conversation_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        validate_conversation_id(conversation_id)
        bounds = read_range(after_seq, limit)
        if bounds is None:
            return []
        try:
            return await self._read(conversation_id, *bounds)
        except UNAVAILABLE as exc:
            raise BackendUnavailable("redis", str(exc)) from exc

    async def _read(self, conversation_id: str, after_seq: int, limit: int | None) -> list[StoredEvent]:
        stream = self._keys(conversation_id)[0]
        result: list[StoredEvent] = []
        cursor = after_seq
        if self.archive is not None:
            head = await self._client.xrange(stream, min="-", max="+", count=1)
            first_in_redis = seq_of_stream_id(head[0][0]) if head else None
            if first_in_redis is None or first_in_redis > cursor + 1:
                rows = await self.archive.read(conversation_id, cursor, limit)
                if first_in_redis is not None:
                    rows = [r for r in rows if r.seq < first_in_redis]
                result.extend(rows)
                if rows:
                    cursor = rows[-1].seq
                if limit is not None:
                    limit -= len(rows)
                    if limit <= 0:
                        return result
        page = await self._read_redis(conversation_id, cursor, limit)
        if page and page[0].seq != cursor + 1:
            raise EventsExpired(conversation_id, cursor, page[0].seq)
        result.extend(page)
        return result

    async def _subscribe(self, conversation_id: str, after_seq: int) -> AsyncIterator[StoredEvent]:
        cursor = min(max(after_seq, 0), MAX_SEQ)  # a stream id holds 64 bits; nothing follows MAX_SEQ
        stream = self._keys(conversation_id)[0]
        while True:  # replay (archive + stream) until caught up
            page = await self.read(conversation_id, cursor, 1000)
            for stored in page:
                cursor = stored.seq
                yield stored
            if len(page) < 1000:
                break
        while True:
            try:
                reply = await self._client.xread({stream: stream_id_of_seq(cursor)}, count=1000, block=1000)
            except UNAVAILABLE as exc:
                raise BackendUnavailable("redis", str(exc)) from exc
            if not reply:
                continue
            page = self._decode(conversation_id, reply[0][1])
            if page and page[0].seq != cursor + 1:  # trimmed past us while we were away
                page = await self.read(conversation_id, cursor, 1000)
            for stored in page:
                if stored.seq > cursor:
                    cursor = stored.seq
                    yield stored

    def subscribe(self, conversation_id: str, after_seq: int = 0) -> AsyncIterator[StoredEvent]:
        validate_conversation_id(conversation_id)
        return self._subscribe(conversation_id, after_seq)

    # -- conversations ---------------------------------------------------------------------------------

    async def _info(self, conversation_id: str) -> ConversationInfo | None:
        raw = await self._client.hmget(self._keys(conversation_id)[1], INFO_FIELDS)
        return info_from(conversation_id, raw)

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        validate_conversation_id(conversation_id)
        try:
            info = await self._info(conversation_id)
        except UNAVAILABLE as exc:
            raise BackendUnavailable("redis", str(exc)) from exc
        if info is None and self.archive is not None:
            info = await self.archive.get_conversation(conversation_id)
        return info

    async def _listed(self) -> dict[str, ConversationInfo]:
        """Every conversation the index lists whose keys still exist; drops expired ones from it."""
        index = self._index_key("")
        ids = [raw.decode() for raw in await self._client.zrange(index, 0, -1)]
        async with self._client.pipeline(transaction=False) as pipe:
            for cid in ids:
                pipe.hmget(self._keys(cid)[1], INFO_FIELDS)
            rows = await pipe.execute()
        infos: dict[str, ConversationInfo] = {}
        stale: list[str] = []
        for cid, raw in zip(ids, rows, strict=True):
            info = info_from(cid, raw)
            if info is None:
                stale.append(cid)
            else:
                infos[cid] = info
        if stale:
            await self._client.zrem(index, *stale)
        return infos

    async def list_conversations(self) -> list[ConversationInfo]:
        try:
            infos = await self._listed()
        except UNAVAILABLE as exc:
            raise BackendUnavailable("redis", str(exc)) from exc
        if self.archive is not None:
            for info in await self.archive.list_conversations():
                infos.setdefault(info.id, info)
        return sorted(infos.values(), key=lambda i: i.last_activity, reverse=True)

    async def delete(self, conversation_id: str) -> bool:
        validate_conversation_id(conversation_id)
        stream, meta, ids = self._keys(conversation_id)
        try:
            removed = int(
                await self._client.delete(
                    stream,
                    meta,
                    ids,
                    f"{self.prefix}:{{{conversation_id}}}:snap",
                    self._floor_key(conversation_id),
                )
            )
            await self._client.zrem(self._index_key(conversation_id), conversation_id)
            await self._client.srem(self._pending_key, conversation_id)
        except UNAVAILABLE as exc:
            raise BackendUnavailable("redis", str(exc)) from exc
        if self.archive is not None:
            removed += int(await self.archive.delete(conversation_id))
        return removed > 0

    async def save_snapshot(self, conversation_id: str, snapshot: Snapshot) -> None:
        validate_conversation_id(conversation_id)
        if self.archive is not None:
            await self.archive.save_snapshot(conversation_id, snapshot)
            return
        key = f"{self.prefix}:{{{conversation_id}}}:snap"
        current = await self.load_snapshot(conversation_id, snapshot.name)
        if current is not None and current.seq > snapshot.seq:
            return
        await self._client.hset(key, snapshot.name, msgspec.msgpack.encode(snapshot))
        await self._client.pexpire(key, int(self.ttl * 1000))

    async def load_snapshot(self, conversation_id: str, name: str) -> Snapshot | None:
        validate_conversation_id(conversation_id)
        if self.archive is not None:
            return await self.archive.load_snapshot(conversation_id, name)
        raw = await self._client.hget(f"{self.prefix}:{{{conversation_id}}}:snap", name)
        return None if raw is None else msgspec.msgpack.decode(raw, type=Snapshot)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            with contextlib.suppress(BaseException):
                await self._retry
        with contextlib.suppress(Exception):
            await self.drain()
        await self._client.aclose()
        if self.archive is not None:
            await self.archive.close()
