"""`convograph serve` (a real process) with its embedded FalkorDB: the child dies with a killed
server, a leftover of a crash is stopped at the next start, and a long ``--data-dir`` serves
(issue 26 items 3 and 4)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from convograph.intelligence.embedded import bundled_binaries

pytestmark = pytest.mark.falkordb


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_until(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return bool(condition())  # type: ignore[operator]


class Serve:
    """``convograph serve`` on a free port with ``data_dir``; ready once ``/cypher`` answers."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "convograph",
                "serve",
                "--port",
                str(self.port),
                "--data-dir",
                str(data_dir),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HOME": str(data_dir)},
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                output = self.proc.stdout.read().decode(errors="replace") if self.proc.stdout else ""
                raise AssertionError(f"serve exited with {self.proc.returncode}:\n{output[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.post(f"{self.url}/cypher", json={"query": "RETURN 1"}, timeout=5).status_code == 200:
                    return
            time.sleep(0.2)
        raise AssertionError("serve did not become ready")

    def falkordb_pid(self) -> int:
        return int((self.data_dir / "intelligence" / "falkordb" / "falkordb.pid").read_text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def started() -> Iterator[list[Serve]]:
    servers: list[Serve] = []
    yield servers
    for server in servers:
        server.stop()


def test_the_embedded_falkordb_dies_with_a_killed_server(tmp_path: Path, started: list[Serve]) -> None:
    """Before: the child (575 MB in the trial) was re-parented to init and lived on until the next start."""
    server = Serve(tmp_path / "data")
    started.append(server)
    server.wait_ready()
    child = server.falkordb_pid()
    assert alive(child)
    socket_dir = Path((tmp_path / "data" / "intelligence" / "falkordb" / "falkordb.socket-dir").read_text())
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    try:
        assert wait_until(lambda: not alive(child), 30), "the embedded FalkorDB outlived its killed server"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
    assert socket_dir.exists()  # what the crash left behind is removed by the next start
    again = Serve(tmp_path / "data")
    started.append(again)
    again.wait_ready()
    assert not socket_dir.exists()


def test_a_leftover_falkordb_is_stopped_when_the_server_starts(tmp_path: Path, started: list[Serve]) -> None:
    first = Serve(tmp_path / "data")
    started.append(first)
    first.wait_ready()
    directory = tmp_path / "data" / "intelligence" / "falkordb"
    config = directory / "falkordb.conf"
    first.stop()
    # a leftover of a crash: the same server, on the same configuration, owned by nobody
    socket_path = Path(
        next(
            line.split(" ", 1)[1]
            for line in config.read_text().splitlines()
            if line.startswith("unixsocket ")
        )
    )
    socket_path.parent.mkdir(mode=0o700)
    (directory / "falkordb.socket-dir").write_text(str(socket_path.parent))  # as a crashed run leaves it
    redis_server, module = bundled_binaries()
    leftover = subprocess.Popen(
        [str(redis_server), str(config), "--loadmodule", str(module)],
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert wait_until(socket_path.exists, 20)
        second = Serve(tmp_path / "data")
        started.append(second)
        second.wait_ready()
        assert leftover.wait(30) is not None
        assert second.falkordb_pid() != leftover.pid
        assert not socket_path.parent.exists()  # the leftover's socket directory was removed
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait(10)


def test_a_long_data_dir_serves(tmp_path: Path, started: list[Serve]) -> None:
    """Before: exit code 3, "unix socket path too long (109)": the socket lived in the data dir."""
    data_dir = tmp_path
    while len(str(data_dir)) < 200:
        data_dir = data_dir / "a-rather-long-directory-name"
    server = Serve(data_dir)
    started.append(server)
    server.wait_ready()
    body = {
        "event": "session:start",
        "workspace": "w",
        "data": {"session_id": "s", "timestamp": "2026-03-01T00:00:00Z"},
    }
    assert httpx.post(f"{server.url}/events", json=body, timeout=10).status_code == 202
    assert wait_until(
        lambda: (
            httpx.post(
                f"{server.url}/cypher",
                json={"query": "MATCH (s:Session) RETURN count(s) AS n", "workspace": "w"},
            ).json()["results"]
            == [{"n": 1}]
        ),
        30,
    )
