"""DAG projection: a layered layout of the conversation graph, with ``to_svg()``.

Why not a library: grandalf (pure-Python Sugiyama) adds a dummy node per layer an edge spans and
runs O(V·L) crossing sweeps, and Graphviz ``dot`` is a system binary with super-linear ordering;
neither lays out 100k nodes in the 200 ms budget. Conversation graphs have a structure a general
layout ignores: each run is a chain of sequential edges and runs hang off the nodes that spawned
them. This layout uses it, in three classic phases, each linear:

1. **Layering** (O(V + E)): nodes in arrival order (Kahn, preferring the earliest arrival; nodes on a
   cycle are placed last, ignoring the back edge). ``layer(v) = max(layer(p) + 1)`` over its
   predecessors, and a run's next node also sits below everything its child runs produced so far,
   so a parent resumes below the subagent it waited for.
2. **Ordering / crossing reduction** (O(C log C + C·K), C chains, K lanes probed): each chain (a
   maximal same-run path) gets a lane. Chains are visited depth first in spawn order and take the
   leftmost free lane at or right of their parent's (one lane right when they overlap in time),
   so a spawn tree is drawn without tree-edge crossings and lanes are reused once a run ends.
3. **Coordinates** (O(V)): lane x from the widest node in each lane, layer y from a fixed row
   height. A cell (lane, layer) holds at most one node (chains sharing a lane have disjoint layer
   intervals), so **nodes never overlap**; gaps between rows and lanes exceed twice the group
   padding, so padded boxes of different chains do not overlap either.

Sizes come from compact one-line labels (at most `MAX_LABEL` characters). Edges are deduplicated,
self-loops dropped. Output depends only on the graph: deterministic.

This module runs compiled (mypyc) when `scripts/build-native` has built it (`convograph._native`):
keep it strictly typed, and define no msgspec Struct here (mypyc would drop its class options;
the result types live in `dag_model`).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Hashable, Sequence
from html import escape
from itertools import chain, compress, count, repeat
from operator import add, attrgetter, eq, ge, sub
from typing import Any, Final

from convograph.graph.model import Graph
from convograph.graph.nodes import (
    KIND_OF_NODE_TYPE as _KIND_OF_TYPE,
)
from convograph.graph.nodes import (
    ErrorNode,
    HarnessEndNode,
    HarnessStartNode,
    ReasoningNode,
    RelayNode,
    TextNode,
    ToolCallNode,
    ToolProgressNode,
    ToolResultNode,
    UsageNode,
    UserNode,
)
from convograph.projections.dag_model import DAGEdge, DAGGroup, DAGLayout, DAGNode

__all__ = [
    "COLORS",
    "DAGEdge",
    "DAGGroup",
    "DAGLayout",
    "DAGNode",
    "LayoutInput",
    "add_spawn_edges",
    "block_label",
    "block_labels",
    "check_no_overlap",
    "graph_layout_input",
    "layout",
    "node_columns",
    "project_dag",
    "project_graph_dag",
    "run_sequence_edges",
]

MAX_LABEL: Final = 40
MAX_HOPS: Final = 64
"""Deepest run nesting whose resumption is pushed below its descendants' nodes."""
CHAR_WIDTH: Final = 7
MIN_WIDTH: Final = 80
MAX_WIDTH: Final = MAX_LABEL * CHAR_WIDTH + 16
NODE_HEIGHT: Final = 36
GROUP_PAD: Final = 12
NODE_GAP: Final = 2 * GROUP_PAD + 4
LANE_GAP: Final = 2 * GROUP_PAD + 16
LAYOUT_PAD: Final = GROUP_PAD + 16

COLORS: Final[dict[str, tuple[str, str]]] = {
    "text": ("#1e3a5f", "#3b82f6"),
    "reasoning": ("#2d1f5e", "#8b5cf6"),
    "tool_call": ("#4a2a0a", "#f97316"),
    "tool_result": ("#3d2a05", "#f59e0b"),
    "user": ("#0a3d1f", "#22c55e"),
    "error": ("#3d0a0a", "#ef4444"),
    "relay": ("#3d2b08", "#f59e0b"),
    "structural": ("#1f2937", "#4b5563"),
}


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


def compact(text: str, limit: int = MAX_LABEL) -> str:
    """First line of ``text``, whitespace-collapsed, cut to ``limit`` characters with an ellipsis.
    O(limit): reads at most ``4 * limit`` characters."""
    head = text[: limit * 4]
    if head.isprintable() and "  " not in head:
        # the only whitespace a printable string holds is U+0020 (checked over every code point),
        # so with no run of two, collapsing is stripping: no list of words
        line = head.strip(" ")
    else:
        line = " ".join(head.split())
    if len(line) > limit or len(text) > len(head):
        return line[: limit - 1] + "…" if len(line) >= limit else line + "…"
    return line


