"""Litestar routes for context intelligence (contract §4), over an `IntelligenceService`.

`create_intelligence_router(service, principal=...)` returns a ``Router`` with:

- ``POST /events`` — one envelope → 202 ``{"status": "queued"|"duplicate", "session_id"}`` (single
  envelopes arriving together share one journal commit: group commit, reply after the commit); a JSON
  array or NDJSON body (``application/x-ndjson``) is a batch → 202 ``{"status": "queued",
  "accepted", "duplicates", "last_seq"}``, validated whole (422 listing every bad item, nothing
  stored). ``?replay=true`` is accepted for upstream compatibility (deduplication stays on:
  replays are harmless because every graph write is an idempotent MERGE).
- ``POST /cypher`` — ``{query, params?, workspace?}`` → ``{"columns", "results", "truncated"}``.
- ``GET /blobs/{session_id}`` → ``{"session_id", "blobs": [uri, ...]}``;
  ``GET /blobs/{session_id}/{key}`` → the stored JSON value.
- ``GET /queues/dead-letter``, ``POST /queues/dead-letter/{key}/replay``,
  ``POST /queues/dead-letter/{key}/purge`` (upstream paths) and ``GET /intelligence/status``.
- ``DELETE /sessions/{session_id}?workspace=W`` — forget one session of one workspace (journal
  records, blobs, and its graph nodes: in place, or by a workspace rebuild) → 202 ``{"workspace",
  "session_id", "events", "blobs", "rebuilding"}``; 404 when the workspace has no such session.
  Upstream's client ships a ``delete_session`` tool with no server endpoint behind it (§10 B16).
- ``DELETE /sessions?idle_days=D[&workspace=W]`` — retention: forget every session (of W, or of
  every workspace the key may write) idle for more than D days → 202 ``{"idle_days", "sessions",
  "events", "blobs", "rebuilding"}``.

Errors are ``{"error": {"code", "message", "details"?}}``: 400 invalid envelope / query (a query
past its limits: ``query_timeout``, ``query_memory``), 403 a workspace the key may not touch, 404
unknown blob, 413 a ``/cypher`` body over `CYPHER_MAX_BODY_BYTES`, 422 invalid batch items, 429 a
key already running its share of queries (``too_many_queries``, with ``Retry-After``), 503 store
failure, graph engine unavailable (``graph_unavailable``) or every query slot busy
(``graph_busy``), both with ``Retry-After``.

``principal(request) -> Principal`` tells the routes who is calling (``created_by``) and which
workspaces the key may touch; the default reads ``request.state["principal"]`` if an auth
middleware put one there, else an unrestricted anonymous principal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, Response, Router, delete, get, post
from litestar.concurrency import sync_to_thread
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromPath, QueryParameter

from convograph.http.bodies import JSON_ERRORS, json_problem
from convograph.http.openapi import documented
from convograph.intelligence.blobs import BlobError
from convograph.intelligence.engine import EngineUnavailable, ReadBusy, TooManyQueries
from convograph.intelligence.envelope import EnvelopeError, parse_envelope
from convograph.intelligence.group_commit import GroupCommit
from convograph.intelligence.journal import DeadLetterGroup
from convograph.intelligence.journal_pg import JournalUnavailable
from convograph.intelligence.query import AccessDenied, CypherResult, QueryError
from convograph.intelligence.service import (
    BatchError,
    ForgetResult,
    IntelligenceService,
    NotFound,
    RetentionResult,
    check_write,
)

__all__ = [
    "CYPHER_MAX_BODY_BYTES",
    "GroupCommit",
    "Principal",
    "create_intelligence_router",
    "error_response",
]

CYPHER_MAX_BODY_BYTES = 1024 * 1024
"""Largest ``POST /cypher`` body (query and parameters): 413 beyond it."""

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_INLINE_BODY_BYTES = 64 * 1024
"""``POST /events`` bodies up to this size are decoded on the event loop (cheap), larger ones on a thread."""


class Principal(msgspec.Struct, frozen=True):
    """Who is calling: ``created_by`` stamps writes; ``allowed_workspaces`` None = every workspace."""

    created_by: str | None = None
    allowed_workspaces: frozenset[str] | None = None


# Request and reply shapes, for the OpenAPI document (the routes decode and encode plain data).
# The patterns state `parse_envelope`'s rules (non-blank, no NUL; a session id also no edge
# whitespace, U+0001, '/', '\\', '.' or '..'); they are declared, never used for decoding.

_NAME = r"^[^\x00]*[^\s\x00][^\x00]*$"
_SESSION = r"^(?!\.{1,2}$)[^\s\x00\x01/\\]([^\x00\x01/\\]*[^\s\x00\x01/\\])?$"


class HookData(msgspec.Struct, frozen=True):
    """The hook's payload, kept as sent; these fields are required, any others are allowed."""

    session_id: Annotated[str, msgspec.Meta(pattern=_SESSION, max_length=512)]
    timestamp: Annotated[str, msgspec.Meta(extra_json_schema={"extra": {"format": "date-time"}})]
    """ISO 8601; without a UTC offset it is read as UTC."""


