"""The demo's conversations as **recorded**, paced scripts (deterministic; no model, no network).

`convograph demo` runs its conversations live with the agent harness (`convograph.demo.live`);
these recordings are the same conversations with fixed ids, replayed by `convograph.demo.player`:
what ``demo --replay`` and ``demo --url ... --fast`` post, and what the browser tests seed their
server with (they address turns by id: ``run-lead/call-qdrant``, ``relay-write-report``, ...).

A `Script` is a list of `Step`s: an event (wire form) and how long a real system would take
before emitting it (`delay`, seconds at speed 1), or an `AwaitRelay` that pauses the script until
someone decides a relay, then continues with the approved or the denied branch, the real
permission-relay flow (upstream spec §6.4): a denied call emits a ``tool_result`` with ``status:
"denied"`` and no ``tool_call``. Text streams at ~45 tokens/s.

The recordings are data files (``data/recorded-<name>.json``: ``{conversationId, title, steps}``,
each step ``{delay, event}`` or ``{awaitRelay, approved, denied}``):

- `research_script()`: a lead agent fans out to two researcher subagents in parallel (each with
  its own parallel tools), one of which delegates to a second-level code reader that streams
  ``exec`` progress; a provider call fails with an error and is retried; reasoning and usage
  throughout; ends on a pending ``write_file`` permission relay left for the user.
- `rlm_script()`: a recursive-language-model run: REPL turns, a child RLM run spawned from a REPL
  turn, a turn that fails with a runtime error and is fixed, and the final answer.
- `retry_policies_script()`: the bundled example (`convograph.examples.multi_agent_events`), paced.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from convograph.examples import multi_agent_events

__all__ = [
    "DEMO_CONVERSATIONS",
    "AwaitRelay",
    "Script",
    "Step",
    "load_recording",
    "research_script",
    "retry_policies_script",
    "rlm_script",
]

Wire = dict[str, Any]

DATA_DIR: Final = Path(__file__).resolve().parent / "data"
TOKENS_PER_SECOND: Final = 45.0
CHARS_PER_TOKEN: Final = 4.0


@dataclass(frozen=True, slots=True)
class Step:
    """Emit ``event`` after waiting ``delay`` seconds (at speed 1)."""

    event: Wire
    delay: float


@dataclass(frozen=True, slots=True)
class AwaitRelay:
    """Pause until relay ``relay_id`` is decided; then play ``approved`` or ``denied``."""

    relay_id: str
    approved: list[Step | AwaitRelay]
    denied: list[Step | AwaitRelay]


@dataclass(slots=True)
class Script:
    """A recorded conversation: its id, title and paced steps."""

    conversation_id: str
    title: str
    steps: list[Step | AwaitRelay] = field(default_factory=list)

    def events(self, *, decisions: dict[str, bool] | None = None) -> list[Wire]:
        """The events in order, taking each relay's branch from ``decisions`` (with the
        ``relay_resolved`` event the server would record), stopping at the first undecided relay.
        For tests and for `convograph ingest`-style use."""
        return list(_flatten(self.steps, decisions or {}))


def _flatten(steps: list[Step | AwaitRelay], decisions: dict[str, bool]) -> Iterator[Wire]:
    for step in steps:
        if isinstance(step, Step):
            yield step.event
            continue
        if step.relay_id not in decisions:
            return
        approved = decisions[step.relay_id]
        # What the server records for a decision (same eventId, so a real decision deduplicates).
        yield {
            "type": "relay_resolved",
            "relayId": step.relay_id,
            "approved": approved,
            "eventId": f"relay-decision:{step.relay_id}",
        }
        yield from _flatten(step.approved if approved else step.denied, decisions)


def _steps(items: list[dict[str, Any]]) -> list[Step | AwaitRelay]:
    out: list[Step | AwaitRelay] = []
    for item in items:
        if "awaitRelay" in item:
            out.append(AwaitRelay(item["awaitRelay"], _steps(item["approved"]), _steps(item["denied"])))
        else:
            out.append(Step(dict(item["event"]), float(item["delay"])))
    return out


def load_recording(name: str) -> Script:
    """The recorded conversation ``data/recorded-<name>.json`` (a fresh copy)."""
    data = json.loads((DATA_DIR / f"recorded-{name}.json").read_text(encoding="utf-8"))
    return Script(data["conversationId"], data["title"], _steps(data["steps"]))


def research_script() -> Script:
    return load_recording("research")


def rlm_script() -> Script:
    return load_recording("rlm")


def retry_policies_script() -> Script:
    """The bundled example paced: text at the demo's token rate, tools 0.7 s, a person 1 s."""
    steps: list[Step | AwaitRelay] = []
    for n, event in enumerate(multi_agent_events()):
        kind = event["type"]
        if kind in ("text", "reasoning"):
            delay = len(str(event.get("content", ""))) / CHARS_PER_TOKEN / TOKENS_PER_SECOND
        else:
            delay = {"tool_result": 0.7, "relay_resolved": 1.0, "user": 1.0}.get(kind, 0.15)
        fields = {k: v for k, v in event.items() if k not in ("eventId", "timestamp")}
        steps.append(Step({**fields, "eventId": f"demo-retry-policies-{n:04d}"}, delay))
    return Script("demo-retry-policies", "HTTP client retry policies (approved and denied relays)", steps)


DEMO_CONVERSATIONS: Final = (research_script, rlm_script, retry_policies_script)
"""Factories of every recorded demo conversation, in the order the demo plays them."""
