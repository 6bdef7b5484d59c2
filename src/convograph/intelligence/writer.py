"""Graph writes: schema first, then every batch as a handful of ``UNWIND`` statements.

One workspace = one FalkorDB graph (``{prefix}{workspace}``): isolation is structural, indexes
stay small, and every node still carries ``workspace`` with ``{node_id, workspace}`` as its MERGE
key (seed 004). `ensure_schema` creates range indexes and ``node_id`` unique
constraints (per-workspace graph, so this is ``{node_id, workspace}`` uniqueness) for ``Session``,
``Event``, ``ToolCall`` and the rollups ``Tool`` and ``ParallelGroup``, plus the query-side indexes the example questions need, before the
first write to a graph.

`write_batch` issues, per workspace and per `CHUNK_ROWS` rows, at most: 1 Session statement,
2 Session label statements, 1 Event statement per distinct event name (labels are static
Cypher), 1 ToolCall statement, 2 workspace-rollup statements (`Tool`, `ParallelGroup`: see
`rollup_statements`) and 1 HAS_FORK statement. Never one statement per node; rows are
chunked (`CHUNK_ROWS`) to bound statement size. Event statements come in two forms: ``CREATE``
(new events, the fast path while the unique constraint guards it) and the idempotent ``MERGE``
form (`write_statements` falls back to it when a ``CREATE`` meets an existing node).
"""

from __future__ import annotations

import contextlib
import json
import logging
import operator
import time
from collections.abc import Iterator, Sequence
from types import NoneType
from typing import Any, NamedTuple

from convograph.intelligence.engine import (
    EngineError,
    GraphEngine,
    MapFreeList,
    NormalFloatList,
)
from convograph.intelligence.labels import label_clause
from convograph.intelligence.layer1 import WorkspaceBatch, model_response_row

__all__ = [
    "CHUNK_ROWS",
    "ROLLUPS_VERSION",
    "GraphNames",
    "Statement",
    "backfill_rollups",
    "backfill_rollups_once",
    "batch_statements",
    "ensure_schema",
    "rename_collided_events",
    "render_statements",
    "rollup_statements",
    "write_batch",
    "write_statements",
]

CHUNK_ROWS = 5000
ROLLUPS_MARK = "__rollups__:"
"""Meta key prefix (+ graph key): the rollup version a graph was backfilled to."""
ROLLUPS_VERSION = "2"
"""Bumped when a rollup kind (or a source of rows: conversation ToolCalls, version 2) is added,
so graphs written before it are backfilled once more."""

INTERNED_EVENT_KEYS = frozenset(
    {
        "event_name",
        "model",
        "provider",
        "tool_name",
        "agent",
        "agent_name",
        "skill_name",
        "recipe_name",
        "created_by",
    }
)
"""Event properties with few distinct values, stored with FalkorDB's ``intern()``: one shared copy
per distinct string instead of one allocation per node (as ``workspace`` and ``ToolCall.tool_name``
are). A whole-workspace scan that reads them then touches one hot string instead of a cold one per
node (docs/intelligence.md, "Interned strings")."""

log = logging.getLogger(__name__)

_SESSIONS = """
UNWIND $rows AS r
MERGE (s:Session {node_id: r.id, workspace: intern($ws)})
ON CREATE SET s.session_id = r.id, s.status = 'running', s.status_rank = 0
WITH s, r,
  (r.start IS NOT NULL AND (s.started_at_ms IS NULL OR r.start < s.started_at_ms)) AS earlier,
  (r.last IS NOT NULL AND (s.last_updated_ms IS NULL OR r.last > s.last_updated_ms)) AS later,
  (r.end IS NOT NULL AND (s.ended_at_ms IS NULL OR r.end > s.ended_at_ms)) AS ended,
  (r.rank > s.status_rank) AS promoted
SET s.started_at_ms = CASE WHEN earlier THEN r.start ELSE s.started_at_ms END,
    s.started_at = CASE WHEN earlier THEN r.start_iso ELSE s.started_at END,
    s.last_updated_ms = CASE WHEN later THEN r.last ELSE s.last_updated_ms END,
    s.last_updated = CASE WHEN later THEN r.last_iso ELSE s.last_updated END,
    s.ended_at_ms = CASE WHEN ended THEN r.end ELSE s.ended_at_ms END,
    s.ended_at = CASE WHEN ended THEN r.end_iso ELSE s.ended_at END,
    s.status_rank = CASE WHEN promoted THEN r.rank ELSE s.status_rank END,
    s.status = CASE WHEN promoted THEN r.status ELSE s.status END,
    s.parent_id = coalesce(r.fork_parent, s.parent_id, r.start_parent),
    s.agent_name = coalesce(r.agent, s.agent_name)
"""

