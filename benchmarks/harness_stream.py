"""A long answer from an agent reaches an open SSE subscriber of ``convograph serve``: lag per event.

    python -m benchmarks.harness_stream                 # 10,000 deltas at full speed, then paced
    python -m benchmarks.harness_stream --chunks 2000

An agent streams one answer of N text deltas through `RemotePort` (batched posts) into a server
subprocess while a subscriber follows the conversation's SSE stream (`ConvographClient.stream`)
in the same process. The lag of an event is the time from the harness's `emit` to its arrival at
the subscriber. Two runs: the scripted model at full speed (everything queues: the worst case for
lag), and paced at 2 ms per delta (500 deltas/s, a fast real model).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness_fleet import _start_server
from convograph.client import ConvographClient
from convograph.events import Event, Text
from convograph.harness import Agent
from convograph.harness.remote import RemotePort
from convograph.testing import ScriptedProvider, ScriptedTurn


class TimingPort(RemotePort):
    """Records when each text delta was emitted, by ``eventId``."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sent: dict[str, float] = {}

    async def emit(self, events: Sequence[Event]) -> None:
        now = time.perf_counter()
        for event in events:
            if isinstance(event, Text) and event.event_id is not None:
                self.sent[event.event_id] = now
        await super().emit(events)


async def _one(url: str, cid: str, chunks: int, delay: float, linger: float) -> tuple[list[float], int]:
    async with ConvographClient(url, timeout=60) as client:
        received: dict[str, float] = {}

        async def subscribe() -> None:
            async for event in client.stream(cid):
                if isinstance(event, Text) and event.event_id is not None:
                    received[event.event_id] = time.perf_counter()
                if event.type == "harness_end":
                    return

        follower = asyncio.create_task(subscribe())
        await asyncio.sleep(0.5)  # the subscriber is connected before the first event
        provider = ScriptedProvider([ScriptedTurn(text=["tok "] * chunks, delay=delay)], check=False)
        port = TimingPort(client, cid, linger=linger)
        await Agent(provider, model="m").run(port, "write a long answer")
        await port.aclose()
        await asyncio.wait_for(follower, 120)
    missing = set(port.sent) - set(received)
    if missing:
        raise RuntimeError(f"{len(missing)} deltas never reached the subscriber")
    return sorted((received[i] - port.sent[i]) * 1000 for i in port.sent), port.attempts


def _report(label: str, measured: tuple[list[float], int]) -> None:
    lags, posts = measured
    p = statistics.quantiles(lags, n=100)
    print(
        f"{label:34s} p50 {p[49]:7.1f} ms  p99 {p[98]:7.1f} ms  max {lags[-1]:7.1f} ms  "
        f"({posts} POSTs; target p99 < 100 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--linger", type=float, default=0.01, help="RemotePort linger (seconds)")
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="cg-stream-"))
    process, url = _start_server(data)
    try:
        print(f"load average at start: {os.getloadavg()[0]:.1f}")
        fast = asyncio.run(_one(url, "stream-fast", args.chunks, 0.0, args.linger))
        _report(f"{args.chunks} deltas, full speed", fast)
        paced = asyncio.run(_one(url, "stream-paced", args.chunks, 0.002, args.linger))
        _report(f"{args.chunks} deltas, 2 ms apart", paced)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    finally:
        process.terminate()
        process.wait(30)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
