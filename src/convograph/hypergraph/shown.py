"""Bulk readers for one-shot projections: the blocks and summaries shown on an active path, in columns.

A projection of a whole conversation reads every block and chunk on the shown paths. Building a
`Block` / `Chunk` / `Message` record (and a ``chunk:<n>`` id) per item costs more than the
projection's own work and leaves hundreds of thousands of tracked objects for the cyclic GC, so
these readers answer in columns of plain values, built with C-level passes (``compress`` / ``map``)
over the paged store.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import compress
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

from convograph.hypergraph.active import default_active
from convograph.hypergraph.store import (
    MAIN_THREAD,
    SummaryInfo,
    _Block,
    _Message,
    link_at,
    paged_head,
    paged_list,
    prefix,
)
from convograph.hypergraph.tiers import thread_ids

if TYPE_CHECKING:
    from convograph.hypergraph.model import Conversation

_NESTED_KINDS: Final = frozenset({"subagent", "repl"})
_WHOLE_KINDS: Final = frozenset({"text", "reasoning"})


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
            records = self._record_list = paged_list(self._conv._store.blocks, self._conv._n_blocks)
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
            events = self._chunk_events = tuple(paged_head(paged, self._conv._n_chunks))
        return events

    def blocks(self) -> Iterable[Any]:
        """The shown blocks' own store records in arrival order (read-only, see `BlockRef`, plus
        ``chunks``: the block's chunk indexes, of which those below `Conversation.chunk_count`
        belong to this version; ``index``: its store position). When every block is shown, read
        straight from the store's pages (no copy). O(1); iterating is O(shown blocks)."""
        if self._shows_every_block:
            return paged_head(self._conv._store.blocks, len(self._blocks))
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
        names: list[str] = list(paged_head(s.block_names, n))
        kinds: list[str] = list(paged_head(s.block_kinds, n))
        runs: list[str] = list(paged_head(s.block_runs, n))
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
    there are no summaries (`shows_everything`: every block is shown, nothing is walked).
    """
    s = conv._store
    version = conv._version
    n_blocks = conv._n_blocks
    threads = thread_ids(conv)
    if shows_everything(conv, active, threads, default_active):
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
    messages: list[_Message] = paged_list(s.messages, n_messages)
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


def shows_everything(conv: Conversation, active: Any, threads: tuple[str, ...], default: Any) -> bool:
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
