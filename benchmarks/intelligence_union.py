"""Write cost of the all-workspaces graph (docs/intelligence.md, "All workspaces as one database").

    python -m benchmarks.intelligence_union [--sessions 100] [--rounds 2]

Ingests one generated ci workload (every layer, as `convograph serve` does) into a fresh embedded
FalkorDB with the all-workspaces graph off and on, alternately, ``--rounds`` times each (the
machine is shared: compare the two columns of one run). Reports journal-to-graph throughput
(events/s from the first append until the graph has applied everything), the engine's memory
(``used_memory`` of ``INFO memory``) and the first-start copy of a deployment without it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.intelligence import generate
from convograph.intelligence.service import IntelligenceService


def used_memory(service: IntelligenceService) -> int:
    info = service.engine.command("INFO", "memory")  # type: ignore[attr-defined]
    return int(info["used_memory"])


def ingest(lines: list[bytes], union: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="cg-bench-union-") as root:
        service = IntelligenceService.open(root, all_workspaces_graph=union)
        try:
            baseline = used_memory(service)
            started = time.perf_counter()
            for start in range(0, len(lines), 5000):
                service.ingest_many(lines[start : start + 5000])
            assert service.wait_applied(timeout=1800)
            elapsed = time.perf_counter() - started
            assert service.status()["dead_letters"] == 0
            return {
                "events_per_s": len(lines) / elapsed,
                "graph_mb": (used_memory(service) - baseline) / 2**20,
            }
        finally:
            service.close()


def backfill(lines: list[bytes]) -> dict[str, float]:
    """A deployment from before the all-workspaces graph: its first start copies every graph."""
    with tempfile.TemporaryDirectory(prefix="cg-bench-union-") as root:
        service = IntelligenceService.open(root, all_workspaces_graph=False)
        service.ingest_many(lines)
        assert service.wait_applied(timeout=1800)
        service.close()
        started = time.perf_counter()
        service = IntelligenceService.open(root, all_workspaces_graph=True)
        elapsed = time.perf_counter() - started
        nodes = service.engine.execute(
            service.names.all_graph, "MATCH (n) RETURN count(n)", read_only=True
        ).rows[0][0]
        service.close()
        return {"copy_s": elapsed, "nodes": nodes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100, help="root sessions of the generated workload")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cg-bench-union-") as scratch:
        lines = generate(Path(scratch) / "ci.ndjson", args.sessions)
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(args.rounds):
        for mode in ("off", "on"):
            runs[mode].append(ingest(lines, union=mode == "on"))
    result: dict[str, Any] = {"events": len(lines), "load": os.getloadavg()}
    for mode, items in runs.items():
        result[mode] = {
            key: round(statistics.median(item[key] for item in items), 1)
            for key in ("events_per_s", "graph_mb")
        }
    result["on/off throughput"] = round(result["on"]["events_per_s"] / result["off"]["events_per_s"], 2)
    result["on/off memory"] = round(result["on"]["graph_mb"] / result["off"]["graph_mb"], 2)
    result["first start copy"] = backfill(lines)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
