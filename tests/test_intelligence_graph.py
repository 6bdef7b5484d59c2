# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
"""Seed-004 layer 1 end to end against embedded FalkorDB: every rule, convergence, collisions."""

from __future__ import annotations

import random
import time
from collections.abc import Collection
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convograph.intelligence.blobs import MemoryBlobStore
from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.journal import SqliteJournal
from convograph.intelligence.layer1 import iso_ms
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import GraphNames
from tests.test_intelligence_support import (  # noqa: F401  (fixtures)
    CHILD,
    SID,
    WS,
    ev,
    falkor,
    make_service,
    names,
    service,
    session_stream,
    snapshot,
)

T0 = 1742018545000


def load(svc: IntelligenceService, bodies: list[dict]) -> None:  # type: ignore[type-arg]
    for body in bodies:
        svc.ingest(body)
    assert svc.wait_applied(timeout=30)


def rows(svc: IntelligenceService, query: str, **params: object) -> list[dict]:  # type: ignore[type-arg]
    return svc.cypher(query, params, workspace=WS).results


def test_sessions_root_forked_and_has_fork(service: IntelligenceService) -> None:
    load(service, session_stream())
    sessions = {
        r["id"]: r
        for r in rows(
            service,
            "MATCH (s:Session {workspace: $workspace}) "
            "RETURN s.node_id AS id, labels(s) AS labels, s.parent_id AS parent,"
            " s.status AS status, s.started_at AS started, s.ended_at AS ended,"
            " s.agent_name AS agent",
        )
    }
    assert sorted(sessions[SID]["labels"]) == ["RootSession", "Session"]
    assert sorted(sessions[CHILD]["labels"]) == ["ForkedSession", "Session"]
    assert sessions[CHILD]["parent"] == SID
    assert sessions[CHILD]["agent"] == "foundation:explorer"
    assert sessions[SID]["status"] == "failed"  # payload status honoured (upstream always wrote completed)
    assert sessions[CHILD]["status"] == "completed"
    assert sessions[SID]["started"] == iso_ms(T0)
    assert sessions[SID]["ended"] == iso_ms(T0 + 120)
    assert rows(
        service,
        "MATCH (p:Session {workspace: $workspace})-[:HAS_FORK]->(c:Session) "
        "RETURN p.node_id AS p, c.node_id AS c",
    ) == [{"p": SID, "c": CHILD}]


def test_every_event_is_a_triple_labelled_node_owned_by_its_session(service: IntelligenceService) -> None:
    stream = session_stream()
    load(service, stream)
    events = rows(
        service,
        "MATCH (s:Session {workspace: $workspace})-[:HAS_EVENT]->(e:Event) "
        "RETURN s.node_id AS s, e.node_id AS id, labels(e) AS labels, e.event_name AS name,"
        " e.data AS data, e.occurred_at AS at, e.workspace AS ws",
    )
    assert len(events) == len(stream)
    by_id = {e["id"]: e for e in events}
    pre = by_id[f"{SID}__tool_pre__{T0 + 40}__call_a"]
    assert sorted(pre["labels"]) == ["Event", "ToolEvent", "ToolPreEvent"]
    assert pre["s"] == SID
    assert pre["ws"] == WS
    assert msgspec.json.decode(pre["data"])["tool_input"] == {"command": "ls"}  # full payload kept
    start = by_id[f"{SID}__session_start__{T0}"]
    assert sorted(start["labels"]) == ["Event", "SessionEvent", "SessionStartEvent"]
    assert f"{SID}__tool_pre__{T0 + 40}__call_b" in by_id  # parallel call, same ms, distinct node
    skill = by_id[f"{SID}__skill_loaded__{T0 + 100}"]
    assert sorted(skill["labels"]) == ["Event", "SkillEvent", "SkillLoadedEvent"]
    assert all("__" in e["id"] and ":" not in e["id"].split("__")[1] for e in events)


