"""A writer process killed with SIGKILL mid-ingest loses no acknowledged event.

The child appends batches from several concurrent tasks (so SQLite's group commit is exercised) and
prints ``<first_seq> <last_seq>`` after each acknowledged append. The parent kills it with SIGKILL
after enough acknowledgements, reopens the log and checks that every acknowledged seq is present,
with the events it was acknowledged for, and that seqs are still contiguous.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from convograph.store import open_event_log

CHILD = r"""
import asyncio, sys
from convograph.events import Text
from convograph.store import open_event_log

async def writer(log, task):
    for n in range(1_000_000):
        batch = [Text(run_id=f"t{task}", id="x", content=f"{task}:{n}:{i}", event_id=f"{task}:{n}:{i}")
                 for i in range(50)]
        result = await log.append("victim", batch)
        print(result.first_seq, result.last_seq, f"{task}:{n}", flush=True)

async def main():
    log = await open_event_log(sys.argv[1])
    await asyncio.gather(*(writer(log, t) for t in range(4)))

asyncio.run(main())
"""


def run_and_kill(url: str, acks_wanted: int = 60, timeout: float = 60.0) -> list[tuple[int, int, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
    )
    assert proc.stdout is not None
    acks: list[tuple[int, int, str]] = []
    buffer = b""
    deadline = time.monotonic() + timeout
    try:
        while len(acks) < acks_wanted:
            if time.monotonic() > deadline or proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ""
                pytest.fail(f"child produced {len(acks)} acks before timeout/exit: {err[-2000:]}")
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                buffer += os.read(proc.stdout.fileno(), 65536)
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    first, last, tag = line.decode().split()
                    acks.append((int(first), int(last), tag))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    # Anything the child printed before dying was acknowledged too.
    rest = buffer + proc.stdout.read()
    for line in rest.split(b"\n"):
        parts = line.decode().split()
        if len(parts) == 3:
            acks.append((int(parts[0]), int(parts[1]), parts[2]))
    return acks


async def check(url: str, acks: list[tuple[int, int, str]]) -> None:
    log = await open_event_log(url)
    try:
        stored = await log.read("victim")
    finally:
        await log.close()
    seqs = [s.seq for s in stored]
    assert seqs == list(range(1, len(seqs) + 1)), "seqs must stay contiguous after a crash"
    by_seq = {s.seq: s.event.event_id for s in stored}
    for first, last, tag in acks:
        got = [by_seq.get(seq) for seq in range(first, last + 1)]
        assert got == [f"{tag}:{i}" for i in range(50)], f"acknowledged batch {tag} ({first}..{last}) lost"


async def test_sigkill_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    acks = await asyncio.to_thread(run_and_kill, url)
    await check(url, acks)


async def test_sigkill_postgres(postgres_url: str) -> None:
    acks = await asyncio.to_thread(run_and_kill, postgres_url)
    await check(postgres_url, acks)


async def test_sigkill_redis(redis_url: str, redis_prefix: str) -> None:
    url = f"{redis_url}?prefix={redis_prefix}"
    acks = await asyncio.to_thread(run_and_kill, url)
    await check(url, acks)
