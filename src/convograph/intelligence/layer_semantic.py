"""The semantic layers (kernel + foundation) as a stage of the graph applier.

`SemanticLayer.apply(engine, graph, workspace, facts)` runs after layer 1 has written a batch:
it folds each touched session's new events with the kernel, foundation and conversation steps
and writes the derived entities as ``UNWIND`` statements (one per label and one per relationship
type and endpoint labels), every node MERGEd on ``{node_id, workspace}``.

Fold order: a session's events are folded in **event-time order**, journal order breaking ties
(`fold_key`: ``(epoch_ms, seq)``), never in arrival order, so a retried, reordered or late
delivery converges on the graph an in-order delivery gives (issue 26).

Determinism: the per-session fold state is a cache of "every record of the session with
``seq <= upto``, folded in `fold_key` order". It is used when the batch continues the session
strictly after ``upto``; otherwise (first sight after a restart, a retried batch, a rewound
applier, a dead letter isolated record by record) the state is rebuilt by folding the session's
earlier journal records again. A batch whose first event sorts before the last one folded (an
event that arrived late) cannot continue the fold: the session is folded again from the journal
up to the batch, and the graph is *repaired*: the derived entities of the session's component
(`purge.component_of`: every session whose writes are entangled with it) are deleted
(`purge.purge_derived`; layer 1, whose writes commute, stays) and the component's sessions are
folded again in order and written. The fold is pure in the ordered log, so every path yields the
same ids, and MERGE makes repeated writes no-ops: no duplicate iterations, no self-loops
(upstream §10 B2/B3).

Complexity: O(events in the batch) folding, O(k log k) to order a session's k events of the
batch, plus, per rebuilt session, O(that session's prefix) (one indexed journal read when the
journal offers ``read_session``, else a scan); a repair is O(component) in graph round trips
and folding.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

import msgspec

from convograph.intelligence.conversation_fold import fold_conversation
from convograph.intelligence.engine import EngineError, GraphEngine, MapFreeList
from convograph.intelligence.foundation import fold_foundation
from convograph.intelligence.ingest import resolve_node_ids
from convograph.intelligence.journal import Journal, JournalRecord
from convograph.intelligence.kernel import PSEUDO_AGENTS, Derived, Fact, SessionFold, fold_kernel
from convograph.intelligence.keys import graph_key
from convograph.intelligence.layer1 import STATUS_RANK, EventFacts, iso_ms
from convograph.intelligence.purge import SHARED_LABELS, component_of, purge_derived
from convograph.intelligence.writer import GraphNames, rollup_statements

__all__ = [
    "FOLD_STEPS",
    "SemanticLayer",
    "fold_key",
    "fold_session",
    "resolve_self_delegations",
    "session_prefix",
    "write_derived",
]

FoldStep = Callable[[SessionFold, Fact, Derived], None]

FOLD_STEPS: tuple[FoldStep, ...] = (fold_kernel, fold_foundation, fold_conversation)
"""The per-event pipeline, in order (kernel before foundation: steps read the kernel cursors)."""

_LABELS = (
    "OrchestratorRun",
    "Iteration",
    "ContentBlock",
    "Prompt",
    "Cancellation",
    "ContextCompaction",
    "Delegation",
    "Agent",
    "SkillLoad",
    "RecipeRun",
    "RecipeStep",
    "Recipe",
)
_OWN_LABELS = tuple(label for label in _LABELS if label not in SHARED_LABELS)
"""Labels only the folds write: a repair deletes a component's nodes of these labels."""
_FOLD_EDGES = ("PARALLEL_EXECUTION", "HAS_AGENT")
"""Edges the folds draw between nodes they do not own (ToolCalls, Sessions, Agents), whose ends
depend on the fold order (which parallel call came first, which agent ``self`` resolved to)."""
_FOLD_PROPERTIES = {"ToolCall": ("iteration_id", "run_id")}
"""Properties the folds set on nodes they do not own, from their cursors."""
_INDEXES = (
    *((label, "node_id") for label in _LABELS),
    ("Iteration", "session_id"),
    ("OrchestratorRun", "session_id"),
    ("Delegation", "sub_session_id"),
)
_decoder = msgspec.json.Decoder(dict[str, Any])

