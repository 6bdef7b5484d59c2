"""OTLP ingest end to end: ``POST /v1/traces`` on a real ``convograph serve`` (127.0.0.1 only).

    python -m benchmarks.otlp            # full size
    python -m benchmarks.otlp --quick    # smaller, for smoke runs
    python -m benchmarks.otlp --compare /path/to/other/src --rounds 3   # side by side

Workload (fixed seed): agent traces as GenAI instrumentation emits them (`tests.support.genai_traces`):
an ``invoke_agent`` span around 2-4 ``chat`` spans, each carrying the whole history so far in
``gen_ai.input.messages`` and its answer in ``gen_ai.output.messages`` (text, reasoning, tool calls),
``execute_tool`` spans, and now and then a subagent under a tool; 20-30 spans per trace, ~5 KB of
attributes per chat span. Spans go out in end order, cut into exports of 512 spans (the SDK's
``BatchSpanProcessor`` default), as protobuf, posted by 2 concurrent clients; every reply comes
after the event log made the batch durable (SQLite, synchronous=FULL, the embedded default).

A second workload has the same spans without message content (``metadata``: what instrumentations
send by default, content capture being opt-in): operation, model, usage, tool names and ids.

Reported, for each workload and for a server with the context-intelligence graph (the default) and
one without: spans/s end to end; then the **same exports sent again** (an exporter retrying):
spans/s and the events stored by the re-send, which must be 0.

``--compare SRC`` measures this checkout's server and one running another source tree (``SRC`` on
``PYTHONPATH``, e.g. an older commit unpacked with ``git archive <commit> src | tar -x -C DIR``)
side by side: alternately, ``--rounds`` times each, a fresh server every time, and reports the
median server CPU per span of each and their ratio. On a shared machine the server's CPU time is
the figure least disturbed by the other load; wall-clock rates are printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
from tests.support.genai_traces import Simulation, assistant, call, reasoning, text, tool_message, user
from tests.support.server import ServerProcess, start_server

from convograph.integrations.otlp.encode import to_otlp_protobuf
from convograph.integrations.otlp.model import Span

EXPORT_SIZE = 512
CLIENTS = 2


def agent_trace(rnd: random.Random, number: int) -> list[Span]:
    """One agent run's spans in end order (see the module docstring)."""
    sim = Simulation(trace_id=f"{rnd.getrandbits(128):032x}")
    filler = "lorem ipsum dolor sit amet " * 8

    def run_agent(parent: str | None, name: str, task: str, depth: int) -> str:
        def body(agent_span: str) -> None:
            history: list[dict[str, Any]] = [user(f"{task} #{number}: {filler}")]
            steps = rnd.randint(2, 4)
            for step in range(steps):
                last = step == steps - 1
                parts = [
                    reasoning(f"thinking about step {step}. {filler}"),
                    text(f"{name} step {step}. {filler}"),
                ]
                ids = [] if last else [f"call_{number}_{depth}_{step}_{i}" for i in range(rnd.randint(1, 3))]
                parts += [call(cid, "search", {"q": cid, "limit": 10}) for cid in ids]
                output = assistant(*parts)
                sim.chat(agent_span, history, output, usage=(rnd.randint(100, 4000), rnd.randint(10, 400)))
                history.append(output)
                for cid in ids:
                    nested = depth == 0 and rnd.random() < 0.15
                    runner = (
                        (lambda span, cid=cid: run_agent(span, "researcher", cid, depth + 1))
                        if nested
                        else None
                    )
                    _span, result = sim.tool(
                        agent_span, cid, "search", {"q": cid}, f"{filler} ({cid})", runner
                    )
                    history.append(tool_message(cid, result))

        sim.agent(parent, name, body)
        return f"{name} done"

    run_agent(None, "assistant", "investigate", 0)
    return sim.ended


CONTENT = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)


