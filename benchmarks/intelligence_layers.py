"""Semantic layers: in-process ingest with the kernel/foundation layers off vs on, and the 20
questions of docs/querying.md.

    python -m benchmarks.intelligence_layers            # < 2 minutes
    python -m benchmarks.intelligence_layers --quick    # smoke run (seconds)

Both runs use the same events (``gen_ci_events.generate`` from ../shared/workloads, one workspace
per generator setting), a fresh embedded FalkorDB (``IntelligenceService.open``) and the SQLite
journal; the clock covers ``ingest_many`` in batches of 1,000 → ``wait_applied`` (everything
queryable). Question latency is the p50/p95 of ``IntelligenceService.cypher`` on the layered graph.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from convograph.intelligence.service import IntelligenceService

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT.parent / "shared" / "workloads"
DOC = ROOT / "docs" / "querying.md"


def events(sessions: int, tools: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(WORKLOADS))
    from gen_ci_events import generate  # type: ignore[import-not-found]

    return [
        {"event": ev["event"], "workspace": ws, "data": ev["data"]}
        for ws, ev in generate(sessions, tools, 7, 3, 8, "2026-03-02T09:00:00+00:00")
    ]


def child_cpu(service: IntelligenceService) -> float:
    """CPU seconds (user + system) of the embedded FalkorDB child so far."""
    pid = service.embedded.pid if service.embedded is not None else None
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ingest(bodies: list[dict[str, Any]], layers: bool) -> tuple[float, float, IntelligenceService]:
    """Returns (wall seconds, CPU seconds of both processes, the service)."""
    directory = tempfile.mkdtemp(prefix="cg-layers-")
    service = IntelligenceService.open(directory, semantic_layers=layers)
    start = time.perf_counter()
    cpu = time.process_time()
    graph_cpu = child_cpu(service)
    for offset in range(0, len(bodies), 1000):
        service.ingest_many(bodies[offset : offset + 1000])
    if not service.wait_applied(timeout=600):
        raise SystemExit("applier did not finish")
    wall = time.perf_counter() - start
    ours = time.process_time() - cpu
    theirs = child_cpu(service) - graph_cpu
    print(
        f"  layers {'on ' if layers else 'off'}: {len(bodies) / wall:,.0f} events/s wall ({wall:.2f} s); "
        f"CPU {ours:.2f} s here (applier incl.) + {theirs:.2f} s FalkorDB = "
        f"{(ours + theirs) / len(bodies) * 1e6:.0f} us/event"
    )
    return wall, ours + theirs, service


def questions() -> dict[int, str]:
    found = re.findall(r"### Q(\d+)\..*?\n```cypher\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    return {int(n): q for n, q in found}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sessions", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args(argv)
    sessions = args.sessions or (4 if args.quick else 60)
    repeat = args.repeat or (2 if args.quick else 15)
    bodies = events(sessions, 24)
    load = os.getloadavg()[0]
    print(f"{len(bodies):,} events, {sessions} root sessions; load average {load:.1f}")
    results: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for layers in (False, True):
        wall, cpu_s, service = ingest(bodies, layers)
        results["on" if layers else "off"] = len(bodies) / wall
        cpu["on" if layers else "off"] = cpu_s
        if layers:
            workspace = Counter(b["workspace"] for b in bodies).most_common(1)[0][0]
            print(f"  questions (workspace {workspace}, p50 / p95 over {repeat} runs):")
            for number, query in questions().items():
                times = []
                for _ in range(repeat):
                    t = time.perf_counter()
                    service.cypher(query, workspace=workspace)
                    times.append((time.perf_counter() - t) * 1000)
                times.sort()
                p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
                print(f"    Q{number:<2} {statistics.median(times):7.1f} / {p95:7.1f} ms")
            nodes = service.cypher("MATCH (n) RETURN count(n) AS c", workspace=workspace).results
            print(f"  graph of {workspace}: {json.dumps(nodes)}")
        service.close()
    print(
        f"layers on / off: wall throughput {results['on'] / results['off']:.2f}x, "
        f"CPU per event {cpu['on'] / cpu['off']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