_SESSIONS = """
UNWIND $rows AS r
MERGE (s:Session {node_id: r[0], workspace: intern($ws)})
SET s.session_id = coalesce(s.session_id, r[0]),
    s.status = coalesce(s.status, 'running'),
    s.status_rank = coalesce(s.status_rank, 0),
    s.has_events = coalesce(s.has_events, false) OR r[1],
    s.has_fork = coalesce(s.has_fork, false) OR r[2],
    s.has_sub_start = coalesce(s.has_sub_start, false) OR r[3],
    s.has_root_start = coalesce(s.has_root_start, false) OR r[4],
    s.has_end = coalesce(s.has_end, false) OR r[5],
    s.parent_id = coalesce(s.parent_id, r[6]),
    s.agent_name = coalesce(s.agent_name, r[7])
WITH s, r,
  (r[8] IS NOT NULL AND (s.started_at_ms IS NULL OR r[8] < s.started_at_ms)) AS earlier,
  (r[10] IS NOT NULL AND (s.ended_at_ms IS NULL OR r[10] > s.ended_at_ms)) AS later,
  (r[12] > s.status_rank) AS promoted
SET s.started_at_ms = CASE WHEN earlier THEN r[8] ELSE s.started_at_ms END,
    s.started_at = CASE WHEN earlier THEN r[9] ELSE s.started_at END,
    s.ended_at_ms = CASE WHEN later THEN r[10] ELSE s.ended_at_ms END,
    s.ended_at = CASE WHEN later THEN r[11] ELSE s.ended_at END,
    s.status_rank = CASE WHEN promoted THEN r[12] ELSE s.status_rank END,
    s.status = CASE WHEN promoted THEN r[13] ELSE s.status END
WITH s
SET s.session_type = CASE WHEN s.has_fork THEN 'forked'
                          WHEN s.has_sub_start THEN 'sub'
                          WHEN s.has_root_start THEN 'root'
                          WHEN s.has_events THEN 'incomplete'
                          ELSE 'stub' END
"""
_NODES = """
UNWIND $rows AS r
MERGE (n:{label} {{node_id: r[0], workspace: intern($ws)}})
{assignments}WITH n, r
UNWIND r[1] AS eid
MATCH (e:Event {{node_id: eid, workspace: $ws}})
MERGE (n)-[:SOURCED_FROM]->(e)
"""
_EDGES = """
UNWIND $rows AS r
MERGE (a:{src} {{node_id: r[0], workspace: intern($ws)}})
MERGE (b:{dst} {{node_id: r[1], workspace: intern($ws)}})
MERGE (a)-[:{kind}]->(b)
"""
_CHUNK = 5000
_STATUS_NAMES = {rank: name for name, rank in STATUS_RANK.items()}
_RESOLVE_SELF = """
MATCH (d:Delegation {workspace: $ws})
WHERE d.agent = 'self' AND d.resolved_agent = 'unresolved'
MATCH (p:Delegation {workspace: $ws})
WHERE p.sub_session_id = d.parent_session_id AND p.resolved_agent IS NOT NULL AND p.resolved_agent <> 'unresolved'
SET d.resolved_agent = p.resolved_agent
RETURN d.node_id, d.sub_session_id, d.resolved_agent
"""
_SELF_AGENT = """
UNWIND $rows AS r
MERGE (a:Agent {node_id: 'agent:' + r[1], workspace: intern($ws)})
SET a.name = r[1]
MERGE (c:Session {node_id: r[0], workspace: intern($ws)})
MERGE (c)-[:HAS_AGENT]->(a)
"""
SELF_HOPS = 8


