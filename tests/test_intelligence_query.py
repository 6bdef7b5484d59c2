# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
from __future__ import annotations

import pytest

from convograph.intelligence.query import AccessDenied, QueryError, check_complexity, check_read_only
from convograph.intelligence.service import IntelligenceService
from tests.test_intelligence_support import WS, ev, falkor, names, service, session_stream, snapshot  # noqa: F401


@pytest.mark.parametrize(
    "query",
    [
        "CREATE (n:X)",
        "MATCH (n) SET n.x = 1",
        "match (n) detach delete n",
        "MATCH (n) REMOVE n:Event",
        "MERGE (n:Session {node_id: 'x'})",
        "UNWIND [1] AS x FOREACH (i IN [1] | CREATE (:Y))",
        "LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row",
        "CALL db.idx.fulltext.createNodeIndex('E', 'x')",
        "MATCH (n) CALL { CREATE (m) } RETURN n",
        "DROP INDEX ON :Event(node_id)",
        "MATCH (n) WITH n /* comment */ DELETE n",
    ],
)
def test_write_clauses_are_rejected(query: str) -> None:
    with pytest.raises(QueryError) as info:
        check_read_only(query)
    assert info.value.code == "read_only"


@pytest.mark.parametrize(
    "query",
    [
        "MATCH (e:Event) WHERE e.data CONTAINS 'CREATE (n)' RETURN e.created_by, e.offset",
        'MATCH (e) WHERE e.event_name = "session:set" RETURN count(e) // DELETE later',
        "CALL db.labels() YIELD label RETURN label",
        "MATCH (e:RemoveEvent) RETURN e.set, e.`merge`",
    ],
)
def test_reads_mentioning_write_words_in_strings_comments_or_names_pass(query: str) -> None:
    check_read_only(query)


def test_write_attempts_change_nothing(service: IntelligenceService) -> None:
    for body in session_stream():
        service.ingest(body)
    assert service.wait_applied(timeout=30)
    before = snapshot(service)
    attempts = [
        "MATCH (n) DETACH DELETE n",
        "MATCH (n:Session) SET n.status = 'hacked'",
        "CREATE (:Session {node_id: 'evil', workspace: $workspace})",
        "MATCH (n) CALL { WITH n DELETE n } RETURN 1",
    ]
    for query in attempts:
        with pytest.raises(QueryError):
            service.cypher(query, workspace=WS)
    # bypassing our guard, the engine's read-only command still refuses
    graph = service.names.graph(WS)
    with pytest.raises(Exception, match="read-only"):
        service.engine.execute(graph, "MATCH (n) DETACH DELETE n", read_only=True)
    assert snapshot(service) == before


def test_workspace_injection_override_and_errors(service: IntelligenceService) -> None:
    service.ingest(ev("session:start", 1))
    service.ingest({**ev("session:start", 2, session="other-s"), "workspace": "W2"})
    assert service.wait_applied(timeout=30)
    q = "MATCH (s:Session {workspace: $workspace}) RETURN s.node_id AS id"
    got = service.cypher(q, {"workspace": "W2"}, workspace=WS)  # injected value wins over the caller's
    assert [r["id"] for r in got.results] == [session_stream()[0]["data"]["session_id"]]
    assert service.cypher(q, workspace="*").results == []  # "*" is one database: $workspace is null
    assert len(service.cypher("MATCH (s:Session) RETURN s.node_id AS id", workspace="*").results) == 2
    with pytest.raises(QueryError) as info:
        service.cypher("MATCH (n RETURN n", workspace=WS)
    assert info.value.code == "cypher_error"
    assert "line: 1" in info.value.message  # the engine's own message
    with pytest.raises(QueryError, match=r"parameter name"):
        service.cypher("RETURN 1", {"bad name": 1}, workspace=WS)
    assert service.cypher(q, workspace="nobody").results == []


