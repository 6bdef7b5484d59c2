"""`to_jsonable`: any convograph value as plain JSON data (dicts, lists, str, numbers, bools, None).

Keys are camelCase, as on the wire. Structs convert field by field; persistent views convert to
dicts; text fragment chains become their text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from convograph.graph.model import Graph
from convograph.graph.nodes import Fragments

__all__ = ["to_jsonable"]


def _hook(obj: Any) -> Any:
    if isinstance(obj, Fragments):
        return obj.text()
    if isinstance(obj, Graph):
        return {
            "nodes": dict(obj.nodes.items()),
            "edges": {key: list(value) for key, value in obj.edges.items()},
            "lastNodeByRunId": dict(obj.last_node_by_run_id),
        }
    to_jsonable_method = getattr(obj, "to_jsonable", None)
    if callable(to_jsonable_method):
        return to_jsonable_method()
    if isinstance(obj, Mapping):
        return dict(obj.items())
    if isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        return list(obj)
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def to_jsonable(obj: Any) -> Any:
    """Plain JSON data for ``obj`` (a projection result, graph, node, event, ...)."""
    return msgspec.to_builtins(obj, enc_hook=_hook)
