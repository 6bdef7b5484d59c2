"""Long-lived responses (the Server-Sent Events streams): admission limits and a clean end.

`StreamLimits` admits a stream or refuses it with 429: at most ``total`` streams open at once,
``per_key`` per API key (when the server has keys) and ``per_client`` per client address (when it
has none). Each admitted stream holds a slot until its response is finished.

`EventStream` is the response every SSE endpoint returns. Litestar's `Stream` cancels the body's
task when the client goes away; the cancelled frames, their tracebacks, the transport and the
request cycle then form reference cycles that only a full garbage collection frees, which in a
long-running server with tuned GC thresholds may be hours later (measured: 1,000 closed streams
kept 1.5 GB). `EventStream` instead tells the producer to stop (``stop``, e.g. ending its
subscriber), lets the frame generator return normally, closes it and releases the stream's slot
(``release``): all by reference counting, as soon as the client is gone.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from litestar.response import Stream
from litestar.response.base import ASGIResponse
from litestar.response.streaming import ASGIStreamingResponse

from convograph.server.errors import ApiError
from convograph.server.sse import SSE_HEADERS, SSE_MEDIA_TYPE

if TYPE_CHECKING:
    from litestar.app import Litestar
    from litestar.background_tasks import BackgroundTask, BackgroundTasks
    from litestar.connection import Request
    from litestar.datastructures.cookie import Cookie
    from litestar.enums import MediaType
    from litestar.types import Receive, Scope, Send, TypeEncodersMap

__all__ = ["EventStream", "StreamLimits"]

log = logging.getLogger("convograph.server")

RETRY_AFTER_SECONDS: Final = "5"


class StreamLimits:
    """Counts open streams against three limits (see the module docstring). O(1) per stream."""

    def __init__(
        self, *, total: int, per_key: int, per_client: int, on_close: Callable[[], None] | None = None
    ) -> None:
        self.total = total
        self.per_key = per_key
        self.per_client = per_client
        self._open: Counter[str] = Counter()
        self._on_close = on_close
        """Called after each stream's release (the server trims memory after bursts of them)."""
        self.refused = 0

    @property
    def open(self) -> int:
        return self._open["*"]

    def admit(self, *, key_id: str | None, client: str) -> Callable[[], None]:
        """Count one more stream for ``key_id`` (None: a server without keys, so the client's
        address ``client`` is counted) and return its release (idempotent). `ApiError` 429 naming
        the limit when one is reached."""
        if key_id is not None:
            slot, limit, who, flag = f"key:{key_id}", self.per_key, f"API key {key_id!r}", "per-key"
        else:
            slot, limit, who, flag = f"client:{client}", self.per_client, f"client {client}", "per-client"
        if self._open["*"] >= self.total:
            self._refuse(self.total, "server", f"the server has {self.total} open streams", "")
        if self._open[slot] >= limit:
            self._refuse(limit, slot.split(":", 1)[0], f"{who} has {limit} open streams", f"-{flag}")
        self._open["*"] += 1
        self._open[slot] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._open["*"] -= 1
                self._open[slot] -= 1
                if not self._open[slot]:
                    del self._open[slot]
                if self._on_close is not None:
                    self._on_close()

        return release

    def _refuse(self, limit: int, scope: str, what: str, flag: str) -> None:
        self.refused += 1
        raise ApiError(
            429,
            f"{what}, the limit (--max-streams{flag}); close a stream first, or raise the limit",
            code="too_many_streams",
            details={"limit": limit, "scope": scope},
            headers={"Retry-After": RETRY_AFTER_SECONDS},
        )


class _Body:
    """What an `EventStream` sends, and whom it tells when the client leaves and when it is done."""

    __slots__ = ("frames", "release", "stop")

    def __init__(
        self, frames: AsyncGenerator[bytes, None], stop: Callable[[], None], release: Callable[[], None]
    ) -> None:
        self.frames = frames
        self.stop = stop
        self.release = release

    def __aiter__(self) -> AsyncGenerator[bytes, None]:
        return self.frames


class EventStream(Stream):
    """A ``text/event-stream`` response of ``frames`` (see the module docstring). ``stop`` is
    called when the client disconnects; ``release`` once the response is over, however it ends.
    The generator must return soon after ``stop`` (its awaits do not get cancelled)."""

    def __init__(
        self,
        frames: AsyncGenerator[bytes, None],
        *,
        stop: Callable[[], None],
        release: Callable[[], None],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            _Body(frames, stop, release),
            media_type=SSE_MEDIA_TYPE,
            headers={**SSE_HEADERS, **(headers or {})},
        )

    def to_asgi_response(
        self,
        app: Litestar | None,
        request: Request[Any, Any, Any],
        *,
        background: BackgroundTask | BackgroundTasks | None = None,
        cookies: Iterable[Cookie] | None = None,
        encoded_headers: Iterable[tuple[bytes, bytes]] | None = None,
        headers: dict[str, str] | None = None,
        is_head_response: bool = False,
        media_type: MediaType | str | None = None,
        status_code: int | None = None,
        type_encoders: TypeEncodersMap | None = None,
    ) -> ASGIResponse:
        """As `Stream.to_asgi_response`, with `_EventStreamResponse` doing the sending."""
        assert isinstance(self.iterator, _Body)
        return _EventStreamResponse(
            background=self.background or background,
            content_length=0,
            cookies=self.cookies if cookies is None else itertools.chain(self.cookies, cookies),
            encoded_headers=encoded_headers,
            encoding=self.encoding,
            headers={**headers, **self.headers} if headers is not None else self.headers,
            is_head_response=is_head_response,
            iterator=self.iterator,
            media_type=SSE_MEDIA_TYPE,
            status_code=self.status_code or status_code,
        )


class _EventStreamResponse(ASGIStreamingResponse):
    __slots__ = ()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.iterator
        assert isinstance(body, _Body)
        try:
            await super().__call__(scope, receive, send)
        finally:
            await body.frames.aclose()
            body.release()

    async def send_body(self, send: Send, receive: Receive) -> None:
        """Send the frames until the generator returns; a disconnect stops the producer (no task
        is cancelled, see the module docstring). A producer failure ends the response cleanly and
        is logged: the client reconnects."""
        body = self.iterator
        assert isinstance(body, _Body)
        watcher = asyncio.create_task(_await_disconnect(receive, body.stop), name="convograph-sse-watch")
        try:
            while True:
                try:
                    chunk = await anext(body.frames)
                except StopAsyncIteration:
                    break
                except Exception:
                    log.warning("a live stream failed; ending it (the client resumes)", exc_info=True)
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()


async def _await_disconnect(receive: Receive, stop: Callable[[], None]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    stop()
