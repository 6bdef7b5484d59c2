"""Flat-graph snapshots: dump/load is exact, and reducing on from a loaded snapshot converges."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convograph.events import Event, Text, Usage, read_ndjson_file
from convograph.graph import create_graph, reduce_events
from convograph.store import MemoryEventLog
from convograph.store.snapshots import FLAT_GRAPH, dump_graph, load_graph, rebuild
from convograph.testing import sample_run

WORKLOADS = Path("/work/shared/workloads")


def workload(name: str) -> list[Event]:
    path = WORKLOADS / name
    if not path.exists():
        pytest.skip(f"workload {path} not present")
    return read_ndjson_file(path).events


@pytest.mark.parametrize("name", ["w1-flat-20000.ndjson", "w2-hg-50x200x3.ndjson"])
def test_dump_load_round_trip_on_workloads(name: str) -> None:
    events = workload(name)
    graph = reduce_events(create_graph(), events)
    loaded = load_graph(dump_graph(graph))
    assert loaded == graph
    assert list(loaded.first_node_by_run_id.items()) == list(graph.first_node_by_run_id.items())
    assert loaded.diagnostics == graph.diagnostics
    assert [n.id for n in loaded.iter_nodes()] == [n.id for n in graph.iter_nodes()]


def small_stream() -> list[Event]:
    events: list[Event] = [e for r in range(3) for e in sample_run(f"run-{r}")]
    events += [Usage(run_id="run-1", input_tokens=1, output_tokens=2) for _ in range(2)]
    events += [Text(run_id="late", id="late:t", content="x", parent_id="missing-parent", event_id="late#0")]
    return events


@settings(max_examples=50, deadline=None)
@given(st.integers(0, len(small_stream())))
def test_reducing_on_from_a_snapshot_equals_reducing_from_scratch(cut: int) -> None:
    events = small_stream()
    direct = reduce_events(create_graph(), events)
    resumed = reduce_events(load_graph(dump_graph(reduce_events(create_graph(), events[:cut]))), events[cut:])
    assert resumed == direct
    assert dump_graph(resumed) == dump_graph(direct)
    # redelivering everything after a snapshot changes nothing (seen event ids are in the snapshot)
    assert reduce_events(resumed, [e for e in events if e.event_id is not None]) == direct


def test_older_versions_are_not_kept_but_the_loaded_graph_extends() -> None:
    graph = reduce_events(create_graph(), sample_run("a"))
    loaded = load_graph(dump_graph(graph))
    assert loaded.version == 0
    extended = reduce_events(loaded, sample_run("b"))
    assert len(extended) > len(loaded)
    assert loaded == graph  # the loaded version itself is unchanged


async def test_rebuild_with_periodic_snapshots() -> None:
    log = MemoryEventLog()
    events = [e for r in range(40) for e in sample_run(f"run-{r}")]
    await log.append("c", events)
    first = await rebuild(log, "c", FLAT_GRAPH, snapshot_every=50, page_size=20)
    assert first.replayed == len(events)
    snap = await log.load_snapshot("c", FLAT_GRAPH.name)
    assert snap is not None
    assert len(events) - 50 < snap.seq <= len(events)
    second = await rebuild(log, "c", FLAT_GRAPH, snapshot_every=50)
    assert second.snapshot_seq == snap.seq
    assert second.replayed == len(events) - snap.seq
    assert second.state == first.state == reduce_events(create_graph(), events)
