"""The hypergraph's storage (seed 000 "Hypergraph model"): the `_Store` of a lineage, its records and
the paged lists and index helpers the queries read. `convograph.hypergraph.model` wraps it in the
immutable `Conversation` value.

Tiers: **chunk** (one event, the only tier carrying data) -> **block** (consecutive chunks of one run
with the same block key) -> **message** (one conversational turn of one thread). A **thread** is one
conversational level: ``"main"`` for the top level, and one nested thread per spawned sub-run (keyed
by that run's id). Messages of a thread form a tree (a sibling is a branch); the thread's **tip**
selects the active path (root -> tip).

Persistence (event sourcing plus partial persistence):
- One `_Store` (a *lineage*) holds the log of every applied entry (events and operations) and the
  indexes derived from it. A `Conversation` is ``(store, version)`` plus the tier counts at that
  version; ``version`` is the number of log entries it has seen.
- Tier lists and per-key index lists are **append-only** and hold monotone integer indexes, so a
  version reads a prefix by comparing with its counts (``bisect``): no per-version copy, no stamps.
- The few values that change (run status, thread tips, branch choices, relay decisions, usage,
  spawn links) live in fat-node `convograph.versioned` maps stamped with the version: O(1) memory
  per change, every version readable.
- Only the head of a lineage is extended in place. Extending an older version replays its log
  prefix into a new lineage once (O(n)), then it is O(1) per step again. Reducer-only state (open
  message, key counters, outstanding calls) is therefore only ever read at the head.

So every ``reduce`` returns a new `Conversation` and every older one keeps answering exactly as
before (property-tested in ``tests/test_hypergraph_properties.py``).
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from itertools import chain, islice
from typing import Any, Final, Literal

import msgspec

from convograph.events.types import Event
from convograph.versioned import VersionedList, VersionedMap

__all__ = [
    "BLOCK_HEAD",
    "EMPTY",
    "MAIN_THREAD",
    "PAGE",
    "STREAM_RUN_ID",
    "Diagnostic",
    "Ints",
    "Paged",
    "RelayDecision",
    "RunStatus",
    "SpawnKind",
    "SummaryInfo",
    "UsageTotals",
    "ViewOptions",
    "link_at",
    "paged_head",
    "paged_list",
    "prefix",
    "spawns_at",
]

Ints = array[int]
"""Append-only integer lists are ``array("q")``: compact (8 bytes per entry, no int objects), and
the cyclic GC has no per-element work for them. Each array is still one GC-tracked object in
CPython 3.12 (a 136k-event conversation holds ~186k of them: one per block, message, run and index
key), which every full collection visits once."""

PAGE_BITS: Final = 10
PAGE: Final = 1 << PAGE_BITS


class Paged[T]:
    """An append-only sequence kept as full tuple pages of `PAGE` items plus a short list tail.

    Why: CPython's cyclic GC walks every pointer of a list on each full collection (one cache miss
    per item), but it untracks a tuple whose items are all untracked, as events are. A
    million-event log in a list cost ~0.8 µs/event of GC time (measured); in pages the collector
    sees ~1k tuples it skips. Index O(1); append O(1) (the reducer inlines it on its hot path).
    """

    __slots__ = ("pages", "tail")

    def __init__(self) -> None:
        self.pages: list[tuple[T, ...]] = []
        self.tail: list[T] = []

    def append(self, item: T) -> None:
        tail = self.tail
        tail.append(item)
        if len(tail) == PAGE:
            self.seal()

    def seal(self) -> None:
        """Turn the full tail into a page (called when the tail reaches `PAGE` items)."""
        self.pages.append(tuple(self.tail))
        self.tail = []

    def __getitem__(self, index: int) -> T:
        page = index >> PAGE_BITS
        pages = self.pages
        if page < len(pages):
            return pages[page][index & (PAGE - 1)]
        return self.tail[index - (len(pages) << PAGE_BITS)]

    def __len__(self) -> int:
        return (len(self.pages) << PAGE_BITS) + len(self.tail)

    def head(self, count: int) -> Iterator[T]:
        """The first ``count`` items, in order."""
        for page in self.pages:
            if count <= 0:
                return
            yield from page[:count]
            count -= len(page)
        if count > 0:
            yield from self.tail[:count]


EMPTY: Final[Ints] = array("q")
"""A shared empty index list (never appended to)."""

MAIN_THREAD: Final = "main"
"""Id of the top-level thread."""

STREAM_RUN_ID: Final = "_stream"
"""Run id given to run-less ``error`` events (server-level failures)."""

RunStatus = Literal["streaming", "complete", "error", "aborted"]
"""``aborted``: a run with a lifecycle that had not ended when the stream was closed."""

SpawnKind = Literal["subagent", "repl", "call", "reply"]
"""How a run was started: by a tool call / relay (``subagent``), by a ``repl_input`` (``repl``), as a
provider call of a run (``call``: ``parentId`` is a run id) or in reply to another block (``reply``)."""


class ViewOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Selective-view options carried by a `Conversation` and honoured by the projections.

    - ``hide_reasoning``: reasoning blocks are left out of `queries.visible_blocks`.
    - ``collapse_tools``: a tool call, its progress, relay and result show as the one call block.
    - ``subagents``: ``"show"`` (nested runs are expanded), ``"collapse"`` (shown as a closed spawn,
      contents not walked) or ``"hide"`` (not shown at all).
    """

    hide_reasoning: bool = False
    collapse_tools: bool = False
    subagents: Literal["show", "collapse", "hide"] = "show"


