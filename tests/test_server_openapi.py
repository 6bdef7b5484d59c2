# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
"""``/openapi.json`` describes the API actually served: request bodies, reply media types and
shapes, the ``{"error": ...}`` body of every error status, required query parameters; and real
replies of the routes conform to what the document declares."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.testing import TestClient

from convograph.intelligence.http import create_intelligence_router
from convograph.intelligence.service import IntelligenceService
from convograph.server import ServerConfig, create_app
from convograph.server.openapi import JSON, NDJSON, SSE, STANDARD_ERRORS, SVG
from tests.test_intelligence_support import SID, WS, ev, falkor, names, service  # noqa: F401

METHODS = ("get", "post", "put", "patch", "delete")
ERROR_REF = "#/components/schemas/ErrorBody"


def full_app(tmp_path: Path) -> Litestar:
    return create_app(ServerConfig(data_dir=tmp_path, database_url="memory://", intelligence=True))


@pytest.fixture
def doc(tmp_path: Path) -> dict[str, Any]:
    schema: dict[str, Any] = full_app(tmp_path).openapi_schema.to_schema()
    return schema


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield method, path, item[method]


# --- a small JSON Schema checker (the subset the document uses; jsonschema is not a dependency) -----


def resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = doc["components"]["schemas"][name]
    return schema


_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
    "integer": int,
    "number": (int, float),
}


def problems(doc: dict[str, Any], schema: dict[str, Any], value: Any, where: str = "$") -> list[str]:
    """Why ``value`` does not conform to ``schema`` (empty: it conforms)."""
    schema = resolve(doc, schema)
    if "oneOf" in schema:
        matches = sum(not problems(doc, alt, value, where) for alt in schema["oneOf"])
        return [] if matches == 1 else [f"{where}: matches {matches} of oneOf, not exactly 1"]
    if "anyOf" in schema:
        ok = any(not problems(doc, alt, value, where) for alt in schema["anyOf"])
        return [] if ok else [f"{where}: matches none of anyOf"]
    out: list[str] = []
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(
            isinstance(value, _TYPES[k]) and not (isinstance(value, bool) and k in ("integer", "number"))
            for k in kinds
        ):
            return [f"{where}: {value!r} is not of type {kinds}"]
    if "const" in schema and value != schema["const"]:
        out.append(f"{where}: {value!r} != const {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        out += [f"{where}: missing {key!r}" for key in schema.get("required", ()) if key not in value]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                out += problems(doc, sub, value[key], f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            out += problems(doc, schema["items"], item, f"{where}[{index}]")
    return out


def operation_for(doc: dict[str, Any], method: str, url_path: str) -> dict[str, Any]:
    for path, item in doc["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$"
        if method in item and re.match(pattern, url_path):
            operation: dict[str, Any] = item[method]
            return operation
    raise AssertionError(f"{method.upper()} {url_path} is not in the document")


def conforms(doc: dict[str, Any], response: httpx.Response) -> None:
    """``response`` has a declared status and media type, and its JSON body the declared shape."""
    method = response.request.method.lower()
    operation = operation_for(doc, method, response.request.url.path)
    declared = operation["responses"].get(str(response.status_code))
    assert declared is not None, f"{method} {response.request.url.path}: {response.status_code} undeclared"
    content = declared.get("content") or {}
    if not response.content and not content:
        return
    media = response.headers["content-type"].split(";")[0].strip()
    assert media in content, f"{method} {response.request.url.path}: {media} not in {sorted(content)}"
    schema = content[media]["schema"]
    if media == JSON:
        assert problems(doc, schema, response.json()) == []
    elif media == NDJSON:
        for line in response.text.splitlines():
            assert problems(doc, schema, json.loads(line)) == []


# --- the document -------------------------------------------------------------------------------


def test_every_route_that_reads_a_body_declares_it(tmp_path: Path, doc: dict[str, Any]) -> None:
    app = full_app(tmp_path)
    reads_body = set()
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            for method, (handler, _) in route.route_handler_map.items():
                if handler.include_in_schema is False:  # /v1/traces: OTLP defines its shapes
                    continue
                if "await request.body()" in inspect.getsource(handler.fn):
                    reads_body.add((method.lower(), route.path_format))
    declared = {(method, path) for method, path, op in operations(doc) if "requestBody" in op}
    assert declared == reads_body
    assert len(declared) == 7
    for path in ("/v1/conversations/{cid}/events", "/events"):
        body = doc["paths"][path]["post"]["requestBody"]
        assert set(body["content"]) == {JSON, NDJSON}
        assert body["required"] is True
    cypher = resolve(doc, doc["paths"]["/cypher"]["post"]["requestBody"]["content"][JSON]["schema"])
    assert cypher["required"] == ["query"]
    assert set(cypher["properties"]) == {"query", "params", "workspace"}


def test_error_replies_are_declared_with_the_error_body(doc: dict[str, Any]) -> None:
    for method, path, op in operations(doc):
        statuses = {int(code) for code in op["responses"]}
        if path not in ("/healthz", "/metrics", "/status"):  # unguarded
            assert set(STANDARD_ERRORS) <= statuses, (method, path)
        for code, response in op["responses"].items():
            if int(code) >= 400:
                assert response["content"] == {JSON: {"schema": {"$ref": ERROR_REF}}}, (method, path, code)
    error = doc["components"]["schemas"]["ErrorInfo"]
    assert error["required"] == ["code", "message"]
    assert "status_code" not in json.dumps(doc)  # Litestar's default error shape is gone
    assert problems(doc, {"$ref": ERROR_REF}, {"error": {"code": "not_found", "message": "no"}}) == []
    assert problems(doc, {"$ref": ERROR_REF}, {"status_code": 404, "detail": "Not Found"}) != []
    ingest = doc["paths"]["/v1/conversations/{cid}/events"]["post"]["responses"]
    assert set(ingest) == {"200", "202", "400", "401", "403", "413", "415", "422", "503"}
    relay = doc["paths"]["/v1/conversations/{cid}/relays/{relay_id}"]["post"]["responses"]
    assert {"404", "409"} <= set(relay)


def test_success_media_types(doc: dict[str, Any]) -> None:
    special = {
        ("get", "/v1/conversations/{cid}/events"): {NDJSON},
        ("get", "/v1/conversations/{cid}/stream"): {SSE},
        ("get", "/v1/live/conversations"): {SSE},
        ("get", "/v1/conversations/{cid}/agents/{agent_id}/control"): {SSE},
        ("get", "/v1/conversations/{cid}/dag"): {JSON, SVG},
        ("get", "/metrics"): {"text/plain"},
        ("delete", "/v1/conversations/{cid}"): set(),
    }
    for method, path, op in operations(doc):
        for code, response in op["responses"].items():
            if code.startswith("2"):
                media = set(response.get("content") or {})
                assert media == special.get((method, path), {JSON}), (method, path, code)
                if JSON in media:  # the JSON it carries, not Litestar's "string" for Response[bytes]
                    assert response["content"][JSON]["schema"].get("type") != "string", (method, path)


def test_required_query_parameters(doc: dict[str, Any]) -> None:
    def params(path: str) -> dict[str, Any]:
        return {p["name"]: p for p in doc["paths"][path]["delete"]["parameters"]}

    idle = params("/sessions")["idle_days"]
    assert idle["required"] is True
    assert idle["schema"] == {"type": "number", "exclusiveMinimum": 0, "description": idle["description"]}
    assert params("/sessions")["workspace"]["required"] is False
    assert params("/sessions/{session_id}")["workspace"]["required"] is True
    cid = params("/v1/conversations/{cid}")["cid"]["schema"]
    assert re.fullmatch(cid["pattern"].strip("^$"), "acme:run-1.x@y")
    assert not re.fullmatch(cid["pattern"].strip("^$"), "-x")


def test_structs_as_on_the_wire(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    assert "__extra__" not in json.dumps(doc)  # the events' internal slot for unknown fields
    assert "additionalProperties" not in schemas["Text"]  # unknown event fields are kept
    for closed in ("RelayDecision", "EditBody", "SummarizeBody"):  # forbid_unknown_fields
        assert schemas[closed]["additionalProperties"] is False
    event = {"type": "text", "runId": "r", "id": "t", "content": "c"}
    for timestamp in (0, 1.5, "2026-01-01T00:00:00Z", None):  # int | float | str: an int is valid too
        assert problems(doc, {"$ref": "#/components/schemas/Text"}, {**event, "timestamp": timestamp}) == []


# --- real replies against the document ------------------------------------------------------------


def text(i: int) -> dict[str, Any]:
    return {
        "type": "text",
        "runId": "r",
        "id": f"t{i}",
        "content": f"c{i}",
        "timestamp": "2026-01-01T00:00:00Z",
    }


def test_conversation_replies_conform(tmp_path: Path, doc: dict[str, Any]) -> None:
    config = ServerConfig(data_dir=tmp_path, database_url="memory://", intelligence=False)
    with TestClient(create_app(config)) as client:
        base = "/v1/conversations/c1"
        user = {"type": "user", "runId": "u", "content": "hi"}
        relay = {
            "type": "relay",
            "runId": "r",
            "id": "rl1",
            "kind": "permission",
            "toolCallId": "tc1",
            "tool": "bash",
        }
        replies = [
            client.post(f"{base}/events", json=user),
            client.post(f"{base}/events", json=[text(1), text(2)]),
            client.post(
                f"{base}/events",
                content="".join(json.dumps(e) + "\n" for e in (text(3), relay)),
                headers={"Content-Type": NDJSON},
            ),
            client.get("/v1/conversations"),
            client.get(base),
            client.get(f"{base}/events"),
            client.get(f"{base}/thread"),
            client.get(f"{base}/thread?model=flat"),
            client.get(f"{base}/messages"),
            client.get(f"{base}/dag"),
            client.get(f"{base}/dag?format=svg"),
            client.get(f"{base}/repl"),
            client.get(f"{base}/relays"),
            client.post(f"{base}/relays/rl1", json={"approved": True}),
            client.get(f"{base}/relays"),
            client.get(f"{base}/path"),
        ]
        first = client.get(f"{base}/path").json()["path"][0]["id"]
        replies += [
            client.post(f"{base}/messages/{first}/edit", json={"content": "hello"}),
            client.post(f"{base}/messages/{first}/select"),
            # errors
            client.post(f"{base}/relays/rl1", json={"approved": False}),  # 409
            client.post(f"{base}/relays/nope", json={"approved": False}),  # 404
            client.post(f"{base}/relays/rl1", content=b"{"),  # 400
            client.post(f"{base}/events", json=[{"type": "nope"}]),  # 422
            client.post(f"{base}/events", content=b"x", headers={"Content-Type": "text/plain"}),  # 415
            client.get("/v1/conversations/unknown/thread"),  # 404
            client.get(f"{base}/dag?format=png"),  # 400
            client.get(f"{base}/events?limit=0"),  # 400 (Litestar's own validation)
            client.post(f"{base}/messages/nope/regenerate"),  # 404
            client.delete(base),
        ]
        assert [r.status_code for r in replies[:3]] == [200, 200, 200]
        assert replies[10].headers["content-type"].startswith(SVG)
        assert sorted({r.status_code for r in replies}) == [200, 204, 400, 404, 409, 415, 422]
        for reply in replies:
            conforms(doc, reply)


def test_intelligence_replies_conform(service: IntelligenceService) -> None:
    app = Litestar(route_handlers=[create_intelligence_router(service)])
    doc: dict[str, Any] = app.openapi_schema.to_schema()
    with TestClient(app) as client:
        replies = [
            client.post("/events", json=ev("session:start", 0, parent_id=None)),
            client.post("/events", json=[ev("prompt:submit", 10, prompt="hi")]),
            client.post(
                "/events",
                content=json.dumps(ev("prompt:submit", 20)) + "\n",
                headers={"Content-Type": NDJSON},
            ),
            client.post("/cypher", json={"query": "MATCH (e:Event) RETURN count(e) AS n", "workspace": WS}),
            client.get(f"/blobs/{SID}"),
            client.get("/queues/dead-letter"),
            client.post("/queues/dead-letter/nobody/replay"),
            client.post("/queues/dead-letter/nobody/purge"),
            client.get("/intelligence/status"),
            client.delete("/sessions?idle_days=100000"),
            client.delete(f"/sessions/nobody?workspace={WS}"),  # 404
            client.delete(f"/sessions/{SID}"),  # 400: workspace is required
            client.delete("/sessions"),  # 400: idle_days is required
            client.post("/events", json={"event": "x"}),  # 400
            client.post("/events", json=[{"event": "x"}]),  # 422
            client.post("/cypher", json={"query": "CREATE (n)"}),  # 400
            client.get(f"/blobs/{SID}/nope"),  # 404 or 400
            client.delete(f"/sessions/{SID}?workspace={WS}"),
        ]
        assert [r.status_code for r in replies[:3]] == [202, 202, 202]
        assert replies[-1].status_code == 202
        assert {400, 404, 422} <= {r.status_code for r in replies}
        for reply in replies:
            conforms(doc, reply)


def test_options_allows_every_method_of_the_path(tmp_path: Path) -> None:
    """Litestar 2 answered OPTIONS with the methods of the first handler registered on a path
    (``GET /v1/conversations/{cid}`` said ``DELETE, OPTIONS``; litestar#4169); the server corrects it."""
    import re

    from litestar.routes import HTTPRoute

    app = full_app(tmp_path)
    routes = [route for route in app.routes if isinstance(route, HTTPRoute)]
    assert len(routes) > 20
    shared = [route for route in routes if len(route.methods - {"OPTIONS", "HEAD"}) > 1]
    assert shared, "no path with two methods: the case this guards is gone"
    with TestClient(app) as client:
        for route in routes:
            path = re.sub(r"\{[^}]+\}", "x", route.path_format)
            response = client.options(path)
            assert response.status_code == 204, path
            assert set(response.headers["allow"].split(", ")) == set(route.methods), path
