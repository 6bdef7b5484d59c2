# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
"""Conversation events build the same Session / Delegation / ToolCall / Iteration entities."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convograph.events import User, parse_event
from convograph.intelligence.blobs import MemoryBlobStore
from convograph.intelligence.conversations import (
    conversation_envelopes,
    conversation_target,
    feed_conversation,
)
from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.envelope import parse_envelope
from convograph.intelligence.journal import MemoryJournal
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import GraphNames
from convograph.store.base import StoredEvent
from convograph.testing import MemoryEventLog
from tests.support.otlp_conversation import record_otlp_conversation
from tests.test_intelligence_layers_queries import load_questions
from tests.test_intelligence_support import falkor, snapshot  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
CID = "acme:conv-1"
T0 = 1772442000000


def conversation() -> list[dict[str, Any]]:
    """A user turn; the main agent reads a file and delegates; the sub-agent's bash fails."""
    events: list[dict[str, Any]] = [
        {"type": "user", "runId": "u1", "content": "Fix the flaky test"},
        {"type": "harness_start", "runId": "r1", "parentId": "u1:user", "agentId": "main"},
        {"type": "text", "runId": "r1", "id": "t1", "content": "Let me look."},
        {"type": "tool_call", "runId": "r1", "id": "tc1", "name": "read_file", "input": {"path": "a.py"}},
        {"type": "tool_call", "runId": "r1", "id": "tc2", "name": "delegate", "input": {"agent": "explorer"}},
        {"type": "usage", "runId": "r1", "inputTokens": 100, "outputTokens": 20},
        {
            "type": "tool_result",
            "runId": "r1",
            "id": "tc1",
            "name": "read_file",
            "output": {"result": "x = 1"},
        },
        {"type": "harness_start", "runId": "r2", "parentId": "tc2", "agentId": "explorer"},
        {"type": "tool_call", "runId": "r2", "id": "tc3", "name": "bash", "input": {"command": "pytest"}},
        {"type": "usage", "runId": "r2", "inputTokens": 50, "outputTokens": 10, "cacheReadTokens": 7},
        {"type": "tool_result", "runId": "r2", "id": "tc3", "name": "bash", "output": {"error": "exit 1"}},
        {"type": "usage", "runId": "r2", "inputTokens": 30, "outputTokens": 5},
        {"type": "harness_end", "runId": "r2", "agentId": "explorer", "reason": "done"},
        {
            "type": "tool_result",
            "runId": "r1",
            "id": "tc2",
            "name": "delegate",
            "output": {"result": "found"},
        },
        {"type": "usage", "runId": "r1", "inputTokens": 200, "outputTokens": 40},
        {
            "type": "harness_end",
            "runId": "r1",
            "agentId": "main",
            "reason": "done",
            "totalUsage": {"inputTokens": 300, "outputTokens": 60},
        },
    ]
    for index, event in enumerate(events):
        event["timestamp"] = T0 + 10 * index
    return events


def stored(events: list[dict[str, Any]] | list[str], first_seq: int = 1) -> list[StoredEvent]:
    return [
        StoredEvent(seq=first_seq + i, conversation_id=CID, event=parse_event(e), received_at=1.0)
        for i, e in enumerate(events)
    ]


def test_target_workspace_from_prefix() -> None:
    assert conversation_target("acme:conv-1") == ("acme", "conv-1")
    assert conversation_target("plain-id") == ("conversations", "plain-id")
    assert conversation_target(":x") == ("conversations", ":x")


@pytest.mark.parametrize(
    "timestamp",
    [1e300, -1e300, 10**30, -(10**20), 1.5e15, "9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00+05:00"],
)
def test_timestamps_no_datetime_holds_fall_back_to_receipt_time(timestamp: Any) -> None:
    """Fuzzed: the conversation log accepted any number or string as ``timestamp`` (logs written
    then still hold them; `parse_event` now refuses most: built here as Python objects); the feeder
    then raised on such an event (year out of range, time_t overflow) and retried its conversation
    forever, so nothing after it reached the graph."""
    event = User(run_id="u1", content="hi", timestamp=timestamp)
    (envelope,) = conversation_envelopes(
        CID, [StoredEvent(seq=1, conversation_id=CID, event=event, received_at=1.0)]
    )
    assert envelope["data"]["timestamp"] == "1970-01-01T00:00:01.000+00:00"  # received_at=1.0
    parse_envelope(envelope)


