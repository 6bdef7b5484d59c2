# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
"""Semantic layers on a real FalkorDB: replays, shuffles, restarts and small batches converge."""

from __future__ import annotations

import itertools
import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convograph.intelligence.blobs import MemoryBlobStore
from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.journal import MemoryJournal
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import GraphNames
from tests.test_intelligence_support import falkor, snapshot  # noqa: F401  (fixture)

DATASET = Path(__file__).resolve().parent / "fixtures" / "ci_layers.ndjson"
LINES: list[dict[str, Any]] = [json.loads(x) for x in DATASET.read_text(encoding="utf-8").splitlines()]
WS = LINES[0]["workspace"]
SEMANTIC = (
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


def shuffled_across_sessions(lines: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """A random interleaving of the sessions that keeps each session's own order."""
    queues: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        queues.setdefault(line["data"]["session_id"], []).append(line)
    rng = random.Random(seed)
    order = [sid for sid, q in queues.items() for _ in q]
    rng.shuffle(order)
    cursors = dict.fromkeys(queues, 0)
    out = []
    for sid in order:
        out.append(queues[sid][cursors[sid]])
        cursors[sid] += 1
    return out


class Graphs:
    def __init__(self, engine: FalkorEngine) -> None:
        self.engine = engine
        self.prefixes: list[str] = []

    def service(self, journal: MemoryJournal | None = None, prefix: str | None = None, **options: Any) -> Any:
        if prefix is None:
            prefix = f"r{uuid.uuid4().hex[:10]}:"
            self.prefixes.append(prefix)
        svc = IntelligenceService(
            journal or MemoryJournal(),
            self.engine,
            MemoryBlobStore(),
            names=GraphNames(prefix),
            semantic_layers=True,
            **options,
        )
        svc.start()
        return svc


@pytest.fixture
def graphs(falkor: FalkorEngine) -> Iterator[Graphs]:
    made = Graphs(falkor)
    yield made
    for graph in falkor.graphs():
        if any(graph.startswith(p) for p in made.prefixes):
            falkor.delete_graph(graph)


def picture(service: IntelligenceService) -> dict[str, Any]:
    """Counts per label set and relationship type, and the ids of every semantic entity."""
    labels = service.cypher("MATCH (n) RETURN labels(n) AS l, count(*) AS c", workspace=WS).results
    types = service.cypher("MATCH ()-[r]->() RETURN type(r) AS t, count(*) AS c", workspace=WS).results
    ids = service.cypher(
        "MATCH (n) WHERE any(l IN labels(n) WHERE l IN $semantic) RETURN labels(n)[0] AS l, n.node_id AS id",
        {"semantic": list(SEMANTIC)},
        workspace=WS,
    ).results
    return {
        "labels": sorted((tuple(r["l"]), r["c"]) for r in labels),
        "types": sorted((r["t"], r["c"]) for r in types),
        "ids": sorted((r["l"], r["id"]) for r in ids),
    }


def ingest(service: IntelligenceService, lines: list[dict[str, Any]]) -> None:
    service.ingest_many(lines)
    assert service.wait_applied(timeout=120)
    assert service.applier.dead_lettered == 0, service.applier.last_error


def test_replaying_the_log_twice_shuffled_across_sessions_gives_identical_graphs(graphs: Graphs) -> None:
    first = graphs.service()
    ingest(first, LINES)
    expected = picture(first)
    assert dict(expected["types"])["SOURCED_FROM"] > 0
    for seed in (1, 2):
        other = graphs.service()
        ingest(other, shuffled_across_sessions(LINES, seed))
        assert picture(other) == expected
        other.close()
    first.close()


def test_no_self_loops_and_no_duplicate_iterations(graphs: Graphs) -> None:
    service = graphs.service()
    ingest(service, LINES)
    loops = service.cypher("MATCH (n)-[r]->(n) RETURN count(r) AS c", workspace=WS).results
    assert loops == [{"c": 0}]
    per_request = service.cypher(
        "MATCH (i:Iteration)-[:SOURCED_FROM]->(e:ProviderRequestEvent) "
        "WITH e, count(i) AS n RETURN max(n) AS most, count(e) AS requests",
        workspace=WS,
    ).results
    requests = sum(1 for line in LINES if line["event"] == "provider:request")
    assert per_request == [{"most": 1, "requests": requests}]
    # provenance points at real Event nodes, and every derived span has some
    dangling = service.cypher(
        "MATCH ()-[:SOURCED_FROM]->(e) WHERE NOT e:Event OR e.event_name IS NULL RETURN count(e) AS c",
        workspace=WS,
    ).results
    assert dangling == [{"c": 0}]
    unsourced = service.cypher(
        "MATCH (n) WHERE (n:OrchestratorRun OR n:Iteration OR n:Prompt OR n:Delegation OR n:SkillLoad"
        " OR n:RecipeRun OR n:RecipeStep OR n:ContentBlock OR n:ContextCompaction OR n:Cancellation)"
        " AND NOT (n)-[:SOURCED_FROM]->(:Event) RETURN count(n) AS c",
        workspace=WS,
    ).results
    assert unsourced == [{"c": 0}]
    service.close()


def test_redelivery_rewind_and_restart_add_nothing(graphs: Graphs) -> None:
    journal = MemoryJournal()
    service = graphs.service(journal)
    ingest(service, LINES)
    expected = picture(service)
    result = service.ingest_many(LINES)  # the hook client re-sends everything
    assert result.accepted == 0
    prefix = service.names.prefix
    cursor_key = service.applier.cursor_key
    service.close()
    # restart mid-way: a new process (empty fold cache) whose graph store is behind the journal
    half = journal.last_seq() // 2
    service.engine.set_meta(cursor_key, str(half))
    restarted = graphs.service(journal, prefix=prefix)
    assert restarted.wait_applied(timeout=120)
    assert restarted.applier.dead_lettered == 0
    layer = restarted.applier.planned_stages[0]
    assert layer.rebuilds > 0  # fold states were rebuilt from the journal, mid-session
    assert picture(restarted) == expected
    restarted.close()


def test_tiny_batches_give_the_same_graph(graphs: Graphs) -> None:
    whole = graphs.service()
    ingest(whole, LINES)
    tiny = graphs.service(batch_size=37)
    for start in range(0, len(LINES), 101):
        tiny.ingest_many(LINES[start : start + 101])
    assert tiny.wait_applied(timeout=120)
    assert picture(tiny) == picture(whole)
    whole.close()
    tiny.close()


def _hook(event: str, ms: int, sid: str, **fields: Any) -> dict[str, Any]:
    from convograph.intelligence.layer1 import iso_ms

    return {
        "event": event,
        "workspace": WS,
        "data": {"session_id": sid, "timestamp": iso_ms(1772442000000 + ms), **fields},
    }


def self_chain() -> list[list[dict[str, Any]]]:
    """root → C1 (explorer) → self → C2 (fork metadata says self) → self → C3, per session."""
    root = [
        _hook("session:start", 0, "R"),
        _hook(
            "delegate:agent_spawned",
            1,
            "R",
            parent_session_id="R",
            sub_session_id="C1",
            agent="explorer",
            tool_call_id="t1",
        ),
    ]
    c1 = [
        _hook("session:fork", 2, "C1", parent="R", metadata={"agent_name": "explorer"}),
        _hook(
            "delegate:agent_spawned",
            3,
            "C1",
            parent_session_id="C1",
            sub_session_id="C2",
            agent="self",
            tool_call_id="t2",
        ),
    ]
    c2 = [
        _hook("session:fork", 4, "C2", parent="C1", metadata={"agent_name": "self"}),
        _hook(
            "delegate:agent_spawned",
            5,
            "C2",
            parent_session_id="C2",
            sub_session_id="C3",
            agent="self",
            tool_call_id="t3",
        ),
    ]
    c3 = [_hook("session:fork", 6, "C3", parent="C2", metadata={"agent_name": "self"})]
    return [root, c1, c2, c3]


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1)])
def test_self_delegation_resolves_across_sessions_in_any_order(
    graphs: Graphs, order: tuple[int, ...]
) -> None:
    service = graphs.service()
    sessions = self_chain()
    for index in order:  # one batch per session: the chain's links arrive in this order
        service.ingest_many(sessions[index])
        assert service.wait_applied(timeout=60)
    resolved = service.cypher(
        "MATCH (d:Delegation {workspace: $workspace}) RETURN d.sub_session_id AS child, d.resolved_agent AS agent"
        " ORDER BY child",
        workspace=WS,
    ).results
    assert resolved == [
        {"child": "C1", "agent": "explorer"},
        {"child": "C2", "agent": "explorer"},
        {"child": "C3", "agent": "explorer"},
    ]
    agents = service.cypher(
        "MATCH (s:Session {workspace: $workspace})-[:HAS_AGENT]->(a:Agent) RETURN s.node_id AS s, a.name AS a ORDER BY s",
        workspace=WS,
    ).results
    assert agents == [
        {"s": "C1", "a": "explorer"},
        {"s": "C2", "a": "explorer"},
        {"s": "C3", "a": "explorer"},
    ]
    service.close()


