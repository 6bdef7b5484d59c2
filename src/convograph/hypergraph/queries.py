"""Typed read queries over one `Conversation` version, for projections and tools.

Every function reads one version (older versions answer as they did) and costs O(answer size) plus
O(log n) lookups unless stated; none scans the whole conversation except the ``iter_*`` helpers.

Ids: chunks ``chunk:<n>`` (``n`` = global arrival number, also ``Chunk.seq``), blocks
``block:<key>`` / ``block:<key>#<k>``, messages ``msg:<n>`` (main thread) / ``msg:<thread>:<n>``,
summaries ``summary:<n>``. Unknown ids (or ids that do not exist yet at this version) raise
``KeyError`` naming the id.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, compress, islice
from typing import Any, Final, Literal, NamedTuple, Protocol

import msgspec

from convograph.events.types import Error, Event, Relay, ToolCall, ToolResult
from convograph.hypergraph.model import (
    EMPTY,
    MAIN_THREAD,
    Conversation,
    Diagnostic,
    Ints,
    Paged,
    RelayDecision,
    RunStatus,
    SummaryInfo,
    UsageTotals,
    _Block,
    _Message,
    _Run,
    _Spawn,
    link_at,
    prefix,
    spawns_at,
)

__all__ = [
    "Block",
    "BlockColumns",
    "BlockRef",
    "BlockRow",
    "BlockTable",
    "Chunk",
    "ChunkColumns",
    "FeedColumns",
    "Message",
    "MessageHealth",
    "RelayInfo",
    "RunEventTable",
    "RunInfo",
    "ShownPaths",
    "SpawnInfo",
    "SummaryRow",
    "ToolCallInfo",
    "block_of",
    "block_rows",
    "block_text",
    "blocks_of",
    "child_runs",
    "children_of",
    "chunk_columns",
    "chunk_event",
    "chunk_message",
    "chunk_seqs",
    "chunks_of",
    "diagnostics",
    "get_block",
    "get_chunk",
    "get_message",
    "is_stream_closed",
    "iter_blocks",
    "iter_chunks",
    "iter_messages",
    "joined_text",
    "message_health",
    "message_of",
    "own_run_statuses",
    "parent_of",
    "pending_relays",
    "relay_info",
    "relays",
    "run_blocks",
    "run_chunks",
    "run_event_table",
    "run_ids",
    "run_info",
    "run_parents",
    "run_status",
    "run_thread",
    "run_threads",
    "runs_of_only_thread",
    "session_id",
    "shown_paths",
    "siblings_of",
    "sources_of",
    "spawn_of",
    "spawn_row",
    "spawns_from",
    "summaries_of",
    "thread_ids",
    "thread_messages",
    "tool_call",
    "tool_call_for_block",
    "unresolved_parents",
    "usage_totals",
    "visible_blocks",
    "visible_spawns",
]


# --- records ----------------------------------------------------------------------------------------


class Chunk(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One event as stored. ``seq`` is the global arrival number (1-based) in this conversation."""

    id: str
    seq: int
    kind: str
    run_id: str
    block_id: str
    event: Event