def test_restricted_keys_cannot_read_other_workspaces(service: IntelligenceService) -> None:
    service.ingest(ev("session:start", 1))
    service.ingest({**ev("session:start", 2, session="other-s"), "workspace": "W2"})
    assert service.wait_applied(timeout=30)
    mine = frozenset({"W2"})
    q = "MATCH (s:Session) RETURN s.workspace AS ws"  # no workspace filter at all
    with pytest.raises(AccessDenied):
        service.cypher(q, workspace=WS, allowed_workspaces=mine)
    assert {r["ws"] for r in service.cypher(q, workspace="*", allowed_workspaces=mine).results} == {"W2"}
    assert {r["ws"] for r in service.cypher(q, allowed_workspaces=mine).results} == {"W2"}
    with pytest.raises(QueryError) as info:
        service.cypher(q, allowed_workspaces=frozenset({"W2", WS}))
    assert info.value.code == "workspace_required"
    with pytest.raises(AccessDenied):
        service.ingest(ev("session:start", 3), allowed_workspaces=mine)


def test_row_cap_and_timeout(falkor, names) -> None:  # type: ignore[no-untyped-def]
    from tests.test_intelligence_support import make_service

    svc = make_service(falkor, names, row_cap=5, query_timeout_ms=200)
    try:
        svc.ingest(ev("session:start", 1))
        assert svc.wait_applied(timeout=30)
        capped = svc.cypher("UNWIND range(1, 100) AS x RETURN x", workspace=WS)
        assert [r["x"] for r in capped.results] == [1, 2, 3, 4, 5]
        assert capped.truncated is True
        assert svc.cypher("UNWIND range(1, 5) AS x RETURN x", workspace=WS).truncated is False
        with pytest.raises(QueryError) as info:
            svc.cypher(
                "UNWIND range(1, 5000) AS a UNWIND range(1, 5000) AS b WITH a WHERE (a * b) % 7 = 3 RETURN count(a)",
                workspace=WS,
            )
        assert info.value.code == "query_timeout"
    finally:
        svc.close()


@pytest.mark.parametrize(
    ("query", "limit"),
    [
        ("RETURN " + "+".join(["1"] * 50_000), "characters"),  # before: the engine crashed (SIGSEGV)
        ("RETURN " + "+".join(["1"] * 2_500), "operators"),
        ("RETURN [[1]]" + "[0]" * 2_500, "operators"),  # 30,000 took the engine 45 s
        ("RETURN " + "--(" * 7 + "1" + ")" * 7, "nest"),  # 18 s of parsing, not interruptible
        ("RETURN " + "-[" * 12 + "1" + "]" * 12, "nest"),  # 72 s
        ("RETURN " + "(" * 13 + "1" + ")" * 13, "nest"),
    ],
)
def test_shapes_the_engine_cannot_bound_are_refused(query: str, limit: str) -> None:
    with pytest.raises(QueryError) as info:
        check_complexity(query)
    assert info.value.code == "query_too_complex"
    assert limit in info.value.message


@pytest.mark.parametrize(
    "query",
    [
        "MATCH (s:Session)-[:HAS_EVENT]->(e:Event) WHERE NOT (e)-[:CAUSED]->() RETURN s.node_id, count(e)",
        "RETURN toInteger(round(100.0 * (count(CASE WHEN (e.x > 0) THEN 1 END)) / count(*)))",
        "RETURN -abs(-abs(-abs(-abs(1))))",
        "RETURN " + "(" * 12 + "1" + ")" * 12,
        "MATCH (e) WHERE e.data CONTAINS '((((((((((((((((((((((' RETURN e",
    ],
)
def test_ordinary_queries_pass_the_complexity_check(query: str) -> None:
    check_complexity(query)


def test_deep_params_are_refused(service: IntelligenceService) -> None:
    deep: object = 1
    for _ in range(11):
        deep = [deep]
    with pytest.raises(QueryError) as info:
        service.cypher("RETURN $p", {"p": deep}, workspace=WS)
    assert info.value.code == "invalid_params"
    assert "10 deep" in info.value.message
    assert service.cypher("RETURN $p AS p", {"p": [[[1]]]}, workspace=WS).results == [{"p": [[[1]]]}]
    with pytest.raises(QueryError) as too_long:
        service.cypher("RETURN " + "+".join(["1"] * 50_000), workspace=WS)
    assert too_long.value.code == "query_too_complex"
