"""Loopback load tests of ``convograph serve`` (bounded in count and time; 127.0.0.1 only).

    python -m benchmarks.server            # full sizes
    python -m benchmarks.server --quick    # smaller, for smoke runs

1. **Ingest**: NDJSON batches of 500 events posted by 4 concurrent clients; events/s end to end
   (durable before the reply: SQLite, synchronous=FULL, the embedded default).
2. **Fan-out**: N SSE subscribers on one conversation while a writer posts events at a fixed rate;
   delivery latency = receive time - send time carried in each event; p50/p99/max, and every
   subscriber must receive every event. Side by side: convograph's own stream, then the same
   conversation as AG-UI events (``?protocol=ag-ui``) and as the AI SDK UI message stream
   (``?protocol=ai-sdk``), each on its own conversation.
3. **Reconnects**: 200 clients read a conversation while it is written, each dropping its connection
   at random points and resuming with ``Last-Event-ID``; counts gaps and duplicates (must be 0).
4. **Long answer, watched**: one streamed answer (20k text deltas in one block, batches of 500)
   posted to a conversation whose thread a viewer has opened (so the server keeps its projections
   current); the first and last batch's round trip must be about the same.
The server runs as a separate process (uvicorn), so client and server compete for the 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from tests.support.server import ServerProcess, start_server

from convograph.client.sse import SSEDecoder


def ndjson_batch(start: int, size: int, *, run: str = "r") -> bytes:
    return b"".join(
        b'{"type":"text","runId":"%s","id":"t%d","content":"token %d ","eventId":"e%d"}\n'
        % (run.encode(), i // 20, i, i)
        for i in range(start, start + size)
    )


async def bench_ingest(url: str, total: int, batch: int = 500, writers: int = 4) -> float:
    bodies = [ndjson_batch(i, batch, run=f"r{i // batch % writers}") for i in range(0, total, batch)]
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    headers = {"Content-Type": "application/x-ndjson"}

    async def writer(client: httpx.AsyncClient, cid: str) -> None:
        while not queue.empty():
            body = queue.get_nowait()
            response = await client.post(f"/v1/conversations/{cid}/events", content=body, headers=headers)
            response.raise_for_status()

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        started = time.perf_counter()
        await asyncio.gather(*(writer(client, f"ingest-{w}") for w in range(writers)))
        elapsed = time.perf_counter() - started
    return total / elapsed


MARKERS: dict[str | None, bytes] = {None: b'"sentAt":', "ag-ui": b'"delta":"', "ai-sdk": b'"delta":"'}
"""Where the send time sits in a frame: the event's ``sentAt``, or (protocol streams, which carry
the text but not convograph's extra fields) the text delta the writer filled with it."""


async def subscriber(
    url: str,
    cid: str,
    expect: int,
    latencies: list[float],
    ready: asyncio.Event,
    counter: list[int],
    protocol: str | None = None,
) -> int:
    """Count complete SSE frames and read each one's send time by scanning bytes (a full SSE + JSON
    parse per message made this load client, not the server, the bottleneck)."""
    received = 0
    pending = b""
    marker = MARKERS[protocol]
    query = f"?protocol={protocol}" if protocol else ""
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client,
        client.stream(
            "GET", f"{url}/v1/conversations/{cid}/stream{query}", headers={"Last-Event-ID": "0"}
        ) as response,
    ):
        counter[0] += 1
        if counter[0] == counter[1]:
            ready.set()
        async for chunk in response.aiter_raw():
            now = time.time()
            frames = (pending + chunk).split(b"\n\n")
            pending = frames.pop()
            for frame in frames:
                at = frame.find(marker)
                if at < 0:
                    continue
                start = end = at + len(marker)
                while frame[end : end + 1] not in (b",", b"}", b'"'):
                    end += 1
                latencies.append(now - float(frame[start:end]))
                received += 1
                if received >= expect:
                    return received
    return received