class Diagnostic(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Something the reducer could not apply as sent (never silently dropped).

    Codes: ``unresolved_parent`` (at stream end, a run's ``parentId`` never arrived),
    ``duplicate_result`` (a second result for one tool call), ``unknown_relay`` (a decision for a
    relay that never arrived).
    """

    code: str
    message: str
    subject: str


class UsageTotals(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    calls: int = 0
    """Number of ``usage`` events summed."""


class RelayDecision(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    relay_id: str
    approved: bool
    reason: str | None = None
    tool: str | None = None


class SummaryInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Provenance of a summary message: what it replaces, its text, who made it and when."""

    source_ids: tuple[str, ...]
    text: str
    model: str | None = None
    created_at: str | None = None


# --- storage records (internal; read through `queries`) ---------------------------------------------


def _ints() -> Ints:
    return array("q")


# Records are msgspec Structs with ``gc=False``: created ~4x faster than slotted classes and never
# tracked by the cyclic GC (they hold only strings, ints, arrays and each other, never in a cycle:
# a run points at blocks and messages, which point at nothing).


BLOCK_HEAD: Final = 161
"""Characters of a text or reasoning block's text its record keeps at least (`_Block.head`): what
a one-line label reads (its first 160 characters, and whether there are more)."""


class _Block(msgspec.Struct, gc=False):
    """A block. ``chunks`` is append-only (monotone chunk indexes); ``head`` is replaced while it
    grows; the rest never changes."""

    index: int
    id: str
    key: str
    kind: str
    run: str
    message: int
    chunks: Ints
    head: str | None = None
    """Text and reasoning blocks: the block's text while it is shorter than `BLOCK_HEAD`
    characters, then its first `BLOCK_HEAD` (the chunk that crossed it is cut there; the first
    chunk is kept whole, as the same string object). Valid for a version that holds every chunk
    of the block (``chunks[-1]`` below its chunk count); other versions join their own chunks. The
    reducer appends a chunk before it extends the head, so a reader that reads the head first and
    then ``chunks[-1]`` never takes a head that holds a chunk beyond its version."""


class _Message(msgspec.Struct, gc=False):
    """A message. ``blocks`` and ``children`` are append-only (monotone indexes)."""

    index: int
    id: str
    thread: str
    role: str
    parent: int
    """Index of the previous message in the thread's tree, -1 for a root."""
    depth: int
    blocks: Ints = msgspec.field(default_factory=_ints)
    children: Ints = msgspec.field(default_factory=_ints)
    summary: tuple[tuple[int, ...], SummaryInfo] | None = None


class _Run:
    """A run. ``blocks`` is append-only; the ``last_*`` fields and ``ended`` are reducer state read
    at the head only. Its chunks are its blocks' chunks, in block order. (A slotted class, not a
    gc=False Struct like the others: the reducer sets its fields on every new block, and slot
    writes are ~3x cheaper.)"""

    __slots__ = (
        "blocks",
        "ended",
        "epoch",
        "first_chunk",
        "id",
        "last_block",
        "last_cls",
        "last_id",
        "last_key",
        "last_message",
        "parent_id",
        "thread",
    )

    def __init__(self, run_id: str, thread: str, parent_id: str | None) -> None:
        self.id = run_id
        self.thread = thread
        self.parent_id = parent_id
        self.blocks: Ints = array("q")
        self.first_chunk = -1
        self.last_key: str | None = None
        self.last_id: str | None = None
        """Own ``id`` of the event that opened the last block (the delta fast path compares it)."""
        self.last_cls: type[Any] | None = None
        self.last_block: _Block | None = None
        self.last_message: _Message | None = None
        self.ended = False
        self.epoch = 0
        """The thread epoch the run belongs to (its parent run's, else the thread's at its start)."""


class _Thread:
    """A conversational level. ``messages`` is append-only; ``open``/``after_result``/``tip`` are head
    state (the versioned tip lives in ``_Store.tips``)."""

    __slots__ = ("after_result", "count", "epoch", "id", "messages", "open", "tip")

    def __init__(self, thread_id: str) -> None:
        self.id = thread_id
        self.messages: Ints = array("q")
        self.count = 0
        """Non-summary messages created so far (numbers the ids)."""
        self.epoch = 0
        """Bumped by every operation that moves the tip (edit, regenerate, switch): runs that
        started before keep writing on their own branch."""
        self.open: _Message | None = None
        self.tip: _Message | None = None
        self.after_result = False


class _Spawn(msgspec.Struct, frozen=True, gc=False):
    trigger: int
    """Block index of the trigger."""
    run: str
    kind: str


class _Store:
    """One lineage: the log and every index derived from it. See the module docstring."""

    __slots__ = (
        "active_cache",
        "block_first_chunks",
        "block_ids",
        "block_kinds",
        "block_names",
        "block_run_previous",
        "block_runs",
        "blocks",
        "broken",
        "call_blocks",
        "chosen",
        "chunk_block",
        "closed",
        "closed_runs",
        "decisions",
        "diagnostics",
        "events",
        "key_count",
        "key_latest",
        "links",
        "lock",
        "log",
        "message_ids",
        "messages",
        "meta",
        "n_blocks",
        "n_chunks",
        "n_messages",
        "outstanding",
        "pending",
        "progress",
        "relay_block",
        "relays",
        "relays_by_call",
        "result_blocks",
        "run_usage",
        "runs",
        "seen",
        "spawn_first_blocks",
        "spawn_lists",
        "spawn_stamps",
        "spawn_triggers",
        "status",
        "summaries_by_first",
        "summaries_of",
        "threads",
        "tips",
        "unresolved",
        "usage_chunks",
        "usage_sums",
        "version",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version = 0
        self.broken = False
        self.log: Paged[Any] = Paged()
        # tiers (append-only)
        self.events: Paged[Event] = Paged()
        self.chunk_block: Ints = array("q")
        self.n_chunks = 0
        self.n_blocks = 0
        self.n_messages = 0
        self.blocks: Paged[_Block] = Paged()
        self.messages: Paged[_Message] = Paged()
        self.block_ids: dict[str, int] = {}
        # block columns (write-once, by block index; a version reads the first ``n_blocks``): what
        # a whole-conversation reader (the DAG input) takes in C-level copies instead of one
        # record read per block (`queries.ShownPaths.block_table`)
        self.block_names: Paged[str] = Paged()
        """Block index -> its id (``block_ids`` inverted)."""
        self.block_kinds: Paged[str] = Paged()
        self.block_runs: Paged[str] = Paged()
        self.block_first_chunks: Ints = array("q")
        self.block_run_previous: Ints = array("q")
        """Block index -> the block before it in its run (-1 for a run's first block)."""
        self.message_ids: dict[str, int] = {}
        self.runs: dict[str, _Run] = {}
        self.threads: dict[str, _Thread] = {}
        # write-once indexes: an entry exists at a version iff its index is below that version's count
        # per tool-call id, every call / result / relay block in order: the k-th call pairs with
        # the k-th result (an agent may reuse a call id across iterations, spec §9 #5)
        self.call_blocks: dict[str, Ints] = {}
        self.result_blocks: dict[str, Ints] = {}
        self.relays_by_call: dict[str, Ints] = {}
        self.relay_block: dict[str, int] = {}
        self.relays: Ints = array("q")
        self.progress: dict[str, Ints] = {}
        self.summaries_by_first: dict[int, Ints] = {}
        self.summaries_of: dict[int, Ints] = {}
        self.seen: dict[str, int] = {}
        # head-only reducer state
        self.key_latest: dict[str, int] = {}
        self.key_count: dict[str, int] = {}
        self.outstanding: dict[str, list[str]] = {}
        self.pending: dict[str, list[str]] = {}
        self.closed = False
        self.closed_runs: dict[str, str | None] = {}
        """Runs `close_stream` closed -> the status to restore if they send again (None: none)."""
        self.active_cache: dict[tuple[str, int | None, int], Any] = {}
        """Memoised `Active` per (thread, tip, summary count); valid for every version."""
        # versioned values
        self.tips: VersionedMap[str, int] = VersionedMap()
        self.status: VersionedMap[str, str] = VersionedMap()
        # write-once facts stamped with the version that made them (cheaper than fat nodes)
        self.links: dict[str, tuple[int, str | None, _Spawn | None]] = {}
        """run -> (stamp, parent run, spawn)."""
        self.spawn_lists: dict[int, list[tuple[int, _Spawn]]] = {}
        """trigger block -> [(stamp, spawn)], stamps ascending."""
        self.spawn_triggers: Ints = array("q")
        self.spawn_first_blocks: Ints = array("q")
        self.spawn_stamps: Ints = array("q")
        """Every spawn in linking order as columns: its trigger block, the first block of the run it
        started, its stamp (ascending: a version's spawns are a prefix)."""
        self.usage_chunks: Ints = array("q")
        self.usage_sums: list[tuple[int, int, int, int]] = []
        """Running totals (input, output, cache read, cache creation) after each usage chunk."""
        self.run_usage: dict[str, Ints] = {}
        self.chosen: VersionedMap[int, int] = VersionedMap()
        self.decisions: VersionedMap[str, RelayDecision] = VersionedMap()
        self.unresolved: VersionedMap[str, tuple[str, ...]] = VersionedMap()
        self.meta: VersionedMap[str, Any] = VersionedMap()
        self.diagnostics: VersionedList[Diagnostic] = VersionedList()


def link_at(store: _Store, run_id: str, version: int) -> tuple[str | None, _Spawn | None]:
    """(parent run, spawn) of ``run_id`` as of ``version``."""
    entry = store.links.get(run_id)
    if entry is None or entry[0] > version:
        return None, None
    return entry[1], entry[2]


def spawns_at(store: _Store, trigger: int, version: int) -> list[_Spawn]:
    """Spawns triggered by block ``trigger`` as of ``version``, in linking order."""
    items = store.spawn_lists.get(trigger)
    if not items:
        return []
    return [spawn for stamp, spawn in items if stamp <= version]


def prefix(items: Ints, limit: int) -> Ints:
    """The leading items of a monotone list that are below ``limit``. O(1) when all are, else
    O(log n + answer)."""
    if not items or items[-1] < limit:
        return items
    return items[: bisect_left(items, limit)]


def paged_head(paged: Any, count: int) -> Iterator[Any]:
    """The first ``count`` items of a `Paged`, read from its pages (C-level iterators, no
    copy). Race-safe against appends: the tail is read before the pages' list is copied, so a page
    sealed meanwhile (a copy of that tail) is read first and cut at ``count``."""
    tail = paged.tail
    return islice(chain(chain.from_iterable(list(paged.pages)), tail), count)


def paged_list[T](paged: Any, count: int) -> list[T]:
    """The first ``count`` items of a `Paged` as one list (a C-level copy of references)."""
    out: list[T] = list(chain.from_iterable(paged.pages))
    out.extend(paged.tail)
    del out[count:]
    return out