class SessionReader(Protocol):
    def read_session(self, workspace: str, session_id: str, before_seq: int) -> list[JournalRecord]: ...


def session_prefix(journal: Journal, workspace: str, session_id: str, before_seq: int) -> list[JournalRecord]:
    """The session's journal records with ``seq < before_seq``, in seq order.

    Uses ``journal.read_session`` when the journal has it (an indexed read); otherwise scans the
    journal in pages (O(journal size), only on a cache miss)."""
    reader = getattr(journal, "read_session", None)
    if reader is not None:
        records: list[JournalRecord] = reader(workspace, session_id, before_seq)
        return records
    out: list[JournalRecord] = []
    position = 0
    while position < before_seq - 1:
        page = journal.read_after(position, 5000)
        if not page:
            break
        for record in page:
            if record.seq >= before_seq:
                return out
            if record.workspace == workspace and record.session_id == session_id:
                out.append(record)
        position = page[-1].seq
    return out


FoldKey = tuple[int, int]
_FIRST: FoldKey = (-(2**63), 0)
"""Sorts before every fact: the ``last`` key of an empty fold."""


def fold_key(fact: Fact) -> FoldKey:
    """Where ``fact`` sorts in its session's fold: event time (``data.timestamp``, UTC ms), then
    journal order (``seq``) for events of the same millisecond."""
    return (fact.epoch_ms, fact.seq)


def fold_session(
    state: SessionFold, facts: Iterable[Fact], out: Derived, steps: Sequence[FoldStep] = FOLD_STEPS
) -> None:
    """Fold ``facts`` (one session, in the order given: `fold_key` order for the layers) into
    ``state``, adding entities to ``out``."""
    for fact in facts:
        for step in steps:
            step(state, fact, out)
        state.last_seq = fact.seq


def _record_fact(record: JournalRecord, node_id: str | None = None) -> Fact:
    return Fact(
        record.seq,
        record.session_id,
        record.event,
        record.epoch_ms,
        record.base_id if node_id is None else node_id,
        _decoder.decode(record.data),
    )


class _Folded:
    """A cached fold: ``state`` after every record of its session with ``seq <= upto``, folded
    in `fold_key` order; ``last`` is the key of the last fact folded (the greatest)."""

    __slots__ = ("last", "state", "upto")

    def __init__(self, state: SessionFold, upto: int, last: FoldKey) -> None:
        self.state = state
        self.upto = upto
        self.last = last


class SemanticPlan(NamedTuple):
    """A batch folded by `SemanticLayer.plan_stage`: ``(graph, workspace, entities)`` parts, and
    ``(graph, workspace, sessions)`` whose component the write must repair (`SemanticLayer`)
    up to journal seq ``upto``."""

    replay: bool
    parts: list[tuple[str, str, Derived]]
    repairs: list[tuple[str, str, list[str]]]
    upto: int


