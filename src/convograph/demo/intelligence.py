"""The demo's context-intelligence side: Amplifier hook envelopes for the graph explorer.

`hook_envelopes(events, workspace=...)` derives, from a conversation's wire events, what an
Amplifier hook client would have sent to ``POST /events`` for the same session tree: one session
per agent run (``session:start`` for the root, ``session:fork`` for subagents, ``session:end``),
``delegate:agent_spawned`` in the parent when a subagent starts, ``tool:pre`` / ``tool:post`` (or
``tool:error`` for failed and denied calls) per tool call, and ``llm:response`` per provider call
with its token usage. Provider runs belong to the agent session that spawned them. Every envelope
carries an ``idempotency_key`` derived from the source event, so replays are duplicates.

O(events); pure (timestamps are ``start_ms`` plus 37 ms per envelope).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

__all__ = ["hook_envelopes"]

Wire = dict[str, Any]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def hook_envelopes(
    events: Iterable[Wire],
    *,
    workspace: str = "demo",
    prefix: str = "demo",
    start_ms: int = 1_763_800_000_000,
) -> list[Wire]:
    """Hook envelopes ``{event, workspace, data, idempotency_key}`` for ``events`` (see module doc)."""
    out: list[Wire] = []
    session_of_run: dict[str, str] = {}
    agent_runs: set[str] = set()
    call_session: dict[str, str] = {}
    clock = start_ms

    def emit(name: str, session: str, key: str, **data: Any) -> None:
        nonlocal clock
        clock += 37
        body = {
            "session_id": session,
            "timestamp": _iso(clock),
            **{k: v for k, v in data.items() if v is not None},
        }
        out.append(
            {"event": name, "workspace": workspace, "data": body, "idempotency_key": f"{prefix}:{key}"}
        )

    def session(run: str | None) -> str | None:
        return session_of_run.get(run) if run is not None else None

    for n, event in enumerate(events):
        kind, run = event["type"], event.get("runId")
        key = str(event.get("eventId") or n)
        if kind == "harness_start" and run is not None:
            agent_runs.add(run)
            sid = session_of_run[run] = f"{prefix}-{run}"
            parent_call = event.get("parentId")
            parent_session = call_session.get(parent_call) if isinstance(parent_call, str) else None
            if parent_session is None:
                emit("session:start", sid, key, agent_name=event.get("agentId"))
            else:
                agent = event.get("agentId")
                emit("delegate:agent_spawned", parent_session, key + ":spawn", agent=agent,
                     sub_session_id=sid, parent_session_id=parent_session, tool_call_id=parent_call)  # fmt: skip
                emit("session:fork", sid, key, parent=parent_session, metadata={"agent_name": agent,
                     "tool_call_id": parent_call})  # fmt: skip
        elif run is not None and run not in session_of_run:
            parent = event.get("parentId")
            owner = session(parent) if isinstance(parent, str) else None
            if owner is not None:
                session_of_run[run] = owner  # a provider call inside an agent's session
        owning = session(run)
        if owning is None:
            continue
        sid = owning
        if kind == "tool_call":
            call_session[event["id"]] = sid
            emit(
                "tool:pre",
                sid,
                key,
                tool_name=event["name"],
                tool_input=event.get("input"),
                tool_call_id=event["id"],
            )
        elif kind == "tool_result":
            output = event.get("output")
            failed = isinstance(output, dict) and (output.get("status") == "denied" or "error" in output)
            emit("tool:error" if failed else "tool:post", sid, key, tool_name=event["name"],
                 tool_call_id=event["id"], result=output)  # fmt: skip
        elif kind == "usage":
            emit("llm:response", sid, key, model="claude-sonnet-4", provider="anthropic",
                 input_tokens=event.get("inputTokens"), output_tokens=event.get("outputTokens"))  # fmt: skip
        elif kind == "error":
            emit(
                "llm:error",
                sid,
                key,
                model="claude-sonnet-4",
                provider="anthropic",
                error=event.get("message"),
            )
        elif kind == "harness_end" and run in agent_runs:
            emit("session:end", sid, key, status="completed")
    return out
