"""Server-Sent Events framing for conversation streams."""

from __future__ import annotations

from typing import Final

from convograph.events import encode_event
from convograph.store import StoredEvent

__all__ = ["HEARTBEAT_FRAME", "RETRY_FRAME", "event_frame", "sse_frame"]

HEARTBEAT_FRAME: Final = b": heartbeat\n\n"
RETRY_FRAME: Final = b"retry: 1000\n\n"


def sse_frame(seq: int, event_type: str, data: bytes) -> bytes:
    """One SSE message. ``data`` is single-line JSON, so it needs one ``data:`` line."""
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, event_type.encode(), data)


def event_frame(stored: StoredEvent) -> bytes:
    """The SSE message of a stored event: ``id`` = seq, ``event`` = type, ``data`` = wire JSON."""
    return sse_frame(stored.seq, stored.event.type, encode_event(stored.event))
