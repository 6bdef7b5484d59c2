"""``workspace: "*"`` answers as one database (issue 26 item 8): the all-workspaces graph
(`convograph.intelligence.union`) on a real embedded FalkorDB.

Before: one row per workspace for ``MATCH (s:Session) RETURN count(s)``, N rows for ``RETURN 1``,
each workspace's name for ``RETURN $workspace``; ORDER BY and LIMIT applied per workspace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import GraphNames
from tests.test_intelligence_support import ev, falkor, make_service, names  # noqa: F401

CI_SMALL = next(
    (p / "shared" / "workloads" / "ci-small.ndjson" for p in Path(__file__).resolve().parents
     if (p / "shared" / "workloads" / "ci-small.ndjson").exists()),
    None,
)  # fmt: skip
SESSIONS = {"W1": ["a", "b"], "W2": ["c", "d", "e"], "W3": ["f"]}


def in_workspace(body: dict[str, Any], workspace: str) -> dict[str, Any]:
    return {**body, "workspace": workspace}


@pytest.fixture
def three(falkor: FalkorEngine, names: GraphNames) -> Iterator[IntelligenceService]:  # noqa: F811
    svc = make_service(falkor, names)
    for workspace, sessions in SESSIONS.items():
        for n, session in enumerate(sessions):
            svc.ingest(in_workspace(ev("session:start", n, session=f"{workspace}-{session}"), workspace))
            svc.ingest(
                in_workspace(
                    ev("prompt:submit", n + 10, session=f"{workspace}-{session}", prompt="p"), workspace
                )
            )
    assert svc.wait_applied(timeout=30)
    yield svc
    svc.close()


def test_a_star_query_answers_as_one_database(three: IntelligenceService) -> None:
    assert three.cypher("MATCH (s:Session) RETURN count(s) AS n", workspace="*").results == [{"n": 6}]
    assert three.cypher("RETURN 1 AS one", workspace="*").results == [{"one": 1}]
    assert three.cypher("RETURN $workspace AS ws", workspace="*").results == [{"ws": None}]
    assert three.cypher("RETURN $workspace AS ws", {"workspace": "W2"}, workspace="*").results == [
        {"ws": "W2"}
    ]
    first = three.cypher("MATCH (s:Session) RETURN s.node_id AS id ORDER BY id LIMIT 2", workspace="*")
    assert [r["id"] for r in first.results] == ["W1-a", "W1-b"]
    last = three.cypher("MATCH (s:Session) RETURN s.node_id AS id ORDER BY id DESC LIMIT 2", workspace="*")
    assert [r["id"] for r in last.results] == ["W3-f", "W2-e"]
    per = three.cypher(
        "MATCH (s:Session) RETURN s.workspace AS ws, count(*) AS n ORDER BY ws", workspace="*"
    ).results
    assert per == [{"ws": "W1", "n": 2}, {"ws": "W2", "n": 3}, {"ws": "W3", "n": 1}]
    # no workspace at all is the same as "*" for an unrestricted key (upstream: the whole database)
    assert three.cypher("MATCH (s:Session) RETURN count(s) AS n").results == [{"n": 6}]
    # a named workspace still runs on its own graph, with $workspace set
    assert three.cypher(
        "MATCH (s:Session {workspace: $workspace}) RETURN count(s) AS n", workspace="W2"
    ).results == [{"n": 3}]


def test_a_key_limited_to_some_workspaces_never_reads_the_shared_graph(three: IntelligenceService) -> None:
    mine = frozenset({"W1", "W3"})
    rows = three.cypher(
        "MATCH (s:Session) RETURN count(s) AS n", workspace="*", allowed_workspaces=mine
    ).results
    assert rows == [{"n": 2}, {"n": 1}]  # per workspace graph, as before: it may not see W2's
    one = three.cypher("MATCH (s:Session) RETURN count(s) AS n", allowed_workspaces=frozenset({"W2"})).results
    assert one == [{"n": 3}]


def picture(engine: FalkorEngine, graph: str, workspace: str) -> dict[str, list[Any]]:
    """Nodes (labels, properties) and edges (ends, type, properties) of ``workspace`` in ``graph``."""
    encode = msgspec.json.Encoder(order="sorted").encode
    nodes = engine.execute(
        graph,
        "MATCH (n) WHERE n.workspace = $ws RETURN labels(n), properties(n)",
        {"ws": workspace},
        read_only=True,
    ).rows
    edges = engine.execute(
        graph,
        "MATCH (a)-[r]->(b) WHERE a.workspace = $ws RETURN a.node_id, type(r), properties(r), b.node_id",
        {"ws": workspace},
        read_only=True,
    ).rows
    return {
        "nodes": sorted(encode([sorted(labels), props]).decode() for labels, props in nodes),
        "edges": sorted(encode(edge).decode() for edge in edges),
    }


def assert_mirrored(svc: IntelligenceService) -> None:
    engine = svc.engine
    assert isinstance(engine, FalkorEngine)
    workspaces = [ws for ws in (svc.names.workspace(g) for g in engine.graphs()) if ws is not None]
    assert workspaces
    shared = svc.names.all_graph
    for workspace in workspaces:
        assert picture(engine, shared, workspace) == picture(engine, svc.names.graph(workspace), workspace), (
            workspace
        )
    total = engine.execute(shared, "MATCH (n) RETURN count(n)", read_only=True).rows[0][0]
    assert total == sum(
        engine.execute(svc.names.graph(ws), "MATCH (n) RETURN count(n)", read_only=True).rows[0][0]
        for ws in workspaces
    )


@pytest.mark.skipif(CI_SMALL is None, reason="shared workloads not found")
def test_the_shared_graph_equals_the_workspace_graphs_through_forgetting_and_rebuilds(
    falkor: FalkorEngine,  # noqa: F811
    names: GraphNames,  # noqa: F811
) -> None:
    """Every layer (semantic ones included) over 4 workspaces; then an in-place purge (which
    addresses nodes by internal id) and a workspace rebuild (which deletes its graph)."""
    assert CI_SMALL is not None
    lines = CI_SMALL.read_bytes().splitlines()
    svc = make_service(falkor, names, semantic_layers=True)
    try:
        assert svc.ingest_many(lines).accepted == len(lines)
        assert svc.wait_applied(timeout=120)
        assert svc.status()["dead_letters"] == 0
        assert_mirrored(svc)
        first = msgspec.json.decode(lines[0])
        workspace, session = first["workspace"], first["data"]["session_id"]
        rebuilds = svc.applier.rebuilds_done
        svc.forget_session(workspace, session)
        assert svc.wait_rebuilt(timeout=120)
        assert svc.applier.rebuilds_done == rebuilds  # purged in place, by internal ids
        assert_mirrored(svc)
        with svc.applier.rebuild_after(workspace) as forgotten:
            forgotten.append("no-such-session")  # forces a rebuild of the whole workspace graph
        assert svc.wait_rebuilt(timeout=120)
        assert svc.wait_applied(timeout=120)
        assert_mirrored(svc)
    finally:
        svc.close()


def test_a_deployment_without_the_shared_graph_gets_it_by_a_copy(
    falkor: FalkorEngine,  # noqa: F811
    names: GraphNames,  # noqa: F811
) -> None:
    before = make_service(falkor, names, all_workspaces_graph=False, semantic_layers=True)
    for workspace, sessions in SESSIONS.items():
        for n, session in enumerate(sessions):
            for step, event in enumerate(
                ("session:start", "prompt:submit", "execution:start", "session:end")
            ):
                before.ingest(
                    in_workspace(ev(event, n * 10 + step, session=f"{workspace}-{session}"), workspace)
                )
    assert before.wait_applied(timeout=30)
    before.close()
    assert names.all_graph not in falkor.graphs()
    after = make_service(falkor, names, semantic_layers=True)  # starts with the copy
    try:
        assert names.all_graph in falkor.graphs()
        assert_mirrored(after)
        assert after.cypher("MATCH (s:Session) RETURN count(s) AS n", workspace="*").results == [{"n": 6}]
        for workspace in SESSIONS:  # written after the copy: the same strings as the copied ones
            after.ingest(in_workspace(ev("session:start", 99, session=f"{workspace}-new"), workspace))
        assert after.wait_applied(timeout=30)
        grouped = after.cypher(
            "MATCH (s:Session) RETURN s.workspace AS ws, count(*) AS n ORDER BY ws", workspace="*"
        ).results  # FalkorDB groups an interned and a plain copy of a string apart: one row each
        assert grouped == [{"ws": "W1", "n": 3}, {"ws": "W2", "n": 4}, {"ws": "W3", "n": 2}]
    finally:
        after.close()


@pytest.mark.skipif(CI_SMALL is None, reason="shared workloads not found")
def test_a_replay_onto_the_graphs_it_wrote_adds_nothing_to_the_shared_graph(
    falkor: FalkorEngine,  # noqa: F811
    names: GraphNames,  # noqa: F811
) -> None:
    """A cursor behind the graphs (a crash between a write and its cursor, or one graph server of
    several restarted empty) replays batches the graphs hold already. The workspace graphs' unique
    constraint turns the replayed ``CREATE`` into the ``MERGE`` form; the shared graph's composite
    constraint did not see ``intern()``-ed workspace values, so every replayed event was in it twice."""
    assert CI_SMALL is not None
    lines = CI_SMALL.read_bytes().splitlines()
    svc = make_service(falkor, names, semantic_layers=True)
    try:
        assert svc.ingest_many(lines[:1000]).accepted == 1000
        assert svc.wait_applied(timeout=120)
        falkor.set_meta(svc.applier.cursor_key, "0")  # the graphs are ahead of the cursor
        assert svc.ingest_many(lines[1000:]).accepted == len(lines) - 1000
        assert svc.wait_applied(timeout=120)
        assert svc.cypher("MATCH (e:Event) RETURN count(e) AS n", workspace="*").results == [
            {"n": len(lines)}
        ]
        assert_mirrored(svc)
    finally:
        svc.close()
