"""Server-Sent Events framing for conversation streams: every byte a stream sends is made here."""

from __future__ import annotations

from typing import Final

import msgspec

from convograph.events import encode_event
from convograph.store import StoredEvent

__all__ = [
    "END_EVENT",
    "HEARTBEAT_FRAME",
    "RETRY_FRAME",
    "SSE_HEADERS",
    "SSE_MEDIA_TYPE",
    "end_frame",
    "event_frame",
    "sse_frame",
]

SSE_MEDIA_TYPE: Final = "text/event-stream"
SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Connection": "keep-alive"}
HEARTBEAT_FRAME: Final = b": heartbeat\n\n"
RETRY_FRAME: Final = b"retry: 1000\n\n"
END_EVENT: Final = "stream_end"
"""The name of the last frame of a stream the server ends (`end_frame`); no event type has it."""

_END_MESSAGES: Final = {
    "too_far_behind": "this client fell too far behind the conversation (more than the server buffers"
    " per stream); reconnect with Last-Event-ID to resume from the log",
    "shutdown": "the server is shutting down; reconnect with Last-Event-ID to resume",
    "deleted": "the conversation was deleted; its seqs start again at 1 if it is written to again",
    "unavailable": "the server lost its event log; reconnect with Last-Event-ID to resume once it is back",
}


def sse_frame(seq: int, event_type: str, data: bytes) -> bytes:
    """One SSE message. ``data`` is single-line JSON, so it needs one ``data:`` line."""
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, event_type.encode(), data)


def event_frame(stored: StoredEvent) -> bytes:
    """The SSE message of a stored event: ``id`` = seq, ``event`` = type, ``data`` = wire JSON."""
    return sse_frame(stored.seq, stored.event.type, encode_event(stored.event))


def end_frame(reason: str, last_event_id: int) -> bytes:
    """The last frame of a stream the server ends: ``event: stream_end`` and ``{"reason",
    "message", "lastEventId"}`` (the seq of the last event this stream sent, to resume after). It
    has no ``id:`` line, so it leaves a client's last event id as it was."""
    payload = {"reason": reason, "message": _END_MESSAGES.get(reason, reason), "lastEventId": last_event_id}
    return b"event: %s\ndata: %s\n\n" % (END_EVENT.encode(), msgspec.json.encode(payload))
