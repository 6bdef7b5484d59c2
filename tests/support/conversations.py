"""Recorded conversations the protocol-stream tests run on, and helpers to encode them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from convograph.demo.conversations import research_script, retry_policies_script, rlm_script
from convograph.events import Event, parse_event
from convograph.hypergraph import create_conversation, default_active, reduce_conversation
from convograph.hypergraph.commands import COMMAND_TYPES, reduce_with_commands
from convograph.integrations.ui_stream import Chunk, UIEventStream
from convograph.projections import project_messages
from convograph.projections.history import PLACEHOLDER_OUTPUT, safe_tool_id
from convograph.store import StoredEvent

ROOT = Path(__file__).resolve().parents[2]


def recorded_conversations() -> dict[str, list[Event]]:
    """Name -> events: the multi-agent example, and the demo's scripts (relays decided both ways)."""
    wires: dict[str, list[Any]] = {
        "multi-agent": (ROOT / "examples" / "multi-agent.ndjson").read_text().splitlines(),
        "research-approved": research_script().events(decisions={"relay-write-report": True}),
        "research-denied": research_script().events(decisions={"relay-write-report": False}),
        "rlm": rlm_script().events(),
        "retry-policies": retry_policies_script().events(),
    }
    return {name: [parse_event(wire) for wire in items if wire] for name, items in wires.items()}


def stored(events: list[Event], conversation_id: str = "c") -> list[StoredEvent]:
    return [
        StoredEvent(seq=seq, conversation_id=conversation_id, event=event, received_at=0.0)
        for seq, event in enumerate(events, 1)
    ]


def encode_all(stream: UIEventStream, events: list[Event]) -> list[tuple[int, Chunk]]:
    """Every chunk of ``events`` with the seq of the event that produced it."""
    return [(seq, chunk) for seq, event in enumerate(events, 1) for chunk in stream.chunks(event, seq)]


def sse_bytes(stream: UIEventStream, events: list[Event]) -> bytes:
    return b"".join(frame for item in stored(events) for frame in stream.feed(item))


def projected_messages(events: list[Event]) -> list[dict[str, Any]]:
    """The convograph messages projection (OpenAI format) of the hypergraph, commands applied."""
    conversation = create_conversation()
    for event in events:
        if isinstance(event, COMMAND_TYPES):
            conversation = reduce_with_commands(conversation, event)
        else:
            conversation = reduce_conversation(conversation, event)
    return project_messages(conversation, default_active(conversation), format="openai")


def ag_ui_to_openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """AG-UI messages (top level: no subagent's, no reasoning) as Chat Completions messages, by
    the messages projection's rules (results in call order, a missing one as the placeholder)."""
    results = {message["toolCallId"]: message for message in messages if message["role"] == "tool"}
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("subagentRunId") is not None or message["role"] in ("reasoning", "tool"):
            continue
        if message["role"] == "user":
            out.append({"role": "user", "content": message["content"]})
            continue
        calls = message.get("toolCalls") or []
        text = message.get("content") or None
        if not calls:
            if text:
                out.append({"role": "assistant", "content": text})
            continue
        tool_calls = []
        answers = []
        for call in calls:
            call_id = safe_tool_id(call["id"], api="openai")
            tool_calls.append({"id": call_id, "type": "function", "function": call["function"]})
            result = results.get(call["id"])
            content = result["content"] if result is not None else PLACEHOLDER_OUTPUT
            answers.append({"role": "tool", "tool_call_id": call_id, "content": content})
        out.append({"role": "assistant", "content": text, "tool_calls": tool_calls})
        out.extend(answers)
    return out
