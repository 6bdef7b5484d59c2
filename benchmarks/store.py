"""Event log backends: batched append throughput, append flatness, Redis live-tail latency, rebuild.

    python -m benchmarks.store            # full run (about 1-2 minutes)
    python -m benchmarks.store --quick    # smoke run (seconds)
    python -m benchmarks.store --only sqlite,redis
    python -m benchmarks.store --only redis,redis-cluster   # one Redis beside a 3-master Redis Cluster

Targets (issue 5): batched append with 1k-event batches — SQLite >= 200k events/s, Postgres >= 50k/s,
Redis >= 100k/s; append cost independent of conversation length; live-tail delivery p99 < 10 ms
through Redis at 10k events/s; a 1M-event conversation loads (rebuild with snapshots) in < 3 s.

Services: Postgres and Redis on 127.0.0.1 (scripts/ensure-services). Postgres runs in a throwaway
database, Redis under a throwaway key prefix; both are removed afterwards. ``redis-cluster`` starts a
local 3-master Redis Cluster from the system ``redis-server`` on free ports (or uses
``$CONVOGRAPH_BENCH_REDIS_CLUSTER``, a ``redis+cluster://`` URL) and compares it with the single Redis
side by side: batched and one-event appends, the conversation list, the live tail. Every event carries an
``eventId`` (so the dedup index is part of the cost) and SQLite runs with ``synchronous=FULL``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from convograph.events import Event, HarnessEnd, HarnessStart, Text, ToolCall, ToolResult, pack_event
from convograph.store import EventLog, open_event_log
from convograph.store.snapshots import FLAT_GRAPH, rebuild, save_snapshot

PG_ADMIN = os.environ.get("CONVOGRAPH_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("CONVOGRAPH_BENCH_REDIS", "redis://127.0.0.1:6379/0")
REDIS_CLUSTER = os.environ.get("CONVOGRAPH_BENCH_REDIS_CLUSTER", "")
BATCH = 1000


def make_events(n: int, tag: str = "e") -> list[Event]:
    """A realistic flat stream: runs of (5 text deltas, tool call, tool result) x 5, all with eventIds."""
    out: list[Event] = []
    run = 0
    while len(out) < n:
        rid = f"run-{run}"
        out.append(HarnessStart(run_id=rid, agent_id="agent", event_id=f"{tag}{len(out)}"))
        for step in range(5):
            for delta in range(5):
                out.append(
                    Text(
                        run_id=rid,
                        id=f"{rid}:t{step}",
                        content=f"chunk {delta} of step {step}. ",
                        event_id=f"{tag}{len(out)}",
                    )
                )
            out.append(
                ToolCall(
                    run_id=rid,
                    id=f"{rid}:c{step}",
                    name="exec",
                    input={"cmd": f"echo {step}"},
                    event_id=f"{tag}{len(out)}",
                )
            )
            out.append(
                ToolResult(
                    run_id=rid,
                    id=f"{rid}:c{step}",
                    name="exec",
                    output=f"out {step}\n",
                    event_id=f"{tag}{len(out)}",
                )
            )
        out.append(HarnessEnd(run_id=rid, agent_id="agent", reason="stop", event_id=f"{tag}{len(out)}"))
        run += 1
    return out[:n]


def batches(events: list[Event], size: int = BATCH) -> list[list[Event]]:
    return [events[i : i + size] for i in range(0, len(events), size)]


class Backend:
    def __init__(self, name: str, open_log: Callable[[], Any], cleanup: Callable[[], Any]) -> None:
        self.name = name
        self.open = open_log
        self.cleanup = cleanup


def make_backends(tmp: Path) -> dict[str, Backend]:
    pg_db = f"convograph_bench_{uuid.uuid4().hex[:8]}"
    prefix = f"cgbench-{uuid.uuid4().hex[:8]}"

    async def open_pg() -> EventLog:
        import psycopg

        async with await psycopg.AsyncConnection.connect(PG_ADMIN, autocommit=True) as conn:
            await conn.execute(f'CREATE DATABASE "{pg_db}"')
        return await open_event_log(PG_ADMIN.rsplit("/", 1)[0] + f"/{pg_db}")

    async def drop_pg() -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(PG_ADMIN, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{pg_db}" WITH (FORCE)')

    async def drop_redis() -> None:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(REDIS)
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=5000)]
        for i in range(0, len(keys), 1000):
            await client.delete(*keys[i : i + 1000])
        await client.aclose()

    async def nothing() -> None:
        return None

    return {
        "sqlite": Backend("SQLite", lambda: open_event_log(f"sqlite:///{tmp / 'events.db'}"), nothing),
        "postgres": Backend("Postgres", open_pg, drop_pg),
        "redis": Backend("Redis", lambda: open_event_log(f"{REDIS}?prefix={prefix}&ttl=3600"), drop_redis),
    }


async def throughput(log: EventLog, events: list[Event], producers: int) -> float:
    """Events/s appending 1k-event batches; ``producers`` concurrent writers, one conversation each."""
    chunks = batches(events)
    per = [chunks[i::producers] for i in range(producers)]
    conv = uuid.uuid4().hex[:8]

    async def produce(i: int, mine: list[list[Event]]) -> None:
        for chunk in mine:
            await log.append(f"tp-{conv}-{i}", chunk)

    started = time.perf_counter()
    await asyncio.gather(*(produce(i, mine) for i, mine in enumerate(per)))
    return len(events) / (time.perf_counter() - started)


async def flatness(log: EventLog, lengths: list[int], probe_batches: int) -> list[tuple[int, float, float]]:
    """(length, history MB, median ms per 1k-event append) at each conversation length."""
    cid = f"flat-{uuid.uuid4().hex[:8]}"
    filled = 0
    out = []
    history_bytes = 0
    for length in lengths:
        if length > filled:
            fill = make_events(length - filled, tag=f"f{filled}-")
            for chunk in batches(fill, 5000):
                await log.append(cid, chunk)
            history_bytes += sum(len(pack_event(e)) for e in fill)
            filled = length
        times = []
        for b in range(probe_batches):
            probe = make_events(BATCH, tag=f"p{length}-{b}-")
            started = time.perf_counter()
            await log.append(cid, probe)
            times.append((time.perf_counter() - started) * 1000)
            filled += BATCH
            history_bytes += sum(len(pack_event(e)) for e in probe)
        out.append((length, history_bytes / 1e6, statistics.median(times)))
    return out


async def live_tail(
    seconds: float, rate: int = 10_000, per_batch: int = 100, redis_url: str = REDIS
) -> tuple[int, float, float, float]:
    """Redis: producer at ``rate`` events/s; subscriber latency from send to delivery (ms)."""
    prefix = f"cgbench-tail-{uuid.uuid4().hex[:8]}"
    producer = await open_event_log(f"{redis_url}?prefix={prefix}&ttl=600")
    consumer = await open_event_log(f"{redis_url}?prefix={prefix}&ttl=600")
    total = int(seconds * rate)
    latencies: list[float] = []
    stream = consumer.subscribe("tail")

    async def consume() -> None:
        async for stored in stream:
            sent = stored.event.timestamp
            assert isinstance(sent, float)
            latencies.append((time.time() - sent) * 1000)
            if len(latencies) >= total:
                return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    interval = per_batch / rate
    start = time.perf_counter()
    for b in range(total // per_batch):
        target = start + b * interval
        delay = target - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        now = time.time()
        await producer.append(
            "tail",
            [
                Text(run_id="r", id="t", content="x" * 40, timestamp=now, event_id=f"{b}-{i}")
                for i in range(per_batch)
            ],
        )
    await asyncio.wait_for(task, 30)
    await stream.aclose()  # type: ignore[attr-defined]
    achieved = total / (time.perf_counter() - start)
    await producer.delete("tail")
    await producer.close()
    await consumer.close()
    latencies.sort()
    q = statistics.quantiles(latencies, n=100)
    return int(achieved), q[49], q[98], latencies[-1]


async def rebuild_bench(tmp: Path, n: int) -> dict[str, float]:
    log = await open_event_log(f"sqlite:///{tmp / 'rebuild.db'}")
    events = make_events(n, tag="r")
    for chunk in batches(events, 10_000):
        await log.append("big", chunk)
    del events
    started = time.perf_counter()
    full = await rebuild(log, "big", FLAT_GRAPH, snapshot_every=None)
    full_s = time.perf_counter() - started
    started = time.perf_counter()
    await save_snapshot(log, "big", FLAT_GRAPH, full.state, full.seq)
    snap_s = time.perf_counter() - started
    snapshot = await log.load_snapshot("big", FLAT_GRAPH.name)
    assert snapshot is not None
    tail = make_events(10_000, tag="tail")
    for chunk in batches(tail, 1000):
        await log.append("big", chunk)
    started = time.perf_counter()
    fast = await rebuild(log, "big", FLAT_GRAPH, snapshot_every=None)
    fast_s = time.perf_counter() - started
    assert fast.seq == n + 10_000
    assert fast.replayed == 10_000
    nodes = len(fast.state)
    await log.close()
    return {
        "events": n,
        "nodes": nodes,
        "full_s": full_s,
        "snapshot_write_s": snap_s,
        "snapshot_mb": len(snapshot.data) / 1e6,
        "with_snapshot_s": fast_s,
    }


async def one_event_appends(log: EventLog, writers: int, per_writer: int) -> float:
    """Appends/s when each append carries one event: ``writers`` conversations, one append in flight
    each (how a hook that posts one event per request, one request per session, writes)."""
    conv = uuid.uuid4().hex[:8]

    async def write(w: int) -> None:
        for i in range(per_writer):
            await log.append(f"one-{conv}-{w}", [Text(run_id="r", id="t", content="x", event_id=f"{i}")])

    started = time.perf_counter()
    await asyncio.gather(*(write(w) for w in range(writers)))
    return writers * per_writer / (time.perf_counter() - started)


async def listing_ms(log: EventLog, conversations: int, repeats: int) -> float:
    """Median ms of `list_conversations` over ``conversations`` conversations (created first)."""
    conv = uuid.uuid4().hex[:8]
    for start in range(0, conversations, 100):
        await asyncio.gather(
            *(
                log.append(f"ls-{conv}-{i}", [Text(run_id="r", id="t", content="x")])
                for i in range(start, min(start + 100, conversations))
            )
        )
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        listed = await log.list_conversations()
        times.append((time.perf_counter() - started) * 1000)
        assert len(listed) >= conversations
    return statistics.median(times)


def script_usec(ports: list[int]) -> float:
    """Microseconds Redis spent in EVALSHA (our append script) on these nodes since the last call
    (INFO commandstats, then CONFIG RESETSTAT)."""
    import redis

    total = 0.0
    for port in ports:
        client = redis.Redis(port=port)
        try:
            total += float(client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))
            client.config_resetstat()
        finally:
            client.close()
    return total


async def append_costs(log: EventLog, ports: list[int], appends: int) -> tuple[float, float]:
    """(client CPU µs, Redis µs summed over ``ports``) per one-event append, 32 writers."""
    script_usec(ports)
    cpu = time.process_time()
    await one_event_appends(log, 32, appends // 32)
    client_us = (time.process_time() - cpu) / appends * 1e6
    return client_us, script_usec(ports) / appends if ports else float("nan")


async def redis_side_by_side(quick: bool) -> None:
    """One Redis and a 3-master Redis Cluster, the same measures interleaved round by round (median
    of the rounds). Both are started here from the same ``redis-server`` with the same settings
    (cluster mode aside), unless ``$CONVOGRAPH_BENCH_REDIS_CLUSTER`` names a cluster (then the single
    node is ``$CONVOGRAPH_BENCH_REDIS``)."""
    from tests.support.redis_cluster import LocalRedisCluster

    started: list[LocalRedisCluster] = []
    ports: dict[str, list[int]] = {}  # nodes started here: their script time is read too
    if REDIS_CLUSTER:
        urls = {"Redis, 1 node": REDIS, "Redis Cluster, 3 masters": REDIS_CLUSTER}
    else:
        single, cluster = LocalRedisCluster(masters=1), LocalRedisCluster(masters=3)
        started += [single, cluster]
        urls = {"Redis, 1 node": single.start_single(), "Redis Cluster, 3 masters": cluster.url}
        cluster.start()
        ports = {"Redis, 1 node": single.ports, "Redis Cluster, 3 masters": cluster.ports}
    prefix = f"cgbench-side-{uuid.uuid4().hex[:8]}"
    n = 20_000 if quick else 100_000
    events = make_events(n)
    measures: dict[str, Callable[[EventLog], Any]] = {
        "1k-event batches, 1 writer (events/s)": lambda log: throughput(log, events, 1),
        "1k-event batches, 4 writers (events/s)": lambda log: throughput(log, events, 4),
        "1k-event batches, 16 writers (events/s)": lambda log: throughput(log, events, 16),
        "1-event appends, 32 writers (appends/s)": lambda log: one_event_appends(
            log, 32, 50 if quick else 300
        ),
        "list 1,000 conversations (ms)": lambda log: listing_ms(log, 1000, 5),
    }
    results: dict[tuple[str, str], list[float]] = {}
    tails: dict[str, list[tuple[int, float, float, float]]] = {}
    try:
        logs = {name: await open_event_log(f"{url}?prefix={prefix}&ttl=3600") for name, url in urls.items()}
        for _ in range(1 if quick else 3):
            for measure, run in measures.items():
                for name, log in logs.items():
                    results.setdefault((measure, name), []).append(await run(log))
            for name, log in logs.items():
                client_us, server_us = await append_costs(log, ports.get(name, []), 3200)
                results.setdefault(("client CPU per 1-event append (µs)", name), []).append(client_us)
                results.setdefault(("Redis time per 1-event append, all nodes (µs)", name), []).append(
                    server_us
                )
            for name, url in urls.items():
                tails.setdefault(name, []).append(await live_tail(1.0 if quick else 3.0, redis_url=url))
        for log in logs.values():
            await log.close()
    finally:
        for server in started:
            server.stop()
    names = list(urls)
    print(f"\n## Redis: one node beside a Redis Cluster (median of rounds; load {os.getloadavg()[0]:.1f})")
    print(f"| measure | {' | '.join(names)} | cluster / single |")
    print("| --- | ---: | ---: | ---: |")
    for measure in dict.fromkeys(key for key, _ in results):
        single_value, cluster_value = (statistics.median(results[(measure, name)]) for name in names)
        print(
            f"| {measure} | {single_value:,.1f} | {cluster_value:,.1f} | {cluster_value / single_value:.2f}x |"
        )
    for label, index in (("p50", 1), ("p99", 2)):
        single_value, cluster_value = (statistics.median(t[index] for t in tails[name]) for name in names)
        print(
            f"| live tail {label} at 10k events/s (ms) | {single_value:.2f} | {cluster_value:.2f} "
            f"| {cluster_value / single_value:.2f}x |"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds")
    parser.add_argument(
        "--only", default="sqlite,postgres,redis,rebuild", help="comma-separated parts (backends, rebuild)"
    )
    args = parser.parse_args()
    quick = args.quick
    wanted = [b.strip() for b in args.only.split(",") if b.strip()]
    targets = {"sqlite": 200_000, "postgres": 50_000, "redis": 100_000}
    n = 20_000 if quick else 200_000
    lengths = [0, 20_000] if quick else [0, 100_000, 1_000_000]
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"# benchmarks.store  python {platform.python_version()}  {platform.machine()}  "
        f"cpus={os.cpu_count()}  load={load}  quick={quick}"
    )
    with tempfile.TemporaryDirectory(prefix="cgbench-") as tmpdir:
        tmp = Path(tmpdir)
        backends = make_backends(tmp)
        events = make_events(n)
        selected = [w for w in wanted if w in backends]
        if selected:
            print("\n## Batched append, 1k-event batches (events/s; ratio to target)")
            print("| backend | 1 producer | 4 producers | target | ratio (best / target) |")
            print("| --- | ---: | ---: | ---: | ---: |")
        flat_rows: dict[str, list[tuple[int, float, float]]] = {}
        for key in selected:
            backend = backends[key]
            log = await backend.open()
            try:
                one = await throughput(log, events, 1)
                four = await throughput(log, events, 4)
                best = max(one, four)
                print(
                    f"| {backend.name} | {one:,.0f} | {four:,.0f} | {targets[key]:,} | {best / targets[key]:.2f}x |"
                )
                if key in ("sqlite", "postgres", "redis"):
                    flat_rows[key] = await flatness(
                        log, lengths if key != "redis" else lengths[:2], 5 if quick else 10
                    )
            finally:
                await log.close()
                await backend.cleanup()
        if flat_rows:
            print("\n## Append cost vs conversation length (median ms per 1k-event append)")
            print("| backend | events already in the conversation | history (MB) | ms / 1k-event append |")
            print("| --- | ---: | ---: | ---: |")
        for key, rows in flat_rows.items():
            for length, mb, ms in rows:
                print(f"| {backends[key].name} | {length:,} | {mb:.1f} | {ms:.2f} |")
        if "redis" in wanted:
            achieved, p50, p99, worst = await live_tail(1.0 if quick else 5.0)
            print("\n## Redis live tail (XREAD BLOCK), producer at 10k events/s in 100-event batches")
            print("| achieved rate | p50 ms | p99 ms | max ms | target p99 | ratio (target / p99) |")
            print("| ---: | ---: | ---: | ---: | ---: | ---: |")
            print(f"| {achieved:,} ev/s | {p50:.2f} | {p99:.2f} | {worst:.2f} | 10 ms | {10 / p99:.2f}x |")
        if "redis-cluster" in wanted:
            await redis_side_by_side(quick)
        if "rebuild" in wanted:
            size = 100_000 if quick else 1_000_000
            r = await rebuild_bench(tmp, size)
            print(
                f"\n## Rebuild a {r['events']:,.0f}-event conversation (SQLite, flat graph of {r['nodes']:,.0f} nodes)"
            )
            print(
                "| full replay s | snapshot write s | snapshot MB | snapshot + 10k-event tail s | target "
                "| ratio (target / time) |"
            )
            print("| ---: | ---: | ---: | ---: | ---: | ---: |")
            print(
                f"| {r['full_s']:.2f} | {r['snapshot_write_s']:.2f} | {r['snapshot_mb']:.1f} | "
                f"{r['with_snapshot_s']:.2f} | 3 s | {3 / r['with_snapshot_s']:.2f}x |"
            )


if __name__ == "__main__":
    asyncio.run(main())