class SemanticLayer:
    """Applier stage for the kernel and foundation layers. ``max_sessions`` bounds the cache."""

    def __init__(
        self, journal: Journal, *, max_sessions: int = 20_000, steps: Sequence[FoldStep] = FOLD_STEPS
    ) -> None:
        self.journal = journal
        self.max_sessions = max_sessions
        self.steps = tuple(steps)
        self._states: OrderedDict[tuple[str, str], _Folded] = OrderedDict()
        self._schema_ready: set[str] = set()
        self._high_seq = 0
        self.rebuilds = 0
        self.repairs = 0
        """Sessions folded again because an event arrived out of event-time order."""

    def _cache(self, key: tuple[str, str], folded: _Folded) -> None:
        self._states[key] = folded
        self._states.move_to_end(key)
        while len(self._states) > self.max_sessions:
            self._states.popitem(last=False)

    def _state_for(self, workspace: str, session_id: str, first_seq: int) -> _Folded:
        key = (workspace, session_id)
        folded = self._states.get(key)
        if folded is not None and folded.upto < first_seq:
            self._states.move_to_end(key)
            return folded
        # missing, or this batch replays what the cache already folded: rebuild from the journal
        self.rebuilds += 1
        state = SessionFold(workspace, session_id)
        prefix = sorted(
            (_record_fact(r) for r in session_prefix(self.journal, workspace, session_id, first_seq)),
            key=fold_key,
        )
        fold_session(state, prefix, Derived(), self.steps)
        folded = _Folded(state, first_seq - 1, fold_key(prefix[-1]) if prefix else _FIRST)
        self._cache(key, folded)
        return folded

    def refold(self, workspace: str, session_id: str, upto: int, out: Derived) -> None:
        """Fold the session's journal records with ``seq <= upto`` from scratch, in `fold_key`
        order, into ``out``, and cache the state. O(the session's records)."""
        facts = self._ordered_facts(workspace, session_prefix(self.journal, workspace, session_id, upto + 1))
        state = SessionFold(workspace, session_id)
        fold_session(state, facts, out, self.steps)
        self._cache((workspace, session_id), _Folded(state, upto, fold_key(facts[-1]) if facts else _FIRST))

    def _ordered_facts(self, workspace: str, records: list[JournalRecord]) -> list[Fact]:
        """One session's records as facts in `fold_key` order, with the Event ids the graph
        holds (collision renames included: the entities' ``SOURCED_FROM`` edges name them)."""
        groups = (
            {
                (workspace, base_id): fps
                for base_id, fps in self.journal.collision_groups(
                    workspace, [(r.base_id, r.epoch_ms) for r in records]
                ).items()
            }
            if records
            else {}
        )
        node_ids, _ = resolve_node_ids(records, groups)
        facts = [_record_fact(r, node_id) for r, node_id in zip(records, node_ids, strict=True)]
        facts.sort(key=fold_key)
        return facts

    def plan(self, workspace: str, facts: Sequence[Fact]) -> Derived:
        """Fold a workspace's share of a batch (any interleaving of sessions and of a session's
        events): its entities, a late session's whole fold included (`_plan`)."""
        out = Derived()
        self._plan(workspace, facts, out, out)
        return out

    def _plan(self, workspace: str, facts: Sequence[Fact], out: Derived, refolded: Derived) -> list[str]:
        """Fold each session's facts of a batch in `fold_key` order into ``out``; a session with a
        fact sorting before what its fold already holds (arrived late) is folded again from the
        journal into ``refolded`` instead. Returns those sessions (the graph needs repairing)."""
        by_session: dict[str, list[Fact]] = {}
        for fact in facts:
            by_session.setdefault(fact.session_id, []).append(fact)
        late: list[str] = []
        for session_id, items in by_session.items():
            items.sort(key=fold_key)
            upto = max(fact.seq for fact in items)
            folded = self._state_for(workspace, session_id, min(fact.seq for fact in items))
            if fold_key(items[0]) < folded.last:
                self.repairs += 1
                self.refold(workspace, session_id, upto, refolded)
                late.append(session_id)
                continue
            fold_session(folded.state, items, out, self.steps)
            folded.upto = upto
            folded.last = fold_key(items[-1])
        return late

    def ensure_schema(self, engine: GraphEngine, graph: str) -> None:
        if graph in self._schema_ready:
            return
        for label, prop in _INDEXES:
            with contextlib.suppress(EngineError):  # already indexed
                engine.execute(graph, f"CREATE INDEX FOR (n:{label}) ON (n.{prop})")
        self._schema_ready.add(graph)

    def apply(self, engine: GraphEngine, graph: str, workspace: str, facts: Sequence[Fact]) -> int:
        """Plan and write (repairing the graph after a late event); returns the statements issued."""
        self.ensure_schema(engine, graph)
        out = Derived()
        late = self._plan(workspace, facts, out, Derived())
        statements = write_derived(engine, graph, workspace, out)
        if late:
            statements += self.repair(engine, graph, workspace, late, max(fact.seq for fact in facts))
        return statements

    def repair(
        self, engine: GraphEngine, graph: str, workspace: str, sessions: Sequence[str], upto: int
    ) -> int:
        """Make the graph what an in-order fold gives after the late events of ``sessions``:
        delete the derived entities of their component and write the fold of every session in
        it again, up to journal seq ``upto`` (the batch's last). Runs on the writing thread and
        never touches the cache (the planner may be folding the next batch). O(component)."""
        component = component_of(engine, graph, workspace, sessions)
        purge_derived(
            engine,
            graph,
            workspace,
            component,
            labels=_OWN_LABELS,
            edge_types=_FOLD_EDGES,
            properties=_FOLD_PROPERTIES,
        )
        out = Derived()
        for session_id in sorted({*component.sessions, *sessions}):
            records = session_prefix(self.journal, workspace, session_id, upto + 1)
            state = SessionFold(workspace, session_id)  # (not cached: see above)
            fold_session(state, self._ordered_facts(workspace, records), out, self.steps)
        return write_derived(engine, graph, workspace, out)

    def plan_stage(
        self, names: GraphNames, records: Sequence[JournalRecord], facts: Sequence[EventFacts]
    ) -> SemanticPlan:
        """`convograph.intelligence.ingest.PlannedStage` half one: fold the batch (per workspace)."""
        replay = bool(records) and records[0].seq <= self._high_seq
        if records:
            self._high_seq = max(self._high_seq, records[-1].seq)
        by_workspace: dict[str, list[Fact]] = {}
        for record, item in zip(records, facts, strict=True):
            by_workspace.setdefault(record.workspace, []).append(
                Fact(record.seq, record.session_id, record.event, record.epoch_ms, item.node_id, item.data)
            )
        parts: list[tuple[str, str, Derived]] = []
        repairs: list[tuple[str, str, list[str]]] = []
        for workspace, items in by_workspace.items():
            graph, out = names.graph(workspace), Derived()
            late = self._plan(workspace, items, out, Derived())  # (a repair writes the late folds)
            parts.append((graph, workspace, out))
            if late:
                repairs.append((graph, workspace, late))
        return SemanticPlan(replay, parts, repairs, records[-1].seq if records else 0)

    def write_stage(self, engine: GraphEngine, planned: SemanticPlan) -> None:
        """Half two: write the folded entities, then repair what late events changed (a replay
        re-creates the indexes first)."""
        if planned.replay:
            self._schema_ready.clear()  # the graph store may have lost our indexes too
        for graph, workspace, out in planned.parts:
            self.ensure_schema(engine, graph)
            write_derived(engine, graph, workspace, out)
        for graph, workspace, sessions in planned.repairs:
            self.repair(engine, graph, workspace, sessions, planned.upto)

    def forget(self) -> None:
        """Drop every cached state (they are rebuilt from the journal on demand)."""
        self._states.clear()
        self._schema_ready.clear()

    def forget_sessions(self, workspace: str, session_ids: Iterable[str]) -> None:
        """Drop the cached states of these sessions only (a forget purged their component in
        place; every other session's state still matches the graph). O(sessions)."""
        for session_id in session_ids:
            self._states.pop((workspace, session_id), None)


