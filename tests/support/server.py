"""Run a real ``convograph serve`` subprocess for tests (free port, own data dir, bounded waits)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    url: str
    port: int
    data_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


def start_server(
    data_dir: Path,
    *extra: str,
    port: int | None = None,
    env: dict[str, str] | None = None,
    ready_timeout: float = 30,
) -> ServerProcess:
    """Start ``convograph serve`` and wait until it answers ``/openapi.json``."""
    port = port or free_port()
    log_path = data_dir.parent / f"server-{port}.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    handle = open(log_path, "ab")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convograph",
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            *extra,
        ],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    server = ServerProcess(f"http://127.0.0.1:{port}", port, data_dir, process, log_path)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{server.log()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(server.url + "/openapi.json", timeout=1).status_code == 200:
                return server
        time.sleep(0.1)
    server.stop(signal.SIGKILL)
    raise RuntimeError(f"server did not become ready in {ready_timeout}s:\n{server.log()}")


@contextlib.contextmanager
def running_server(data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    server = start_server(data_dir, *extra, env=env)
    try:
        yield server
    finally:
        server.stop()
