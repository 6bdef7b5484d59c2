"""The reducer's structural writes into a lineage's `_Store` (see `convograph.hypergraph.reducer` for
the rules): control events (``connected``, ``relay_resolved``), new runs and their spawn links,
messages and thread tips, new blocks. O(1) amortised per call at the head of a lineage.
"""

from __future__ import annotations

from array import array
from typing import Any, Final

from convograph.events.types import (
    Connected,
    Event,
    HarnessStart,
    Reasoning,
    RelayResolved,
    ReplOutput,
    Text,
    ToolResult,
    User,
)
from convograph.hypergraph.store import (
    MAIN_THREAD,
    PAGE,
    Diagnostic,
    RelayDecision,
    _Block,
    _Message,
    _Run,
    _Spawn,
    _Store,
    _Thread,
    link_at,
)

__all__ = [
    "SPAWNING_KINDS",
    "add_block",
    "apply_control",
    "new_message",
    "new_run",
    "reopen",
    "set_tip",
    "start_block",
    "tool_error_call",
]

SPAWNING_KINDS: Final = frozenset({"tool_call", "relay", "tool_progress", "repl_input"})
"""Block kinds whose id, named as a ``parentId``, starts a nested thread."""

_ANSWERS: Final = frozenset({"tool_result", "tool_error", "repl_progress", "repl_output"})
_TEXTUAL: Final = (Text, Reasoning)
_HEADED: Final = frozenset({"text", "reasoning"})
"""Block kinds that keep a head of their text (`_Block.head`)."""
_RESULTS: Final = (ToolResult, ReplOutput)


def reopen(s: _Store, run_id: str) -> None:
    """A run closed at a stream end sends again: give back the status it had."""
    previous = s.closed_runs.pop(run_id)
    if previous is None:
        s.status.delete(run_id, s.version + 1)
    else:
        s.status.set(run_id, previous, s.version + 1)


def apply_control(s: _Store, event: Event) -> bool:
    stamp = s.version + 1
    if isinstance(event, Connected):
        if event.session_id is None:
            return False
        s.meta.set("session_id", event.session_id, stamp)
        return True
    if isinstance(event, RelayResolved):
        decision = RelayDecision(
            relay_id=event.relay_id, approved=event.approved, reason=event.reason, tool=event.tool
        )
        if s.decisions.get_at(event.relay_id, s.version) == decision:
            return False
        s.decisions.set(event.relay_id, decision, stamp)
        if event.relay_id not in s.relay_block:
            s.diagnostics.append(
                Diagnostic(
                    code="unknown_relay",
                    subject=event.relay_id,
                    message=f"relay_resolved names relay {event.relay_id!r}, which has not arrived",
                ),
                stamp,
            )
        return True
    return False  # pragma: no cover - every event type is handled above


def tool_error_call(s: _Store, run_id: str, event: Any) -> str | None:
    """The tool call an ``error`` reports on, if it is a tool exception rather than a run failure:
    an explicit ``toolCallId`` extra field, else the run's newest unresolved tool call."""
    extra = event.extra
    if extra is not None:
        call_id = extra.get("toolCallId")
        if isinstance(call_id, str) and call_id in s.call_blocks:
            return call_id
    open_calls = s.outstanding.get(run_id)
    if open_calls:
        return open_calls[-1]
    return None


