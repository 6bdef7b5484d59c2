"""Helpers for the provider-harness tests: run a call, wrap its events in the agent run an agent
harness would record around it, and project the result."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convograph import create_graph, reduce_events
from convograph.events import Error, Event, HarnessEnd, HarnessStart, Text, ToolCall, ToolResult, User
from convograph.harness import ModelRequest
from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
from convograph.projections import project_messages, project_thread

AGENT = "agent-run"
USER = "user-run"


async def run_call(provider: Any, request: ModelRequest) -> list[Event]:
    return [event async for event in provider.invoke(request)]


def agent_record(
    task: str, calls: Sequence[Sequence[Event]], outputs: dict[str, Any] | None = None
) -> list[Event]:
    """The events an agent harness records around provider calls: the user message, the agent's
    lifecycle, each call's events as they are (text, reasoning, usage, errors; runId = the call's,
    parentId = the agent's run), its raw tool calls re-yielded namespaced under the agent run with
    a result each (``outputs`` by raw id, default ``{"context": "ok"}``), then ``harness_end``."""
    outputs = outputs or {}
    events: list[Event] = [
        User(run_id=USER, content=task, event_id="u"),
        HarnessStart(run_id=AGENT, parent_id=f"{USER}:user", agent_id="agent", event_id="s"),
    ]
    for call in calls:
        raw = [e for e in call if isinstance(e, ToolCall)]
        events.extend(e for e in call if not isinstance(e, ToolCall))
        for tool in raw:
            namespaced = f"{AGENT}/{tool.id}"
            output = outputs.get(tool.id, {"context": "ok", "result": "ok"})
            events.append(
                ToolCall(
                    run_id=AGENT, id=namespaced, name=tool.name, input=tool.input, event_id=f"c-{tool.id}"
                )
            )
            events.append(
                ToolResult(
                    run_id=AGENT, id=namespaced, name=tool.name, output=output, event_id=f"r-{tool.id}"
                )
            )
    events.append(HarnessEnd(run_id=AGENT, agent_id="agent", event_id="e"))
    return events


def projections(events: Sequence[Event]) -> dict[str, Any]:
    """Thread and histories from the flat graph and from the hypergraph (they must agree)."""
    graph = reduce_events(create_graph(), events)
    conv = reduce_conversation_events(create_conversation(), events)
    active = default_active(conv)
    thread = project_thread(graph)
    assert project_thread(conv, active) == thread
    out = {"thread": thread}
    for fmt in ("openai", "anthropic"):
        out[fmt] = project_messages(conv, active, format=fmt)
        assert project_messages(graph, format=fmt) == out[fmt]
    return out


def texts(events: Sequence[Event], kind: type[Text] = Text) -> dict[str, str]:
    """Joined content per block id, for text (or reasoning) events."""
    out: dict[str, str] = {}
    for event in events:
        if type(event) is kind:
            out[event.id] = out.get(event.id, "") + event.content  # type: ignore[attr-defined]
    return out


def errors(events: Sequence[Event]) -> list[Error]:
    return [e for e in events if isinstance(e, Error)]
