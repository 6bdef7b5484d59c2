"""The conversation reducer: wire events -> chunks, blocks, messages, spawns, run state.

Per event (all O(1) amortised at the head of a lineage; docs/hypergraph.md has the full rules):

1. Duplicate ``eventId`` -> no-op (the same `Conversation` is returned).
2. ``connected`` records the session id; ``relay_resolved`` records the decision. No chunk.
3. Every other event becomes chunk ``chunk:<n>`` (``n`` = global arrival number).
4. Block key as upstream (``<runId>:<id>`` for text/reasoning, ``<id>`` for tool_call / relay /
   repl_input, ``<id>:result``, ``<id>:progress``, ``<id>:output``, ``<runId>:<type>``), except
   tool_progress joins ``<toolCallId>:progress`` and a tool exception joins ``<callId>:result``. The
   chunk joins the run's last block when key and event type match, else opens a new block whose id is
   ``block:<key>``, or ``block:<key>#<k>`` for the k-th reuse of a key: ids never collide.
5. A run's first event resolves ``parentId``: a run id -> same thread (a provider ``call``, threaded
   after the parent's current last block); a tool_call / relay / tool_progress / repl_input block ->
   a nested thread (``subagent`` / ``repl``); any other block -> the same thread (``reply``). An
   unknown parent makes the run a provisional nested thread, listed in `unresolved_parents` until
   the parent arrives and links it.
6. A new block joins its thread's open message in **arrival order**. A ``user`` block is a message
   of its own at the thread's tip. A text/reasoning block after a tool result / repl_output opens the
   next message; ``harness_end`` closes the open message; a block of an ended run rejoins that run's
   last message; a run that started before an operation moved the tip (an older thread epoch)
   keeps writing into its own last message.
7. Run status: ``harness_start`` -> streaming, ``harness_end`` -> complete (unless an error came
   first and the end's ``reason`` is not ``"final"``), a run-level ``error`` -> error. Lifecycle-less
   runs inherit from their nearest ancestor. An ``error`` while the run has an unresolved tool call
   is that call's result (a tool exception), not a run failure.

The per-event path (entry points, block keys, event application, per-type effects) is here, in
one module; the writes a new run, block or message makes, and the control events, are in `writer`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from convograph.events import codec
from convograph.events.types import (
    Error,
    Event,
    HarnessEnd,
    HarnessStart,
    Reasoning,
    Relay,
    ReplInput,
    ReplOutput,
    ReplProgress,
    Text,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
    User,
    _Event,
)
from convograph.hypergraph.model import Conversation, snapshot_of
from convograph.hypergraph.store import (
    BLOCK_HEAD,
    EMPTY,
    PAGE,
    STREAM_RUN_ID,
    Diagnostic,
    _Block,
    _Run,
    _Store,
)
from convograph.hypergraph.writer import apply_control, new_run, reopen, start_block, tool_error_call

__all__ = [
    "EventLike",
    "apply_entry",
    "commit",
    "reduce_conversation",
    "reduce_conversation_events",
]

EventLike = Event | Mapping[str, Any] | str | bytes


def _as_event(event: EventLike) -> Event:
    if isinstance(event, _Event):
        return event
    return codec.parse_event(event)


def reduce_conversation(conversation: Conversation, event: EventLike) -> Conversation:
    """Apply one event; return the new conversation (``conversation`` itself for a duplicate).

    ``event`` may be an `Event` or its wire form (mapping, str, bytes); invalid input raises
    `convograph.EventError` and changes nothing. The input is never changed.
    """
    if not isinstance(event, _Event):
        event = codec.parse_event(event)
    store = conversation._store
    event_id = event.event_id
    # The body of `commit`, inlined: this is the hot path.
    with store.lock:
        if store.version != conversation._version or store.broken:
            if event_id is not None:
                seen_at = store.seen.get(event_id)
                if seen_at is not None and seen_at <= conversation._version:
                    return conversation
            store = replay(store, conversation._version)
        version = store.version + 1
        # One probe for "seen?" and "mark seen" (at the head every recorded id is visible).
        if event_id is not None and store.seen.setdefault(event_id, version) != version:
            return conversation
        try:
            changed = _apply_event(store, event)
        except BaseException:
            store.broken = True
            raise
        if not changed:
            if event_id is not None:
                del store.seen[event_id]
            return conversation
        store.version = version
        log = store.log.tail
        log.append(event)
        if len(log) == PAGE:
            store.log.seal()
        return Conversation(
            store, version, store.n_chunks, store.n_blocks, store.n_messages, conversation.view
        )


def reduce_conversation_events(conversation: Conversation, events: Iterable[EventLike]) -> Conversation:
    """Apply events in order. The batch is validated whole first: one bad event applies none.

    Same result as reducing one by one (each event is still its own version of the lineage), but
    at the head of a lineage the batch is applied under one lock and only the final
    `Conversation` is built: the ingest / replay path.
    """
    parsed: list[Event] = []
    for index, event in enumerate(events):
        try:
            parsed.append(_as_event(event))
        except codec.EventError as exc:
            if exc.index is None:
                exc.index = index
                exc.args = (exc._render(),)
            raise
    index = 0
    while index < len(parsed) and not _at_head(conversation):  # fork (once), then batch the rest
        conversation = reduce_conversation(conversation, parsed[index])
        index += 1
    if index == len(parsed):
        return conversation
    store = conversation._store
    with store.lock:
        if _at_head(conversation):
            seen = store.seen
            log = store.log
            start = store.version
            for event in parsed[index:]:
                version = store.version + 1
                event_id = event.event_id
                if event_id is not None and seen.setdefault(event_id, version) != version:
                    continue
                try:
                    changed = _apply_event(store, event)
                except BaseException:
                    store.broken = True
                    raise
                if not changed:
                    if event_id is not None:
                        del seen[event_id]
                    continue
                store.version = version
                log.append(event)
            if store.version == start:
                return conversation
            return Conversation(
                store, store.version, store.n_chunks, store.n_blocks, store.n_messages, conversation.view
            )
    # Another thread extended this lineage meanwhile: one by one (each forks as needed), outside
    # the lock, which is not reentrant.
    for event in parsed[index:]:
        conversation = reduce_conversation(conversation, event)
    return conversation


def _at_head(conversation: Conversation) -> bool:
    store = conversation._store
    return store.version == conversation._version and not store.broken


# --- lineage machinery -----------------------------------------------------------------------------


def commit(conversation: Conversation, entry: Any) -> Conversation:
    """Apply one log entry (an `Event` or an operation) on top of ``conversation``.

    At the head of its lineage this is in place (O(1) + the entry's own cost); otherwise the log
    prefix is replayed into a new lineage first (O(n) once).
    """
    store = conversation._store
    with store.lock:
        if store.version != conversation._version or store.broken:
            store = replay(store, conversation._version)
        try:
            changed = apply_entry(store, entry)
        except BaseException:
            store.broken = True
            raise
        if not changed:
            return conversation
        store.version += 1
        store.log.append(entry)
        if isinstance(entry, _Event) and entry.event_id is not None:
            store.seen[entry.event_id] = store.version
        return snapshot_of(store, conversation.view)


def replay(store: _Store, version: int) -> _Store:
    """A new lineage holding exactly the first ``version`` log entries of ``store``. O(version)."""
    fresh = _Store()
    for entry in store.log.head(version):
        if apply_entry(fresh, entry):
            fresh.version += 1
            fresh.log.append(entry)
            if isinstance(entry, _Event) and entry.event_id is not None:
                fresh.seen[entry.event_id] = fresh.version
    return fresh


def apply_entry(store: _Store, entry: Any) -> bool:
    """Apply one entry with stamp ``store.version + 1``; False when nothing changes."""
    if isinstance(entry, _Event):
        return _apply_event(store, entry)
    changed: bool = entry.apply(store)
    return changed


# --- block keys -------------------------------------------------------------------------------------


def _key_run_id(event: Any) -> str:
    return f"{event.run_id}:{event.id}"


def _key_id(event: Any) -> str:
    key: str = event.id
    return key


def _key_result(event: Any) -> str:
    return f"{event.id}:result"


def _key_tool_progress(event: Any) -> str:
    return f"{event.tool_call_id}:progress"


def _key_repl_progress(event: Any) -> str:
    return f"{event.id}:progress"


def _key_repl_output(event: Any) -> str:
    return f"{event.id}:output"


def _key_lifecycle(event: Any) -> str:
    run_id = event.run_id if event.run_id is not None else STREAM_RUN_ID
    return f"{run_id}:{event.type}"


_KEYS: Final[dict[type[Any], Callable[[Any], str]]] = {
    Text: _key_run_id,
    Reasoning: _key_run_id,
    ToolCall: _key_id,
    Relay: _key_id,
    ReplInput: _key_id,
    ToolProgress: _key_tool_progress,
    ToolResult: _key_result,
    ReplProgress: _key_repl_progress,
    ReplOutput: _key_repl_output,
    HarnessStart: _key_lifecycle,
    HarnessEnd: _key_lifecycle,
    Error: _key_lifecycle,
    Usage: _key_lifecycle,
    User: _key_lifecycle,
}


# --- event application -----------------------------------------------------------------------------


def _apply_event(s: _Store, event: Any) -> bool:
    cls = type(event)
    tool_error: str | None = None
    if cls is Text or cls is Reasoning:  # the hot path: streamed deltas
        run_id: str = event.run_id
        run = s.runs.get(run_id)
        if (
            run is not None
            and run.last_cls is cls
            and run.last_id == event.id
            and not s.closed
            and not (s.closed_runs and run_id in s.closed_runs)
        ):  # another delta of the run's open text/reasoning block: no key to build
            open_block: _Block = run.last_block  # type: ignore[assignment]
            index = s.n_chunks
            tail = s.events.tail
            tail.append(event)
            if len(tail) == PAGE:
                s.events.seal()
            s.chunk_block.append(open_block.index)
            open_block.chunks.append(index)  # (before the head: see `_Block.head`)
            s.n_chunks = index + 1
            head = open_block.head
            if head is not None and len(head) < BLOCK_HEAD:
                text = head + event.content
                open_block.head = text if len(text) <= BLOCK_HEAD else text[:BLOCK_HEAD]
            return True
        key = f"{run_id}:{event.id}"
    else:
        key_of = _KEYS.get(cls)
        if key_of is None:
            return apply_control(s, event)
        run_id = event.run_id if event.run_id is not None else STREAM_RUN_ID
        if cls is Error:
            tool_error = tool_error_call(s, run_id, event)
            key = f"{tool_error}:result" if tool_error is not None else key_of(event)
        else:
            key = key_of(event)
    if s.closed:
        s.closed = False
        s.meta.set("closed", False, s.version + 1)
    if s.closed_runs and run_id in s.closed_runs:
        reopen(s, run_id)
    run = s.runs.get(run_id)
    index = s.n_chunks
    if run is not None and run.last_key == key and run.last_cls is cls and cls is not User:
        block: _Block = run.last_block  # type: ignore[assignment]  # extend the run's block
        tail = s.events.tail
        tail.append(event)
        if len(tail) == PAGE:
            s.events.seal()
        s.chunk_block.append(block.index)
        block.chunks.append(index)  # (before the head: see `_Block.head`)
        s.n_chunks = index + 1
        head = block.head
        if head is not None and len(head) < BLOCK_HEAD:
            text = head + event.content
            block.head = text if len(text) <= BLOCK_HEAD else text[:BLOCK_HEAD]
        new_block = False
    else:
        if run is None:
            run = new_run(s, run_id, event)
        block = start_block(s, run, key, cls, event, index, tool_error)
        new_block = True
    if cls is not Text and cls is not Reasoning:
        effect = _EFFECTS.get(cls)
        if effect is not None:
            effect(s, run, block, event, index, new_block, tool_error)
    return True


# --- per-type effects (run after the chunk is placed) ------------------------------------------------

Effect = Callable[[_Store, _Run, _Block, Any, int, bool, "str | None"], None]


def _on_harness_start(
    s: _Store, run: _Run, block: _Block, event: Any, index: int, new: bool, tool_error: str | None
) -> None:
    run.ended = False
    if s.status.get_at(run.id, s.version) != "streaming":
        s.status.set(run.id, "streaming", s.version + 1)


def _on_harness_end(
    s: _Store, run: _Run, block: _Block, event: Any, index: int, new: bool, tool_error: str | None
) -> None:
    run.ended = True
    current = s.status.get_at(run.id, s.version)
    # An error before the end fails the run, unless the run itself reports it finished normally
    # (``reason: "final"``: an RLM recovered from e.g. a code-extraction error).
    if current != "complete" and (current != "error" or event.reason == "final"):
        s.status.set(run.id, "complete", s.version + 1)
    thread = s.threads[run.thread]
    if thread.open is not None and thread.open.index == block.message:
        thread.open = None


def _on_error(
    s: _Store, run: _Run, block: _Block, event: Any, index: int, new: bool, tool_error: str | None
) -> None:
    if tool_error is not None:
        _record_result(s, run, tool_error, block, new)
        return
    if s.status.get_at(run.id, s.version) != "error":
        s.status.set(run.id, "error", s.version + 1)


def _on_usage(
    s: _Store, run: _Run, block: _Block, event: Any, index: int, new: bool, tool_error: str | None
) -> None:
    sums = s.usage_sums
    i, o, r, c = sums[-1] if sums else (0, 0, 0, 0)
    sums.append(
        (
            i + event.input_tokens,
            o + event.output_tokens,
            r + (event.cache_read_tokens or 0),
            c + (event.cache_creation_tokens or 0),
        )
    )
    s.usage_chunks.append(index)
    s.run_usage.setdefault(run.id, array("q")).append(index)


def _on_tool_call(
    s: _Store, run: _Run, block: _Block, event: Any, index: int, new: bool, tool_error: str | None
) -> None:
    if not new:
        return
    call_id: str = event.id
    calls = s.call_blocks.setdefault(call_id, array("q"))
    calls.append(block.index)
    if len(s.result_blocks.get(call_id, EMPTY)) < len(calls):  # not answered before it arrived
        s.outstanding.setdefault(run.id, []).append(call_id)


def _record_result(s: _Store, run: _Run, call_id: str, block: _Block, new: bool) -> None:
    if not new:
        return
    results = s.result_blocks.setdefault(call_id, array("q"))
    results.append(block.index)
    if len(results) > max(1, len(s.call_blocks.get(call_id, EMPTY))):
        s.diagnostics.append(
            Diagnostic(
                code="duplicate_result",
                subject=call_id,
                message=f"tool call {call_id!r} already has a result; {block.id} is kept as a second one",
            ),
            s.version + 1,
        )
        return
    open_calls = s.outstanding.get(run.id)
    if open_calls and call_id in open_calls:
        open_calls.remove(call_id)


def _on_tool_result(
    s: _Store, run: _Run, block: _Block, event: Any, index: int, new: bool, tool_error: str | None
) -> None:
    _record_result(s, run, event.id, block, new)


def _on_tool_progress(
    s: _Store, run: _Run, block: _Block, event: Any, index: int, new: bool, tool_error: str | None
) -> None:
    s.progress.setdefault(event.tool_call_id, array("q")).append(index)


def _on_relay(
    s: _Store, run: _Run, block: _Block, event: Any, index: int, new: bool, tool_error: str | None
) -> None:
    if not new or event.id in s.relay_block:
        return
    s.relay_block[event.id] = block.index
    s.relays.append(block.index)
    s.relays_by_call.setdefault(event.tool_call_id, array("q")).append(block.index)


def _on_user(
    s: _Store, run: _Run, block: _Block, event: Any, index: int, new: bool, tool_error: str | None
) -> None:
    if s.status.get_at(run.id, s.version) is None:
        s.status.set(run.id, "complete", s.version + 1)


_EFFECTS: Final[dict[type[Any], Effect]] = {
    HarnessStart: _on_harness_start,
    HarnessEnd: _on_harness_end,
    Error: _on_error,
    Usage: _on_usage,
    ToolCall: _on_tool_call,
    ToolResult: _on_tool_result,
    ToolProgress: _on_tool_progress,
    Relay: _on_relay,
    User: _on_user,
}
