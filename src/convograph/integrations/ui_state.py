"""The state `convograph.integrations.ui_stream.UIEventStream` keeps, and the frame helpers.

Plain records: runs (harness, subagent, loose), their open part and turn message, tool calls, the
protocol-level turns; how a run ended (`outcome_of`); SSE frame ids (`sse_frames`) and resume
cursors (`parse_resume`). See `convograph.integrations.ui_stream` for the rules that change them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from convograph.events import HarnessEnd, Relay, RelayResolved, Usage

__all__ = [
    "Chunk",
    "Outcome",
    "Part",
    "Run",
    "ToolCallState",
    "Turn",
    "UsageTotals",
    "outcome_of",
    "parse_resume",
    "sse_frames",
]

Chunk = dict[str, Any]
"""One protocol event / part in its wire (JSON) form."""

Outcome = Literal["success", "error", "cancelled", "length"]

_ERROR_WORDS: Final = ("error", "fail", "crash", "exception")
_CANCEL_WORDS: Final = ("cancel", "abort", "interrupt", "stop_requested", "killed")
_LENGTH_WORDS: Final = ("max_iterations", "max_turns", "max_tokens", "length", "budget")


def outcome_of(end: HarnessEnd | None) -> Outcome:
    """How a run ended, read from ``harness_end.reason`` (free text: ``final``, ``error``, ...).
    No ``harness_end`` (closed by the end of its turn) counts as cancelled."""
    if end is None:
        return "cancelled"
    reason = (end.reason or "").lower()
    if any(word in reason for word in _ERROR_WORDS):
        return "error"
    if any(word in reason for word in _CANCEL_WORDS):
        return "cancelled"
    if any(word in reason for word in _LENGTH_WORDS):
        return "length"
    return "success"


_RESUME: Final = re.compile(r"([0-9]{1,19})(?::([0-9]{1,9}))?")


def parse_resume(value: str) -> tuple[int, int]:
    """A ``Last-Event-ID`` of a protocol stream as ``(after_seq, skip)``: resume with the events
    after ``after_seq``, dropping the first ``skip`` chunks of the first one. ``"12"`` gives
    ``(12, 0)``; ``"12:3"`` (chunks 0..3 of event 12 seen) gives ``(11, 4)``. Raises `ValueError`
    naming the accepted forms."""
    match = _RESUME.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"expected <seq> or <seq>:<chunk>, got {value!r}")
    seq = int(match.group(1))
    if match.group(2) is None:
        return seq, 0
    if seq == 0:
        raise ValueError(f"seq 0 has no chunks, got {value!r}")
    return seq - 1, int(match.group(2)) + 1


def sse_frames(seq: int, payloads: list[bytes]) -> list[bytes]:
    """One SSE message per payload (single-line JSON): ``id: <seq>:<k>`` on all but the last,
    ``id: <seq>`` on the last (see the module docstring)."""
    last = len(payloads) - 1
    return [
        b"id: %d\ndata: %s\n\n" % (seq, payload)
        if k == last
        else b"id: %d:%d\ndata: %s\n\n" % (seq, k, payload)
        for k, payload in enumerate(payloads)
    ]


# --- state ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class UsageTotals:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    calls: int = 0

    def add(self, usage: Usage) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens or 0
        self.cache_creation_tokens += usage.cache_creation_tokens or 0
        self.calls += 1

    def to_wire(self) -> dict[str, int]:
        return {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "cacheReadTokens": self.cache_read_tokens,
            "cacheCreationTokens": self.cache_creation_tokens,
        }


@dataclass(eq=False, slots=True)
class Part:
    """An open text or reasoning block. ``message_id``: the protocol message it streams into (the
    turn's assistant message for text, the block itself for reasoning)."""

    kind: Literal["text", "reasoning"]
    block_id: str
    message_id: str
    owner: Run
    step: str | None
    signature: str | None = None
    redacted_data: str | None = None
    deltas: int = 0


@dataclass(eq=False, slots=True)
class Run:
    """A harness run (``top`` or ``subagent``) or a ``loose`` run (events outside every harness)."""

    run_id: str
    kind: Literal["top", "subagent", "loose"]
    agent_id: str | None = None
    parent: Run | None = None
    parent_tool_call: str | None = None
    spawned_by: str | None = None
    """The ``parentId`` of its ``harness_start`` (a tool call, a REPL turn's ``repl_input``, a run)."""
    open: bool = True
    step: str | None = None
    part: Part | None = None
    turn_message: str | None = None
    """The assistant message of the current turn (text and calls join it)."""
    turn_has_calls: bool = False
    children: list[Run] = field(default_factory=list)
    last_error: str | None = None
    invocation: str | None = None
    """A subagent's invocation id (AG-UI ``subagentRunId``): its run id, or ``<run id>#<seq>``
    when the run id already named an invocation in the same turn (a restarted run)."""

    @property
    def top(self) -> Run:
        run = self
        while run.parent is not None:
            run = run.parent
        return run

    @property
    def subagent_run_id(self) -> str | None:
        """The subagent invocation this run is (AG-UI ``subagentRunId``); None for others."""
        return self.invocation if self.kind == "subagent" else None


@dataclass(eq=False, slots=True)
class ToolCallState:
    call_id: str
    name: str
    input: Any
    owner: Run
    parent_message: str | None
    """The assistant message holding the call; None when the call opened its own."""
    answered: bool = False
    result_seq: int = 0
    """Seq of the result (0: none yet): results take their place in arrival order."""
    relay: Relay | None = None
    decision: RelayResolved | None = None


@dataclass(eq=False, slots=True)
class Turn:
    turn_id: str
    loose_key: str | None
    """None for a harness turn; the loose run's id (``""`` for run-less events) otherwise."""
    runs: list[Run] = field(default_factory=list)
    owners: dict[int, Run] = field(default_factory=dict)
    usage: UsageTotals = field(default_factory=UsageTotals)
    subagents: set[str] = field(default_factory=set)
    """Subagent runs started in this turn."""

    @property
    def loose(self) -> bool:
        return self.loose_key is not None
