# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from litestar import Litestar, Request
from litestar.testing import TestClient

from convograph.intelligence.engine import EngineUnavailable
from convograph.intelligence.http import Principal, create_intelligence_router
from convograph.intelligence.service import IntelligenceService
from tests.test_intelligence_support import (  # noqa: F401
    CHILD,
    SID,
    WS,
    ev,
    falkor,
    names,
    service,
    session_stream,
)


def amplifier_key(body: dict[str, Any]) -> str:
    """The Amplifier hook client's deterministic idempotency key."""
    canonical = json.dumps(
        {"event": body["event"], "workspace": body["workspace"], "data": body["data"]},
        sort_keys=True,
        separators=(",", ":"),
    )
    return "aci-event-v1:" + hashlib.sha256(canonical.encode()).hexdigest()


def principal_from_header(request: Request[Any, Any, Any]) -> Principal:
    allowed = request.headers.get("x-test-workspaces")
    return Principal(
        created_by=request.headers.get("x-test-user"),
        allowed_workspaces=frozenset(allowed.split(",")) if allowed else None,
    )


@pytest.fixture
def client(service: IntelligenceService) -> Iterator[TestClient[Litestar]]:
    app = Litestar(route_handlers=[create_intelligence_router(service, principal=principal_from_header)])
    with TestClient(app) as test_client:
        yield test_client


