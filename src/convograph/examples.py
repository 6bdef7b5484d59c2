"""Bundled, realistic example conversations (deterministic; used by the CLI, the demo and tests).

`multi_agent_events()` is a research-assistant session in the real agent-harness shape: every
provider call is its own run parented to the agent run, tool calls are namespaced
``<agentRunId>/<callId>``, a subagent runs nested under an ``agent`` tool call, two tool calls run in
parallel, one permission relay is approved and one denied (the denied path emits no ``tool_call``,
as upstream does), reasoning streams with a signature, usage follows each provider call, and the
subagent's first provider call fails with an error before it retries.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

__all__ = ["EXAMPLES", "example_ndjson", "multi_agent_events", "write_example"]

Wire = dict[str, Any]


class _Stream:
    """Collects wire events with ids and timestamps that depend only on call order."""

    def __init__(self, start_ms: int) -> None:
        self.events: list[Wire] = []
        self._clock = start_ms

    def emit(self, event_type: str, **fields: Any) -> None:
        self._clock += 37
        fields = {key: value for key, value in fields.items() if value is not None}
        event: Wire = {"type": event_type, **fields}
        event["eventId"] = f"ev-{len(self.events):04d}"
        event["timestamp"] = self._clock
        self.events.append(event)

    def stream_text(self, run_id: str, text_id: str, text: str, *, parent: str, kind: str = "text") -> None:
        for fragment in _fragments(text):
            self.emit(kind, runId=run_id, parentId=parent, id=text_id, content=fragment)


def _fragments(text: str, size: int = 24) -> Iterator[str]:
    """Split like a token stream: on word boundaries, roughly ``size`` characters each."""
    words = text.split(" ")
    piece = ""
    for word in words:
        candidate = f"{piece} {word}" if piece else word
        if len(candidate) > size and piece:
            yield piece + " "
            piece = word
        else:
            piece = candidate
    if piece:
        yield piece


def multi_agent_events() -> list[Wire]:
    """The bundled multi-agent example as wire events."""
    s = _Stream(start_ms=1_763_800_000_000)
    agent, main = "run-agent", "agent-main"
    s.emit("connected", sessionId="session-demo-1")
    s.emit(
        "user",
        runId="run-user-1",
        content="Compare the retry policies in our two HTTP clients and tell me which one is safer.",
    )
    s.emit("harness_start", runId=agent, parentId="run-user-1:user", agentId=main)

    # Provider call 1: reasoning, text, then two tool calls in parallel (both need permission once).
    p1 = "run-provider-1"
    s.stream_text(
        p1,
        "p1-think",
        "The user wants a comparison. I should read both client modules before judging anything.",
        parent=agent,
        kind="reasoning",
    )
    s.emit("reasoning", runId=p1, parentId=agent, id="p1-think", content="", signature="sig-demo-p1")
    s.stream_text(p1, "p1-text", "Let me read both clients first.", parent=agent)
    s.emit("usage", runId=p1, parentId=agent, inputTokens=812, outputTokens=64, cacheReadTokens=512)
    s.emit(
        "relay",
        kind="permission",
        runId=agent,
        id="relay-read-1",
        toolCallId=f"{agent}/call-read-a",
        tool="read_file",
        params={"path": "clients/a.py"},
    )
    s.emit("relay_resolved", relayId="relay-read-1", tool="read_file", approved=True)
    s.emit(
        "tool_call", runId=agent, id=f"{agent}/call-read-a", name="read_file", input={"path": "clients/a.py"}
    )
    s.emit(
        "tool_call", runId=agent, id=f"{agent}/call-read-b", name="read_file", input={"path": "clients/b.py"}
    )
    s.emit(
        "tool_result",
        runId=agent,
        id=f"{agent}/call-read-b",
        name="read_file",
        output={"context": "retry(max=3, backoff=exponential, jitter=True)", "result": "ok"},
    )
    s.emit(
        "tool_result",
        runId=agent,
        id=f"{agent}/call-read-a",
        name="read_file",
        output={"context": "retry(max=10, backoff=None)", "result": "ok"},
    )

    # Provider call 2: delegate the history search to a subagent.
    p2 = "run-provider-2"
    s.stream_text(p2, "p2-text", "I'll ask a research subagent to check the incident history.", parent=agent)
    s.emit("usage", runId=p2, parentId=agent, inputTokens=1020, outputTokens=41)
    spawn = f"{agent}/call-agent"
    s.emit(
        "tool_call", runId=agent, id=spawn, name="agent", input={"task": "Find incidents caused by retries"}
    )

    sub, sub_agent = "run-sub", "agent-research"
    s.emit("harness_start", runId=sub, parentId=spawn, agentId=sub_agent)
    s.emit(
        "error", runId="run-sub-provider-0", parentId=sub, message="provider overloaded (HTTP 529); retrying"
    )
    sp1 = "run-sub-provider-1"
    s.stream_text(sp1, "sp1-text", "Searching the incident tracker for retry storms.", parent=sub)
    s.emit("usage", runId=sp1, parentId=sub, inputTokens=430, outputTokens=22)
    search = f"{sub}/call-search"
    s.emit("tool_call", runId=sub, id=search, name="search_incidents", input={"query": "retry storm"})
    for n, line in enumerate(["scanning 2024...", "scanning 2025...", "2 matches"]):
        s.emit(
            "tool_progress",
            runId=sub,
            id=f"progress-{n}",
            toolCallId=search,
            name="search_incidents",
            content={"channel": "stdout", "data": line + "\n"},
        )
    s.emit(
        "tool_result",
        runId=sub,
        id=search,
        name="search_incidents",
        output={
            "context": "INC-231: client A retried 10x without backoff and overloaded billing",
            "result": 2,
        },
    )
    sp2 = "run-sub-provider-2"
    s.stream_text(
        sp2,
        "sp2-text",
        "Found INC-231: client A's unbounded retries without backoff amplified a billing outage.",
        parent=sub,
    )
    s.emit("usage", runId=sp2, parentId=sub, inputTokens=611, outputTokens=38)
    s.emit("harness_end", runId=sub, parentId=spawn, agentId=sub_agent)
    s.emit(
        "tool_result",
        runId=agent,
        id=spawn,
        name="agent",
        output={
            "context": "INC-231: client A's retries without backoff amplified an outage.",
            "result": "done",
        },
    )

    # Provider call 3: wants to run the test suite; the user denies it (no tool_call is emitted).
    p3 = "run-provider-3"
    s.stream_text(p3, "p3-text", "I'd like to run the retry tests to confirm.", parent=agent)
    s.emit("usage", runId=p3, parentId=agent, inputTokens=1400, outputTokens=30)
    s.emit(
        "relay",
        kind="permission",
        runId=agent,
        id="relay-exec-1",
        toolCallId=f"{agent}/call-exec",
        tool="exec",
        params={"command": "pytest tests/test_retry.py"},
    )
    s.emit("relay_resolved", relayId="relay-exec-1", tool="exec", approved=False, reason="not on my laptop")
    s.emit(
        "tool_result",
        runId=agent,
        id=f"{agent}/call-exec",
        name="exec",
        output={"status": "denied", "reason": "not on my laptop"},
    )

    # Provider call 4: the answer.
    p4 = "run-provider-4"
    s.stream_text(
        p4,
        "p4-text",
        "Client B is safer: it caps retries at 3 with exponential backoff and jitter. Client A retries "
        "up to 10 times with no backoff, which caused INC-231. Recommend porting B's policy to A.",
        parent=agent,
    )
    s.emit("usage", runId=p4, parentId=agent, inputTokens=1530, outputTokens=71)
    s.emit("harness_end", runId=agent, parentId="run-user-1:user", agentId=main)
    return s.events


EXAMPLES = {"multi-agent": multi_agent_events}
"""Name -> builder of each bundled example."""


def example_ndjson(name: str = "multi-agent") -> bytes:
    """The example as NDJSON bytes (one wire event per line)."""
    encoder = msgspec.json.Encoder()
    return b"".join(encoder.encode(event) + b"\n" for event in EXAMPLES[name]())


def write_example(path: str | Path, name: str = "multi-agent") -> Path:
    """Write the example NDJSON to ``path``; returns the path."""
    target = Path(path)
    target.write_bytes(example_ndjson(name))
    return target
