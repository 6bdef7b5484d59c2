"""The flat conversation graph (seed 000 "Graph structure"): an immutable value per version.

A `Graph` is a (lineage, version) pair over partially persistent containers (`convograph.versioned`):
reducing an event returns a new `Graph`; every older `Graph` keeps reading exactly what it read
before. Extending the newest version costs O(1); extending an older one forks the lineage once (O(n)).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import msgspec

from convograph.graph.nodes import Node
from convograph.versioned import Clock, ListMapView, MapView, VersionedList, VersionedListMap, VersionedMap

__all__ = ["Diagnostic", "Graph", "create_graph"]

_NEVER: Final = sys.maxsize


class Diagnostic(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Something the reducer could not apply as sent, kept so it is never silently lost.

    ``code`` is ``"id_conflict"`` when an event's node id is already taken by a node of another kind.
    """

    code: str
    node_id: str
    event_type: str
    message: str


class _Lineage:
    """Every container of one line of versions, and the clock that versions them."""

    __slots__ = (
        "adopted_at",
        "clock",
        "diagnostics",
        "edges",
        "first_node_by_run_id",
        "last_node_by_run_id",
        "nodes",
        "parents",
        "pending_children",
        "seen_event_ids",
        "usage_counts",
    )

    def __init__(self) -> None:
        self.clock = Clock()
        self.nodes: VersionedMap[str, Node] = VersionedMap()
        self.edges: VersionedListMap[str, str] = VersionedListMap()
        self.last_node_by_run_id: VersionedMap[str, str] = VersionedMap()
        self.first_node_by_run_id: VersionedMap[str, str] = VersionedMap()
        self.usage_counts: VersionedMap[str, int] = VersionedMap()
        self.seen_event_ids: VersionedMap[str, bool] = VersionedMap()
        self.pending_children: VersionedMap[str, tuple[str, ...]] = VersionedMap()
        self.diagnostics: VersionedList[Diagnostic] = VersionedList()
        self.parents: list[str | None] = []
        """Parent index: the source of each node's incoming edge as it was when the node was
        created (``None``: none yet), aligned with ``nodes`` in insertion order. Every edge the
        reducer adds targets a node created in that same step, except when a waiting child is
        adopted by a late parent; so until ``adopted_at`` this is exactly each node's one incoming
        edge. Appended at the head only (one list append per new node); a lineage whose containers
        were filled otherwise (a snapshot load) is told apart by its length (see `parents_at`)."""
        self.adopted_at = _NEVER
        """Stamp of the first adoption edge (a late parent linking a waiting child); `_NEVER` if none."""

    def parents_at(self, version: int) -> list[str | None] | None:
        """`parents` as of ``version`` (a new list), or ``None`` when the index cannot answer: a
        late parent was adopted at or before ``version``, or the index does not cover every node
        (a lineage loaded from a snapshot). O(n) list copy."""
        parents = self.parents
        nodes = self.nodes
        if self.adopted_at <= version or len(parents) != nodes.count_at(_NEVER):
            return None
        return parents[: nodes.count_at(version)]

    def fork_at(self, version: int) -> _Lineage:
        out = _Lineage()
        out.nodes = self.nodes.fork_at(version)
        out.edges = self.edges.fork_at(version)
        out.last_node_by_run_id = self.last_node_by_run_id.fork_at(version)
        out.first_node_by_run_id = self.first_node_by_run_id.fork_at(version)
        out.usage_counts = self.usage_counts.fork_at(version)
        out.seen_event_ids = self.seen_event_ids.fork_at(version)
        out.pending_children = self.pending_children.fork_at(version)
        out.diagnostics = self.diagnostics.fork_at(version)
        parents = self.parents_at(version)
        if parents is not None:  # else left empty: the fork's index stays unusable
            out.parents = parents
        return out