def workload(traces: int, seed: int = 7, *, content: bool = True) -> tuple[list[bytes], int]:
    rnd = random.Random(seed)
    spans = [span for number in range(traces) for span in agent_trace(rnd, number)]
    if not content:
        spans = [
            msgspec.structs.replace(
                span, attributes={k: v for k, v in span.attributes.items() if k not in CONTENT}
            )
            for span in spans
        ]
    bodies = [to_otlp_protobuf(spans[i : i + EXPORT_SIZE]) for i in range(0, len(spans), EXPORT_SIZE)]
    return bodies, len(spans)


async def post_all(url: str, bodies: list[bytes]) -> float:
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    headers = {"Content-Type": "application/x-protobuf"}

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            response = await client.post("/v1/traces", content=queue.get_nowait(), headers=headers)
            response.raise_for_status()
            assert response.content == b"", response.content  # full success: no partial success

    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(CLIENTS)))
        return time.perf_counter() - started


def stored_events(url: str) -> int:
    rows = httpx.get(f"{url}/v1/conversations", timeout=60).json()["conversations"]
    return sum(row["eventCount"] for row in rows)


def native_replay(url: str) -> tuple[int, float]:
    """The events the OTLP ingest stored, posted again as native NDJSON batches to fresh
    conversations on the same server (same events, same sizes): the event log's own ingest rate."""
    batches: list[tuple[str, bytes]] = []
    for row in httpx.get(f"{url}/v1/conversations", timeout=60).json()["conversations"]:
        lines = httpx.get(f"{url}/v1/conversations/{row['id']}/events", timeout=60).text.splitlines()
        batches.append((f"native-{row['id']}", "\n".join(lines).encode() + b"\n"))
    count = sum(body.count(b"\n") for _, body in batches)

    async def post() -> float:
        queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        for item in batches:
            queue.put_nowait(item)

        async def client_loop(client: httpx.AsyncClient) -> None:
            while not queue.empty():
                cid, body = queue.get_nowait()
                response = await client.post(
                    f"/v1/conversations/{cid}/events",
                    content=body,
                    headers={"Content-Type": "application/x-ndjson"},
                )
                response.raise_for_status()

        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            started = time.perf_counter()
            await asyncio.gather(*(client_loop(client) for _ in range(CLIENTS)))
            return time.perf_counter() - started

    return count, asyncio.run(post())


