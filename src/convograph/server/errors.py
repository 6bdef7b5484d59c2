"""JSON errors: every failure answers ``{"error": {"code", "message", "details"?}}``.

`ApiError` is what handlers raise; `exception_handlers` maps it, Litestar's own HTTP errors, event
validation errors and event-log errors onto that shape and a fitting status code.
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.types import ExceptionHandlersMap

from convograph.events import EventError
from convograph.http.errors import ErrorBody, ErrorInfo, error_body
from convograph.store import BackendUnavailable, EventsExpired, InvalidConversationId, StoreError

__all__ = ["ApiError", "ErrorBody", "ErrorInfo", "error_body", "exception_handlers"]

log = logging.getLogger("convograph.server")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    410: "gone",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_events",
    429: "too_many_requests",
    503: "unavailable",
}


class ApiError(Exception):
    """An error with its HTTP status, a stable machine ``code`` and optional ``details``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message
        self.details = details
        self.headers = headers


def _respond(
    status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
) -> Response[Any]:
    return Response(
        error_body(code, message, details), status_code=status, media_type=MediaType.JSON, headers=headers
    )


def _api_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[Any]:
    return _respond(exc.status, exc.code, exc.message, exc.details, exc.headers)


def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    status = exc.status_code
    details = exc.extra if isinstance(exc, ValidationException) and exc.extra else None
    headers = dict(exc.headers) if exc.headers else None
    message = exc.detail or _CODES.get(status, "error").replace("_", " ")
    if status == 413:
        message = "request body is larger than the server accepts"
    return _respond(status, _CODES.get(status, "error"), message, details, headers)


def _event_error(_: Request[Any, Any, Any], exc: EventError) -> Response[Any]:
    return _respond(422, "invalid_events", str(exc), [exc.to_dict()])


def _store_error(_: Request[Any, Any, Any], exc: StoreError) -> Response[Any]:
    if isinstance(exc, InvalidConversationId):
        return _respond(400, "invalid_conversation_id", str(exc))
    if isinstance(exc, BackendUnavailable):
        return _respond(503, "backend_unavailable", str(exc), {"backend": exc.backend}, {"Retry-After": "1"})
    if isinstance(exc, EventsExpired):
        return _respond(410, "events_expired", str(exc), {"firstAvailable": exc.first_available})
    return _respond(500, "store_error", str(exc))


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _respond(HTTP_500_INTERNAL_SERVER_ERROR, "internal_error", "internal server error")


exception_handlers: ExceptionHandlersMap = {
    ApiError: _api_error,
    HTTPException: _http_error,
    EventError: _event_error,
    StoreError: _store_error,
    Exception: _unexpected,
}