class HookEvent(msgspec.Struct, frozen=True):
    """One Amplifier hook envelope (`parse_envelope` validates it)."""

    event: Annotated[str, msgspec.Meta(pattern=_NAME, max_length=200)]
    workspace: Annotated[str, msgspec.Meta(pattern=_NAME, max_length=512)]
    data: HookData
    idempotency_key: Annotated[str, msgspec.Meta(pattern=_NAME, max_length=512)] | None = None


class CypherRequest(msgspec.Struct, frozen=True):
    query: Annotated[str, msgspec.Meta(pattern=r"\S")]
    params: dict[str, Any] | None = None
    workspace: str | None = None


class Queued(msgspec.Struct, frozen=True):
    """One envelope: queued, or a duplicate of one already stored."""

    status: Literal["queued", "duplicate"]
    session_id: str


class BatchQueued(msgspec.Struct, frozen=True):
    """A batch (JSON array or NDJSON)."""

    status: Literal["queued", "duplicate"]
    accepted: int
    duplicates: int
    last_seq: int | None


class BlobList(msgspec.Struct, frozen=True):
    session_id: str
    blobs: list[str]


class DeadLetters(msgspec.Struct, frozen=True):
    dead_letters: list[DeadLetterGroup]
    total: int


class Replayed(msgspec.Struct, frozen=True):
    key: str
    replayed: int


class Purged(msgspec.Struct, frozen=True):
    key: str
    purged: int


class IntelligenceStatus(msgspec.Struct, frozen=True):
    """`IntelligenceService.status`."""

    journal_seq: int
    applied_seq: int
    backlog: int
    dead_letters: int
    last_error: str | None
    rebuilding: list[str]
    engine: Literal["embedded", "server"]
    applying: bool
    """Whether this instance applies the journal to the graph (the holder of the applier lease
    where instances share a journal; always true for one instance)."""


def _default_principal(request: Request[Any, Any, Any]) -> Principal:
    found = request.state.get("principal") if hasattr(request.state, "get") else None
    return found if isinstance(found, Principal) else Principal()


def error_response(status: int, code: str, message: str, details: Any = None) -> Response[bytes]:
    """The contract's JSON error body."""
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return Response(_encoder.encode({"error": body}), status_code=status, media_type="application/json")


def _engine_unavailable(_: Request[Any, Any, Any], exc: EngineUnavailable) -> Response[bytes]:
    """The graph engine is down or restarting (the supervisor brings it back): 503, retry."""
    response = error_response(
        503, "graph_unavailable", f"the graph engine is unavailable, retry shortly: {exc}"
    )
    response.headers["Retry-After"] = "1"
    return response


def _journal_unavailable(_: Request[Any, Any, Any], exc: JournalUnavailable) -> Response[bytes]:
    """The shared journal's PostgreSQL is unreachable: nothing of the request was stored; 503, retry."""
    response = error_response(503, "backend_unavailable", f"the journal is unavailable, retry shortly: {exc}")
    response.headers["Retry-After"] = "1"
    return response


def _json(value: Any, status: int = 200) -> Response[bytes]:
    return Response(_encoder.encode(value), status_code=status, media_type="application/json")


