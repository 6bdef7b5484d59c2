"""Other protocols on the conversation routes (`convograph.integrations`):

- ``GET /v1/conversations/{cid}/stream?protocol=ag-ui|ai-sdk`` (`protocol_stream_options`, used by
  the stream route): the live stream in another protocol's frames, on the same hubs and resume rules as
  the native stream (`convograph.server.live.stream_frames`);
- ``POST /v1/conversations/{cid}/ag-ui`` (`ingest_ag_ui`): an AG-UI event stream (the body, or one
  read from an upstream URL) stored as the conversation's events, validated whole, idempotent.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final

import httpx
import msgspec
from litestar import MediaType, Request, Response, post

from convograph.integrations.ag_ui_ingest import AGUIConverter, AGUIInputError, read_ag_ui_events
from convograph.integrations.formats import PROTOCOLS
from convograph.integrations.ui_stream import parse_resume
from convograph.server.errors import ApiError, ErrorBody
from convograph.server.live import EncoderFactory
from convograph.server.openapi import JSON, ConversationId, documented, reply
from convograph.server.state import require, server_state

__all__ = ["STREAM_PROTOCOLS", "AGUIIngested", "AGUISource", "ingest_ag_ui", "protocol_stream_options"]

UPSTREAM_TIMEOUT: Final = 120.0
"""Seconds an upstream AG-UI stream may take in all (connect, and every event up to its end)."""

STREAM_PROTOCOLS = ("native", *PROTOCOLS)
"""The values of the stream route's ``protocol`` parameter."""


def protocol_stream_options(
    protocol: str, cid: str, after_seq: int, last_event_id: str | None
) -> tuple[EncoderFactory, dict[str, str], int, int]:
    """How to serve ``cid``'s stream in ``protocol``: its encoder factory, its extra response
    headers, and where to resume: after ``after_seq`` (the route parsed ``?after=``), or after
    ``Last-Event-ID`` (``<seq>`` or ``<seq>:<chunk>``: then ``skip`` frames of the next event are
    dropped). 400 for an unknown protocol or a malformed ``Last-Event-ID``."""
    spec = PROTOCOLS.get(protocol)
    if spec is None:
        raise ApiError(400, f"protocol must be one of {', '.join(STREAM_PROTOCOLS)}, got {protocol!r}")
    skip = 0
    if last_event_id:
        try:
            after_seq, skip = parse_resume(last_event_id)
        except ValueError as exc:
            raise ApiError(400, f"Last-Event-ID of a {protocol} stream: {exc}") from None
    return partial(spec.encoder, cid), dict(spec.headers), after_seq, skip


# --- AG-UI in ---------------------------------------------------------------------------------------


class AGUISource(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A JSON body naming an upstream AG-UI endpoint to read instead of carrying the events."""

    url: str
    input: dict[str, Any] | None = None
    """A ``RunAgentInput``: POSTed to ``url`` (an AG-UI agent endpoint); without it ``url`` is read
    with GET (a stream that is already running or recorded)."""
    headers: dict[str, str] | None = None


class AGUIIngested(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    accepted: int
    duplicates: int
    last_seq: int | None
    ag_ui_events: int
    skipped: dict[str, int]
    """AG-UI event types with no convograph counterpart (not stored), with their counts."""


async def _read_upstream(source: AGUISource, limit: int) -> bytes:
    if not source.url.startswith(("http://", "https://")):
        raise ApiError(400, f"url must be an http(s) URL, got {source.url!r}")
    headers = {"Accept": "text/event-stream", **(source.headers or {})}
    method = "POST" if source.input is not None else "GET"
    data = b""
    try:
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(UPSTREAM_TIMEOUT, connect=10)) as client,
            client.stream(method, source.url, json=source.input, headers=headers) as response,
        ):
            if response.status_code != 200:
                raise ApiError(
                    502, f"upstream {method} {source.url} answered {response.status_code}", code="upstream"
                )
            media = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "text/event-stream":
                raise ApiError(
                    502,
                    f"upstream {source.url} sent {media or 'no content type'}, not text/event-stream",
                    code="upstream",
                )
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > limit:
                    raise ApiError(413, f"the upstream stream passed {limit} bytes (the body limit)")
    except httpx.HTTPError as exc:
        raise ApiError(502, f"reading upstream {source.url} failed: {exc!r}", code="upstream") from None
    return data


@post(
    "/v1/conversations/{cid:str}/ag-ui",
    guards=[require("write")],
    status_code=200,
    summary="Store an AG-UI event stream",
    tags=["conversations"],
    **documented(
        AGUIIngested,
        body=AGUISource | list[dict[str, Any]],
        ndjson_body=True,
        errors=(400, 413, 415, 422),
        also={
            202: reply(AGUIIngested, "The backend is down: spooled locally, stored when it is back"),
            502: reply(ErrorBody, "The upstream AG-UI endpoint failed or sent no event stream", JSON),
        },
    ),
)
async def ingest_ag_ui(request: Request[Any, Any, Any], cid: ConversationId) -> Response[bytes]:
    """Body: AG-UI events as ``text/event-stream``, a JSON array (or one event), or NDJSON; or a
    JSON object ``{"url", "input"?, "headers"?}`` naming an upstream AG-UI endpoint to read to its
    end. Every event is validated by ``ag-ui-protocol``'s models first (422 names each bad one:
    index, type, field); then the conversion (docs/integrations.md) is stored in one append.
    Posting the same stream again stores nothing new (event ids come from the AG-UI ids)."""
    state = server_state(request)
    body = await request.body()
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media in ("", "application/json") and body.lstrip()[:1] == b"{" and b'"url"' in body[:4096]:
        try:
            source = msgspec.json.decode(body, type=AGUISource)
        except (msgspec.ValidationError, msgspec.DecodeError):
            source = None
        if source is not None:
            body, media = await _read_upstream(source, state.config.max_body_bytes), "text/event-stream"
    if media not in (
        "text/event-stream",
        "application/json",
        "application/x-ndjson",
        "application/ndjson",
        "",
    ):
        raise ApiError(
            415,
            f"unsupported Content-Type {media!r}: send text/event-stream, application/json or application/x-ndjson",
        )
    try:
        events = read_ag_ui_events(body, media or "application/json")
        live = await state.conversations.get(cid)
        conversion = AGUIConverter(known=live.graph.nodes).convert(events)
    except AGUIInputError as exc:
        raise ApiError(422, str(exc), code="invalid_ag_ui", details=exc.problems) from None
    if len(conversion.events) > state.config.max_batch_events:
        raise ApiError(
            413,
            f"the stream gives {len(conversion.events)} events; the limit is {state.config.max_batch_events}",
        )
    result = await state.log.append(cid, conversion.events) if conversion.events else None
    accepted = result.accepted if result is not None else 0
    if result is not None:
        state.appended(cid, result)
        state.metrics.events_accepted += result.accepted
        state.metrics.events_duplicate += result.duplicates
        if state.feeder is not None and result.accepted:
            state.feeder.mark(cid)
    reply = AGUIIngested(
        accepted=accepted,
        duplicates=result.duplicates if result is not None else 0,
        last_seq=None if result is None or result.spooled else result.conversation_last_seq,
        ag_ui_events=len(events),
        skipped=conversion.skipped,
    )
    status = 202 if result is not None and result.spooled else 200
    return Response(msgspec.json.encode(reply), status_code=status, media_type=MediaType.JSON)
