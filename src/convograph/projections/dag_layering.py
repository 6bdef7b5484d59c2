"""DAG layout, phase 1: edges and layering. Items become layers and chains.

- **Edges** (`edge_lists`, O(E)): deduplicated, self-loops and out-of-range indexes dropped, kept in
  flat int lists (most items have one predecessor and one successor; further ones go to small
  overflow dicts).
- **Layering** (`layer_chains`, O(V + E)): items in arrival order (Kahn, preferring the earliest
  arrival; items on a cycle are placed last, ignoring the back edge). ``layer(v) = max(layer(p) +
  1)`` over its predecessors, and a run's next item also sits below everything its child runs
  produced so far, so a parent resumes below the subagent it waited for. Each item joins its
  same-run predecessor's chain when it is that chain's tail, else starts a chain: a chain is a
  maximal same-run path.

Runs compiled (mypyc, see `convograph._native`): strictly typed, no msgspec Struct here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from convograph.projections.dag_input import LayoutInput

__all__ = ["MAX_HOPS", "Chains", "Edges", "edge_lists", "layer_chains"]

MAX_HOPS: Final = 64
"""Deepest run nesting whose resumption is pushed below its descendants' nodes."""


class Edges:
    """The layout's edges: per item its first predecessor and successor (-1: none; ``succ0`` is
    empty for a parent table, which needs no successors), further ones by item; the kept edges as
    parallel source / target lists; whether any edge points backward in arrival order."""

    __slots__ = ("backward", "more_preds", "more_succs", "pred0", "sources", "succ0", "targets")

    def __init__(self, pred0: list[int], succ0: list[int], sources: list[int], targets: list[int]) -> None:
        self.pred0 = pred0
        self.succ0 = succ0
        self.more_preds: dict[int, list[int]] = {}
        self.more_succs: dict[int, list[int]] = {}
        self.sources = sources
        self.targets = targets
        self.backward = False


class Chains:
    """The layering: per item its layer and chain; per chain (in creation order) its head, tail,
    parent chain (-1: a root) and run; per item its run as a dense int (runs numbered in
    first-item order)."""

    __slots__ = ("head", "layer", "of", "parent", "rid", "run", "tail")

    def __init__(self, n: int, rid: list[int]) -> None:
        self.layer = [-1] * n
        self.of = [-1] * n
        self.head: list[int] = []
        self.tail: list[int] = []
        self.parent: list[int] = []
        self.run: list[str] = []
        self.rid = rid


def edge_lists(data: LayoutInput) -> Edges:
    """The edges of ``data`` (``edges`` pairs, then the ``edge_sources`` / ``edge_targets``
    columns), deduplicated unless `LayoutInput.edges_unique`, first occurrence kept. A parent
    table (`LayoutInput.parents`, already valid) is taken as the predecessor list as it is, with
    its edges: every edge points forward and no successor list is needed. O(V + E)."""
    n = len(data.ids)
    table = data.parents
    if table is not None:
        return Edges(table, [], data.edge_sources, data.edge_targets)
    pairs = data.edges
    unique = data.edges_unique
    edges: Iterable[tuple[int, int]] = pairs
    if data.edge_sources:
        columns = zip(data.edge_sources, data.edge_targets, strict=True)
        edges = chain(pairs, columns) if pairs else columns
    keep = not unique or bool(pairs)
    if keep:
        result = Edges([-1] * n, [-1] * n, [], [])
    else:  # the columns are kept as given (no copy, no tuple per edge)
        result = Edges([-1] * n, [-1] * n, data.edge_sources, data.edge_targets)
    pred0, succ0 = result.pred0, result.succ0
    seen: set[tuple[int, int]] = set()
    for s, t in edges:
        if s > t:
            result.backward = True
        if not unique:
            edge = (s, t)
            if s == t or edge in seen or not (0 <= s < n and 0 <= t < n):
                continue
            seen.add(edge)
        if keep:
            result.sources.append(s)
            result.targets.append(t)
        if pred0[t] < 0:
            pred0[t] = s
        else:
            result.more_preds.setdefault(t, []).append(s)
        if succ0[s] < 0:
            succ0[s] = t
        else:
            result.more_succs.setdefault(s, []).append(t)
    return result


