"""The answers to docs/querying.md's questions for conversation events, computed in Python from
the events a conversation log stored (never from the graph), as `Data` does for hook events in
tests/test_intelligence_layers_queries.py.

What the events say, read the way docs/querying.md's mapping table reads them: an agent run has a
``harness_start``; any other run belongs to the agent run its ``parentId`` names; each ``usage``
ends one model call (a provider run's failed attempts before it are the same call); the agent's
own tool calls after a model call were asked for by it, tool calls of another run of the agent
(OTLP's messages) by the next model call.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from convograph.events import event_to_wire
from convograph.store import StoredEvent

_FINISHED = {"final", "stop", "done", "completed"}


def _ms(wire: dict[str, Any], received_at: float) -> int:
    stamp = wire.get("timestamp")
    if isinstance(stamp, str):
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    if isinstance(stamp, int | float):
        return int(stamp)
    return int(received_at * 1000)


@dataclass
class Call:
    """One model call of an agent run."""

    run: str
    number: int
    tokens: list[int] = field(default_factory=lambda: [0, 0, 0])
    model: str | None = None
    duration_ms: int | None = None
    tools: list[str] = field(default_factory=list)
    ended: bool = False


@dataclass
class Run:
    session: str
    agent: str
    parent: str | None
    start: int
    sub: bool
    end: int | None = None
    reason: str | None = None
    calls: list[Call] = field(default_factory=list)


class ConversationAnswers:
    """Facts of a workspace's conversations (``{cid: stored events}``), independent of the graph."""

    def __init__(self, conversations: dict[str, list[StoredEvent]]) -> None:
        self.runs: dict[str, Run] = {}
        self.prompts: list[tuple[str, str | None]] = []  # (prompt id, run key it triggered)
        self.tool_names: dict[str, str] = {}
        self.tool_start: dict[str, int] = {}
        self.tool_end: dict[str, int] = {}
        self.failed: set[str] = set()
        self.groups: list[list[str]] = []
        self.roots: list[str] = []
        for cid, stored in conversations.items():
            self._read(cid.partition(":")[2], stored)

    def _read(self, sid: str, stored: list[StoredEvent]) -> None:
        self.roots.append(sid)
        items = sorted(
            (
                (_ms(wire, item.received_at), item.seq, wire)
                for item in stored
                for wire in [event_to_wire(item.event)]
            ),
            key=lambda x: (x[0], x[1]),
        )
        owner: dict[str, str] = {}
        users: dict[str, str] = {}
        running: dict[str, list[str]] = defaultdict(list)
        prompts = 0
        for ms, _seq, wire in items:
            kind, key, parent = wire["type"], wire.get("runId"), wire.get("parentId")
            if kind == "user":
                prompts += 1
                prompt = f"{sid}::prompt::{prompts}"
                if parent in self.runs:
                    self.prompts.append(
                        (prompt, parent if not any(r == parent for _, r in self.prompts) else None)
                    )
                else:
                    users[f"{key}:user"] = prompt
                    self.prompts.append((prompt, None))
                continue
            if kind == "harness_start":
                sub = parent is not None and (parent in self.tool_names or parent in self.runs)
                session = f"{sid}::agent::{key}" if sub else sid
                self.runs[key] = Run(session, wire.get("agentId"), parent, ms, sub)
                if parent in users:
                    index = [p for p, _ in self.prompts].index(users[parent])
                    self.prompts[index] = (users[parent], key)
                continue
            agent = (
                key
                if key in self.runs
                else owner.get(key) or (parent if parent in self.runs else owner.get(parent))
            )
            if agent is None:
                continue
            owner[key] = agent
            run = self.runs[agent]
            own = key == agent
            last = run.calls[-1] if run.calls else None
            if kind == "harness_end" and own:
                run.end, run.reason = ms, wire.get("reason")
            elif kind in ("usage", "error") and not own:
                call = last if last is not None and not last.ended else None
                if call is None:
                    call = Call(agent, len(run.calls) + 1)
                    run.calls.append(call)
                if kind == "usage":
                    call.ended = True
                    call.tokens = [
                        wire["inputTokens"],
                        wire["outputTokens"],
                        wire.get("cacheReadTokens") or 0,
                    ]
                    otel = wire.get("otel") or {}
                    call.model = (otel.get("attributes") or {}).get("gen_ai.request.model")
                    if otel:
                        call.duration_ms = (otel["endTimeUnixNano"] - otel["startTimeUnixNano"]) // 1_000_000
            elif kind in ("tool_call", "relay"):
                call_id = wire["id"] if kind == "tool_call" else wire["toolCallId"]
                if call_id not in self.tool_names:
                    self.tool_names[call_id] = wire["name"] if kind == "tool_call" else wire["tool"]
                    if last is None or (last.ended and not own):
                        last = Call(agent, len(run.calls) + 1)
                        run.calls.append(last)
                    last.tools.append(call_id)
                if kind == "tool_call":
                    self.tool_start[call_id] = ms
                    self._parallel(running[agent], last, call_id)
            elif kind == "tool_result":
                call_id = wire["id"]
                self.tool_names.setdefault(call_id, wire["name"])
                self.tool_end[call_id] = ms
                output = wire.get("output")
                if isinstance(output, dict) and (
                    output.get("error") is not None or output.get("status") == "denied"
                ):
                    self.failed.add(call_id)
                if call_id in running[agent]:
                    running[agent].remove(call_id)

    def _parallel(self, running: list[str], call: Call | None, call_id: str) -> None:
        """Calls of one model call overlapping in time form a group (docs/querying.md)."""
        running[:] = [other for other in running if call is not None and other in call.tools]
        if running:
            group = next((g for g in self.groups if running[0] in g or running[-1] in g), None)
            if group is None or not any(member in running for member in group):
                group = list(running)
                self.groups.append(group)
            group.append(call_id)
        running.append(call_id)

    # -- the questions ------------------------------------------------------------------------

    def calls(self) -> list[Call]:
        return [call for run in self.runs.values() for call in run.calls]

    def q1(self) -> list[dict[str, Any]]:
        kinds = Counter({"root": len(self.roots), "forked": len(self.delegations())})
        return [{"kind": k, "sessions": n} for k, n in sorted(kinds.items())]

    def q2(self) -> list[dict[str, Any]]:
        agents: dict[str, str] = {}
        for run in self.runs.values():
            agents.setdefault(run.session, run.agent)
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for key, run in self.runs.items():
            for call in run.calls:
                for i in range(3):
                    totals[agents[self.runs[key].session]][i] += call.tokens[i]
        return [
            {"agent": a, "input": v[0], "output": v[1], "cache_read": v[2]} for a, v in sorted(totals.items())
        ]

    def q3(self) -> list[dict[str, Any]]:
        calls = Counter(self.tool_names.values())
        failures = Counter(self.tool_names[c] for c in self.failed)
        rows = [{"tool": t, "failures": failures[t], "calls": calls[t]} for t in calls if failures[t]]
        return sorted(rows, key=lambda r: (-r["failures"], r["tool"]))

    def q4(self) -> list[dict[str, Any]]:
        subs = Counter(run.session.partition("::")[0] for run in self.runs.values() if run.sub)
        return [{"root": sid, "descendants": subs[sid]} for sid in sorted(self.roots)]

    def q5(self) -> list[int]:
        return sorted((c.duration_ms for c in self.calls() if c.duration_ms is not None), reverse=True)[:5]

    def durations(self) -> dict[str, tuple[float, int]]:
        spans: dict[str, list[int]] = defaultdict(list)
        for call_id, start in self.tool_start.items():
            if call_id in self.tool_end:
                spans[self.tool_names[call_id]].append(self.tool_end[call_id] - start)
        return {t: (sum(v) / len(v), len(v)) for t, v in spans.items()}

    def q9(self) -> list[tuple[str, int]]:
        per_run = Counter(
            {
                f"{run.session}::run::{self._number(key)}": len(run.calls)
                for key, run in self.runs.items()
                if run.calls
            }
        )
        return sorted(per_run.items(), key=lambda kv: (-kv[1], kv[0]))[:3]

    def _number(self, key: str) -> int:
        session = self.runs[key].session
        return [k for k, run in self.runs.items() if run.session == session].index(key) + 1

    def q10(self) -> dict[str, Any]:
        sizes = [len(g) for g in self.groups]
        return {"groups": len(sizes), "calls": sum(sizes), "largest": max(sizes) if sizes else None}

    def delegations(self) -> list[Run]:
        return [run for run in self.runs.values() if run.sub]

    def q11(self) -> list[dict[str, Any]]:
        agents: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for run in self.delegations():
            agents[run.agent][0] += 1
            agents[run.agent][1] += run.reason in _FINISHED
        return [{"agent": a, "delegations": v[0], "succeeded": v[1]} for a, v in sorted(agents.items())]

    def q12(self) -> list[dict[str, Any]]:
        return [
            {
                "session": run.session,
                "session_status": "cancelled" if run.sub else "running",
                "run_status": "cancelled",
            }
            for run in self.runs.values()
            if run.reason == "cancelled"
        ]

    def q14(self) -> list[dict[str, Any]]:
        models: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for call in self.calls():
            if call.model is not None:
                models[call.model][0] += 1
                models[call.model][1] += call.tokens[2]
        return [{"model": m, "calls": v[0], "cache_read": v[1]} for m, v in sorted(models.items())]

    def q16(self) -> list[int]:
        outputs = [
            sum(c.tokens[1] for c in self.runs[run].calls) for _, run in self.prompts if run is not None
        ]
        return sorted(outputs, reverse=True)[:3]

    def q17(self) -> list[dict[str, Any]]:
        spans: dict[str, list[int]] = {}
        for run in self.runs.values():
            if run.end is None:
                continue
            span = spans.setdefault(run.session, [run.start, run.end])
            span[0], span[1] = min(span[0], run.start), max(span[1], run.end)
        ranked = sorted(((end - start, session) for session, (start, end) in spans.items()), reverse=True)
        return [{"session": session, "ms": ms} for ms, session in ranked[:3]]

    def q18(self) -> list[dict[str, Any]]:
        rows = [
            {"tool": self.tool_names[run.parent], "requested": run.agent, "child": run.session}
            for run in self.delegations()
            if run.parent in self.tool_names
        ]
        return sorted(rows, key=lambda r: r["child"])

    def q19(self) -> list[dict[str, Any]]:
        counts = [len(c.tools) for c in self.calls() if c.tools]
        return [{"most_calls": max(counts), "attached_calls": sum(counts)}]

    def q20(self) -> dict[str, tuple[float, int]]:
        spans: dict[str, list[int]] = defaultdict(list)
        for run in self.delegations():
            if run.end is not None:
                spans[run.agent].append(run.end - run.start)
        return {a: (sum(v) / len(v), len(v)) for a, v in spans.items()}
