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

Each statement runs within the read limits (`FalkorEngine.read`, `convograph.intelligence.reads`):
``timeout_ms`` (``query_timeout``), the engine's per-statement memory limit (``query_memory``; a
``range()`` whose constant bounds alone pass it is refused before it runs, since FalkorDB builds
a range whole before it checks memory) and ``row_cap`` (the reply is read up to ``row_cap`` rows,
``truncated`` says whether it had more).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from convograph.intelligence.engine import EngineError, GraphEngine, QueryMemoryExceeded, QueryTimeout
from convograph.intelligence.writer import GraphNames

__all__ = [
    "ALLOWED_PROCEDURES",
    "MAX_NESTING",
    "MAX_OPERATORS",
    "MAX_PARAM_DEPTH",
    "MAX_QUERY_CHARS",
    "AccessDenied",
    "CypherResult",
    "QueryError",
    "check_complexity",
    "check_range_bounds",
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
_RANGE = re.compile(r"\brange\s*\(([^()]*)\)", re.IGNORECASE)
_INTEGER = re.compile(r"^[+-]?\d+$")
_TOKEN = re.compile(r"[(\[{)\]},]|[-+]|[A-Za-z_]\w*|\$\w+|\d[\w.]*|[*/%^=<>.!~|:]+|\S")
_EXPRESSION_KEYWORDS = frozenset(
    [
        "RETURN",
        "WHERE",
        "WITH",
        "AND",
        "OR",
        "XOR",
        "IN",
        "WHEN",
        "THEN",
        "ELSE",
        "CASE",
        "UNWIND",
        "SKIP",
        "LIMIT",
        "BY",
        "DISTINCT",
        "IS",
        "CONTAINS",
        "STARTS",
        "ENDS",
        "YIELD",
        "AS",
        "MATCH",
        "OPTIONAL",
        "ORDER",
        "UNION",
        "ALL",
    ]
)
MAX_QUERY_CHARS = 65_536
"""Longest query text. A 100 KB chain of ``+`` made the engine overflow its stack and crash."""
MAX_OPERATORS = 2_000
"""Most operators and subscripts in one query: FalkorDB nests each in its expression tree (50,000
``+`` crashed the engine) and takes quadratic time for chained subscripts (30,000: 45 s)."""
MAX_NESTING = 12
"""Deepest bracket nesting, where a bracket after ``k`` prefix operators (``-``, ``+``, ``NOT``)
counts ``1 + 2k``: FalkorDB's parser takes exponential time in it (``(`` x14: 0.1 s; ``-(`` x10:
6 s; ``--(`` x7: 18 s) and cannot be interrupted while it parses."""
MAX_PARAM_DEPTH = 10
"""Deepest nesting of lists and maps in ``params`` (rendered into the query text, so parsed alike)."""
_VALUE_BYTES = 16
"""Bytes of one FalkorDB value (``SIValue``): what each element of a ``range()`` list costs."""
_MB = 1024 * 1024


class QueryError(ValueError):
    """A query that cannot run (HTTP 400). ``code``: ``read_only``, ``cypher_error``,
    ``query_timeout``, ``query_memory``, ``query_too_complex``, ``invalid_params`` or
    ``workspace_required``."""

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


def check_complexity(query: str) -> None:
    """Raise `QueryError` (``query_too_complex``) for a query past `MAX_QUERY_CHARS`,
    `MAX_OPERATORS` or `MAX_NESTING`: shapes the engine's parser cannot bound in time or stack.
    O(len(query))."""
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(
            "query_too_complex",
            f"the query has {len(query):,} characters; at most {MAX_QUERY_CHARS:,} are allowed",
        )
    scores = [0]
    worst = operators = prefix = 0
    operand = False
    for match in _TOKEN.finditer(_STRIP.sub(" _ ", query)):
        token = match.group()
        word = token.upper()
        if token in "([{":
            operators += token == "[" and operand  # a subscript
            scores.append(scores[-1] + 1 + 2 * prefix)
            worst = max(worst, scores[-1])
            prefix, operand = 0, False
        elif token in ")]}":
            if len(scores) > 1:
                scores.pop()
            prefix, operand = 0, True
        elif token in ("-", "+") or word == "NOT":
            if operand:
                operators += 1
            else:
                prefix += 1
            operand = False
        elif word in _EXPRESSION_KEYWORDS or token == ",":
            operators += word in ("AND", "OR", "XOR")
            prefix, operand = 0, False
        elif token[0].isalnum() or token[0] in "_$":
            operand = True  # a prefix operator still applies to a call's bracket: -abs(...)
        else:
            operators += 1
            prefix, operand = 0, False
    if operators > MAX_OPERATORS:
        raise QueryError(
            "query_too_complex",
            f"the query has {operators:,} operators; at most {MAX_OPERATORS:,} are allowed",
        )
    if worst > MAX_NESTING:
        raise QueryError(
            "query_too_complex",
            f"brackets nest {worst} deep (one after k prefix operators counts 1 + 2k); at most {MAX_NESTING} "
            "are allowed, as the engine's parser takes exponential time in it",
        )


def _depth(value: Any) -> int:
    """Nesting depth of lists and maps in a JSON value; iterative. O(size)."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest


def _range_argument(text: str, params: Mapping[str, Any]) -> int | None:
    text = text.strip()
    if _INTEGER.match(text):
        return int(text)
    if text.startswith("$"):
        value = params.get(text[1:].strip("`"))
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def check_range_bounds(query: str, params: Mapping[str, Any], memory_limit_mb: int) -> None:
    """Raise `QueryError` (``query_memory``) for a ``range(start, end[, step])`` whose arguments are
    integer literals or parameters and whose list alone needs more than ``memory_limit_mb``.
    Ranges with computed bounds are left to the engine's limit. O(len(query))."""
    if memory_limit_mb <= 0:
        return
    bare = _STRIP.sub(" ", query)
    for call in _RANGE.finditer(bare):
        parts = call.group(1).split(",")
        if len(parts) not in (2, 3):
            continue
        values = [_range_argument(part, params) for part in parts]
        if any(value is None for value in values):
            continue
        start, end = values[0] or 0, values[1] or 0
        step = values[2] if len(values) == 3 else 1
        if not step:
            continue
        size = max(0, (end - start) // step + 1)
        if size * _VALUE_BYTES > memory_limit_mb * _MB:
            raise QueryError(
                "query_memory",
                f"range({call.group(1).strip()}) builds {size:,} values ({size * _VALUE_BYTES / _MB:,.0f} MB), "
                f"more than the query memory limit of {memory_limit_mb} MB (query_memory_mb)",
            )


def _check_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise QueryError("invalid_params", "params must be a JSON object")
    for key, value in params.items():
        if not isinstance(key, str) or not _PARAM_NAME.match(key):
            raise QueryError("invalid_params", f"parameter name {key!r} must be letters, digits and '_'")
        if _depth(value) > MAX_PARAM_DEPTH:
            raise QueryError(
                "invalid_params", f"parameter {key!r} nests lists and maps more than {MAX_PARAM_DEPTH} deep"
            )
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
    key: str | None = None,
    union_graph: str | None = None,
) -> CypherResult:
    """Run a read-only query; see the module docstring for scoping. ``key`` (the caller's API key
    id) is what the per-key read slots count; ``union_graph``, the all-workspaces graph when the
    service keeps one. Raises `QueryError`/`AccessDenied`, and `TooManyQueries` / `ReadBusy` /
    `EngineUnavailable` from the engine."""
    if not isinstance(query, str) or not query.strip():
        raise QueryError("cypher_error", "query must be a non-blank string")
    check_read_only(query)
    check_complexity(query)
    base_params = _check_params(params)
    memory_mb = engine.memory_limit_bytes // _MB or engine.limits.memory_mb
    check_range_bounds(query, base_params, memory_mb)
    graphs = engine.graphs()  # one GRAPH.LIST per query
    targets, forced = _targets(graphs, names, workspace, allowed_workspaces)
    existing = set(graphs)
    plan: list[tuple[str | None, str]] = [
        (ws, names.graph(ws)) for ws in targets if names.graph(ws) in existing
    ]
    if workspace in (None, "*") and allowed_workspaces is None and union_graph in existing:
        plan = [(None, union_graph)]  # every workspace as one database; $workspace is null
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
            raise QueryError(
                "query_timeout", _timeout_message(timeout_ms, "no time was left for every workspace")
            )
        try:
            rows, more = engine.read(
                graph, query, statement_params, timeout_ms=remaining, row_cap=row_cap - len(results), key=key
            )
        except QueryTimeout as exc:
            raise QueryError("query_timeout", _timeout_message(timeout_ms, str(exc))) from None
        except QueryMemoryExceeded as exc:
            raise QueryError(
                "query_memory",
                f"the query needed more memory than its limit of {memory_mb} MB (query_memory_mb) "
                f"and was stopped ({exc})",
            ) from None
        except EngineError as exc:
            message = str(exc)
            code = "read_only" if "read-only" in message or "read only" in message else "cypher_error"
            raise QueryError(code, message) from None
        if not columns:
            columns = rows.columns
        results.extend(dict(zip(rows.columns, row, strict=False)) for row in rows.rows)
        if more:
            truncated = True
            break
    return CypherResult(columns=columns, results=results, truncated=truncated)


def _timeout_message(timeout_ms: int, detail: str) -> str:
    return (
        f"the query ran past its time limit of {timeout_ms} ms (query_timeout_ms) and was stopped: {detail}"
    )