def run_ids(runs: list[str]) -> tuple[list[int], int]:
    """Each item's run as a dense int, runs numbered in first-item order, and the number of runs:
    the per-run state of the layering is lists indexed by run (no dict call per item and per hop
    of the subtree-maximum walk). O(V)."""
    number_of: dict[str, int] = {}
    rid: list[int] = []
    for run in runs:
        number = number_of.get(run)
        if number is None:
            number = number_of[run] = len(number_of)
        rid.append(number)
    return rid, len(number_of)


def layer_chains(data: LayoutInput, edges: Edges) -> Chains:
    """Layers and chains of every item (see the module docstring). With a parent table the
    forest loop (`_layer_forest`) places the items; otherwise the general loop
    (`_layer_general`), in arrival order when every edge points forward (the usual case: a node's
    predecessors arrived before it), else in `_kahn_order`. (By induction on i: all predecessors
    of i are < i, so were placed and counted down by the time the scan reaches i, which is then
    placed; its successors are > i, never pushed early.) O(V + E)."""
    n = len(data.ids)
    rid, n_runs = run_ids(data.runs)
    chains = Chains(n, rid)
    run_parent = [-1] * n_runs  # run -> the run it continues from (-1: none yet)
    desc_max = [-1] * n_runs  # run -> deepest layer in its subtree so far
    ended = [False] * n_runs  # run -> its harness_end was placed
    if data.parents is not None:
        _layer_forest(edges.pred0, data.kinds, chains, run_parent, desc_max, ended)
    else:
        order: Sequence[int] = range(n)
        if edges.backward:
            order = _kahn_order(n, edges.pred0, edges.more_preds, edges.succ0, edges.more_succs)
        _layer_general(order, edges, data.kinds, chains, run_parent, desc_max, ended)
    chains.run = list(map(data.runs.__getitem__, chains.head))
    return chains


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
    kinds: list[str],
    chains: Chains,
    run_parent: list[int],
    desc_max: list[int],
    ended: list[bool],
) -> None:
    """The layering for a parent table (`LayoutInput.parents`): `_layer_general` with one
    predecessor at most per item, from before it, so items are placed in arrival order and a
    predecessor is always placed. Same rules, same results (property-tested against the general
    loop); kept apart because this is the per-item loop of a 100k-node layout. Fills ``chains``
    and the per-run lists in place (chain runs are the caller's). O(V + S · hops) for S switches
    between runs in arrival order, hops <= `MAX_HOPS`.

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
    rid, layer, chain_of = chains.rid, chains.layer, chains.of
    chain_head, chain_tail, chain_parent = chains.head, chains.tail, chains.parent
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
    """The subtree-maximum walk of the layering after its first step (``desc_max[run]`` already raised
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


def _layer_general(
    order: Sequence[int],
    edges: Edges,
    kinds: list[str],
    chains: Chains,
    run_parent: list[int],
    desc_max: list[int],
    ended: list[bool],
) -> None:
    """The layering of any edges, items placed in ``order``: an item sits one layer below its
    deepest placed predecessor, and below ``desc_max[run] + 1`` when it continues its run; it
    extends the chain of a same-run predecessor that is that chain's tail, else starts a chain
    under its first placed predecessor's. Then the subtree maxima of its run and the run's
    ancestors are raised to its layer (`_raise_ancestors`). O(V + E + V · hops)."""
    rid, layer, chain_of = chains.rid, chains.layer, chains.of
    chain_head, chain_tail, chain_parent = chains.head, chains.tail, chains.parent
    pred0, more_preds = edges.pred0, edges.more_preds
    for v in order:
        r = rid[v]
        lay = 0
        same_run_pred = -1
        first_pred = -1
        p0 = pred0[v]
        if p0 >= 0:
            extra = more_preds.get(v) if more_preds else None
            for p in (p0,) if extra is None else (p0, *extra):
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