def compact_json(value: Any) -> str:
    try:
        return compact(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))
    except (TypeError, ValueError):
        return compact(repr(value))


def _kahn_order(
    n: int,
    pred0: list[int],
    more_preds: dict[int, list[int]],
    succ0: list[int],
    more_succs: dict[int, list[int]],
) -> list[int]:
    """Kahn order preferring the earliest arrival; nodes on a cycle go last, by arrival. O(V + E)."""
    indegree = [0 if p < 0 else 1 for p in pred0]
    for v, others in more_preds.items():
        indegree[v] += len(others)
    done = [False] * n
    order: list[int] = []
    order_append = order.append
    for i in range(n):
        if done[i] or indegree[i] > 0:
            continue
        stack = [i]
        while stack:
            v = stack.pop()
            if done[v]:
                continue
            done[v] = True
            order_append(v)
            w0 = succ0[v]
            if w0 < 0:
                continue
            extra = more_succs.get(v) if more_succs else None
            if extra is None:
                indegree[w0] -= 1
                if indegree[w0] == 0 and w0 < i and not done[w0]:
                    stack.append(w0)
                continue
            ready = []
            for w in (w0, *extra):
                indegree[w] -= 1
                if indegree[w] == 0 and w < i and not done[w]:
                    ready.append(w)
            if ready:
                ready.sort(reverse=True)
                stack.extend(ready)
    if len(order) < n:  # cycles: place the rest by arrival, ignoring unplaced predecessors
        order.extend(i for i in range(n) if not done[i])
    return order


def _layer_forest(
    pred0: list[int],
    rid: list[int],
    kinds: list[str],
    layer: list[int],
    chain_of: list[int],
    chain_tail: list[int],
    chain_head: list[int],
    chain_parent: list[int],
    run_parent: list[int],
    desc_max: list[int],
    ended: list[bool],
) -> None:
    """`layout`'s layering step for a parent table (`LayoutInput.parents`): the general loop with
    one predecessor at most per item, from before it, so items are placed in arrival order and a
    predecessor is always placed. Same rules, same results (property-tested against the general
    loop); kept apart because this is the per-item loop of a 100k-node layout. Fills the lists in
    place (chain runs are the caller's). O(V + S · hops) for S switches between runs in arrival
    order, hops <= `MAX_HOPS`.

    Two differences from the general loop, both exact:

    - a node whose predecessor is in its own run sits at ``desc_max[run] + 1``: the
      predecessor's own step raised ``desc_max[run]`` to at least its layer;
    - the walk that raises the subtree maxima of a node's ancestor runs is deferred while the
      next nodes are in the same run, and done once, with the streak's deepest layer, before a
      node of another run is placed, before the run gets a parent run, or at the end. Only a
      node of an ancestor run reads an ancestor's maximum, and a streak's layers only grow, so
      the single walk leaves every maximum as the per-node walks would (it visits the same runs:
      it stops at the same ended runs, and where a per-node walk stopped at a deeper maximum the
      streak's maximum is deeper still). Most nodes follow a node of their own run, so most
      walks go.
    """
    walk_from = -1  # the run whose ancestors' walk is deferred, -1 for none
    walk_layer = -1  # the deepest layer of its current streak
    for v, p in enumerate(pred0):
        r = rid[v]
        if r != walk_from and walk_from >= 0:
            _raise_ancestors(walk_from, walk_layer, desc_max, run_parent, ended)
            walk_from = -1
        if p >= 0:
            if rid[p] == r:
                lay = desc_max[r] + 1
                c = chain_of[p]
                if chain_tail[c] == p:
                    chain_tail[c] = v
                else:
                    c = len(chain_tail)
                    chain_tail.append(v)
                    chain_head.append(v)
                    chain_parent.append(chain_of[p])
            else:
                lay = layer[p] + 1
                if run_parent[r] < 0:
                    if walk_from >= 0:  # (the run itself) its deferred walk predates this parent
                        _raise_ancestors(walk_from, walk_layer, desc_max, run_parent, ended)
                        walk_from = -1
                    run_parent[r] = rid[p]
                c = len(chain_tail)
                chain_tail.append(v)
                chain_head.append(v)
                chain_parent.append(chain_of[p])
        else:
            lay = 0
            c = len(chain_tail)
            chain_tail.append(v)
            chain_head.append(v)
            chain_parent.append(-1)
        layer[v] = lay
        chain_of[v] = c
        if kinds[v] == "harness_end":
            ended[r] = True
        if desc_max[r] < lay:  # the walk's first step, on the node's own run, at once
            desc_max[r] = lay
            walk_from = r
            walk_layer = lay
    if walk_from >= 0:
        _raise_ancestors(walk_from, walk_layer, desc_max, run_parent, ended)


