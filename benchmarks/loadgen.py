"""A lean HTTP/1.1 load generator: ``connections`` keep-alive connections, one request in flight
on each (as the Amplifier hook client sends: one event per request, one in flight per session).

Requests are prepared bytes, responses are read by their ``Content-Length``; no HTTP library in
the loop, so the generator costs ~15-25 µs of CPU per request (uvloop), a small share next to the
server's on a machine whose cores it shares. Runs as its own process(es) (`run_load`), so its
work never holds the measuring process's GIL.

    python -m benchmarks.loadgen --port 8321 --path /events --bodies bodies.ndjson --connections 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

__all__ = ["run_load"]


def _request(host: str, port: int, path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _connection(
    host: str, port: int, requests: list[bytes], latencies: list[float], errors: list[str]
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for request in requests:
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length) if length else b""
            latencies.append(time.perf_counter() - started)
            if status >= 300 and len(errors) < 5:
                errors.append(f"{status} {body[:200]!r}")
    finally:
        writer.close()


def _worker(host: str, port: int, path: str, shares: list[list[Any]], out: Any) -> None:
    import uvloop

    latencies: list[float] = []
    errors: list[str] = []

    async def main() -> None:
        await asyncio.gather(
            *(
                _connection(
                    host,
                    port,
                    [
                        _request(host, port, *(item if isinstance(item, tuple) else (path, item)))
                        for item in share
                    ],
                    latencies,
                    errors,
                )
                for share in shares
            )
        )

    started = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
    uvloop.run(main())
    out.put((latencies, errors, started, time.perf_counter()))


def run_load(
    port: int,
    path: str,
    bodies: list[Any],
    *,
    connections: int = 32,
    processes: int = 1,
    host: str = "127.0.0.1",
    shares: list[list[Any]] | None = None,
) -> dict[str, Any]:
    """Send every body once over ``connections`` connections spread over ``processes`` generator
    processes; the requests/s, latency percentiles and the first errors. A body may be a ``(path,
    body)`` pair; ``shares`` gives each connection its own list instead (e.g. whole sessions, as a
    hook client sends them: in order, one at a time)."""
    shares = shares if shares is not None else [bodies[i::connections] for i in range(connections)]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(target=_worker, args=(host, port, path, shares[p::processes], queue))
        for p in range(processes)
    ]
    for worker in workers:
        worker.start()
    results: list[tuple[list[float], list[str], float, float]] = []
    while len(results) < len(workers):
        try:
            results.append(queue.get(timeout=1.0))
        except Exception:  # queue.Empty: a generator that died never reports
            if any(worker.exitcode not in (None, 0) for worker in workers):
                raise RuntimeError("a load generator process failed (its traceback is above)") from None
    elapsed = max(r[3] for r in results) - min(r[2] for r in results)  # without process start-up
    for worker in workers:
        worker.join()
    latencies = sorted(x for r in results for x in r[0])
    errors = [e for r in results for e in r[1]]

    def pct(q: float) -> float:
        return (
            round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 2) if latencies else 0.0
        )

    return {
        "requests": len(latencies),
        "seconds": round(elapsed, 3),
        "requests_per_s": round(len(latencies) / elapsed),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/events")
    parser.add_argument("--bodies", type=Path, required=True, help="one JSON body per line")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    bodies = [line for line in args.bodies.read_bytes().splitlines() if line.strip()]
    print(
        json.dumps(
            run_load(args.port, args.path, bodies, connections=args.connections, processes=args.processes)
        )
    )


if __name__ == "__main__":
    main()
