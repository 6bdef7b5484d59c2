"""`to_jsonable`: any convograph value as plain JSON data (dicts, lists, str, numbers, bools, None).

Keys are camelCase, as on the wire. Structs convert field by field (msgspec); persistent views and
graphs convert to dicts; text and reasoning nodes carry their joined text as ``content``; objects
with a ``to_jsonable()`` method convert through it. O(size of the result).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from convograph.graph.model import Graph
from convograph.graph.nodes import ReasoningNode, TextNode

__all__ = ["to_jsonable"]

_TEXT_NODES = (TextNode, ReasoningNode)


def _node(node: TextNode | ReasoningNode) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(node)
    out["content"] = node.content
    return out


def _prepare(obj: Any) -> Any:
    """Replace the values msgspec cannot render by themselves (text nodes, graphs, views)."""
    if isinstance(obj, _TEXT_NODES):
        return _node(obj)
    if isinstance(obj, Graph):
        return {
            "nodes": {key: _prepare(value) for key, value in obj.nodes.items()},
            "edges": {key: list(value) for key, value in obj.edges.items()},
            "lastNodeByRunId": dict(obj.last_node_by_run_id),
        }
    if isinstance(obj, (list, tuple)):
        return [_prepare(item) for item in obj]
    if isinstance(obj, Mapping) and not isinstance(obj, dict):
        return {key: _prepare(value) for key, value in obj.items()}
    if isinstance(obj, dict):
        return {key: _prepare(value) for key, value in obj.items()}
    method = getattr(obj, "to_jsonable", None)
    if callable(method) and not isinstance(obj, type):
        return method()
    return obj


def _hook(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return dict(obj.items())
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def to_jsonable(obj: Any) -> Any:
    """Plain JSON data for ``obj`` (a projection result, graph, node, event, ...)."""
    return msgspec.to_builtins(_prepare(obj), enc_hook=_hook)
