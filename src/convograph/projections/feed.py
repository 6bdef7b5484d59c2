"""The shown chunks of a hypergraph conversation placed in arrival (chunk) order.

`place_shown` walks the shown blocks (`queries.ShownPaths.blocks`, in arrival order of their first
chunk) and places each chunk with `ConversationFeeder.place_chunk` (`ThreadBuilder.place`): the
one-shot build (between `ThreadBuilder.start_fill` and `finish_fill`) and the incremental one place
the same chunks in the same order. A text or reasoning block is placed once, at its first chunk,
with its whole text (a one-shot build places a usage block by its first chunk too, and folds a
progress block's later chunks into their call). Any other block places its chunks in turn; when
other chunks come between them (runs streaming concurrently), its later chunks wait in a heap by
chunk index and are placed at their own positions. A summary on the path is placed before the
first chunk at or after its ``seq``. A chunk whose spawner has not been placed waits and is
retried, in arrival order, after each placement of a spawn trigger; a spawner never shown puts
its thread at the top level.

O(1) amortised per chunk (O(log k) per chunk of a split block). Compiled with mypyc
(`convograph._native`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from heapq import heappop, heappush
from typing import Any

from convograph.graph.nodes import Fragments, TextNode
from convograph.projections.feed_records import FedChunk
from convograph.projections.feeder import ConversationFeeder
from convograph.projections.history import SUMMARY_RUN_PREFIX
from convograph.projections.placement import Level

__all__ = ["place_shown"]

Waiting = list[tuple[FedChunk, str | None]]
"""Chunks waiting for their spawner, each with its block's whole text (text and reasoning)."""


def place_shown(feeder: ConversationFeeder, shown: Any) -> None:
    """Place every shown chunk in chunk order (see the module docstring)."""
    ChunkWalk(feeder, shown).run()