class Graph:
    """One immutable version of a flat conversation graph.

    - ``nodes``: node id -> `Node`, in insertion order.
    - ``edges``: parent id -> child ids, in insertion order (no duplicates, no self-loops).
    - ``last_node_by_run_id``: run id -> id of the newest node of that run.
    - ``pending_parents``: parent ids named by a run's first event that have not arrived yet ->
      the child node ids waiting for them (they are linked when the parent arrives).
    - ``diagnostics``: events that could not be applied as sent.
    """

    __slots__ = ("_lineage", "_version")

    def __init__(self, lineage: _Lineage, version: int) -> None:
        self._lineage = lineage
        self._version = version

    @property
    def version(self) -> int:
        """Number of changes since this lineage began; equal graphs may differ here."""
        return self._version

    @property
    def nodes(self) -> Mapping[str, Node]:
        return MapView(self._lineage.nodes, self._version)

    @property
    def edges(self) -> Mapping[str, Sequence[str]]:
        return ListMapView(self._lineage.edges, self._version)

    @property
    def last_node_by_run_id(self) -> Mapping[str, str]:
        return MapView(self._lineage.last_node_by_run_id, self._version)

    @property
    def first_node_by_run_id(self) -> Mapping[str, str]:
        return MapView(self._lineage.first_node_by_run_id, self._version)

    @property
    def pending_parents(self) -> Mapping[str, tuple[str, ...]]:
        return MapView(self._lineage.pending_children, self._version)

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return self._lineage.diagnostics.get_at(self._version)

    def has_seen_event(self, event_id: str) -> bool:
        return self._lineage.seen_event_ids.get_at(event_id, self._version) is not None

    def children_ids(self, node_id: str) -> tuple[str, ...]:
        return self._lineage.edges.get_at(node_id, self._version)

    def iter_nodes(self) -> Iterator[Node]:
        """Nodes in insertion order. O(n), read in bulk (`VersionedMap.values_at`): one copy of the
        newest dict when this graph is its lineage's newest version."""
        return iter(self._lineage.nodes.values_at(self._version))

    def node_map(self) -> Mapping[str, Node]:
        """Nodes by id, for many point reads of what never changes in a node (its kind and run) in
        one pass, e.g. a one-shot projection reading a parent's kind. When this graph is its
        lineage's newest version, O(1): a read-only view of the lineage's own dict, which shows
        later writes if the lineage is extended meanwhile (new nodes, a text node's newer
        fragments), so read it right away and do not keep it. Otherwise a new dict, O(n)."""
        nodes = self._lineage.nodes
        # the newest values, as `VersionedMap.values_at` reads them when nothing newer was written
        if nodes._last_stamp <= self._version and not nodes._has_tombstones:
            return MappingProxyType(nodes._latest)  # type: ignore[arg-type]
        return dict(nodes.items_at(self._version))

    def node_list(self) -> list[Node]:
        """This version's nodes in insertion order, as a new list (`iter_nodes` without the
        iterator): O(n), one copy of the newest dict when nothing newer was written."""
        return self._lineage.nodes.values_at(self._version)

    def node_ids(self) -> list[str]:
        """The ids of `node_list`, aligned with it, as a new list: O(n), one slice of the
        insertion-order key list (keys are only appended, so a later write does not shift it)."""
        nodes = self._lineage.nodes
        if not nodes._has_tombstones:
            return nodes._order[: nodes.count_at(self._version)]
        return list(nodes.keys_at(self._version))

    def parent_ids(self) -> list[str | None] | None:
        """The source of each node's incoming edge (``None`` for a root), aligned with
        `iter_nodes`, read from the reducer's parent index: O(n), one list copy. ``None`` when the
        index cannot answer (a late parent adopted a waiting child at or before this version, or
        the graph was loaded from a snapshot): then use ``edges``. When it answers, every node's
        parent precedes it, and each node has at most one incoming edge."""
        return self._lineage.parents_at(self._version)

    def __len__(self) -> int:
        return self._lineage.nodes.len_at(self._version)

    def _state(self) -> tuple[Any, ...]:
        return (
            list(self.nodes.items()),
            {key: tuple(value) for key, value in self.edges.items()},
            dict(self.last_node_by_run_id),
            dict(self.pending_parents),
        )

    def __eq__(self, other: object) -> bool:
        """Same nodes (in order), edges, run cursors and pending parents."""
        if not isinstance(other, Graph):
            return NotImplemented
        if self._lineage is other._lineage and self._version == other._version:
            return True
        return self._state() == other._state()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Graph(nodes={len(self)}, runs={len(self.last_node_by_run_id)}, version={self._version})"


def create_graph() -> Graph:
    """An empty graph."""
    return Graph(_Lineage(), 0)
