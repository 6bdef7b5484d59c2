"""Two checkouts timed side by side in one process: before / after ratios that the machine's load
moves less than it moves separate runs.

    python -m benchmarks.side_by_side /path/to/before /path/to/after --rounds 12
    CONVOGRAPH_NATIVE=0 python -m benchmarks.side_by_side BEFORE AFTER   # both interpreted

Each checkout (a repository root with ``src/`` and ``benchmarks/``; its compiled modules built by
its own ``scripts/build-native``) is imported in turn: its ``convograph`` and ``benchmarks``
modules are kept apart and put back into ``sys.modules`` before each of its measurements (lazy
imports inside the library then resolve to the same checkout). Rounds alternate which checkout
goes first. Each measure is the CPU time (``time.process_time``) of one call; the report gives,
per measure, the minimum and median over the rounds of each checkout and their ratio (after /
before). To see the method's own bias, compare a checkout with a copy of it in another directory
(not with itself: a compiled extension module loads once per file): identical code read 0.92-1.06x
(medians of 8 rounds) at load average 3-4.5 on a shared 2-core machine.

Measures: the one-shot DAG of the ~100k-node agent conversation (`benchmarks.projections`' part
3), split into building the layout input and the layout itself, flat graph and hypergraph; the
hypergraph reducer per event, one by one, on ``w2-hg-200x100x1`` (mostly streamed REPL progress)
and a 50k-event chat stream, and that stream in one batch; an edit on an older version of a
20k-event conversation (a fork: replays the log).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from types import ModuleType
from typing import Any

Measure = Callable[[], object]


def _own_modules() -> dict[str, ModuleType]:
    return {
        name: module
        for name, module in sys.modules.items()
        if name.split(".")[0] in ("convograph", "benchmarks")
    }


def _use(modules: dict[str, ModuleType]) -> None:
    for name in list(_own_modules()):
        del sys.modules[name]
    sys.modules.update(modules)


def load(root: Path) -> tuple[dict[str, Measure], dict[str, ModuleType]]:
    """Import the checkout at ``root`` (no other checkout's modules loaded) and set up its
    measures: the workloads are built once, with its own event types."""
    _use({})
    sys.path[:0] = [str(root / "src"), str(root)]
    try:
        from benchmarks.hypergraph import w2_events
        from benchmarks.hypergraph_workload import chat_stream
        from benchmarks.projections_workload import agent_conversation
        from convograph import create_graph, reduce_events
        from convograph.events import parse_event
        from convograph.hypergraph import (
            create_conversation,
            default_active,
            edit_message,
            reduce_conversation,
            reduce_conversation_events,
        )
        from convograph.hypergraph import queries as q
        from convograph.projections import dag, sources
    finally:
        del sys.path[:2]
    if not str(dag.__file__).startswith(str(root)):
        raise SystemExit(f"{root}: imported {dag.__file__} instead")
    events = [parse_event(event) for event in agent_conversation(4546)]
    graph = reduce_events(create_graph(), events)
    conversation = reduce_conversation_events(create_conversation(), events)
    active = default_active(conversation)
    del events
    _, w2 = w2_events(200, 100, 1)
    chat = list(islice(chat_stream(), 50_000))
    older = reduce_conversation_events(create_conversation(), chat[:20_000])
    users = [m for m in default_active(older).message_ids if q.get_message(older, m).role == "user"]
    middle = users[len(users) // 2]
    edit_message(older, middle, "the head moves on")  # ``older`` is an older version now

    def one_by_one(stream: list[Any]) -> object:
        conv = create_conversation()
        for event in stream:
            conv = reduce_conversation(conv, event)
        return conv

    flat_input = dag.graph_layout_input(graph)
    hyper_input = sources.conversation_layout_input(conversation, active)
    measures: dict[str, Measure] = {
        "flat DAG input (ms)": lambda: dag.graph_layout_input(graph),
        "flat DAG layout (ms)": lambda: dag._layout(flat_input),
        "hypergraph DAG input (ms)": lambda: sources.conversation_layout_input(conversation, active),
        "hypergraph DAG layout (ms)": lambda: dag._layout(hyper_input),
        f"reduce w2-hg-200x100x1 one by one ({len(w2)} events, ms)": lambda: one_by_one(w2),
        "reduce chat 50k one by one (ms)": lambda: one_by_one(chat),
        "reduce chat 50k in one batch (ms)": lambda: reduce_conversation_events(create_conversation(), chat),
        "edit on an older version, 20k events (fork, ms)": lambda: edit_message(older, middle, "edited"),
    }
    return measures, _own_modules()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    sides = {"before": load(args.before.resolve()), "after": load(args.after.resolve())}
    names = list(sides["before"][0])
    times: dict[str, dict[str, list[float]]] = {side: {name: [] for name in names} for side in sides}
    for round_number in range(args.rounds):
        for side in ("before", "after") if round_number % 2 == 0 else ("after", "before"):
            measures, modules = sides[side]
            _use(modules)
            for name in names:
                gc.collect()
                started = time.process_time()
                measures[name]()
                times[side][name].append((time.process_time() - started) * 1000)
    print(f"{args.rounds} rounds, CPU ms per call: before {args.before}, after {args.after}")
    print("| measure | before min / median | after min / median | after / before (median, min) |")
    print("|---|---:|---:|---:|")
    for name in names:
        before, after = times["before"][name], times["after"][name]
        print(
            f"| {name} | {min(before):.1f} / {statistics.median(before):.1f} "
            f"| {min(after):.1f} / {statistics.median(after):.1f} "
            f"| {statistics.median(after) / statistics.median(before):.3f}x, {min(after) / min(before):.3f}x |"
        )


if __name__ == "__main__":
    main()