def test_lifted_fields_on_events(service: IntelligenceService) -> None:
    load(service, session_stream())
    (pre,) = rows(
        service,
        "MATCH (e:ToolPreEvent {workspace: $workspace, tool_call_id: 'call_a'}) "
        "RETURN e.tool_name AS name, e.tool_input AS input, e.parallel_group_id AS g,"
        " e.session_id AS sid, e.parent_id AS parent",
    )
    assert pre == {"name": "bash", "input": '{"command":"ls"}', "g": "g1", "sid": SID, "parent": None}
    (llm,) = rows(
        service, "MATCH (e:LlmRequestEvent {workspace: $workspace}) RETURN e.model AS m, e.provider AS p"
    )
    assert llm == {"m": "claude-sonnet-4-5", "p": "anthropic"}
    (fork,) = rows(
        service,
        "MATCH (e:SessionForkEvent {workspace: $workspace}) "
        "RETURN e.parent AS parent, e.agent_name AS agent, e.tool_call_id AS tc",
    )
    assert fork == {"parent": SID, "agent": "foundation:explorer", "tc": "call_c"}
    (spawn,) = rows(
        service,
        "MATCH (e:DelegateAgentSpawnedEvent {workspace: $workspace}) "
        "RETURN e.agent AS a, e.sub_session_id AS sub, e.parent_session_id AS parent",
    )
    assert spawn == {"a": "foundation:explorer", "sub": CHILD, "parent": SID}
    (skill,) = rows(
        service,
        "MATCH (e:SkillLoadedEvent {workspace: $workspace}) RETURN e.skill_name AS n, e.skill_directory AS d",
    )
    assert skill == {"n": "python-testing", "d": "/skills/pt"}
    nulls = rows(
        service,
        "MATCH (e:SessionStartEvent {workspace: $workspace, session_id: $sid}) RETURN keys(e) AS keys",
        sid=SID,
    )
    assert "parent_id" not in nulls[0]["keys"]  # None is never written


def test_tool_calls_lifecycle_and_outcome_read_before_offload(
    falkor: FalkorEngine, names: GraphNames
) -> None:
    svc = make_service(falkor, names, offload_threshold=1)  # offload everything offloadable
    try:
        load(svc, session_stream())
        calls = {
            r["id"]: r
            for r in rows(
                svc,
                "MATCH (s:Session {workspace: $workspace})-[:HAS_TOOL_CALL]->"
                "(t:ToolCall) RETURN s.node_id AS s, t.node_id AS id,"
                " t.tool_name AS name, t.started_at AS start, t.ended_at AS end,"
                " t.result_success AS ok, t.result_error AS err,"
                " t.parallel_group_id AS g, t.duration_ms AS ms, t.session_id AS sid",
            )
        }
        a = calls[f"{SID}__tool_call__call_a"]
        assert a == {
            "s": SID,
            "id": f"{SID}__tool_call__call_a",
            "name": "bash",
            "start": iso_ms(T0 + 40),
            "end": iso_ms(T0 + 55),
            "ok": True,
            "err": None,
            "g": "g1",
            "ms": 15,
            "sid": SID,
        }
        b = calls[f"{SID}__tool_call__call_b"]
        assert b["ok"] is False  # tool:post with result.error (upstream §10 B1 lost this)
        assert b["err"] == "bad pattern"
        d = calls[f"{CHILD}__tool_call__call_d"]
        assert d["s"] == CHILD
        assert d["ok"] is False
        assert d["err"] == "no such file"
        owned = rows(
            svc,
            "MATCH (t:ToolCall {workspace: $workspace, node_id: $id})-[:HAS_EVENT]->(e:Event) "
            "RETURN e.event_name AS n ORDER BY n",
            id=f"{SID}__tool_call__call_a",
        )
        assert [o["n"] for o in owned] == ["tool:post", "tool:pre"]
        (post,) = rows(
            svc, "MATCH (e:ToolPostEvent {workspace: $workspace, tool_call_id: 'call_a'}) RETURN e.data AS d"
        )
        assert "$blob_ref" in msgspec.json.decode(post["d"])["result"]
    finally:
        svc.close()


