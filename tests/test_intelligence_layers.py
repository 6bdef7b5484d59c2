"""The kernel/foundation fold without a database: ids, cursors, typing, convergence.

`SemanticLayer.plan` over a `MemoryJournal` is exercised with arbitrary batch cuts, arbitrary
interleavings of sessions (per-session order kept, as the journal guarantees), cache loss
(restart) and replays; the union of what it plans must equal one straight fold.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from convograph.intelligence.envelope import parse_envelope
from convograph.intelligence.journal import JournalRecord, MemoryJournal
from convograph.intelligence.kernel import Derived, Fact, SessionFold
from convograph.intelligence.layer1 import iso_ms
from convograph.intelligence.layer_semantic import SemanticLayer, fold_session

DATASET = Path(__file__).resolve().parent / "fixtures" / "ci_layers.ndjson"
T0 = 1772442000000
WS = "ws"


def _ev(event: str, ms: int, sid: str = "S", **fields: Any) -> dict[str, Any]:
    return {
        "event": event,
        "workspace": WS,
        "data": {"session_id": sid, "timestamp": iso_ms(T0 + ms), **fields},
    }


def _journal(bodies: list[dict[str, Any]]) -> tuple[MemoryJournal, list[JournalRecord]]:
    journal = MemoryJournal()
    journal.append([parse_envelope(body) for body in bodies])
    return journal, journal.read_after(0, 1_000_000)


def _fact(record: JournalRecord) -> Fact:
    return Fact(
        record.seq, record.session_id, record.event, record.epoch_ms, record.base_id, json.loads(record.data)
    )


def _picture(out: Derived) -> tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str, str]]]:
    nodes = frozenset((label, node_id) for label, rows in out.nodes.items() for node_id in rows)
    edges = frozenset((kind, a, b) for (kind, _s, _d), pairs in out.edges.items() for a, b in pairs)
    sourced = frozenset(
        ("SOURCED_FROM", node_id, event)
        for rows in out.sources.values()
        for node_id, ev in rows.items()
        for event in ev
    )
    return nodes, edges | sourced


def _plan_all(layer: SemanticLayer, facts: list[Fact]) -> Derived:
    return layer.plan(WS, facts)


def _merge(into: Derived, out: Derived) -> None:
    for label, rows in out.nodes.items():
        for node_id, props in rows.items():
            into.node(label, node_id, props)
    for key, pairs in out.edges.items():
        into.edges.setdefault(key, {}).update(pairs)
    for label, rows in out.sources.items():
        for node_id, events in rows.items():
            into.sources.setdefault(label, {}).setdefault(node_id, {}).update(events)
    for node_id, flags in out.sessions.items():
        mine = into.session(node_id)
        for name in ("events", "fork", "sub", "root", "end"):
            setattr(mine, name, getattr(mine, name) or getattr(flags, name))


def two_runs() -> list[dict[str, Any]]:
    """Two runs with two iterations each; parallel tools; a duplicate-looking re-sent pre."""
    return [
        _ev("session:start", 0),
        _ev("prompt:submit", 1, prompt="hi"),
        _ev("execution:start", 2),
        _ev("provider:request", 3),
        _ev("llm:response", 4, model="m", usage={"input_tokens": 5, "output_tokens": 7}),
        _ev("content_block:end", 5, block_index=0, block={"type": "tool_call", "id": "a"}),
        _ev("tool:pre", 6, tool_call_id="a", tool_name="bash", parallel_group_id="g"),
        _ev("tool:pre", 7, tool_call_id="b", tool_name="grep", parallel_group_id="g"),
        _ev("tool:pre", 8, tool_call_id="b", tool_name="grep", parallel_group_id="g", note="re-sent"),
        _ev("tool:post", 9, tool_call_id="a", tool_name="bash", result={"success": True}),
        _ev("provider:request", 10),
        _ev("execution:end", 11, status="completed"),
        _ev("prompt:submit", 12, prompt="again"),
        _ev("execution:start", 13),
        _ev("provider:request", 14),
        _ev("provider:request", 15),
        _ev("execution:end", 16),
        _ev("session:end", 17),
    ]


def test_iteration_ids_include_their_run_and_never_repeat() -> None:
    journal, records = _journal(two_runs())
    out = SemanticLayer(journal).plan(WS, [_fact(r) for r in records])
    assert sorted(out.nodes["Iteration"]) == [
        "S::run::1::iteration::1",
        "S::run::1::iteration::2",
        "S::run::2::iteration::1",
        "S::run::2::iteration::2",
    ]
    assert sorted(out.nodes["OrchestratorRun"]) == ["S::run::1", "S::run::2"]
    triggered = set(out.edges[("TRIGGERED", "Prompt", "OrchestratorRun")])
    assert triggered == {("S::prompt::1", "S::run::1"), ("S::prompt::2", "S::run::2")}
    assert out.nodes["Iteration"]["S::run::1::iteration::1"]["output_tokens"] == 7


def test_parallel_group_has_no_self_loops_or_duplicates() -> None:
    journal, records = _journal(two_runs())
    out = SemanticLayer(journal).plan(WS, [_fact(r) for r in records])
    parallel = out.edges[("PARALLEL_EXECUTION", "ToolCall", "ToolCall")]
    assert list(parallel) == [("S__tool_call__b", "S__tool_call__a")]
    caused = out.edges[("CAUSED", "ContentBlock", "ToolCall")]
    assert list(caused) == [("S::run::1::iteration::1::block::0", "S__tool_call__a")]


def test_pseudo_agents_never_become_agent_nodes() -> None:
    bodies = [
        _ev("session:start", 0),
        _ev(
            "delegate:agent_spawned",
            1,
            parent_session_id="S",
            sub_session_id="C1",
            agent="self",
            tool_call_id="t1",
        ),
        _ev(
            "delegate:agent_spawned",
            2,
            parent_session_id="S",
            sub_session_id="C2",
            agent="",
            tool_call_id="t2",
        ),
        _ev(
            "delegate:agent_spawned",
            3,
            parent_session_id="S",
            sub_session_id="C3",
            agent="foundation:explorer",
            tool_call_id="t3",
        ),
        _ev("session:fork", 4, sid="C1", parent="S", metadata={"agent_name": "self"}),
    ]
    journal, records = _journal(bodies)
    out = SemanticLayer(journal).plan(WS, [_fact(r) for r in records])
    assert list(out.nodes["Agent"]) == ["agent:foundation:explorer"]
    assert out.nodes["Delegation"]["S::delegation::t1"]["resolved_agent"] == "root"
    assert out.nodes["Delegation"]["S::delegation::t1"]["agent"] == "self"


def test_child_events_before_parent_delegation_converge() -> None:
    child = [
        _ev("session:fork", 5, sid="C", parent="S", metadata={"agent_name": "foundation:explorer"}),
        _ev("session:start", 6, sid="C", parent_id="S"),
        _ev("session:end", 7, sid="C"),
    ]
    parent = [
        _ev("session:start", 0),
        _ev(
            "delegate:agent_spawned",
            8,
            parent_session_id="S",
            sub_session_id="C",
            agent="foundation:explorer",
        ),
    ]
    pictures = []
    for order in (child + parent, parent + child):
        journal, records = _journal(order)
        pictures.append(_picture(SemanticLayer(journal).plan(WS, [_fact(r) for r in records])))
    assert pictures[0] == pictures[1]


def test_stale_cursors_are_closed() -> None:
    """A tool call after ``execution:end`` hangs off no iteration; an old prompt triggers no second run."""
    bodies = [
        _ev("prompt:submit", 0, prompt="p"),
        _ev("execution:start", 1),
        _ev("provider:request", 2),
        _ev("execution:end", 3),
        _ev("tool:pre", 4, tool_call_id="late", tool_name="bash"),
        _ev("execution:start", 5),
    ]
    journal, records = _journal(bodies)
    out = SemanticLayer(journal).plan(WS, [_fact(r) for r in records])
    assert ("HAS_TOOL_CALL", "Iteration", "ToolCall") not in out.edges
    assert len(out.edges[("TRIGGERED", "Prompt", "OrchestratorRun")]) == 1


def test_unstorable_values_become_json_text() -> None:
    out = Derived()
    out.node(
        "RecipeStep", "x", {"iteration": {"n": 1}, "tags": ["a", "b"], "mixed": [1, {"k": 2}], "none": None}
    )
    assert out.nodes["RecipeStep"]["x"] == {
        "iteration": '{"n":1}',
        "tags": ["a", "b"],
        "mixed": '[1,{"k":2}]',
    }


def test_compaction_pairs_and_cancellation() -> None:
    bodies = [
        _ev("execution:start", 0),
        _ev("context:pre_compact", 1, tokens_before=100),
        _ev("context:post_compact", 4, tokens_after=40),
        _ev("cancel:completed", 5, immediate=True),
        _ev("execution:end", 6, status="cancelled"),
    ]
    journal, records = _journal(bodies)
    out = SemanticLayer(journal).plan(WS, [_fact(r) for r in records])
    (compaction,) = out.nodes["ContextCompaction"].values()
    assert compaction["duration_ms"] == 3
    assert compaction["tokens_before"] - compaction["tokens_after"] == 60
    assert out.nodes["OrchestratorRun"]["S::run::1"]["status"] == "cancelled"
    assert out.nodes["Cancellation"]["S::cancellation::1"]["was_immediate"] is True


def _dataset() -> tuple[MemoryJournal, list[JournalRecord]]:
    bodies = [json.loads(line) for line in DATASET.read_text(encoding="utf-8").splitlines()]
    return _journal(bodies)


JOURNAL, RECORDS = _dataset()
STRAIGHT = _picture(SemanticLayer(JOURNAL).plan(WS, [_fact(r) for r in RECORDS]))


@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=len(RECORDS) - 1), max_size=12),
    restarts=st.lists(st.booleans(), min_size=13, max_size=13),
    replays=st.lists(st.integers(min_value=0, max_value=12), max_size=4),
)
def test_any_batching_restart_or_replay_plans_the_same_entities(
    cuts: list[int], restarts: list[bool], replays: list[int]
) -> None:
    bounds = [0, *sorted(set(cuts)), len(RECORDS)]
    batches = [RECORDS[a:b] for a, b in pairwise(bounds)]
    layer = SemanticLayer(JOURNAL)
    total = Derived()
    for index, batch in enumerate(batches):
        if restarts[index % len(restarts)]:
            layer.forget()  # process restart: the cache is gone
        workspace = batch[0].workspace
        _merge(total, layer.plan(workspace, [_fact(r) for r in batch]))
        if index in replays:  # the same batch applied again (retry / rewind)
            _merge(total, layer.plan(workspace, [_fact(r) for r in batch]))
    assert _picture(total) == STRAIGHT


def test_fold_is_a_function_of_the_session_log() -> None:
    """Folding one session alone equals its share of the whole-journal fold."""
    sid = RECORDS[0].session_id
    state = SessionFold(WS, sid)
    alone = Derived()
    fold_session(state, [_fact(r) for r in RECORDS if r.session_id == sid], alone)
    nodes, _ = _picture(alone)
    straight_nodes, _ = STRAIGHT
    assert nodes <= straight_nodes
    assert any(label == "Iteration" for label, _ in nodes)


BODIES = [json.loads(line) for line in DATASET.read_text(encoding="utf-8").splitlines()]


@settings(max_examples=15, deadline=None)
@given(st.randoms(use_true_random=False))
def test_any_interleaving_of_sessions_plans_the_same_entities(rng: Any) -> None:
    """The journal keeps each session's order, not the order between sessions."""
    queues: dict[str, list[dict[str, Any]]] = {}
    for body in BODIES:
        queues.setdefault(body["data"]["session_id"], []).append(body)
    order = [sid for sid, queue in queues.items() for _ in queue]
    rng.shuffle(order)
    cursors = dict.fromkeys(queues, 0)
    shuffled = []
    for sid in order:
        shuffled.append(queues[sid][cursors[sid]])
        cursors[sid] += 1
    journal, records = _journal(shuffled)
    assert _picture(SemanticLayer(journal).plan(WS, [_fact(r) for r in records])) == STRAIGHT
