"""The DAG layout's input (`LayoutInput`) and its producers' helpers: the flat graph's input
(`graph_layout_input`), run sequence edges, spawn edges, and the check of a producer's parent table.

Runs compiled (mypyc, see `convograph._native`): strictly typed, no msgspec Struct here.
"""

from __future__ import annotations

from itertools import compress, count
from operator import eq, ge
from typing import Final

from convograph.graph.model import Graph
from convograph.projections.dag_labels import node_columns

__all__ = [
    "LayoutInput",
    "add_spawn_edges",
    "check_parent_table",
    "graph_layout_input",
    "parent_positions",
    "run_sequence_edges",
]


class LayoutInput:
    """What the layout needs, in arrival order: per item its id, kind, label and run (its chain
    key and group); edges as (source, target) item indices, given as pairs (``edges``) and / or as
    two parallel lists (``edge_sources`` / ``edge_targets``, taken after the pairs). The library's
    producers use the lists: a tuple per edge is a GC-tracked object that lives through the
    layout, and 100k of them cost ~140 young collections (~20-30 ms) per 100k-node layout."""

    __slots__ = (
        "edge_sources",
        "edge_targets",
        "edges",
        "edges_unique",
        "group_labels",
        "ids",
        "kinds",
        "labels",
        "parents",
        "runs",
    )

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.kinds: list[str] = []
        self.labels: list[str] = []
        self.runs: list[str] = []
        self.edges: list[tuple[int, int]] = []
        self.edge_sources: list[int] = []
        self.edge_targets: list[int] = []
        self.edges_unique = False
        """Set by a producer whose ``edges`` are known to hold no duplicate, no self-loop and no
        out-of-range index (the flat graph's, by the reducer's invariants): `layout` then skips
        its dedupe set (two set operations per edge)."""
        self.group_labels: dict[str, str] = {}
        self.parents: list[int] | None = None
        """Set by a producer whose every item has at most one incoming edge, from an item before
        it: per item that source's index, -1 for none (the flat graph's, from the reducer's parent
        index). ``edge_sources`` / ``edge_targets`` must then be exactly those edges, with no
        ``edges`` pairs; `layout` takes them as its predecessor table and skips its edge pass."""


def run_sequence_edges(runs: list[str]) -> tuple[list[int], list[int], list[int]]:
    """Sequence edges between consecutive items of each run, for items in arrival order: their
    sources and targets (by target) and every item's predecessor in its run (-1 for a run's
    first item), which is a parent table (`LayoutInput.parents`). O(n), one dict of runs.
    (A per-item loop, for the compiled build; see `convograph._native`.)"""
    sources: list[int] = []
    targets: list[int] = []
    parents: list[int] = []
    last_of_run: dict[str, int] = {}
    for i, run in enumerate(runs):
        previous = last_of_run.get(run, -1)
        if previous >= 0:
            sources.append(previous)
            targets.append(i)
        parents.append(previous)
        last_of_run[run] = i
    return sources, targets, parents


def add_spawn_edges(
    parents: list[int] | None,
    sources: list[int],
    targets: list[int],
    spawn_sources: list[int],
    spawn_targets: list[int],
) -> list[int] | None:
    """Append the spawn edges to ``sources`` / ``targets`` (the sequence edges, unique), dropping
    self-loops and repeats (first occurrence kept, as `layout`'s own dedupe would), and return
    the parent table that still holds, or None. Each spawn edge enters a run's first item, which
    no sequence edge enters (``parents[target] == -1``), so the result stays unique.

    A spawn edge usually enters an item with no predecessor yet from an item before it: then it
    goes into ``parents`` (updated in place), and ``parents`` stays a parent table. Any other
    spawn edge (a second one into the same item, or one pointing backward) drops the table, and a
    set of the kept spawn edges takes over the dedupe. While the table holds it is the dedupe: a
    repeat finds its source already in the table (nothing else put it there: the target had no
    predecessor). O(spawn edges)."""
    table = parents
    first_spawn = len(sources)
    seen: set[tuple[int, int]] = set()
    for k in range(len(spawn_sources)):
        source = spawn_sources[k]
        target = spawn_targets[k]
        if source == target:
            continue
        if table is not None:
            parent = table[target]
            if parent == source:
                continue
            if parent < 0 and source < target:
                table[target] = source
                sources.append(source)
                targets.append(target)
                continue
            table = None
            for j in range(first_spawn, len(sources)):
                seen.add((sources[j], targets[j]))
        elif (source, target) in seen:
            continue
        seen.add((source, target))
        sources.append(source)
        targets.append(target)
    return table


