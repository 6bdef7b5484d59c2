"""Agent tools ``graph_query`` and ``blob_read``: plain functions plus JSON schemas.

Both run against an `IntelligenceBackend`: `ServiceBackend` (in process, over an
`IntelligenceService`) or `HttpBackend` (``POST /cypher`` and ``GET /blobs/...`` of a running
server, ``Authorization: Bearer`` when a key is given). Failures raise `ToolError` with a typed
``code`` (``validation_error``, ``uri_error``, ``http_status``, ``connection_error``,
``timeout``, ``query_error``, ``not_found``) instead of masquerading as empty results.

``blob_read`` never returns the content: it writes it to
``<output_dir>/<session>/<key>.json`` (characters outside ``[A-Za-z0-9._-]`` become ``_``) and
returns the path, so an agent inspects it with ``jq``/``head`` instead of loading a 100k-token
line into its context.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import httpx
import msgspec

from convograph.intelligence.blobs import BlobError, parse_blob_uri
from convograph.intelligence.query import AccessDenied, QueryError
from convograph.intelligence.service import IntelligenceService, NotFound

__all__ = [
    "BLOB_READ_SCHEMA",
    "GRAPH_QUERY_SCHEMA",
    "HttpBackend",
    "IntelligenceBackend",
    "ServiceBackend",
    "ToolError",
    "blob_read",
    "graph_query",
]

GRAPH_QUERY_SCHEMA: dict[str, Any] = {
    "name": "graph_query",
    "description": (
        "Run a read-only Cypher query on the context-intelligence graph (FalkorDB). $workspace is "
        "injected; anchor every MATCH on {workspace: $workspace}. Layer 1: (:Session)-[:HAS_EVENT]->"
        "(:Event), (:Session)-[:HAS_TOOL_CALL]->(:ToolCall)-[:HAS_EVENT]->(:Event), "
        "(:Session)-[:HAS_FORK]->(:ForkedSession). Workspace rollups (cheaper than scanning every "
        "ToolCall): (:ToolCall)-[:CALLS]->(:Tool {tool_name, calls, max_duration_ms}), "
        "(:ParallelGroup {parallel_group_id, width})-[:HAS_MEMBER]->(:ToolCall), "
        "(:LlmResponseEvent)-[:BY_MODEL]->(:Model {model, responses, input_tokens, output_tokens}). "
        "Always LIMIT; results are capped."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "One read-only Cypher statement."},
            "params": {
                "type": "object",
                "description": "Query parameters ($name).",
                "additionalProperties": True,
            },
            "workspace": {"type": "string", "description": 'Workspace to query; "*" for every visible one.'},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
}

BLOB_READ_SCHEMA: dict[str, Any] = {
    "name": "blob_read",
    "description": (
        "Fetch a ci-blob://{session_id}/{key} payload, write it to a local file and return the path. "
        "Blobs can hold 100k-token lines: inspect the file with jq or head, never load it whole."
    ),
    "parameters": {
        "type": "object",
        "properties": {"uri": {"type": "string", "description": "ci-blob://{session_id}/{key}"}},
        "required": ["uri"],
        "additionalProperties": False,
    },
}

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_decoder = msgspec.json.Decoder()


class ToolError(Exception):
    """A tool failure an agent can act on: ``code`` + message (+ HTTP ``status`` if any)."""

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.status is not None:
            out["status"] = self.status
        return out


class IntelligenceBackend(Protocol):
    """Where the tools send their requests."""

    def cypher(
        self, query: str, params: Mapping[str, Any] | None, workspace: str | None
    ) -> dict[str, Any]: ...

    def read_blob(self, session_id: str, key: str) -> bytes: ...


class ServiceBackend:
    """In-process backend over an `IntelligenceService`, optionally workspace-restricted."""

    def __init__(
        self, service: IntelligenceService, allowed_workspaces: frozenset[str] | None = None
    ) -> None:
        self.service = service
        self.allowed_workspaces = allowed_workspaces

    def cypher(self, query: str, params: Mapping[str, Any] | None, workspace: str | None) -> dict[str, Any]:
        try:
            result = self.service.cypher(query, params, workspace, allowed_workspaces=self.allowed_workspaces)
        except QueryError as exc:
            raise ToolError("query_error", f"{exc.code}: {exc.message}", 400) from None
        except AccessDenied as exc:
            raise ToolError("http_status", exc.message, 403) from None
        return {"columns": result.columns, "results": result.results, "truncated": result.truncated}

    def read_blob(self, session_id: str, key: str) -> bytes:
        try:
            return self.service.read_blob(session_id, key, allowed_workspaces=self.allowed_workspaces)
        except NotFound as exc:
            raise ToolError("not_found", str(exc), 404) from None
        except BlobError as exc:
            raise ToolError("uri_error", exc.message) from None


def _excerpt(text: str, limit: int = 200) -> str:
    """A one-line excerpt of a response body (an HTML error page is many lines)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class HttpBackend:
    """Backend over a running server (``base_url`` like ``http://127.0.0.1:8321``)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        client: httpx.Client | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(base_url=base_url, headers=headers, timeout=timeout)

    def _request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._client.request(method, url, **kwargs)
        except httpx.TimeoutException as exc:
            raise ToolError("timeout", f"{self._client.base_url} did not answer in time: {exc}") from None
        except httpx.TransportError as exc:
            raise ToolError("connection_error", f"cannot reach {self._client.base_url}: {exc}") from None
        if response.status_code >= 400:
            message = f"HTTP {response.status_code} from {response.request.url}: {_excerpt(response.text)}"
            try:
                error = response.json()["error"]
                message = f"{error['code']}: {error['message']}"
            except Exception:
                pass
            code = "not_found" if response.status_code == 404 else "http_status"
            raise ToolError(code, message, response.status_code)
        return response

    def cypher(self, query: str, params: Mapping[str, Any] | None, workspace: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query, "params": dict(params or {})}
        if workspace is not None:
            body["workspace"] = workspace
        response = self._request("POST", "/cypher", json=body)
        try:
            payload = response.json()
        except ValueError as exc:
            raise ToolError("decode_error", f"server answered non-JSON: {exc}") from None
        if isinstance(payload, list) and all(isinstance(row, dict) for row in payload):  # bare rows
            return {"columns": list(payload[0]) if payload else [], "results": payload, "truncated": False}
        if not isinstance(payload, dict):
            raise ToolError(
                "decode_error", f"server answered JSON that is not a query result: {_excerpt(response.text)}"
            )
        return payload

    def read_blob(self, session_id: str, key: str) -> bytes:
        from urllib.parse import quote

        response = self._request("GET", f"/blobs/{quote(session_id, safe='')}/{quote(key, safe='')}")
        return response.content

    def close(self) -> None:
        self._client.close()


def graph_query(
    query: str,
    params: Mapping[str, Any] | None = None,
    workspace: str | None = None,
    *,
    backend: IntelligenceBackend,
) -> dict[str, Any]:
    """Run a read-only query; returns ``{"columns", "results", "truncated"}``."""
    if not isinstance(query, str) or not query.strip():
        raise ToolError("validation_error", "query must be a non-blank string")
    if params is not None and not isinstance(params, Mapping):
        raise ToolError("validation_error", "params must be an object")
    return backend.cypher(query, params, workspace)


def blob_read(
    uri: str, *, backend: IntelligenceBackend, output_dir: str | Path = "/tmp/ci-blobs"
) -> dict[str, Any]:
    """Fetch a blob, write it under ``output_dir`` and return ``{"path", "bytes", "uri"}``."""
    try:
        session_id, key = parse_blob_uri(uri)
    except BlobError as exc:
        raise ToolError("uri_error", exc.message) from None
    content = backend.read_blob(session_id, key)
    path = Path(output_dir) / _UNSAFE.sub("_", session_id) / f"{_UNSAFE.sub('_', key)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return {"path": str(path), "bytes": len(content), "uri": uri}
