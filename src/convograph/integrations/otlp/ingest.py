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

**Logged messages** (`ingest_logs`, ``POST /v1/logs``): GenAI message events sent as log records
(`logs`) belong to the span named by their trace and span id. A span's records are kept (in
memory) in order; whenever the span is known (it arrived, before or after them) its messages are
written like its own (`genai.logged_content`, or with the span when they were there first), the
earlier records included, since each message's identity chains from the ones before it. They are
dropped once the span is known and its last message event (`logs.FINAL_EVENTS`) arrived, or
``hold_seconds`` after the last record; records whose span never arrived are then written under a
root span of the trace. A re-sent record is recognised by its key (`logs.record_key`). A tool span
whose requesting model call arrived without messages, from a trace or source known to log them, is
held until that call's records are complete (at most ``hold_seconds``), so its events follow them.

Concurrency: one request at a time (an `asyncio.Lock`); state is per process and bounded
(``max_traces`` most recent traces). Holds and kept records are lost if the process dies; `close`
writes them.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import msgspec

from convograph.events import Event
from convograph.integrations.otlp import genai, logs
from convograph.integrations.otlp.blobs import BlobSink, ConversationBlobs, offload, rebase_blobs
from convograph.integrations.otlp.content import HistoryMemo
from convograph.integrations.otlp.ingest_state import (
    Batch,
    Held,
    IngestReport,
    Known,
    SpanLogs,
    TraceState,
    awaited_call,
    conversation_problem,
    link_of,
    skeleton,
)
from convograph.integrations.otlp.model import LogRecord, Span, SpanEvent
from convograph.store import AppendResult, EventLog, InvalidConversationId
from convograph.store.base import validate_conversation_id