_ROOT = """
UNWIND $ids AS id
MATCH (s:Session {node_id: id, workspace: $ws}) WHERE NOT s:ForkedSession
SET s:RootSession
"""

_FORKED = """
UNWIND $ids AS id
MATCH (s:Session {node_id: id, workspace: $ws})
SET s:ForkedSession
REMOVE s:RootSession
"""

_EVENTS = """
UNWIND $rows AS row
MERGE (e:Event {{node_id: row[0], workspace: intern($ws)}})
ON CREATE SET {assignments}
WITH e, row
MERGE (s:Session {{node_id: row[1], workspace: intern($ws)}})
ON CREATE SET s.session_id = row[1], s.status = 'running', s.status_rank = 0
MERGE (s)-[:HAS_EVENT]->(e)
"""


_EVENTS_NEW = """
UNWIND $rows AS row
MERGE (s:Session {{node_id: row[1], workspace: intern($ws)}})
ON CREATE SET s.session_id = row[1], s.status = 'running', s.status_rank = 0
CREATE (s)-[:HAS_EVENT]->(e:Event{labels} {{{properties}}})
"""
"""`_EVENTS` for events the graph does not hold yet: one ``CREATE`` pattern with the properties
inline (measured: ~45 % less FalkorDB CPU for the Event statements than ``MERGE`` + ``ON CREATE
SET`` + ``MERGE`` of the edge, 21 → 11 µs per event). Only run while the ``Event(node_id)``
unique constraint is operational: a row whose node exists makes FalkorDB refuse (and roll back)
the whole statement, and `write_statements` then redoes the batch in the ``MERGE`` form."""

# The ids are SET on every write, not ON CREATE: an edge of the semantic layers (a delegation's
# TRIGGERED, a PARALLEL_EXECUTION) may have created the node first when a call's tool:pre never
# came (e.g. forgotten) or comes in a later batch; the values are functions of the node id.
_TOOL_CALLS = """
UNWIND $rows AS r
MERGE (t:ToolCall {node_id: r.id, workspace: intern($ws)})
SET t.tool_call_id = r.tcid, t.session_id = r.sid
WITH t, r,
  (r.start IS NOT NULL AND (t.started_at_ms IS NULL OR r.start < t.started_at_ms)) AS earlier,
  (r.end IS NOT NULL AND (t.ended_at_ms IS NULL OR r.end > t.ended_at_ms)) AS later
WITH t, r, earlier, later,
  CASE WHEN earlier THEN r.start ELSE t.started_at_ms END AS start_ms,
  CASE WHEN later THEN r.end ELSE t.ended_at_ms END AS end_ms
SET t.tool_name = intern(coalesce(r.name, t.tool_name)),
    t.parallel_group_id = coalesce(r.group, t.parallel_group_id),
    t.started_at_ms = start_ms,
    t.started_at = CASE WHEN earlier THEN r.start_iso ELSE t.started_at END,
    t.ended_at_ms = end_ms,
    t.ended_at = CASE WHEN later THEN r.end_iso ELSE t.ended_at END,
    t.duration_ms = CASE WHEN start_ms IS NOT NULL AND end_ms IS NOT NULL THEN end_ms - start_ms ELSE null END,
    t.result_success = CASE WHEN r.success IS NULL THEN t.result_success
                            WHEN t.result_success IS NULL THEN r.success
                            ELSE t.result_success AND r.success END,
    t.result_error = CASE WHEN r.error IS NULL THEN t.result_error
                          WHEN t.result_error IS NULL OR r.error < t.result_error THEN r.error
                          ELSE t.result_error END,
    t.result_output_bytes = CASE WHEN r.out_bytes IS NULL THEN t.result_output_bytes
                                 WHEN t.result_output_bytes IS NULL OR r.out_bytes > t.result_output_bytes
                                 THEN r.out_bytes ELSE t.result_output_bytes END
WITH t, r
MERGE (s:Session {node_id: r.sid, workspace: intern($ws)})
ON CREATE SET s.session_id = r.sid, s.status = 'running', s.status_rank = 0
MERGE (s)-[:HAS_TOOL_CALL]->(t)
WITH t, r
UNWIND r.events AS eid
MATCH (e:Event {node_id: eid, workspace: $ws})
MERGE (t)-[:HAS_EVENT]->(e)
"""