def test_redelivery_is_idempotent(service: IntelligenceService) -> None:
    stream = session_stream()
    load(service, stream)
    before = snapshot(service)
    results = [service.ingest(body) for body in stream]
    assert {r.status for r in results} == {"duplicate"}
    # a replay that bypasses deduplication (e.g. journal rebuilt) must not change the graph either
    service.applier.apply(service.journal.read_after(0, 10_000))
    assert snapshot(service) == before


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.randoms(use_true_random=False))
def test_any_arrival_order_builds_the_same_graph(falkor: FalkorEngine, rnd: random.Random) -> None:
    stream = session_stream()
    results = []
    for order in (stream, rnd.sample(stream, len(stream))):
        graph_names = GraphNames(f"h{rnd.getrandbits(40):x}:")
        svc = make_service(falkor, graph_names, batch_size=rnd.choice([1, 3, 1000]))
        try:
            load(svc, order)
            results.append(snapshot(svc))
        finally:
            svc.close()
            for graph in falkor.graphs():
                if graph.startswith(graph_names.prefix):
                    falkor.delete_graph(graph)
    assert results[0] == results[1]


def test_same_type_same_millisecond_events_never_merge(falkor: FalkorEngine) -> None:
    a = ev("prompt:submit", 7, prompt="first")
    b = ev("prompt:submit", 7, prompt="second")
    c = ev("prompt:submit", 7, prompt="third")
    pictures = []
    for order in ([a, b, c], [c, b, a], [b, a, c]):
        graph_names = GraphNames(f"c{random.getrandbits(40):x}:")
        svc = make_service(falkor, graph_names, batch_size=1)
        try:
            load(svc, order)
            found = rows(
                svc,
                "MATCH (e:PromptSubmitEvent {workspace: $workspace}) "
                "RETURN e.node_id AS id, e.prompt AS p ORDER BY id",
            )
            pictures.append(found)
        finally:
            svc.close()
            for graph in falkor.graphs():
                if graph.startswith(graph_names.prefix):
                    falkor.delete_graph(graph)
    assert len(pictures[0]) == 3
    assert pictures[0] == pictures[1] == pictures[2]
    base = f"{SID}__prompt_submit__{T0 + 7}"
    ids = [row["id"] for row in pictures[0]]
    assert ids[0] == base  # one keeps the seed id, the others get a fingerprint suffix
    assert all(i.startswith(base + "__") and len(i) == len(base) + 14 for i in ids[1:])


def _durable(falkor: FalkorEngine, names: GraphNames, path: Path) -> IntelligenceService:
    svc = IntelligenceService(SqliteJournal(path), falkor, MemoryBlobStore(), names=names)
    svc.start()
    return svc


@pytest.mark.parametrize("winner_first", [True, False])
def test_a_collision_with_an_event_planned_before_a_restart_is_still_told_apart(
    falkor: FalkorEngine, names: GraphNames, tmp_path: Path, winner_first: bool
) -> None:
    """The applier asks the journal about collisions only for base ids its filter has seen
    (`GraphApplier._planned`); after a restart the filter is filled from the journal, so an event
    arriving then that shares a millisecond with one already in the graph still gets (or gives
    away) the seed id, and a replay or redelivery changes nothing."""
    a, b = ev("prompt:submit", 7, prompt="first"), ev("prompt:submit", 7, prompt="second")
    first, second = (a, b) if winner_first else (b, a)
    reference_names = GraphNames(f"r{random.getrandbits(40):x}:")
    reference = make_service(falkor, reference_names)
    journal = tmp_path / "journal.sqlite3"
    try:
        load(reference, [a, b])
        expected = snapshot(reference)
        before = _durable(falkor, names, journal)
        load(before, [first])
        before.close()
        after = _durable(falkor, names, journal)
        try:
            load(after, [second])
            assert snapshot(after) == expected
            found = rows(after, "MATCH (e:PromptSubmitEvent {workspace: $workspace}) RETURN e.node_id AS id")
            assert len(found) == 2
            assert f"{SID}__prompt_submit__{T0 + 7}" in {r["id"] for r in found}
            load(after, [a, b])  # redelivered: duplicates
            head = str(after.journal.last_seq())
            falkor.set_meta(after.applier.cursor_key, "0")  # the graph store lost its cursor: replay all
            after.applier.notify()
            deadline = time.monotonic() + 30
            while falkor.get_meta(after.applier.cursor_key) != head and time.monotonic() < deadline:
                time.sleep(0.01)
            assert falkor.get_meta(after.applier.cursor_key) == head
            assert snapshot(after) == expected
        finally:
            after.close()
    finally:
        reference.close()
        for graph in falkor.graphs():
            if graph.startswith(reference_names.prefix):
                falkor.delete_graph(graph)


