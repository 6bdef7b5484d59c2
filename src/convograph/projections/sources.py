"""The hypergraph (`convograph.hypergraph`) as input to the projections.

A hypergraph conversation is projected by the same placement as a flat graph
(`convograph.projections.placement`): `build_from_conversation` makes the `ThreadBuilder`, a
`ConversationFeeder` (`convograph.projections.feeder`) says what each chunk becomes and which list
it goes to, and `convograph.projections.feed.place_shown` places the shown chunks in arrival
order with `ThreadBuilder.place`, for the one-shot build (a fill: statuses settled at the end) and
the incremental one (then `ConversationFeeder.feed` per new chunk) alike.

Only messages on the active path are shown (``active``), nested threads on their own active path;
a summary message on the path shows as one text view holding the summary. View options default to
``conversation.view`` (``subagents`` other than ``"show"`` hides branches).
`conversation_layout_input` gives the same shown blocks to the DAG layout.

Complexity: O(B + C + T) for the B blocks and C chunks on the shown paths and the T threads, plus
C-level passes over the whole chunk log.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress, repeat
from operator import ge
from typing import Any

from convograph.projections.dag_input import LayoutInput, add_spawn_edges, run_sequence_edges
from convograph.projections.dag_labels import block_labels, compact
from convograph.projections.feed import place_shown
from convograph.projections.feed_records import RunStatuses
from convograph.projections.feeder import ConversationFeeder, queries
from convograph.projections.placement import ThreadBuilder
from convograph.projections.progress import ProgressRegistry
from convograph.projections.view import Status, ViewOptions

__all__ = [
    "ConversationFeeder",
    "build_from_conversation",
    "conversation_layout_input",
    "fill_from_conversation",
    "options_of",
]


def _is_conversation(source: Any) -> bool:
    try:
        from convograph.hypergraph import Conversation
    except ImportError:  # pragma: no cover - the hypergraph ships with the package
        return False
    return isinstance(source, Conversation)


def _unsupported(source: Any) -> TypeError:
    return TypeError(
        f"cannot project a {type(source).__name__}: expected a convograph Graph "
        "or a hypergraph (conversation, active)"
    )


def options_of(conversation: Any) -> ViewOptions:
    """The conversation's selective-view options as thread `ViewOptions`."""
    view = conversation.view
    return ViewOptions(
        hide_reasoning=view.hide_reasoning,
        collapse_tools=view.collapse_tools,
        hide_subagents=view.subagents != "show",
    )


def _resolve_active(conversation: Any, active: Any) -> Any:
    from convograph.hypergraph import default_active

    if active is None:
        return default_active(conversation)
    if not hasattr(active, "message_ids") or not hasattr(active, "thread_id"):
        raise TypeError(f"active must be a hypergraph Active, not {type(active).__name__}")
    return active


def fill_from_conversation(
    conversation: Any,
    active: Any = None,
    *,
    options: ViewOptions | None = None,
    registry: ProgressRegistry | None = None,
    track_changes: bool = False,
    top_level_only: bool = False,
) -> ThreadBuilder:
    """A `ThreadBuilder` filled with the shown paths of a hypergraph conversation.
    ``top_level_only``: the caller reads the top-level views only (`ThreadBuilder`'s option)."""
    return build_from_conversation(
        conversation,
        active,
        options=options,
        registry=registry,
        track_changes=track_changes,
        top_level_only=top_level_only,
    )[0]


def build_from_conversation(
    conversation: Any,
    active: Any = None,
    *,
    options: ViewOptions | None = None,
    registry: ProgressRegistry | None = None,
    track_changes: bool = False,
    top_level_only: bool = False,
) -> tuple[ThreadBuilder, ConversationFeeder]:
    """`fill_from_conversation`, also returning the feeder (for incremental updates)."""
    if not _is_conversation(conversation):
        raise _unsupported(conversation)
    active = _resolve_active(conversation, active)
    options = options if options is not None else options_of(conversation)
    feeder_box: list[ConversationFeeder] = []
    status_of: Callable[[str], Status]
    if track_changes:  # the projector moves the feeder on to newer versions: ask it
        status_of = lambda run_id: feeder_box[0].status_of(run_id)  # noqa: E731
    else:  # one version: a memo whose hits are a dict lookup
        status_of = RunStatuses(conversation).__getitem__
    builder = ThreadBuilder(
        options=options,
        registry=registry,
        track_changes=track_changes,
        status_of=status_of,
        top_level_only=top_level_only,
        by_parent=False,
    )
    feeder = ConversationFeeder(conversation, builder, active.thread_id)
    if not track_changes:
        feeder.use_one_version()
        _prefill_run_levels(feeder, active.thread_id)
    feeder_box.append(feeder)
    shown = queries().shown_paths(conversation, active, nested=not options.hide_subagents)
    if track_changes:
        place_shown(feeder, shown)
        return builder, feeder
    builder.start_fill()
    try:
        place_shown(feeder, shown)
    finally:
        builder.finish_fill()
    return builder, feeder


