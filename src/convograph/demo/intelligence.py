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
    builder = _Envelopes(workspace, prefix, start_ms)
    for n, event in enumerate(events):
        builder.add(event, str(event.get("eventId") or n))
    return builder.out


class _Envelopes:
    """The fold behind `hook_envelopes`: which session each run belongs to, and the envelopes."""

    def __init__(self, workspace: str, prefix: str, start_ms: int) -> None:
        self.workspace, self.prefix, self.clock = workspace, prefix, start_ms
        self.out: list[Wire] = []
        self.session_of_run: dict[str, str] = {}
        self.agent_runs: set[str] = set()
        self.call_session: dict[str, str] = {}

    def emit(self, name: str, session: str, key: str, **data: Any) -> None:
        self.clock += 37
        body = {"session_id": session, "timestamp": _iso(self.clock)}
        body.update((k, v) for k, v in data.items() if v is not None)
        envelope = {"event": name, "workspace": self.workspace, "data": body}
        self.out.append({**envelope, "idempotency_key": f"{self.prefix}:{key}"})

    def add(self, event: Wire, key: str) -> None:
        kind, run = event["type"], event.get("runId")
        if kind == "harness_start" and run is not None:
            self._start(event, run, key)
        elif run is not None and run not in self.session_of_run:
            parent = event.get("parentId")
            owner = self.session_of_run.get(parent) if isinstance(parent, str) else None
            if owner is not None:
                self.session_of_run[run] = owner  # a provider call inside an agent's session
        sid = self.session_of_run.get(run) if run is not None else None
        if sid is not None:
            self._within(event, kind, run, sid, key)

    def _start(self, event: Wire, run: str, key: str) -> None:
        self.agent_runs.add(run)
        sid = self.session_of_run[run] = f"{self.prefix}-{run}"
        parent_call, agent = event.get("parentId"), event.get("agentId")
        parent = self.call_session.get(parent_call) if isinstance(parent_call, str) else None
        if parent is None:
            self.emit("session:start", sid, key, agent_name=agent)
            return
        self.emit("delegate:agent_spawned", parent, key + ":spawn", agent=agent, sub_session_id=sid,
                  parent_session_id=parent, tool_call_id=parent_call)  # fmt: skip
        self.emit("session:fork", sid, key, parent=parent,
                  metadata={"agent_name": agent, "tool_call_id": parent_call})  # fmt: skip

    def _within(self, event: Wire, kind: str, run: str | None, sid: str, key: str) -> None:
        llm = {"model": "claude-sonnet-4", "provider": "anthropic"}
        if kind == "tool_call":
            self.call_session[event["id"]] = sid
            self.emit("tool:pre", sid, key, tool_name=event["name"], tool_input=event.get("input"),
                      tool_call_id=event["id"])  # fmt: skip
        elif kind == "tool_result":
            output = event.get("output")
            failed = isinstance(output, dict) and (output.get("status") == "denied" or "error" in output)
            self.emit("tool:error" if failed else "tool:post", sid, key, tool_name=event["name"],
                      tool_call_id=event["id"], result=output)  # fmt: skip
        elif kind == "usage":
            self.emit("llm:response", sid, key, **llm, input_tokens=event.get("inputTokens"),
                      output_tokens=event.get("outputTokens"))  # fmt: skip
        elif kind == "error":
            self.emit("llm:error", sid, key, **llm, error=event.get("message"))
        elif kind == "harness_end" and run in self.agent_runs:
            self.emit("session:end", sid, key, status="completed")
