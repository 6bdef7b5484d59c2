"""Redis specifics: seq <-> stream id, TTLs, finalisation into Postgres, trimming and resume; on one
Redis and on a local 3-master Redis Cluster alike."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from convograph.events import Text
from convograph.store import EventsExpired, open_event_log
from convograph.store.redis import RedisEventLog, seq_of_stream_id, stream_id_of_seq
from convograph.testing import collect, sample_run


def texts(n: int, tag: str) -> list[Text]:
    return [Text(run_id="r", id="t", content=f"{tag}{i}", event_id=f"{tag}{i}") for i in range(n)]


async def open_redis(url: str) -> RedisEventLog:
    log = await open_event_log(url)
    assert isinstance(log, RedisEventLog)
    return log


@pytest.fixture(params=["redis", "redis-cluster"])
def redis_at(request: pytest.FixtureRequest) -> str:
    """``<redis:// or redis+cluster:// URL>?prefix=<fresh prefix>``: more options follow with ``&``."""
    if request.param == "redis":
        return f"{request.getfixturevalue('redis_url')}?prefix={request.getfixturevalue('redis_prefix')}"
    return f"{request.getfixturevalue('redis_cluster_url')}?prefix=cg{uuid.uuid4().hex[:12]}"


def test_stream_ids_are_seqs() -> None:
    assert stream_id_of_seq(42) == "42-0"
    assert seq_of_stream_id(b"42-0") == 42
    assert seq_of_stream_id("7-0") == 7


async def test_entries_are_stored_under_seq_ids_with_a_ttl(redis_at: str) -> None:
    log = await open_redis(f"{redis_at}&ttl=3600")
    try:
        await log.append("c", texts(3, "a"))
        stream = f"{log.prefix}:{{c}}:stream"
        ids = [entry_id for entry_id, _ in await log._client.xrange(stream)]
        assert ids == [b"1-0", b"2-0", b"3-0"]
        assert 0 < await log._client.pttl(stream) <= 3_600_000
        finished = await open_redis(f"{redis_at}&finalized_ttl=30")
        await finished.append("done", sample_run("r"))
        await finished.drain()
        assert 0 < await finished._client.pttl(f"{log.prefix}:{{done}}:stream") <= 30_000
        await finished.close()
    finally:
        await log.close()


async def test_without_archive_a_trimmed_range_is_not_resumable(redis_at: str) -> None:
    log = await open_redis(f"{redis_at}&maxlen=100")
    try:
        for b in range(10):
            await log.append("c", texts(100, f"b{b}-"))
        with pytest.raises(EventsExpired, match="not resumable") as info:
            await log.read("c", after_seq=0)
        assert info.value.first_available is not None
        assert info.value.first_available > 1
        tail = await log.read("c", after_seq=990)
        assert [s.seq for s in tail] == list(range(991, 1001))
    finally:
        await log.close()


async def test_finalised_conversation_is_read_from_postgres_after_expiry(
    redis_at: str, postgres_url: str
) -> None:
    log = await open_redis(f"{redis_at}&finalize={postgres_url}")
    assert log.archive is not None
    try:
        events = sample_run("run-1")
        await log.append("c", events)
        await log.drain()
        archived = await log.archive.read("c")
        assert [s.seq for s in archived] == list(range(1, len(events) + 1))
        assert [m.id for m in await log.archive.message_path("c")] == ["run-1-user:user", "run-1"]
        # Expiry: the Redis keys disappear; reads, listing and resume come from Postgres.
        await log._client.delete(*[k async for k in log._client.scan_iter(match=f"{log.prefix}:{{c}}*")])
        assert [s.seq for s in await log.read("c")] == list(range(1, len(events) + 1))
        info = await log.get_conversation("c")
        assert info is not None
        assert info.status == "complete"
        assert "c" in {i.id for i in await log.list_conversations()}
        # A new run continues the seqs and still deduplicates event ids already archived.
        again = await log.append("c", [*events[:2], *sample_run("run-2", user=None)])
        assert again.duplicates == 2
        assert again.first_seq == len(events) + 1
        stream = log.subscribe("c", after_seq=len(events) - 1)
        got = await collect(stream, 1 + again.accepted)
        assert [s.seq for s in got] == list(range(len(events), len(events) + 1 + again.accepted))
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await log.close()


async def test_long_inflight_stream_is_archived_and_trimmed_but_fully_readable(
    redis_at: str, postgres_url: str
) -> None:
    log = await open_redis(f"{redis_at}&maxlen=200&finalize={postgres_url}")
    try:
        for b in range(10):
            await log.append("c", texts(100, f"b{b}-"))
            await log.drain()
        length = await log._client.xlen(f"{log.prefix}:{{c}}:stream")
        assert length < 1000  # trimmed after archiving
        stored = await log.read("c")
        assert [s.seq for s in stored] == list(range(1, 1001))
        assert [s.event.event_id for s in stored][:2] == ["b0-0", "b0-1"]
        replay = log.subscribe("c", after_seq=0)
        got = await collect(replay, 1000)
        assert [s.seq for s in got] == list(range(1, 1001))
        await replay.aclose()  # type: ignore[attr-defined]
    finally:
        await log.close()


async def test_live_tail_through_xread_block(redis_at: str) -> None:
    log = await open_redis(redis_at)
    try:
        stream = log.subscribe("c")
        task = asyncio.create_task(collect(stream, 300, timeout=20))
        for b in range(3):
            await log.append("c", texts(100, f"b{b}-"))
            await asyncio.sleep(0.01)
        assert [s.seq for s in await task] == list(range(1, 301))
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await log.close()


async def test_seqs_never_restart_after_the_keys_expire(redis_at: str) -> None:
    log = await open_redis(redis_at)
    try:
        await log.append("c", texts(5, "a"))
        stream, meta, ids = log._keys("c")
        assert await log._client.pttl(log._floor_key("c")) > 0
        await log._client.delete(stream, meta, ids)  # what expiry does
        again = await log.append("c", texts(2, "b"))
        assert (again.first_seq, again.last_seq) == (6, 7)
        assert [s.seq for s in await log.read("c", after_seq=5)] == [6, 7]
    finally:
        await log.close()