def test_post_events_like_the_amplifier_hook_client(
    client: TestClient[Litestar], service: IntelligenceService
) -> None:
    body = ev("session:start", 1, parent_id=None)
    body["idempotency_key"] = amplifier_key(body)
    first = client.post("/events", json=body, headers={"x-test-user": "alice"})
    assert first.status_code == 202
    assert first.json() == {"status": "queued", "session_id": SID}
    again = client.post("/events", json=body)
    assert again.status_code == 202
    assert again.json()["status"] == "duplicate"
    # the upload CLI replays events.jsonl lines, which also carry a top-level timestamp
    replayed = client.post("/events?replay=true", json={**body, "timestamp": body["data"]["timestamp"]})
    assert replayed.json()["status"] == "duplicate"
    assert service.wait_applied(timeout=30)
    rows = client.post(
        "/cypher",
        json={"query": "MATCH (e:Event {workspace: $workspace}) RETURN e.created_by AS who", "workspace": WS},
    ).json()
    assert rows == {"columns": ["who"], "results": [{"who": "alice"}], "truncated": False}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"event": "x", "workspace": WS, "data": {"session_id": SID}}, "invalid_timestamp"),
        (
            {
                "event": "x",
                "workspace": " ",
                "data": {"session_id": SID, "timestamp": "2026-01-01T00:00:00Z"},
            },
            "invalid_workspace",
        ),
        (
            {"event": "x", "workspace": WS, "data": {"timestamp": "2026-01-01T00:00:00Z"}},
            "missing_session_id",
        ),
        (
            {
                "event": "x",
                "workspace": WS,
                "data": {"session_id": "../x", "timestamp": "2026-01-01T00:00:00Z"},
            },
            "invalid_session_id",
        ),
    ],
)
def test_invalid_events_get_400_with_a_named_field(
    client: TestClient[Litestar], body: dict[str, Any], code: str
) -> None:
    response = client.post("/events", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert "field" in error["details"]


def test_malformed_json_is_400(client: TestClient[Litestar]) -> None:
    response = client.post("/events", content=b"{nope", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_batches_as_ndjson_and_arrays_are_all_or_nothing(
    client: TestClient[Litestar], service: IntelligenceService
) -> None:
    stream = session_stream()
    ndjson = "\n".join(json.dumps(b) for b in stream[:5]).encode()
    ok = client.post("/events", content=ndjson, headers={"content-type": "application/x-ndjson"})
    assert ok.status_code == 202
    assert ok.json()["accepted"] == 5
    bad = [*stream[5:8], {"event": "x", "workspace": WS, "data": {"session_id": SID}}]
    rejected = client.post("/events", json=bad)
    assert rejected.status_code == 422
    assert rejected.json()["error"]["details"][0]["index"] == 3
    assert service.journal.last_seq() == 5  # nothing of the bad batch was stored
    again = client.post("/events", json=stream[:8])
    assert again.json() == {"status": "queued", "accepted": 3, "duplicates": 5, "last_seq": 8}


def test_cypher_errors_and_read_only(client: TestClient[Litestar]) -> None:
    bad = client.post("/cypher", json={"query": "MATCH (n RETURN n", "workspace": WS})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "cypher_error"
    write = client.post("/cypher", json={"query": "CREATE (n:X) RETURN n", "workspace": WS})
    assert write.status_code == 400
    assert write.json()["error"]["code"] == "read_only"
    shape = client.post("/cypher", json={"nope": 1})
    assert shape.status_code == 400


def test_cypher_limits_are_named_in_4xx_answers(
    client: TestClient[Litestar], service: IntelligenceService
) -> None:
    """Issue 26: a runaway query is answered with a 4xx naming the limit (not a 503 after 60 s)."""
    from convograph.intelligence.engine import FalkorEngine
    from convograph.intelligence.http import CYPHER_MAX_BODY_BYTES

    client.post("/events", json=ev("session:start", 1))
    assert service.wait_applied(timeout=30)
    service.query_timeout_ms = 200
    runaway = {
        "query": "RETURN size(reduce(s = '', x IN range(1, 100000) | s + 'aaaaaaaaaa'))",
        "workspace": WS,
    }
    for _ in range(2):
        slow = client.post("/cypher", json=runaway, headers={"x-test-user": "mallory"})
        assert slow.status_code == 400
        assert slow.json()["error"]["code"] == "query_timeout"
        assert "200 ms" in slow.json()["error"]["message"]
    busy = client.post("/cypher", json={"query": "RETURN 1"}, headers={"x-test-user": "mallory"})
    assert busy.status_code == 429
    assert busy.headers["retry-after"] == "1"
    assert busy.json()["error"]["code"] == "too_many_queries"
    assert "2 queries" in busy.json()["error"]["message"]
    other = client.post(
        "/cypher", json={"query": "RETURN 1 AS one", "workspace": WS}, headers={"x-test-user": "bob"}
    )
    assert other.json()["results"] == [{"one": 1}]
    big = client.post("/cypher", json={"query": "RETURN size(range(1, 200000000))", "workspace": WS})
    assert big.status_code == 400
    assert big.json()["error"]["code"] == "query_memory"
    assert "512 MB" in big.json()["error"]["message"]
    huge = client.post("/cypher", json={"query": "RETURN $p", "params": {"p": "x" * CYPHER_MAX_BODY_BYTES}})
    assert huge.status_code == 413
    engine = service.engine
    assert isinstance(engine, FalkorEngine)
    deadline = time.monotonic() + 120
    while engine._read_pool().in_flight() and time.monotonic() < deadline:  # the runaways end
        time.sleep(0.1)


def test_batches_are_capped_and_stored_off_the_event_loop(service: IntelligenceService) -> None:
    """Issue 26: a 25 MB batch held the event loop for ~10 s (every other request waited)."""
    import threading

    app = Litestar(
        route_handlers=[create_intelligence_router(service, max_batch_events=60_000)],
        request_max_body_size=64 * 1024 * 1024,
    )
    lines = [
        json.dumps({**ev("x:y", 0, session=f"s{i}"), "idempotency_key": f"k{i}"}).encode()
        for i in range(60_001)
    ]
    ndjson = {"content-type": "application/x-ndjson"}
    with TestClient(app, timeout=600) as client:
        too_many = client.post("/events", content=b"\n".join(lines), headers=ndjson)
        assert too_many.status_code == 413
        assert too_many.json()["error"]["code"] == "batch_too_large"
        assert "60,000" in too_many.json()["error"]["message"]
        storing, stored = threading.Event(), threading.Event()
        ingest_many = service.ingest_many

        def observed(*args: Any, **kwargs: Any) -> Any:
            storing.set()
            try:
                return ingest_many(*args, **kwargs)
            finally:
                stored.set()

        service.ingest_many = observed  # type: ignore[method-assign]
        replies: list[int] = []
        thread = threading.Thread(
            target=lambda: replies.append(
                client.post("/events", content=b"\n".join(lines[:-1]), headers=ndjson).status_code
            )
        )
        thread.start()
        assert storing.wait(120)
        answered_while_storing = 0
        while not stored.is_set():
            assert client.get("/intelligence/status").status_code == 200
            answered_while_storing += not stored.is_set()
        thread.join()
        assert replies == [202]
        assert answered_while_storing >= 1, "the event loop was held while the batch was stored"


def test_a_star_query_over_http_is_one_database(
    client: TestClient[Litestar], service: IntelligenceService
) -> None:
    """Issue 26 item 8, the exact queries of the trial: one row each (before: one per workspace)."""
    for n, workspace in enumerate(("W1", "W2", "W3")):
        client.post("/events", json={**ev("session:start", n, session=f"s{n}"), "workspace": workspace})
    assert service.wait_applied(timeout=30)
    for query, rows in [
        ("MATCH (s:Session) RETURN count(s) AS n", [{"n": 3}]),
        ("RETURN 1 AS one", [{"one": 1}]),
        ("RETURN $workspace AS ws", [{"ws": None}]),
    ]:
        reply = client.post("/cypher", json={"query": query, "workspace": "*"})
        assert reply.json()["results"] == rows, query


def test_workspace_restricted_keys_over_http(
    client: TestClient[Litestar], service: IntelligenceService
) -> None:
    client.post("/events", json=ev("session:start", 1))
    client.post("/events", json={**ev("session:start", 2, session="s2"), "workspace": "W2"})
    assert service.wait_applied(timeout=30)
    only_w2 = {"x-test-workspaces": "W2"}
    denied = client.post(
        "/cypher", json={"query": "MATCH (n) RETURN count(n) AS n", "workspace": WS}, headers=only_w2
    )
    assert denied.status_code == 403
    assert denied.json()["error"]["code"] == "forbidden_workspace"
    every = client.post(
        "/cypher",
        json={"query": "MATCH (s:Session) RETURN s.workspace AS ws", "workspace": "*"},
        headers=only_w2,
    )
    assert every.json()["results"] == [{"ws": "W2"}]
    write = client.post("/events", json=ev("session:start", 3), headers=only_w2)
    assert write.status_code == 403


def test_blob_routes(falkor, names) -> None:  # type: ignore[no-untyped-def]
    from tests.test_intelligence_support import make_service

    svc = make_service(falkor, names, offload_threshold=10)
    try:
        app = Litestar(route_handlers=[create_intelligence_router(svc, principal=principal_from_header)])
        with TestClient(app) as http:
            result = {"success": True, "output": "x" * 100, "error": None}
            http.post("/events", json=ev("tool:post", 5, tool_call_id="c1", tool_name="bash", result=result))
            assert svc.wait_applied(timeout=30)
            listing = http.get(f"/blobs/{SID}").json()
            assert listing["session_id"] == SID
            (uri,) = listing["blobs"]
            key = uri.split("/", 3)[3]
            got = http.get(f"/blobs/{SID}/{key}")
            assert got.status_code == 200
            assert got.json() == result
            assert http.get(f"/blobs/{SID}/nope").status_code == 404
            assert http.get(f"/blobs/{SID}/{key}", headers={"x-test-workspaces": "W2"}).status_code == 404
            assert http.get(f"/blobs/{SID}", headers={"x-test-workspaces": "W2"}).json()["blobs"] == []
            assert http.get(f"/blobs/{SID}/..").status_code in (400, 404)
    finally:
        svc.close()


def test_dead_letter_endpoints(client: TestClient[Litestar], service: IntelligenceService) -> None:
    client.post("/events", json=ev("session:start", 1))
    assert service.wait_applied(timeout=30)
    service.journal.dead_letter(1, "RuntimeError: injected")
    listing = client.get("/queues/dead-letter").json()
    assert listing["total"] == 1
    assert listing["dead_letters"][0]["key"] == SID
    assert listing["dead_letters"][0]["last_error"] == "RuntimeError: injected"
    assert client.post(f"/queues/dead-letter/{SID}/replay").json() == {"key": SID, "replayed": 1}
    assert service.wait_applied(timeout=30)
    assert client.get("/queues/dead-letter").json()["total"] == 0
    service.journal.dead_letter(2, "again")
    assert client.post(f"/queues/dead-letter/{SID}/purge").json()["purged"] == 1
    status = client.get("/intelligence/status").json()
    assert status["backlog"] == 0
    assert status["dead_letters"] == 0


async def test_concurrent_single_posts_share_commits_and_keep_per_request_outcomes(
    service: IntelligenceService,
) -> None:
    import asyncio

    import httpx

    app = Litestar(route_handlers=[create_intelligence_router(service)])
    bodies = [ev("prompt:submit", i, prompt=f"p{i}") for i in range(20)]
    bodies.append(bodies[3])  # the same event twice in the same turn
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ci") as http:
        responses = await asyncio.gather(*(http.post("/events", json=body) for body in bodies))
    assert {r.status_code for r in responses} == {202}
    statuses = [r.json()["status"] for r in responses]
    assert statuses.count("queued") == 20
    assert statuses.count("duplicate") == 1
    assert service.journal.last_seq() == 20


def test_forget_session_route(client: TestClient[Litestar], service: IntelligenceService) -> None:
    client.post("/events", json=session_stream())
    assert service.wait_applied(timeout=30)
    assert client.delete(f"/sessions/{SID}").status_code == 400  # the workspace is required
    denied = client.delete(f"/sessions/{SID}?workspace={WS}", headers={"x-test-workspaces": "other"})
    assert denied.status_code == 403
    assert client.delete(f"/sessions/nobody?workspace={WS}").status_code == 404
    dots = client.delete(f"/sessions/..?workspace={WS}")
    assert dots.status_code in (400, 404)  # a client may normalise the path; never a 5xx
    assert client.delete("/sessions/x?workspace=%20").json()["error"]["code"] == "invalid_workspace"
    forgot = client.delete(f"/sessions/{SID}?workspace={WS}")
    assert forgot.status_code == 202
    body = forgot.json()
    assert body["workspace"] == WS
    assert body["session_id"] == SID
    assert body["events"] == sum(1 for e in session_stream() if e["data"]["session_id"] == SID)
    assert service.wait_rebuilt(timeout=60)
    assert service.wait_applied(timeout=30)
    rows = client.post(
        "/cypher",
        json={
            "query": "MATCH (e:Event {workspace: $workspace}) RETURN DISTINCT e.session_id AS sid",
            "workspace": WS,
        },
    ).json()["results"]
    assert rows == [{"sid": CHILD}]  # the fork's own events stay
    assert client.post("/events", json=session_stream()).json()["accepted"] == 0


def test_forget_idle_sessions_route(client: TestClient[Litestar], service: IntelligenceService) -> None:
    client.post("/events", json=session_stream())
    assert client.delete("/sessions").status_code == 400
    assert client.delete("/sessions?idle_days=0").status_code == 400
    assert client.delete("/sessions?idle_days=soon").status_code == 400
    denied = client.delete(f"/sessions?idle_days=1&workspace={WS}", headers={"x-test-workspaces": "other"})
    assert denied.status_code == 403
    fresh = client.delete("/sessions?idle_days=1")
    assert fresh.status_code == 202
    assert fresh.json() == {"idle_days": 1.0, "sessions": 0, "events": 0, "blobs": 0, "rebuilding": []}


@pytest.mark.parametrize("idle_days", ["1e300", "inf", "1e15"])
def test_forget_idle_sessions_longer_than_the_clock_forgets_nothing(
    client: TestClient[Litestar], service: IntelligenceService, idle_days: str
) -> None:
    """Fuzzed: a span before the epoch was a 500 (int too large for SQLite / float inf to int)."""
    client.post("/events", json=session_stream())
    response = client.delete(f"/sessions?idle_days={idle_days}")
    assert response.status_code == 202, response.text
    assert response.json()["sessions"] == 0


def test_cypher_while_the_graph_engine_is_down_is_a_503(
    client: TestClient[Litestar], service: IntelligenceService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fuzzed: while the embedded FalkorDB restarted, POST /cypher answered 500 internal_error."""

    def down(*args: Any, **kwargs: Any) -> Any:
        raise EngineUnavailable("Error 111 connecting to falkordb.sock. Connection refused.")

    monkeypatch.setattr(service, "cypher", down)
    response = client.post("/cypher", json={"query": "RETURN 1"})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "graph_unavailable"
    assert "Connection refused" in response.json()["error"]["message"]


def test_session_ids_that_crash_the_graph_engine_are_refused(
    client: TestClient[Litestar], service: IntelligenceService
) -> None:
    """Fuzzed: a session id ending in whitespace (or holding U+0001) was accepted, and writing its
    node made the embedded FalkorDB segfault (EnforceUniqueEntity), again on each replay after the
    restart. Ids built from other fields are keyed instead (tests/test_intelligence_keys.py)."""
    body = ev("tool:pre", 1, parent_id=None)
    body["data"]["session_id"] = "_N\U0001516d\x0b"
    response = client.post("/events", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"field": "data.session_id"}
    assert client.post("/events", json=[body]).status_code == 422
    accepted = ev("tool:pre", 2, tool_name="bash ", tool_call_id="tc1 ")
    assert client.post("/events", json=accepted).status_code == 202
    assert service.wait_applied(timeout=30)
    assert client.post("/cypher", json={"query": "RETURN 1 AS one"}).json()["results"] == [{"one": 1}]
