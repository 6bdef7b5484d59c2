"""Flat-graph reduce benchmark: throughput, growth, memory, and the cost of keeping every version.

    python -m benchmarks.reduce            # 10k, 100k and 1M events per workload
    python -m benchmarks.reduce --quick    # 10k and 100k only

Per workload and size it reports events/s over the whole stream, the per-event µs of the first and
last 10 % (growth ratio = last / first), and (at 100k) the memory per event of the final graph and
of keeping every intermediate graph. Also replays the shared upstream workload w1 (20k events),
which upstream's copy-per-event reducer takes 23-25 s on.
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
import tracemalloc
from pathlib import Path

from benchmarks.workloads import WORKLOADS
from convograph.events import Event, read_ndjson_file
from convograph.graph import Graph, create_graph, reduce_event

W1 = Path(__file__).resolve().parents[1].parent / "shared" / "workloads" / "w1-flat-20000.ndjson"


def timed_reduce(events: list[Event]) -> tuple[float, float, float]:
    """Total seconds, and µs/event over the first and last 10 %."""
    tenth = max(1, len(events) // 10)
    graph = create_graph()
    started = time.perf_counter()
    for event in events[:tenth]:
        graph = reduce_event(graph, event)
    first_done = time.perf_counter()
    for event in events[tenth:-tenth]:
        graph = reduce_event(graph, event)
    last_start = time.perf_counter()
    for event in events[-tenth:]:
        graph = reduce_event(graph, event)
    finished = time.perf_counter()
    first = (first_done - started) / tenth * 1e6
    last = (finished - last_start) / tenth * 1e6
    return finished - started, first, last


def memory(events: list[Event]) -> tuple[float, float]:
    """Bytes per event of the final graph alone, and with every intermediate version kept."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    graph = create_graph()
    versions: list[Graph] = []
    for event in events:
        graph = reduce_event(graph, event)
        versions.append(graph)
    all_versions = tracemalloc.get_traced_memory()[0] - base
    del versions
    gc.collect()
    final_only = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del graph
    return final_only / len(events), all_versions / len(events)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="skip the 1M-event runs")
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]

    print(f"python {platform.python_version()} on {platform.machine()}, {time.strftime('%Y-%m-%d %H:%M')}")
    print(
        f"{'workload':<11} {'events':>9} {'events/s':>10} {'µs first10%':>12} {'µs last10%':>11} {'growth':>7}"
    )
    per_event_10k: dict[str, float] = {}
    for name, make in WORKLOADS.items():
        for size in sizes:
            events = make(size)
            total, first, last = timed_reduce(events)
            per_event = total / size * 1e6
            if size == 10_000:
                per_event_10k[name] = per_event
            growth = f"{last / first:.2f}"
            print(
                f"{name:<11} {size:>9,} {size / total:>10,.0f} {first:>12.2f} {last:>11.2f} {growth:>7}",
                end="",
            )
            if size == 1_000_000:
                print(f"   per-event at 1M / at 10k = {per_event / per_event_10k[name]:.2f}", end="")
            print()
            del events
            gc.collect()

    print("\nmemory at 100k events (tracemalloc):")
    print(f"{'workload':<11} {'final B/event':>14} {'all versions B/event':>21} {'ratio':>6}")
    for name, make in WORKLOADS.items():
        final_only, all_versions = memory(make(100_000))
        print(f"{name:<11} {final_only:>14.0f} {all_versions:>21.0f} {all_versions / final_only:>6.2f}")

    if W1.exists():
        batch = read_ndjson_file(W1)
        total, first, last = timed_reduce(batch.events)
        print(
            f"\nshared w1 ({len(batch.events):,} events): {total * 1000:.0f} ms total, "
            f"{len(batch.events) / total:,.0f} events/s (upstream: 23-25 s)"
        )


if __name__ == "__main__":
    main()
