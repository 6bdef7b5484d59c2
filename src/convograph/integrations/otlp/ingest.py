"""Decoded spans -> stored conversation events: routing, parent links, holds, blobs, one append each.

`OtlpIngestor.ingest(spans)` does, per request:

1. **Index** every span by trace (kind, parent, tool call id), so the links below see the whole
   request whatever its order, and learn each trace's conversation: ``gen_ai.conversation.id`` of
   any of its spans (instrumentations often set it on the agent span only), else the trace id.
2. **Map** each span (`convograph.integrations.otlp.genai`). Content and provider calls need only
   the span itself. An agent span also needs its *link*: the tool call that ran it (a subagent),
   the parent agent's run, or nothing (top level), which depends on its parent span. Exporters send
   a span when it ends, so parents usually arrive *after* their children: an agent whose parent
   span has not arrived yet is **held** (in memory) until it does, at most ``hold_seconds``; then
   it is written linked to its parent's run id (`genai.run_id`), which still links it if that
   parent turns out to be an agent. Its content is stored and shown meanwhile (as a thread whose
   parent has not arrived); the link moves it under its tool call when the agent is written.
3. **Offload** unmapped attribute values of ``attribute_threshold`` bytes or more, and tool inputs
   and outputs of ``content_threshold`` bytes or more, to the blob store (replaced by
   ``{"$blob_ref", "sha256", "bytes", "preview"}``), when a blob store is given.
4. **Append** one batch per conversation (atomic: all of a conversation's events of the request,
   or none). Event ids come from span ids and message identities, so a re-sent export, or the same
   message shown by several spans, is stored once.

A trace that learns its conversation id only after some of its spans went to the trace-id
conversation (the agent span, carrying ``gen_ai.conversation.id``, ends last) is **moved**: the
trace-id conversation's events are appended to the named conversation (same event ids, so the
move is idempotent) and the trace-id conversation is deleted (``on_deleted``).

Concurrency: one request at a time (an `asyncio.Lock`); state is per process and bounded
(``max_traces`` most recent traces). Holds are lost if the process dies; `close` writes them.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol

import msgspec

from convograph.events import Event, ToolCall, ToolResult, parse_event
from convograph.events.codec import event_to_wire
from convograph.integrations.otlp import genai
from convograph.integrations.otlp.model import Span
from convograph.intelligence.blobs import BlobStore, parse_blob_uri
from convograph.intelligence.conversations import conversation_target
from convograph.store import AppendResult, EventLog, InvalidConversationId
from convograph.store.base import validate_conversation_id

__all__ = ["BlobSink", "ConversationBlobs", "IngestReport", "OtlpIngestor"]


class BlobSink(Protocol):
    """Where oversized values go: ``put`` returns the reference that replaces the value."""

    def put(self, conversation_id: str, key: str, content: bytes) -> dict[str, Any]: ...

    def get(self, uri: str) -> bytes | None: ...


_json = msgspec.json.Encoder(order="sorted")


class IngestReport(msgspec.Struct, kw_only=True):
    """What one `OtlpIngestor.ingest` did. ``rejected`` / ``skipped``: reason -> span count."""

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


class _Known(msgspec.Struct, frozen=True):
    kind: str
    parent: str | None
    call_id: str | None


class _Held(msgspec.Struct):
    """An agent span waiting for an ancestor; ``prefix`` of its conversation id (the id itself is
    decided when it is written, since its trace may learn its name meanwhile)."""

    span: Span
    prefix: str
    deadline: float


class _Trace:
    """What this process knows about one trace."""

    __slots__ = ("conversation", "done", "held", "spans")

    def __init__(self) -> None:
        self.spans: dict[str, _Known] = {}
        self.held: dict[str, list[_Held]] = {}
        self.conversation: str | None = None
        self.done: set[str] = set()
        """``<prefix><span id>`` of the spans whose events are stored: a re-sent span is skipped."""


class OtlpIngestor:
    """Stores GenAI spans as conversation events in ``log`` (module docstring).

    ``on_stored(cid, result)`` runs after each append (the server updates its caches and feeds
    the context-intelligence graph); ``on_deleted(cid)`` after a trace-id conversation was moved.
    ``blobs``, when given, keeps oversized values (step 3)."""

    def __init__(
        self,
        log: EventLog,
        *,
        on_stored: Callable[[str, AppendResult], None] | None = None,
        on_deleted: Callable[[str], Any] | None = None,
        blobs: BlobSink | None = None,
        attribute_threshold: int = 16 * 1024,
        content_threshold: int = 1024 * 1024,
        hold_seconds: float = 30.0,
        max_traces: int = 4096,
        max_conversations: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.on_stored = on_stored
        self.on_deleted = on_deleted
        self.blobs = blobs
        self.attribute_threshold = attribute_threshold
        self.content_threshold = content_threshold
        self.hold_seconds = hold_seconds
        self.max_traces = max_traces
        self.clock = clock
        self._traces: OrderedDict[str, _Trace] = OrderedDict()
        self._stored: OrderedDict[str, set[str]] = OrderedDict()
        """Event ids this process stored (or found stored), for the ``max_conversations`` most
        recent conversations: re-sent messages are then not even built (the log's own eventId
        dedupe stays the authority)."""
        self.max_conversations = max_conversations
        self._lock = asyncio.Lock()

    @property
    def held_count(self) -> int:
        return sum(len(items) for trace in self._traces.values() for items in trace.held.values())

    async def ingest(
        self,
        spans: Sequence[Span],
        *,
        prefix: str = "",
        can_write: Callable[[str], bool] | None = None,
    ) -> IngestReport:
        """Store ``spans``. Conversation ids are ``prefix + id``; a span whose conversation
        ``can_write`` refuses, or whose id is not a valid conversation id, is rejected.

        If storing fails (the log is unreachable), the exception propagates and the state is as if
        the request had not come (held spans stay held), so the client's retry does the same work."""
        report = IngestReport(spans=len(spans))
        async with self._lock:
            for trace, old, new in self._learn(spans, prefix):
                try:
                    await self._move(old, new)
                except BaseException:
                    trace.conversation = None  # learn it again on the retry
                    raise
            kinds = self._index(spans)
            batches: dict[str, _Batch] = {}
            released = self._map(spans, kinds, prefix, can_write, batches, report)
            for item in released:
                self._emit_agent(item, batches, final=False)
            try:
                await self._store(batches, report)
            except BaseException:
                self._restore(released)
                raise
        return report

    async def release_expired(self) -> int:
        """Write the held agents whose parent did not arrive in time; returns how many."""
        return await self._release(lambda held: held.deadline <= self.clock())

    async def close(self) -> None:
        """Write every held agent (linked to its parent's run id): nothing accepted stays unwritten."""
        await self._release(lambda held: True)

    # -- steps ---------------------------------------------------------------------------------------

    def _trace(self, trace_id: str) -> _Trace:
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._traces[trace_id] = _Trace()
            while len(self._traces) > self.max_traces:
                self._traces.popitem(last=False)
        else:
            self._traces.move_to_end(trace_id)
        return trace

    def _learn(self, spans: Sequence[Span], prefix: str) -> list[tuple[_Trace, str, str]]:
        """Record each trace's conversation id; for traces that just learned theirs, the
        (trace, trace-id conversation, named conversation) to move."""
        moves: list[tuple[_Trace, str, str]] = []
        for span in spans:
            named = span.attributes.get(genai.CONVERSATION_ID)
            if not isinstance(named, str) or not named:
                continue
            trace = self._trace(span.trace_id)
            if trace.conversation is None:
                trace.conversation = named
                if named != span.trace_id:
                    moves.append((trace, prefix + span.trace_id, prefix + named))
        return moves

    def _index(self, spans: Sequence[Span]) -> list[genai.Kind]:
        """Remember every span of a trace that has GenAI spans (a span that is not GenAI may still
        be the parent an agent waits for); traces with no GenAI span are not tracked at all."""
        kinds = [genai.classify(span) for span in spans]
        genai_traces = {span.trace_id for span, kind in zip(spans, kinds, strict=True) if kind != "other"}
        for span, kind in zip(spans, kinds, strict=True):
            if kind == "other" and span.trace_id not in genai_traces and span.trace_id not in self._traces:
                continue
            call = genai.tool_call_id(span) if kind == "tool" else None
            self._trace(span.trace_id).spans[span.span_id] = _Known(kind, span.parent_span_id, call)
        return kinds

    def _conversation(self, span: Span, prefix: str) -> str:
        named = span.attributes.get(genai.CONVERSATION_ID)
        if isinstance(named, str) and named:
            return prefix + named
        trace = self._traces.get(span.trace_id)
        learned = trace.conversation if trace is not None else None
        return prefix + (learned or span.trace_id)

    def _map(
        self,
        spans: Sequence[Span],
        kinds: list[genai.Kind],
        prefix: str,
        can_write: Callable[[str], bool] | None,
        batches: dict[str, _Batch],
        report: IngestReport,
    ) -> list[_Held]:
        """Events of each span, in request order; returns the held agents this request released."""
        released: list[_Held] = []
        for span, kind in zip(spans, kinds, strict=True):
            trace = self._traces.get(span.trace_id)
            if trace is not None:
                released.extend(trace.held.pop(span.span_id, ()))
            if kind in ("other", "genai"):
                reason = (
                    "not a GenAI span" if kind == "other" else "GenAI operation without conversation content"
                )
                report.count(report.skipped, reason)
                continue
            cid = self._conversation(span, prefix)
            problem = _conversation_problem(cid, can_write)
            if problem is not None:
                report.count(report.rejected, problem)
                continue
            report.mapped += 1
            if trace is not None and prefix + span.span_id in trace.done:
                continue  # stored before: an exporter re-sending
            if kind == "agent":
                if not self._emit_agent(_Held(span, prefix, 0.0), batches, final=False):
                    report.held += 1
            else:
                batch = self._batch(batches, cid)
                batch.add(
                    genai.inference_events(span, batch) if kind == "inference" else genai.tool_events(span)
                )
                batch.spans.append((span.trace_id, prefix + span.span_id))
        return released

    def _emit_agent(self, item: _Held, batches: dict[str, _Batch], *, final: bool) -> bool:
        """Write an agent span's run when its link is known (or ``final``: then it is linked to its
        parent's run id); else hold it until its missing ancestor arrives. True when written."""
        span = item.span
        trace = self._trace(span.trace_id)
        resolved, link, missing = _link(trace, span)
        if not resolved and not final:
            assert missing is not None
            held = _Held(span, item.prefix, item.deadline or self.clock() + self.hold_seconds)
            trace.held.setdefault(missing, []).append(held)
            return False
        if not resolved:
            link = genai.run_id(span.parent_span_id) if span.parent_span_id else None
        cid = self._conversation(span, item.prefix)  # now: the trace may have learned its name
        batch = self._batch(batches, cid)
        batch.add(genai.agent_events(span, link))
        batch.spans.append((span.trace_id, item.prefix + span.span_id))
        return True

    def _restore(self, items: list[_Held]) -> None:
        """Hold again agents whose writing failed (keyed by their own parent, which will come back
        with the client's retry, or by the deadline)."""
        for item in items:
            trace = self._trace(item.span.trace_id)
            key = item.span.parent_span_id or item.span.span_id
            waiting = trace.held.setdefault(key, [])
            if item not in waiting:
                waiting.append(item)

    async def _release(self, due: Callable[[_Held], bool]) -> int:
        async with self._lock:
            batches: dict[str, _Batch] = {}
            released: list[_Held] = []
            for trace in self._traces.values():
                for missing in list(trace.held):
                    keep = [item for item in trace.held[missing] if not due(item)]
                    released.extend(item for item in trace.held[missing] if due(item))
                    if keep:
                        trace.held[missing] = keep
                    else:
                        del trace.held[missing]
            for item in released:
                self._emit_agent(item, batches, final=True)
            try:
                await self._store(batches, IngestReport())
            except BaseException:
                self._restore(released)
                raise
        return len(released)

    def _batch(self, batches: dict[str, _Batch], cid: str) -> _Batch:
        batch = batches.get(cid)
        if batch is None:
            batch = batches[cid] = _Batch(self._known(cid))
        return batch

    def _known(self, cid: str) -> set[str]:
        known = self._stored.get(cid)
        if known is None:
            known = self._stored[cid] = set()
            while len(self._stored) > self.max_conversations:
                self._stored.popitem(last=False)
        else:
            self._stored.move_to_end(cid)
        return known

    async def _store(self, batches: dict[str, _Batch], report: IngestReport) -> None:
        """One append per conversation, all at once (the event log commits concurrent appends
        together: one durable write for the request, not one per conversation)."""
        work = [(cid, batch) for cid, batch in batches.items() if batch.events]
        for cid, batch in batches.items():
            if not batch.events:
                report.conversations.append(cid)
                for trace_id, key in batch.spans:  # nothing new to store: done all the same
                    trace = self._traces.get(trace_id)
                    if trace is not None:
                        trace.done.add(key)

        async def store(cid: str, batch: _Batch) -> AppendResult:
            events = batch.events
            if self.blobs is not None:
                events = await asyncio.to_thread(self._offload, cid, events)
            return await self.log.append(cid, events)

        results = await asyncio.gather(*(store(cid, batch) for cid, batch in work), return_exceptions=True)
        failure: BaseException | None = None
        for (cid, batch), result in zip(work, results, strict=True):
            if isinstance(result, BaseException):
                failure = failure or result
                continue
            self._known(cid).update(batch.ids)
            for trace_id, key in batch.spans:
                trace = self._traces.get(trace_id)
                if trace is not None:
                    trace.done.add(key)
            report.accepted_events += result.accepted
            report.duplicate_events += result.duplicates
            report.conversations.append(cid)
            if self.on_stored is not None:
                self.on_stored(cid, result)
        if failure is not None:
            raise failure

    async def _move(self, old: str, new: str) -> None:
        """Append ``old``'s events to ``new``, then delete ``old`` (idempotent by event ids)."""
        try:
            validate_conversation_id(new)
        except InvalidConversationId:
            return
        if await self.log.get_conversation(old) is None:
            return
        events: list[Event] = []
        cursor = 0
        while True:
            page = await self.log.read(old, cursor, 1000)
            if not page:
                break
            events.extend(_without_seq(stored.event) for stored in page)
            cursor = page[-1].seq
        if self.blobs is not None:
            events = await asyncio.to_thread(_rebase_blobs, events, new, self.blobs)
        result = await self.log.append(new, events)
        if self.on_stored is not None:
            self.on_stored(new, result)
        await self.log.delete(old)
        self._stored.pop(old, None)
        if self.on_deleted is not None:
            outcome = self.on_deleted(old)
            if asyncio.iscoroutine(outcome):
                await outcome

    # -- blobs ---------------------------------------------------------------------------------------

    def _offload(self, cid: str, events: list[Event]) -> list[Event]:
        assert self.blobs is not None
        put = self.blobs.put
        out: list[Event] = []
        for event in events:
            extra = event.extra
            if extra is not None and isinstance(extra.get("otel"), dict):
                meta = _offload_meta(extra["otel"], cid, put, self.attribute_threshold)
                if meta is not extra["otel"]:
                    event = msgspec.structs.replace(event, extra={**extra, "otel": meta})
            if isinstance(event, ToolCall | ToolResult):
                field = "input" if isinstance(event, ToolCall) else "output"
                value = getattr(event, field)
                encoded = _json.encode(value)
                if len(encoded) >= self.content_threshold:
                    ref = put(cid, f"otlp__{_safe(event.event_id or event.id)}__{field}", encoded)
                    event = msgspec.structs.replace(event, **{field: ref})
            out.append(event)
        return out


