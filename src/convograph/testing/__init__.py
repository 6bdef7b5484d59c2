"""Public testing helpers: an in-memory event log as a test double, small stream helpers, and the
scripted local model server.

``MemoryEventLog`` is a supported backend, so tests of code built on an `EventLog` can use it instead
of a server; the same contract suite runs against it and every other backend.

``ModelServer`` speaks the OpenAI Chat Completions, OpenAI Responses and Anthropic Messages wire
formats over real HTTP, answering each request with the next scripted `Reply`
(`convograph.testing.model_server`); ``check_request`` checks a request body as the API would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from convograph.events import Event, HarnessEnd, HarnessStart, Text, ToolCall, ToolResult, User
from convograph.store.base import StoredEvent
from convograph.store.memory import MemoryEventLog
from convograph.testing.model_script import (
    Match,
    Pace,
    RedactedThinking,
    Reply,
    Say,
    Script,
    ScriptError,
    ScriptUsage,
    Think,
    ToolUse,
    load_script,
    parse_script,
)
from convograph.testing.model_server import ModelServer, RecordedRequest
from convograph.testing.providers import ScriptedCall, ScriptedProvider, ScriptedTurn
from convograph.testing.request_check import check_request

__all__ = [
    "Match",
    "MemoryEventLog",
    "ModelServer",
    "Pace",
    "RecordedRequest",
    "RedactedThinking",
    "Reply",
    "Say",
    "Script",
    "ScriptError",
    "ScriptUsage",
    "ScriptedCall",
    "ScriptedProvider",
    "ScriptedTurn",
    "Think",
    "ToolUse",
    "check_request",
    "collect",
    "load_script",
    "parse_script",
    "sample_run",
]


async def collect(
    stream: AsyncIterator[StoredEvent], count: int, *, timeout: float = 10.0
) -> list[StoredEvent]:
    """The next ``count`` items of ``stream``; raises TimeoutError naming how many arrived."""
    out: list[StoredEvent] = []

    async def take() -> None:
        async for item in stream:
            out.append(item)
            if len(out) >= count:
                return

    try:
        await asyncio.wait_for(take(), timeout)
    except TimeoutError:
        raise TimeoutError(f"received {len(out)} of {count} events within {timeout:g} s") from None
    return out


def sample_run(
    run_id: str = "run-0",
    *,
    deltas: int = 3,
    event_ids: bool = True,
    user: str | None = "hello",
    reason: str | None = "stop",
) -> list[Event]:
    """A small valid run: optional user message, harness_start, text deltas, a tool call and result,
    harness_end. With ``event_ids`` every event has a unique ``eventId`` derived from ``run_id``."""
    events: list[Event] = []
    if user is not None:
        events.append(User(run_id=f"{run_id}-user", content=user))
    events.append(HarnessStart(run_id=run_id, agent_id="agent"))
    events.extend(Text(run_id=run_id, id=f"{run_id}:text", content=f"chunk {i}. ") for i in range(deltas))
    events.append(ToolCall(run_id=run_id, id=f"{run_id}:call", name="exec", input={"cmd": "ls"}))
    events.append(ToolResult(run_id=run_id, id=f"{run_id}:call", name="exec", output="ok"))
    events.append(HarnessEnd(run_id=run_id, agent_id="agent", reason=reason))
    if event_ids:
        import msgspec

        events = [msgspec.structs.replace(e, event_id=f"{run_id}#{i}") for i, e in enumerate(events)]
    return events
