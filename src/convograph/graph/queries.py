"""Queries over a flat `Graph` (seed 000 "Querying the graph", "Graph traversal").

Unlike upstream, run queries do not scan the whole graph: a run's nodes form one chain of sequential
edges from ``first_node_by_run_id``, so `get_nodes_in_run` is O(nodes in the run). Walks are
iterative and cycle-safe (each node is visited once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from convograph.graph.model import Graph
from convograph.graph.nodes import Node, TextNode, ToolCallNode

__all__ = [
    "get_children",
    "get_nodes_in_run",
    "get_text",
    "get_tool_calls",
    "iter_dfs",
    "iter_run",
    "roots",
    "walk_dfs",
]


def get_children(graph: Graph, node_id: str) -> list[Node]:
    """Children of ``node_id`` in edge order. O(children)."""
    nodes = graph.nodes
    out = []
    for child_id in graph.children_ids(node_id):
        node = nodes.get(child_id)
        if node is not None:
            out.append(node)
    return out


def iter_run(graph: Graph, run_id: str) -> Iterator[Node]:
    """Nodes of one run in order, following its sequential edges. O(nodes in the run)."""
    nodes = graph.nodes
    current = graph.first_node_by_run_id.get(run_id)
    seen: set[str] = set()
    while current is not None and current not in seen:
        seen.add(current)
        node = nodes.get(current)
        if node is None:
            return
        yield node
        following = None
        for child_id in graph.children_ids(current):
            child = nodes.get(child_id)
            if child is not None and child.run_id == run_id and child_id not in seen:
                following = child_id
                break
        current = following


def get_nodes_in_run(graph: Graph, run_id: str) -> list[Node]:
    """All nodes of ``run_id`` in order."""
    return list(iter_run(graph, run_id))


def get_text(graph: Graph, run_id: str) -> str:
    """The run's text, in order (reasoning excluded)."""
    return "".join(node.content for node in iter_run(graph, run_id) if isinstance(node, TextNode))


def get_tool_calls(graph: Graph, run_id: str) -> list[Node]:
    """The run's tool_call nodes, in order."""
    return [node for node in iter_run(graph, run_id) if isinstance(node, ToolCallNode)]


def iter_dfs(graph: Graph, start_id: str) -> Iterator[Node]:
    """Pre-order depth-first walk from ``start_id`` (children in edge order). Each node once."""
    nodes = graph.nodes
    stack = [start_id]
    seen: set[str] = set()
    while stack:
        node_id = stack.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        node = nodes.get(node_id)
        if node is None:
            continue
        yield node
        children = graph.children_ids(node_id)
        stack.extend(reversed(children))


def walk_dfs(graph: Graph, start_id: str, visit: Callable[[Node], object]) -> None:
    """Call ``visit`` on every node reachable from ``start_id``, depth first, each node once."""
    for node in iter_dfs(graph, start_id):
        visit(node)


def roots(graph: Graph) -> list[Node]:
    """Nodes without an incoming edge, in insertion order. O(nodes + edges)."""
    targets: set[str] = set()
    for children in graph.edges.values():
        targets.update(children)
    return [node for node in graph.iter_nodes() if node.id not in targets]