@pytest.mark.parametrize("cid", ["acme:.", "acme:.."])
def test_dot_session_names_stay_valid_sessions(cid: str) -> None:
    """Fuzzed: ``acme:.`` is a valid conversation id, but ``.`` is no valid session id (it names a
    blob directory), so every envelope of the conversation was refused and the feeder retried it
    forever. Such ids keep the whole id as the session, in the default workspace."""
    assert conversation_target(cid) == ("conversations", cid)
    (envelope,) = conversation_envelopes(cid, stored([{"type": "user", "runId": "u1", "content": "hi"}]))
    parse_envelope(envelope)


def test_envelopes_are_structural_and_keyed_by_seq() -> None:
    envelopes = conversation_envelopes(CID, stored(conversation()))
    assert [e["event"] for e in envelopes].count("conversation:text") == 0
    first = envelopes[0]
    assert first["workspace"] == "acme"
    assert first["idempotency_key"] == "convograph-conversation:acme:conv-1:1"
    assert first["data"]["session_id"] == "conv-1"
    assert first["data"]["timestamp"].startswith("2026-03-02T09:00:00.000")
    call = next(e for e in envelopes if e["event"] == "conversation:tool_call")
    assert call["data"]["tool_call_id"] == "tc1"
    assert call["data"]["tool_input"] == {"path": "a.py"}


def test_feed_never_raises() -> None:
    class Down:
        def ingest_many(self, bodies: Any) -> Any:
            raise RuntimeError("not running")

    assert feed_conversation(Down(), CID, stored(conversation())) == 0
    assert feed_conversation(None, CID, stored(conversation())) == 0


@pytest.fixture
def layered(falkor: FalkorEngine) -> Iterator[IntelligenceService]:
    names = GraphNames(f"c{uuid.uuid4().hex[:10]}:")
    service = IntelligenceService(
        MemoryJournal(), falkor, MemoryBlobStore(), names=names, semantic_layers=True
    )
    service.start()
    yield service
    service.close()
    for graph in falkor.graphs():
        if graph.startswith(names.prefix):
            falkor.delete_graph(graph)


def ask(service: IntelligenceService, number: int, workspace: str = "acme") -> list[dict[str, Any]]:
    return [dict(r) for r in service.cypher(load_questions()[number], workspace=workspace).results]


def test_conversation_answers_the_same_questions(layered: IntelligenceService) -> None:
    events = stored(conversation())
    assert feed_conversation(layered, CID, events) == 15  # the text fragment is not forwarded
    assert feed_conversation(layered, CID, events) == 0  # re-feeding adds nothing
    assert layered.wait_applied(timeout=60)
    assert layered.applier.dead_lettered == 0
    child = "conv-1::agent::r2"
    assert ask(layered, 1) == [{"kind": "forked", "sessions": 1}, {"kind": "root", "sessions": 1}]
    assert ask(layered, 2) == [
        {"agent": "explorer", "input": 80, "output": 15, "cache_read": 7},
        {"agent": "main", "input": 300, "output": 60, "cache_read": 0},
    ]
    assert ask(layered, 3) == [{"tool": "bash", "failures": 1, "calls": 1}]
    assert ask(layered, 4) == [{"root": "conv-1", "descendants": 1}]
    assert ask(layered, 9) == [
        {"run": "conv-1::agent::r2::run::1", "iterations": 2},
        {"run": "conv-1::run::1", "iterations": 2},
    ]
    assert ask(layered, 11) == [{"agent": "explorer", "delegations": 1, "succeeded": 1}]
    assert ask(layered, 16) == [{"prompt": "conv-1::prompt::1", "output": 60}]
    assert ask(layered, 18) == [{"tool": "delegate", "requested": "explorer", "child": child}]
    assert ask(layered, 19) == [{"most_calls": 2, "attached_calls": 3}]
    durations = layered.cypher(
        "MATCH (t:ToolCall {workspace: $workspace}) RETURN t.tool_name AS tool, t.duration_ms AS ms ORDER BY tool",
        workspace="acme",
    ).results
    assert [dict(r) for r in durations] == [
        {"tool": "bash", "ms": 20},
        {"tool": "delegate", "ms": 90},
        {"tool": "read_file", "ms": 30},
    ]
    runs = layered.cypher(
        "MATCH (r:OrchestratorRun {workspace: $workspace}) RETURN r.node_id AS run, r.status AS status,"
        " r.input_tokens AS input, r.output_tokens AS output, r.iteration_count AS iterations ORDER BY run",
        workspace="acme",
    ).results
    assert [dict(r) for r in runs] == [
        {
            "run": "conv-1::agent::r2::run::1",
            "status": "completed",
            "input": None,
            "output": None,
            "iterations": 2,
        },
        {"run": "conv-1::run::1", "status": "completed", "input": 300, "output": 60, "iterations": 2},
    ]
    sessions = layered.cypher(
        "MATCH (s:Session {workspace: $workspace}) RETURN s.node_id AS id, s.status AS status,"
        " s.started_at_ms AS start, s.ended_at_ms AS end, s.parent_id AS parent ORDER BY id",
        workspace="acme",
    ).results
    assert [dict(r) for r in sessions] == [
        {"id": "conv-1", "status": "running", "start": T0 + 10, "end": T0 + 150, "parent": None},
        {"id": child, "status": "completed", "start": T0 + 70, "end": T0 + 120, "parent": "conv-1"},
    ]
    sourced = layered.cypher(
        "MATCH (:ToolCall {workspace: $workspace})-[:SOURCED_FROM]->(e:ConversationEvent) RETURN count(e) AS c",
        workspace="acme",
    ).results
    assert sourced == [{"c": 6}]