class Block(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Consecutive chunks of one run with one block key. ``kind`` is the first chunk's event type,
    or ``"tool_error"`` for a tool exception reported as an ``error`` event."""

    id: str
    key: str
    kind: str
    run_id: str
    message_id: str
    chunk_ids: tuple[str, ...]
    first_seq: int
    last_seq: int


class Message(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One turn of one thread. ``role`` is ``user``, ``assistant`` or ``summary``; ``parent_id`` is
    the previous message on its branch (``None`` for the first)."""

    id: str
    thread_id: str
    role: str
    parent_id: str | None
    depth: int
    block_ids: tuple[str, ...]
    summary: SummaryInfo | None = None


class SpawnInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A ``spawn`` hyperedge: ``trigger_block_id`` started ``run_id``, whose first chunk is
    ``invocation_chunk_id``. ``thread_id`` is where the spawned run's messages live: the trigger's
    own thread for ``call``/``reply`` spawns (inline), a nested thread for ``subagent``/``repl``
    spawns and for runs whose parent arrived after them (render those as branches)."""

    id: str
    kind: str
    trigger_block_id: str
    trigger_run_id: str
    run_id: str
    invocation_chunk_id: str
    thread_id: str


class RunInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    id: str
    thread_id: str
    parent_id: str | None
    """``parentId`` as sent on the run's first event."""
    parent_run_id: str | None
    """The run this run belongs to (``call``) or was spawned by (``subagent``/``repl``)."""
    status: RunStatus
    has_lifecycle: bool
    spawn: SpawnInfo | None
    first_seq: int
    agent_id: str | None


class ToolCallInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A tool call with everything attached to it, whichever order it arrived in.

    ``status``: ``pending`` (no result yet), ``complete``, ``error`` (an ``error`` output or a tool
    exception) or ``denied`` (the relay was refused). ``synthesized`` is True when no ``tool_call``
    event arrived (a denied call): ``name``/``input`` then come from the relay or the result.
    """

    call_id: str
    name: str
    input: Any
    status: Literal["pending", "complete", "error", "denied"]
    synthesized: bool
    run_id: str
    call_block_id: str | None
    result_block_id: str | None
    output: Any = None
    error: str | None = None
    relay_id: str | None = None
    progress_chunk_ids: tuple[str, ...] = ()


class RelayInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A permission relay. ``status``: ``pending``, ``approved``, ``denied``, or ``resolved`` (the
    call went ahead or got a result without a recorded decision)."""

    relay_id: str
    tool_call_id: str
    tool: str
    params: dict[str, Any]
    run_id: str
    block_id: str
    status: Literal["pending", "approved", "denied", "resolved"]
    decision: RelayDecision | None


class MessageHealth(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Whether a branch may start after this message (``clean``): no run-level error, no errored
    or aborted run, and no tool call without a result."""

    status: RunStatus
    unresolved_call_ids: tuple[str, ...]
    has_error: bool

    @property
    def clean(self) -> bool:
        return not self.has_error and not self.unresolved_call_ids and self.status not in ("error", "aborted")


# --- id helpers -------------------------------------------------------------------------------------


def chunk_id(index: int) -> str:
    return f"chunk:{index + 1}"


def _chunk_index(conv: Conversation, cid: str) -> int:
    if cid.startswith("chunk:"):
        try:
            index = int(cid[6:]) - 1
        except ValueError:
            index = -1
        if 0 <= index < conv._n_chunks:
            return index
    raise KeyError(f"no chunk {cid!r} in this conversation version")


def _block(conv: Conversation, block_id: str) -> _Block:
    index = conv._store.block_ids.get(block_id)
    if index is None or index >= conv._n_blocks:
        raise KeyError(f"no block {block_id!r} in this conversation version")
    return conv._store.blocks[index]


def _message(conv: Conversation, message_id: str) -> _Message:
    index = conv._store.message_ids.get(message_id)
    if index is None or index >= conv._n_messages:
        raise KeyError(f"no message {message_id!r} in this conversation version")
    return conv._store.messages[index]


def _chunk_record(conv: Conversation, index: int) -> Chunk:
    s = conv._store
    event = s.events[index]
    block = s.blocks[s.chunk_block[index]]
    return Chunk(
        id=chunk_id(index), seq=index + 1, kind=event.type, run_id=block.run, block_id=block.id, event=event
    )


def _block_record(conv: Conversation, block: _Block) -> Block:
    chunks = prefix(block.chunks, conv._n_chunks)
    return Block(
        id=block.id,
        key=block.key,
        kind=block.kind,
        run_id=block.run,
        message_id=conv._store.messages[block.message].id,
        chunk_ids=tuple(chunk_id(i) for i in chunks),
        first_seq=chunks[0] + 1,
        last_seq=chunks[-1] + 1,
    )


def _message_record(conv: Conversation, message: _Message) -> Message:
    s = conv._store
    return Message(
        id=message.id,
        thread_id=message.thread,
        role=message.role,
        parent_id=s.messages[message.parent].id if message.parent >= 0 else None,
        depth=message.depth,
        block_ids=tuple(s.blocks[i].id for i in prefix(message.blocks, conv._n_blocks)),
        summary=message.summary[1] if message.summary is not None else None,
    )


# --- tiers ------------------------------------------------------------------------------------------


def get_chunk(conv: Conversation, cid: str) -> Chunk:
    return _chunk_record(conv, _chunk_index(conv, cid))


def chunk_message(conv: Conversation, seq: int) -> tuple[str, str, str | None]:
    """``(message id, thread id, parent message id or None)`` of the chunk with arrival number
    ``seq``. O(1): no record (`get_block` and `get_message` list a block's chunk ids and a
    message's block ids, O(their size): per chunk of a long stream that was quadratic)."""
    s = conv._store
    if not 0 < seq <= conv._n_chunks:
        raise KeyError(f"no chunk {chunk_id(seq - 1)!r} in this conversation version")
    message = s.messages[s.blocks[s.chunk_block[seq - 1]].message]
    parent = s.messages[message.parent].id if message.parent >= 0 else None
    return message.id, message.thread, parent


def get_block(conv: Conversation, block_id: str) -> Block:
    return _block_record(conv, _block(conv, block_id))


def get_message(conv: Conversation, message_id: str) -> Message:
    return _message_record(conv, _message(conv, message_id))


def chunks_of(conv: Conversation, block_id: str) -> tuple[Chunk, ...]:
    """The block's chunks in arrival order."""
    block = _block(conv, block_id)
    return tuple(_chunk_record(conv, i) for i in prefix(block.chunks, conv._n_chunks))


def blocks_of(conv: Conversation, message_id: str) -> tuple[Block, ...]:
    """The message's blocks in arrival order (a summary has one block holding its text)."""
    message = _message(conv, message_id)
    blocks = conv._store.blocks
    return tuple(_block_record(conv, blocks[i]) for i in prefix(message.blocks, conv._n_blocks))


class BlockRow(NamedTuple):
    """A block as plain values, for bulk readers (one-shot projections): no record, no chunk id
    strings. ``first_seq`` is the arrival number of its first chunk; ``chunk_count`` how many it has."""

    id: str
    kind: str
    run_id: str
    first_seq: int
    chunk_count: int


def block_rows(conv: Conversation, message_id: str) -> tuple[BlockRow, ...]:
    """`blocks_of` as `BlockRow`s (same blocks, same order). O(blocks of the message)."""
    message = _message(conv, message_id)
    blocks = conv._store.blocks
    n_chunks = conv._n_chunks
    out: list[BlockRow] = []
    for i in prefix(message.blocks, conv._n_blocks):
        block = blocks[i]
        chunks = prefix(block.chunks, n_chunks)
        out.append(BlockRow(block.id, block.kind, block.run, chunks[0] + 1, len(chunks)))
    return tuple(out)


def chunk_seqs(conv: Conversation, block_id: str) -> tuple[int, ...]:
    """The arrival numbers (``Chunk.seq``) of the block's chunks, in order. O(chunks of the block)."""
    block = _block(conv, block_id)
    return tuple(i + 1 for i in prefix(block.chunks, conv._n_chunks))


def chunk_event(conv: Conversation, seq: int) -> Any:
    """The event of the chunk with arrival number ``seq`` (``get_chunk(conv, chunk_id(seq - 1)).event``)
    without building the record. O(1)."""
    index = seq - 1
    if not 0 <= index < conv._n_chunks:
        raise KeyError(f"no chunk with seq {seq} in this conversation version")
    return conv._store.events[index]


def block_text(conv: Conversation, block_id: str) -> str:
    """The joined ``content`` of a text, reasoning or summary block (``""`` for other kinds), or the
    joined ``chunk`` of a repl_progress block. O(chunks of the block)."""
    block = _block(conv, block_id)
    events: list[Any] = [conv._store.events[i] for i in prefix(block.chunks, conv._n_chunks)]
    if block.kind in ("text", "reasoning", "summary"):
        return "".join(e.content for e in events)
    if block.kind == "repl_progress":
        return "".join(e.chunk for e in events)
    return ""


def block_of(conv: Conversation, cid: str) -> Block:
    s = conv._store
    return _block_record(conv, s.blocks[s.chunk_block[_chunk_index(conv, cid)]])


def message_of(conv: Conversation, block_id: str) -> Message:
    return _message_record(conv, conv._store.messages[_block(conv, block_id).message])


def parent_of(conv: Conversation, message_id: str) -> Message | None:
    message = _message(conv, message_id)
    if message.parent < 0:
        return None
    return _message_record(conv, conv._store.messages[message.parent])


def children_of(conv: Conversation, message_id: str) -> tuple[Message, ...]:
    """Messages that continue ``message_id`` (more than one = a branch point), oldest first."""
    message = _message(conv, message_id)
    messages = conv._store.messages
    return tuple(_message_record(conv, messages[i]) for i in prefix(message.children, conv._n_messages))


def siblings_of(conv: Conversation, message_id: str) -> tuple[Message, ...]:
    """Every alternative at ``message_id``'s position (itself included), oldest first. Roots of a
    thread are siblings of each other."""
    message = _message(conv, message_id)
    s = conv._store
    if message.role == "summary":
        return (_message_record(conv, message),)
    indexes: Sequence[int]
    if message.parent >= 0:
        indexes = prefix(s.messages[message.parent].children, conv._n_messages)
    else:
        thread = s.threads[message.thread]
        indexes = [
            i
            for i in prefix(thread.messages, conv._n_messages)
            if s.messages[i].parent < 0 and s.messages[i].role != "summary"
        ]
    return tuple(_message_record(conv, s.messages[i]) for i in indexes)


def sources_of(conv: Conversation, summary_id: str) -> tuple[Message, ...]:
    """The messages a summary replaces ([] for a non-summary)."""
    message = _message(conv, summary_id)
    if message.summary is None:
        return ()
    messages = conv._store.messages
    return tuple(_message_record(conv, messages[i]) for i in message.summary[0])


def summaries_of(conv: Conversation, message_id: str) -> tuple[Message, ...]:
    """Every summary that lists ``message_id`` among its sources, oldest first."""
    message = _message(conv, message_id)
    s = conv._store
    found = prefix(s.summaries_of.get(message.index, EMPTY), conv._n_messages)
    return tuple(_message_record(conv, s.messages[i]) for i in found)


def thread_ids(conv: Conversation) -> tuple[str, ...]:
    """Threads that have messages at this version, ``"main"`` first. O(threads)."""
    s = conv._store
    out = [
        t.id
        for t in tuple(s.threads.values())
        if t.messages and t.messages[0] < conv._n_messages and t.id != MAIN_THREAD
    ]
    main = s.threads.get(MAIN_THREAD)
    if main is not None and main.messages and main.messages[0] < conv._n_messages:
        out.insert(0, MAIN_THREAD)
    return tuple(out)


def thread_messages(conv: Conversation, thread_id: str) -> tuple[Message, ...]:
    """Every message of a thread (all branches, summaries included) in creation order."""
    thread = conv._store.threads.get(thread_id)
    if thread is None:
        return ()
    messages = conv._store.messages
    return tuple(_message_record(conv, messages[i]) for i in prefix(thread.messages, conv._n_messages))


def iter_chunks(conv: Conversation) -> Iterator[Chunk]:
    """All chunks in arrival order. O(n)."""
    for i in range(conv._n_chunks):
        yield _chunk_record(conv, i)


def iter_blocks(conv: Conversation) -> Iterator[Block]:
    """All blocks in creation order. O(n)."""
    blocks = conv._store.blocks
    for i in range(conv._n_blocks):
        yield _block_record(conv, blocks[i])


def iter_messages(conv: Conversation) -> Iterator[Message]:
    """All messages in creation order. O(n)."""
    messages = conv._store.messages
    for i in range(conv._n_messages):
        yield _message_record(conv, messages[i])


# --- runs -------------------------------------------------------------------------------------------


def run_ids(conv: Conversation) -> tuple[str, ...]:
    """Runs in order of first arrival. O(runs)."""
    n = conv._n_chunks
    return tuple(r.id for r in tuple(conv._store.runs.values()) if 0 <= r.first_chunk < n)


def _run(conv: Conversation, run_id: str) -> _Run:
    run = conv._store.runs.get(run_id)
    if run is None or not 0 <= run.first_chunk < conv._n_chunks:
        raise KeyError(f"no run {run_id!r} in this conversation version")
    return run


def run_status(conv: Conversation, run_id: str) -> RunStatus:
    """The run's status; a run without a lifecycle takes its nearest ancestor's (``streaming``
    when none has one). `close_stream` turns runs still streaming into ``aborted`` (with a
    lifecycle) or ``complete`` (without); a closed run that sends again streams again.
    O(ancestor depth), guarded against cycles."""
    s = conv._store
    version = conv._version
    seen: set[str] = set()
    current: str | None = run_id
    while current is not None and current not in seen:
        seen.add(current)
        status = s.status.get_at(current, version)
        if status is not None:
            return status  # type: ignore[return-value]
        current = link_at(s, current, version)[0]
    return "streaming"


def run_status_step(conv: Conversation, run_id: str) -> tuple[RunStatus | None, str | None]:
    """One step of `run_status`'s walk: ``(the run's own status, None)`` when it has a lifecycle,
    else ``(None, its parent run)`` (None for a root or a still-unresolved parent). For a caller
    that memoises the statuses of many runs, each an ancestor's unless its own (a one-shot
    projection). O(1)."""
    s = conv._store
    version = conv._version
    status = s.status.get_at(run_id, version)
    if status is not None:
        return status, None  # type: ignore[return-value]
    return None, link_at(s, run_id, version)[0]


def own_run_statuses(conv: Conversation) -> dict[str, RunStatus]:
    """Run id -> its own status, for every run with a lifecycle in this version: `run_status_step`'s
    first answer for all of them at once (a run absent here takes its ancestors' status). O(runs
    with a status); one C-level copy of the newest map when nothing newer was written, which is
    taken before the version check, so a write racing with the read is never mistaken for this
    version (`VersionedMap.items_at`)."""
    return dict(conv._store.status.items_at(conv._version))  # type: ignore[arg-type]


def run_parents(conv: Conversation) -> dict[str, str]:
    """Run id -> its parent run, for every run whose parent is known in this version:
    `run_status_step`'s second answer for all of them at once. O(runs) in one comprehension over
    a C-level copy of the link index (write-once entries, stamped)."""
    version = conv._version
    links = dict(conv._store.links)  # (the head may be extended meanwhile; its items are reused)
    return {run: entry[1] for run, entry in links.items() if entry[0] <= version and entry[1] is not None}


def _spawn_record(conv: Conversation, spawn: _Spawn) -> SpawnInfo:
    s = conv._store
    trigger = s.blocks[spawn.trigger]
    run = s.runs[spawn.run]
    first = run.first_chunk
    return SpawnInfo(
        id=f"spawn:{trigger.id}:{chunk_id(first)}",
        kind=spawn.kind,
        trigger_block_id=trigger.id,
        trigger_run_id=trigger.run,
        run_id=spawn.run,
        invocation_chunk_id=chunk_id(first),
        thread_id=run.thread,
    )


def spawn_of(conv: Conversation, run_id: str) -> SpawnInfo | None:
    """The spawn edge that started ``run_id`` (None for a root or a still-unresolved parent)."""
    spawn = link_at(conv._store, run_id, conv._version)[1]
    return None if spawn is None else _spawn_record(conv, spawn)


def spawns_from(conv: Conversation, block_id: str) -> tuple[SpawnInfo, ...]:
    """Runs started by this block (tool call, repl_input, ...) in order of linking."""
    block = _block(conv, block_id)
    spawns = spawns_at(conv._store, block.index, conv._version)
    return tuple(_spawn_record(conv, sp) for sp in spawns)


def child_runs(conv: Conversation, run_id: str) -> tuple[SpawnInfo, ...]:
    """Runs started by any block of ``run_id`` (its subagents, REPL children and provider calls),
    in block order. O(blocks of the run + answer) -- what a REPL view needs per agent."""
    run = _run(conv, run_id)
    s = conv._store
    out: list[SpawnInfo] = []
    for b in prefix(run.blocks, conv._n_blocks):
        if b in s.spawn_lists:
            out.extend(_spawn_record(conv, sp) for sp in spawns_at(s, b, conv._version))
    return tuple(out)


def run_info(conv: Conversation, run_id: str) -> RunInfo:
    run = _run(conv, run_id)
    s = conv._store
    first_event = s.events[run.first_chunk]
    start = s.block_ids.get(f"block:{run_id}:harness_start")
    has_lifecycle = start is not None and start < conv._n_blocks
    return RunInfo(
        id=run_id,
        thread_id=run.thread,
        parent_id=run.parent_id,
        parent_run_id=link_at(s, run_id, conv._version)[0],
        status=run_status(conv, run_id),
        has_lifecycle=has_lifecycle,
        spawn=spawn_of(conv, run_id),
        first_seq=run.first_chunk + 1,
        agent_id=first_event.agent_id,
    )


def run_chunk_indexes(conv: Conversation, run: _Run) -> list[int]:
    """The run's chunk indexes in order: its blocks' chunks, in block order. O(run size)."""
    s = conv._store
    out: list[int] = []
    for b in prefix(run.blocks, conv._n_blocks):
        out.extend(prefix(s.blocks[b].chunks, conv._n_chunks))
    return out


def run_chunks(conv: Conversation, run_id: str) -> tuple[Chunk, ...]:
    """The run's chunks in order (the REPL view's input). O(run size)."""
    run = _run(conv, run_id)
    return tuple(_chunk_record(conv, i) for i in run_chunk_indexes(conv, run))


class ChunkColumns(NamedTuple):
    """`chunk_columns`: the chunks of a version from ``start`` on, as columns."""

    events: list[Any]
    """Chunk ``start + i`` -> its event."""
    blocks: Ints
    """Chunk ``start + i`` -> its block's index."""
    block_ids: list[str] | Paged[str]
    """Block index -> block id (every block the chunks name is in it)."""
    block_kinds: list[str] | Paged[str]
    block_runs: list[str] | Paged[str]


def chunk_columns(conv: Conversation, start: int = 0) -> ChunkColumns:
    """The chunks from index ``start`` on (arrival order) with their blocks' id, kind and run:
    what `get_chunk` and `get_block` give chunk by chunk, without a record (and its id strings)
    per chunk. O(chunks from ``start``): from the start, C-level copies of the columns; from
    further on, the block columns are indexed in place (O(1) each)."""
    s = conv._store
    n_chunks = conv._n_chunks
    if start <= 0:
        n_blocks = conv._n_blocks
        return ChunkColumns(
            _flat(s.events, n_chunks),
            s.chunk_block[:n_chunks],
            _flat(s.block_names, n_blocks),
            _flat(s.block_kinds, n_blocks),
            _flat(s.block_runs, n_blocks),
        )
    paged = s.events
    events = [paged[i] for i in range(start, n_chunks)]
    return ChunkColumns(events, s.chunk_block[start:n_chunks], s.block_names, s.block_kinds, s.block_runs)


class RunEventTable(NamedTuple):
    """`run_event_table`: every run of a version with its events, for a whole-conversation fold."""

    run_ids: list[str]
    """In order of first arrival (`run_ids`)."""
    events: list[list[Any]]
    """Per run: its chunks' events in block order (`run_chunk_indexes`)."""
    blocks: list[Ints]
    """Per run: its block indexes, in order (copies: later reduces leave them as they are)."""
    block_ids: list[str]
    """Block index -> block id."""
    block_kinds: list[str]
    """Block index -> block kind."""


def run_event_table(conv: Conversation) -> RunEventTable:
    """Every run's events in block order: what `run_chunks` gives run by run, without a `Chunk`
    record (an id string and a Struct) per chunk. One C-level copy of the event, block and block
    column lists, then O(blocks + chunks) per run: O(N) in all."""
    s = conv._store
    n_chunks = conv._n_chunks
    n_blocks = conv._n_blocks
    events: list[Any] = _flat(s.events, n_chunks)
    records: list[_Block] = _flat(s.blocks, n_blocks)
    event_of = events.__getitem__
    run_ids: list[str] = []
    run_events: list[list[Any]] = []
    run_blocks: list[Ints] = []
    for run in tuple(s.runs.values()):
        if not 0 <= run.first_chunk < n_chunks:
            continue
        blocks = prefix(run.blocks, n_blocks)[:]  # (a copy: the run's own list grows with the head)
        out: list[Any] = []
        append = out.append
        extend = out.extend
        for b in blocks:
            chunks = records[b].chunks
            if len(chunks) == 1:  # (a block of this version has its first chunk in it)
                append(events[chunks[0]])
            else:
                extend(map(event_of, prefix(chunks, n_chunks)))
        run_ids.append(run.id)
        run_events.append(out)
        run_blocks.append(blocks)
    return RunEventTable(
        run_ids, run_events, run_blocks, _flat(s.block_names, n_blocks), _flat(s.block_kinds, n_blocks)
    )


def run_blocks(conv: Conversation, run_id: str) -> tuple[Block, ...]:
    run = _run(conv, run_id)
    blocks = conv._store.blocks
    return tuple(_block_record(conv, blocks[i]) for i in prefix(run.blocks, conv._n_blocks))


# --- tools, relays, usage ----------------------------------------------------------------------------


def _live(index: int | None, limit: int) -> int | None:
    return index if index is not None and index < limit else None


def _nth(items: Sequence[int], k: int) -> int | None:
    return items[k] if 0 <= k < len(items) else None


def tool_call(conv: Conversation, call_id: str, occurrence: int = -1) -> ToolCallInfo | None:
    """Everything known about one tool call, or None if neither call nor result has arrived.

    A call id reused by an agent across iterations has several occurrences: the k-th
    ``tool_call`` pairs with the k-th result and the k-th relay of that id; ``occurrence`` picks
    one (default: the latest). O(log n + progress chunks)."""
    s = conv._store
    nb = conv._n_blocks
    calls = prefix(s.call_blocks.get(call_id, EMPTY), nb)
    results = prefix(s.result_blocks.get(call_id, EMPTY), nb)
    count = max(len(calls), len(results))
    if count == 0:
        return None
    k = occurrence if occurrence >= 0 else count + occurrence
    call_b = _nth(calls, k)
    result_b = _nth(results, k)
    if call_b is None and result_b is None:
        return None
    relay_b = _nth(prefix(s.relays_by_call.get(call_id, EMPTY), nb), k)
    relay_event: Relay | None = None
    if relay_b is not None:
        relay_event = s.events[s.blocks[relay_b].chunks[0]]  # type: ignore[assignment]
    name: str = "unknown"
    call_input: Any = None
    if call_b is not None:
        call_event = s.events[s.blocks[call_b].chunks[0]]
        assert isinstance(call_event, ToolCall)
        name, call_input, run_id = call_event.name, call_event.input, s.blocks[call_b].run
    elif relay_event is not None:
        name, call_input, run_id = relay_event.tool, relay_event.params, relay_event.run_id
    else:
        run_id = s.blocks[result_b].run  # type: ignore[index]
    status: Literal["pending", "complete", "error", "denied"] = "pending"
    output: Any = None
    error: str | None = None
    if result_b is not None:
        result_event = s.events[s.blocks[result_b].chunks[0]]
        if isinstance(result_event, Error):
            status, error, output = "error", result_event.message, {"error": result_event.message}
        else:
            assert isinstance(result_event, ToolResult)
            output = result_event.output
            if call_b is None:
                name = result_event.name if name == "unknown" else name
            status = "complete"
            if isinstance(output, dict):
                if output.get("status") == "denied":
                    status = "denied"
                elif "error" in output:
                    status, error = "error", str(output["error"])
    progress: Sequence[int] = prefix(s.progress.get(call_id, EMPTY), conv._n_chunks)
    if len(calls) > 1 and progress:  # keep the progress between this call and the next one
        low = s.blocks[calls[k]].chunks[0] if k < len(calls) else 0
        high = s.blocks[calls[k + 1]].chunks[0] if k + 1 < len(calls) else conv._n_chunks
        progress = [i for i in progress if low <= i < high]
    return ToolCallInfo(
        call_id=call_id,
        name=name,
        input=call_input,
        status=status,
        synthesized=call_b is None,
        run_id=run_id,
        call_block_id=s.blocks[call_b].id if call_b is not None else None,
        result_block_id=s.blocks[result_b].id if result_b is not None else None,
        output=output,
        error=error,
        relay_id=relay_event.id if relay_event is not None else None,
        progress_chunk_ids=tuple(chunk_id(i) for i in progress),
    )


def tool_call_for_block(conv: Conversation, block_id: str) -> ToolCallInfo | None:
    """The tool call (the right occurrence of its id) that a tool_call / tool_result / tool_error /
    tool_progress / relay block belongs to. O(log n)."""
    block = _block(conv, block_id)
    s = conv._store
    event: Any = s.events[block.chunks[0]]
    if block.kind == "tool_call":
        call_id: str = event.id
        occurrence = bisect_left(s.call_blocks.get(call_id, EMPTY), block.index)
    elif block.kind in ("tool_result", "tool_error"):
        call_id = event.id if block.kind == "tool_result" else block.key.removesuffix(":result")
        occurrence = bisect_left(s.result_blocks.get(call_id, EMPTY), block.index)
    elif block.kind == "relay":
        call_id = event.tool_call_id
        occurrence = bisect_left(s.relays_by_call.get(call_id, EMPTY), block.index)
    elif block.kind == "tool_progress":
        call_id = event.tool_call_id
        calls = prefix(s.call_blocks.get(call_id, EMPTY), conv._n_blocks)
        occurrence = max(0, bisect_left(calls, block.index) - 1)
    else:
        return None
    return tool_call(conv, call_id, occurrence)


def _relay_record(conv: Conversation, block_index: int) -> RelayInfo:
    s = conv._store
    block = s.blocks[block_index]
    event = s.events[block.chunks[0]]
    assert isinstance(event, Relay)
    decision = s.decisions.get_at(event.id, conv._version)
    status: Literal["pending", "approved", "denied", "resolved"]
    if decision is not None:
        status = "approved" if decision.approved else "denied"
    elif prefix(s.call_blocks.get(event.tool_call_id, EMPTY), conv._n_blocks) or prefix(
        s.result_blocks.get(event.tool_call_id, EMPTY), conv._n_blocks
    ):
        status = "resolved"
    else:
        status = "pending"
    return RelayInfo(
        relay_id=event.id,
        tool_call_id=event.tool_call_id,
        tool=event.tool,
        params=event.params,
        run_id=block.run,
        block_id=block.id,
        status=status,
        decision=decision,
    )


def relays(conv: Conversation) -> tuple[RelayInfo, ...]:
    """Every relay in arrival order with its status. O(relays)."""
    return tuple(_relay_record(conv, b) for b in prefix(conv._store.relays, conv._n_blocks))


def pending_relays(conv: Conversation) -> tuple[RelayInfo, ...]:
    """Relays still waiting for a decision. O(relays)."""
    return tuple(r for r in relays(conv) if r.status == "pending")


def relay_info(conv: Conversation, relay_id: str) -> RelayInfo | None:
    index = _live(conv._store.relay_block.get(relay_id), conv._n_blocks)
    return None if index is None else _relay_record(conv, index)


def usage_totals(conv: Conversation, run_id: str | None = None) -> UsageTotals:
    """Summed ``usage`` events of the whole conversation (O(log n)) or of one run (O(its usage
    events))."""
    s = conv._store
    if run_id is None:
        count = bisect_left(s.usage_chunks, conv._n_chunks)
        if count == 0:
            return UsageTotals()
        i, o, r, c = s.usage_sums[count - 1]
        return UsageTotals(
            input_tokens=i, output_tokens=o, cache_read_tokens=r, cache_creation_tokens=c, calls=count
        )
    totals = [0, 0, 0, 0]
    chunks = prefix(s.run_usage.get(run_id, EMPTY), conv._n_chunks)
    for index in chunks:
        event: Any = s.events[index]
        totals[0] += event.input_tokens
        totals[1] += event.output_tokens
        totals[2] += event.cache_read_tokens or 0
        totals[3] += event.cache_creation_tokens or 0
    return UsageTotals(
        input_tokens=totals[0],
        output_tokens=totals[1],
        cache_read_tokens=totals[2],
        cache_creation_tokens=totals[3],
        calls=len(chunks),
    )


def unresolved_parents(conv: Conversation) -> dict[str, tuple[str, ...]]:
    """``parentId`` values that have not arrived -> the runs waiting for them. O(unresolved)."""
    return {key: tuple(value) for key, value in _items_at(conv)}


def _items_at(conv: Conversation) -> Iterator[tuple[str, tuple[str, ...]]]:
    unresolved = conv._store.unresolved
    for key in unresolved.keys_at(conv._version):
        value = unresolved.get_at(key, conv._version)
        if value is not None:
            yield key, value


def diagnostics(conv: Conversation) -> tuple[Diagnostic, ...]:
    return conv._store.diagnostics.get_at(conv._version)


def session_id(conv: Conversation) -> str | None:
    value: str | None = conv._store.meta.get_at("session_id", conv._version)
    return value


def is_stream_closed(conv: Conversation) -> bool:
    return bool(conv._store.meta.get_at("closed", conv._version, False))


def message_health(conv: Conversation, message_id: str) -> MessageHealth:
    """Status of a message from its blocks' runs. O(blocks of the message)."""
    message = _message(conv, message_id)
    s = conv._store
    has_error = False
    unresolved: list[str] = []
    statuses: set[str] = set()
    runs_seen: set[str] = set()
    for b in prefix(message.blocks, conv._n_blocks):
        block = s.blocks[b]
        if block.kind == "error":
            has_error = True
        elif block.kind == "tool_call":
            info = tool_call_for_block(conv, block.id)
            if info is not None and info.status == "pending":
                unresolved.append(info.call_id)
        if block.run not in runs_seen:
            runs_seen.add(block.run)
            statuses.add(run_status(conv, block.run))
    status: RunStatus
    if "error" in statuses:
        status = "error"
    elif "aborted" in statuses:
        status = "aborted"
    elif "streaming" in statuses:
        status = "streaming"
    else:
        status = "complete"
    return MessageHealth(status=status, unresolved_call_ids=tuple(unresolved), has_error=has_error)


# --- selective views --------------------------------------------------------------------------------

_FOLDED_INTO_CALL = frozenset({"tool_result", "tool_error", "tool_progress", "relay"})


def visible_blocks(conv: Conversation, message_id: str) -> tuple[Block, ...]:
    """The message's blocks as ``conv.view`` shows them: reasoning dropped when ``hide_reasoning``;
    results, progress and relays folded into their call's block when ``collapse_tools`` (a denied
    call has no ``tool_call`` event: its result block stands for the call; a relay or progress
    whose call has not arrived stays visible)."""
    view = conv.view
    blocks = blocks_of(conv, message_id)
    if not view.hide_reasoning and not view.collapse_tools:
        return blocks
    out: list[Block] = []
    for block in blocks:
        if view.hide_reasoning and block.kind == "reasoning":
            continue
        if view.collapse_tools and block.kind in _FOLDED_INTO_CALL:
            info = tool_call_for_block(conv, block.id)
            if info is not None:
                representative = info.call_block_id or info.result_block_id
                if representative is not None and representative != block.id:
                    continue
        out.append(block)
    return tuple(out)


def visible_spawns(conv: Conversation, block_id: str) -> tuple[SpawnInfo, ...]:
    """`spawns_from` as ``conv.view.subagents`` shows them: ``hide`` -> none; ``show`` and
    ``collapse`` -> all (projections expand only under ``show``). Provider ``call`` spawns are part
    of the same thread and always returned."""
    spawns = spawns_from(conv, block_id)
    if conv.view.subagents == "hide":
        return tuple(sp for sp in spawns if sp.kind in ("call", "reply"))
    return spawns


# --- bulk readers for one-shot projections ------------------------------------------------------------
#
# A projection of a whole conversation reads every block and chunk on the shown paths. Building a
# `Block` / `Chunk` / `Message` record (and a ``chunk:<n>`` id) per item costs more than the
# projection's own work and leaves hundreds of thousands of tracked objects for the cyclic GC, so
# these readers answer in columns of plain values, built with C-level passes (``compress`` / ``map``)
# over the paged store.

_NESTED_KINDS: Final = frozenset({"subagent", "repl"})
_WHOLE_KINDS: Final = frozenset({"text", "reasoning"})


def run_thread(conv: Conversation, run_id: str) -> tuple[str, str | None]:
    """``(thread id, parent run id)`` of a run: `run_info`'s ``thread_id`` and ``parent_run_id``
    without building the record. O(1)."""
    run = _run(conv, run_id)
    return run.thread, link_at(conv._store, run_id, conv._version)[0]


def run_threads(conv: Conversation) -> dict[str, str]:
    """Run id -> its thread id, for every run of this version (`run_thread` in bulk). O(runs)."""
    n = conv._n_chunks
    return {run.id: run.thread for run in tuple(conv._store.runs.values()) if 0 <= run.first_chunk < n}


def runs_of_only_thread(conv: Conversation, thread_id: str) -> list[str] | None:
    """When ``thread_id`` is the only thread of this version: every run id of the lineage, a superset
    of this version's runs, which are all in that thread (a run with a chunk has a block in a
    message of its thread); the others belong to later versions and are never shown here. None
    when the version has another thread. O(threads) plus one C-level copy of the ids: no run record
    is read (`run_threads` reads each, ~0.5 µs a run in a 100k-chunk conversation)."""
    if thread_ids(conv) != (thread_id,):
        return None
    return list(conv._store.runs)


def spawn_row(conv: Conversation, run_id: str) -> tuple[str, str] | None:
    """``(kind, trigger block id)`` of the spawn that started ``run_id`` (`spawn_of` without the
    record), None for a root or a still-unresolved parent. O(1)."""
    spawn = link_at(conv._store, run_id, conv._version)[1]
    if spawn is None:
        return None
    return spawn.kind, conv._store.blocks[spawn.trigger].id


def _head(paged: Any, count: int) -> Iterator[Any]:
    """The first ``count`` items of a `model.Paged`, read from its pages (C-level iterators, no
    copy). Race-safe against appends: the tail is read before the pages' list is copied, so a page
    sealed meanwhile (a copy of that tail) is read first and cut at ``count``."""
    tail = paged.tail
    return islice(chain(chain.from_iterable(list(paged.pages)), tail), count)


def _flat[T](paged: Any, count: int) -> list[T]:
    """The first ``count`` items of a `model.Paged` as one list (a C-level copy of references)."""
    out: list[T] = list(chain.from_iterable(paged.pages))
    out.extend(paged.tail)
    del out[count:]
    return out


def joined_text(events: Sequence[Any], chunks: Sequence[int], reasoning: bool) -> tuple[str, str | None]:
    """A text or reasoning block's text, its chunks' contents joined, and for reasoning the newest
    ``signature`` sent in it (None when none was, and for text). ``events``: every chunk's event by
    chunk index (`ShownPaths.chunk_events`); ``chunks``: the block's, of this version. O(chunks)."""
    if not reasoning:
        return "".join([events[i].content for i in chunks]), None
    parts = [events[i] for i in chunks]
    signature = None
    for event in reversed(parts):
        if event.signature is not None:
            signature = event.signature
            break
    return "".join([e.content for e in parts]), signature


class SummaryRow(NamedTuple):
    """A summary message on a shown path. ``seq`` places it among the chunks: the arrival number of
    the first chunk of its first source block (0 when its sources have no blocks)."""

    seq: int
    message_id: str
    thread_id: str
    text: str


class BlockRef(Protocol):
    """A block as bulk readers hand it out: the store's own record, read-only (never mutate it).
    ``kind`` is the block's chunks' event type, or ``tool_error`` for a tool exception."""

    @property
    def id(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def run(self) -> str: ...


class FeedColumns(NamedTuple):
    """`ShownPaths.feed`: one entry per chunk to place, in arrival order (parallel lists)."""

    events: list[Any]
    blocks: list[BlockRef]
    """The block of each chunk."""
    seqs: list[int] | None
    """Arrival numbers, only when there are summaries to merge (else None)."""
    texts: dict[str, str]
    """Text and reasoning block id -> its whole text."""
    signatures: dict[str, str]
    """Reasoning block id -> the newest ``signature`` sent in it (absent when none was)."""


class BlockColumns(NamedTuple):
    """`ShownPaths.block_columns`: one entry per shown block, in arrival order (parallel lists)."""

    ids: list[str]
    kinds: list[str]
    run_ids: list[str]
    first_seqs: list[int]
    first_events: list[Any]
    """The event of each block's first chunk."""
    texts: dict[str, str]
    """Text and reasoning block id -> the joined text of its first ``text_limit`` chunks."""


class BlockTable(NamedTuple):
    """`ShownPaths.block_table`: one entry per shown block, in arrival order (parallel lists read
    from the store's block columns)."""

    ids: list[str]
    kinds: list[str]
    run_ids: list[str]
    first_chunks: list[int]
    """Chunk index of each block's first chunk (its seq minus one)."""
    run_previous: list[int] | None
    """When every block is shown: each block's predecessor in its run by position (-1 for a run's
    first block), a parent table of the sequence edges; None otherwise."""


class ShownPaths:
    """The blocks and summaries on a set of active paths (`shown_paths`), read in bulk.

    Valid for the conversation version it was made from. Blocks are kept as store positions: block
    creation order is first-chunk order, so sorted positions are arrival order (a ``range`` of
    every position when every block is shown).
    """

    __slots__ = ("_blocks", "_chunk_events", "_conv", "_record_list", "summaries")

    def __init__(self, conv: Conversation, blocks: Sequence[int], summaries: list[SummaryRow]) -> None:
        self._conv = conv
        self._blocks = blocks
        self.summaries = summaries
        """Summary messages on the paths, sorted by ``seq`` (ties in walk order)."""
        self._record_list: list[_Block] | None = None
        self._chunk_events: tuple[Any, ...] | None = None

    # The store's records and events are copied only when a reader asks for them: a copy of the
    # records is a list of ~100k references that the cyclic GC traverses twice (its first young and
    # middle-generation collections) while the caller runs, ~5 ms each for a 100k-chunk
    # conversation; the events are copied into a tuple (`chunk_events`), which it traverses once.

    @property
    def _shows_every_block(self) -> bool:
        """Whether every block of this version is shown (``_blocks`` are distinct sorted store
        positions, so then they are exactly ``range(n_blocks)``)."""
        return len(self._blocks) == self._conv._n_blocks

    @property
    def _records(self) -> list[_Block]:
        """Every block record of this version by store position (a C-level copy, made once)."""
        records = self._record_list
        if records is None:
            records = self._record_list = _flat(self._conv._store.blocks, self._conv._n_blocks)
        return records

    def __len__(self) -> int:
        """Number of shown blocks."""
        return len(self._blocks)

    def feed(self) -> FeedColumns:
        """The chunks a thread projection places, in arrival order: a text or reasoning block once,
        at its first chunk (its whole text in ``texts``), every other block with each of its chunks.
        O(shown blocks + their chunks) in Python plus one C-level pass over all chunks."""
        n = self._conv._n_chunks
        events = self.chunk_events
        whole = _WHOLE_KINDS
        slots: list[_Block | None] = [None] * n
        # chunk index -> its block, for the chunks to place (a record is truthy, None is not)
        texts: dict[str, str] = {}
        signatures: dict[str, str] = {}
        for block in self.blocks():
            chunks = block.chunks
            if len(chunks) == 1:
                first = chunks[0]
                slots[first] = block
                kind = block.kind
                if kind in whole:
                    event = events[first]
                    texts[block.id] = event.content
                    if kind == "reasoning" and event.signature is not None:
                        signatures[block.id] = event.signature
                continue
            if chunks[-1] >= n:
                chunks = prefix(chunks, n)
            kind = block.kind
            if kind in whole:
                slots[chunks[0]] = block
                text, signature = joined_text(events, chunks, kind == "reasoning")
                texts[block.id] = text
                if signature is not None:
                    signatures[block.id] = signature
            else:
                for i in chunks:
                    slots[i] = block
        return FeedColumns(
            events=list(compress(events, slots)),
            blocks=list(filter(None, slots)),
            seqs=list(compress(range(1, n + 1), slots)) if self.summaries else None,
            texts=texts,
            signatures=signatures,
        )

    @property
    def chunk_events(self) -> tuple[Any, ...]:
        """Every chunk's event of this version by chunk index, as a tuple: the cyclic GC untracks it
        at its first collection (events are untracked), so it is traversed once, not twice as a
        list would be (made once, a C-level copy)."""
        events = self._chunk_events
        if events is None:
            paged = self._conv._store.events
            events = self._chunk_events = tuple(_head(paged, self._conv._n_chunks))
        return events

    def blocks(self) -> Iterable[Any]:
        """The shown blocks' own store records in arrival order (read-only, see `BlockRef`, plus
        ``chunks``: the block's chunk indexes, of which those below `Conversation.chunk_count`
        belong to this version; ``index``: its store position). When every block is shown, read
        straight from the store's pages (no copy). O(1); iterating is O(shown blocks)."""
        if self._shows_every_block:
            return _head(self._conv._store.blocks, len(self._blocks))
        return map(self._records.__getitem__, self._blocks)

    def block_columns(self, text_limit: int = 8) -> BlockColumns:
        """Every shown block in arrival order, with its first event and, for text and reasoning
        blocks, the text of its first ``text_limit`` chunks: `block_table` plus those reads (a
        record per text or reasoning block). O(shown blocks), mostly in C-level passes."""
        table = self.block_table()
        n = self._conv._n_chunks
        events = self.chunk_events
        ids = table.ids
        texts: dict[str, str] = {}
        records: list[_Block] | None = None
        for i in compress(range(len(ids)), map(_WHOLE_KINDS.__contains__, table.kinds)):
            if records is None:
                records = self.block_records()[0]
            chunks = records[i].chunks
            if chunks[-1] >= n:
                chunks = prefix(chunks, n)
            texts[ids[i]] = "".join([events[c].content for c in chunks[:text_limit]])
        return BlockColumns(
            ids=ids,
            kinds=table.kinds,
            run_ids=table.run_ids,
            first_seqs=[i + 1 for i in table.first_chunks],
            first_events=list(map(events.__getitem__, table.first_chunks)),
            texts=texts,
        )

    def block_records(self) -> tuple[list[Any], tuple[Any, ...]]:
        """The shown blocks' own store records in arrival order (read-only: never mutate them; see
        `BlockRef`, plus ``chunks``: the block's chunk indexes, of which those below
        `Conversation.chunk_count` belong to this version), and every chunk's event by chunk index.
        For a caller that reads each block once and would not use the `block_columns` lists (the
        DAG input). O(shown blocks), one C-level pass."""
        return list(self.blocks()), self.chunk_events

    def block_table(self) -> BlockTable:
        """The shown blocks' ids, kinds, runs and first chunks from the store's block columns, in
        arrival order, without reading a block record: C-level copies when every block is shown
        (then with each block's run predecessor too), else one C-level gather per column.
        O(shown blocks)."""
        conv = self._conv
        s = conv._store
        n = conv._n_blocks
        names: list[str] = list(_head(s.block_names, n))
        kinds: list[str] = list(_head(s.block_kinds, n))
        runs: list[str] = list(_head(s.block_runs, n))
        firsts = s.block_first_chunks[:n].tolist()
        if self._shows_every_block:
            return BlockTable(names, kinds, runs, firsts, s.block_run_previous[:n].tolist())
        blocks = self._blocks
        return BlockTable(
            list(map(names.__getitem__, blocks)),
            list(map(kinds.__getitem__, blocks)),
            list(map(runs.__getitem__, blocks)),
            list(map(firsts.__getitem__, blocks)),
            None,
        )

    def spawn_edges(self) -> list[tuple[int, int]]:
        """``(trigger, target)`` positions in `block_columns` order: every spawn from a shown block
        (any kind, in linking order) whose spawned run's first block is shown. O(shown blocks)."""
        triggers, targets = self.spawn_edge_columns()
        return list(zip(triggers, targets, strict=True))

    def spawn_edge_columns(self) -> tuple[list[int], list[int]]:
        """`spawn_edges` as two parallel lists, trigger positions and target positions: no tuple
        per edge (each would be a GC-tracked allocation; ~14k of them in a 100k-node conversation
        ran ~20 young collections, each traversing the caller's fresh per-block lists).

        Read from the store's spawn columns: this version's spawns are a prefix of them (stamps
        ascend), in linking order, and a stable sort by trigger position gives the order of a walk
        trigger by trigger. O(k log k) for k spawns plus O(shown blocks) for a position dict when
        not every block is shown; C-level passes but the filter (a walk of the per-trigger spawn
        lists cost ~1 µs per spawn in cache misses)."""
        conv = self._conv
        s = conv._store
        count = bisect_right(s.spawn_stamps, conv._version)
        triggers: list[Any] = s.spawn_triggers[:count].tolist()
        targets: list[Any] = s.spawn_first_blocks[:count].tolist()
        blocks = self._blocks
        n = len(blocks)
        # (when every block is shown, a store position is a shown position: a spawn of this version
        # has its trigger and its run's first block in it)
        if not self._shows_every_block:  # store positions -> shown positions (None: not shown)
            position = dict(zip(blocks, range(n), strict=True)).get
            triggers = list(map(position, triggers))
            targets = list(map(position, targets))
            if None in triggers or None in targets:
                kept = [i for i in range(count) if triggers[i] is not None and targets[i] is not None]
                triggers = list(map(triggers.__getitem__, kept))
                targets = list(map(targets.__getitem__, kept))
        order = sorted(range(len(triggers)), key=triggers.__getitem__)
        return list(map(triggers.__getitem__, order)), list(map(targets.__getitem__, order))


def shown_paths(conv: Conversation, active: Any, *, nested: bool = True, orphans: bool = True) -> ShownPaths:
    """The blocks and summaries a projection of ``active`` shows: the messages on ``active``'s path
    and, recursively, on the default active path of every thread spawned from a block on a shown
    path (``subagent`` / ``repl`` threads only when ``nested``; late-linked ``call`` / ``reply``
    threads always). With ``orphans``, when ``active`` is the main thread, threads whose parent has
    not arrived are shown too. O(shown messages + shown blocks + threads), plus O(k log k) to sort;
    O(threads) plus C-level copies when the only thread's default path holds every message and
    there are no summaries (`_shows_everything`: every block is shown, nothing is walked).
    """
    from convograph.hypergraph.active import default_active

    s = conv._store
    version = conv._version
    n_blocks = conv._n_blocks
    threads = thread_ids(conv)
    if _shows_everything(conv, active, threads, default_active):
        return ShownPaths(conv, range(n_blocks), [])
    spawned: dict[int, list[str]] = {}
    waiting: list[str] = []
    for thread in threads:
        if thread == MAIN_THREAD:
            continue
        spawn = link_at(s, thread, version)[1]
        if spawn is None:
            waiting.append(thread)
        elif nested or spawn.kind not in _NESTED_KINDS:
            spawned.setdefault(spawn.trigger, []).append(s.runs[spawn.run].thread)
    pending: list[Any] = [active]
    if orphans and active.thread_id == MAIN_THREAD:
        pending.extend(default_active(conv, thread) for thread in reversed(waiting))
        pending.reverse()
    message_index = s.message_ids.get
    n_messages = conv._n_messages
    messages: list[_Message] = _flat(s.messages, n_messages)
    blocks: list[int] = []
    summaries: list[SummaryRow] = []
    seen: set[str] = set()
    while pending:
        path = pending.pop()
        thread_id = path.thread_id
        if thread_id in seen:
            continue
        seen.add(thread_id)
        for message_id in path.message_ids:
            index = message_index(message_id)
            if index is None or index >= n_messages:
                raise KeyError(f"no message {message_id!r} in this conversation version")
            message = messages[index]
            if message.summary is not None:
                info = message.summary[1]
                summaries.append(SummaryRow(_summary_seq(conv, info), message.id, thread_id, info.text))
                continue
            own = message.blocks
            if own and own[-1] >= n_blocks:
                own = prefix(own, n_blocks)
            blocks.extend(own)
            if spawned:
                for b in own:
                    children = spawned.get(b)
                    if children is not None:
                        pending.extend(default_active(conv, t) for t in children if t != thread_id)
    blocks.sort()
    summaries.sort(key=_seq_of)  # stable: equal seqs keep walk order
    return ShownPaths(conv, blocks, summaries)


def _shows_everything(conv: Conversation, active: Any, threads: tuple[str, ...], default: Any) -> bool:
    """Whether ``active`` shows every block of this version with no summary: its thread is the only
    one, and it is that thread's default path (``default``: `default_active`, memoised, so a path
    of distinct messages of this version) holding every message of the version (a conversation
    never edited, regenerated or summarised, without subagents). Then `shown_paths` has nothing to
    walk: every message's blocks are shown, which are all blocks (a block belongs to a message
    created before it). Summaries exist in no version when the lineage never made one. O(1) for
    the memoised default path itself; any other path is walked."""
    if (
        len(active.message_ids) != conv._n_messages
        or threads != (active.thread_id,)
        or conv._store.summaries_by_first
    ):
        return False
    return bool(active == default(conv, active.thread_id))


def _seq_of(row: SummaryRow) -> int:
    return row.seq


def _summary_seq(conv: Conversation, info: SummaryInfo) -> int:
    s = conv._store
    for source in info.source_ids:
        index = s.message_ids.get(source)
        if index is None:
            continue
        own = prefix(s.messages[index].blocks, conv._n_blocks)
        if own:
            return int(s.blocks[own[0]].chunks[0]) + 1
    return 0