def _chunks(rows: list[Any]) -> Iterable[list[Any]]:
    for start in range(0, len(rows), _CHUNK):
        yield rows[start : start + _CHUNK]


def _safe_key(key: str) -> str:
    if not key or "`" in key:
        raise ValueError(f"property name {key!r} cannot be written")
    return f"`{key}`"


def _node_statements(
    label: str, nodes: dict[str, dict[str, Any]], sources: dict[str, dict[str, None]]
) -> Iterable[tuple[str, list[Any]]]:
    """One statement per (label, property key set): rows are ``[id, sources, *values]`` arrays
    and the keys are static ``SET n.`k` = r[i]`` assignments. The same writes as ``SET n += map``
    (values are never null, see `Derived.node`), without shipping maps: map parameters need the
    slow recursive formatter (measured ~25 µs per event with the layers on)."""
    by_keys: dict[tuple[str, ...], list[list[Any]]] = {}
    for node_id, props in nodes.items():
        by_keys.setdefault(tuple(props), []).append(
            [node_id, list(sources.get(node_id, ())), *props.values()]
        )
    for keys, rows in by_keys.items():
        assignments = (
            "SET " + ", ".join(f"n.{_safe_key(key)} = r[{i + 2}]" for i, key in enumerate(keys)) + "\n"
            if keys
            else ""
        )
        statement = _NODES.format(label=label, assignments=assignments)
        for chunk in _chunks(rows):
            yield statement, chunk