class _Batch:
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


def _link(trace: _Trace, span: Span) -> tuple[bool, str | None, str | None]:
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
        if known.kind in ("agent", "inference"):
            return True, genai.run_id(parent), None
        seen.add(parent)
        parent = known.parent
    return True, None, None


def _conversation_problem(cid: str, can_write: Callable[[str], bool] | None) -> str | None:
    try:
        validate_conversation_id(cid)
    except InvalidConversationId as exc:
        return f"{exc} (from gen_ai.conversation.id or the trace id)"
    if can_write is not None and not can_write(cid):
        return f"this API key may not write conversation {cid!r}"
    return None


def _without_seq(event: Event) -> Event:
    return msgspec.structs.replace(event, seq=None)


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-:" else "_" for ch in text)[:200]


def _offload_meta(
    meta: dict[str, Any], cid: str, put: Callable[[str, str, bytes], dict[str, Any]], threshold: int
) -> dict[str, Any]:
    """``meta`` with each large value of its ``attributes`` (and other large sections) replaced by a
    blob reference; the same object when nothing is large (the common case)."""
    out: dict[str, Any] | None = None
    span_id = _safe(str(meta.get("spanId", "span")))
    attributes = meta.get("attributes")
    if isinstance(attributes, dict):
        kept: dict[str, Any] | None = None
        for key, value in attributes.items():
            encoded = _json.encode(value)
            if len(encoded) >= threshold:
                kept = dict(attributes) if kept is None else kept
                kept[key] = put(cid, f"otlp__{span_id}__{_safe(key)}", encoded)
        if kept is not None:
            out = {**meta, "attributes": kept}
    for section in ("systemInstructions", "events", "unmappedParts", "resource"):
        value = meta.get(section)
        if value is None:
            continue
        encoded = _json.encode(value)
        if len(encoded) >= threshold:
            out = dict(meta) if out is None else out
            out[section] = put(cid, f"otlp__{span_id}__{section}", encoded)
    return meta if out is None else out


