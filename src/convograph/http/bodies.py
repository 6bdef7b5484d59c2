"""What decoding an untrusted JSON request body may raise, and a short reason for each.

Shared by the server's body parsers (`convograph.server.bodies`) and the context-intelligence
routes."""

from __future__ import annotations

from typing import Final

import msgspec

from convograph.events import json_error_text

__all__ = ["JSON_ERRORS", "json_problem"]

JSON_ERRORS: Final = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
"""What decoding untrusted JSON bytes raises: malformed JSON, invalid UTF-8 inside a string, and
nesting deeper than the decoder's stack (each a 400 naming it, never a 500)."""


def json_problem(exc: BaseException, data: bytes | None = None) -> str:
    """A short reason for one of `JSON_ERRORS` raised decoding ``data``, located at its byte where
    that can be told (pass ``data``: without it, invalid UTF-8 is not located)."""
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    return json_error_text(exc, data)