def _map_error(exc: Exception) -> Response[bytes]:
    if isinstance(exc, EnvelopeError):
        return error_response(400, exc.code, exc.message, {"field": exc.field} if exc.field else None)
    if isinstance(exc, BatchError):
        return error_response(422, "invalid_events", str(exc), [e.to_dict() for e in exc.errors])
    if isinstance(exc, AccessDenied):
        return error_response(403, exc.code, exc.message)
    if isinstance(exc, QueryError):
        return error_response(400, exc.code, exc.message)
    if isinstance(exc, BlobError):
        return error_response(400, exc.code, exc.message)
    if isinstance(exc, NotFound):
        return error_response(404, "not_found", str(exc))
    if isinstance(exc, TooManyQueries | ReadBusy):
        status, code = (429, "too_many_queries") if isinstance(exc, TooManyQueries) else (503, "graph_busy")
        response = error_response(status, code, str(exc))
        response.headers["Retry-After"] = "1"
        return response
    raise exc


def _split_body(raw: bytes, content_type: str) -> list[Any] | dict[str, Any]:
    if "ndjson" in content_type or "jsonl" in content_type:
        items: list[Any] = []
        for number, line in enumerate(raw.splitlines()):
            if not line.strip():
                continue
            try:
                items.append(_decoder.decode(line))
            except JSON_ERRORS as exc:
                raise EnvelopeError(
                    "invalid_json", f"line {number + 1} is not valid JSON: {json_problem(exc)}"
                ) from None
        return items
    try:
        value = _decoder.decode(raw)
    except JSON_ERRORS as exc:
        raise EnvelopeError("invalid_json", f"body is not valid JSON: {json_problem(exc)}") from None
    if isinstance(value, list | dict):
        return value
    raise EnvelopeError("invalid_envelope", "body must be a JSON object, a JSON array or NDJSON")


@dataclass(frozen=True, slots=True)
class _Bound:
    """What the routes of one router share: the service, who calls, the group commit, the batch cap."""

    service: IntelligenceService
    who: Callable[[Request[Any, Any, Any]], Principal]
    committer: GroupCommit
    max_batch_events: int


def create_intelligence_router(
    service: IntelligenceService,
    *,
    principal: Callable[[Request[Any, Any, Any]], Principal] | None = None,
    path: str = "/",
    max_batch_events: int = 100_000,
    committer: GroupCommit | None = None,
) -> Router:
    """Routes of contract §4 bound to ``service``; mount with ``Litestar(route_handlers=[router])``.

    A ``POST /events`` batch holds at most ``max_batch_events`` envelopes (413 beyond); batches
    are decoded and stored on a worker thread, never on the event loop."""
    bound = _Bound(
        service, principal or _default_principal, committer or GroupCommit(service), max_batch_events
    )
    return Router(
        path=path,
        route_handlers=[
            *_event_routes(bound),
            *_cypher_routes(bound),
            *_blob_routes(bound),
            *_dead_letter_routes(bound),
            *_session_routes(bound),
            *_status_routes(bound),
        ],
        exception_handlers={EngineUnavailable: _engine_unavailable, JournalUnavailable: _journal_unavailable},
    )