def new_run(s: _Store, run_id: str, event: Any) -> _Run:
    parent_id: str | None = event.parent_id
    stamp = s.version + 1
    thread_id = MAIN_THREAD
    spawn: _Spawn | None = None
    parent_run: str | None = None
    if parent_id is not None and parent_id != run_id:
        resolved = _resolve_parent(s, parent_id, run_id)
        if resolved is None:
            thread_id = run_id
            waiting = s.pending.setdefault(parent_id, [])
            waiting.append(run_id)
            s.unresolved.set(parent_id, tuple(waiting), stamp)
        else:
            thread_id, spawn, parent_run = resolved
    run = _Run(run_id, thread_id, parent_id)
    s.runs[run_id] = run
    thread = s.threads.get(thread_id)
    if thread is None:
        thread = s.threads[thread_id] = _Thread(thread_id)
    parent = s.runs.get(parent_run) if parent_run is not None else None
    run.epoch = parent.epoch if parent is not None and parent.thread == thread_id else thread.epoch
    if spawn is not None:
        _link(s, run_id, parent_run, spawn, stamp)
    if s.closed_runs and parent_run is not None:
        # a new child of a run closed at a stream end shows that run (and its ancestors) is alive
        seen: set[str] = set()
        while s.closed_runs and parent_run is not None and parent_run not in seen:
            seen.add(parent_run)
            if parent_run in s.closed_runs:
                reopen(s, parent_run)
            parent_run = link_at(s, parent_run, s.version)[0]
    return run


def _resolve_parent(s: _Store, parent_id: str, run_id: str) -> tuple[str, _Spawn, str | None] | None:
    """(thread, spawn, parent run) for a run whose parent is ``parent_id``, or None if unknown."""
    parent = s.runs.get(parent_id)
    if parent is not None and parent.last_block is not None:
        trigger = parent.last_block
        return parent.thread, _Spawn(trigger.index, run_id, "call"), parent_id
    index = s.key_latest.get(parent_id)
    if index is None:
        return None
    trigger = s.blocks[index]
    if trigger.kind in SPAWNING_KINDS:
        kind = "repl" if trigger.kind == "repl_input" else "subagent"
        return run_id, _Spawn(index, run_id, kind), trigger.run
    # A reply (e.g. an agent answering a user message) does not belong to the user's run: no
    # parent run, so it never inherits the user run's status.
    return s.runs[trigger.run].thread, _Spawn(index, run_id, "reply"), None


def _adopt(s: _Store, parent_id: str) -> None:
    """Link the runs that were waiting for ``parent_id`` (it just arrived)."""
    stamp = s.version + 1
    waiting = s.pending.pop(parent_id)
    s.unresolved.delete(parent_id, stamp)
    for child_id in waiting:
        resolved = _resolve_parent(s, parent_id, child_id)
        if resolved is None:  # pragma: no cover - parent_id just arrived
            continue
        _thread, spawn, parent_run = resolved
        _link(s, child_id, parent_run, spawn, stamp)


def _link(s: _Store, run_id: str, parent_run: str | None, spawn: _Spawn, stamp: int) -> None:
    """Record (once per run) that ``spawn`` started ``run_id``, part of ``parent_run``."""
    s.links[run_id] = (stamp, parent_run, spawn)
    s.spawn_lists.setdefault(spawn.trigger, []).append((stamp, spawn))
    # The run's first block: a run is linked when it starts, in the step that adds its first
    # block next (the block index about to be used), or later, when its parent arrives.
    blocks = s.runs[run_id].blocks
    s.spawn_triggers.append(spawn.trigger)
    s.spawn_first_blocks.append(blocks[0] if blocks else s.n_blocks)
    s.spawn_stamps.append(stamp)


def new_message(s: _Store, thread: _Thread, parent: _Message | None, role: str) -> _Message:
    """A new message in ``thread`` after ``parent``; it becomes the thread's tip."""
    index = s.n_messages
    thread.count += 1
    number = thread.count
    message_id = f"msg:{number}" if thread.id == MAIN_THREAD else f"msg:{thread.id}:{number}"
    if parent is None:
        message = _Message(index, message_id, thread.id, role, -1, 0)
    else:
        message = _Message(index, message_id, thread.id, role, parent.index, parent.depth + 1)
        parent.children.append(index)
        if len(parent.children) > 1:
            s.chosen.set(parent.index, index, s.version + 1)
    s.messages.append(message)
    s.n_messages = index + 1
    s.message_ids[message_id] = index
    thread.messages.append(index)
    set_tip(s, thread, message)
    return message


def set_tip(s: _Store, thread: _Thread, message: _Message) -> None:
    thread.tip = message
    s.tips.set(thread.id, message.index, s.version + 1)