class ChunkWalk:
    """One walk of `place_shown`: the blocks in order, the parts of split blocks (a heap by chunk
    index), the summaries still to place, and the chunks waiting for their spawner. A block's id,
    kind, run and first chunk are read from the shown paths' columns (`ShownPaths.block_table`,
    C-level copies: plain list reads here), its record only for its chunk list."""

    def __init__(self, feeder: ConversationFeeder, shown: Any) -> None:
        self.feeder = feeder
        self.shown = shown
        self.events: tuple[Any, ...] = shown.chunk_events
        self.n_chunks = len(self.events)
        table = shown.block_table()
        self.ids: list[str] = table.ids
        self.kinds: list[str] = table.kinds
        self.runs: list[str] = table.run_ids
        self.firsts: list[int] = table.first_chunks
        self.summaries: list[Any] = list(reversed(shown.summaries))
        self.cut = self._next_cut()
        """Chunk index before which the next summary goes (past the end when none is left)."""
        self.later: list[tuple[int, int, int]] = []
        """``(chunk index, tie-breaker, block position)`` of the later chunks of split blocks."""
        self.waiting: Waiting = []
        self.last_run = ""
        self.last_level: Level | None = None

    def _next_cut(self) -> int:
        return self.summaries[-1].seq - 1 if self.summaries else self.n_chunks + 1

    def run(self) -> None:
        events = self.events
        firsts = self.firsts
        position = 0
        for block in self.shown.blocks():
            at = position
            position += 1
            first = firsts[at]
            self._flush(first)
            block_id = self.ids[at]
            run = self.runs[at]
            kind = self.kinds[at]
            chunks: Sequence[int] = block.chunks
            if len(chunks) == 1:  # (the usual case: nothing more to read)
                self._place(block_id, _shown_kind(kind), run, events[first], None, None)
                continue
            if chunks[-1] >= self.n_chunks:  # (a block of an older version may have newer chunks)
                chunks = [i for i in chunks if i < self.n_chunks]
            if kind == "text" or kind == "reasoning":
                self._place_text(block_id, kind, run, chunks)
                continue
            kind = _shown_kind(kind)
            self._place(block_id, kind, run, events[first], None, None)
            if len(chunks) > 1 and chunks[-1] - first >= len(chunks):  # others come between: split
                for i in chunks[1:]:
                    heappush(self.later, (i, len(self.later), at))
            else:
                self._place_rest(block_id, kind, run, chunks)
        self._flush(self.n_chunks + 2)
        feeder = self.feeder
        for chunk, whole in self.waiting:  # spawner never shown: the top level rather than nowhere
            feeder.show_at_top(chunk.run_id)
            feeder.feed(chunk, whole_block_text=whole)

    def _place_rest(self, block_id: str, kind: str, run: str, chunks: Sequence[int]) -> None:
        """The later chunks of a block, placed in a row after its first. When the first was placed
        in a one-shot build, those of a usage block change nothing, and those of a progress block
        only fold into their call's view (`ConversationFeeder.place_progress`): the first dropped
        the run's pending view and recorded the block, and nothing comes between."""
        feeder = self.feeder
        events = self.events
        one_shot = feeder.triggers is not None and self.last_run == run  # (first placed)
        if one_shot and kind == "usage":
            return
        if one_shot and kind == "tool_progress":
            for i in chunks[1:]:
                feeder.place_progress(events[i])
            return
        for i in chunks[1:]:
            self._place(block_id, kind, run, events[i], None, None)

    def _flush(self, until: int) -> None:
        """Place the parts of split blocks and the summaries that stand before chunk ``until``."""
        later = self.later
        while True:
            part_at = later[0][0] if later else self.n_chunks + 1
            if self.cut <= until and self.cut <= part_at and self.summaries:
                self._place_summary(self.summaries.pop())
                self.cut = self._next_cut()
            elif later and part_at < until:
                at = heappop(later)[2]
                kind = _shown_kind(self.kinds[at])
                self._place(self.ids[at], kind, self.runs[at], self.events[part_at], None, None)
            else:
                return

    def _place_text(self, block_id: str, kind: str, run: str, chunks: Sequence[int]) -> None:
        """A text or reasoning block of several chunks, once, with its whole text and newest
        signature."""
        text, signature = _block_text(self.events, chunks, kind == "reasoning")
        self._place(block_id, kind, run, self.events[chunks[0]], text, signature)

    def _place(
        self, block_id: str, kind: str, run: str, event: Any, whole: str | None, signature: str | None
    ) -> None:
        """Place one chunk, or queue it while its spawner is not placed."""
        feeder = self.feeder
        # (a run's list never changes once known: the last chunk's run is remembered)
        level = self.last_level if run == self.last_run else feeder.level_of_run(run)
        if level is not None:
            self.last_run = run
            self.last_level = level
        else:
            self.waiting.append((FedChunk(block_id, event, kind, run), whole))
            return
        feeder.place_chunk(kind, event, block_id, run, whole, signature, level)
        if self.waiting and (feeder.triggers is None or block_id in feeder.triggers):
            self.waiting = _place_waiting(feeder, self.waiting)

    def _place_summary(self, row: Any) -> None:
        """A summary on the path (`queries.SummaryRow`) as one text node in its thread's list."""
        level = self.feeder.level_of_thread(row.thread_id)
        if level is not None:
            node = TextNode(
                id=row.message_id,
                run_id=f"{SUMMARY_RUN_PREFIX}{row.thread_id}",
                fragments=Fragments(row.text),
            )
            self.feeder.builder.place_node(node, None, level)


def _place_waiting(feeder: ConversationFeeder, waiting: Waiting) -> Waiting:
    """Place the waiting chunks that can be placed now, **in arrival order**; those still waiting.
    Placing a chunk may let earlier waiting chunks in (it spawned their thread): they are tried
    again before the later ones, so a later chunk never overtakes an earlier one of the same
    thread. O(waiting) plus one retry of the skipped chunks per placement."""
    queue = deque(waiting)
    skipped: Waiting = []
    while queue:
        chunk, whole = queue.popleft()
        if not feeder.feed(chunk, whole_block_text=whole):
            skipped.append((chunk, whole))
            continue
        if skipped:
            queue.extendleft(reversed(skipped))
            skipped = []
    return skipped


def _shown_kind(kind: str) -> str:
    """The kind a block's chunks are placed as (a tool exception, ``tool_error``, as an error)."""
    return "error" if kind == "tool_error" else kind


def _block_text(events: tuple[Any, ...], chunks: Sequence[int], reasoning: bool) -> tuple[str, str | None]:
    """A text or reasoning block's text (its chunks' contents joined) and, for reasoning, the newest
    signature sent in it: `queries.joined_text`, compiled here, where it runs once per block of
    several chunks. O(chunks)."""
    text = "".join([events[i].content for i in chunks])
    signature: str | None = None
    if reasoning:
        for i in chunks:
            found: str | None = events[i].signature
            if found is not None:
                signature = found
    return text, signature
