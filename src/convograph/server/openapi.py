"""What ``/openapi.json`` declares for routes that read their raw body: `convograph.http.openapi`
(moved there so the context-intelligence routes share it without importing the server)."""

from convograph.http.openapi import (
    ERROR_DESCRIPTIONS,
    JSON,
    NDJSON,
    SSE,
    STANDARD_ERRORS,
    SVG,
    ConversationId,
    WireStructSchemaPlugin,
    documented,
    one_of,
    reply,
)

__all__ = [
    "ERROR_DESCRIPTIONS",
    "JSON",
    "NDJSON",
    "SSE",
    "STANDARD_ERRORS",
    "SVG",
    "ConversationId",
    "WireStructSchemaPlugin",
    "documented",
    "one_of",
    "reply",
]