def warm_up(url: str) -> None:
    """One small export to a conversation of its own, so the server has loaded what the OTLP path
    imports lazily (the protobuf modules: ~0.1 s of CPU once) before the measurement starts."""
    sim = Simulation(trace_id="f" * 32)
    sim.agent(None, "warm-up", lambda span: sim.chat(span, [user("hi")], assistant(text("hello"))))
    response = httpx.post(
        f"{url}/v1/traces",
        content=to_otlp_protobuf(sim.ended),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=60,
    )
    response.raise_for_status()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (the SQLite writer included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    server: ServerProcess, bodies: list[bytes], spans: int, *, native: bool = True
) -> dict[str, float]:
    pid = server.process.pid
    warm_up(server.url)
    cpu = cpu_seconds(pid)
    first = asyncio.run(post_all(server.url, bodies))
    cpu_first = cpu_seconds(pid) - cpu
    events = stored_events(server.url)
    cpu = cpu_seconds(pid)
    again = asyncio.run(post_all(server.url, bodies))
    cpu_again = cpu_seconds(pid) - cpu
    resent = stored_events(server.url) - events
    native_events, native_seconds = native_replay(server.url) if native else (0, 1.0)
    return {
        "spans_per_s": spans / first,
        "cpu_us_per_span": cpu_first / spans * 1e6,
        "resend_cpu_us_per_span": cpu_again / spans * 1e6,
        "events_per_s": events / first,
        "resend_spans_per_s": spans / again,
        "events": events,
        "resend_new_events": resent,
        "native_events_per_s": native_events / native_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--traces", type=int, default=None)
    parser.add_argument(
        "--compare", type=Path, default=None, help="another source tree to measure side by side"
    )
    parser.add_argument("--rounds", type=int, default=3, help="servers per variant with --compare")
    parser.add_argument("--only", choices=["content", "metadata"], default=None)
    parser.add_argument("--no-intelligence-only", action="store_true", help="skip the default server")
    args = parser.parse_args()
    traces = args.traces or (100 if args.quick else 1000)
    servers: list[tuple[str, tuple[str, ...]]] = [("--no-intelligence", ("--no-intelligence",))]
    if not args.no_intelligence_only:
        servers.insert(0, ("intelligence on (default)", ()))
    for content in (True, False):
        name = "content" if content else "metadata"
        if args.only not in (None, name):
            continue
        bodies, spans = workload(traces, content=content)
        size = sum(len(body) for body in bodies)
        print(
            f"[{name}] {traces} traces, {spans} spans, {len(bodies)} exports of <= {EXPORT_SIZE}, {size / 1e6:.1f} MB"
        )
        for label, extra in servers:
            if args.compare is not None:
                compare(bodies, spans, label, extra, args.compare.resolve(), args.rounds)
                continue
            with tempfile.TemporaryDirectory() as tmp:
                server = start_server(Path(tmp) / "data", *extra, ready_timeout=180)
                try:
                    before = os.getloadavg()[0]
                    result = measure(server, bodies, spans)
                finally:
                    server.stop()
            print(
                f"  {label}: {result['spans_per_s']:,.0f} spans/s wall, server CPU {result['cpu_us_per_span']:.0f} us/span "
                f"(= {1e6 / result['cpu_us_per_span']:,.0f} spans per CPU-second); re-sent: server CPU "
                f"{result['resend_cpu_us_per_span']:.0f} us/span"
            )
            print(
                f"    {result['events_per_s']:,.0f} events/s stored; "
                f"the same events as native NDJSON: {result['native_events_per_s']:,.0f} events/s; "
                f"re-sent: {result['resend_spans_per_s']:,.0f} spans/s, {result['resend_new_events']:.0f} new events "
                f"(of {result['events']:.0f}); load {before:.1f} -> {os.getloadavg()[0]:.1f}"
            )


def compare(
    bodies: list[bytes], spans: int, label: str, extra: tuple[str, ...], other: Path, rounds: int
) -> None:
    """This checkout against ``other`` (a source tree), alternately, ``rounds`` servers each."""
    variants = {"this checkout": None, f"{other}": {"PYTHONPATH": str(other)}}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    loads: list[float] = []
    for _ in range(rounds):
        for name, env in variants.items():
            with tempfile.TemporaryDirectory() as tmp:
                server = start_server(Path(tmp) / "data", *extra, env=env, ready_timeout=180)
                try:
                    loads.append(os.getloadavg()[0])
                    results[name].append(measure(server, bodies, spans, native=False))
                finally:
                    server.stop()
    print(f"  {label} ({rounds} servers each, alternately; load {min(loads):.1f}-{max(loads):.1f}):")
    medians: dict[str, float] = {}
    for name, runs in results.items():
        cpu = statistics.median(run["cpu_us_per_span"] for run in runs)
        again = statistics.median(run["resend_cpu_us_per_span"] for run in runs)
        wall = statistics.median(run["spans_per_s"] for run in runs)
        new = max(run["resend_new_events"] for run in runs)
        medians[name] = cpu
        print(
            f"    {name}: server CPU {cpu:.1f} us/span (= {1e6 / cpu:,.0f} spans per CPU-second; runs "
            f"{', '.join(f'{run["cpu_us_per_span"]:.0f}' for run in runs)}), {wall:,.0f} spans/s wall; "
            f"re-sent {again:.1f} us/span, {new:.0f} new events"
        )
    mine, theirs = medians.values()
    print(f"    ratio: this checkout uses {mine / theirs:.2f}x the server CPU per span of the other")


if __name__ == "__main__":
    main()
