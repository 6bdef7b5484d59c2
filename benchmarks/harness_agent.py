"""Agent-harness overhead per streamed chunk, in process, with the scripted model at full speed.

    python -m benchmarks.harness_agent            # 20,000-chunk answers, 5 rounds
    python -m benchmarks.harness_agent --quick    # 4,000-chunk answers, 3 rounds

One answer of N text deltas from `convograph.testing.ScriptedProvider` (no SDK, no socket), run
through `Agent` into:

- a null port (emit does nothing): the agent loop's own cost (event ids, pass-through, bookkeeping);
- `LogPort` over `MemoryEventLog`: plus the queue, the batched appends and the follower's
  incremental fold of every event into the conversation (what `history` reads);
- `LogPort` over SQLite (``synchronous=full``, the default, and ``normal``), with the group commit
  (batches of up to 512) and with ``batch_size=1`` (one append per event, as before the group
  commit), for the durable path's cost.

Figures are CPU time (``process_time``) per chunk minus the same provider iterated alone; medians of
alternating rounds, with the load average (the machine is shared). SQLite rows are wall time (they
wait for fsync).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from convograph.events import Event, RelayResolved
from convograph.harness import Agent, LogPort, ModelRequest
from convograph.store import open_event_log
from convograph.testing import MemoryEventLog, ScriptedProvider, ScriptedTurn

TARGET_US = 20.0
HELLO = [{"role": "user", "content": "hi"}]


class NullPort:
    """A port that stores nothing (the agent loop's own cost)."""

    conversation_id = "bench"

    async def emit(self, events: Sequence[Event]) -> None:
        return None

    async def flush(self) -> None:
        return None

    async def history(self, format: Any) -> list[dict[str, Any]]:
        return list(HELLO)

    async def relay_decision(self, relay_id: str) -> RelayResolved:
        raise NotImplementedError


def _provider(chunks: int) -> ScriptedProvider:
    return ScriptedProvider([ScriptedTurn(text=["x"] * chunks, usage=(1, 1))], check=False)


async def _provider_alone(chunks: int) -> float:
    provider = _provider(chunks)
    started = time.process_time()
    async for _ in provider.invoke(ModelRequest(model="m", messages=HELLO)):
        pass
    return time.process_time() - started


async def _agent(chunks: int, make_port: Callable[[], Any], clock: Callable[[], float]) -> float:
    port = make_port()
    started = clock()
    await Agent(_provider(chunks), model="m").run(port, "hi")
    elapsed = clock() - started
    close = getattr(port, "aclose", None)
    if close is not None:
        await close()
    return elapsed


async def _sqlite(chunks: int, synchronous: str, batch_size: int) -> float:
    directory = tempfile.mkdtemp(prefix="cg-bench-")
    log = await open_event_log(f"sqlite:///{directory}/events.db?synchronous={synchronous}")
    try:
        return await _agent(chunks, lambda: LogPort(log, "bench", batch_size=batch_size), time.perf_counter)
    finally:
        await log.close()


async def measure(chunks: int, rounds: int) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {}

    def add(name: str, seconds: float, baseline: float = 0.0) -> None:
        rows.setdefault(name, []).append((seconds - baseline) / chunks * 1e6)

    for _ in range(rounds):
        alone = await _provider_alone(chunks)
        add("agent loop (null port)", await _agent(chunks, NullPort, time.process_time), alone)
        memory = lambda: LogPort(MemoryEventLog(), "bench")  # noqa: E731 - a factory per round
        add(
            "agent + LogPort(memory) + incremental fold",
            await _agent(chunks, memory, time.process_time),
            alone,
        )
    sqlite_chunks = max(500, chunks // 10)
    for _ in range(rounds):
        for synchronous in ("full", "normal"):
            for batch in (512, 1):
                label = (
                    f"agent + LogPort(sqlite {synchronous}), batch {'<= 512' if batch > 1 else '1'} (wall)"
                )
                add(label, await _sqlite(sqlite_chunks, synchronous, batch) * chunks / sqlite_chunks)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    chunks, rounds = (4_000, 3) if args.quick else (20_000, 5)
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    rows = asyncio.run(measure(chunks, rounds))
    for name, values in rows.items():
        median = statistics.median(values)
        against = "" if "wall" in name else f"  (target <= {TARGET_US:g} us: {median / TARGET_US:.2f}x)"
        print(f"{name:62s} {median:8.1f} us/chunk{against}")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