def _event_routes(bound: _Bound) -> list[HTTPRouteHandler]:
    """``POST /events``: one envelope (group commit) or a batch (on a worker thread)."""

    @post(
        "/events",
        status_code=202,
        summary="Ingest Amplifier hook events",
        tags=["context intelligence"],
        **documented(
            Queued | BatchQueued,
            status=202,
            description="Queued (one envelope, or a batch)",
            body=HookEvent | list[HookEvent],
            ndjson_body=True,
            errors=(400, 413, 422),
        ),
    )
    async def post_events(request: Request[Any, Any, Any]) -> Response[bytes]:
        caller = bound.who(request)
        try:
            raw = await request.body()
            content_type = request.headers.get("content-type", "")
            if len(raw) > _INLINE_BODY_BYTES:  # decoding 32 MiB takes seconds: not on the loop
                body = await sync_to_thread(_split_body, raw, content_type)
            else:
                body = _split_body(raw, content_type)
            if isinstance(body, dict):
                envelope = parse_envelope(body, json_decoded=True)
                check_write(envelope, caller.allowed_workspaces)
                result = await bound.committer.submit(envelope, caller.created_by)
                return _json({"status": result.status, "session_id": result.session_id}, 202)
            if len(body) > bound.max_batch_events:
                return error_response(
                    413,
                    "batch_too_large",
                    f"the batch holds {len(body):,} events; at most {bound.max_batch_events:,} are accepted per request",
                )
            batch = await sync_to_thread(
                bound.service.ingest_many,
                body,
                created_by=caller.created_by,
                allowed_workspaces=caller.allowed_workspaces,
                owned=True,
                json_decoded=True,  # `_split_body` decoded them with msgspec
            )
            return _json(
                {
                    "status": "queued" if batch.accepted else "duplicate",
                    "accepted": batch.accepted,
                    "duplicates": batch.duplicates,
                    "last_seq": batch.last_seq,
                },
                202,
            )
        except (EnvelopeError, BatchError, AccessDenied) as exc:
            return _map_error(exc)

    return [post_events]


def _cypher_routes(bound: _Bound) -> list[HTTPRouteHandler]:
    """``POST /cypher``: a read-only query within the engine's limits."""

    @post(
        "/cypher",
        status_code=200,
        summary="Read-only Cypher query",
        tags=["context intelligence"],
        request_max_body_size=CYPHER_MAX_BODY_BYTES,
        **documented(CypherResult, body=CypherRequest, errors=(400, 413, 429)),
    )
    async def post_cypher(request: Request[Any, Any, Any]) -> Response[bytes]:
        caller = bound.who(request)
        try:
            body = _decoder.decode(await request.body())
        except JSON_ERRORS as exc:
            return error_response(400, "invalid_json", f"body is not valid JSON: {json_problem(exc)}")
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            return error_response(
                400, "invalid_request", 'body must be {"query": str, "params"?, "workspace"?}'
            )
        workspace = body.get("workspace")
        if workspace is not None and not isinstance(workspace, str):
            return error_response(400, "invalid_request", "workspace must be a string")
        try:
            result = await sync_to_thread(
                bound.service.cypher,
                body["query"],
                body.get("params"),
                workspace,
                allowed_workspaces=caller.allowed_workspaces,
                key=caller.created_by,
            )
        except (QueryError, AccessDenied, TooManyQueries, ReadBusy) as exc:
            return _map_error(exc)
        return _json(result)

    return [post_cypher]


def _blob_routes(bound: _Bound) -> list[HTTPRouteHandler]:
    """``GET /blobs/{session_id}`` and ``GET /blobs/{session_id}/{key}``."""

    @get(
        "/blobs/{session_id:str}",
        summary="List a session's blobs",
        tags=["context intelligence"],
        **documented(BlobList, errors=(400,)),
    )
    async def list_blobs(request: Request[Any, Any, Any], session_id: FromPath[str]) -> Response[bytes]:
        caller = bound.who(request)
        try:
            uris = await sync_to_thread(
                bound.service.list_blobs, session_id, allowed_workspaces=caller.allowed_workspaces
            )
        except BlobError as exc:
            return _map_error(exc)
        return _json({"session_id": session_id, "blobs": uris})

    @get(
        "/blobs/{session_id:str}/{key:str}",
        summary="Read one blob",
        tags=["context intelligence"],
        **documented(Any, description="The stored JSON value", errors=(400, 404)),
    )
    async def read_blob(
        request: Request[Any, Any, Any], session_id: FromPath[str], key: FromPath[str]
    ) -> Response[bytes]:
        caller = bound.who(request)
        try:
            content = await sync_to_thread(
                bound.service.read_blob, session_id, key, allowed_workspaces=caller.allowed_workspaces
            )
        except (BlobError, NotFound) as exc:
            return _map_error(exc)
        return Response(content, media_type="application/json")

    return [list_blobs, read_blob]


