"""The hook client's request, answered without the framework: one envelope per ``POST /events``.

Amplifier's hook sends every event as its own request, so this one request shape sets what one
process can take. `EventsFastPath` wraps the Litestar application (`serve_app` hands it to
uvicorn): a ``POST /events`` whose body is one JSON object, from a caller whose key may write its
workspace, is validated (`parse_envelope`, `check_write`: the route's own rules), committed through
the route's group commit (`GroupCommit`, shared with the route) and answered ``202`` here, with the
very bytes the route answers. Litestar's routing, guards, signature model, request and response
objects and exception middleware cost ~40 % of the server's CPU on this request (measured with
py-spy: 164 → ~100 µs per request).

Everything else goes to Litestar unchanged: other paths and methods, batches (JSON arrays, NDJSON),
bodies over 64 KiB, and every request the happy path does not fit (no or an unknown key, a
missing scope, an invalid envelope, a journal error) — the body read here is replayed to the
application, which answers exactly as without the fast path. So every rule and every error reply
stays in one place, the route; a replay after an append that raised is safe (the journal
deduplicates by idempotency key and content).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import msgspec

from convograph.intelligence.envelope import parse_envelope
from convograph.intelligence.service import check_write

__all__ = ["EventsFastPath"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_LIMIT = 64 * 1024
"""Bodies up to this size are taken here (the route decodes larger ones on a thread)."""
_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_HEADERS = [(b"content-type", b"application/json")]


class EventsFastPath:
    """ASGI wrapper of the server application (see the module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/events":
            await self.app(scope, receive, send)
            return
        body, more = await _read(receive, _LIMIT)
        if more or len(body) > _LIMIT or not await self._answer(scope, body, send):  # the app answers
            await self.app(scope, _Replay(body, more, receive), send)

    async def _answer(self, scope: Scope, body: bytes, send: Send) -> bool:
        """Answer the happy path and return True; False (nothing sent) for anything else."""
        state = self.app.state.get("convograph")
        committer = self.app.state.get("convograph_committer")
        if (
            state is None
            or committer is None
            or body[:1] != b"{"
            or b"ndjson" in _header(scope, b"content-type")
        ):
            return False
        principal = _principal(state, scope)
        if principal is None or not principal.allows("write"):
            return False
        try:
            value = _decode(body)
            if not isinstance(value, dict):
                return False
            envelope = parse_envelope(value, json_decoded=True)
            check_write(envelope, principal.workspaces)
            result = await committer.submit(envelope, principal.key_id)
        except Exception:  # the route answers it (a replayed append is deduplicated)
            return False
        reply = _encode({"status": result.status, "session_id": result.session_id})
        headers = [*_HEADERS, (b"content-length", str(len(reply)).encode())]
        await send({"type": "http.response.start", "status": 202, "headers": headers})
        await send({"type": "http.response.body", "body": reply})
        state.metrics.observe_request("POST", 202)
        state.fast_path_requests += 1
        return True


def _principal(state: Any, scope: Scope) -> Any:
    """The caller's principal by the server's rules (`principal_of`), or None (unknown key)."""
    from convograph.server.auth import LOCAL_PRINCIPAL

    keys = state.keys
    if not keys.enabled:
        return LOCAL_PRINCIPAL
    scheme, _, token = _header(scope, b"authorization").decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return keys.authenticate(token.strip())


def _header(scope: Scope, name: bytes) -> bytes:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value)
    return b""


async def _read(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The body read so far and whether the client has more to send (it passed ``limit``: the
    application then reads the rest itself). A disconnect ends the body where it is."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False
        if size > limit:
            return b"".join(chunks), True


class _Replay:
    """A ``receive`` that first yields the body already read, as one message (``more_body`` when
    the client still has more to send), then reads on from the client."""

    def __init__(self, body: bytes, more: bool, receive: Receive) -> None:
        self.body: bytes | None = body
        self.more = more
        self.receive = receive

    async def __call__(self) -> Message:
        if self.body is None:
            return await self.receive()
        body, self.body = self.body, None
        return {"type": "http.request", "body": body, "more_body": self.more}
