"""The shown chunks of a hypergraph conversation in arrival order, as thread placements.

`placements` walks `queries.ShownPaths.feed` (a text or reasoning block once, at its first chunk,
with its whole text; every other chunk itself), merges the summaries on the path in by ``seq``, and
yields each chunk's node (`ConversationFeeder.chunk_node`) with its thread's list, for
`ThreadBuilder.add_placed` (one-shot) or `ThreadBuilder.add_in` (incremental): both builds place
the same nodes in the same order. It is lazy: a placement is computed only after the builder has
placed every earlier one, since a thread's list depends on its spawner's view. A chunk whose
spawner has not been placed waits and is retried, in arrival order, after every placement; a
spawner never shown puts its thread at the top level. O(1) amortised per chunk.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import Any

from convograph.graph.nodes import Fragments, Node, TextNode
from convograph.projections.feeder import ConversationFeeder, FedChunk
from convograph.projections.history import SUMMARY_RUN_PREFIX
from convograph.projections.placement import Level

__all__ = ["placements"]

Placement = tuple[Node, None, Level]
"""``(node, no parent, its list)``: what `ThreadBuilder.add_placed` takes."""
Waiting = list[tuple[FedChunk, str | None]]
"""Chunks waiting for their spawner, each with its block's whole text (text and reasoning)."""


def placements(feeder: ConversationFeeder, shown: Any) -> Iterator[Placement]:
    """Every shown chunk's placement, in arrival order (see the module docstring). Every block's
    node and list is recorded in the feeder (an incremental projector continues from it)."""
    events, fed_blocks, seqs, texts, signatures = shown.feed()
    waiting: Waiting = []
    for segment, row in _segments(events, fed_blocks, seqs, shown.summaries):
        for event, block in segment:
            kind = "error" if block.kind == "tool_error" else block.kind
            level = feeder.level_of_run(block.run)
            if level is None:  # its spawner has not been placed yet
                waiting.append((FedChunk(block.id, event, kind, block.run), texts.get(block.id)))
                continue
            whole = texts.get(block.id) if kind == "text" or kind == "reasoning" else None
            signature = signatures.get(block.id) if kind == "reasoning" else None
            node = feeder.chunk_node(kind, event, block.id, block.run, whole, signature)
            feeder.record_block(block.id, node, level)
            if node is not None:
                yield node, None, level
            if waiting:  # a late spawner may have arrived
                waiting = yield from _drain(feeder, waiting)
        if row is not None:
            summary = _summary_placement(feeder, row)
            if summary is not None:
                yield summary
    for chunk, whole in waiting:  # spawner never shown: the top level rather than nowhere
        feeder.show_at_top(chunk.run_id)
        _, node, level = feeder.prepare(chunk, whole)
        if node is not None and level is not None:
            yield node, None, level


def _segments(
    events: Sequence[Any], fed_blocks: Sequence[Any], seqs: Sequence[int] | None, summaries: Iterable[Any]
) -> Iterator[tuple[Iterator[tuple[Any, Any]], Any]]:
    """The feed cut into ``(chunks, summary)`` segments: a summary goes after the chunks before its
    ``seq`` (never a shown chunk's); the last segment's summary is None. O(summaries x log chunks)
    plus the slices."""
    cuts: list[tuple[int, Any]] = [(bisect_left(seqs or (), row.seq), row) for row in summaries]
    cuts.append((len(events), None))
    start = 0
    for stop, row in cuts:
        yield zip(events[start:stop], fed_blocks[start:stop], strict=True), row
        start = stop


def _drain(feeder: ConversationFeeder, waiting: Waiting) -> Generator[Placement, None, Waiting]:
    """Yield the placements of the waiting chunks that can be placed now, **in arrival order**;
    return those still waiting. Placing a chunk may let earlier waiting chunks in (it spawned their
    thread): they are tried again before the later ones, so a later chunk never overtakes an
    earlier one of the same thread. O(waiting) plus one retry of the skipped chunks per placement."""
    queue = deque(waiting)
    skipped: Waiting = []
    while queue:
        chunk, whole = queue.popleft()
        placed, node, level = feeder.prepare(chunk, whole)
        if not placed:
            skipped.append((chunk, whole))
            continue
        if node is not None and level is not None:
            yield node, None, level
        if skipped:
            queue.extendleft(reversed(skipped))
            skipped = []
    return skipped


def _summary_placement(feeder: ConversationFeeder, row: Any) -> Placement | None:
    """A summary on the path (`queries.SummaryRow`) as one text node in its thread's list."""
    level = feeder.level_of_thread(row.thread_id)
    if level is None:
        return None
    node = TextNode(
        id=row.message_id, run_id=f"{SUMMARY_RUN_PREFIX}{row.thread_id}", fragments=Fragments(row.text)
    )
    return node, None, level