__all__ = ["BlobSink", "ConversationBlobs", "IngestReport", "OtlpIngestor"]


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
        self._traces: OrderedDict[str, TraceState] = OrderedDict()
        self._stored: OrderedDict[str, set[str]] = OrderedDict()
        """Event ids this process stored (or found stored), for the ``max_conversations`` most
        recent conversations: re-sent messages are then not even built (the log's own eventId
        dedupe stays the authority)."""
        self.max_conversations = max_conversations
        self._memo = HistoryMemo()
        """The histories last written, per content run: re-sent ones are recognised cheaply."""
        self._logging_sources: set[tuple[str, str]] = set()
        """(service.name, instrumentation scope) of the GenAI message records seen: their model
        calls' messages come as log records (`_expect_logged`)."""
        self._lock = asyncio.Lock()

    @property
    def held_count(self) -> int:
        return sum(len(items) for trace in self._traces.values() for items in trace.held.values())

    @property
    def waiting_records(self) -> int:
        """Message log records kept for spans that have not arrived (yet)."""
        return sum(
            len(kept.events)
            for trace in self._traces.values()
            for span_id, kept in trace.logs.items()
            if span_id not in trace.spans
        )

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
            await self._learn(((span.trace_id, span.attributes) for span in spans), prefix)
            kinds = self._index(spans)
            batches: dict[str, Batch] = {}
            used: list[tuple[TraceState, str]] = []
            released = self._map(spans, kinds, prefix, can_write, batches, report, used)
            for item in released:
                self._emit_held(item, batches, final=False)
            try:
                await self._store(batches, report)
            except BaseException:
                self._restore(released)
                raise
            for trace, span_id in used:  # the span is known now: its records wait for no one
                kept = trace.logs.get(span_id)
                if kept is not None and kept.final:
                    del trace.logs[span_id]
        return report

    async def ingest_logs(
        self,
        records: Sequence[LogRecord],
        *,
        prefix: str = "",
        can_write: Callable[[str], bool] | None = None,
    ) -> IngestReport:
        """Store the messages of GenAI message event ``records`` with their spans (module
        docstring); other records are skipped (``report.skipped``), records whose conversation
        ``can_write`` refuses are rejected. ``report.held``: records kept for a span not known yet.

        If storing fails, the exception propagates and nothing of the request is remembered: the
        client's retry does the same work."""
        report = IngestReport(spans=len(records))
        async with self._lock:
            await self._learn(((r.trace_id, r.attributes) for r in records if r.trace_id), prefix)
            staged = self._stage_logs(records, prefix, can_write, report)
            batches: dict[str, Batch] = {}
            released: list[Held] = []
            for (trace_id, span_id), (trace, kept, _keys) in staged.items():
                known = trace.spans.get(span_id)
                if known is None:
                    report.held += len(kept.events)
                    continue
                self._write_logged(skeleton(trace_id, span_id, known, kept.events), kept, batches)
                if kept.final:  # the tools this call requested follow its messages
                    tools = trace.tools_held.pop(span_id, [])
                    for item in tools:
                        self._emit_held(item, batches, final=True)
                    released.extend(tools)
            try:
                await self._store(batches, report)
            except BaseException:
                self._restore(released)
                raise
            for (_trace_id, span_id), (trace, kept, keys) in staged.items():
                trace.logged.update(keys)
                if kept.final:
                    trace.awaiting.pop(span_id, None)
                if kept.final and span_id in trace.spans:
                    trace.logs.pop(span_id, None)
                else:
                    trace.logs[span_id] = kept
        return report

    async def release_expired(self) -> int:
        """Write the held agents whose parent did not arrive in time, and the logged messages whose
        span did not; returns how many agents and spans."""
        now = self.clock()
        return await self._release(lambda deadline: deadline <= now)

    async def close(self) -> None:
        """Write every held agent (linked to its parent's run id) and every kept record whose span
        never came: nothing accepted stays unwritten."""
        await self._release(lambda deadline: True)

    # -- steps ---------------------------------------------------------------------------------------

    def _trace(self, trace_id: str) -> TraceState:
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._traces[trace_id] = TraceState()
            while len(self._traces) > self.max_traces:
                self._traces.popitem(last=False)
        else:
            self._traces.move_to_end(trace_id)
        return trace

    async def _learn(self, items: Iterable[tuple[str, dict[str, Any]]], prefix: str) -> None:
        """Record the conversation id each trace names (``(trace id, attributes)`` of its spans or
        records); a trace that just learned its name has its trace-id conversation moved there."""
        moves: list[tuple[TraceState, str, str]] = []
        for trace_id, attributes in items:
            named = attributes.get(genai.CONVERSATION_ID)
            if not isinstance(named, str) or not named:
                continue
            trace = self._trace(trace_id)
            if trace.conversation is None:
                trace.conversation = named
                if named != trace_id:
                    moves.append((trace, prefix + trace_id, prefix + named))
        for trace, old, new in moves:
            try:
                await self._move(old, new)
            except BaseException:
                trace.conversation = None  # learn it again on the retry
                raise

    def _index(self, spans: Sequence[Span]) -> list[genai.Kind]:
        """Remember every span of a trace that has GenAI spans or records (a span that is not GenAI
        may still be the parent an agent waits for); other traces are not tracked at all."""
        kinds = [genai.classify(span) for span in spans]
        genai_traces = {span.trace_id for span, kind in zip(spans, kinds, strict=True) if kind != "other"}
        for span, kind in zip(spans, kinds, strict=True):
            if kind == "other" and span.trace_id not in genai_traces and span.trace_id not in self._traces:
                continue
            call = genai.tool_call_id(span) if kind == "tool" else None
            self._trace(span.trace_id).spans[span.span_id] = Known(
                kind, span.parent_span_id, call, span.start_ns, span.end_ns
            )
        return kinds

    def _conversation(self, trace_id: str, attributes: dict[str, Any], prefix: str) -> str:
        named = attributes.get(genai.CONVERSATION_ID)
        if isinstance(named, str) and named:
            return prefix + named
        trace = self._traces.get(trace_id)
        learned = trace.conversation if trace is not None else None
        return prefix + (learned or trace_id)

    def _map(
        self,
        spans: Sequence[Span],
        kinds: list[genai.Kind],
        prefix: str,
        can_write: Callable[[str], bool] | None,
        batches: dict[str, Batch],
        report: IngestReport,
        used: list[tuple[TraceState, str]],
    ) -> list[Held]:
        """Events of each span, in request order, with the messages logged for it (``used``
        collects those spans); returns the held agents this request released."""
        released: list[Held] = []
        problems: dict[str, str | None] = {}  # per conversation id, checked once per request
        for span, kind in zip(spans, kinds, strict=True):
            trace = self._traces.get(span.trace_id)
            kept: SpanLogs | None = None
            if trace is not None:
                released.extend(trace.held.pop(span.span_id, ()))
                kept = trace.logs.get(span.span_id)
                if kept is not None:
                    used.append((trace, span.span_id))
            if kind in ("other", "genai"):
                reason = (
                    "not a GenAI span" if kind == "other" else "GenAI operation without conversation content"
                )
                report.count(report.skipped, reason)
                if kept is not None:
                    self._write_logged(span, kept, batches)
                continue
            cid = self._conversation(span.trace_id, span.attributes, prefix)
            if cid not in problems:
                problems[cid] = conversation_problem(cid, can_write)
            problem = problems[cid]
            if problem is not None:
                report.count(report.rejected, problem)
                continue
            report.mapped += 1
            if trace is not None and prefix + span.span_id in trace.done:
                if kept is not None:  # re-sent, and its records arrived since: theirs only
                    self._write_logged(span, kept, batches)
                continue  # stored before: an exporter re-sending
            if kind == "agent":
                if not self._emit_agent(Held(span, prefix, 0.0), batches, final=False):
                    report.held += 1
                if kept is not None:
                    self._write_logged(span, kept, batches)
                continue
            if kind == "tool" and self._hold_tool(span, prefix):
                report.held += 1
                continue
            batch = self._batch(batches, cid)
            if kind == "inference":
                logged = kept.events if kept is not None else ()
                until = self._expect_logged(span, kept)
                batch.add(genai.inference_events(span, batch, logged, self._memo, with_end=until is None))
                if until is not None:  # its end follows its messages, as it would with them (`_emit_held`)
                    ends = self._traces[span.trace_id].tools_held.setdefault(span.span_id, [])
                    ends.insert(0, Held(span, prefix, until, span.span_id))
            else:
                batch.add(genai.tool_events(span))
                if kept is not None:
                    self._write_logged(span, kept, batches)
            batch.spans.append((span.trace_id, prefix + span.span_id))
        return released

    def _expect_logged(self, span: Span, kept: SpanLogs | None) -> float | None:
        """Note a model call without messages of its own (and not all logged yet) whose messages
        are expected as log records: its trace sent some, or its source sent some before. The
        deadline of the wait when noted (its end, and the tools it requested, are held until
        then), else None."""
        trace = self._traces.get(span.trace_id)
        if trace is None or (kept is not None and kept.final):
            return None
        if not trace.logged and (
            not self._logging_sources or _source(span.resource, span.scope_name) not in self._logging_sources
        ):
            return None
        if genai.carries_messages(span):
            return None
        until = trace.awaiting[span.span_id] = self.clock() + self.hold_seconds
        return until

    def _hold_tool(self, span: Span, prefix: str) -> bool:
        """Hold a tool span while the logged messages of the model call that requested it are
        expected, so its call and result follow them. True when held (or held already)."""
        trace = self._traces.get(span.trace_id)
        if trace is None or not trace.awaiting:
            return False
        call = awaited_call(trace, span, self.clock())
        if call is None:
            return False
        waiting = trace.tools_held.setdefault(call, [])
        if not any(item.span.span_id == span.span_id for item in waiting):
            waiting.append(Held(span, prefix, trace.awaiting[call], waiting_for=call))
        return True

    def _stage_logs(
        self,
        records: Sequence[LogRecord],
        prefix: str,
        can_write: Callable[[str], bool] | None,
        report: IngestReport,
    ) -> dict[tuple[str, str], tuple[TraceState, SpanLogs, set[bytes]]]:
        """Per span: its trace, what its kept records become with the new ones, and the new
        records' keys (remembered only once stored). Re-sent records are left out."""
        events: dict[tuple[str, str], tuple[TraceState, list[SpanEvent], set[bytes]]] = {}
        for record in records:
            event = logs.message_event(record)
            if isinstance(event, str):
                report.count(report.skipped, event)
                continue
            trace_id, span_id = record.trace_id, record.span_id
            assert trace_id is not None  # message_event checked both
            assert span_id is not None
            cid = self._conversation(trace_id, record.attributes, prefix)
            problem = conversation_problem(cid, can_write)
            if problem is not None:
                report.count(report.rejected, problem)
                continue
            report.mapped += 1
            if len(self._logging_sources) < _MAX_SOURCES:
                self._logging_sources.add(_source(record.resource, record.scope_name))
            trace = self._trace(trace_id)
            entry = events.get((trace_id, span_id))
            if entry is None:
                entry = events[(trace_id, span_id)] = (trace, [], set())
            key = logs.record_key(record)
            if key not in trace.logged and key not in entry[2]:
                entry[1].append(event)
                entry[2].add(key)
        staged: dict[tuple[str, str], tuple[TraceState, SpanLogs, set[bytes]]] = {}
        deadline = self.clock() + self.hold_seconds
        for (trace_id, span_id), (trace, new, keys) in events.items():
            if not new:
                continue
            before = trace.logs.get(span_id)
            kept = logs.in_order([*(before.events if before is not None else ()), *new])
            final = (before is not None and before.final) or any(e.name in logs.FINAL_EVENTS for e in new)
            staged[(trace_id, span_id)] = (trace, SpanLogs(kept, prefix, deadline, final), keys)
        return staged

    def _write_logged(self, span: Span, kept: SpanLogs, batches: dict[str, Batch]) -> None:
        """The messages logged for ``span`` (all kept records: identities chain from the first)."""
        batch = self._batch(batches, self._conversation(span.trace_id, span.attributes, kept.prefix))
        batch.add(genai.logged_content(span, kept.events, batch, self._memo))

    def _emit_held(self, item: Held, batches: dict[str, Batch], *, final: bool) -> None:
        """Write a released agent (`_emit_agent`), tool span, or model call's end (its usage and
        error, after its logged messages: held under its own span id)."""
        if not item.waiting_for:
            self._emit_agent(item, batches, final=final)
            return
        span = item.span
        batch = self._batch(batches, self._conversation(span.trace_id, span.attributes, item.prefix))
        if item.waiting_for == span.span_id:
            batch.add(genai.call_end_events(span))
            return
        batch.add(genai.tool_events(span))
        batch.spans.append((span.trace_id, item.prefix + span.span_id))

    def _emit_agent(self, item: Held, batches: dict[str, Batch], *, final: bool) -> bool:
        """Write an agent span's run when its link is known (or ``final``: then it is linked to its
        parent's run id); else hold it until its missing ancestor arrives. True when written."""
        span = item.span
        trace = self._trace(span.trace_id)
        resolved, link, missing = link_of(trace, span)
        if not resolved and not final:
            assert missing is not None
            held = Held(span, item.prefix, item.deadline or self.clock() + self.hold_seconds)
            trace.held.setdefault(missing, []).append(held)
            return False
        if not resolved:
            link = genai.run_id(span.parent_span_id) if span.parent_span_id else None
        cid = self._conversation(
            span.trace_id, span.attributes, item.prefix
        )  # the trace may have learned its name
        batch = self._batch(batches, cid)
        batch.add(genai.agent_events(span, link))
        batch.spans.append((span.trace_id, item.prefix + span.span_id))
        return True

    def _restore(self, items: list[Held]) -> None:
        """Hold again agents whose writing failed (keyed by their own parent, which will come back
        with the client's retry, or by the deadline)."""
        for item in items:
            trace = self._trace(item.span.trace_id)
            if item.waiting_for:
                waiting = trace.tools_held.setdefault(item.waiting_for, [])
            else:
                waiting = trace.held.setdefault(item.span.parent_span_id or item.span.span_id, [])
            if item not in waiting:
                waiting.append(item)

    async def _release(self, due: Callable[[float], bool]) -> int:
        """Write held agents and kept records whose deadline is ``due``; records whose span is known
        were written already and are just dropped. Returns the agents and spans released."""
        async with self._lock:
            batches: dict[str, Batch] = {}
            released: list[Held] = []
            expired: list[tuple[TraceState, str, SpanLogs]] = []
            for trace_id, trace in self._traces.items():
                for table in (trace.held, trace.tools_held):
                    for key in list(table):
                        keep = [item for item in table[key] if not due(item.deadline)]
                        released.extend(item for item in table[key] if due(item.deadline))
                        if keep:
                            table[key] = keep
                        else:
                            del table[key]
                for span_id, kept in trace.logs.items():
                    if due(kept.deadline):
                        expired.append((trace, span_id, kept))
                        if span_id not in trace.spans:
                            self._write_logged(skeleton(trace_id, span_id, None, kept.events), kept, batches)
            for item in released:
                self._emit_held(item, batches, final=True)
            try:
                await self._store(batches, IngestReport())
            except BaseException:
                self._restore(released)
                raise
            for trace, span_id, kept in expired:
                if trace.logs.get(span_id) is kept:
                    del trace.logs[span_id]
        return len(released) + len(expired)

    def _batch(self, batches: dict[str, Batch], cid: str) -> Batch:
        batch = batches.get(cid)
        if batch is None:
            batch = batches[cid] = Batch(self._known(cid))
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

    async def _store(self, batches: dict[str, Batch], report: IngestReport) -> None:
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

        async def store(cid: str, batch: Batch) -> AppendResult:
            events = batch.events
            if self.blobs is not None:
                events = await asyncio.to_thread(
                    offload,
                    events,
                    cid,
                    self.blobs,
                    attribute_threshold=self.attribute_threshold,
                    content_threshold=self.content_threshold,
                )
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
            events = await asyncio.to_thread(rebase_blobs, events, new, self.blobs)
        result = await self.log.append(new, events)
        if self.on_stored is not None:
            self.on_stored(new, result)
        await self.log.delete(old)
        self._stored.pop(old, None)
        if self.on_deleted is not None:
            outcome = self.on_deleted(old)
            if asyncio.iscoroutine(outcome):
                await outcome


_MAX_SOURCES: Final = 4096


def _source(resource: dict[str, Any], scope: str) -> tuple[str, str]:
    return str(resource.get("service.name", "")), scope


def _without_seq(event: Event) -> Event:
    return msgspec.structs.replace(event, seq=None)
