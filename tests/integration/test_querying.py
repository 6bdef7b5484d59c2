"""`convograph serve`'s app end to end: hook events (`POST /events`) and conversation events
(`POST /v1/conversations/{cid}/events`) land in one graph that `POST /cypher` answers about.

The app runs with its real embedded FalkorDB and a memory event log (Litestar's TestClient runs
the lifespan, so the intelligence service is the one `convograph serve` opens).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from tests.test_intelligence_layers_conversations import conversation

from convograph.server import create_app
from convograph.server.config import ServerConfig

DATASET = Path(__file__).resolve().parents[1] / "fixtures" / "ci_layers.ndjson"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient[Litestar]]:
    config = ServerConfig(data_dir=tmp_path, database_url="memory://", intelligence=True)
    with TestClient(create_app(config)) as test_client:
        yield test_client


def cypher(client: TestClient[Litestar], query: str, workspace: str) -> list[dict[str, Any]]:
    response = client.post("/cypher", json={"query": query, "workspace": workspace})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def eventually(client: TestClient[Litestar], query: str, workspace: str, expected: Any) -> None:
    deadline = time.monotonic() + 30
    got: Any = None
    while time.monotonic() < deadline:
        got = cypher(client, query, workspace)
        if got == expected:
            return
        time.sleep(0.1)
    assert got == expected


def test_conversation_events_build_delegations_tool_calls_and_iterations(
    client: TestClient[Litestar],
) -> None:
    body = "\n".join(json.dumps(e) for e in conversation())
    response = client.post(
        "/v1/conversations/acme:conv-1/events", content=body, headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 200, response.text
    eventually(
        client,
        "MATCH (t:ToolCall {workspace: $workspace})-[:TRIGGERED]->(d:Delegation)-[:ENCOMPASSES]->(c:Session)"
        " RETURN t.tool_name AS tool, d.agent AS agent, c.session_type AS kind",
        "acme",
        [{"tool": "delegate", "agent": "explorer", "kind": "forked"}],
    )
    eventually(
        client,
        "MATCH (i:Iteration {workspace: $workspace}) RETURN count(i) AS n, sum(i.output_tokens) AS out",
        "acme",
        [{"n": 4, "out": 75}],
    )
    failing = cypher(
        client,
        "MATCH (t:ToolCall {workspace: $workspace}) WHERE t.result_success = false RETURN t.tool_name AS tool",
        "acme",
    )
    assert failing == [{"tool": "bash"}]


def test_hook_events_and_conversations_share_one_cypher_surface(client: TestClient[Litestar]) -> None:
    # conversation ids allow [A-Za-z0-9._:@-] and no leading punctuation, so the hook events go to
    # a workspace a conversation id can name
    workspace = "alice-api"
    original = json.loads(DATASET.read_text(encoding="utf-8").splitlines()[0])["workspace"]
    lines = [
        line.replace(f'"workspace":"{original}"', f'"workspace":"{workspace}"')
        for line in DATASET.read_text(encoding="utf-8").splitlines()
    ]
    response = client.post(
        "/events", content="\n".join(lines), headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 202, response.text
    cid = f"{workspace}:chat-7"
    body = "\n".join(json.dumps(e) for e in conversation())
    response = client.post(
        f"/v1/conversations/{cid}/events", content=body, headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 200, response.text
    spawned = sum(1 for line in lines if '"delegate:agent_spawned"' in line)
    eventually(
        client,
        "MATCH (d:Delegation {workspace: $workspace}) RETURN count(d) AS delegations",
        workspace,
        [{"delegations": spawned + 1}],
    )
    mixed = cypher(
        client,
        "MATCH (s:Session {workspace: $workspace})-[:HAS_EXECUTION]->(r:OrchestratorRun)"
        " WHERE s.node_id = 'chat-7' RETURN count(r) AS runs",
        workspace,
    )
    assert mixed == [{"runs": 1}]


def test_deleting_a_conversation_forgets_it_in_the_graph_and_the_id_can_start_again(
    client: TestClient[Litestar],
) -> None:
    body = "\n".join(json.dumps(e) for e in conversation())
    headers = {"content-type": "application/x-ndjson"}
    for cid in ("acme:conv-1", "acme:conv-2"):
        assert (
            client.post(f"/v1/conversations/{cid}/events", content=body, headers=headers).status_code == 200
        )
    count = "MATCH (e:Event {workspace: $workspace}) RETURN e.session_id AS sid, count(*) AS n ORDER BY sid"
    eventually(client, count, "acme", [{"sid": "conv-1", "n": 15}, {"sid": "conv-2", "n": 15}])
    assert client.delete("/v1/conversations/acme:conv-1").status_code == 204
    assert client.get("/intelligence/status").json()["rebuilding"] in ([], ["acme"])
    eventually(client, count, "acme", [{"sid": "conv-2", "n": 15}])
    derived = "MATCH (n {workspace: $workspace}) WHERE n.node_id STARTS WITH 'conv-1' RETURN count(n) AS c"
    eventually(client, derived, "acme", [{"c": 0}])
    # the same id used again starts from seq 1: its events reach the graph (no tombstones here)
    assert (
        client.post("/v1/conversations/acme:conv-1/events", content=body, headers=headers).status_code == 200
    )
    eventually(client, count, "acme", [{"sid": "conv-1", "n": 15}, {"sid": "conv-2", "n": 15}])


def test_serve_with_retention_forgets_idle_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from convograph.intelligence import journal as journal_module

    real_now = journal_module.now_ms
    monkeypatch.setattr(journal_module, "now_ms", lambda: real_now() - 40 * 86_400_000)
    config = ServerConfig(
        data_dir=tmp_path,
        database_url="memory://",
        intelligence=True,
        retention_days=30,
        retention_interval_seconds=0.2,
    )
    old = {
        "event": "session:start",
        "workspace": "acme",
        "data": {"session_id": "old-1", "timestamp": "2026-01-01T00:00:00Z"},
    }
    new = {**old, "data": {"session_id": "new-1", "timestamp": "2026-11-01T00:00:00Z"}}
    query = "MATCH (s:Session {workspace: $workspace}) RETURN s.node_id AS id ORDER BY id"
    with TestClient(create_app(config)) as client:
        assert client.post("/events", json=old).status_code == 202  # received "40 days ago"
        monkeypatch.setattr(journal_module, "now_ms", real_now)
        assert client.post("/events", json=new).status_code == 202
        eventually(client, query, "acme", [{"id": "new-1"}])
