"""The reducer's writes into a lineage's `_Store` (see `convograph.hypergraph.reducer` for the rules):
block keys, runs and their spawn links, messages and thread tips, blocks, and the per-type effects
run after a chunk is placed. O(1) amortised per call at the head of a lineage.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any, Final

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
)
from convograph.hypergraph.store import (
    EMPTY,
    MAIN_THREAD,
    PAGE,
    STREAM_RUN_ID,
    Diagnostic,
    _Block,
    _Message,
    _Run,
    _Spawn,
    _Store,
    _Thread,
    link_at,
)

__all__ = [
    "BLOCK_KEYS",
    "EFFECTS",
    "SPAWNING_KINDS",
    "add_block",
    "new_message",
    "new_run",
    "reopen",
    "set_tip",
    "start_block",
]


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


BLOCK_KEYS: Final[dict[type[Any], Callable[[Any], str]]] = {
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


EFFECTS: Final[dict[type[Any], Effect]] = {
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