_TOOLS = """
UNWIND $ids AS id
MATCH (t:ToolCall {node_id: id, workspace: $ws})
WHERE t.tool_name IS NOT NULL
MERGE (s:Tool {node_id: 'tool:' + t.tool_name, workspace: intern($ws)})
ON CREATE SET s.tool_name = intern(t.tool_name), s.calls = 0
MERGE (t)-[c:CALLS]->(s)
ON CREATE SET c.counting = true
WITH s, collect(c) AS edges, max(t.duration_ms) AS longest
WITH s, longest, [e IN edges WHERE e.counting] AS fresh
FOREACH (e IN fresh | SET e.counting = null)
SET s.calls = s.calls + size(fresh),
    s.max_duration_ms = CASE WHEN longest IS NOT NULL AND (s.max_duration_ms IS NULL OR longest > s.max_duration_ms)
                             THEN longest ELSE s.max_duration_ms END
"""
"""Workspace rollup per tool name (`ToolCall-[:CALLS]->Tool`): ``calls`` counts the ``CALLS`` edges
(incremented only for an edge this statement created, so redelivery and replays count each call
once) and ``max_duration_ms`` is the longest call's duration (a call's duration never shrinks:
its start is the earliest ``tool:pre``, its end the latest outcome). Runs after `_TOOL_CALLS` in
the same pipeline, reading what that statement stored."""

_PARALLEL_GROUPS = """
UNWIND $ids AS id
MATCH (t:ToolCall {node_id: id, workspace: $ws})
WHERE t.parallel_group_id IS NOT NULL
MERGE (g:ParallelGroup {node_id: 'parallel_group:' + t.parallel_group_id, workspace: intern($ws)})
ON CREATE SET g.parallel_group_id = t.parallel_group_id, g.session_id = t.session_id
MERGE (g)-[:HAS_MEMBER]->(t)
WITH DISTINCT g
MATCH (g)-[:HAS_MEMBER]->(m:ToolCall)
WITH g, count(m) AS width
SET g.width = width
"""
"""Workspace rollup per parallel group: ``width`` is recounted from the ``HAS_MEMBER`` edges of the
groups this batch touched (O(group width) each), so it is exact whatever the order or repetition."""