def _raise_ancestors(
    run: int, lay: int, desc_max: list[int], run_parent: list[int], ended: list[bool]
) -> None:
    """The subtree-maximum walk of `layout` after its first step (``desc_max[run]`` already raised
    to ``lay``): up the run tree from ``run``'s parent while an ancestor's maximum is below ``lay``,
    stopping after an ended run and after `MAX_HOPS` steps in all. O(hops)."""
    current = run_parent[run]
    hops = 1
    while current >= 0 and desc_max[current] < lay and hops < MAX_HOPS:
        desc_max[current] = lay
        if ended[current] and current != run:
            break
        current = run_parent[current]
        hops += 1


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


def layout(data: LayoutInput) -> DAGLayout:
    """Lay out ``data`` (see the module docstring). O(V + E + C·K). A `LayoutInput.parents`
    table is checked first (`_check_parent_table`: `ValueError` when it is not forward or not
    exactly the given edges)."""
    _check_parent_table(data)
    return _layout(data)


def _check_parent_table(data: LayoutInput) -> None:
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


def _layout(data: LayoutInput) -> DAGLayout:
    """`layout` of an input whose parent table, if any, is valid (see `_check_parent_table`)."""
    ids = data.ids
    runs = data.runs
    n = len(ids)
    if n == 0:
        return DAGLayout(nodes=[], edges=[], groups=[], width=0, height=0)

    # -- edges: dedupe, drop self-loops, adjacency ------------------------------------------------
    # No list per node: most nodes have one predecessor and one successor, kept in flat int lists
    # (-1: none); any further ones go to small overflow lists. A parent table is the producer's
    # own predecessor list, and its edges all point forward (no Kahn order: no successor list).
    table = data.parents
    pred0 = [-1] * n if table is None else table
    succ0 = [-1] * n if table is None else []
    more_preds: dict[int, list[int]] = {}
    more_succs: dict[int, list[int]] = {}
    seen_edges: set[tuple[int, int]] = set()
    seen_add = seen_edges.add
    unique = data.edges_unique
    pairs = data.edges
    edge_sources = data.edge_sources
    edges: Any = pairs
    if edge_sources:
        columns = zip(edge_sources, data.edge_targets, strict=True)
        edges = chain(pairs, columns) if pairs else columns
    kept_sources: list[int]
    kept_targets: list[int]
    if unique and not pairs:  # kept as given (no copy, no tuple per edge)
        kept_sources, kept_targets = edge_sources, data.edge_targets
        keep = False
    else:
        kept_sources, kept_targets = [], []
        keep = True
    keep_source, keep_target = kept_sources.append, kept_targets.append
    backward = False
    if table is not None:  # the producer's predecessor table (`_check_parent_table`)
        kept_sources, kept_targets = edge_sources, data.edge_targets
        keep = False
        edges = ()
    for s, t in edges:
        if s > t:
            backward = True
        if not unique:
            edge = (s, t)
            if s == t or edge in seen_edges or not (0 <= s < n and 0 <= t < n):
                continue
            seen_add(edge)
        if keep:
            keep_source(s)
            keep_target(t)
        if pred0[t] < 0:
            pred0[t] = s
        else:
            more_preds.setdefault(t, []).append(s)
        if succ0[s] < 0:
            succ0[s] = t
        else:
            more_succs.setdefault(s, []).append(t)

    # -- 1. layering, arrival-preferring Kahn order -----------------------------------------------
    # The order is computed first (it depends only on the edges), then nodes are placed in it.
    # When every edge points forward in arrival order (the usual case: a node's predecessors
    # arrived before it) that order is arrival order itself: skip the pass. (By induction on i:
    # all predecessors of i are < i, so were placed and counted down by the time the scan reaches
    # i, which is then placed; its successors are > i, never pushed early.)
    order: Sequence[int] = range(n) if not backward else _kahn_order(n, pred0, more_preds, succ0, more_succs)
    layer = [-1] * n
    chain_of = [-1] * n
    chain_tail: list[int] = []
    chain_run: list[str] = []
    chain_head: list[int] = []
    chain_parent: list[int] = []
    # Runs as dense ints in first-item order, so the per-run state below is lists indexed by run
    # (no dict call per node and per hop of the propagation walk).
    run_number: dict[str, int] = {}
    rid: list[int] = []
    for run in runs:
        number = run_number.get(run)
        if number is None:
            number = run_number[run] = len(run_number)
        rid.append(number)
    n_runs = len(run_number)
    del run_number
    run_parent = [-1] * n_runs  # run -> the run it continues from (-1: none yet)
    desc_max = [-1] * n_runs  # run -> deepest layer in its subtree so far
    ended = [False] * n_runs  # run -> its harness_end was placed
    kinds = data.kinds
    if table is not None:
        _layer_forest(
            pred0,
            rid,
            kinds,
            layer,
            chain_of,
            chain_tail,
            chain_head,
            chain_parent,
            run_parent,
            desc_max,
            ended,
        )
        chain_run.extend(map(runs.__getitem__, chain_head))
    else:
        for v in order:
            r = rid[v]
            lay = 0
            same_run_pred = -1
            first_pred = -1
            p0 = pred0[v]
            if p0 >= 0:
                extra = more_preds.get(v) if more_preds else None
                if extra is None:  # one predecessor (most nodes): the loop below, unrolled
                    lp = layer[p0]
                    if lp >= 0:
                        first_pred = p0
                        lay = lp + 1
                        if rid[p0] == r and chain_tail[chain_of[p0]] == p0:
                            same_run_pred = p0
                else:
                    for p in (p0, *extra):
                        lp = layer[p]
                        if lp < 0:
                            continue  # an unplaced predecessor (cycle fallback)
                        if first_pred < 0:
                            first_pred = p
                        if lp + 1 > lay:
                            lay = lp + 1
                        if same_run_pred < 0 and rid[p] == r and chain_tail[chain_of[p]] == p:
                            same_run_pred = p
            if same_run_pred >= 0 or (first_pred >= 0 and rid[first_pred] == r):
                below = desc_max[r] + 1
                if below > lay:
                    lay = below
            elif first_pred >= 0 and run_parent[r] < 0:  # (here rid[first_pred] != r)
                run_parent[r] = rid[first_pred]
            layer[v] = lay
            if same_run_pred >= 0:
                c = chain_of[same_run_pred]
                chain_tail[c] = v
            else:
                c = len(chain_tail)
                chain_tail.append(v)
                chain_run.append(runs[v])
                chain_head.append(v)
                chain_parent.append(chain_of[first_pred] if first_pred >= 0 else -1)
            chain_of[v] = c
            # Propagate the subtree maximum up the run tree. It stops early (maxima are monotone
            # upwards) and at ended runs (they get no further node to push down), so a chain of
            # runs that continue one another (user -> agent -> user ...) costs O(1) per node.
            # (`_layer_forest` defers the walk past the node's own run over a streak of that run.)
            if kinds[v] == "harness_end":
                ended[r] = True
            if desc_max[r] < lay:
                desc_max[r] = lay
                _raise_ancestors(r, lay, desc_max, run_parent, ended)

    # -- 2. lanes: depth-first over the chain tree, leftmost free lane ----------------------------
    n_chains = len(chain_tail)
    chain_start = [layer[v] for v in chain_head]
    chain_end = [layer[v] for v in chain_tail]
    # Child chains as linked lists over int arrays (no list per chain), in creation order.
    first_child = [-1] * n_chains
    last_child = [-1] * n_chains
    next_sibling = [-1] * n_chains
    roots: list[int] = []
    for c in range(n_chains):
        parent = chain_parent[c]
        if parent < 0:
            roots.append(c)
        elif first_child[parent] < 0:
            first_child[parent] = last_child[parent] = c
        else:
            next_sibling[last_child[parent]] = c
            last_child[parent] = c
    lane_starts: list[list[int]] = []
    lane_ends: list[list[int]] = []
    chain_lane = [0] * n_chains

    bisect_left = bisect.bisect_left
    order_stack = list(reversed(roots))
    while order_stack:
        c = order_stack.pop()
        start, end = chain_start[c], chain_end[c]
        parent = chain_parent[c]
        lane = 0
        if parent >= 0:
            lane = chain_lane[parent]
            if chain_end[parent] >= start:  # overlaps its parent in time: go right
                lane += 1
        # The leftmost lane from ``lane`` on where [start, end] overlaps no chain: ``k`` is where
        # ``start`` goes in that lane's sorted starts (the fit test, inline: no call per lane).
        # A lane's chains do not overlap, so its last chain by start also ends last: a chain that
        # starts after that end goes at the end of the lane (the usual case: no search).
        k = 0
        while lane < len(lane_starts):
            starts = lane_starts[lane]
            if lane_ends[lane][-1] < start:  # (a lane is never empty)
                k = len(starts)
                break
            k = bisect_left(starts, start)
            if not ((k < len(starts) and starts[k] <= end) or (k > 0 and lane_ends[lane][k - 1] >= start)):
                break
            lane += 1
        if lane == len(lane_starts):
            lane_starts.append([start])
            lane_ends.append([end])
        elif k == len(lane_starts[lane]):
            lane_starts[lane].append(start)
            lane_ends[lane].append(end)
        else:
            lane_starts[lane].insert(k, start)
            lane_ends[lane].insert(k, end)
        chain_lane[c] = lane
        child = first_child[c]
        if child >= 0:
            kids = []
            while child >= 0:
                kids.append(child)
                child = next_sibling[child]
            kids.reverse()
            order_stack.extend(kids)

    # -- 3. coordinates ---------------------------------------------------------------------------
    # Per node only C-level passes over lookup tables (lane per chain, width per label length), y
    # from the layer and one `DAGNode` each; the widths per lane and the run boxes are folded per
    # chain (measured: the per-node loop did ~60 of a ~170 ms 100k-node layout, this ~45).
    labels = data.labels
    kinds = data.kinds
    node_lane = list(map(chain_lane.__getitem__, chain_of))
    lengths = list(map(len, labels))
    longest = max(lengths)
    if longest > _WIDTH_TABLE_LIMIT:  # (a huge usage count): clamp, every longer label is as wide
        longest = _WIDEST_LABEL
        lengths = list(map(min, lengths, repeat(longest)))
    width_of_length = [min(max(k * CHAR_WIDTH + 16, MIN_WIDTH), MAX_WIDTH) for k in range(longest + 1)]
    widths = list(map(width_of_length.__getitem__, lengths))
    chain_width = [MIN_WIDTH] * n_chains
    for c, w in zip(chain_of, widths, strict=True):  # the widest node of each chain
        if w > chain_width[c]:
            chain_width[c] = w
    n_lanes = len(lane_starts)
    lane_width = [MIN_WIDTH] * n_lanes
    for lane, w in zip(chain_lane, chain_width, strict=True):
        if w > lane_width[lane]:
            lane_width[lane] = w
    lane_x = [0] * n_lanes
    x = LAYOUT_PAD
    for lane in range(n_lanes):
        lane_x[lane] = x
        x += lane_width[lane] + LANE_GAP
    row = NODE_HEIGHT + NODE_GAP
    xs = list(map(lane_x.__getitem__, node_lane))
    ys = [LAYOUT_PAD + k * row for k in layer]
    nodes_out = list(
        map(DAGNode, ids, kinds, labels, xs, ys, widths, repeat(NODE_HEIGHT), runs, layer, node_lane)
    )
    # One padded box per run, as parallel int lists (no list per run); runs in first-node order.
    group_runs: list[str]
    if not backward and len(set(chain_run)) == n_chains:
        # Every run is one chain (the usual case): its box is that chain's, and chains were made in
        # arrival order of their heads, i.e. runs in first-node order. C-level passes only.
        group_runs = chain_run
        box_left = list(map(lane_x.__getitem__, chain_lane))
        box_top = list(map(ys.__getitem__, chain_head))
        box_right = list(map(add, box_left, chain_width))
        box_bottom = list(map(ys.__getitem__, chain_tail))  # (the tails' tops: + NODE_HEIGHT below)
        max_bottom = max(box_bottom) + NODE_HEIGHT
        box_height = list(map(add, map(sub, box_bottom, box_top), repeat(NODE_HEIGHT + 2 * GROUP_PAD)))
    else:
        group_runs, box_left, box_top, box_right, box_bottom = _run_boxes(
            backward, runs, xs, ys, widths, chain_run, chain_lane, chain_head, chain_tail, chain_width, lane_x
        )
        max_bottom = max(box_bottom)
        box_height = list(map(add, map(sub, box_bottom, box_top), repeat(2 * GROUP_PAD)))
    max_right = max(box_right)
    group_labels = data.group_labels
    groups = [
        DAGGroup(id=run, label=label, x=left - GROUP_PAD, y=top - GROUP_PAD, width=width, height=height)
        for run, label, left, top, width, height in zip(
            group_runs,
            map(group_labels.get, group_runs, group_runs) if group_labels else group_runs,
            box_left,
            box_top,
            map(add, map(sub, box_right, box_left), repeat(2 * GROUP_PAD)),
            box_height,
            strict=True,
        )
    ]
    edges_out = [  # (run numbers: an int comparison where equal run ids may be distinct strings)
        DAGEdge(source=ids[s], target=ids[t], type="sequence" if rid[s] == rid[t] else "spawn")
        for s, t in zip(kept_sources, kept_targets, strict=True)
    ]
    return DAGLayout(
        nodes=nodes_out,
        edges=edges_out,
        groups=groups,
        width=max_right + LAYOUT_PAD,
        height=max_bottom + LAYOUT_PAD,
    )


