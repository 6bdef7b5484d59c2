"""Hypergraph reduce and operations benchmark (issue 3 targets, upstream spec §8 workloads).

    python -m benchmarks.hypergraph            # w2 workloads, a 1M-event chat stream, ops at 100k
    python -m benchmarks.hypergraph --quick    # w2 100x50x1 only, 100k-event stream, ops at 20k

Reports, per workload: µs/event over the whole stream (events pre-parsed, as upstream times its
reducer), the first-10 % and last-10 % per-event medians and their ratio (upstream's P1 statistic:
``median(last) / max(1 µs, median(first))``; each call timed on its own), and memory per event of the
final conversation. Then the cost of each operation on the head of a 100k-event conversation
(median of repeated runs), and of one on an *older* version (which forks the lineage, O(n)).

Targets: reduce ≤ 3 µs/event; last/first ≤ 1.5; an edit or branch on 100k events < 5 ms.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterable
from itertools import islice
from pathlib import Path

from benchmarks.hypergraph_workload import chat_stream, rlm_stream
from convograph.events import Event, read_ndjson_file
from convograph.hypergraph import (
    Conversation,
    create_conversation,
    default_active,
    edit_message,
    list_siblings,
    reduce_conversation,
    reduce_conversation_events,
    regenerate,
    summarize_range,
    switch_branch,
)
from convograph.hypergraph import queries as q

WORKLOADS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "workloads"
W2 = [(100, 50, 1), (200, 100, 1), (50, 200, 3)]
TARGET_US = 3.0
TARGET_RATIO = 1.5
TARGET_OP_MS = 5.0


def w2_events(turns: int, progress: int, runs: int) -> tuple[str, list[Event]]:
    path = WORKLOADS_DIR / f"w2-hg-{turns}x{progress}x{runs}.ndjson"
    if path.exists():
        return path.name, list(read_ndjson_file(path).events)
    return f"rlm_stream({turns},{progress},{runs})", list(rlm_stream(turns, progress, runs))


def reduce_stream(
    events: Iterable[Event], total: int, batch: int = 50_000
) -> tuple[Conversation, float, float, float, float]:
    """(conversation, wall µs/event, CPU µs/event, median µs/event of the first 10 %, of the last 10 %).

    Events are drawn from ``events`` ``batch`` at a time, outside the timed region, so a lazy
    generator's cost is not counted and memory stays bounded by one batch plus the conversation.
    Batches touching the first or last 10 % are timed call by call (upstream's method; the timer
    adds ~0.1 µs per call), the others in bulk.
    """
    tenth = max(1, total // 10)
    first: list[float] = []
    last: list[float] = []
    conv = create_conversation()
    clock = time.perf_counter_ns
    elapsed = 0
    cpu = 0.0
    source = iter(events)
    done = 0
    while done < total:
        chunk = list(islice(source, min(batch, total - done)))
        if not chunk:
            break
        cpu_started = time.process_time()
        if done >= tenth and done + len(chunk) <= total - tenth:  # middle: one timer per batch
            started = clock()
            for event in chunk:
                conv = reduce_conversation(conv, event)
            elapsed += clock() - started
            done += len(chunk)
            cpu += time.process_time() - cpu_started
            continue
        for event in chunk:
            started = clock()
            conv = reduce_conversation(conv, event)
            took = clock() - started
            elapsed += took
            if done < tenth:
                first.append(took / 1000)
            elif done >= total - tenth:
                last.append(took / 1000)
            done += 1
        cpu += time.process_time() - cpu_started
    return conv, elapsed / 1000 / done, cpu * 1e6 / done, statistics.median(first), statistics.median(last)


def batch_us(events: list[Event]) -> tuple[float, float]:
    """Best of 3 passes without per-call timers: (wall, CPU) µs/event."""
    best_wall = best_cpu = float("inf")
    for _ in range(3):
        conv = create_conversation()
        started, cpu_started = time.perf_counter(), time.process_time()
        for event in events:
            conv = reduce_conversation(conv, event)
        best_wall = min(best_wall, time.perf_counter() - started)
        best_cpu = min(best_cpu, time.process_time() - cpu_started)
    return best_wall / len(events) * 1e6, best_cpu / len(events) * 1e6


def bytes_per_event(events: list[Event]) -> float:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    conv = create_conversation()
    for event in events:
        conv = reduce_conversation(conv, event)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del conv
    return used / len(events)


def row(name: str, n: int, wall: float, cpu: float, first: float, last: float, extra: str = "") -> None:
    """``wall``/``cpu``: µs/event without per-call timers (best of 3 for the files; the whole lazy
    run for the stream); ``first``/``last``: per-call medians of the first and last 10 %."""
    ratio = last / max(1.0, first)
    print(
        f"{name:<26} {n:>9} {wall:>8.2f} {cpu:>8.2f} {first:>8.2f} {last:>8.2f} {ratio:>6.2f}"
        f" {cpu / TARGET_US:>6.2f} {ratio / TARGET_RATIO:>6.2f} {extra}"
    )


def time_op(make: Callable[[], object], repeat: int) -> float:
    """Median ms of ``make()``."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        make()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def ops(size: int, repeat: int) -> None:
    events = list(islice(chat_stream(), size))
    conv = create_conversation()
    for event in events:
        conv = reduce_conversation(conv, event)
    active = default_active(conv).message_ids
    users = [m for m in active if q.get_message(conv, m).role == "user"]
    assistants = [m for m in active if q.get_message(conv, m).role == "assistant"]
    middle_user = users[len(users) // 2]
    last_assistant = assistants[-1]
    print(
        f"\noperations on a {size}-event conversation ({conv.message_count} messages, active path "
        f"{len(active)}); median of {repeat} runs, each on the head"
    )
    print(f"{'operation':<44} {'ms':>8} {'ratio to 5 ms':>14}")
    head = [conv]

    def on_head(op: Callable[[Conversation], Conversation]) -> Callable[[], object]:
        def run() -> object:
            head[0] = op(head[0])
            return head[0]

        return run

    results = {
        "default_active (O(path))": time_op(lambda: default_active(head[0]), repeat),
        "edit_message (middle user message)": time_op(
            on_head(lambda c: edit_message(c, middle_user, "edited")), repeat
        ),
        "regenerate (last assistant turn)": time_op(on_head(lambda c: regenerate(c, last_assistant)), repeat),
        "list_siblings": time_op(lambda: list_siblings(head[0], middle_user), repeat),
        "switch_branch (back to the original)": time_op(
            on_head(lambda c: switch_branch(switch_branch(c, middle_user), last_assistant)), repeat
        ),
        "summarize_range (first 20 messages)": time_op(
            on_head(
                lambda c: summarize_range(
                    c, default_active(c).message_ids[0], default_active(c).message_ids[19], "s"
                )
            ),
            repeat,
        ),
    }
    for name, ms in results.items():
        print(f"{name:<44} {ms:>8.3f} {ms / TARGET_OP_MS:>14.3f}")
    older = time_op(lambda: edit_message(conv, middle_user, "edited on an old version"), 3)
    print(f"{'edit_message on an older version (forks, O(n))':<44} {older:>8.3f} {'(no target)':>14}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for smoke runs")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {time.strftime('%Y-%m-%d %H:%M')}")
    print(
        f"{'workload':<26} {'events':>9} {'wall µs':>8} {'cpu µs':>8} {'med1st':>8} {'medlast':>8}"
        f" {'l/f':>6} {'cpu÷3':>6} {'÷1.5':>6} memory"
    )
    for shape in W2[:1] if args.quick else W2:
        name, events = w2_events(*shape)
        _conv, _wall, _cpu, first, last = reduce_stream(events, len(events))
        wall, cpu = batch_us(events)
        row(name, len(events), wall, cpu, first, last, f"{bytes_per_event(events):.0f} B/event")
    size = 100_000 if args.quick else 1_000_000
    started = time.perf_counter()
    conv, wall_us, cpu_us, first, last = reduce_stream(chat_stream(), size)
    wall = time.perf_counter() - started
    sample = list(islice(chat_stream(), 20_000))
    row(
        f"chat_stream (lazy, {size // 1000}k)",
        size,
        wall_us,
        cpu_us,
        first,
        last,
        f"{bytes_per_event(sample):.0f} B/event (first 20k); "
        f"{conv.message_count} msgs; wall incl. generation {wall:.1f} s",
    )
    del conv
    batched = create_conversation()
    wall = cpu = 0.0
    source = chat_stream()
    for _ in range(size // 50_000):
        chunk = list(islice(source, 50_000))
        started, cpu_started = time.perf_counter(), time.process_time()
        batched = reduce_conversation_events(batched, chunk)
        wall += time.perf_counter() - started
        cpu += time.process_time() - cpu_started
    n = batched.chunk_count
    print(
        f"{'  same, reduce_conversation_events (50k batches)':<50} {wall / n * 1e6:>8.2f} µs wall "
        f"{cpu / n * 1e6:>8.2f} µs CPU per event; ratio to 3 µs {cpu / n * 1e6 / TARGET_US:.2f}"
    )
    del batched
    ops(20_000 if args.quick else 100_000, 5 if args.quick else 20)


if __name__ == "__main__":
    main()