_MODELS = """
UNWIND $rows AS r
MATCH (e:Event {node_id: r[0], workspace: $ws})
MERGE (m:Model {node_id: 'model:' + r[1], workspace: intern($ws)})
ON CREATE SET m.model = intern(r[1]), m.responses = 0, m.input_tokens = 0, m.output_tokens = 0,
              m.cache_read_input_tokens = 0, m.cache_creation_input_tokens = 0
MERGE (e)-[c:BY_MODEL]->(m)
ON CREATE SET c.counting = true
WITH m, collect(c) AS edges, collect(CASE WHEN c.counting THEN r END) AS fresh
FOREACH (e IN edges | SET e.counting = null)
SET m.responses = m.responses + size(fresh),
    m.input_tokens = m.input_tokens + reduce(n = 0, x IN fresh | n + x[2]),
    m.output_tokens = m.output_tokens + reduce(n = 0, x IN fresh | n + x[3]),
    m.cache_read_input_tokens = m.cache_read_input_tokens + reduce(n = 0, x IN fresh | n + x[4]),
    m.cache_creation_input_tokens = m.cache_creation_input_tokens + reduce(n = 0, x IN fresh | n + x[5])
"""
"""Workspace rollup per model (`LlmResponseEvent-[:BY_MODEL]->Model`): response count and token
sums, added only for a ``BY_MODEL`` edge this statement created (rows are unique per event), so
redelivery and replays add nothing. Runs after the Event statements of the same pipeline."""

_FORKS = """
UNWIND $rows AS r
MERGE (p:Session {node_id: r.parent, workspace: intern($ws)})
ON CREATE SET p.session_id = r.parent, p.status = 'running', p.status_rank = 0
MERGE (c:Session {node_id: r.child, workspace: intern($ws)})
ON CREATE SET c.session_id = r.child, c.status = 'running', c.status_rank = 0
MERGE (p)-[f:HAS_FORK]->(c)
SET f.occurred_at = r.at
"""

_RENAME = """
UNWIND $groups AS g
MATCH (e:Event {node_id: g.base, workspace: $ws})
WHERE e.fingerprint <> g.winner
SET e.node_id = g.base + '__' + substring(e.fingerprint, 0, 12)
"""

# One graph per workspace, so ``workspace`` is constant inside a graph: a unique constraint on
# ``node_id`` there is the seed's ``{node_id, workspace}`` uniqueness, and indexing ``workspace``
# (one value for every node) would only slow writes down.
_UNIQUE = ("Session", "Event", "ToolCall", "Tool", "ParallelGroup", "Model")
_INDEXES: tuple[tuple[str, str], ...] = (
    ("Session", "node_id"),
    ("Session", "parent_id"),
    ("Event", "node_id"),
    ("ToolCall", "node_id"),
    ("ToolCall", "session_id"),
    ("ToolCall", "tool_name"),
    ("ToolCall", "duration_ms"),  # "slowest calls" above a threshold read from the Tool rollup
    ("Tool", "node_id"),
    ("ParallelGroup", "node_id"),
    ("Model", "node_id"),
)


class GraphNames:
    """Maps workspaces to graph keys (``{prefix}{workspace}``) and back."""

    def __init__(self, prefix: str = "convograph_ci:") -> None:
        self.prefix = prefix

    def graph(self, workspace: str) -> str:
        return self.prefix + workspace

    def workspace(self, graph: str) -> str | None:
        if graph in (self.empty_graph, self.all_graph):
            return None
        return graph[len(self.prefix) :] if graph.startswith(self.prefix) else None

    @property
    def empty_graph(self) -> str:
        """A graph that stays empty: queries on a workspace with no data run here (same errors,
        same columns, no rows), because the engine refuses read-only queries on missing keys."""
        return f"__empty__{self.prefix}"

    @property
    def all_graph(self) -> str:
        """The graph holding every workspace (`convograph.intelligence.union`)."""
        return f"__all__{self.prefix}"


def _positional(statement: str, rows: list[dict[str, Any]]) -> tuple[str, MapFreeList]:
    """Ship rows as arrays (cheap to encode) and rebuild ``r`` as a map inside the statement.
    Row values are scalars or lists of scalars, never maps."""
    fields = list(rows[0])
    projection = "UNWIND $rows AS row\nWITH row, {" + ", ".join(
        f"{f}: row[{i}]" for i, f in enumerate(fields)
    )
    projection += "} AS r\n"
    return statement.replace("UNWIND $rows AS r\n", projection, 1), MapFreeList(
        [tuple(row.values()) for row in rows]
    )


