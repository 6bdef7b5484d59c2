"""Completed messages (seed 000 "Persistence": Postgres rows linked by ``parent_message_id``).

Pure functions from stored events to `Message` rows; backends decide when to call them.

Model (see docs/store.md "Messages table"):
- A ``user`` event is a user message. Its id is the event's ``id`` if it has one, else
  ``"<runId>:user"`` (the flat graph's node id).
- A **top-level run** (its ``harness_start`` has no ``depth`` > 0 and no ``parentId``, or a
  ``parentId`` that names a message) becomes one assistant message when its ``harness_end`` arrives;
  its id is the run id. Sub-agent runs are not messages: they stay in the event log and the graph.
- ``parent_message_id``: the message the event's ``parentId`` names if there is one (an edit or
  regenerate branches there), else the conversation's active leaf. Every new message becomes the
  active leaf, so the active path is "walk parents from the leaf".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from convograph.events import Error, HarnessEnd, HarnessStart, Reasoning, Text, ToolCall, ToolResult, User
from convograph.store.base import StoredEvent

__all__ = ["Message", "is_top_level_start", "run_message", "user_message"]


class Message(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One completed message. ``parts`` are JSON-ready dicts with a ``type`` key."""

    id: str
    role: str
    parent_message_id: str | None
    run_id: str | None
    agent_id: str | None
    parts: list[dict[str, Any]]
    text: str
    first_seq: int
    last_seq: int
    created_at: float


def user_message(stored: StoredEvent, parent_message_id: str | None) -> Message:
    event = stored.event
    assert isinstance(event, User)
    content = event.content
    text = content if isinstance(content, str) else "".join(getattr(p, "text", "") for p in content)
    parts: list[dict[str, Any]] = (
        [{"type": "text", "text": content}]
        if isinstance(content, str)
        else [msgspec.to_builtins(part) for part in content]
    )
    return Message(
        id=event.id if event.id is not None else f"{event.run_id}:user",
        role="user",
        parent_message_id=parent_message_id,
        run_id=event.run_id,
        agent_id=event.agent_id,
        parts=parts,
        text=text,
        first_seq=stored.seq,
        last_seq=stored.seq,
        created_at=stored.received_at,
    )


def is_top_level_start(event: HarnessStart, message_ids: frozenset[str] | set[str]) -> bool:
    """True when the run this ``harness_start`` opens is a conversation turn, not a sub-agent."""
    if event.depth:
        return False
    return event.parent_id is None or event.parent_id in message_ids


def run_message(run_events: Sequence[StoredEvent], parent_message_id: str | None) -> Message:
    """The assistant message of one finished run. ``run_events`` are that run's events in seq order."""
    first = run_events[0]
    run_id: str | None = getattr(first.event, "run_id", None)
    parts: list[dict[str, Any]] = []
    open_text: dict[str, dict[str, Any]] = {}
    agent_id = first.event.agent_id
    for stored in run_events:
        event = stored.event
        if isinstance(event, (Text, Reasoning)):
            key = f"{event.type}:{event.id}"
            part = open_text.get(key)
            if part is None:
                part = {"type": event.type, "id": event.id, "text": event.content}
                open_text[key] = part
                parts.append(part)
            else:
                part["text"] += event.content
        elif isinstance(event, ToolCall):
            parts.append({"type": "tool_call", "id": event.id, "name": event.name, "input": event.input})
        elif isinstance(event, ToolResult):
            parts.append({"type": "tool_result", "id": event.id, "name": event.name, "output": event.output})
        elif isinstance(event, Error):
            parts.append({"type": "error", "message": event.message})
        elif isinstance(event, HarnessEnd) and event.reason is not None:
            parts.append({"type": "end", "reason": event.reason})
    text = "".join(p["text"] for p in parts if p["type"] == "text")
    return Message(
        id=run_id or f"seq:{first.seq}",
        role="assistant",
        parent_message_id=parent_message_id,
        run_id=run_id,
        agent_id=agent_id,
        parts=parts,
        text=text,
        first_seq=first.seq,
        last_seq=run_events[-1].seq,
        created_at=run_events[-1].received_at,
    )
