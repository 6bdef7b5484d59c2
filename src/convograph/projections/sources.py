"""Adapters from the hypergraph model to the projections' inputs.

The hypergraph (`convograph.hypergraph`) is built in parallel; until its API is committed these
raise a `TypeError` naming what was passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from convograph.graph.nodes import Node
from convograph.projections.dag import LayoutInput

__all__ = ["conversation_layout_input", "conversation_nodes"]


def _unsupported(source: Any) -> TypeError:
    return TypeError(
        f"cannot project a {type(source).__name__}: expected a convograph Graph "
        "or a hypergraph (conversation, active)"
    )


def conversation_nodes(conversation: Any, active: Any) -> Iterator[tuple[Node, str | None]]:
    raise _unsupported(conversation)


def conversation_layout_input(conversation: Any, active: Any) -> LayoutInput:
    raise _unsupported(conversation)
