"""`convograph serve`'s app end to end: hook events (`POST /events`) and conversation events
(`POST /v1/conversations/{cid}/events`) land in one graph that `POST /cypher` answers about.

Most tests run the app with its real embedded FalkorDB and a memory event log (Litestar's
TestClient runs the lifespan, so the intelligence service is the one `convograph serve` opens);
the README's walk-through and `convograph run --server` run against a real `convograph serve`
process and the real `convograph query` / `convograph run` commands.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.testing import TestClient
from tests.support.server import ServerProcess, running_server
from tests.test_intelligence_layers_conversations import conversation

from convograph.server import create_app
from convograph.server.config import ServerConfig

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "tests" / "fixtures" / "ci_layers.ndjson"
README = ROOT / "README.md"


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
    from convograph.intelligence import journal_base as journal_module

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


# -- the README's walk-through, on a real server with the real commands -------------------------------


def readme_queries() -> list[str]:
    """The ``convograph query "..."`` lines of the README's "Run the server" section."""
    section = README.read_text(encoding="utf-8").split("## Run the server", 1)[1].split("\n## ", 1)[0]
    return [m[0] or m[1] for m in re.findall(r"convograph query (?:\"([^\"]+)\"|'([^']+)')", section)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("querying") / "data") as process:
        yield process


def convograph_query(server: ServerProcess, cypher: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "convograph", "query", cypher, "--url", server.url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout)["results"]
    return results


def eventually_rows(server: ServerProcess, cypher: str, done: Any) -> list[dict[str, Any]]:
    """Run ``cypher`` with `convograph query` until ``done(rows)`` (the feed is asynchronous)."""
    deadline = time.monotonic() + 60
    rows = convograph_query(server, cypher)
    while not done(rows) and time.monotonic() < deadline:
        time.sleep(0.5)
        rows = convograph_query(server, cypher)
    return rows


def hook_tool_calls(workspace: str) -> Counter[str]:
    calls = {
        line["data"]["tool_call_id"]: line["data"]["tool_name"]
        for line in map(json.loads, DATASET.read_text(encoding="utf-8").splitlines())
        if line["event"] == "tool:pre"
    }
    return Counter(calls.values())


@pytest.mark.parametrize("source", ["conversation", "hook"])
def test_the_readme_queries_answer_after_its_ingest(server: ServerProcess, source: str) -> None:
    """Issue 28: the README's rollup query returned no rows after the README's own ingest
    (conversation ToolCalls made no `Tool` rollups). Both sources answer every README query."""
    queries = readme_queries()
    assert len(queries) == 2, queries
    sessions, rollup = queries
    if source == "conversation":  # the README's own curl
        body = (ROOT / "examples" / "multi-agent.ndjson").read_bytes()
        headers = {"Content-Type": "application/x-ndjson"}
        response = httpx.post(f"{server.url}/v1/conversations/c1/events", content=body, headers=headers)
        assert response.status_code == 200, response.text
        workspace = "conversations"
        expected = Counter({"read_file": 2, "exec": 1, "search_incidents": 1, "agent": 1})
    else:
        workspace = "readme-hooks"
        original = json.loads(DATASET.read_text(encoding="utf-8").splitlines()[0])["workspace"]
        body = DATASET.read_bytes().replace(original.encode(), workspace.encode())
        response = httpx.post(
            f"{server.url}/events", content=body, headers={"Content-Type": "application/x-ndjson"}
        )
        assert response.status_code == 202, response.text
        expected = hook_tool_calls(workspace)

    def tools(rows: list[dict[str, Any]]) -> Counter[str]:
        return Counter({r["t.tool_name"]: r["t.calls"] for r in rows if r["t.workspace"] == workspace})

    rows = eventually_rows(server, rollup, lambda rows: tools(rows) == expected)
    assert tools(rows) == expected
    calls = [r["t.calls"] for r in rows if r["t.workspace"] == workspace]
    assert calls == sorted(calls, reverse=True)  # ordered within each workspace (docs/intelligence.md)
    assert convograph_query(server, sessions)


SCRIPT = [
    {
        "text": "Two lookups.",
        "tool_calls": [
            {"name": "lookup", "arguments": {"key": "a"}},
            {"name": "lookup", "arguments": {"key": "b"}},
        ],
        "usage": [300, 40],
    },
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "missing"}}], "usage": [420, 12]},
    {"text": "a=1, b=2.", "usage": [500, 9]},
]

TOOLS = '''
from convograph.harness import tool

@tool
def lookup(key: str) -> int:
    """Look a key up."""
    return {"a": 1, "b": 2}[key]

TOOLS = [lookup]
'''


def test_convograph_run_shows_its_model_calls_and_tool_calls_in_the_graph(
    server: ServerProcess, tmp_path: Path
) -> None:
    """An agent whose model calls are provider runs (`convograph run`): its tool calls and each
    model call's tokens are in the graph (they were not: only the agent run was folded)."""
    (tmp_path / "script.json").write_text(json.dumps(SCRIPT))
    (tmp_path / "run_tools_for_querying.py").write_text(TOOLS)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "convograph",
            "run",
            "look a and b up",
            "--model",
            f"scripted:{tmp_path / 'script.json'}",
            "--tools",
            "run_tools_for_querying:TOOLS",
            "--server",
            server.url,
            "--conversation",
            "runs:lookup-1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    iterations = (
        "MATCH (:Session {node_id: 'lookup-1', workspace: 'runs'})-[:HAS_EXECUTION]->(:OrchestratorRun)"
        "-[:HAS_PART]->(i:Iteration) OPTIONAL MATCH (i)-[:HAS_TOOL_CALL]->(t:ToolCall)"
        " RETURN i.iteration_number AS k, i.input_tokens AS input, i.output_tokens AS output,"
        " count(t) AS calls, sum(CASE WHEN t.result_success = false THEN 1 ELSE 0 END) AS failed ORDER BY k"
    )
    expected = [
        {"k": 1, "input": 300, "output": 40, "calls": 2, "failed": 0},
        {"k": 2, "input": 420, "output": 12, "calls": 1, "failed": 1},
        {"k": 3, "input": 500, "output": 9, "calls": 0, "failed": 0},
    ]
    rows = eventually_rows(server, iterations, lambda rows: rows == expected)
    assert rows == expected
    tools = convograph_query(
        server, "MATCH (t:Tool {workspace: 'runs'}) RETURN t.tool_name AS tool, t.calls AS calls"
    )
    assert tools == [{"tool": "lookup", "calls": 3}]
