"""Integration fixtures: throwaway Redis and PostgreSQL servers on free ports, for tests that stop and
restart them. They never touch the shared 127.0.0.1:5432 / :6379 services (tests/conftest.py), and
every start/stop is bounded in time.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_port(port: int, *, up: bool, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                if up:
                    return
        except OSError:
            if not up:
                return
        time.sleep(0.05)
    raise TimeoutError(f"port {port} did not go {'up' if up else 'down'} within {timeout:g} s")


class RedisServer:
    """``redis-server`` with append-only fsync-always persistence in a temp dir."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="cg-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (run scripts/ensure-services)"
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_port(self.port, up=True)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()  # a crash, not a graceful shutdown
            self.proc.wait(timeout=10)
            self.proc = None
        wait_port(self.port, up=False)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class PostgresServer:
    """A temporary PostgreSQL cluster (initdb + pg_ctl), run as the ``postgres`` user when root."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        assert bins, "PostgreSQL server binaries not found (run scripts/ensure-services)"
        self.bin = Path(bins[-1])
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="cg-pg-"))
        self.data = self.dir / "data"
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 60.0) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, timeout=timeout, capture_output=True)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-w",
            "-t",
            "30",
            "-l",
            str(self.dir / "log"),
            "-o",
            f"-p {self.port} -h 127.0.0.1 -k {self.dir} -c fsync=on",
            "start",
        )
        wait_port(self.port, up=True)

    def stop(self, mode: str = "immediate") -> None:
        """``immediate`` is a crash (recovery on next start); ``fast`` is a clean shutdown."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "30", "-m", mode, "stop")
        wait_port(self.port, up=False)

    def cleanup(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A running throwaway Redis (AOF, fsync always); the test may stop and restart it."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def postgres_cluster() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL cluster, initialised once per module and started per test."""
    server = PostgresServer()
    server.init()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def postgres_server(postgres_cluster: PostgresServer) -> Iterator[PostgresServer]:
    postgres_cluster.start()
    try:
        yield postgres_cluster
    finally:
        postgres_cluster.stop("fast")