def check_parent_table(data: LayoutInput) -> None:
    """Raise `ValueError` unless ``data.parents`` is None or a parent table: one entry per item,
    each -1 or an earlier item's index, with ``edge_sources`` / ``edge_targets`` exactly its edges
    (each item with a parent once, in any order) and no ``edges`` pairs. O(V + E), C-level passes.
    The library's producers build valid tables by construction (property-tested) and skip this."""
    table = data.parents
    if table is None:
        return
    n = len(data.ids)
    sources, targets = data.edge_sources, data.edge_targets
    with_parent = n - table.count(-1)
    if (
        data.edges
        or len(table) != n
        or (n > 0 and min(table) < -1)
        or any(map(ge, table, range(n)))
        or len(sources) != with_parent
        or len(targets) != with_parent
        or (
            with_parent > 0
            and (
                min(sources) < 0 or min(targets) < 0 or max(targets) >= n or len(set(targets)) != with_parent
            )
        )
        or not all(map(eq, map(table.__getitem__, targets), sources))
    ):
        raise ValueError(
            "LayoutInput.parents needs one entry per item, each -1 or an earlier item's index, "
            "edge_sources / edge_targets that are exactly its edges, and no edges pairs"
        )


def graph_layout_input(graph: Graph) -> LayoutInput:
    """The flat graph as layout input: every node, every edge. O(N + E), read in bulk.

    When the reducer's parent index answers (`Graph.parent_ids`: each node has at most one incoming
    edge, from a node before it), the edges are read from it in C-level passes plus a short search
    per node whose parent is not the node before it (`parent_positions`), and handed to `layout`
    as ``parents`` too; otherwise from ``graph.edges``. Either way the edges are listed in their
    targets' arrival order."""
    data = LayoutInput()
    nodes = graph.node_list()
    data.ids = ids = graph.node_ids()
    data.runs, data.kinds, data.labels = node_columns(nodes)
    data.edges_unique = True  # the reducer adds no duplicate edge and no self-loop
    parent_ids = graph.parent_ids()
    if parent_ids is not None:
        data.parents = parents = parent_positions(ids, parent_ids)
        data.edge_sources = list(filter(_NON_NEGATIVE, parents))
        data.edge_targets = list(compress(range(len(parents)), map(_NON_NEGATIVE, parents)))
        return data
    index = dict(zip(ids, range(len(ids)), strict=True))
    index_get = index.get
    sources: list[int] = []
    targets: list[int] = []
    add_source = sources.append
    add_target = targets.append
    for source, children in graph.edges.items():
        s = index_get(source)
        if s is None:
            continue
        for target in children:
            t = index_get(target)
            if t is not None:
                add_source(s)
                add_target(t)
    # the same order as the parent-index path: by target, then as read (stable), O(E log E)
    by_target = sorted(range(len(targets)), key=targets.__getitem__)
    data.edge_sources = list(map(sources.__getitem__, by_target))
    data.edge_targets = list(map(targets.__getitem__, by_target))
    return data


def parent_positions(ids: list[str], parent_ids: list[str | None]) -> list[int]:
    """Each node's parent as a position in ``ids`` (-1: none, or an id not among ``ids``), for a
    parent index in which every parent precedes its child (`Graph.parent_ids`). O(N): one
    per-node loop (compiled) that compares a parent with the id just before it by identity first
    (the reducer stores one object per id, so ~90 % of nodes in an agent conversation answer
    without reading either string), then by value; a parent elsewhere (a run's first node, a run
    resuming after a subagent's nodes) is searched among the `_NEAR` ids before it, nearest
    first, and only the parents not found there go into a dict, with one more pass over the ids
    (a 100k-entry dict and 100k lookups in it were ~60 ms of a 100k-node layout on the AMD EPYC
    machine; a dict of every non-adjacent parent ~10 ms of ~25)."""
    n = len(ids)
    positions: list[int] = []
    far: list[int] = []
    previous: str | None = None
    for i in range(n):
        parent = parent_ids[i]
        if parent is None:
            positions.append(-1)
        elif parent is previous or parent == previous:
            positions.append(i - 1)
        else:
            found = -1
            j = i - 2
            low = i - _NEAR if i > _NEAR else 0
            while j >= low:
                if ids[j] == parent:
                    found = j
                    break
                j -= 1
            if found < 0:
                far.append(i)
            positions.append(found)
        previous = ids[i]
    if far:
        wanted = set(map(parent_ids.__getitem__, far))
        hits = list(map(wanted.__contains__, ids))
        found_at = dict(zip(compress(ids, hits), compress(count(), hits), strict=False))
        position_of = found_at.get
        for i in far:
            positions[i] = position_of(parent_ids[i], -1)  # type: ignore[arg-type]
    return positions


_NEAR: Final = 16
"""`parent_positions` looks for a non-adjacent parent among this many ids before its child first."""


_NON_NEGATIVE: Final = (-1).__lt__
"""``x >= 0`` for an int ``x``, as a C-level predicate (``-1 < x``)."""