def test_the_planner_asks_the_journal_only_about_base_ids_seen_before(
    falkor: FalkorEngine, names: GraphNames
) -> None:
    svc = make_service(falkor, names)
    asked: list[list[str]] = []
    real = svc.journal.collision_groups

    def spy(workspace: str, events: Collection[tuple[str, int]]) -> dict[str, list[str]]:
        asked.append(sorted(base_id for base_id, _ in events))
        return real(workspace, events)

    svc.journal.collision_groups = spy  # type: ignore[method-assign]
    try:
        load(svc, [ev("prompt:submit", 1, prompt="x"), ev("prompt:submit", 2, prompt="y")])
        assert asked == []
        load(svc, [ev("prompt:submit", 1, prompt="z"), ev("prompt:submit", 3, prompt="w")])
        assert asked == [[f"{SID}__prompt_submit__{T0 + 1}"]]
        found = rows(svc, "MATCH (e:PromptSubmitEvent {workspace: $workspace}) RETURN e.node_id AS id")
        assert len(found) == 4
    finally:
        svc.close()


def test_lifted_subnormal_floats_reach_the_graph_as_zeros(service: IntelligenceService) -> None:
    """FalkorDB refuses subnormal literals; the Event rows skip the scan for them
    (`engine.NormalFloatList`), so the lifter flushes them (the stored ``data`` keeps them)."""
    load(service, [ev("artifact:write", 5, bytes=5e-324, path=[-5e-324, 1.5])])
    (found,) = rows(
        service,
        "MATCH (e:ArtifactEvent {workspace: $workspace}) RETURN e.bytes AS b, e.path AS p, e.data AS d",
    )
    assert found["b"] == 0.0
    assert found["p"] == [0.0, 1.5]
    assert "5e-324" in found["d"]
    assert service.status()["dead_letters"] == 0


def test_unknown_event_names_and_workspaces_are_separate_graphs(service: IntelligenceService) -> None:
    load(service, [ev("drumbeat:tick_tock", 1), {**ev("session:start", 2), "workspace": "other"}])
    (tick,) = rows(service, "MATCH (e:DrumbeatEvent {workspace: $workspace}) RETURN labels(e) AS l")
    assert sorted(tick["l"]) == ["DrumbeatEvent", "DrumbeatTickTockEvent", "Event"]
    assert service.cypher("MATCH (s:Session) RETURN s.workspace AS ws", workspace="other").results == [
        {"ws": "other"}
    ]
    every = service.cypher("MATCH (s:Session) RETURN s.workspace AS ws", workspace="*").results
    assert sorted(r["ws"] for r in every) == sorted([WS, "other"])


@pytest.mark.parametrize("threshold", [1, 1 << 30])
def test_blob_round_trip_through_the_service(falkor: FalkorEngine, names: GraphNames, threshold: int) -> None:
    svc = make_service(falkor, names, offload_threshold=threshold)
    try:
        big = {"success": True, "output": "z" * 10_000, "error": None}
        load(svc, [ev("tool:post", 3, tool_call_id="c9", tool_name="read_file", result=big)])
        uris = svc.list_blobs(SID)
        if threshold > 1:
            assert uris == []
            return
        (uri,) = uris
        session_id, key = uri.removeprefix("ci-blob://").split("/", 1)
        assert msgspec.json.decode(svc.read_blob(session_id, key)) == big
        (row,) = rows(svc, "MATCH (e:ToolPostEvent {workspace: $workspace}) RETURN e.data AS d")
        assert msgspec.json.decode(row["d"])["result"]["$blob_ref"] == uri
    finally:
        svc.close()
