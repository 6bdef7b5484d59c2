"""The shown chunks of a hypergraph conversation placed in arrival order.

`place_shown` walks `queries.ShownPaths.feed` (a text or reasoning block once, at its first chunk,
with its whole text; every other chunk itself), merges the summaries on the path in by ``seq``, and
places each chunk's node (`ConversationFeeder.chunk_node`) in its thread's list with
`ThreadBuilder.place`: the one-shot build (between `ThreadBuilder.start_fill` and `finish_fill`)
and the incremental one place the same nodes in the same order. A chunk whose spawner has not been
placed waits and is retried, in arrival order, after every placement; a spawner never shown puts
its thread at the top level. O(1) amortised per chunk. Compiled with mypyc (`convograph._native`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from typing import Any

from convograph.graph.nodes import Fragments, TextNode
from convograph.projections.feed_records import FedChunk
from convograph.projections.feeder import ConversationFeeder
from convograph.projections.history import SUMMARY_RUN_PREFIX

__all__ = ["place_shown"]

Waiting = list[tuple[FedChunk, str | None]]
"""Chunks waiting for their spawner, each with its block's whole text (text and reasoning)."""


def place_shown(feeder: ConversationFeeder, shown: Any) -> None:
    """Place every shown chunk in arrival order (see the module docstring). Every block's node
    and list is recorded in the feeder (an incremental projector continues from it)."""
    events, fed_blocks, seqs, texts, signatures = shown.feed()
    cuts = [(bisect_left(seqs, row.seq), row) for row in shown.summaries]  # summary after chunk i
    cuts.append((len(events), None))
    waiting: Waiting = []
    start = 0
    for stop, row in cuts:
        for i in range(start, stop):
            event = events[i]
            block = fed_blocks[i]
            kind: str = block.kind
            if kind == "tool_error":
                kind = "error"
            level = feeder.level_of_run(block.run)
            if level is None:  # its spawner has not been placed yet
                waiting.append((FedChunk(block.id, event, kind, block.run), texts.get(block.id)))
                continue
            whole = texts.get(block.id) if kind == "text" or kind == "reasoning" else None
            signature = signatures.get(block.id) if kind == "reasoning" else None
            feeder.place_chunk(kind, event, block.id, block.run, whole, signature, level)
            if waiting:  # a late spawner may have arrived
                waiting = _place_waiting(feeder, waiting)
        start = stop
        if row is not None:
            _place_summary(feeder, row)
    for chunk, whole_text in waiting:  # spawner never shown: the top level rather than nowhere
        feeder.show_at_top(chunk.run_id)
        feeder.feed(chunk, whole_block_text=whole_text)


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


def _place_summary(feeder: ConversationFeeder, row: Any) -> None:
    """A summary on the path (`queries.SummaryRow`) as one text node in its thread's list."""
    level = feeder.level_of_thread(row.thread_id)
    if level is not None:
        node = TextNode(
            id=row.message_id, run_id=f"{SUMMARY_RUN_PREFIX}{row.thread_id}", fragments=Fragments(row.text)
        )
        feeder.builder.place_node(node, None, level)
