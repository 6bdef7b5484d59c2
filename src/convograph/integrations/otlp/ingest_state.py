"""What `OtlpIngestor` remembers between requests (per trace), and one request's batches.

Per trace (`TraceState`): every span seen (its kind, parent, tool call id and times: enough to link
an agent and to place messages logged for the span later), the agent spans held for a missing
ancestor, the conversation id the trace named, the spans already stored, and the GenAI message log
records seen (keys) and still kept for their span (`SpanLogs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

import msgspec

from convograph.events import Event
from convograph.integrations.otlp import genai
from convograph.integrations.otlp.model import Span, SpanEvent
from convograph.store import InvalidConversationId
from convograph.store.base import validate_conversation_id

__all__ = [
    "Batch",
    "Held",
    "IngestReport",
    "Known",
    "SpanLogs",
    "TraceState",
    "awaited_call",
    "conversation_problem",
    "link_of",
    "skeleton",
]


class IngestReport(msgspec.Struct, kw_only=True):
    """What one `OtlpIngestor.ingest` (or ``ingest_logs``) did. ``spans``: the spans (or log
    records) of the request; ``rejected`` / ``skipped``: reason -> count of them."""

    spans: int = 0
    mapped: int = 0
    held: int = 0
    skipped: dict[str, int] = msgspec.field(default_factory=dict)
    rejected: dict[str, int] = msgspec.field(default_factory=dict)
    accepted_events: int = 0
    duplicate_events: int = 0
    conversations: list[str] = msgspec.field(default_factory=list)

    def count(self, table: dict[str, int], reason: str, n: int = 1) -> None:
        table[reason] = table.get(reason, 0) + n


class Known(msgspec.Struct, frozen=True):
    """A span this process has seen."""

    kind: str
    parent: str | None
    call_id: str | None
    start_ns: int = 0
    end_ns: int = 0


class Held(msgspec.Struct):
    """An agent span waiting for an ancestor, a tool span waiting for the logged messages of the
    model call that requested it (``waiting_for``: that call's span id), or a model call's end
    (usage, error) waiting for its own (``waiting_for``: its own span id); ``prefix`` of its
    conversation id (the id itself is decided when it is written: the trace may learn its name)."""

    span: Span
    prefix: str
    deadline: float
    waiting_for: str = ""


class SpanLogs(msgspec.Struct):
    """The message events logged for one span, in order (`logs.in_order`), kept until the span is
    known and its last message (``final``) arrived, or until ``deadline``: the identity of each
    message chains from the ones before it, so a later record needs the earlier ones."""

    events: list[SpanEvent]
    prefix: str
    deadline: float
    final: bool = False


class TraceState:
    """What this process knows about one trace."""

    __slots__ = ("awaiting", "conversation", "done", "held", "logged", "logs", "spans", "tools_held")

    def __init__(self) -> None:
        self.spans: dict[str, Known] = {}
        self.held: dict[str, list[Held]] = {}
        """Missing ancestor span id -> the agent spans waiting for it."""
        self.tools_held: dict[str, list[Held]] = {}
        """Model call span id -> its own end, then the tool spans, waiting for its logged messages."""
        self.awaiting: dict[str, float] = {}
        """Model call span id -> until when its logged messages are expected (the call arrived
        without messages from a source that sends them as log records, `OtlpIngestor`)."""
        self.conversation: str | None = None
        self.done: set[str] = set()
        """``<prefix><span id>`` of the spans whose events are stored: a re-sent span is skipped."""
        self.logs: dict[str, SpanLogs] = {}
        """Span id -> the message events logged for it and still kept."""
        self.logged: set[bytes] = set()
        """`logs.record_key` of every message record taken: a re-sent record is skipped."""


def awaited_call(trace: TraceState, tool: Span, now: float) -> str | None:
    """The model call a tool span should wait for: the last sibling call (same parent) that ended
    before the tool began (the one that requested it, whose history holds the earlier ones), when
    its logged messages are still expected; None otherwise. O(spans of the trace) when some call
    of the trace is awaited, else O(1)."""
    if not trace.awaiting:
        return None
    siblings = (
        (known.end_ns, span_id)
        for span_id, known in trace.spans.items()
        if known.kind == "inference" and known.parent == tool.parent_span_id and known.end_ns <= tool.start_ns
    )
    last = max(siblings, default=None)
    if last is None or trace.awaiting.get(last[1], 0.0) <= now:
        return None
    return last[1]


def skeleton(trace_id: str, span_id: str, known: Known | None, logged: list[SpanEvent]) -> Span:
    """What is known of a span to place the messages logged for it: its ids, parent and times, or,
    for a span that never arrived, a root span over the time of its records."""
    if known is not None:
        return Span(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=known.parent,
            start_ns=known.start_ns,
            end_ns=known.end_ns,
        )
    times = [event.time_ns for event in logged if event.time_ns] or [0]
    return Span(trace_id=trace_id, span_id=span_id, start_ns=min(times), end_ns=max(times))


class Batch:
    """One conversation's events of one request, and what that conversation already has: ``in``
    is true for an event id stored before (``stored``) or already in this batch."""

    __slots__ = ("events", "ids", "spans", "stored")

    def __init__(self, stored: set[str]) -> None:
        self.stored = stored
        self.events: list[Event] = []
        self.ids: set[str] = set()
        self.spans: list[tuple[str, str]] = []
        """(trace id, ``<prefix><span id>``) of the spans whose events are in this batch."""

    def __contains__(self, event_id: object) -> bool:
        return event_id in self.ids or event_id in self.stored

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            key = event.event_id
            if key is None or (key not in self.ids and key not in self.stored):
                self.events.append(event)
                if key is not None:
                    self.ids.add(key)


CONTENT_KINDS: Final = frozenset({"agent", "inference"})


def link_of(trace: TraceState, span: Span) -> tuple[bool, str | None, str | None]:
    """``(resolved, link, missing)`` for an agent span: walk up through spans that are not
    conversation content to the nearest one that is; ``missing`` is the first unknown ancestor."""
    parent = span.parent_span_id
    seen: set[str] = set()
    while parent is not None and parent not in seen:
        known = trace.spans.get(parent)
        if known is None:
            return False, None, parent
        if known.kind == "tool":
            return True, known.call_id, None
        if known.kind in CONTENT_KINDS:
            return True, genai.run_id(parent), None
        seen.add(parent)
        parent = known.parent
    return True, None, None


def conversation_problem(cid: str, can_write: Callable[[str], bool] | None) -> str | None:
    """Why ``cid`` cannot be written (not a valid id, or refused by ``can_write``), or None."""
    try:
        validate_conversation_id(cid)
    except InvalidConversationId as exc:
        return f"{exc} (from gen_ai.conversation.id or the trace id)"
    if can_write is not None and not can_write(cid):
        return f"this API key may not write conversation {cid!r}"
    return None