def _run_boxes(
    backward: bool,
    runs: list[str],
    xs: list[int],
    ys: list[int],
    widths: list[int],
    chain_run: list[str],
    chain_lane: list[int],
    chain_head: list[int],
    chain_tail: list[int],
    chain_width: list[int],
    lane_x: list[int],
) -> tuple[list[str], list[int], list[int], list[int], list[int]]:
    """`layout`'s run boxes when a run may span several chains: per run (in first-node order) its
    box's left, top, right and bottom edges, folded per chain (per node in a Kahn order). O(C) or
    O(V)."""
    group_slot: dict[str, int] = {}
    box_left: list[int] = []
    box_top: list[int] = []
    box_right: list[int] = []
    box_bottom: list[int] = []
    if not backward:
        # Layers grow along a chain: per chain, the box is its lane's x, its head's y, its widest
        # node's right edge and its tail's bottom.
        boxes: Any = zip(
            chain_run,
            map(lane_x.__getitem__, chain_lane),
            map(ys.__getitem__, chain_head),
            map(add, map(lane_x.__getitem__, chain_lane), chain_width),
            map(ys.__getitem__, chain_tail),
            strict=True,
        )
    else:  # Kahn order: node by node, in arrival order
        boxes = zip(runs, xs, ys, map(add, xs, widths), ys, strict=True)
    for run, left, top, right, last_top in boxes:
        bottom = last_top + NODE_HEIGHT
        slot = group_slot.get(run)
        if slot is None:
            group_slot[run] = len(box_left)
            box_left.append(left)
            box_top.append(top)
            box_right.append(right)
            box_bottom.append(bottom)
        else:
            if left < box_left[slot]:
                box_left[slot] = left
            if top < box_top[slot]:  # a later chain of the run may start higher (not a forest)
                box_top[slot] = top
            if right > box_right[slot]:
                box_right[slot] = right
            if bottom > box_bottom[slot]:
                box_bottom[slot] = bottom
    return list(group_slot), box_left, box_top, box_right, box_bottom


