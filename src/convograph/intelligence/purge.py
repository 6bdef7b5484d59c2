"""Remove forgotten sessions from a workspace graph in place (layer 1 and its rollups).

The reference for what a forget leaves is a graph built from the journal without the sessions
(`GraphApplier` rebuilds exactly that, O(events of the workspace)). `purge_sessions` reaches the
same graph in O(data of the sessions + rollup rows they touched), so a forget in a big workspace
no longer holds ingest back for a whole replay:

- the sessions' ``Event`` and ``ToolCall`` nodes go (found through ``HAS_EVENT`` /
  ``HAS_TOOL_CALL``: layer 1 attaches every one of them to its own session), with the
  ``HAS_FORK`` edges their own ``session:fork`` events made;
- a forgotten ``Session`` that a remaining session still forks from stays as the bare node a
  child's fork event creates (``session_id``, ``status 'running'``, rank 0, no sub-label); one with
  nothing left goes, and so does a parent that only existed as such a stub of a forgotten child;
- rollups are made what a fresh build would give: ``Tool.calls`` / ``max_duration_ms`` and
  ``ParallelGroup.width`` recounted from the edges left (O(rows of that tool / group)),
  ``Model`` sums reduced by the forgotten responses (read back from their ``data``, as
  `writer.backfill_rollups` reads them); a rollup with nothing left goes.

It declines (returns False, having written nothing) where the in-place result could differ from a
fresh build: a parallel group whose ``session_id`` names a forgotten session but that has members
of another session, or a response whose stored ``data`` does not decode. The caller then rebuilds.
The semantic layers (which fold across sessions) are purged per component: `purge_component`
for a forget (everything of the component goes, and its records are written again), and
`purge_derived` when an event arrived out of order (only what the layers derived goes, layer 1
stays, and the layers fold the component's sessions again). Not atomic: a failure half way leaves a graph only a rebuild repairs, so the
caller rebuilds after any failure (`GraphApplier`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, NamedTuple

from convograph.intelligence.engine import GraphEngine, MapFreeList
from convograph.intelligence.layer1 import model_row

__all__ = [
    "SHARED_LABELS",
    "Component",
    "component_of",
    "purge_component",
    "purge_derived",
    "purge_forgotten",
    "purge_sessions",
]

_TOOLS_TOUCHED = """
UNWIND $sids AS sid
MATCH (:Session {node_id: sid, workspace: $ws})-[:HAS_TOOL_CALL]->(:ToolCall)-[:CALLS]->(x:Tool)
RETURN DISTINCT x.node_id
"""

_GROUPS_TOUCHED = """
UNWIND $sids AS sid
MATCH (:Session {node_id: sid, workspace: $ws})-[:HAS_TOOL_CALL]->(:ToolCall)<-[:HAS_MEMBER]-(g:ParallelGroup)
RETURN DISTINCT g.node_id
"""

_GROUPS_SHARED = """
UNWIND $groups AS id
MATCH (g:ParallelGroup {node_id: id, workspace: $ws})-[:HAS_MEMBER]->(m:ToolCall)
WHERE g.session_id IN $sids AND NOT m.session_id IN $sids
RETURN count(m)
"""

_RESPONSES = """
UNWIND $sids AS sid
MATCH (:Session {node_id: sid, workspace: $ws})-[:HAS_EVENT]->(e:Event)-[:BY_MODEL]->(m:Model)
RETURN m.node_id, e.node_id, e.data, e.event_name
"""

_PARENTS = """
UNWIND $sids AS sid
MATCH (p:Session)-[:HAS_FORK]->(:Session {node_id: sid, workspace: $ws})
RETURN DISTINCT p.node_id
"""

_DELETE_EVENTS = """
UNWIND $sids AS sid
MATCH (:Session {node_id: sid, workspace: $ws})-[:HAS_EVENT]->(e:Event)
DETACH DELETE e
"""

_DELETE_TOOL_CALLS = """
UNWIND $sids AS sid
MATCH (:Session {node_id: sid, workspace: $ws})-[:HAS_TOOL_CALL]->(t:ToolCall)
DETACH DELETE t
"""

_DELETE_OWN_FORKS = """
UNWIND $sids AS sid
MATCH (:Session)-[f:HAS_FORK]->(:Session {node_id: sid, workspace: $ws})
DELETE f
"""

_DELETE_EMPTY_SESSIONS = """
UNWIND $ids AS id
MATCH (s:Session {node_id: id, workspace: $ws})
WHERE NOT (s)-[:HAS_EVENT]->() AND NOT (s)-[:HAS_TOOL_CALL]->() AND NOT (s)-[:HAS_FORK]->()
DETACH DELETE s
"""

_STUB_SESSIONS = """
UNWIND $sids AS sid
MATCH (s:Session {node_id: sid, workspace: $ws})
SET s.session_id = sid, s.status = 'running', s.status_rank = 0,
    s.started_at_ms = null, s.started_at = null, s.last_updated_ms = null, s.last_updated = null,
    s.ended_at_ms = null, s.ended_at = null, s.parent_id = null, s.agent_name = null
