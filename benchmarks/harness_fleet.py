"""Many agents with subagents streaming into one ``convograph serve`` at once: nothing lost, and the
server's CPU time per event.

    python -m benchmarks.harness_fleet                 # 50 agents x 3 subagents, 200-chunk answers
    python -m benchmarks.harness_fleet --agents 10 --chunks 50

Each agent (its own conversation, through its own `RemotePort`) calls a subagent tool three times
in parallel; each subagent streams an answer of ``--chunks`` deltas, then the agent streams its
own. The scripted provider answers at full speed, so this is the server's ingest path under the
harness's batching, not a model's pace. Afterwards every conversation is read back
(``GET .../events``) and compared with what the ports emitted: events lost or duplicated must be 0.
The server's CPU time comes from ``/proc/<pid>/stat`` (user + system) over the run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from convograph.client import ConvographClient
from convograph.events import Event
from convograph.harness import Agent
from convograph.harness.remote import RemotePort
from convograph.testing import ScriptedCall, ScriptedProvider, ScriptedTurn


class CountingPort(RemotePort):
    """A `RemotePort` that remembers the ``eventId`` of everything emitted."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.emitted: set[str] = set()

    async def emit(self, events: Sequence[Event]) -> None:
        stamped = list(events)
        await super().emit(stamped)
        # RemotePort stamps missing ids itself; the harness always sets them, so these are final.
        self.emitted.update(e.event_id for e in stamped if e.event_id is not None)


def _start_server(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "convograph", "serve", "--port", str(port), "--data-dir", str(data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/openapi.json", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("the server did not start")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _one_agent(client: ConvographClient, index: int, chunks: int) -> tuple[CountingPort, str]:
    answer = ["word "] * chunks
    sub_provider = ScriptedProvider([ScriptedTurn(text=answer, usage=(50, chunks))] * 3)
    researcher = Agent(sub_provider, model="small", name="researcher")
    calls = [ScriptedCall("researcher", {"task": f"part {k}"}) for k in range(3)]
    lead_provider = ScriptedProvider(
        [
            ScriptedTurn(text="Splitting the work.", tool_calls=calls),
            ScriptedTurn(text=answer, usage=(200, chunks)),
        ]
    )
    lead = Agent(lead_provider, model="big", tools=[researcher.as_tool()], name="lead")
    cid = f"fleet-{index}"
    port = CountingPort(client, cid)
    result = await lead.run(port, f"Task {index}")
    await port.aclose()
    if result.reason != "final":
        raise RuntimeError(f"agent {index} ended {result.reason}: {result.error}")
    return port, cid


async def run(agents: int, chunks: int) -> None:
    data = Path(tempfile.mkdtemp(prefix="cg-fleet-"))
    process, url = _start_server(data)
    try:
        async with ConvographClient(url, timeout=60) as client:
            load = os.getloadavg()[0]
            cpu_before = _cpu_seconds(process.pid)
            started = time.perf_counter()
            done = await asyncio.gather(*(_one_agent(client, i, chunks) for i in range(agents)))
            wall = time.perf_counter() - started
            cpu = _cpu_seconds(process.pid) - cpu_before
            emitted = stored = lost = duplicated = 0
            for port, cid in done:
                events = await client.replay(cid)
                ids = [e.event_id for e in events]
                emitted += len(port.emitted)
                stored += len(events)
                lost += len(port.emitted - set(ids))
                duplicated += len(ids) - len(set(ids))
        print(
            f"{agents} agents x 3 subagents, {chunks}-chunk answers; load average {load:.1f} -> {os.getloadavg()[0]:.1f}"
        )
        print(f"events emitted {emitted}, stored {stored}, lost {lost}, duplicated {duplicated}")
        print(
            f"wall {wall:.1f} s ({emitted / wall:,.0f} events/s); server CPU {cpu:.1f} s = {cpu / emitted * 1e6:.0f} us per event"
        )
    finally:
        process.terminate()
        process.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--chunks", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(run(args.agents, args.chunks))


if __name__ == "__main__":
    main()