BLOB_REF: Final = "$blob_ref"


def _rebase_blobs(events: list[Event], new: str, blobs: BlobSink) -> list[Event]:
    """Copies of ``events`` whose blob references name ``new``'s blobs (the content copied there)."""
    out: list[Event] = []
    for event in events:
        wire = event_to_wire(event)
        if BLOB_REF.encode() not in _json.encode(wire):
            out.append(event)
            continue

        def rebase(value: Any) -> Any:
            if isinstance(value, dict):
                uri = value.get(BLOB_REF)
                if isinstance(uri, str):
                    content = blobs.get(uri)
                    return value if content is None else blobs.put(new, uri.rsplit("/", 1)[-1], content)
                return {key: rebase(item) for key, item in value.items()}
            if isinstance(value, list):
                return [rebase(item) for item in value]
            return value

        out.append(parse_event(rebase(wire)))
    return out


class ConversationBlobs:
    """`BlobSink` over the context-intelligence `BlobStore`: a conversation's blobs live in its
    session (`conversation_target`), so forgetting the conversation forgets them too."""

    def __init__(self, store: BlobStore) -> None:
        self.store = store

    def put(self, conversation_id: str, key: str, content: bytes) -> dict[str, Any]:
        workspace, session = conversation_target(conversation_id)
        ref = self.store.put(workspace, session, key, content)
        return {
            BLOB_REF: ref.uri,
            "sha256": ref.sha256,
            "bytes": ref.size,
            "preview": content[:256].decode(errors="ignore"),
        }

    def get(self, uri: str) -> bytes | None:
        session, key = parse_blob_uri(uri)
        return self.store.get(session, key)