_WIDEST_LABEL: Final = (MAX_WIDTH - 16) // CHAR_WIDTH
"""Label length from which a node is `MAX_WIDTH` wide."""
_WIDTH_TABLE_LIMIT: Final = 4096
"""`layout` looks widths up in a table per label length up to this length, clamping beyond."""


def render_svg(layout_: DAGLayout) -> str:
    """SVG for a layout: groups under edges under nodes; labels escaped."""
    by_id = {node.id: node for node in layout_.nodes}
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{layout_.width}" height="{layout_.height}" '
        f'viewBox="0 0 {layout_.width} {layout_.height}" font-family="ui-monospace, monospace" '
        'font-size="12">',
        f'<rect width="{layout_.width}" height="{layout_.height}" fill="#0b1020"/>',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#64748b"/>'
        "</marker></defs>",
    ]
    for group in layout_.groups:
        out.append(
            f'<rect class="group" x="{group.x}" y="{group.y}" width="{group.width}" '
            f'height="{group.height}" rx="8" fill="rgba(59,130,246,0.06)" '
            f'stroke="rgba(59,130,246,0.3)"><title>{escape(group.label)}</title></rect>'
        )
    for edge in layout_.edges:
        source = by_id.get(edge.source)
        target = by_id.get(edge.target)
        if source is None or target is None:
            continue
        x1 = source.x + source.width // 2
        y1 = source.y + source.height
        x2 = target.x + target.width // 2
        y2 = target.y
        mid = (y1 + y2) // 2
        dash = ' stroke-dasharray="4 3"' if edge.type == "spawn" else ""
        out.append(
            f'<path class="edge" d="M{x1},{y1}C{x1},{mid} {x2},{mid} {x2},{y2}" fill="none" '
            f'stroke="#64748b"{dash} marker-end="url(#arrow)"/>'
        )
    for node in layout_.nodes:
        fill, stroke = COLORS.get(node.kind, COLORS["structural"])
        out.append(
            f'<g class="node" data-id="{escape(node.id)}"><rect x="{node.x}" y="{node.y}" '
            f'width="{node.width}" height="{node.height}" rx="6" fill="{fill}" stroke="{stroke}"/>'
            f'<text x="{node.x + 8}" y="{node.y + node.height // 2 + 4}" fill="#e5e7eb">'
            f"{escape(node.label)}</text></g>"
        )
    out.append("</svg>")
    return "\n".join(out)