def test_child_run_arriving_in_a_later_batch(layered: IntelligenceService) -> None:
    """Split feeds (as separate POSTs) give the same entities as one feed."""
    events = conversation()
    feed_conversation(layered, CID, stored(events[:8]))
    feed_conversation(layered, CID, stored(events[8:], first_seq=9))
    assert layered.wait_applied(timeout=60)
    assert ask(layered, 18) == [{"tool": "delegate", "requested": "explorer", "child": "conv-1::agent::r2"}]
    assert ask(layered, 19) == [{"most_calls": 2, "attached_calls": 3}]


EXAMPLE = [line for line in (ROOT / "examples" / "multi-agent.ndjson").read_text().splitlines() if line]
"""The README's example: an agent whose model calls are provider runs, a subagent, a relay."""


def _conversation_picture(cuts: list[int], refeed: list[int], source: str = "hand-written") -> Any:
    from convograph.intelligence.envelope import parse_envelope
    from convograph.intelligence.kernel import Derived, Fact
    from convograph.intelligence.layer_semantic import SemanticLayer

    events = stored(conversation()) if source == "hand-written" else stored(EXAMPLE)
    bounds = [0, *sorted(set(cuts)), len(events)]
    journal = MemoryJournal()
    layer = SemanticLayer(journal)
    nodes: set[tuple[str, str]] = set()
    edges: set[tuple[str, str, str]] = set()
    props: dict[tuple[str, str, str], Any] = {}
    applied = 0
    for index, (a, b) in enumerate(pairwise(bounds)):
        feeds = [events[a:b]] + ([events[:b]] if index in refeed else [])  # a client re-posting
        for feed in feeds:
            journal.append([parse_envelope(e) for e in conversation_envelopes(CID, feed)])
        records = journal.read_after(applied, 10_000)
        if not records:
            continue
        applied = records[-1].seq
        facts = [
            Fact(r.seq, r.session_id, r.event, r.epoch_ms, r.base_id, json.loads(r.data)) for r in records
        ]
        out: Derived = layer.plan("acme", facts)
        nodes |= {(label, node_id) for label, rows in out.nodes.items() for node_id in rows}
        edges |= {(kind, x, y) for (kind, _s, _d), pairs in out.edges.items() for x, y in pairs}
        for label, rows in out.nodes.items():  # what the graph keeps: the last value written
            props.update(
                {(label, node_id, key): value for node_id, row in rows.items() for key, value in row.items()}
            )
    return nodes, edges, props


@settings(max_examples=20, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=15), max_size=6),
    refeed=st.lists(st.integers(min_value=0, max_value=6), max_size=3),
)
def test_any_split_or_refeed_of_a_conversation_derives_the_same_entities(
    cuts: list[int], refeed: list[int]
) -> None:
    assert _conversation_picture(cuts, refeed) == _conversation_picture([], [])


