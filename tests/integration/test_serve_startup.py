"""`convograph serve` (a real process) with a backend it cannot reach: one line naming the backend and
the reason, a non-zero exit, no traceback. These used to print uvicorn's lifespan traceback (an
exception group of ~60 lines) and exit 0."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import PG_HOST, PG_PORT, require_service

from convograph.store import BackendUnavailable
from convograph.store.postgres import PostgresEventLog


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "convograph",
            "serve",
            "--port",
            str(free_port()),
            "--data-dir",
            str(tmp_path),
            *list(args),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )


@pytest.mark.parametrize(
    ("option", "scheme", "message"),
    [
        ("--database-url", "postgresql://postgres@127.0.0.1:{port}/x", "postgres event log unavailable"),
        ("--database-url", "redis://127.0.0.1:{port}/0", "redis event log unavailable"),
        ("--graph-url", "falkordb://127.0.0.1:{port}", "cannot reach FalkorDB at falkordb://127.0.0.1:"),
    ],
)
def test_an_unreachable_backend_is_one_line_and_exit_1(
    tmp_path: Path, option: str, scheme: str, message: str
) -> None:
    port = free_port()  # nothing listens there
    result = _serve(tmp_path, option, scheme.format(port=port))
    assert result.returncode == 1, result.stderr
    assert message in result.stderr
    assert str(port) in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2, result.stderr  # rich may wrap the one line


def test_a_postgres_refusal_names_its_reason(tmp_path: Path) -> None:
    """The pool's own error is a bare timeout; the reason (here an unknown role) comes from Postgres."""
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    result = _serve(tmp_path, "--database-url", f"postgresql://no_such_role@{PG_HOST}:{PG_PORT}/postgres")
    assert result.returncode == 1, result.stderr
    assert 'role "no_such_role" does not exist' in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


def test_a_missing_postgres_database_says_how_to_create_it(tmp_path: Path) -> None:
    """docs/server.md's example names a database that a fresh Postgres does not have."""
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    url = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/convograph_never_created"
    result = _serve(tmp_path, "--database-url", url)
    assert result.returncode == 1, result.stderr
    stderr = " ".join(result.stderr.split())
    assert 'database "convograph_never_created" does not exist' in stderr
    assert f"createdb -h {PG_HOST} -p {PG_PORT} -U postgres convograph_never_created" in stderr


async def test_the_library_raises_backend_unavailable_with_the_reason() -> None:
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    with pytest.raises(BackendUnavailable, match='role "no_such_role" does not exist'):
        await PostgresEventLog.open(
            f"postgresql://no_such_role@{PG_HOST}:{PG_PORT}/postgres", connect_timeout=2
        )


def test_with_a_spool_the_server_starts_without_its_backend(tmp_path: Path) -> None:
    """A spool exists to accept events while the backend is down, so startup must not refuse it."""
    import time
    import urllib.request

    port, dead = free_port(), free_port()
    url = f"postgresql://postgres@127.0.0.1:{dead}/x?spool={tmp_path / 'spool.db'}&connect_timeout=1"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convograph",
            "serve",
            "--no-intelligence",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path),
            "--database-url",
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
                    assert reply.status == 200
                    break
            except OSError:
                assert proc.poll() is None, "the server exited instead of starting behind its spool"
                assert time.monotonic() < deadline, "the server did not answer within 30 s"
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
