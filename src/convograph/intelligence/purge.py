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
The semantic layers (which fold across sessions) are never purged in place: with them the caller
always rebuilds. Not atomic: a failure half way leaves a graph only a rebuild repairs, so the
caller rebuilds after any failure (`GraphApplier`).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from convograph.intelligence.engine import GraphEngine, MapFreeList
from convograph.intelligence.layer1 import model_response_row

__all__ = ["purge_sessions"]

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
RETURN m.node_id, e.node_id, e.data
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
    for model_id, event_id, data_json in engine.execute(graph, _RESPONSES, base, read_only=True).rows:
        try:
            data = json.loads(data_json) if isinstance(data_json, str) else None
        except ValueError:
            data = None
        row = model_response_row(event_id, data) if isinstance(data, dict) else None
        if row is None:
            return False  # the edge exists, so the write read a row: this one cannot be undone
        sums = models.setdefault(model_id, [0, 0, 0, 0, 0])
        sums[0] += 1
        for i, count in enumerate(row[2:], start=1):
            sums[i] += count
    parents = _column(engine, graph, _PARENTS, base)
    for statement in (_DELETE_EVENTS, _DELETE_TOOL_CALLS, _DELETE_OWN_FORKS):
        engine.execute(graph, statement, base)
    candidates = MapFreeList(sorted({*session_ids, *parents}))
    engine.execute(graph, _DELETE_EMPTY_SESSIONS, {"ids": candidates, "ws": workspace})
    engine.execute(graph, _STUB_SESSIONS, base)  # the forgotten sessions still there are parents
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
    return True