def _prefill_run_levels(feeder: ConversationFeeder, root: str) -> None:
    """Enter what a one-shot build over one version knows before its first chunk: the runs of the
    requested thread take the top level (as `ConversationFeeder._level_of_run` would give them on
    their first chunk, one Python call per run, most runs being there), and every run's thread, in
    one pass (no parent link is needed, see `ConversationFeeder.link_runs`). When the requested
    thread is the only one, every run is in it and no run record is read
    (`queries.runs_of_only_thread`: the lineage's run ids, those of later versions never asked).
    O(runs), in C-level passes for one thread."""
    q = feeder._q
    conversation = feeder.conversation
    top = feeder.builder.top_level
    feeder._thread_level[root] = top
    only = q.runs_of_only_thread(conversation, root)
    if only is not None:
        feeder._run_level.update(dict.fromkeys(only, top))
        return
    run_threads = q.run_threads(conversation)
    feeder._run_thread.update(run_threads)
    feeder._run_level.update(
        dict.fromkeys([run for run, thread in run_threads.items() if thread == root], top)
    )


def conversation_layout_input(conversation: Any, active: Any = None) -> LayoutInput:
    """Blocks on the shown paths as layout input: sequence edges between consecutive blocks of a
    run, spawn edges from a trigger block to the first block of the run it started. Read in bulk
    from the store's block and spawn columns (`queries.ShownPaths.block_table`,
    `spawn_edge_columns`, `_block_input`); labels that depend on the kind only, or on a tool
    name, are computed once per distinct value (`dag.block_labels`). O(shown blocks + summaries +
    spawns log spawns), mostly in C-level passes."""
    if not _is_conversation(conversation):
        raise _unsupported(conversation)
    active = _resolve_active(conversation, active)
    shown = queries().shown_paths(conversation, active, nested=conversation.view.subagents == "show")
    blocks, labels, sources, targets, parents = _block_input(shown, conversation.chunk_count)
    # Sequence edges are unique and go forward; a spawn edge enters the first block of its run,
    # which no sequence edge enters: dropping self-loops and repeats among the spawn edges (first
    # occurrence kept, as `layout`'s own dedupe would) leaves the edges unique, so `layout` skips
    # its dedupe set (two set operations per edge).
    # (read as columns: no tuple per edge, see `queries.ShownPaths.spawn_edge_columns`). A spawn
    # edge usually enters a run's first block (no sequence predecessor) from a block before it:
    # then ``parents`` stays a parent table and `layout` skips its edge pass (`add_spawn_edges`).
    table = add_spawn_edges(parents, sources, targets, *shown.spawn_edge_columns())
    data = LayoutInput()
    data.edges_unique = True
    summaries = shown.summaries
    if summaries:  # merge them in by seq; block positions shift by the summaries before them
        position = _merge_summaries(data, blocks, labels, summaries)
        data.edge_sources = list(map(position.__getitem__, sources))
        data.edge_targets = list(map(position.__getitem__, targets))
    else:
        data.ids = blocks.ids
        data.kinds = blocks.kinds
        data.labels = labels
        data.runs = blocks.run_ids
        data.edge_sources = sources
        data.edge_targets = targets
        data.parents = table
    return data


def _merge_summaries(data: LayoutInput, blocks: Any, labels: list[str], summaries: list[Any]) -> list[int]:
    """Fill ``data`` with the blocks (`queries.BlockTable`) and the summaries in seq order; the
    position of each block."""
    position: list[int] = []
    rows = list(reversed(summaries))
    for i, first in enumerate(blocks.first_chunks):
        seq = first + 1
        while rows and rows[-1].seq < seq:
            _add_summary_item(data, rows.pop())
        position.append(len(data.ids))
        data.ids.append(blocks.ids[i])
        data.kinds.append(blocks.kinds[i])
        data.labels.append(labels[i])
        data.runs.append(blocks.run_ids[i])
    while rows:
        _add_summary_item(data, rows.pop())
    return position


def _add_summary_item(data: LayoutInput, row: Any) -> None:
    data.ids.append(row.message_id)
    data.kinds.append("summary")
    data.labels.append(compact("summary: " + row.text))
    data.runs.append(f"summary:{row.thread_id}")


def _block_input(shown: Any, n_chunks: int) -> tuple[Any, list[str], list[int], list[int], list[int]]:
    """The shown blocks as layout columns (`queries.BlockTable`: ids, kinds, runs, first chunks,
    read from the store's block columns), the one-line label of every block (`dag.block_labels`,
    compiled: a text or reasoning label reads the head the block's record keeps), then the
    sequence edges (consecutive blocks of a run) by target and each block's sequence predecessor
    (a parent table). When every block is shown, the predecessors are the store's run-predecessor
    column and the edges two C-level passes over it; otherwise `dag.run_sequence_edges` (a
    compiled loop). O(blocks)."""
    from convograph.hypergraph.model import BLOCK_HEAD

    blocks = shown.block_table()
    records = shown.block_records()[0]
    labels = block_labels(
        blocks.kinds, blocks.first_chunks, shown.chunk_events, records, n_chunks, BLOCK_HEAD
    )
    n = len(labels)
    parents = blocks.run_previous
    if parents is None:
        sources, targets, parents = run_sequence_edges(blocks.run_ids)
    else:  # (the sequence edges by target: every block with a predecessor)
        with_parent = list(map(ge, parents, repeat(0)))
        sources = list(compress(parents, with_parent))
        targets = list(compress(range(n), with_parent))
    return blocks, labels, sources, targets, parents
