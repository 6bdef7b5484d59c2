"""``GET /v1/conversations/{cid}/stream?protocol=ag-ui|ai-sdk``: the live stream in another
protocol's frames (`convograph.integrations.formats`), on the same hubs and resume rules as the
native stream (`convograph.server.live.stream_frames`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from litestar import Request
from litestar.response import Stream

from convograph.integrations.formats import PROTOCOLS
from convograph.integrations.ui_stream import parse_resume
from convograph.server.errors import ApiError
from convograph.server.live import stream_frames
from convograph.server.openapi import SSE
from convograph.server.sse import RETRY_FRAME
from convograph.server.state import server_state

__all__ = ["STREAM_PROTOCOLS", "protocol_stream"]

STREAM_PROTOCOLS = ("native", *PROTOCOLS)
"""The values of the stream route's ``protocol`` parameter."""


def protocol_stream(
    request: Request[Any, Any, Any], cid: str, protocol: str, after_seq: int, last_event_id: str | None
) -> Stream:
    """The SSE response of ``cid``'s stream in ``protocol`` after ``after_seq`` (the route parsed
    ``?after=``), or after ``Last-Event-ID`` (``<seq>`` or ``<seq>:<chunk>``) when given."""
    spec = PROTOCOLS.get(protocol)
    if spec is None:
        raise ApiError(400, f"protocol must be one of {', '.join(STREAM_PROTOCOLS)}, got {protocol!r}")
    skip = 0
    if last_event_id:
        try:
            after_seq, skip = parse_resume(last_event_id)
        except ValueError as exc:
            raise ApiError(400, f"Last-Event-ID of a {protocol} stream: {exc}") from None
    state = server_state(request)
    heartbeat = state.config.sse_heartbeat_seconds
    metrics = state.metrics
    factory = partial(spec.encoder, cid)

    async def frames() -> AsyncIterator[bytes]:
        yield RETRY_FRAME
        async for count, chunk in stream_frames(
            state.log,
            state.hubs,
            cid,
            after_seq,
            heartbeat=heartbeat,
            stream_format=protocol,
            factory=factory,
            skip=skip,
        ):
            metrics.sse_events_sent += count
            yield chunk

    return Stream(
        frames(),
        media_type=SSE,
        headers={
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            "Connection": "keep-alive",
            **spec.headers,
        },
    )