def check_no_overlap(nodes: Sequence[DAGNode]) -> list[tuple[str, str]]:
    """Pairs of overlapping nodes (empty for every layout this module makes). O(V log V)."""
    ordered = sorted(nodes, key=lambda node: (node.y, node.x))
    clashes: list[tuple[str, str]] = []
    active: list[DAGNode] = []
    for node in ordered:
        active = [other for other in active if other.y + other.height > node.y]
        for other in active:
            if other.x < node.x + node.width and node.x < other.x + other.width:
                clashes.append((other.id, node.id))
        active.append(node)
    return clashes


_FIXED_LABELS: Final = {"harness_start": "run start", "harness_end": "run end"}


def node_label(node: Any) -> str:
    """Compact one-line label of a flat-graph node."""
    if isinstance(node, TextNode):
        return compact(node.content) or "text"
    if isinstance(node, ReasoningNode):
        text = node.content
        return compact("thinking: " + text) if text else "thinking..."
    if isinstance(node, ToolCallNode):
        return compact(node.name)
    if isinstance(node, ToolResultNode):
        return compact(node.name + " result")
    if isinstance(node, ToolProgressNode):
        return compact(node.name + " progress")
    if isinstance(node, UserNode):
        content = node.content
        return (compact(content) or "user") if isinstance(content, str) else "[media]"
    if isinstance(node, ErrorNode):
        return compact("error: " + node.message)
    if isinstance(node, UsageNode):
        return f"usage {node.input_tokens}/{node.output_tokens}"
    if isinstance(node, RelayNode):
        return compact(f"permission: {node.tool}")
    fixed = _FIXED_LABELS.get(node.kind)
    return fixed if fixed is not None else compact(node.kind)


