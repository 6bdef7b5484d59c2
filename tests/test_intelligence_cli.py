# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from convograph.cli.app import app
from convograph.cli.query import parse_params, render_table
from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import GraphNames
from tests.test_intelligence_support import SID, WS, ev, falkor, names, service  # noqa: F401

runner = CliRunner()


def test_parse_params_reads_json_values_and_falls_back_to_text() -> None:
    assert parse_params(["n=3", "flag=true", "sid=abc-1", "list=[1,2]"]) == {
        "n": 3,
        "flag": True,
        "sid": "abc-1",
        "list": [1, 2],
    }
    with pytest.raises(typer.BadParameter):
        parse_params(["novalue"])


def test_render_table_has_one_column_per_result_column() -> None:
    table = render_table(
        {"columns": ["a", "b"], "results": [{"a": 1, "b": {"x": [1]}}, {"a": "s", "b": None}]}
    )
    assert [c.header for c in table.columns] == ["a", "b"]
    assert table.row_count == 2


def test_query_command_against_a_falkordb_url(
    falkor: FalkorEngine, names: GraphNames, service: IntelligenceService, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.ingest(ev("session:start", 1))
    assert service.wait_applied(timeout=30)
    socket_path = falkor._client.connection_pool.connection_kwargs["path"]
    monkeypatch.setenv("CONVOGRAPH_GRAPH_PREFIX", names.prefix)
    url = f"unix://{socket_path}"
    result = runner.invoke(
        app,
        [
            "query",
            "MATCH (s:Session {workspace: $workspace}) RETURN s.node_id AS id",
            "-w",
            WS,
            "--graph-url",
            url,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["results"] == [{"id": SID}]
    table = runner.invoke(
        app,
        ["query", "MATCH (s:Session) RETURN s.node_id AS id", "-w", WS, "--graph-url", url],
        env={"COLUMNS": "200"},
    )
    assert table.exit_code == 0
    assert SID in table.output
    assert "1 row" in table.output
    rejected = runner.invoke(app, ["query", "MATCH (n) DELETE n", "--graph-url", url])
    assert rejected.exit_code == 1
    offline = runner.invoke(app, ["query", "RETURN 1", "--url", "http://127.0.0.1:9"])
    assert offline.exit_code == 2


def test_forget_command_against_a_real_server(tmp_path: Path) -> None:
    from tests.support.server import running_server

    body = ev("session:start", 1)
    with running_server(tmp_path / "data") as server:
        assert httpx.post(f"{server.url}/events", json=body, timeout=20).status_code == 202
        args = ["forget", SID, "-w", WS, "--url", server.url, "--wait", "--timeout", "60"]
        done = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert done.exit_code == 0, done.output
        assert "1 events" in done.output
        assert "graph updated" in done.output
        rows = httpx.post(
            f"{server.url}/cypher",
            json={"query": "MATCH (n) RETURN count(n) AS c", "workspace": WS},
            timeout=20,
        ).json()["results"]
        assert rows == [{"c": 0}]
        again = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert again.exit_code == 1
        assert "not_found" in again.output
    offline = runner.invoke(app, ["forget", SID, "-w", WS, "--url", "http://127.0.0.1:9"])
    assert offline.exit_code == 2


@pytest.mark.parametrize("days", ["-1", "nan", "inf"])
def test_forget_refuses_idle_days_that_are_not_a_duration(days: str) -> None:
    """Was sent to the server as is."""
    result = runner.invoke(app, ["forget", "--idle-days", days, "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "--idle-days must be a number of days >= 0" in result.output


def test_forget_against_a_server_that_is_not_convograph(tmp_path: Path) -> None:
    """A 202 that is not JSON (or an HTML error page) is a short error, not a JSONDecodeError
    traceback (nor a page of HTML)."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_DELETE(self) -> None:
            status = 202 if "accepted" in self.path else 500
            body = b"<html>\n<body>\n  accepted\n</body>\n</html>\n"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        odd = runner.invoke(app, ["forget", "accepted", "-w", "w", "--url", url], env={"COLUMNS": "300"})
        assert odd.exit_code == 2
        assert "did not answer like a convograph server: HTTP 202: <html> <body> accepted" in odd.output
        failed = runner.invoke(app, ["forget", "s", "-w", "w", "--url", url], env={"COLUMNS": "300"})
        assert failed.exit_code == 1
        assert "HTTP 500: <html> <body> accepted </body> </html>" in failed.output
    finally:
        server.shutdown()
        server.server_close()
