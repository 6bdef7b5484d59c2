"""``GET /v1/search/conversations`` against the real app (memory event log): text, tool, status and
error criteria, combined; bad input named; visibility per API key; replies as documented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from convograph.demo import DEMO_CONVERSATIONS
from convograph.server import ServerConfig, create_app
from convograph.server.auth import add_key_to_file
from tests.test_server_openapi import conforms, full_app


def seeded(client: TestClient[Any]) -> None:
    for factory in DEMO_CONVERSATIONS:
        script = factory()
        events = script.events(decisions={"relay-write-report": True})
        assert (
            client.post(f"/v1/conversations/{script.conversation_id}/events", json=events).status_code == 200
        )
    client.post(
        "/v1/conversations/plain/events", json=[{"type": "user", "runId": "u", "content": "Hello there"}]
    )


def search(client: TestClient[Any], **params: Any) -> dict[str, Any]:
    response = client.get("/v1/search/conversations", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def ids(body: dict[str, Any]) -> set[str]:
    return {row["id"] for row in body["results"]}


def test_criteria_find_the_right_conversations(tmp_path: Path) -> None:
    doc = full_app(tmp_path).openapi_schema.to_schema()
    config = ServerConfig(data_dir=tmp_path, database_url="memory://", intelligence=False)
    with TestClient(create_app(config)) as client:
        seeded(client)
        # Text in a subagent's streamed answer, case-insensitive, with a snippet around it.
        body = search(client, q="VACUUM_OPTIMIZER.RS")
        assert ids(body) == {"demo-research"}
        hit = body["results"][0]
        assert hit["title"].startswith("We need a vector database")
        assert hit["hits"][0]["field"] == "text"
        assert "vacuum_optimizer.rs" in hit["hits"][0]["snippet"]
        assert body["searched"] == 4
        # A tool name matches as a tool; the tool filter needs the exact name.
        research = {row["id"]: row for row in search(client, q="exec")["results"]}["demo-research"]
        assert research["hits"][0] == {"field": "tool", "snippet": "exec"}
        assert ids(search(client, tool="write_file")) == {"demo-research"}
        assert ids(search(client, tool="write")) == set()
        # Errors and status, alone and combined with text.
        with_errors = ids(search(client, errors="true"))
        assert "demo-research" in with_errors
        assert "plain" not in with_errors
        assert ids(search(client, status="idle")) == {"plain"}
        assert ids(search(client, q="hello", status="idle")) == {"plain"}
        assert ids(search(client, q="hello", status="complete")) == set()
        assert ids(search(client, q="overloaded", errors="true")) >= {"demo-research"}
        research = {row["id"]: row for row in search(client, q="overloaded")["results"]}["demo-research"]
        assert research["hits"][0]["field"] == "error"
        # New events are searched at once (the digest catches up with what the log gained).
        client.post(
            "/v1/conversations/plain/events",
            json=[{"type": "text", "runId": "a", "id": "t", "content": "zebra"}],
        )
        assert ids(search(client, q="zebra")) == {"plain"}
        # limit cuts the results, not the total.
        limited = search(client, q="e", limit=1)
        assert len(limited["results"]) == 1
        assert limited["total"] == 4
        # Bad input says what is wrong.
        for params, message in [
            ({}, "give at least one of q, status, tool or errors=true"),
            ({"q": "x" * 201}, "q must be at most 200 characters"),
            ({"q": "a", "status": "done"}, "status must be one of idle, active, complete, error"),
        ]:
            response = client.get("/v1/search/conversations", params=params)
            assert response.status_code == 400
            assert message in response.json()["error"]["message"]
            conforms(doc, response)
        assert client.get("/v1/search/conversations", params={"q": "a", "limit": 0}).status_code == 400
        conforms(doc, client.get("/v1/search/conversations", params={"q": "vacuum"}))


def test_a_key_searches_only_its_workspaces(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    admin = add_key_to_file(keys, key_id="admin", scopes=["admin"])
    acme = add_key_to_file(keys, key_id="acme", scopes=["read"], workspaces=["acme"])
    config = ServerConfig(data_dir=tmp_path, database_url="memory://", intelligence=False, api_key_file=keys)
    with TestClient(create_app(config)) as client:
        for cid in ("acme:1", "other:1"):
            response = client.post(
                f"/v1/conversations/{cid}/events",
                json=[{"type": "user", "runId": "u", "content": "shared words"}],
                headers={"Authorization": f"Bearer {admin}"},
            )
            assert response.status_code == 200
        found = client.get(
            "/v1/search/conversations", params={"q": "shared"}, headers={"Authorization": f"Bearer {acme}"}
        ).json()
        assert ids(found) == {"acme:1"}
        assert found["searched"] == 1
        assert client.get("/v1/search/conversations", params={"q": "shared"}).status_code == 401