@settings(max_examples=20, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=len(EXAMPLE) - 1), max_size=8),
    refeed=st.lists(st.integers(min_value=0, max_value=8), max_size=3),
)
def test_any_split_or_refeed_of_provider_runs_derives_the_same_entities(
    cuts: list[int], refeed: list[int]
) -> None:
    """The README's example (model calls as provider runs, parallel calls, a retried attempt, a
    relay): every split into feeds, with re-posts, derives the same entities and properties."""
    assert _conversation_picture(cuts, refeed, "example") == _conversation_picture([], [], "example")


def test_tool_call_ids_the_graph_cannot_key_are_forwarded_and_keyed_downstream() -> None:
    """An id ending in whitespace stays the layer-1 disambiguator (the envelope accepts it); the
    ToolCall and Event ids built from it are keyed (`keys.graph_key`), so the engine never sees
    an id it would crash on."""
    event = {"type": "tool_call", "runId": "r1", "id": "tc1 ", "name": "bash", "input": {}}
    (envelope,) = conversation_envelopes(CID, stored([event]))
    assert envelope["data"]["tool_call_id"] == "tc1 "
    parse_envelope(envelope)


def test_forgetting_a_conversation_settles_its_rollups(layered: IntelligenceService) -> None:
    """A conversation's ToolCalls are in the `Tool` / `ParallelGroup` rollups and its model calls
    in the `Model` rollup; forgetting it takes them out again (purged in place: `purge` reads a
    conversation `usage` back as a Model row, `layer1.model_row`)."""
    _cid, events = asyncio.run(record_otlp_conversation(MemoryEventLog(), "otlp"))
    for cid in ("acme:a", "acme:b"):
        assert feed_conversation(layered, cid, events) > 0
    assert layered.wait_applied(timeout=60)

    def rollups() -> dict[str, list[Any]]:
        queries = {
            "tools": "MATCH (t:Tool {workspace: $workspace}) RETURN t.tool_name, t.calls ORDER BY t.tool_name",
            "groups": "MATCH (g:ParallelGroup {workspace: $workspace}) RETURN g.session_id, g.width ORDER BY g.session_id",
            "models": "MATCH (m:Model {workspace: $workspace}) RETURN m.model, m.responses, m.output_tokens",
        }
        return {
            k: [list(r.values()) for r in layered.cypher(q, workspace="acme").results]
            for k, q in queries.items()
        }

    assert rollups() == {
        "tools": [["book", 2], ["weather", 4]],
        "groups": [["a", 2], ["b", 2]],
        "models": [["gpt-test", 8, 116]],
    }
    purges = layered.applier.purges_done
    layered.forget_session("acme", "a", tombstone=False)
    assert layered.wait_rebuilt(timeout=60)
    assert layered.wait_applied(timeout=60)
    assert layered.applier.purges_done == purges + 1
    assert rollups() == {
        "tools": [["book", 1], ["weather", 2]],
        "groups": [["b", 2]],
        "models": [["gpt-test", 4, 58]],
    }


@pytest.mark.parametrize("feeds", ["one event each", "three"])
def test_an_otlp_agent_whose_start_arrives_last_gives_the_in_order_graph(
    layered: IntelligenceService, feeds: str
) -> None:
    """Spans end child-first, so an OTLP agent's ``harness_start`` is stored after its model
    calls and tool calls, which fold to nothing until it arrives (no agent run owns them); then
    the session is folded again in event-time order (a repair). Fed piecemeal, the graph equals
    the graph of one feed."""
    _cid, events = asyncio.run(record_otlp_conversation(MemoryEventLog(), "otlp"))
    assert feed_conversation(layered, "whole:trip", events) > 0
    assert layered.wait_applied(timeout=60)
    (layer,) = layered.applier.planned_stages
    repairs = layer.repairs  # type: ignore[attr-defined]
    cuts = range(len(events) + 1) if feeds == "one event each" else [0, 8, 16, len(events)]
    for start, end in pairwise(cuts):
        feed_conversation(layered, "split:trip", events[start:end])
        assert layered.wait_applied(timeout=60)
    assert layered.wait_applied(timeout=60)

    def picture(workspace: str) -> dict[str, Any]:
        found = snapshot(layered, workspace)
        found["nodes"] = [node.replace(f'"workspace":"{workspace}"', "") for node in found["nodes"]]
        return found

    assert layer.repairs > repairs  # type: ignore[attr-defined]
    assert picture("split") == picture("whole")
    assert ask(layered, 19, "split") == [{"most_calls": 2, "attached_calls": 3}]
