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

The phases live in their own modules, each compiled (mypyc) when `scripts/build-native` has built
them (`convograph._native`): `dag_input` (the input, `LayoutInput`), `dag_labels` (labels),
`dag_layering` (edges and layers, phase 1), `dag_lanes` (ordering, phase 2), `dag_coordinates`
(phase 3) and `dag_svg` (``to_svg()``); the result types live in `dag_model` (interpreted: msgspec
Structs keep their class options there only). This module runs them in order and re-exports
their public names. Keep these modules strictly typed and free of msgspec Structs."""

from __future__ import annotations

from typing import Any

from convograph.graph.model import Graph
from convograph.projections.dag_coordinates import (
    CHAR_WIDTH,
    GROUP_PAD,
    LANE_GAP,
    LAYOUT_PAD,
    MAX_WIDTH,
    MIN_WIDTH,
    NODE_GAP,
    NODE_HEIGHT,
    check_no_overlap,
    place,
)
from convograph.projections.dag_input import (
    LayoutInput,
    add_spawn_edges,
    graph_layout_input,
    run_sequence_edges,
)
from convograph.projections.dag_input import (
    check_parent_table as _check_parent_table,
)
from convograph.projections.dag_input import (
    parent_positions as _parent_positions,  # noqa: F401  (its tests import it from here)
)
from convograph.projections.dag_labels import (
    MAX_LABEL,
    block_label,
    block_labels,
    compact,
    compact_json,
    node_columns,
    node_label,
)
from convograph.projections.dag_lanes import assign_lanes
from convograph.projections.dag_layering import MAX_HOPS, edge_lists, layer_chains
from convograph.projections.dag_model import DAGEdge, DAGGroup, DAGLayout, DAGNode
from convograph.projections.dag_svg import COLORS, render_svg

__all__ = [
    "CHAR_WIDTH",
    "COLORS",
    "GROUP_PAD",
    "LANE_GAP",
    "LAYOUT_PAD",
    "MAX_HOPS",
    "MAX_LABEL",
    "MAX_WIDTH",
    "MIN_WIDTH",
    "NODE_GAP",
    "NODE_HEIGHT",
    "DAGEdge",
    "DAGGroup",
    "DAGLayout",
    "DAGNode",
    "LayoutInput",
    "add_spawn_edges",
    "block_label",
    "block_labels",
    "check_no_overlap",
    "compact",
    "compact_json",
    "graph_layout_input",
    "layout",
    "node_columns",
    "node_label",
    "project_dag",
    "project_graph_dag",
    "render_svg",
    "run_sequence_edges",
]


def layout(data: LayoutInput) -> DAGLayout:
    """Lay out ``data`` (see the module docstring). O(V + E + C·K). A `LayoutInput.parents`
    table is checked first (`_check_parent_table`: `ValueError` when it is not forward or not
    exactly the given edges)."""
    _check_parent_table(data)
    return _layout(data)


def _layout(data: LayoutInput) -> DAGLayout:
    """`layout` of an input whose parent table, if any, is valid (see `_check_parent_table`):
    edges and layers (`dag_layering`), lanes (`dag_lanes`), coordinates (`dag_coordinates`)."""
    if not data.ids:
        return DAGLayout(nodes=[], edges=[], groups=[], width=0, height=0)
    edges = edge_lists(data)
    chains = layer_chains(data, edges)
    layer = chains.layer
    chain_start = [layer[v] for v in chains.head]
    chain_end = [layer[v] for v in chains.tail]
    chain_lane, n_lanes = assign_lanes(chains.parent, chain_start, chain_end)
    return place(data, edges, chains, chain_lane, n_lanes)


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