def _place(s: _Store, run: _Run, cls: type[Any], thread: _Thread) -> _Message:
    """The message a new block of ``run`` joins (see the module docstring, step 6)."""
    if cls is User:
        thread.open = None
        thread.after_result = False
        return new_message(s, thread, thread.tip, "user")
    if run.epoch != thread.epoch and cls is not HarnessStart:
        # The run started before an edit / regenerate / switch moved the tip: it keeps writing on
        # its own branch, never into the new one.
        home = run.last_message
        if home is None:
            link = s.links.get(run.id)
            parent = s.runs.get(link[1]) if link is not None and link[1] is not None else None
            home = parent.last_message if parent is not None else None
        if home is not None:
            return home
    if run.ended and run.last_message is not None and cls is not HarnessStart:
        return run.last_message  # a late block (e.g. usage after harness_end) of an ended run
    message = thread.open
    if message is None:
        message = new_message(s, thread, thread.tip, "assistant")
        thread.open = message
        thread.after_result = False
    elif thread.after_result and cls in _TEXTUAL:
        message = new_message(s, thread, message, "assistant")
        thread.open = message
    if cls in _TEXTUAL:
        thread.after_result = False
    return message


def add_block(
    s: _Store, run: _Run, key: str, kind: str, event: Event, index: int, message: _Message
) -> _Block:
    """Append chunk ``index`` holding ``event`` as the first chunk of a new block in ``message``."""
    key_count = s.key_count
    count = key_count.get(key, 0) + 1
    key_count[key] = count
    block_id = f"block:{key}" if count == 1 else f"block:{key}#{count}"
    block_index = s.n_blocks
    chunks = array("q", (index,))
    head: str | None = event.content if kind in _HEADED else None  # type: ignore[union-attr,assignment]
    block = _Block(block_index, block_id, key, kind, run.id, message.index, chunks, head)
    # the block record and its columns, in pages sealed together (`model.Paged`, inlined)
    tail = s.blocks.tail
    tail.append(block)
    s.block_names.tail.append(block_id)
    s.block_kinds.tail.append(kind)
    s.block_runs.tail.append(run.id)
    if len(tail) == PAGE:
        s.blocks.seal()
        s.block_names.seal()
        s.block_kinds.seal()
        s.block_runs.seal()
    s.n_blocks = block_index + 1
    s.block_ids[block_id] = block_index
    s.block_first_chunks.append(index)
    run_blocks = run.blocks
    s.block_run_previous.append(run_blocks[-1] if run_blocks else -1)
    s.events.append(event)
    s.chunk_block.append(block_index)
    s.n_chunks = index + 1
    if run.first_chunk < 0:
        run.first_chunk = index
    run_blocks.append(block_index)
    own_id = getattr(event, "id", None)
    run.last_key = key
    run.last_id = own_id
    run.last_cls = type(event)
    run.last_block = block
    run.last_message = message
    message.blocks.append(block_index)
    key_latest = s.key_latest
    key_latest[key] = block_index
    # An event's own id names its block; results and REPL progress/output reuse the id of the call
    # or input they answer, so they must not take it over.
    event_id = None if kind in _ANSWERS else own_id
    if event_id is not None and event_id != key:
        key_latest[event_id] = block_index
    if s.pending:  # runs waiting for this block (or this run) as their parent
        if key in s.pending:
            _adopt(s, key)
        if event_id is not None and event_id in s.pending:
            _adopt(s, event_id)
        if len(run.blocks) == 1 and run.id in s.pending:
            _adopt(s, run.id)
    return block


def start_block(
    s: _Store, run: _Run, key: str, cls: type[Any], event: Any, index: int, tool_error: str | None
) -> _Block:
    thread = s.threads[run.thread]
    message = _place(s, run, cls, thread)
    kind = "tool_error" if tool_error is not None else event.type
    block = add_block(s, run, key, kind, event, index, message)
    if (cls in _RESULTS or tool_error is not None) and message is thread.open:
        thread.after_result = True
    return block