def _safe_key(key: str) -> str:
    if not key or "`" in key:
        raise ValueError(f"property name {key!r} cannot be written")
    return f"`{key}`"


def _interned(key: str, column: Iterator[Any], value: str) -> str:
    """``value`` wrapped in ``intern()`` when ``key`` is in `INTERNED_EVENT_KEYS` and every value
    of its ``column`` is a string or missing (None; ``intern`` takes strings only). The check
    looks at the set of the column's types, not at each value through a generator."""
    if key in INTERNED_EVENT_KEYS and all(
        kind is NoneType or issubclass(kind, str) for kind in set(map(type, column))
    ):
        return f"intern({value})"
    return value


def rollup_statements(workspace: str, tool_call_ids: Sequence[str]) -> list[Statement]:
    """The workspace rollups (`_TOOLS`, `_PARALLEL_GROUPS`) of these ToolCalls, which must be
    written already. Idempotent: also how `backfill_rollups` fills a graph written before them."""
    out: list[Statement] = []
    for chunk in _chunks(tool_call_ids):
        params = {"ids": MapFreeList(chunk), "ws": workspace}
        out.append(Statement(_TOOLS, params))
        out.append(Statement(_PARALLEL_GROUPS, params))
    return out


def backfill_rollups(engine: GraphEngine, graph: str, workspace: str) -> int:
    """Roll up what a graph written before the rollups holds: ToolCalls without a ``CALLS`` edge and
    ``llm:response`` Events without a ``BY_MODEL`` edge (their usage read back from the stored
    ``data``); returns how many nodes were rolled up. One label scan each, then `CHUNK_ROWS` per
    statement. Calls without a tool name and responses without a model stay unrolled (and are
    scanned again next time)."""
    rows = engine.execute(
        graph,
        "MATCH (t:ToolCall) WHERE t.tool_name IS NOT NULL AND NOT (t)-[:CALLS]->(:Tool) RETURN t.node_id",
        read_only=True,
    ).rows
    ids = [row[0] for row in rows]
    statements = rollup_statements(workspace, ids)
    responses = engine.execute(
        graph,
        "MATCH (e:LlmResponseEvent) WHERE e.event_name = 'llm:response' AND e.model IS NOT NULL "
        "AND NOT (e)-[:BY_MODEL]->(:Model) RETURN e.node_id, e.data",
        read_only=True,
    ).rows
    model_rows = []
    for node_id, data_json in responses:
        try:
            data = json.loads(data_json) if isinstance(data_json, str) else None
        except ValueError:
            data = None
        row = model_response_row(node_id, data) if isinstance(data, dict) else None
        if row is not None:
            model_rows.append(row)
    for chunk in _chunks(model_rows):
        statements.append(Statement(_MODELS, {"rows": MapFreeList(chunk), "ws": workspace}))
    _run(engine, graph, [(text, params) for text, params, _ in statements])
    return len(ids) + len(model_rows)


def backfill_rollups_once(engine: GraphEngine, graph: str, workspace: str) -> None:
    """`backfill_rollups` of ``graph``, once: a meta key records that it ran for
    `ROLLUPS_VERSION`, so later starts skip the two label scans (~3 s on a 1M-event graph).
    Writes keep the rollups current after that."""
    mark = f"{ROLLUPS_MARK}{graph}"
    if engine.get_meta(mark) == ROLLUPS_VERSION:
        return
    rolled = backfill_rollups(engine, graph, workspace)
    if rolled:
        log.info("rolled up %d tool calls and LLM responses of %s written before the rollups", rolled, graph)
    engine.set_meta(mark, ROLLUPS_VERSION)


