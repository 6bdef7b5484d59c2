"""The DAG projection's result types: `DAGLayout` of `DAGNode`s, `DAGEdge`s and `DAGGroup`s.

Kept apart from the layout engine (`convograph.projections.dag`), which may run compiled (see
`convograph._native`): msgspec Struct classes are defined in interpreted modules only, where their
class options (``rename``, ``gc``, ``kw_only``) apply as msgspec documents them.
"""

from __future__ import annotations

import msgspec

from convograph.projections.dag_svg import render_svg

__all__ = ["DAGEdge", "DAGGroup", "DAGLayout", "DAGNode"]


# The layout's records hold strings and ints only, so they cannot be part of a reference cycle:
# ``gc=False`` keeps their allocation from counting towards the cyclic GC's collections (a 100k-node
# layout allocates ~200k of them; with them tracked the collector ran ~430 young collections per
# call, ~60 ms). Same types, same fields.


class DAGNode(msgspec.Struct, rename="camel", gc=False):
    id: str
    kind: str
    label: str
    x: int
    y: int
    width: int
    height: int
    run_id: str
    layer: int
    lane: int


class DAGEdge(msgspec.Struct, kw_only=True, rename="camel", gc=False):
    source: str
    target: str
    type: str
    """``"sequence"`` (same run) or ``"spawn"`` (into another run)."""


class DAGGroup(msgspec.Struct, kw_only=True, rename="camel", gc=False):
    """A padded box around the nodes of one group (a run, or a message in the hypergraph)."""

    id: str
    label: str
    x: int
    y: int
    width: int
    height: int


class DAGLayout(msgspec.Struct, kw_only=True, rename="camel"):
    nodes: list[DAGNode]
    edges: list[DAGEdge]
    groups: list[DAGGroup]
    width: int
    height: int

    def to_svg(self) -> str:
        """A standalone SVG document of the layout. O(nodes + edges)."""
        return render_svg(self)
