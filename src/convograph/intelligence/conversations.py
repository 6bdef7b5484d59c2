"""Conversation events (`/v1/conversations/...`) into the same graph as the hook events.

Two halves, data flowing one way:

1. `conversation_envelopes(cid, stored)` turns events the conversation log stored into hook
   envelopes ``{"event": "conversation:<type>", "workspace", "idempotency_key", "data"}``, all
   in **one journal session per conversation** (its log is the ordered per-session log). The
   workspace is the ``<workspace>:`` prefix of the conversation id, else ``conversations``.
   The idempotency key is ``convograph-conversation:{cid}:{seq}`` (the conversation log's own
   seq), so re-feeding the same stored events never adds anything. Streaming fragments
   (``text``, ``reasoning``, ``tool_progress``, ``repl_progress``) are not forwarded: the
   conversation log keeps them; the graph gets the structural events.
   `feed_conversation(service, cid, stored)` appends them (never raises: the conversation log
   is the source of truth, and a re-feed is harmless).
2. The semantic layers fold them (`convograph.intelligence.conversation_fold`, the mapping
   table is in docs/querying.md); layer 1 gives them ordinary triple-labelled Event nodes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from convograph.events import event_to_wire
from convograph.intelligence.layer1 import iso_ms

__all__ = [
    "DEFAULT_WORKSPACE",
    "conversation_envelopes",
    "conversation_target",
    "feed_conversation",
    "feed_conversation_async",
]

log = logging.getLogger(__name__)

DEFAULT_WORKSPACE = "conversations"
FORWARDED = frozenset(
    {
        "harness_start",
        "harness_end",
        "tool_call",
        "tool_result",
        "usage",
        "error",
        "user",
        "relay",
        "relay_resolved",
    }
)


def conversation_target(cid: str) -> tuple[str, str]:
    """``(workspace, session_id)`` for a conversation id: ``"ws:rest"`` → ``("ws", "rest")``."""
    workspace, sep, rest = cid.partition(":")
    if sep and workspace.strip() and rest.strip() and rest not in (".", ".."):  # "." names no blob dir
        return workspace, rest
    return DEFAULT_WORKSPACE, cid


_MIN_MS = -62_135_596_800_000
"""0001-01-01T00:00:00Z: the earliest instant `iso_ms` (a `datetime`) can write."""
_MAX_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: the latest."""


def _epoch_ms(timestamp: Any, received_at: float) -> int:
    """The event's own time in UTC ms when it names one a `datetime` can hold, else the receipt
    time: the conversation log accepts any number or string, and one event the graph cannot date
    must not stop its conversation from being fed."""
    if isinstance(timestamp, bool):
        timestamp = None
    epoch_ms: int | None = None
    try:
        if isinstance(timestamp, int | float):
            epoch_ms = int(timestamp if timestamp > 1e11 else timestamp * 1000)
        elif isinstance(timestamp, str):
            parsed = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            epoch_ms = int(parsed.timestamp() * 1000)
    except (ValueError, OverflowError):  # not ISO 8601; inf; beyond what a datetime holds
        epoch_ms = None
    if epoch_ms is None or not _MIN_MS <= epoch_ms <= _MAX_MS:
        return int(received_at * 1000)
    return epoch_ms


def conversation_envelopes(cid: str, stored: Sequence[Any]) -> list[dict[str, Any]]:
    """Hook envelopes for the structural events of ``stored`` (`convograph.store` StoredEvents:
    ``.seq``, ``.event``, ``.received_at``). Pure; O(len(stored))."""
    workspace, session_id = conversation_target(cid)
    envelopes: list[dict[str, Any]] = []
    for item in stored:
        event = item.event
        kind = event.type
        if kind not in FORWARDED:
            continue
        wire = event_to_wire(event)
        data: dict[str, Any] = {
            "session_id": session_id,
            "timestamp": iso_ms(_epoch_ms(wire.get("timestamp"), item.received_at)),
            "conversation_seq": item.seq,
        }
        for key, value in wire.items():
            if key in ("type", "timestamp", "seq"):
                continue
            if key == "output":  # offloadable name for large tool outputs
                data["result"] = value
            elif key == "input":
                data["tool_input"] = value
            else:
                data[_snake(key)] = value
        call_id = wire.get("id")
        if kind in ("tool_call", "tool_result") and isinstance(call_id, str):
            data["tool_call_id"] = call_id  # layer-1 disambiguator for same-millisecond calls
        envelopes.append(
            {
                "event": f"conversation:{kind}",
                "workspace": workspace,
                "idempotency_key": f"convograph-conversation:{cid}:{item.seq}",
                "data": data,
            }
        )
    return envelopes


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def feed_conversation(service: Any, cid: str, stored: Sequence[Any]) -> int:
    """Append ``stored`` to ``service`` (an `IntelligenceService`, a late-bound proxy of one, or
    ``None`` = off). Returns the number of envelopes accepted; logs and returns 0 on any failure,
    including a service that is not running (the conversation log stays the truth)."""
    if service is None or not stored:
        return 0
    try:
        envelopes = conversation_envelopes(cid, stored)
        if not envelopes:
            return 0
        accepted: int = service.ingest_many(envelopes).accepted
        return accepted
    except Exception as exc:  # the graph is derived data; never fail the conversation append
        log.warning("conversation %s: not fed to the intelligence graph: %s", cid, exc)
        return 0


async def feed_conversation_async(service: Any, cid: str, stored: Sequence[Any]) -> int:
    """`feed_conversation` off the event loop (the journal append is a blocking SQLite commit)."""
    if service is None or not stored:
        return 0
    return await asyncio.to_thread(feed_conversation, service, cid, stored)
