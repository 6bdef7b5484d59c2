"""Messages for a command that talks to a server: what went wrong, with the URL tried and what to do.

A CLI user should never see an internal error code (``http_status``, ``connection_error``) or a bare
``Connection refused``: every message names the server URL and, where there is one, the fix.
"""

from __future__ import annotations

from typing import Final

__all__ = ["HINT_BY_STATUS", "server_refused", "server_unreachable"]

HINT_BY_STATUS: Final[dict[int, str]] = {
    401: "the server needs an API key: pass --api-key or set CONVOGRAPH_API_KEY",
    403: "the API key lacks the permission for this (see `convograph keys create --scope`)",
    404: "the server has no such resource (is --url a convograph server of this version?)",
    413: "the request is larger than the server accepts",
    429: "the server is rate limiting: retry in a moment",
    503: "the server is up but a backend it needs is not (its log says which)",
}


def server_unreachable(url: str, reason: object) -> str:
    """``url`` did not answer; ``reason`` is the transport error (or a message naming it)."""
    detail = str(reason) or type(reason).__name__
    if url not in detail:
        detail = f"cannot reach {url}: {detail}"
    return (
        f"{detail}\nhint: is `convograph serve` running there? Point --url (or CONVOGRAPH_URL) at the server."
    )


def server_refused(url: str, status: int | None, message: str) -> str:
    """``url`` answered with an error: the server's own message, then the hint for its status.

    ``message`` may start with the server's error code (``"read_only: ..."``); it is kept, since it
    names the rule that refused the request."""
    status_text = f"HTTP {status}" if status is not None else "an error"
    hint = HINT_BY_STATUS.get(status or 0)
    text = f"{url} answered {status_text}: {message}"
    return f"{text}\nhint: {hint}" if hint else text
