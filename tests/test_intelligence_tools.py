# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.tools import (
    BLOB_READ_SCHEMA,
    GRAPH_QUERY_SCHEMA,
    HttpBackend,
    ServiceBackend,
    ToolError,
    blob_read,
    graph_query,
)
from tests.test_intelligence_support import SID, WS, ev, falkor, make_service, names, service  # noqa: F401


def test_schemas_describe_plain_functions() -> None:
    assert GRAPH_QUERY_SCHEMA["name"] == "graph_query"
    assert GRAPH_QUERY_SCHEMA["parameters"]["required"] == ["query"]
    assert set(GRAPH_QUERY_SCHEMA["parameters"]["properties"]) == {"query", "params", "workspace"}
    assert BLOB_READ_SCHEMA["parameters"]["required"] == ["uri"]
    json.dumps([GRAPH_QUERY_SCHEMA, BLOB_READ_SCHEMA])  # serialisable as given to an LLM API


def test_graph_query_and_blob_read_in_process(falkor, names, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    svc = make_service(falkor, names, offload_threshold=10)
    try:
        result = {"success": True, "output": "line\n" * 50, "error": None}
        svc.ingest(ev("tool:post", 5, tool_call_id="c1", tool_name="bash", result=result))
        assert svc.wait_applied(timeout=30)
        backend = ServiceBackend(svc)
        found = graph_query(
            "MATCH (e:ToolPostEvent {workspace: $workspace}) RETURN e.data AS d",
            workspace=WS,
            backend=backend,
        )
        uri = json.loads(found["results"][0]["d"])["result"]["$blob_ref"]
        written = blob_read(uri, backend=backend, output_dir=tmp_path)
        path = Path(written["path"])
        assert path.is_relative_to(tmp_path)
        assert json.loads(path.read_text()) == result
        assert written["bytes"] == path.stat().st_size
        with pytest.raises(ToolError) as info:
            blob_read("ci-blob://nope", backend=backend, output_dir=tmp_path)
        assert info.value.code == "uri_error"
        with pytest.raises(ToolError) as info:
            blob_read(f"ci-blob://{SID}/missing", backend=backend, output_dir=tmp_path)
        assert info.value.code == "not_found"
        restricted = ServiceBackend(svc, frozenset({"elsewhere"}))
        with pytest.raises(ToolError) as info:
            graph_query("RETURN 1", workspace=WS, backend=restricted)
        assert info.value.status == 403
        with pytest.raises(ToolError) as info:
            graph_query("CREATE (n)", workspace=WS, backend=backend)
        assert info.value.code == "query_error"
        with pytest.raises(ToolError):
            graph_query("  ", backend=backend)
    finally:
        svc.close()


def test_http_backend_maps_transport_and_status_errors(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer k"
        if request.url.path == "/cypher":
            body = json.loads(request.content)
            if body["query"] == "bad":
                return httpx.Response(400, json={"error": {"code": "cypher_error", "message": "nope"}})
            return httpx.Response(200, json={"columns": ["x"], "results": [{"x": 1}], "truncated": False})
        if request.url.path == "/blobs/S/k:1":
            return httpx.Response(200, content=b'{"a": 1}')
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "no blob"}})

    client = httpx.Client(
        base_url="http://ci", transport=httpx.MockTransport(handler), headers={"authorization": "Bearer k"}
    )
    backend = HttpBackend("http://ci", client=client)
    assert graph_query("RETURN 1", backend=backend)["results"] == [{"x": 1}]
    with pytest.raises(ToolError) as info:
        graph_query("bad", backend=backend)
    assert (info.value.code, info.value.status) == ("http_status", 400)
    assert "cypher_error: nope" in info.value.message
    assert json.loads(
        Path(blob_read("ci-blob://S/k:1", backend=backend, output_dir=tmp_path)["path"]).read_text()
    ) == {"a": 1}
    with pytest.raises(ToolError) as info:
        blob_read("ci-blob://S/other", backend=backend, output_dir=tmp_path)
    assert info.value.code == "not_found"

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    offline = HttpBackend(
        "http://ci", client=httpx.Client(base_url="http://ci", transport=httpx.MockTransport(refuse))
    )
    with pytest.raises(ToolError) as info:
        graph_query("RETURN 1", backend=offline)
    assert info.value.code == "connection_error"


def test_service_backend_round_trip(service: IntelligenceService) -> None:
    service.ingest(ev("session:start", 1))
    assert service.wait_applied(timeout=30)
    result = graph_query(
        "MATCH (s:Session {workspace: $workspace}) RETURN s.node_id AS id",
        workspace=WS,
        backend=ServiceBackend(service),
    )
    assert result == {"columns": ["id"], "results": [{"id": SID}], "truncated": False}


def test_http_backend_errors_from_a_server_that_is_not_convograph_are_one_line() -> None:
    """`--url` pointing at another service: the status and a one-line excerpt, not a page of HTML,
    and a JSON answer that is no query result is a `decode_error` (was a bare ValueError)."""
    page = "<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Bad Gateway</h1>\n" + "x" * 1000 + "\n</body></html>\n"

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/cypher" and json.loads(request.content)["query"] == "html":
            return httpx.Response(502, text=page)
        return httpx.Response(200, json="ok")

    backend = HttpBackend(
        "http://ci", client=httpx.Client(base_url="http://ci", transport=httpx.MockTransport(handler))
    )
    with pytest.raises(ToolError) as info:
        graph_query("html", backend=backend)
    assert (info.value.code, info.value.status) == ("http_status", 502)
    assert info.value.message.startswith(
        "HTTP 502 from http://ci/cypher: <!DOCTYPE html> <html> <body> <h1>Bad Gateway"
    )
    assert "\n" not in info.value.message
    assert len(info.value.message) < 300
    with pytest.raises(ToolError) as info:
        graph_query("RETURN 1", backend=backend)
    assert info.value.code == "decode_error"
