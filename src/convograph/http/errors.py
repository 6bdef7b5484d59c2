"""The body of every error reply: ``{"error": {"code", "message", "details"?}}``.

The server's `convograph.server.errors` answers its errors with it; the OpenAPI declarations
(`convograph.http.openapi`) declare it."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["ErrorBody", "ErrorInfo", "error_body"]


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What went wrong: a stable machine ``code``, a human ``message``, optional ``details``."""

    code: str
    message: str
    details: Any = None
    """Present only when there are details (e.g. every invalid item of a batch)."""


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    """The body of every error reply (`error_body`); the OpenAPI document declares it."""

    error: ErrorInfo


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    return {"error": error}
