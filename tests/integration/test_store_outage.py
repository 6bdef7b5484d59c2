"""Backend outages against real servers that the test starts, crashes and restarts.

Checks: a down backend gives `BackendUnavailable` (fast, naming the backend); every acknowledged
event survives the crash; with a spool, appends made during the outage are accepted and drain, in
order, once the server is back.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from convograph.events import Text
from convograph.store import BackendUnavailable, EventLog, open_event_log
from convograph.store.spool import SpoolingEventLog

# Fixture types live in tests/integration/conftest.py (not importable: tests/integration is no package).
RedisServer = Any
PostgresServer = Any


def batch(tag: str, n: int = 20) -> list[Text]:
    return [Text(run_id="r", id="t", content=f"{tag}-{i} ", event_id=f"{tag}-{i}") for i in range(n)]


async def wait_drained(log: SpoolingEventLog, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while await log.pending_count():
        if time.monotonic() > deadline:
            raise TimeoutError(f"spool still holds {await log.pending_count()} events")
        await asyncio.sleep(0.1)


async def check_all_present(log: EventLog, cid: str, tags: list[str], n: int = 20) -> None:
    stored = await log.read(cid)
    assert [s.seq for s in stored] == list(range(1, len(tags) * n + 1))
    assert [s.event.event_id for s in stored] == [f"{tag}-{i}" for tag in tags for i in range(n)]


async def test_redis_outage_errors_then_recovers_without_losing_acknowledged_events(
    redis_server: RedisServer,
) -> None:
    log = await open_event_log(redis_server.url)
    try:
        await log.append("c", batch("a"))
        redis_server.stop()
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="redis"):
            await log.append("c", batch("lost"))
        with pytest.raises(BackendUnavailable):
            await log.read("c")
        assert time.monotonic() - started < 15
        redis_server.start()
        await log.append("c", batch("b"))
        await check_all_present(log, "c", ["a", "b"])
    finally:
        await log.close()


async def test_redis_outage_with_spool_accepts_and_drains_in_order(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    log = await open_event_log(f"{redis_server.url}?spool={tmp_path / 'spool.db'}")
    assert isinstance(log, SpoolingEventLog)
    log.retry_interval = 0.2
    try:
        first = await log.append("c", batch("a"))
        assert not first.spooled
        redis_server.stop()
        during = await log.append("c", batch("b"))
        during2 = await log.append("c", batch("c"))
        assert during.spooled
        assert during2.spooled
        assert await log.pending_count() == 40
        redis_server.start()
        await wait_drained(log)
        after = await log.append("c", batch("d"))
        assert not after.spooled
        assert after.first_seq == 61
        await check_all_present(log, "c", ["a", "b", "c", "d"])
    finally:
        await log.close()


async def test_spool_survives_a_restart_of_our_process(redis_server: RedisServer, tmp_path: Path) -> None:
    spool = tmp_path / "spool.db"
    log = await open_event_log(f"{redis_server.url}?spool={spool}")
    await log.append("c", batch("a"))
    redis_server.stop()
    assert (await log.append("c", batch("b"))).spooled
    await log.close()  # the process "exits" while the backend is down
    redis_server.start()
    reopened = await open_event_log(f"{redis_server.url}?spool={spool}")
    assert isinstance(reopened, SpoolingEventLog)
    try:
        await wait_drained(reopened)
        await check_all_present(reopened, "c", ["a", "b"])
    finally:
        await reopened.close()


async def test_postgres_crash_errors_then_recovers_without_losing_acknowledged_events(
    postgres_server: PostgresServer,
) -> None:
    log = await open_event_log(f"{postgres_server.url}?connect_timeout=1")
    try:
        await log.append("c", batch("a"))
        postgres_server.stop("immediate")
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="postgres"):
            await log.append("c", batch("lost"))
        assert time.monotonic() - started < 15
        postgres_server.start()
        await log.append("c", batch("b"))
        await check_all_present(log, "c", ["a", "b"])
    finally:
        await log.close()


async def test_postgres_outage_with_spool_accepts_and_drains(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    # The cluster is shared by this module's tests: each uses its own conversation id.
    log = await open_event_log(f"{postgres_server.url}?connect_timeout=1&spool={tmp_path / 'spool.db'}")
    assert isinstance(log, SpoolingEventLog)
    log.retry_interval = 0.2
    try:
        await log.append("spooled", batch("a"))
        postgres_server.stop("immediate")
        assert (await log.append("spooled", batch("b"))).spooled
        assert (await log.append("spooled", batch("spooled"))).spooled
        postgres_server.start()
        await wait_drained(log)
        await check_all_present(log, "spooled", ["a", "b", "spooled"])
    finally:
        await log.close()


@pytest.mark.parametrize("redis_kind", ["redis", "redis-cluster"])
async def test_redis_finalisation_waits_for_postgres_and_keeps_the_stream(
    redis_kind: str, postgres_server: PostgresServer, request: pytest.FixtureRequest
) -> None:
    from convograph.store.redis import RedisEventLog
    from convograph.testing import sample_run

    if redis_kind == "redis":
        redis_at = request.getfixturevalue("redis_server").url + "?"
    else:  # the pending set has its own slot on a cluster: written before, cleared after the keys
        redis_at = f"{request.getfixturevalue('redis_cluster_url')}?prefix=cg{uuid.uuid4().hex[:12]}&"
    cid = f"fin-{redis_kind}"  # one Postgres per module: a conversation id per case
    log = await open_event_log(f"{redis_at}finalize={postgres_server.url}%3Fconnect_timeout%3D1")
    assert isinstance(log, RedisEventLog)
    assert log.archive is not None
    try:
        events = sample_run("run-1")
        await log.append(cid, events[:1])  # a new conversation's first append asks Postgres for its seq
        postgres_server.stop("immediate")
        await log.append(cid, events[1:])  # the run ends: finalisation fails, Postgres is down
        await log.drain()
        ttl = await log._client.pttl(f"{log.prefix}:{{{cid}}}:stream")
        assert ttl == -1  # persisted while finalisation is pending
        assert await log._client.sismember(f"{log.prefix}:finalize", cid)
        postgres_server.start()
        deadline = time.monotonic() + 30
        while await log.finalize_pending():  # the pool reconnects with backoff
            assert time.monotonic() < deadline, "finalisation did not complete after Postgres returned"
            await asyncio.sleep(0.2)
        archived = await log.archive.read(cid)
        assert [s.event.event_id for s in archived] == [e.event_id for e in events]
        assert 0 < await log._client.pttl(f"{log.prefix}:{{{cid}}}:stream") <= log.finalized_ttl * 1000
    finally:
        await log.close()


@pytest.mark.parametrize("backend", ["redis", "postgres"])
async def test_start_while_the_backend_is_down_with_a_spool(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    server = request.getfixturevalue("redis_server" if backend == "redis" else "postgres_server")
    if backend == "redis":
        server.stop()
    else:
        server.stop("immediate")
    options = "connect_timeout=1&" if backend == "postgres" else ""
    log = await open_event_log(f"{server.url}?{options}spool={tmp_path / 'spool.db'}")
    assert isinstance(log, SpoolingEventLog)
    log.retry_interval = 0.2
    try:
        assert (await log.append("cold-start", batch("a"))).spooled
        server.start()
        await wait_drained(log)
        await check_all_present(log, "cold-start", ["a"])
    finally:
        await log.close()


def test_a_live_stream_ends_when_its_event_log_fails_and_resumes_after(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The conversation's hub follows the log; when that fails (the backend went away), its streams
    used to stall forever on heartbeats. Now they end with ``stream_end`` ("unavailable") and the
    client's reconnect resumes once the backend is back."""
    import httpx
    from tests.support.server import running_server

    from convograph.client.sse import SSEDecoder

    with (
        running_server(
            tmp_path / "data",
            "--database-url",
            redis_server.url,
            "--no-intelligence",
            env={"CONVOGRAPH_SSE_HEARTBEAT_SECONDS": "0.3"},
        ) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        http.post(
            "/v1/conversations/down-1/events", json={"type": "text", "runId": "r", "id": "t", "content": "a"}
        )
        decoder = SSEDecoder()
        seen: list[Any] = []
        with http.stream(
            "GET", "/v1/conversations/down-1/stream", timeout=httpx.Timeout(10, read=30)
        ) as response:
            chunks = response.iter_raw()
            while not any(m.id == "1" for m in seen):
                seen.extend(decoder.feed(next(chunks)))
            redis_server.stop()
            deadline = time.monotonic() + 30
            for chunk in chunks:  # until the response ends
                seen.extend(decoder.feed(chunk))
                assert time.monotonic() < deadline, "the stream never ended"
        assert seen[-1].event == "stream_end"
        assert '"reason":"unavailable"' in seen[-1].data
        redis_server.start()
        http.post(
            "/v1/conversations/down-1/events", json={"type": "text", "runId": "r", "id": "t", "content": "b"}
        )
        resumed: list[Any] = []
        for _ in range(5):  # as a client does: reconnect while the log is still coming back
            with http.stream(
                "GET", "/v1/conversations/down-1/stream", headers={"Last-Event-ID": "1"}
            ) as response:
                decoder = SSEDecoder()
                for chunk in response.iter_raw():
                    resumed.extend(decoder.feed(chunk))
                    if resumed:
                        break
            if resumed[0].event != "stream_end":
                break
            resumed = []
            time.sleep(0.5)
        assert [m.id for m in resumed] == ["2"], resumed