_MEMO_KEY: Final[dict[type[Any], Callable[[Any], Hashable]]] = {
    ToolCallNode: attrgetter("name"),
    ToolResultNode: attrgetter("name"),
    ToolProgressNode: attrgetter("name"),
    UsageNode: attrgetter("input_tokens", "output_tokens"),
    RelayNode: attrgetter("tool"),
    HarnessStartNode: type,
    HarnessEndNode: type,
}
"""Node types whose label depends only on these fields: labels are computed once per value."""


def node_columns(nodes: Sequence[Any]) -> tuple[list[str], list[str], list[str]]:
    """Every node's run id, kind and `node_label`, in one pass over the nodes (each node is read
    once: at 100k nodes a pass per column re-read every node from memory), computing each
    name-only label (tool calls, results, progress, usage, relays, lifecycle) once per distinct
    value. O(N).

    Tool calls, results and progress (about half of an agent conversation's nodes) are tested
    for by type identity and memoised by name inline; the other memoised types go through the
    `_MEMO_KEY` table."""
    runs: list[str] = []
    kinds: list[str] = []
    out: list[str] = []
    append = out.append
    kind_of_type = _KIND_OF_TYPE
    # node type -> (its labels by memo key, the key's getter): no (type, key) tuple per node
    memos: dict[type[Any], tuple[dict[Hashable, str], Callable[[Any], Hashable]]] = {}
    memos_get = memos.get
    memo_key = _MEMO_KEY
    call_labels: dict[str, str] = {}
    result_labels: dict[str, str] = {}
    progress_labels: dict[str, str] = {}
    by_name: dict[str, str] | None
    for node in nodes:
        cls = type(node)
        runs.append(node.run_id)
        kinds.append(kind_of_type[cls])  # every node class is in it
        if cls is ToolProgressNode:
            by_name = progress_labels
        elif cls is ToolCallNode:
            by_name = call_labels
        elif cls is ToolResultNode:
            by_name = result_labels
        elif cls is TextNode:  # `node_label`'s text rule, inline (a fifth of the nodes, unmemoised)
            append(compact(node.content) or "text")
            continue
        elif cls is ReasoningNode:  # and its reasoning rule
            text = node.content
            append(compact("thinking: " + text) if text else "thinking...")
            continue
        else:
            by_name = None
        if by_name is not None:
            name = node.name
            label = by_name.get(name)
            if label is None:
                label = by_name[name] = node_label(node)
            append(label)
            continue
        memo = memos_get(cls)
        if memo is None:
            key_of = memo_key.get(cls)
            if key_of is None:
                append(node_label(node))
                continue
            memo = memos[cls] = ({}, key_of)
        labels, key_of = memo
        key = key_of(node)
        label = labels.get(key)
        if label is None:
            label = labels[key] = node_label(node)
        append(label)
    return runs, kinds, out


_BLOCK_CONTENT_KINDS: Final = frozenset({"text", "reasoning", "user", "error", "repl_input", "repl_output"})
"""Hypergraph block kinds whose label reads the block's content."""

_BLOCK_NAME_KINDS: Final = frozenset({"tool_call", "tool_result", "relay"})
"""Hypergraph block kinds whose label depends on one name of the first event (tool, relay tool)."""


def block_label(kind: str, event: Any, text: str) -> str:
    """Compact one-line label of a hypergraph block from its kind and first event (``text``: the
    start of a text or reasoning block's text, at least its first 161 characters, see
    `block_labels`)."""
    if kind == "text":
        return compact(text) or "text"
    if kind == "reasoning":
        return compact("thinking: " + text) if text else "thinking..."
    if kind == "tool_call":
        return compact(event.name)
    if kind == "tool_result":
        return compact(f"{event.name} result")
    if kind == "user":
        content = event.content
        return (compact(content) or "user") if isinstance(content, str) else "[media]"
    if kind == "error":
        return compact("error: " + event.message)
    if kind == "relay":
        return compact(f"permission: {event.tool}")
    if kind == "repl_input":
        return compact("repl: " + event.code)
    if kind == "repl_output":
        shown = event.error or event.stdout
        return compact("output: " + shown) if shown else "output"
    if kind == "repl_progress":
        return "repl progress"
    if kind == "usage":
        return f"usage {event.input_tokens}/{event.output_tokens}"
    fixed = _FIXED_LABELS.get(kind)
    return fixed if fixed is not None else compact_json(kind)