def _dead_letter_routes(bound: _Bound) -> list[HTTPRouteHandler]:
    """``GET /queues/dead-letter`` and its ``replay`` / ``purge`` commands."""

    @get(
        "/queues/dead-letter",
        summary="Dead letters per session",
        tags=["context intelligence"],
        **documented(DeadLetters),
    )
    async def list_dead(request: Request[Any, Any, Any]) -> Response[bytes]:
        caller = bound.who(request)
        groups = bound.service.dead_letters(allowed_workspaces=caller.allowed_workspaces)
        return _json({"dead_letters": groups, "total": sum(g.item_count for g in groups)})

    @post(
        "/queues/dead-letter/{key:str}/replay",
        status_code=200,
        tags=["context intelligence"],
        **documented(Replayed, errors=(400,)),
    )
    async def replay_dead(request: Request[Any, Any, Any], key: FromPath[str]) -> Response[bytes]:
        caller = bound.who(request)
        count = bound.service.replay_dead_letters(key, allowed_workspaces=caller.allowed_workspaces)
        return _json({"key": key, "replayed": count})

    @post(
        "/queues/dead-letter/{key:str}/purge",
        status_code=200,
        tags=["context intelligence"],
        **documented(Purged, errors=(400,)),
    )
    async def purge_dead(request: Request[Any, Any, Any], key: FromPath[str]) -> Response[bytes]:
        caller = bound.who(request)
        count = bound.service.purge_dead_letters(key, allowed_workspaces=caller.allowed_workspaces)
        return _json({"key": key, "purged": count})

    return [list_dead, replay_dead, purge_dead]


def _session_routes(bound: _Bound) -> list[HTTPRouteHandler]:
    """``DELETE /sessions/{session_id}`` and ``DELETE /sessions`` (retention)."""

    @delete(
        "/sessions/{session_id:str}",
        status_code=202,
        summary="Forget one session of a workspace",
        tags=["context intelligence"],
        **documented(ForgetResult, status=202, description="Forgotten", errors=(400, 404)),
    )
    async def forget_session(
        request: Request[Any, Any, Any],
        session_id: FromPath[str],
        # required=True and schema_extra only declare it: the handler answers a missing one (400)
        workspace: Annotated[
            str | None,
            QueryParameter(required=True, schema_extra={"one_of": None, "type": "string", "pattern": _NAME}),
        ] = None,
    ) -> Response[bytes]:
        caller = bound.who(request)
        if not workspace:
            return error_response(400, "invalid_request", "the workspace query parameter is required")
        try:
            result = await sync_to_thread(
                bound.service.forget_session,
                workspace,
                session_id,
                allowed_workspaces=caller.allowed_workspaces,
            )
        except (AccessDenied, EnvelopeError, NotFound) as exc:
            return _map_error(exc)
        return _json(result, 202)

    @delete(
        "/sessions",
        status_code=202,
        summary="Forget idle sessions",
        tags=["context intelligence"],
        **documented(RetentionResult, status=202, description="Forgotten", errors=(400,)),
    )
    async def forget_idle_sessions(
        request: Request[Any, Any, Any],
        idle_days: Annotated[
            float | None,
            QueryParameter(
                required=True,
                description="A positive number of days.",
                schema_extra={"one_of": None, "type": "number", "exclusive_minimum": 0},
            ),
        ] = None,
        workspace: Annotated[
            str | None,
            QueryParameter(schema_extra={"one_of": None, "type": "string", "pattern": f"^$|{_NAME}"}),
        ] = None,
    ) -> Response[bytes]:
        caller = bound.who(request)
        if idle_days is None or not idle_days > 0:
            return error_response(400, "invalid_request", "idle_days (a positive number of days) is required")
        try:
            result = await sync_to_thread(
                bound.service.forget_idle_sessions,
                idle_days,
                workspace=workspace or None,
                allowed_workspaces=caller.allowed_workspaces,
            )
        except (AccessDenied, EnvelopeError) as exc:
            return _map_error(exc)
        return _json(result, 202)

    return [forget_session, forget_idle_sessions]


def _status_routes(bound: _Bound) -> list[HTTPRouteHandler]:
    """``GET /intelligence/status``."""

    @get(
        "/intelligence/status",
        summary="Ingest and graph status",
        tags=["context intelligence"],
        **documented(IntelligenceStatus),
    )
    async def status() -> Response[bytes]:
        return _json(bound.service.status())

    return [status]