def write_derived(engine: GraphEngine, graph: str, workspace: str, out: Derived) -> int:
    """Sessions first (typing), then nodes per label (with their ``SOURCED_FROM`` edges), then
    edges per (type, endpoint labels), then the workspace rollups of ``out.tool_calls``. Rows travel as arrays of scalars (`MapFreeList`), and the
    statements in one pipelined round trip when the engine has ``execute_many``."""
    batch: list[tuple[str, dict[str, Any] | None]] = []
    if out.sessions:
        rows = [
            [
                *(
                    f.node_id,
                    f.events,
                    f.fork,
                    f.sub,
                    f.root,
                    f.end,
                    None if f.parent is None else graph_key(f.parent),
                    f.agent,
                ),
                *(f.started_ms, iso_ms(f.started_ms) if f.started_ms is not None else None),
                *(f.ended_ms, iso_ms(f.ended_ms) if f.ended_ms is not None else None),
                *(f.status_rank, _STATUS_NAMES[f.status_rank]),
            ]
            for f in out.sessions.values()
        ]
        for chunk in _chunks(rows):
            batch.append((_SESSIONS, {"rows": MapFreeList(chunk), "ws": workspace}))
    for label, nodes in out.nodes.items():
        for statement, chunk in _node_statements(label, nodes, out.sources.get(label, {})):
            batch.append((statement, {"rows": MapFreeList(chunk), "ws": workspace}))
    for (kind, src, dst), pairs in out.edges.items():
        statement = _EDGES.format(kind=kind, src=src, dst=dst)
        for chunk in _chunks([[a, b] for a, b in pairs]):
            batch.append((statement, {"rows": MapFreeList(chunk), "ws": workspace}))
    if out.tool_calls:  # after the ToolCalls (and their HAS_TOOL_CALL edges) are written
        batch.extend((text, params) for text, params, _ in rollup_statements(workspace, list(out.tool_calls)))
    statements = len(batch)
    execute_many = getattr(engine, "execute_many", None)
    if execute_many is not None:
        execute_many(graph, batch)  # one round trip for the whole workspace batch
    else:
        for text, params in batch:
            engine.execute(graph, text, params)
    if "Delegation" in out.nodes:
        statements += resolve_self_delegations(engine, graph, workspace)
    return statements


def resolve_self_delegations(engine: GraphEngine, graph: str, workspace: str) -> int:
    """``self`` inside a ``self`` child: take the resolution of the delegation that created the
    delegating session, up to `SELF_HOPS` hops (upstream's resolver). A fixpoint over the stored
    graph, so it converges whichever delegation arrived first. Returns statements issued."""
    statements = 0
    for _ in range(SELF_HOPS):
        resolved = engine.execute(graph, _RESOLVE_SELF, {"ws": workspace}).rows
        statements += 1
        if not resolved:
            break
        real = [[child, agent] for _, child, agent in resolved if child and agent not in PSEUDO_AGENTS]
        if real:
            engine.execute(graph, _SELF_AGENT, {"rows": real, "ws": workspace})
            statements += 1
    return statements
