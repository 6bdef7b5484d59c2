"""The read-only Cypher surface: guard, workspace scoping, timeout and row cap.

Two independent locks keep queries read-only: `check_read_only` rejects write clauses (CREATE,
MERGE, SET, DELETE, REMOVE, DROP, FOREACH, LOAD CSV) and procedures outside `ALLOWED_PROCEDURES`
after stripping strings and comments, and the statement then runs with ``GRAPH.RO_QUERY``,
which the engine refuses for any write.

Workspaces are graphs (see `convograph.intelligence.writer`), so scoping is structural:

- ``workspace="<name>"`` runs on that workspace's graph with ``$workspace`` set to it;
- ``workspace="*"`` or ``None`` runs on every visible workspace graph, in name order, with
  ``$workspace`` set per graph unless the caller passed one; rows are concatenated (aggregates,
  ``ORDER BY`` and ``LIMIT`` apply per workspace);
- ``allowed_workspaces`` (from a workspace-restricted API key) limits what is visible: a named
  workspace outside it is `AccessDenied`, ``"*"`` means every *allowed* workspace.

Each statement runs with the engine's own timeout; the row cap stops collecting at ``row_cap``
rows and reports ``truncated``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from convograph.intelligence.engine import EngineError, GraphEngine, QueryTimeout
from convograph.intelligence.writer import GraphNames

__all__ = [
    "ALLOWED_PROCEDURES",
    "AccessDenied",
    "CypherResult",
    "QueryError",
    "check_read_only",
    "run_cypher",
]

ALLOWED_PROCEDURES = frozenset(
    {
        "db.labels",
        "db.relationshiptypes",
        "db.propertykeys",
        "db.indexes",
        "db.constraints",
        "db.idx.fulltext.querynodes",
        "db.idx.fulltext.queryrelationships",
        "db.idx.vector.querynodes",
        "db.idx.vector.queryrelationships",
        "dbms.procedures",
    }
)
_WRITE = re.compile(
    r"(?<![.\w$:])\b(CREATE|MERGE|SET|DELETE|DETACH|REMOVE|DROP|FOREACH|LOAD\s+CSV)\b", re.IGNORECASE
)
_CALL = re.compile(r"\bCALL\s+([A-Za-z_][\w.]*)", re.IGNORECASE)
_CALL_SUBQUERY = re.compile(r"\bCALL\s*\{", re.IGNORECASE)
_STRIP = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`|//[^\n]*|/\*.*?\*/", re.DOTALL)
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class QueryError(ValueError):
    """A query that cannot run (HTTP 400). ``code``: ``read_only``, ``cypher_error``,
    ``query_timeout``, ``invalid_params`` or ``workspace_required``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class AccessDenied(PermissionError):
    """The caller's key may not see that workspace (HTTP 403)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = "forbidden_workspace"
        self.message = message


class CypherResult(msgspec.Struct, frozen=True):
    """``{"columns", "results": [{column: value}], "truncated"}`` as in the contract."""

    columns: list[str]
    results: list[dict[str, Any]]
    truncated: bool = False


def check_read_only(query: str) -> None:
    """Raise `QueryError` (``read_only``) if ``query`` contains a write clause or procedure call.

    O(len(query)). String literals, escaped names and comments are ignored.
    """
    bare = _STRIP.sub(" ", query)
    match = _WRITE.search(bare)
    if match:
        raise QueryError(
            "read_only", f"write clause {match.group(1).upper()!r} is not allowed: queries are read-only"
        )
    if _CALL_SUBQUERY.search(bare):
        raise QueryError("read_only", "CALL { ... } subqueries are not allowed: queries are read-only")
    for call in _CALL.finditer(bare):
        name = call.group(1).lower()
        if name not in ALLOWED_PROCEDURES:
            raise QueryError("read_only", f"procedure {call.group(1)!r} is not in the read-only allow-list")


def _check_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise QueryError("invalid_params", "params must be a JSON object")
    for key in params:
        if not isinstance(key, str) or not _PARAM_NAME.match(key):
            raise QueryError("invalid_params", f"parameter name {key!r} must be letters, digits and '_'")
    return dict(params)


def _targets(
    graphs: list[str], names: GraphNames, workspace: str | None, allowed: frozenset[str] | None
) -> tuple[list[str], bool]:
    """(workspaces to query, whether $workspace is forced); ``graphs`` are the engine's graphs."""
    if workspace is not None and workspace != "*":
        if allowed is not None and workspace not in allowed:
            raise AccessDenied(f"this API key may not read workspace {workspace!r}")
        return [workspace], True
    if workspace is None and allowed is not None and len(allowed) != 1:
        raise QueryError(
            "workspace_required", 'this API key is limited to several workspaces: pass "workspace" (or "*")'
        )
    existing = [ws for ws in (names.workspace(g) for g in graphs) if ws is not None]
    if allowed is not None:
        existing = [ws for ws in existing if ws in allowed]
    return sorted(existing), False


def run_cypher(
    engine: GraphEngine,
    names: GraphNames,
    query: str,
    params: Mapping[str, Any] | None = None,
    workspace: str | None = None,
    *,
    allowed_workspaces: frozenset[str] | None = None,
    row_cap: int = 10_000,
    timeout_ms: int = 10_000,
) -> CypherResult:
    """Run a read-only query; see the module docstring for scoping. Raises `QueryError`/`AccessDenied`."""
    if not isinstance(query, str) or not query.strip():
        raise QueryError("cypher_error", "query must be a non-blank string")
    check_read_only(query)
    base_params = _check_params(params)
    graphs = engine.graphs()  # one GRAPH.LIST per query
    targets, forced = _targets(graphs, names, workspace, allowed_workspaces)
    existing = set(graphs)
    plan = [(ws, names.graph(ws)) for ws in targets if names.graph(ws) in existing]
    if not plan:  # nothing stored yet: run on an empty graph so syntax errors and columns still come back
        if names.empty_graph not in existing:
            engine.execute(names.empty_graph, "RETURN 1")
        plan = [(workspace if workspace not in (None, "*") else "", names.empty_graph)]
    columns: list[str] = []
    results: list[dict[str, Any]] = []
    truncated = False
    deadline = time.monotonic() + timeout_ms / 1000
    for ws, graph in plan:
        statement_params = dict(base_params)
        if forced or "workspace" not in statement_params:
            statement_params["workspace"] = ws
        remaining = int((deadline - time.monotonic()) * 1000)
        if remaining <= 0:
            raise QueryError("query_timeout", f"query exceeded its {timeout_ms} ms budget")
        try:
            rows = engine.execute(graph, query, statement_params, read_only=True, timeout_ms=remaining)
        except QueryTimeout as exc:
            raise QueryError("query_timeout", f"query exceeded its {timeout_ms} ms budget: {exc}") from None
        except EngineError as exc:
            message = str(exc)
            code = "read_only" if "read-only" in message or "read only" in message else "cypher_error"
            raise QueryError(code, message) from None
        if not columns:
            columns = rows.columns
        for row in rows.rows:
            if len(results) >= row_cap:
                truncated = True
                break
            results.append(dict(zip(rows.columns, row, strict=False)))
        if truncated:
            break
    return CypherResult(columns=columns, results=results, truncated=truncated)
