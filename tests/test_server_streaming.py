"""`convograph.server.streaming`: a closed live stream is freed at once, without the cyclic GC.

The server runs in this process (a real uvicorn on a loopback port, in a thread) so the test can
look at the objects it keeps. The cyclic garbage collector is off while streams open and close: what
a closed stream leaves must be freed by reference counting alone, as in a long-running server whose
full collections are rare (`serve_app` raises the GC thresholds).
"""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from convograph.server.app import create_app
from convograph.server.config import ServerConfig
from tests.support.server import free_port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    app = create_app(ServerConfig(port=port, data_dir=tmp_path / "data", intelligence=False))
    runner = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not runner.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.started
    try:
        yield url, port
    finally:
        runner.should_exit = True
        thread.join(15)


def gauge(url: str, name: str) -> float:
    with httpx.Client(timeout=10) as http:  # a fresh connection, closed after the read
        for line in http.get(f"{url}/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def wait_gauge(url: str, name: str, want: float) -> None:
    deadline = time.monotonic() + 15
    while gauge(url, name) != want:
        assert time.monotonic() < deadline, f"{name} never reached {want}"
        time.sleep(0.05)


def alive(type_name: str) -> int:
    return sum(1 for item in gc.get_objects() if type(item).__name__ == type_name)


def silent_stream(port: int, cid: str, last_event_id: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET /v1/conversations/{cid}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Last-Event-ID: {last_event_id}\r\n\r\n".encode()
    )
    return sock


def test_closed_streams_are_freed_by_reference_counting(server: tuple[str, int]) -> None:
    url, port = server
    events: list[dict[str, Any]] = [
        {"type": "text", "runId": "r", "id": "t", "content": f"{i} " + "x" * 4000} for i in range(300)
    ]
    with httpx.Client(timeout=30) as http:
        assert http.post(f"{url}/v1/conversations/gc-1/events", json=events).status_code == 200
    gc.collect()
    gc.disable()
    try:
        cycles_before = alive("RequestResponseCycle")
        # half catch up on 1.2 MB and stall (they never read), half wait at the head
        sockets = [silent_stream(port, "gc-1", 0) for _ in range(5)]
        sockets += [silent_stream(port, "gc-1", 300) for _ in range(5)]
        wait_gauge(url, "convograph_sse_subscribers", 10)
        time.sleep(0.5)
        assert alive("RequestResponseCycle") >= 10
        for sock in sockets:
            sock.close()
        wait_gauge(url, "convograph_sse_subscribers", 0)
        time.sleep(0.5)
        # every stream's request cycle, transport and frames are gone, with no collection run
        # (Litestar's own `Stream` left all 10 of each in reference cycles, with their buffers)
        assert alive("RequestResponseCycle") <= cycles_before
        assert alive("TCPTransport") <= cycles_before
    finally:
        gc.enable()