def _chunks(rows: Sequence[Any], size: int = CHUNK_ROWS) -> Iterator[Sequence[Any]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def ensure_schema(engine: GraphEngine, graph: str, *, wait_s: float = 5.0) -> bool:
    """Create indexes and unique constraints on ``graph`` (idempotent; 'already indexed' is fine).

    Returns True when the ``Event(node_id)`` unique constraint is operational (waiting up to
    ``wait_s`` for FalkorDB to build it): only then may Events be written with ``CREATE``."""
    for label, prop in _INDEXES:
        try:
            engine.execute(graph, f"CREATE INDEX FOR (n:{label}) ON (n.{prop})")
        except EngineError as exc:
            if "already indexed" not in str(exc).lower():
                raise
    for label in _UNIQUE:
        with contextlib.suppress(Exception):  # exists already (or pending): both fine
            engine.command(
                "GRAPH.CONSTRAINT", "CREATE", graph, "UNIQUE", "NODE", label, "PROPERTIES", 1, "node_id"
            )
    deadline = time.monotonic() + wait_s
    while True:
        status = _event_constraint_status(engine, graph)
        if status == "OPERATIONAL":
            return True
        if status != "UNDER CONSTRUCTION" or time.monotonic() > deadline:
            log.warning("Event(node_id) unique constraint of %s is %s: Events are MERGEd", graph, status)
            return False
        time.sleep(0.01)


def _event_constraint_status(engine: GraphEngine, graph: str) -> str | None:
    """Status of the ``Event(node_id)`` unique constraint (``OPERATIONAL``, ``UNDER CONSTRUCTION``,
    ``FAILED``) or None when there is none."""
    rows = engine.execute(graph, "CALL db.constraints()", read_only=True).rows
    for row in rows:
        kind, label, props, entity, status = row[:5]
        if not isinstance(props, list):  # the raw reply's text form "[node_id]"
            props = str(props).strip("[]").split(", ")
        if (kind, label, entity, props) == ("UNIQUE", "Event", "NODE", ["node_id"]):
            return str(status)
    return None


def rename_collided_events(
    engine: GraphEngine, graph: str, workspace: str, groups: list[dict[str, str]]
) -> None:
    """Move a bare seed-format Event id off a node that lost its collision group (see ingest)."""
    if groups:
        engine.execute(graph, _RENAME, {"groups": groups, "ws": workspace})


class Statement(NamedTuple):
    """One write statement: ``text`` with ``params`` (``None`` once `render_statements` folded
    them into the text). ``merge_text``, when set, is the idempotent ``MERGE`` form of a
    ``CREATE`` statement (same parameters): it runs instead when the graph may hold the nodes."""

    text: str
    params: dict[str, Any] | None
    merge_text: str | None = None


def write_batch(engine: GraphEngine, graph: str, batch: WorkspaceBatch) -> int:
    """Write one workspace's rows in one pipelined round trip; returns the number of statements."""
    statements = batch_statements(batch)
    write_statements(engine, graph, statements)
    return len(statements)


def render_statements(engine: GraphEngine, statements: list[Statement]) -> list[Statement]:
    """Fold the parameters into the statement text now, when the engine can (``render``), so the
    applier's planner thread does this O(size) encoding while the previous batch is written.
    The parameters are encoded once; a ``merge_text`` gets the same header."""
    render = getattr(engine, "render", None)
    if render is None:
        return statements
    out = []
    for text, params, merge_text in statements:
        header = render("", params)  # the parameter header alone (``CYPHER k=v ... ``)
        out.append(Statement(header + text, None, None if merge_text is None else header + merge_text))
    return out


def write_statements(
    engine: GraphEngine, graph: str, statements: list[Statement], *, create: bool = False
) -> None:
    """Run ``statements`` in order, in one pipelined round trip when the engine offers it.

    With ``create`` (the graph's Event unique constraint is operational), ``CREATE`` statements
    run as such; if any statement fails (an Event already exists: a replay after a crash, a lost
    cursor, a re-applied batch; FalkorDB rolled that statement back), the whole list runs again
    in its ``MERGE`` form, which is idempotent, so the result is the same graph. Without
    ``create`` the ``MERGE`` forms run directly."""
    if not create or not any(s.merge_text is not None for s in statements):
        _run(
            engine, graph, [(s.text if s.merge_text is None else s.merge_text, s.params) for s in statements]
        )
        return
    try:
        _run(engine, graph, [(s.text, s.params) for s in statements])
    except EngineError as exc:
        log.info("CREATE write on %s refused (%s); writing the batch with MERGE", graph, exc)
        _run(
            engine, graph, [(s.text if s.merge_text is None else s.merge_text, s.params) for s in statements]
        )


def _run(engine: GraphEngine, graph: str, statements: list[tuple[str, dict[str, Any] | None]]) -> None:
    execute_many = getattr(engine, "execute_many", None)
    if execute_many is not None:
        execute_many(graph, statements)  # one round trip: small trickling batches stay cheap
    else:
        for text, params in statements:
            engine.execute(graph, text, params)


def batch_statements(batch: WorkspaceBatch) -> list[Statement]:
    """The statements that write one workspace's rows (pure; see the module docstring)."""
    ws = batch.workspace
    statements: list[Statement] = []

    def add(statement: str, rows: list[dict[str, Any]]) -> None:
        for chunk in _chunks(rows):
            text, arrays = _positional(statement, list(chunk))
            statements.append(Statement(text, {"rows": arrays, "ws": ws}))

    if batch.sessions:
        add(_SESSIONS, [row.to_row() for row in batch.sessions.values()])
    roots = [row.node_id for row in batch.sessions.values() if row.root and not row.forked]
    forked = [row.node_id for row in batch.sessions.values() if row.forked]
    if roots:
        statements.append(Statement(_ROOT, {"ids": MapFreeList(roots), "ws": ws}))
    if forked:
        statements.append(Statement(_FORKED, {"ids": MapFreeList(forked), "ws": ws}))
    for labels, rows in batch.events.items():
        # one statement per label set: static labels, and only the keys these events carry
        # (measured: a single statement with FOREACH-per-label and null padding costs ~1.6x more)
        keys: dict[str, Any] = {}
        for row in rows:
            keys.update(row.props)  # only the (ordered) keys matter
        key_list = list(keys)
        extra = label_clause(tuple(label for label in labels if label != "Event"))
        # tuples: the cyclic GC stops tracking a tuple of scalars, never a list
        arrays = [(row.node_id, row.session_id, *map(row.props.get, key_list)) for row in rows]
        values = [
            _interned(key, map(operator.itemgetter(i + 2), arrays), f"row[{i + 2}]")
            for i, key in enumerate(key_list)
        ]
        assignments = ([f"e{extra}"] if extra else []) + [
            f"e.{_safe_key(key)} = {value}" for key, value in zip(key_list, values, strict=True)
        ]
        merge = _EVENTS.format(assignments=", ".join(assignments))
        properties = ["node_id: row[0]", "workspace: intern($ws)"] + [
            f"{_safe_key(key)}: {value}" for key, value in zip(key_list, values, strict=True)
        ]  # a null value is not stored, as with SET e.k = null
        create = _EVENTS_NEW.format(labels=extra, properties=", ".join(properties))
        for chunk in _chunks(arrays):
            # lifted values are graph_value()s: scalars, lists of scalars or JSON text, and no
            # subnormal float; the other columns are ids, texts and integers
            statements.append(Statement(create, {"rows": NormalFloatList(chunk), "ws": ws}, merge))
    if batch.tool_calls:
        add(_TOOL_CALLS, [row.to_row() for row in batch.tool_calls.values()])
        statements.extend(rollup_statements(ws, list(batch.tool_calls)))
    if batch.model_responses:
        for chunk in _chunks(list(batch.model_responses.values())):
            statements.append(Statement(_MODELS, {"rows": MapFreeList(chunk), "ws": ws}))
    if batch.forks:
        add(_FORKS, list(batch.forks.values()))
    return statements