def block_labels(
    kinds: list[str],
    first_chunks: list[int],
    events: tuple[Any, ...],
    records: list[Any],
    n_chunks: int,
    head_limit: int,
) -> list[str]:
    """`block_label` of every block, given per block its kind and first chunk (``events``: every
    chunk's event by index) and its record (``records``; read for text and reasoning blocks
    only). Labels that depend on the kind only, or on a tool name, are computed once per value.
    A text or reasoning label reads the head the record keeps (``head``: its text, at least its
    first ``head_limit`` characters) when the version holds every chunk of the block (its last
    chunk below ``n_chunks``), else joins the version's chunks until ``head_limit`` characters
    (`compact` reads no more). O(blocks); a per-block loop, for the compiled build."""
    out: list[str] = []
    by_kind: dict[str, str] = {}
    by_name: dict[str, dict[Any, str]] = {kind: {} for kind in _BLOCK_NAME_KINDS}
    for i in range(len(kinds)):
        kind = kinds[i]
        label = by_kind.get(kind)
        if label is not None:
            out.append(label)
            continue
        if kind == "text" or kind == "reasoning":
            text = _block_text_head(records[i], events, n_chunks, head_limit)
            if kind == "text":
                out.append(compact(text) or "text")
            else:
                out.append(compact("thinking: " + text) if text else "thinking...")
            continue
        event = events[first_chunks[i]]
        memo = by_name.get(kind)
        if memo is not None:
            name = event.tool if kind == "relay" else event.name
            label = memo.get(name)
            if label is None:
                label = memo[name] = block_label(kind, event, "")
            out.append(label)
            continue
        if kind == "usage":  # (distinct per block, mostly: no memo)
            out.append(f"usage {event.input_tokens}/{event.output_tokens}")
            continue
        label = block_label(kind, event, "")
        if kind not in _BLOCK_CONTENT_KINDS:
            by_kind[kind] = label
        out.append(label)
    return out


def _block_text_head(record: Any, events: tuple[Any, ...], n_chunks: int, limit: int) -> str:
    """See `block_labels`: the head first, then the last chunk (the reducer appends a chunk
    before it extends the head)."""
    head = record.head
    chunks = record.chunks
    if head is not None and chunks[-1] < n_chunks:
        return str(head)
    text = ""
    for chunk in chunks:
        if chunk >= n_chunks:
            break
        text += events[chunk].content
        if len(text) >= limit:
            break
    return text[:limit]


def graph_layout_input(graph: Graph) -> LayoutInput:
    """The flat graph as layout input: every node, every edge. O(N + E), read in bulk.

    When the reducer's parent index answers (`Graph.parent_ids`: each node has at most one incoming
    edge, from a node before it), the edges are read from it in C-level passes plus a short search
    per node whose parent is not the node before it (`_parent_positions`), and handed to `layout`
    as ``parents`` too; otherwise from ``graph.edges``. Either way the edges are listed in their
    targets' arrival order."""
    data = LayoutInput()
    nodes = graph.node_list()
    data.ids = ids = graph.node_ids()
    data.runs, data.kinds, data.labels = node_columns(nodes)
    data.edges_unique = True  # the reducer adds no duplicate edge and no self-loop
    parent_ids = graph.parent_ids()
    if parent_ids is not None:
        data.parents = parents = _parent_positions(ids, parent_ids)
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


def _parent_positions(ids: list[str], parent_ids: list[str | None]) -> list[int]:
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
"""`_parent_positions` looks for a non-adjacent parent among this many ids before its child first."""


_NON_NEGATIVE: Final = (-1).__lt__
"""``x >= 0`` for an int ``x``, as a C-level predicate (``-1 < x``)."""


def project_graph_dag(graph: Graph) -> DAGLayout:
    """Layered layout of a flat graph: one node per graph node, one group per run."""
    return _layout(graph_layout_input(graph))  # (a parent table from the reducer's index is valid)


def project_dag(source: Any, active: Any = None) -> DAGLayout:
    """Layered layout of a flat `Graph` or a hypergraph ``(conversation, active)``."""
    if isinstance(source, Graph):
        if active is not None:
            raise TypeError("project_dag(graph) takes no active set; it is for the hypergraph")
        return project_graph_dag(source)
    from convograph.projections.sources import conversation_layout_input

    return _layout(conversation_layout_input(source, active))  # (its parent table is valid)
