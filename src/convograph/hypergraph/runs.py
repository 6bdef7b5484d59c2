"""Queries over the runs of one `Conversation` version: status, parents, spawns, run info, a run's
chunks and blocks, the run event table and the runs' threads. O(answer size) plus O(log n) lookups
unless stated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from convograph.hypergraph.records import (
    Block,
    Chunk,
    RunInfo,
    SpawnInfo,
    block_record,
    chunk_id,
    chunk_record,
    stored_block,
)
from convograph.hypergraph.store import (
    Ints,
    Paged,
    RunStatus,
    _Block,
    _Run,
    _Spawn,
    link_at,
    paged_list,
    prefix,
    spawns_at,
)
from convograph.hypergraph.tiers import thread_ids

if TYPE_CHECKING:
    from convograph.hypergraph.model import Conversation

# --- runs -------------------------------------------------------------------------------------------


def run_ids(conv: Conversation) -> tuple[str, ...]:
    """Runs in order of first arrival. O(runs)."""
    n = conv._n_chunks
    return tuple(r.id for r in tuple(conv._store.runs.values()) if 0 <= r.first_chunk < n)


def stored_run(conv: Conversation, run_id: str) -> _Run:
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


def spawn_record(conv: Conversation, spawn: _Spawn) -> SpawnInfo:
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
    return None if spawn is None else spawn_record(conv, spawn)


def spawns_from(conv: Conversation, block_id: str) -> tuple[SpawnInfo, ...]:
    """Runs started by this block (tool call, repl_input, ...) in order of linking."""
    block = stored_block(conv, block_id)
    spawns = spawns_at(conv._store, block.index, conv._version)
    return tuple(spawn_record(conv, sp) for sp in spawns)


def child_runs(conv: Conversation, run_id: str) -> tuple[SpawnInfo, ...]:
    """Runs started by any block of ``run_id`` (its subagents, REPL children and provider calls),
    in block order. O(blocks of the run + answer) -- what a REPL view needs per agent."""
    run = stored_run(conv, run_id)
    s = conv._store
    out: list[SpawnInfo] = []
    for b in prefix(run.blocks, conv._n_blocks):
        if b in s.spawn_lists:
            out.extend(spawn_record(conv, sp) for sp in spawns_at(s, b, conv._version))
    return tuple(out)


def run_info(conv: Conversation, run_id: str) -> RunInfo:
    run = stored_run(conv, run_id)
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
    run = stored_run(conv, run_id)
    return tuple(chunk_record(conv, i) for i in run_chunk_indexes(conv, run))


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
            paged_list(s.events, n_chunks),
            s.chunk_block[:n_chunks],
            paged_list(s.block_names, n_blocks),
            paged_list(s.block_kinds, n_blocks),
            paged_list(s.block_runs, n_blocks),
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
    events: list[Any] = paged_list(s.events, n_chunks)
    records: list[_Block] = paged_list(s.blocks, n_blocks)
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
        run_ids,
        run_events,
        run_blocks,
        paged_list(s.block_names, n_blocks),
        paged_list(s.block_kinds, n_blocks),
    )


def run_blocks(conv: Conversation, run_id: str) -> tuple[Block, ...]:
    run = stored_run(conv, run_id)
    blocks = conv._store.blocks
    return tuple(block_record(conv, blocks[i]) for i in prefix(run.blocks, conv._n_blocks))


def run_thread(conv: Conversation, run_id: str) -> tuple[str, str | None]:
    """``(thread id, parent run id)`` of a run: `run_info`'s ``thread_id`` and ``parent_run_id``
    without building the record. O(1)."""
    run = stored_run(conv, run_id)
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
