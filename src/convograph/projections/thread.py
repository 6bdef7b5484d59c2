"""Thread projection (seed 001 "Thread Projection"): the graph as nested `ViewNode`s for chat UIs.

The views are made by `convograph.projections.placement.ThreadBuilder`, whose `ThreadBuilder.place`
decides where every node goes, for a flat graph and for a hypergraph, one-shot and incremental.
This module is the flat graph's source: its nodes with their parents in arrival order
(`graph_arrival_order`), and the entry points `project_thread` / `build_thread`, which hand a
hypergraph to `convograph.projections.sources`. O(N + E) per projection; iterative throughout
(nesting depth is unbounded and cycles terminate).
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import msgspec

from convograph.graph.model import Graph
from convograph.graph.nodes import Node
from convograph.projections.placement import ThreadBuilder
from convograph.projections.progress import ProgressRegistry
from convograph.projections.sources import fill_from_conversation
from convograph.projections.thread_nodes import (
    RESULT_SUFFIX,
    ReplInputNode,
    ReplOutputNode,
    ReplProgressNode,
    call_id_of_result,
)
from convograph.projections.view import ViewNode, ViewOptions

__all__ = [
    "RESULT_SUFFIX",
    "ReplInputNode",
    "ReplOutputNode",
    "ReplProgressNode",
    "ThreadBuilder",
    "build_thread",
    "call_id_of_result",
    "copy_views",
    "graph_arrival_order",
    "project_graph_thread",
    "project_thread",
]


def graph_arrival_order(graph: Graph) -> list[tuple[Node, str | None]]:
    """Every node with the source of its incoming edge, parents before children, else by arrival.

    Nodes come in insertion (arrival) order, except that a node whose parent arrived later
    (a child adopted once its parent came) waits for that parent. Nodes on a cycle come last,
    in arrival order, as roots. O(N + E).
    """
    nodes, parents = _arrival_lists(graph)
    return list(zip(nodes, parents, strict=True))


def parent_map(graph: Graph) -> dict[str, str]:
    """Target id -> source id of its first incoming edge (edges in insertion order). O(E): the
    edge lists are read in bulk and walked backwards, so the first edge's source is written last."""
    parent_of: dict[str, str] = {}
    for source, targets in reversed(list(graph.edges.items())):
        for target in targets:
            parent_of[target] = source
    return parent_of


def _arrival_lists(graph: Graph) -> tuple[list[Node], list[str | None]]:
    """`graph_arrival_order` as two parallel lists (no pair allocated per node).

    When the reducer's parent index answers (`Graph.parent_ids`: no late parent was adopted),
    every parent precedes its children in insertion order, so the arrival order is the insertion
    order and the index is the parent list: two list copies, no per-node work."""
    parents = graph.parent_ids()
    if parents is not None:
        return graph.node_list(), parents
    parent_of = parent_map(graph)
    parent_get = parent_of.get
    placed: set[str] = set()
    placed_add = placed.add
    waiting: dict[str, list[Node]] = {}
    out_nodes: list[Node] = []
    out_parents: list[str | None] = []
    node_append = out_nodes.append
    parent_append = out_parents.append
    for node in graph.iter_nodes():
        node_id = node.id
        parent = parent_get(node_id)
        if parent is not None and parent not in placed:
            waiting.setdefault(parent, []).append(node)
            continue
        placed_add(node_id)
        node_append(node)
        parent_append(parent)
        if waiting and node_id in waiting:
            adopted: list[tuple[Node, str]] = [(child, node_id) for child in reversed(waiting.pop(node_id))]
            while adopted:
                current, current_parent = adopted.pop()
                placed_add(current.id)
                node_append(current)
                parent_append(current_parent)
                children = waiting.pop(current.id, None)
                if children:
                    adopted.extend((child, current.id) for child in reversed(children))
    if waiting:
        leftovers = sorted(
            (node for nodes in waiting.values() for node in nodes),
            key=_arrival_key(graph),
        )
        for node in leftovers:
            if node.id in placed:
                continue
            stack: list[tuple[Node, str | None]] = [(node, None)]
            while stack:
                current, leftover_parent = stack.pop()
                if current.id in placed:
                    continue
                placed_add(current.id)
                node_append(current)
                parent_append(leftover_parent)
                children = waiting.pop(current.id, None)
                if children:
                    stack.extend((child, current.id) for child in reversed(children))
    return out_nodes, out_parents


def _arrival_key(graph: Graph) -> Any:
    index = {node_id: i for i, node_id in enumerate(graph.nodes)}
    return lambda node: index[node.id]


def project_graph_thread(
    graph: Graph,
    *,
    options: ViewOptions | None = None,
    registry: ProgressRegistry | None = None,
) -> list[ViewNode]:
    """Thread views of a flat graph. O(N + E)."""
    return build_thread(graph, options=options, registry=registry).views


def copy_views(views: list[ViewNode]) -> list[ViewNode]:
    """A deep copy of a view tree (for a snapshot of the projector's live views). O(views)."""
    return msgspec.convert(msgspec.to_builtins(views), list[ViewNode])


def project_thread(
    source: Any,
    active: Any = None,
    *,
    options: ViewOptions | None = None,
    registry: ProgressRegistry | None = None,
) -> list[ViewNode]:
    """Thread views of a flat `Graph`, or of a hypergraph ``(conversation, active)``.

    ``options`` selects what to show (`ViewOptions`); ``registry`` folds tool progress
    (`default_registry` unless given). O(N + E).
    """
    return build_thread(source, active, options=options, registry=registry).views


def build_thread(
    source: Any,
    active: Any = None,
    *,
    options: ViewOptions | None = None,
    registry: ProgressRegistry | None = None,
    track_changes: bool = False,
    top_level_only: bool = False,
) -> ThreadBuilder:
    """A `ThreadBuilder` filled from ``source`` (see `project_thread`). ``top_level_only``: the
    caller reads the top-level views' content only and keeps none of them (`ThreadBuilder`); for a
    hypergraph the builder is made by `convograph.projections.sources`, which takes it too."""
    if isinstance(source, Graph):
        if active is not None:
            raise TypeError("project_thread(graph) takes no active set; it is for the hypergraph")
        if track_changes:
            builder = ThreadBuilder(options=options, registry=registry, track_changes=True)
            builder.add_all(graph_arrival_order(source))
            return builder
        builder = ThreadBuilder(
            options=options, registry=registry, top_level_only=top_level_only, nodes=source.node_map()
        )
        nodes, parents = _arrival_lists(source)
        builder.add_placed(zip(nodes, parents, repeat(None)))
        return builder
    return fill_from_conversation(
        source,
        active,
        options=options,
        registry=registry,
        track_changes=track_changes,
        top_level_only=top_level_only,
    )