REMOVE s:RootSession, s:ForkedSession
"""

_RECOUNT_TOOLS = """
UNWIND $ids AS id
MATCH (x:Tool {node_id: id, workspace: $ws})
OPTIONAL MATCH (t:ToolCall)-[:CALLS]->(x)
WITH x, count(t) AS calls, max(t.duration_ms) AS longest
SET x.calls = calls, x.max_duration_ms = longest
"""

_RECOUNT_GROUPS = """
UNWIND $ids AS id
MATCH (g:ParallelGroup {node_id: id, workspace: $ws})
OPTIONAL MATCH (g)-[:HAS_MEMBER]->(m:ToolCall)
WITH g, count(m) AS width
SET g.width = width
"""

_SUBTRACT_MODELS = """
UNWIND $rows AS r
MATCH (m:Model {node_id: r[0], workspace: $ws})
SET m.responses = m.responses - r[1],
    m.input_tokens = m.input_tokens - r[2],
    m.output_tokens = m.output_tokens - r[3],
    m.cache_read_input_tokens = m.cache_read_input_tokens - r[4],
    m.cache_creation_input_tokens = m.cache_creation_input_tokens - r[5]
"""

_DELETE_EMPTY_ROLLUPS = {
    label: f"""
UNWIND $ids AS id
MATCH (x:{label} {{node_id: id, workspace: $ws}})
WHERE x.{count} = 0
DETACH DELETE x
"""
    for label, count in (("Tool", "calls"), ("ParallelGroup", "width"), ("Model", "responses"))
}


def _column(engine: GraphEngine, graph: str, query: str, params: dict[str, Any]) -> list[Any]:
    return [row[0] for row in engine.execute(graph, query, params, read_only=True).rows]


def _add_responses(models: dict[str, list[int]], rows: list[list[Any]]) -> bool:
    """Add ``[model node id, event node id, stored data, event name]`` rows to per-model
    ``[responses, input, output, cache read, cache creation]`` sums; False when a row's data does
    not decode (the ``BY_MODEL`` edge exists, so the write read a row there: this one cannot be
    undone)."""
    for model_id, event_id, data_json, event in rows:
        try:
            data = json.loads(data_json) if isinstance(data_json, str) else None
        except ValueError:
            data = None
        row = model_row(event_id, str(event), data) if isinstance(data, dict) else None
        if row is None:
            return False
        sums = models.setdefault(model_id, [0, 0, 0, 0, 0])
        sums[0] += 1
        for i, count in enumerate(row[2:], start=1):
            sums[i] += count
    return True


def purge_sessions(engine: GraphEngine, graph: str, workspace: str, session_ids: Collection[str]) -> bool:
    """Remove ``session_ids`` from ``graph`` in place (see the module docstring); False when it
    declines, before any write. O(the sessions' nodes + the rollup rows they touched)."""
    sids = MapFreeList(sorted(session_ids))
    base = {"sids": sids, "ws": workspace}
    tools = _column(engine, graph, _TOOLS_TOUCHED, base)
    groups = _column(engine, graph, _GROUPS_TOUCHED, base)
    if groups and _column(engine, graph, _GROUPS_SHARED, {**base, "groups": MapFreeList(groups)})[0]:
        return False
    models: dict[str, list[int]] = {}
    if not _add_responses(models, engine.execute(graph, _RESPONSES, base, read_only=True).rows):
        return False
    parents = _column(engine, graph, _PARENTS, base)
    for statement in (_DELETE_EVENTS, _DELETE_TOOL_CALLS, _DELETE_OWN_FORKS):
        engine.execute(graph, statement, base)
    candidates = MapFreeList(sorted({*session_ids, *parents}))
    engine.execute(graph, _DELETE_EMPTY_SESSIONS, {"ids": candidates, "ws": workspace})
    engine.execute(graph, _STUB_SESSIONS, base)  # the forgotten sessions still there are parents
    _settle_rollups(engine, graph, workspace, tools, groups, models)
    return True


def _settle_rollups(
    engine: GraphEngine,
    graph: str,
    workspace: str,
    tools: list[str],
    groups: list[str],
    models: dict[str, list[int]],
) -> None:
    """After a deletion: recount these `Tool` / `ParallelGroup` rows from the edges left, reduce
    the `Model` sums by the deleted responses (`_add_responses`), drop the rows left empty."""
    if tools:
        engine.execute(graph, _RECOUNT_TOOLS, {"ids": MapFreeList(tools), "ws": workspace})
    if groups:
        engine.execute(graph, _RECOUNT_GROUPS, {"ids": MapFreeList(groups), "ws": workspace})
    if models:
        rows = MapFreeList([[model_id, *sums] for model_id, sums in sorted(models.items())])
        engine.execute(graph, _SUBTRACT_MODELS, {"rows": rows, "ws": workspace})
    for label, ids in (("Tool", tools), ("ParallelGroup", groups), ("Model", sorted(models))):
        if ids:
            engine.execute(graph, _DELETE_EMPTY_ROLLUPS[label], {"ids": MapFreeList(ids), "ws": workspace})


# -- with the semantic layers: the sessions' component ----------------------------------------------

SHARED_LABELS: Final = frozenset({"Tool", "Model", "Agent", "Recipe"})
"""Nodes many unrelated sessions write (workspace rollups, agents, recipes): a component's
traversal stops at them; they are recounted or dropped when nothing names them any more."""

_SESSIONS_BY = """
UNWIND $sids AS sid
MATCH (s:Session {{{key}: sid, workspace: $ws}})
RETURN id(s), s.node_id, s.parent_id
"""
_SESSION_IDS = _SESSIONS_BY.format(key="node_id")
_CHILD_SESSIONS = _SESSIONS_BY.format(key="parent_id")  # sessions naming these as their parent

_NEIGHBOURS = """
UNWIND $ids AS i
MATCH (a) WHERE id(a) = i
MATCH (a)-[]-(b)
RETURN DISTINCT id(b), labels(b), b.node_id, b.parent_id
"""

_RESPONSES_OF = """
UNWIND $ids AS i
MATCH (e) WHERE id(e) = i
MATCH (e)-[:BY_MODEL]->(m:Model)
RETURN m.node_id, e.node_id, e.data, e.event_name
"""

_DELETE_BY_ID = """
UNWIND $ids AS i
MATCH (n) WHERE id(n) = i
DETACH DELETE n
"""

_DELETE_UNNAMED = """
UNWIND $ids AS i
MATCH (n) WHERE id(n) = i AND NOT (n)--()
DELETE n
"""

_CHUNK_IDS = 5000


class Component(NamedTuple):
    """What `component_of` found: the sessions (ids), every node of theirs (internal ids, shared
    nodes excepted) and the shared nodes they reach, by label (internal id -> node_id)."""

    sessions: set[str]
    nodes: set[int]
    shared: dict[str, dict[int, str]]


def component_of(engine: GraphEngine, graph: str, workspace: str, session_ids: Collection[str]) -> Component:
    """The sessions whose graph data is entangled with ``session_ids`` and all their nodes: a
    traversal over every edge (stopping at `SHARED_LABELS`) plus the ``parent_id`` links a
    session keeps as a property, to a fixpoint. Any write a session's events make lands on a node
    connected to one of its own (every derived node is ``SOURCED_FROM`` its events or hangs off
    its session), so nothing outside the component was written by events of the component, and
    nothing inside by events outside it. O(nodes + edges of the component) in round trips of
    one hop each."""
    sessions: set[str] = set()
    nodes: set[int] = set()
    shared: dict[str, dict[int, str]] = {label: {} for label in SHARED_LABELS}
    frontier: list[int] = []
    pending_parents: set[str] = set()

    def add_session(internal: int, node_id: str, parent_id: Any) -> None:
        if internal in nodes:
            return
        nodes.add(internal)
        frontier.append(internal)
        sessions.add(node_id)
        if isinstance(parent_id, str) and parent_id not in sessions:
            pending_parents.add(parent_id)

    rows = engine.execute(
        graph, _SESSION_IDS, {"sids": MapFreeList(sorted(session_ids)), "ws": workspace}, read_only=True
    ).rows
    new_sessions = [node_id for _, node_id, _ in rows]
    for internal, node_id, parent_id in rows:
        add_session(internal, node_id, parent_id)
    while frontier or pending_parents or new_sessions:
        step, frontier = frontier, []
        for start in range(0, len(step), _CHUNK_IDS):
            params = {"ids": MapFreeList(step[start : start + _CHUNK_IDS])}
            for internal, labels, node_id, parent_id in engine.execute(
                graph, _NEIGHBOURS, params, read_only=True
            ).rows:
                if internal in nodes:
                    continue
                label = next((name for name in labels if name in SHARED_LABELS), None)
                if label is not None:
                    shared[label][internal] = node_id
                elif "Session" in labels:
                    new_sessions.append(node_id)
                    add_session(internal, node_id, parent_id)
                else:
                    nodes.add(internal)
                    frontier.append(internal)
        # the parent_id links (a session names its parent without an edge, and is named so)
        links = {"ws": workspace}
        if pending_parents:
            parents, pending_parents = sorted(pending_parents - sessions), set()
            for internal, node_id, parent_id in engine.execute(
                graph, _SESSION_IDS, {**links, "sids": MapFreeList(parents)}, read_only=True
            ).rows:
                new_sessions.append(node_id)
                add_session(internal, node_id, parent_id)
        if new_sessions:
            named, new_sessions = sorted(set(new_sessions)), []
            for internal, node_id, parent_id in engine.execute(
                graph, _CHILD_SESSIONS, {**links, "sids": MapFreeList(named)}, read_only=True
            ).rows:
                if internal not in nodes:
                    new_sessions.append(node_id)
                    add_session(internal, node_id, parent_id)
    return Component(sessions, nodes, shared)


_DELETE_LABELLED = """
UNWIND $ids AS i
MATCH (n) WHERE id(n) = i AND any(label IN labels(n) WHERE label IN $labels)
DETACH DELETE n
"""

_DELETE_EDGES_FROM = """
UNWIND $ids AS i
MATCH (n) WHERE id(n) = i
MATCH (n)-[r]->()
WHERE type(r) IN $types
DELETE r
"""

_CLEAR_PROPERTIES = """
UNWIND $ids AS i
MATCH (n:{label}) WHERE id(n) = i
SET {assignments}
"""


def purge_derived(
    engine: GraphEngine,
    graph: str,
    workspace: str,
    component: Component,
    *,
    labels: Collection[str],
    edge_types: Collection[str],
    properties: Mapping[str, Collection[str]],
) -> None:
    """Delete what a fold derived over ``component``, so that folding its sessions again writes
    exactly what an in-order fold writes: the nodes with one of ``labels`` (their edges go with
    them), the ``edge_types`` edges leaving its other nodes, the ``properties`` (label -> names)
    a fold sets on them, and the shared ``Agent`` / ``Recipe`` nodes nothing names any more.
    Layer-1 nodes and their own edges stay. O(component)."""
    ids = sorted(component.nodes)
    for start in range(0, len(ids), _CHUNK_IDS):
        chunk = MapFreeList(ids[start : start + _CHUNK_IDS])
        engine.execute(graph, _DELETE_LABELLED, {"ids": chunk, "labels": MapFreeList(sorted(labels))})
        if edge_types:
            engine.execute(
                graph, _DELETE_EDGES_FROM, {"ids": chunk, "types": MapFreeList(sorted(edge_types))}
            )
        for label, names in properties.items():
            assignments = ", ".join(f"n.`{name}` = null" for name in sorted(names))
            engine.execute(
                graph, _CLEAR_PROPERTIES.format(label=label, assignments=assignments), {"ids": chunk}
            )
    unnamed = sorted({*component.shared["Agent"], *component.shared["Recipe"]})
    if unnamed:
        engine.execute(graph, _DELETE_UNNAMED, {"ids": MapFreeList(unnamed)})


def purge_component(engine: GraphEngine, graph: str, workspace: str, component: Component) -> bool:
    """Delete every node of ``component`` and make the shared nodes it reached what the rest of
    the graph makes them (`Tool` recounted, `Model` sums reduced by the component's responses, an
    `Agent` / `Recipe` / rollup nothing names any more dropped). The caller then replays the
    journal records of the component's remaining sessions. False, before any write, where a
    response's stored ``data`` does not decode. O(component)."""
    ids = sorted(component.nodes)
    models: dict[str, list[int]] = {}
    for start in range(0, len(ids), _CHUNK_IDS):
        params = {"ids": MapFreeList(ids[start : start + _CHUNK_IDS])}
        if not _add_responses(models, engine.execute(graph, _RESPONSES_OF, params, read_only=True).rows):
            return False
    for start in range(0, len(ids), _CHUNK_IDS):
        engine.execute(graph, _DELETE_BY_ID, {"ids": MapFreeList(ids[start : start + _CHUNK_IDS])})
    # parallel groups are per session: the component's went with it
    _settle_rollups(engine, graph, workspace, sorted(component.shared["Tool"].values()), [], models)
    unnamed = sorted({*component.shared["Agent"], *component.shared["Recipe"]})
    if unnamed:
        engine.execute(graph, _DELETE_UNNAMED, {"ids": MapFreeList(unnamed)})
    return True


def purge_forgotten(
    engine: GraphEngine,
    graph: str,
    workspace: str,
    session_ids: Collection[str],
    layered: bool,
    forget_folds: Callable[[str, Collection[str]], None],
) -> Collection[str] | None:
    """Remove forgotten ``session_ids`` from ``graph`` in place: the sessions whose records are
    to be written again, or None when the purge declined (the caller rebuilds). Layer 1 only
    (``layered`` False): `purge_sessions`, and the sessions themselves are written again (events
    of their ids that arrived after the forget). With the semantic layers: the sessions' whole
    component (`component_of`) goes, ``forget_folds(workspace, sessions)`` drops the layers' fold
    caches, and every session of the component is written again, O(component)."""
    if graph not in engine.graphs():
        return session_ids  # nothing of the workspace was applied, so nothing to remove
    if not layered:
        return session_ids if purge_sessions(engine, graph, workspace, session_ids) else None
    component = component_of(engine, graph, workspace, session_ids)
    if not purge_component(engine, graph, workspace, component):
        return None
    replay = {*component.sessions, *session_ids}
    forget_folds(workspace, replay)
    return replay