async def bench_fanout(
    url: str, subscribers: int, events: int, rate: float, protocol: str | None = None
) -> dict[str, float]:
    cid = f"fanout-{subscribers}-{protocol or 'native'}"
    latencies: list[float] = []
    ready = asyncio.Event()
    counter = [0, subscribers]
    tasks = [
        asyncio.create_task(subscriber(url, cid, events, latencies, ready, counter, protocol))
        for _ in range(subscribers)
    ]
    await asyncio.wait_for(ready.wait(), 300)  # 500 connections on a loaded 2-core machine take a while
    await asyncio.sleep(0.5)
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        interval = 1 / rate
        started = time.perf_counter()
        for i in range(events):
            now = time.time()
            body = json.dumps(
                {"type": "text", "runId": "r", "id": f"t{i}", "content": f"{now:.6f}", "sentAt": now}
            )
            (
                await client.post(
                    f"/v1/conversations/{cid}/events",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
            ).raise_for_status()
            delay = started + (i + 1) * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
    counts = await asyncio.wait_for(asyncio.gather(*tasks), 120)
    ordered = sorted(latencies)
    return {
        "subscribers": subscribers,
        "events": events,
        "complete": sum(1 for count in counts if count == events),
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99) - 1] * 1000,
        "max_ms": ordered[-1] * 1000,
    }


async def reconnecting_reader(url: str, cid: str, total: int, rng: random.Random) -> tuple[int, int]:
    """Read until seq ``total``, dropping the connection at random; returns (gaps, duplicates)."""
    seen: list[int] = []
    last = 0
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client:
        while last < total:
            budget = rng.randint(1, 60)
            decoder = SSEDecoder()
            async with client.stream(
                "GET", f"{url}/v1/conversations/{cid}/stream", headers={"Last-Event-ID": str(last)}
            ) as response:
                async for chunk in response.aiter_raw():
                    done = False
                    for message in decoder.feed(chunk):
                        seq = int(message.id or 0)
                        seen.append(seq)
                        last = max(last, seq)
                        budget -= 1
                        if budget <= 0 or last >= total:
                            done = True
                            break
                    if done:
                        break  # drop the connection mid-stream
    duplicates = len(seen) - len(set(seen))
    gaps = len(set(range(1, total + 1)) - set(seen))
    return gaps, duplicates


