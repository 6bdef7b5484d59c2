"""The all-workspaces graph: one graph holding every workspace, so that a ``"*"`` query of an
unrestricted key answers as one database would (aggregations, ``ORDER BY``, ``LIMIT``).

Per-workspace graphs stay the store and the isolation boundary (a key limited to some workspaces
never reads this graph). `AllWorkspaces` is the engine's write mirror (`FalkorEngine.mirror`):
every statement written to a workspace graph is written again, unchanged, to ``names.all_graph``.
That is sound because every write statement addresses its nodes by ``{node_id, workspace}`` (the
MERGE key of every node, seed 004) and edges only join nodes of one workspace, so the
workspaces never meet in the shared graph. The exceptions, rewritten here:

- statements addressing nodes by internal id (``MATCH (n) WHERE id(n) = i``: the in-place purge of
  a forgotten session) are resolved first, on the workspace graph, to ``(label, node_id)`` and run
  on the shared graph by those (`prepare`);
- deleting a workspace graph (a rebuild) deletes that workspace's nodes from the shared graph;
- the shared graph's unique constraints are on ``(node_id, workspace)`` (`ensure_schema`), so the
  writer's ``CREATE`` fast path meets the same refusals there as in the workspace graph;
- ``intern()`` calls are dropped from the copies (`_plain`): FalkorDB's constraints miss interned
  values and its grouping keeps interned and plain strings apart, and the copy below reads plain.

A deployment that had workspace graphs before this graph existed gets it by `backfill` (a copy of
each workspace graph, node and edge pages by internal id), before the applier starts. Write cost:
every write twice (BENCHMARKS.md, docs/intelligence.md).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from convograph.intelligence.engine import EngineError, FalkorEngine, GraphEngine, MapFreeList
from convograph.intelligence.writer import GraphNames

__all__ = ["AllWorkspaces"]

log = logging.getLogger(__name__)

Statements = list[tuple[str, Mapping[str, Any] | None]]

_CODE_INTERN = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`|\bintern\(')
COMPLETE_VERSION = "2"
"""The all-workspaces graph's completion mark: 2 since its strings are all plain (`_plain`); a
graph completed under an older mark is copied again once."""


def _plain(cypher: str) -> str:
    """``cypher`` with its ``intern(x)`` calls written ``(x)`` (quoted text left alone), for the
    shared graph. FalkorDB 4.22 keeps interned and plain copies of a string apart in ``GROUP BY``
    and ``DISTINCT`` (two rows for one workspace), and its unique constraints do not see interned
    values (a replayed ``CREATE`` made a second copy of a node instead of being refused). The copy
    of a workspace graph (`backfill`) reads values back as plain strings, so the shared graph keeps
    them all plain: one kind of string, and constraints that hold. O(len(cypher)) when it calls
    ``intern``."""
    if "intern(" not in cypher:
        return cypher
    return _CODE_INTERN.sub(lambda m: "(" if m.group(0) == "intern(" else m.group(0), cypher)


_BY_ID = re.compile(r"MATCH \((\w+)(?::`?\w+`?)?\) WHERE id\(\1\) = (\w+)")
"""``MATCH (n) WHERE id(n) = i`` or ``MATCH (n:Label) WHERE id(n) = i``: groups node and item."""
_UNIQUE = ("Session", "Event", "ToolCall", "Tool", "ParallelGroup", "Model")
_PAGE = 5000
_DELETE_PAGE = """
MATCH (n {workspace: $ws})
WITH n LIMIT 10000
DETACH DELETE n
RETURN count(*)
"""


def _label(name: str) -> str:
    if "`" in name:
        raise EngineError(f"label {name!r} cannot be copied")
    return f"`{name}`"


def _create_index(engine: GraphEngine, graph: str, label: str, attempts: int = 50) -> None:
    """The shared graph's ``(node_id, workspace)`` index on ``label``, present already or made now.
    Instances starting together race to create the graph: FalkorDB answers "Encountered an empty
    key (or a different graph value) when opened key" to one that opens the key while another
    creates it; that one tries again."""
    for attempt in range(attempts):
        try:
            engine.execute(graph, f"CREATE INDEX FOR (n:{label}) ON (n.node_id, n.workspace)")
            return
        except EngineError as exc:
            message = str(exc).lower()
            if "already indexed" in message:
                return
            if "when opened key" not in message or attempt == attempts - 1:
                raise
            time.sleep(0.02 * (attempt + 1))


class AllWorkspaces:
    """The write mirror and the shared graph's schema, backfill and deletions."""

    def __init__(self, names: GraphNames, home: FalkorEngine | None = None) -> None:
        self.names = names
        self.graph = names.all_graph
        self.home = home
        """The server the shared graph lives on when workspaces are spread over several
        (`convograph.intelligence.shards`: the first listed); None: the server of each write."""
        self._ready = False
        self._lock = threading.Lock()

    def _workspace(self, graph: str) -> str | None:
        return None if graph == self.graph else self.names.workspace(graph)

    # -- the mirror (called by FalkorEngine) --------------------------------------------------------
    def prepare(self, engine: FalkorEngine, graph: str, statements: Statements) -> Statements | None:
        """What to write to the shared graph for ``statements`` about to run on ``graph`` (None:
        nothing, ``graph`` is not a workspace graph). Id-addressed statements are resolved now,
        while the nodes still exist."""
        workspace = self._workspace(graph)
        if workspace is None:
            return None
        self.ensure_schema(self.home or engine)
        out: Statements = []
        for cypher, params in statements:
            if "id(" in cypher:
                out.extend(self._by_key(engine, graph, workspace, cypher, params))
            else:
                out.append((_plain(cypher), params))
        return out

    def commit(self, engine: FalkorEngine, statements: Statements) -> None:
        """Write the prepared copies; an index the shared graph has already (made for another
        workspace's graph) is not an error."""
        engine = self.home or engine
        writes: Statements = []
        for cypher, params in statements:
            if cypher.lstrip().upper().startswith("CREATE INDEX"):
                try:
                    engine.execute(self.graph, cypher, params)
                except EngineError as exc:
                    if "already indexed" not in str(exc).lower():
                        raise
            else:
                writes.append((cypher, params))
        engine.execute_many(self.graph, writes)

    def deleted(self, engine: FalkorEngine, graph: str) -> None:
        """``graph`` was deleted: remove its workspace's nodes from the shared graph."""
        engine = self.home or engine
        workspace = self._workspace(graph)
        if workspace is not None and self.graph in engine.graphs():
            while engine.execute(self.graph, _DELETE_PAGE, {"ws": workspace}).rows[0][0]:
                pass

    def _by_key(
        self, engine: FalkorEngine, graph: str, workspace: str, cypher: str, params: Mapping[str, Any] | None
    ) -> Statements:
        match = _BY_ID.search(cypher)
        if match is None or not params or "ids" not in params:
            raise EngineError(
                f"cannot mirror a statement addressing nodes by internal id: {cypher.strip()[:200]}"
            )
        node, item = match.groups()
        resolved = engine.execute(
            graph,
            f"UNWIND $ids AS {item} MATCH ({node}) WHERE id({node}) = {item} RETURN labels({node})[0], {node}.node_id",
            {"ids": params["ids"]},
            read_only=True,
        ).rows
        by_label: dict[str, list[str]] = {}
        for label, node_id in resolved:
            by_label.setdefault(label, []).append(node_id)
        out: Statements = []
        for label, node_ids in sorted(by_label.items()):
            keyed = f"MATCH ({node}:{_label(label)} {{node_id: {item}, workspace: $ws}}) WHERE true"
            text = cypher.replace(match.group(0), keyed)  # "WHERE true": an original "AND ..." follows
            out.append((text, {**params, "ids": MapFreeList(node_ids), "ws": workspace}))
        return out

    # -- schema and backfill --------------------------------------------------------------------------
    def ensure_schema(self, engine: GraphEngine, wait_s: float = 60.0) -> None:
        """Indexes and ``(node_id, workspace)`` unique constraints of the shared graph, operational
        before its first write (the writer's ``CREATE`` statements rely on them). Once per engine."""
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            for label in _UNIQUE:
                _create_index(engine, self.graph, label)
                try:
                    engine.command(
                        "GRAPH.CONSTRAINT", "CREATE", self.graph, "UNIQUE", "NODE", label, "PROPERTIES", 2,
                        "node_id", "workspace",
                    )  # fmt: skip
                except Exception as exc:  # exists already (or pending): both fine
                    log.debug("constraint on %s(%s): %s", self.graph, label, exc)
            deadline = time.monotonic() + wait_s
            while not self._constraints_operational(engine):
                if time.monotonic() > deadline:
                    raise EngineError(f"the unique constraints of {self.graph} did not become operational")
                time.sleep(0.01)
            self._ready = True

    def _constraints_operational(self, engine: GraphEngine) -> bool:
        rows = engine.execute(self.graph, "CALL db.constraints()", read_only=True).rows
        operational = {row[1] for row in rows if row[0] == "UNIQUE" and str(row[4]) == "OPERATIONAL"}
        return all(label in operational for label in _UNIQUE)

    def reset(self) -> None:
        """The engine restarted (it may have come back without the shared graph's schema)."""
        self._ready = False

    @property
    def complete_key(self) -> str:
        """Meta key set once the shared graph holds every workspace graph (after `backfill`)."""
        return f"{self.names.prefix}all_workspaces_graph"

    def backfill(self, engine: GraphEngine) -> int:
        """Make the shared graph hold every workspace graph: unless it was completed before (its
        meta key, in the engine beside the graphs), it is dropped and each workspace graph copied
        into it. Returns the nodes copied. Run before any write (the applier not started).
        ``engine`` sees every workspace graph (a `ShardedEngine` reads each on its server and
        writes the shared graph on the home)."""
        if engine.get_meta(self.complete_key) == COMPLETE_VERSION and self.graph in engine.graphs():
            self.ensure_schema(engine)
            return 0
        engine.delete_graph(self.graph)  # a copy cut short by a crash, or none at all
        self._ready = False
        self.ensure_schema(engine)
        graphs = engine.graphs()
        copied = 0
        for graph in graphs:
            workspace = self._workspace(graph)
            if workspace is not None:
                self._copy_indexes(engine, graph)
                started = time.monotonic()
                nodes = self._copy(engine, graph, workspace)
                log.info(
                    "all-workspaces graph: copied %d nodes of %r in %.1f s",
                    nodes,
                    workspace,
                    time.monotonic() - started,
                )
                copied += nodes
        engine.set_meta(self.complete_key, COMPLETE_VERSION)
        return copied

    def _copy_indexes(self, engine: GraphEngine, graph: str) -> None:
        """The range indexes of ``graph`` on the shared graph too (the copy's edge statements find
        their ends by them; later writes create them as they go)."""
        rows = engine.execute(
            graph,
            "CALL db.indexes() YIELD label, types, entitytype RETURN label, types, entitytype",
            read_only=True,
        ).rows
        for label, types, entity in rows:
            if entity != "NODE" or not isinstance(types, dict):
                continue
            for prop, kinds in types.items():
                if "RANGE" in kinds and "`" not in prop:
                    try:
                        engine.execute(self.graph, f"CREATE INDEX FOR (n:{_label(label)}) ON (n.`{prop}`)")
                    except EngineError as exc:
                        if "already indexed" not in str(exc).lower():
                            raise

    def _copy(self, engine: GraphEngine, graph: str, workspace: str) -> int:
        top = engine.execute(graph, "MATCH (n) RETURN max(id(n))", read_only=True).rows[0][0]
        if top is None:
            return 0
        copied = 0
        for low in range(0, top + 1, _PAGE):  # nodes first, then the edges between them
            page = {"lo": low, "hi": low + _PAGE}
            rows = engine.execute(
                graph,
                "MATCH (n) WHERE id(n) >= $lo AND id(n) < $hi RETURN labels(n), properties(n)",
                page,
                read_only=True,
            ).rows
            by_labels: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for labels, properties in rows:
                by_labels.setdefault(tuple(labels), []).append(properties)
            for labels, props in by_labels.items():
                extra = "".join(f":{_label(name)}" for name in labels[1:])
                # CREATE: the shared graph was emptied before the copy (its unique constraints would
                # refuse a second copy of a node all the same)
                text = f"UNWIND $rows AS r CREATE (n:{_label(labels[0])}{extra}) SET n = r"
                engine.execute(self.graph, text, {"rows": props})
                copied += len(props)
        for low in range(0, top + 1, _PAGE):
            page = {"lo": low, "hi": low + _PAGE}
            rows = engine.execute(
                graph,
                "MATCH (a)-[r]->(b) WHERE id(a) >= $lo AND id(a) < $hi "
                "RETURN labels(a)[0], a.node_id, type(r), properties(r), labels(b)[0], b.node_id",
                page,
                read_only=True,
            ).rows
            by_shape: dict[tuple[str, str, str], list[list[Any]]] = {}
            for source_label, source, kind, properties, target_label, target in rows:
                by_shape.setdefault((source_label, kind, target_label), []).append(
                    [source, properties, target]
                )
            for (source_label, kind, target_label), edges in by_shape.items():
                engine.execute(
                    self.graph,
                    f"UNWIND $rows AS r MATCH (a:{_label(source_label)} {{node_id: r[0], workspace: $ws}}) "
                    f"MATCH (b:{_label(target_label)} {{node_id: r[2], workspace: $ws}}) "
                    f"CREATE (a)-[e:{_label(kind)}]->(b) SET e = r[1]",
                    {"rows": edges, "ws": workspace},
                )
        return copied
