"""Memory of ``convograph serve`` under SSE streams that never read (issue 26, item 2).

    python -m benchmarks.sse_memory               # rounds of 1,000, 1,000, 1,000 and 2,000 streams
    python -m benchmarks.sse_memory --quick       # 2 rounds of 200

A real server process (uvicorn, SQLite, no context-intelligence graph) on 127.0.0.1, with its stream
limits raised to let every stream in. The conversation holds ``--events`` events of ~1 KB before
the streams open; each stream is a plain blocking socket with a 4 KiB receive buffer that sends
``GET .../stream`` with ``Last-Event-ID: 0`` and never reads a byte. Once every stream is admitted
(``convograph_streams_open``), a writer appends ``--live`` more events, so every subscriber also
falls behind the live tail. Then every socket is closed, and the server's RSS is read again once
its stream and subscriber gauges are back to 0 (plus 3 s). RSS is ``VmRSS`` of the server process;
the peak is sampled every 50 ms. Last, one client that does read replays the whole conversation
over SSE (the catch-up speed the bounded pages cost).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx
from tests.support.server import ServerProcess, start_server

from convograph.client.sse import SSEDecoder

CONVERSATION = "memory-1"
PADDING = "x" * 900


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def gauge(http: httpx.Client, name: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def wait_for_gauge(http: httpx.Client, name: str, want: float, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    value = gauge(http, name)
    while value != want and time.monotonic() < deadline:
        time.sleep(0.2)
        value = gauge(http, name)
    return value


def append(http: httpx.Client, start: int, count: int) -> None:
    body = "".join(
        json.dumps({"type": "text", "runId": "r", "id": f"t{i // 50}", "content": f"{i} {PADDING}"}) + "\n"
        for i in range(start, start + count)
    )
    response = http.post(
        f"/v1/conversations/{CONVERSATION}/events",
        content=body,
        headers={"Content-Type": "application/x-ndjson"},
    )
    response.raise_for_status()


def open_silent_stream(port: int) -> socket.socket:
    """A connection that asks for the stream from the start and never reads."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET /v1/conversations/{CONVERSATION}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Accept: text/event-stream\r\nLast-Event-ID: 0\r\n\r\n".encode()
    )
    return sock


def status_counts(sockets: list[socket.socket]) -> dict[str, int]:
    """Each connection's status code, peeked (nothing is consumed)."""
    counts: dict[str, int] = {}
    for sock in sockets:
        sock.settimeout(2)
        try:
            head = sock.recv(12, socket.MSG_PEEK)
        except OSError:
            head = b""
        key = head[9:12].decode() or "none"
        counts[key] = counts.get(key, 0) + 1
    return counts


class PeakSampler(threading.Thread):
    """The largest RSS of ``pid`` seen every 50 ms while running."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            self.peak = max(self.peak, rss_mb(self.pid))

    def stop(self) -> float:
        self.done.set()
        self.join()
        return max(self.peak, rss_mb(self.pid))


def one_round(server: ServerProcess, http: httpx.Client, streams: int, live: int, written: int) -> str:
    pid = server.process.pid
    load = os.getloadavg()[0]
    before = rss_mb(pid)
    sampler = PeakSampler(pid)
    sampler.start()
    sockets = [open_silent_stream(server.port) for _ in range(streams)]
    opened = "convograph_streams_open"
    if math.isnan(gauge(http, opened)):  # a server from before the stream limits
        opened = "convograph_sse_subscribers"
    admitted = wait_for_gauge(http, opened, streams, 120)
    for start in range(written, written + live, 100):
        append(http, start, 100)
    time.sleep(2.0)
    held = rss_mb(pid)
    buffered = gauge(http, "convograph_sse_buffered_bytes") / 2**20  # nan before the rings
    statuses = status_counts(sockets)
    for sock in sockets:
        sock.close()
    subscribers = wait_for_gauge(http, "convograph_sse_subscribers", 0, 60)
    still_open = wait_for_gauge(http, opened, 0, 60)
    time.sleep(3.0)
    after = rss_mb(pid)
    peak = sampler.stop()
    return (
        f"{streams} silent streams (load {load:.2f}): admitted {admitted:.0f}, statuses {statuses}; "
        f"RSS {before:.0f} MB before -> {held:.0f} MB open (peak {peak:.0f}; rings {buffered:.1f} MB) -> "
        f"{after:.0f} MB closed; streams/subscribers left {still_open:.0f}/{subscribers:.0f}"
    )


def replay_seconds(url: str, events: int) -> float:
    """Seconds for one reading client to receive the conversation's first ``events`` events."""
    decoder = SSEDecoder()
    seen = 0
    started = time.perf_counter()
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "GET", f"{url}/v1/conversations/{CONVERSATION}/stream", headers={"Last-Event-ID": "0"}
        ) as response,
    ):
        for chunk in response.iter_raw():
            seen += sum(1 for message in decoder.feed(chunk) if message.event == "text")
            if seen >= events:
                break
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--live", type=int, default=2000)
    parser.add_argument(
        "--no-limits", action="store_true", help="pass no stream limits (a server from before them)"
    )
    args = parser.parse_args()
    rounds = [200, 200] if args.quick else [1000, 1000, 1000, 2000]
    limits = () if args.no_limits else ("--max-streams", "10000", "--max-streams-per-client", "10000")
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp) / "data", "--log-level", "warning", "--no-intelligence", *limits)
        try:
            with httpx.Client(base_url=server.url, timeout=60) as http:
                for start in range(0, args.events, 500):
                    append(http, start, 500)
                written = args.events
                baseline = rss_mb(server.process.pid)
                print(
                    f"{time.strftime('%Y-%m-%d %H:%M')} load {os.getloadavg()[0]:.2f}; server RSS after "
                    f"{args.events} events of ~1 KB stored: {baseline:.0f} MB",
                    flush=True,
                )
                for streams in rounds:
                    print(one_round(server, http, streams, args.live, written), flush=True)
                    written += args.live
                elapsed = replay_seconds(server.url, written)
                print(
                    f"replay over SSE by one reading client: {written:,} events in {elapsed:.2f} s "
                    f"({written / elapsed:,.0f} events/s; load {os.getloadavg()[0]:.2f})"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