async def bench_reconnects(url: str, clients: int, total: int) -> dict[str, int]:
    cid = "reconnect-1"
    rng = random.Random(7)
    async with httpx.AsyncClient(base_url=url, timeout=30) as writer:
        (
            await writer.post(
                f"/v1/conversations/{cid}/events",
                content=ndjson_batch(0, total // 2),
                headers={"Content-Type": "application/x-ndjson"},
            )
        ).raise_for_status()
        readers = [
            asyncio.create_task(reconnecting_reader(url, cid, total, random.Random(rng.random())))
            for _ in range(clients)
        ]
        for start in range(total // 2, total, 50):
            (
                await writer.post(
                    f"/v1/conversations/{cid}/events",
                    content=ndjson_batch(start, 50),
                    headers={"Content-Type": "application/x-ndjson"},
                )
            ).raise_for_status()
            await asyncio.sleep(0.05)
        results = await asyncio.wait_for(asyncio.gather(*readers), 300)
    return {
        "clients": clients,
        "events": total,
        "gaps": sum(gaps for gaps, _ in results),
        "duplicates": sum(dups for _, dups in results),
    }


async def bench_long_answer(url: str, deltas: int, batch: int = 500) -> tuple[float, float, float]:
    """(total s, first batch ms, last batch ms) for one answer of ``deltas`` text deltas."""
    cid = "bench-long-answer"
    head = [
        {"type": "user", "runId": "u", "content": "Write a long essay."},
        {"type": "harness_start", "runId": "a", "parentId": "u:user"},
    ]
    delta = json.dumps({"type": "text", "runId": "a", "id": "t1", "content": "tok "}) + "\n"
    body = (delta * batch).encode()
    headers = {"content-type": "application/x-ndjson"}
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        (await client.post(f"/v1/conversations/{cid}/events", json=head)).raise_for_status()
        (await client.get(f"/v1/conversations/{cid}/thread")).raise_for_status()  # a viewer is watching
        rounds: list[float] = []
        started = time.perf_counter()
        for _ in range(deltas // batch):
            t0 = time.perf_counter()
            (
                await client.post(f"/v1/conversations/{cid}/events", content=body, headers=headers)
            ).raise_for_status()
            rounds.append(time.perf_counter() - t0)
        total = time.perf_counter() - started
        thread = (await client.get(f"/v1/conversations/{cid}/thread")).json()
        assert len(thread[-1]["content"]["text"]) == 4 * batch * (deltas // batch)
    return total, rounds[0] * 1000, rounds[-1] * 1000


def cpu_seconds(server: ServerProcess | None) -> float:
    """User + system CPU seconds of the server process (or of this process when None)."""
    pid = server.process.pid if server is not None else os.getpid()
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["fanout"], help="run only the fan-out comparison")
    args = parser.parse_args()
    ingest_total = 20_000 if args.quick else 200_000
    fan_subscribers, fan_events = (50, 100) if args.quick else (500, 300)
    reconnect_clients, reconnect_events = (20, 400) if args.quick else (200, 1000)

    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(
            Path(tmp) / "data",
            "--log-level",
            "warning",
            "--no-intelligence",
            "--max-streams-per-client",
            "2000",  # the fan-out's subscribers all come from 127.0.0.1
        )
        try:
            load = os.getloadavg()[0]
            print(
                f"{time.strftime('%Y-%m-%d %H:%M')}  server {server.url} (SQLite, synchronous=FULL), load average {load:.2f}"
            )
            if args.only is None:
                rate = asyncio.run(bench_ingest(server.url, ingest_total))
                print(
                    f"ingest: {ingest_total:,} events in NDJSON batches of 500, 4 writers: {rate:,.0f} events/s "
                    f"(target 20,000: {rate / 20_000:.2f}x)"
                )
            for protocol in (None, "ag-ui", "ai-sdk"):
                server_before, client_before, started = cpu_seconds(server), cpu_seconds(None), time.time()
                fan = asyncio.run(bench_fanout(server.url, fan_subscribers, fan_events, 50, protocol))
                wall = time.time() - started
                server_cpu = (cpu_seconds(server) - server_before) / wall * 100
                client_cpu = (cpu_seconds(None) - client_before) / wall * 100
                print(
                    f"fan-out ({protocol or 'native'}, load {os.getloadavg()[0]:.2f}): {fan['subscribers']} SSE"
                    f" subscribers x {fan['events']} events at 50/s: complete {fan['complete']}/"
                    f"{fan['subscribers']}, p50 {fan['p50_ms']:.1f} ms, p99 {fan['p99_ms']:.1f} ms (target < 100),"
                    f" max {fan['max_ms']:.1f} ms; CPU: server {server_cpu:.0f}%, load client {client_cpu:.0f}%"
                )
            if args.only is not None:
                return
            rec = asyncio.run(bench_reconnects(server.url, reconnect_clients, reconnect_events))
            print(
                f"reconnects: {rec['clients']} clients dropping at random over {rec['events']} events: "
                f"gaps {rec['gaps']}, duplicates {rec['duplicates']} (target 0 and 0)"
            )
            deltas = 2_000 if args.quick else 20_000
            total, first, last = asyncio.run(bench_long_answer(server.url, deltas))
            print(
                f"long answer, watched: {deltas:,} text deltas in one block, batches of 500: total "
                f"{total:.2f} s; first batch {first:.0f} ms, last batch {last:.0f} ms (ratio {last / first:.2f})"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
