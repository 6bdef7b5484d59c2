"""Recorded conversations the protocol-stream tests run on, and helpers to encode them."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Final

import msgspec

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
    """``events`` as an event log stores them (each with its ``seq``)."""
    return [
        StoredEvent(
            seq=seq,
            conversation_id=conversation_id,
            event=msgspec.structs.replace(event, seq=seq),
            received_at=0.0,
        )
        for seq, event in enumerate(events, 1)
    ]


def encode_all(stream: UIEventStream, events: list[Event]) -> list[tuple[int, Chunk]]:
    """Every chunk of ``events`` with the seq of the event that produced it."""
    return [(seq, chunk) for seq, event in enumerate(events, 1) for chunk in stream.chunks(event, seq)]


def sse_bytes(stream: UIEventStream, events: list[Event]) -> bytes:
    items = stored(events, stream.conversation_id)
    return b"".join(frame for item in items for frame in stream.feed(item))


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


def random_streams(count: int, seed: int, length: int = 40) -> list[list[Event]]:
    """Seeded random event streams (nested runs, subagents, relays, late and orphan events): for
    checks that run the node readers once on many streams, where hypothesis would start node per
    example."""
    rng = random.Random(seed)
    runs = ["a", "b", "p1", "p2", "s", "s2", "u"]
    ids = ["x", "y", "a/c1", "a/c2", "s/c3", "r1", "t"]
    streams = []
    for _ in range(count):
        wires: list[dict[str, Any]] = []
        for _ in range(rng.randint(1, length)):
            kind = rng.choice(_KINDS)
            wire: dict[str, Any] = {"type": kind, "runId": rng.choice(runs)}
            if rng.random() < 0.5:
                wire["parentId"] = rng.choice([*runs, *ids, "u:user"])
            ident = rng.choice(ids)
            wire.update(_fields(kind, ident, rng))
            if kind in ("relay_resolved", "connected", "switch_branch"):
                wire.pop("runId")
            wires.append(wire)
        streams.append([parse_event(wire) for wire in wires])
    return streams


_KINDS: Final = (
    "harness_start",
    "harness_end",
    "text",
    "text",
    "text",
    "reasoning",
    "tool_call",
    "tool_result",
    "tool_progress",
    "user",
    "error",
    "usage",
    "relay",
    "relay_resolved",
    "repl_input",
    "repl_progress",
    "repl_output",
    "connected",
)


def _fields(kind: str, ident: str, rng: random.Random) -> dict[str, Any]:
    output = rng.choice([1, "ok", {"status": "denied"}, {"error": "boom"}, {"context": "c"}])
    return {
        "harness_start": {"agentId": rng.choice(["lead", "helper"])},
        "harness_end": {"reason": rng.choice(["final", "error", "cancelled", "max_iterations"])},
        "text": {"id": ident, "content": rng.choice(["a", "b ", ""])},
        "reasoning": {
            "id": f"th-{ident}",
            "content": "r",
            **({"signature": "s"} if rng.random() < 0.2 else {}),
        },
        "tool_call": {"id": ident, "name": "bash", "input": rng.choice([{}, {"cmd": "ls"}, None])},
        "tool_result": {"id": ident, "name": "bash", "output": output},
        "tool_progress": {"id": f"p-{ident}", "toolCallId": ident, "name": "bash", "content": {"line": 1}},
        "user": {"content": "hi"},
        "error": {"message": "boom"},
        "usage": {"inputTokens": 3, "outputTokens": 4},
        "relay": {"id": f"relay-{ident}", "kind": "permission", "toolCallId": ident, "tool": "bash"},
        "relay_resolved": {"relayId": f"relay-{ident}", "approved": rng.random() < 0.5},
        "repl_input": {"id": f"repl-{ident}", "code": "1"},
        "repl_progress": {"id": f"repl-{ident}", "chunk": "o"},
        "repl_output": {"id": f"repl-{ident}", "stdout": "o"},
        "connected": {},
    }[kind]