# --- arrival order (issue 26 item 9): event-time folds ---------------------------------------------


def untied(delivered: list[dict[str, Any]], original: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``delivered`` with the events of each session that share a timestamp put back in their
    ``original`` relative order: journal order breaks event-time ties, so only such deliveries
    must give the in-order graph."""

    def tie(line: dict[str, Any]) -> tuple[str, str]:
        return line["data"]["session_id"], line["data"]["timestamp"]

    queues: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for line in original:
        queues.setdefault(tie(line), []).append(line)
    cursors = dict.fromkeys(queues, 0)
    out = []
    for line in delivered:
        key = tie(line)
        out.append(queues[key][cursors[key]])
        cursors[key] += 1
    return out


def deliver(service: IntelligenceService, lines: list[dict[str, Any]], cuts: list[int]) -> None:
    """``lines`` as separate batches at ``cuts`` (each applied before the next is sent)."""
    bounds = [0, *sorted({cut % (len(lines) + 1) for cut in cuts}), len(lines)]
    for start, end in itertools.pairwise(bounds):
        if start < end:
            ingest(service, lines[start:end])


_IN_ORDER: dict[str, Any] = {}


def in_order_graph(graphs: Graphs) -> Any:
    """The fixture ingested in order (its `snapshot`), computed once."""
    if not _IN_ORDER:
        service = graphs.service()
        ingest(service, LINES)
        _IN_ORDER["graph"] = snapshot(service, WS)
        service.close()
    return _IN_ORDER["graph"]


@pytest.mark.parametrize("batch", [None, 100])
def test_reversed_delivery_gives_the_in_order_graph(graphs: Graphs, batch: int | None) -> None:
    """The whole fixture delivered backwards (ties kept in order), in one batch or in batches of
    100 whose every event arrives late: the graph of the in-order delivery, every node with its
    properties and every edge (it was 1,668 nodes / 3,183 edges against 1,655 / 3,488, with no
    CAUSED edge, no RecipeStep and 41 ContextCompactions instead of 26)."""
    expected = in_order_graph(graphs)
    service = graphs.service()
    lines = untied(list(reversed(LINES)), LINES)
    deliver(service, lines, [] if batch is None else list(range(batch, len(lines), batch)))
    assert snapshot(service, WS) == expected
    layer = service.applier.planned_stages[0]
    assert (layer.repairs > 0) == (batch is not None)
    service.close()


SESSION_IDS = sorted({line["data"]["session_id"] for line in LINES})


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(SESSION_IDS), st.randoms(use_true_random=False), st.lists(st.integers(0, 200), max_size=4)
)
def test_any_permutation_of_a_session_gives_the_same_graph(
    graphs: Graphs, session_id: str, rnd: random.Random, cuts: list[int]
) -> None:
    """One session's events in any order (ties kept), delivered in any batches after the other
    sessions: the in-order graph."""
    expected = in_order_graph(graphs)
    own = [line for line in LINES if line["data"]["session_id"] == session_id]
    others = [line for line in LINES if line["data"]["session_id"] != session_id]
    shuffled = list(own)
    rnd.shuffle(shuffled)
    service = graphs.service()
    ingest(service, others)
    deliver(service, untied(shuffled, own), cuts)
    assert snapshot(service, WS) == expected
    service.close()
