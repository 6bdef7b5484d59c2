"""The hypergraph (`convograph.hypergraph`) as input to the projections.

A `ConversationFeeder` turns hypergraph chunks into flat-graph `Node` values and places them with
the shared `ThreadBuilder`, so both models give the same kind of views by the same rules. Placement
follows the hypergraph's own structure instead of parent edges:

- a chunk goes to the list of its run's **thread**: the requested thread (``active.thread_id``,
  usually ``"main"``) is the top level; a spawned thread (subagent, REPL child) goes to a new branch
  of the view of the block that spawned it, or is spliced into the spawner's list when that block
  has no view (a ``repl_input``); provider calls share their agent's thread;
- only messages on the active path are shown (``active``), nested threads on their own active path;
  a summary message on the path shows as one text view holding the summary;
- chunks are fed in arrival order (``seq``), so content is never reordered.

Statuses are the hypergraph's (`queries.run_status`; ``aborted`` shows as ``error``). View options
default to ``conversation.view`` (``subagents`` other than ``"show"`` hides branches).

A one-shot build reads the shown paths in bulk (`queries.shown_paths`: the blocks' own records in
arrival order and the events by chunk index, with no record or sort key per chunk) and places them
block by block (`_fill_one_shot`); the DAG input reads `ShownPaths.block_records` (the blocks' own
records, once each). No tracked object is kept per chunk or block, so the cyclic GC sees only what
the builder keeps.

Complexity: one-shot O(B log B + C + T) in Python for the B blocks and C chunks on the shown paths
and the T threads, plus C-level passes over the whole chunk log; the feeder's per-chunk work is
O(1) amortised, which the incremental `ConversationProjector` relies on.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from heapq import heappop, heappush
from itertools import compress, repeat
from operator import ge
from typing import Any, Final, NamedTuple

import msgspec

from convograph.graph.nodes import (
    ErrorNode,
    Fragments,
    HarnessEndNode,
    HarnessStartNode,
    Node,
    ReasoningNode,
    RelayNode,
    TextNode,
    ToolCallNode,
    ToolProgressNode,
    ToolResultNode,
    UsageNode,
    UserNode,
)
from convograph.projections.dag import (
    LayoutInput,
    add_spawn_edges,
    block_labels,
    compact,
    run_sequence_edges,
)
from convograph.projections.history import SUMMARY_RUN_PREFIX
from convograph.projections.progress import _EXEC_INIT, ExecAccumulator, ProgressRegistry
from convograph.projections.thread import (
    RESULT_SUFFIX,
    ReplInputNode,
    ReplOutputNode,
    ReplProgressNode,
    ThreadBuilder,
    _Level,
    _Memo,
    _Run,
    _unsealed,
)
from convograph.projections.view import (
    PendingContent,
    ReasoningContent,
    RelayContent,
    ReplResult,
    Status,
    TextContent,
    ToolCallContent,
    UserContent,
    ViewNode,
    ViewOptions,
)

__all__ = [
    "ConversationFeeder",
    "build_from_conversation",
    "conversation_layout_input",
    "fill_from_conversation",
    "options_of",
]

_SPAWNED_THREAD_KINDS: Final = frozenset({"subagent", "repl"})
MAIN_THREAD: Final = "main"


def _queries() -> Any:
    from convograph.hypergraph import queries

    return queries


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


class ConversationFeeder:
    """Feeds hypergraph chunks into a `ThreadBuilder` (see the module docstring)."""

    def __init__(self, conversation: Any, builder: ThreadBuilder, root_thread: str) -> None:
        self.conversation = conversation
        self.builder = builder
        self.root_thread = root_thread
        self._q = _queries()
        self._thread_level: dict[str, _Level] = {}
        self._run_thread: dict[str, str] = {}
        self._run_level: dict[str, _Level] = {}
        """run id -> its thread's list, once known (a thread's list never changes once set)."""
        self._blocks: dict[str, tuple[str | None, int]] = {}
        """block id -> (the node it became, if any; the index of the list it is in, see
        `ThreadBuilder.level_at`: plain values keep these records untracked by the GC)."""
        self._texts: dict[str, Fragments] = {}
        self._used_ids: dict[str, int] = {}
        self._usage: dict[str, int] = {}
        self._statuses: dict[str, Status] = {}
        self._statuses_of: Any = None
        """The conversation ``_statuses`` was computed for (a run's status is fixed per version)."""
        self.orphans: set[str] = set()
        """Threads shown at the top because their parent had not arrived (re-placed on arrival)."""
        self.saw_repl = False
        """A ``repl_*`` chunk was fed (placed as a REPL cell only with ``ViewOptions.repl_cells``):
        a request history must then be built with the cells (`ConversationProjector.messages`)."""
        self.link_runs = True
        """Tell the builder which run spawned which (`ThreadBuilder.link_run`): it re-stamps the
        views of lifecycle-less child runs when a status changes. A one-shot build over one version
        turns it off: its builder takes every status, inherited ones included, from that version
        (`queries.run_status`), so nothing is ever re-stamped."""

    def status_of(self, run_id: str) -> Status:
        """The hypergraph's status of ``run_id`` (``aborted`` shows as ``error``), memoised per
        conversation version: the builder asks once per view and lifecycle re-stamp."""
        conversation = self.conversation
        if self._statuses_of is not conversation:
            self._statuses = {}
            self._statuses_of = conversation
        status = self._statuses.get(run_id)
        if status is None:
            status = self._q.run_status(conversation, run_id)
            if status == "aborted":
                status = "error"
            self._statuses[run_id] = status
        return status

    # -- levels --------------------------------------------------------------------------------------

    def _level_of_thread(self, thread_id: str) -> _Level | None:
        level = self._thread_level.get(thread_id)
        if level is not None:
            return level
        if thread_id == self.root_thread:
            level = self.builder.top_level
        else:
            spawn = self._q.spawn_row(self.conversation, thread_id)
            if spawn is None:  # its parent has not arrived: shown at the top until it does
                level = self.builder.top_level
                self.orphans.add(thread_id)
            else:
                spawn_kind, trigger_block_id = spawn
                if spawn_kind in _SPAWNED_THREAD_KINDS and self.builder.options.hide_subagents:
                    level = self.builder.sink_level
                else:
                    trigger = self._blocks.get(trigger_block_id)
                    if trigger is None:
                        return None  # the spawner has not been placed yet
                    node_id, trigger_index = trigger
                    trigger_level = self.builder.level_at(trigger_index)
                    if spawn_kind in _SPAWNED_THREAD_KINDS:
                        level = self.builder.spawn_level(node_id, trigger_level)
                    else:  # a reply or provider call continues its trigger's list
                        level = trigger_level
        self._thread_level[thread_id] = level
        return level

    def show_at_top(self, run_id: str) -> None:
        """Place the thread of ``run_id`` at the top level (its spawner is not shown)."""
        thread = self._run_thread.get(run_id) or self._q.run_thread(self.conversation, run_id)[0]
        self._run_thread[run_id] = thread
        self._thread_level.setdefault(thread, self.builder.top_level)

    def _level_of_run(self, run_id: str) -> _Level | None:
        level = self._run_level.get(run_id)
        if level is not None:
            return level
        thread = self._run_thread.get(run_id)
        if thread is None:
            thread, parent_run_id = self._q.run_thread(self.conversation, run_id)
            if parent_run_id is not None and self.link_runs:
                self.builder.link_run(run_id, parent_run_id)
            self._run_thread[run_id] = thread
        level = self._level_of_thread(thread)
        if level is not None:
            self._run_level[run_id] = level
        return level

    # -- chunks --------------------------------------------------------------------------------------

    def _unique(self, node_id: str) -> str:
        count = self._used_ids.get(node_id)
        if count is None:
            self._used_ids[node_id] = 1
            return node_id
        self._used_ids[node_id] = count + 1
        return f"{node_id}#{count + 1}"

    def feed(self, chunk: Any, *, whole_block_text: str | None = None) -> bool:
        """Place one chunk; False when its thread's spawner has not been placed yet.

        A text / reasoning chunk opens its block's node or appends to it; with
        ``whole_block_text`` the node is created with the block's full text at once.
        """
        placed, node, level = self.prepare(chunk, whole_block_text)
        if node is not None:
            self.builder.add_in(node, level)  # type: ignore[arg-type]
        return placed

    def prepare(
        self, chunk: Any, whole_block_text: str | None = None
    ) -> tuple[bool, Node | None, _Level | None]:
        """`feed` up to the builder: ``(placed, the new node or None, its list)``. The caller adds
        the node to the builder before preparing the next chunk."""
        block_id = chunk.block_id
        known = self._blocks.get(block_id)
        event = chunk.event
        kind = chunk.kind
        if known is not None and kind in ("text", "reasoning"):
            node_id = known[0]
            if node_id is None or whole_block_text is not None:
                return True, None, None
            fragments = self._texts[block_id].append(event.content)
            self._texts[block_id] = fragments
            self.builder.update(self._text_node(kind, node_id, chunk.run_id, fragments, event))
            return True, None, None
        level = self._run_level.get(chunk.run_id) or self._level_of_run(chunk.run_id)
        if level is None:
            return False, None, None
        node = self._node(chunk, event, kind, block_id, whole_block_text)
        if known is None:
            self._blocks[block_id] = (node.id if node is not None else None, level.index)
        return True, node, level

    @staticmethod
    def _text_node(
        kind: str, node_id: str, run_id: str, fragments: Fragments, event: Any, signature: str | None = None
    ) -> Node:
        if kind == "reasoning":
            return ReasoningNode(
                id=node_id,
                run_id=run_id,
                fragments=fragments,
                signature=signature or event.signature,
                redacted_data=event.redacted_data,
            )
        return TextNode(id=node_id, run_id=run_id, fragments=fragments)

    def _block_signature(self, block_id: str) -> str | None:
        """The newest thinking signature in a reasoning block (providers often send it last,
        in a chunk of its own). O(chunks in the block)."""
        found = None
        for chunk in self._q.chunks_of(self.conversation, block_id):
            signature = getattr(chunk.event, "signature", None)
            if signature is not None:
                found = signature
        return found

    def _node(self, chunk: Any, event: Any, kind: str, block_id: str, whole: str | None) -> Node | None:
        run = chunk.run_id
        if kind in ("text", "reasoning"):
            fragments = Fragments(whole if whole is not None else event.content)
            self._texts[block_id] = fragments
            signature = self._block_signature(block_id) if kind == "reasoning" and whole is not None else None
            return self._text_node(kind, self._unique(event.id), run, fragments, event, signature)
        if kind == "tool_call":
            return ToolCallNode(id=event.id, run_id=run, name=event.name, input=event.input)
        if kind == "tool_result":
            return ToolResultNode(
                id=self._unique(f"{event.id}:result"), run_id=run, name=event.name, output=event.output
            )
        if kind == "tool_progress":
            return ToolProgressNode(
                id=self._unique(event.id),
                run_id=run,
                tool_call_id=event.tool_call_id,
                name=event.name,
                content=event.content,
            )
        if kind == "user":
            return UserNode(id=self._unique(f"{run}:user"), run_id=run, content=event.content)
        if kind == "harness_start":
            return HarnessStartNode(
                id=self._unique(f"{run}:harness_start"), run_id=run, agent_id=event.agent_id
            )
        if kind == "harness_end":
            return HarnessEndNode(id=self._unique(f"{run}:harness_end"), run_id=run, agent_id=event.agent_id)
        if kind == "error":
            return ErrorNode(id=self._unique(f"{run}:error"), run_id=run, message=event.message)
        if kind == "usage":
            count = self._usage.get(run, 0)
            self._usage[run] = count + 1
            return UsageNode(
                id=f"{run}:usage:{count}",
                run_id=run,
                input_tokens=event.input_tokens,
                output_tokens=event.output_tokens,
            )
        if kind == "relay":
            return RelayNode(
                id=self._unique(event.id),
                run_id=run,
                relay_kind=event.kind,
                tool_call_id=event.tool_call_id,
                tool=event.tool,
                params=event.params,
            )
        if kind.startswith("repl_"):
            self.saw_repl = True
            if self.builder.options.repl_cells:
                return self._repl_node(event, kind, run)
        return None  # repl_* (unless ``repl_cells``) and anything else: structural, no node

    def _repl_node(self, event: Any, kind: str, run: str) -> Node | None:
        if kind == "repl_input":
            return ReplInputNode(  # type: ignore[return-value]
                id=self._unique(event.id), run_id=run, code=event.code, iteration=event.iteration
            )
        if kind == "repl_progress":
            return ReplProgressNode(  # type: ignore[return-value]
                id=self._unique(f"{event.id}:progress"),
                run_id=run,
                repl_id=event.id,
                chunk=event.chunk,
                stream=event.stream,
            )
        if kind == "repl_output":
            result = ReplResult(
                stdout=event.stdout,
                error=event.error,
                done=event.done,
                duration_ms=event.duration_ms,
                truncated=bool(event.truncated),
            )
            return ReplOutputNode(  # type: ignore[return-value]
                id=self._unique(f"{event.id}:output"), run_id=run, repl_id=event.id, result=result
            )
        return None

    def add_summary(self, message: Any, thread_id: str) -> None:
        node, level = self.summary_node(message, thread_id)
        if node is not None:
            self.builder.add_in(node, level)  # type: ignore[arg-type]

    def summary_node(self, message: Any, thread_id: str) -> tuple[Node | None, _Level | None]:
        """The text node standing for a summary message on the path, and its list."""
        level = self._level_of_thread(thread_id)
        if level is None or message.summary is None:
            return None, None
        node = TextNode(
            id=message.id,
            run_id=f"{SUMMARY_RUN_PREFIX}{thread_id}",
            fragments=Fragments(message.summary.text),
        )
        return node, level


class _Statuses(dict[str, Status]):
    """Run id -> the hypergraph's status of that run in one conversation version (``aborted`` shows
    as ``error``), computed on first access (`ConversationFeeder.status_of` for a fixed version).

    On the first access the runs with a lifecycle are entered in bulk (`queries.own_run_statuses`:
    one dict copy, no Python call per run), and so are the runs without one whose parent has one
    (`queries.run_parents`: a provider run takes its agent's), so asking for either is then a
    C-level dict hit; any other run walks. O(runs with a status) once; O(1) per run asked, beyond
    the walks. (A builder that never asks, `project_messages`' top-level build, pays nothing.)"""

    def __init__(self, conversation: Any) -> None:
        super().__init__()
        self.conversation = conversation
        self.step = _queries().run_status_step
        self.filled = False

    def _fill(self) -> None:
        self.filled = True
        q = _queries()
        own = q.own_run_statuses(self.conversation)
        self.update(own)
        if "aborted" in own.values():  # (shown as ``error``; `close_stream` leaves it, rarely)
            for run_id, status in own.items():
                if status == "aborted":
                    self[run_id] = "error"
        # and, in one pass, the runs without one whose parent has one (`__missing__`'s first step)
        get = self.get
        inherited = {
            run: status
            for run, parent in q.run_parents(self.conversation).items()
            if (status := get(parent)) is not None and run not in own
        }
        self.update(inherited)

    def __missing__(self, run_id: str) -> Status:
        """Once the runs with a lifecycle are entered, ``run_id`` has none of its own: its parent's
        status when memoised, else `queries.run_status`'s walk up the spawn links, stopped at the
        first run already known (its answer is that walk's from there: a walk that came back to
        this chain would be a cycle, found as such from either end); every run walked is memoised."""
        if not self.filled:
            self._fill()
            known = self.get(run_id)
            if known is not None:
                return known
        step = self.step
        conversation = self.conversation
        found, parent = step(conversation, run_id)
        if found is None and parent is not None:
            known = self.get(parent)
            if known is not None:  # the usual case: a provider run below its agent
                self[run_id] = known
                return known
        chain = [run_id]
        seen = {run_id}
        current = run_id
        while True:
            if found is not None:
                break
            if parent is None or parent in seen:  # a root without lifecycle, or a cycle
                found = "streaming"
                break
            known = self.get(parent)
            if known is not None:
                found = known
                break
            chain.append(parent)
            seen.add(parent)
            current = parent
            found, parent = step(conversation, current)
        status: Status = "error" if found == "aborted" else found
        for run in chain:
            self[run] = status
        return status


class FedChunk(NamedTuple):
    """What the feeder reads of a chunk (the one-shot path builds one only for a chunk that waits
    for its spawner; the incremental projector passes `queries.Chunk` records)."""

    block_id: str
    event: Any
    kind: str
    run_id: str


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
    else:  # one version: a memo whose hits are a C-level dict lookup
        status_of = _Statuses(conversation).__getitem__
    # passed only when set, so this also runs against a builder without the option
    extra: dict[str, Any] = {"top_level_only": True} if top_level_only else {}
    builder = ThreadBuilder(
        options=options, registry=registry, track_changes=track_changes, status_of=status_of, **extra
    )
    feeder = ConversationFeeder(conversation, builder, active.thread_id)
    feeder.link_runs = track_changes
    if not track_changes:
        _prefill_run_levels(feeder, active.thread_id)
    feeder_box.append(feeder)
    shown = _queries().shown_paths(conversation, active, nested=not options.hide_subagents)
    if track_changes:
        for node, _, level in _placements(feeder, shown.feed(), shown.summaries):
            builder.add_in(node, level)
    else:
        _fill_one_shot(feeder, shown)
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


def _segments(
    events: Sequence[Any], fed_blocks: Sequence[Any], seqs: Sequence[int], summaries: Iterable[Any]
) -> Iterator[tuple[Iterator[tuple[Any, Any]], Any]]:
    """The feed cut into ``(chunks, summary)`` segments: summaries go between the chunks by seq (a
    summary's seq is never a shown chunk's), each after the chunks before it; the last segment's
    summary is None. O(summaries x log chunks) plus the slices."""
    cuts: list[tuple[int, Any]] = [(bisect_left(seqs, row.seq), row) for row in summaries]
    cuts.append((len(events), None))
    start = 0
    for stop, row in cuts:
        if start == 0 and stop == len(events):
            yield zip(events, fed_blocks, strict=True), row
        else:
            yield zip(events[start:stop], fed_blocks[start:stop], strict=True), row
        start = stop


def _placements(
    feeder: ConversationFeeder, columns: Any, summaries: list[Any]
) -> Iterator[tuple[Node, None, _Level]]:
    """The nodes of the shown chunks (`queries.ShownPaths.feed`, in arrival order, summaries merged
    in by ``seq``) with their lists, for an incremental builder (`ThreadBuilder.add_in`):
    `ConversationFeeder.prepare` inlined for a whole conversation. Lazy: a placement is computed
    only after the builder has added every earlier node (a thread's list depends on its spawner's
    view). Chunks whose spawner has not been placed wait and are retried after every placement;
    spawners never shown put their threads at the top level. Every block's placement and text is
    kept in the feeder (the projector continues from it). The one-shot build is `_fill_one_shot`.
    O(1) amortised per chunk."""
    events, fed_blocks, seqs, texts, signatures = columns
    blocks = feeder._blocks
    blocks_get = blocks.get
    run_level_get = feeder._run_level.get
    level_of_run = feeder._level_of_run
    # `ConversationFeeder._unique` is inlined below at each node kind (the same four lines, on purpose: a
    # method call per chunk costs ~5-8 ms on a 100k-chunk one-shot).
    used = feeder._used_ids
    used_get = used.get
    usage = feeder._usage
    feeder_texts = feeder._texts
    deferred: list[tuple[Any, str | None]] = []
    for segment, row in _segments(events, fed_blocks, seqs, summaries):
        for event, block in segment:
            block_id = block.id
            run = block.run
            kind = block.kind
            level = run_level_get(run)
            if level is None:
                level = level_of_run(run)
                if level is None:
                    whole = texts.get(block_id)
                    if kind == "tool_error":
                        kind = "error"
                    deferred.append((FedChunk(block_id, event, kind, run), whole))
                    continue
            node: Node | None
            if kind == "tool_progress":
                node_id = event.id
                count = used_get(node_id)
                if count is None:
                    used[node_id] = 1
                else:
                    used[node_id] = count + 1
                    node_id = f"{node_id}#{count + 1}"
                node = ToolProgressNode(
                    id=node_id,
                    run_id=run,
                    tool_call_id=event.tool_call_id,
                    name=event.name,
                    content=event.content,
                )
            elif kind == "text" or kind == "reasoning":
                node_id = event.id
                count = used_get(node_id)
                if count is None:
                    used[node_id] = 1
                else:
                    used[node_id] = count + 1
                    node_id = f"{node_id}#{count + 1}"
                fragments = Fragments(texts[block_id])
                feeder_texts[block_id] = fragments
                if kind == "text":
                    node = TextNode(id=node_id, run_id=run, fragments=fragments)
                else:
                    node = ReasoningNode(
                        id=node_id,
                        run_id=run,
                        fragments=fragments,
                        signature=signatures.get(block_id) or event.signature,
                        redacted_data=event.redacted_data,
                    )
            elif kind == "tool_call":
                node = ToolCallNode(id=event.id, run_id=run, name=event.name, input=event.input)
            elif kind == "tool_result":
                node_id = f"{event.id}:result"
                count = used_get(node_id)
                if count is None:
                    used[node_id] = 1
                else:
                    used[node_id] = count + 1
                    node_id = f"{node_id}#{count + 1}"
                node = ToolResultNode(id=node_id, run_id=run, name=event.name, output=event.output)
            elif kind == "usage":
                count = usage.get(run, 0)
                usage[run] = count + 1
                node = UsageNode(
                    id=f"{run}:usage:{count}",
                    run_id=run,
                    input_tokens=event.input_tokens,
                    output_tokens=event.output_tokens,
                )
            elif kind == "harness_start" or kind == "harness_end":
                node_id = f"{run}:{kind}"
                count = used_get(node_id)
                if count is None:
                    used[node_id] = 1
                else:
                    used[node_id] = count + 1
                    node_id = f"{node_id}#{count + 1}"
                if kind == "harness_start":
                    node = HarnessStartNode(id=node_id, run_id=run, agent_id=event.agent_id)
                else:
                    node = HarnessEndNode(id=node_id, run_id=run, agent_id=event.agent_id)
            else:
                if kind == "tool_error":
                    kind = "error"
                node = feeder._node(FedChunk(block_id, event, kind, run), event, kind, block_id, None)
            if blocks_get(block_id) is None:
                blocks[block_id] = (node.id if node is not None else None, level.index)
            if node is not None:
                yield node, None, level
            if deferred:  # a late spawner may have arrived: place what waited, in arrival order
                deferred = yield from _drain(feeder, deferred, None)
        if row is not None:
            summary, summary_level = _summary_node(feeder, row)
            if summary is not None:
                yield summary, None, summary_level  # type: ignore[misc]
    for chunk, whole in deferred:  # spawner never shown: the top level rather than nowhere
        feeder.show_at_top(chunk.run_id)
        _, node, level = feeder.prepare(chunk, whole)
        if node is not None:
            yield node, None, level  # type: ignore[misc]


def _chunk_node(
    feeder: ConversationFeeder, event: Any, block_id: str, kind: str, run: str, text: Any, signature: Any
) -> Node | None:
    """The node `_placements` makes of one shown chunk (``kind``: its block's; ``text`` and
    ``signature``: a text or reasoning block's whole text and newest signature, see
    `queries.joined_text`), with the same unique-id and usage counters: `_fill_blocks`' path for
    spawn triggers and rare kinds."""
    if kind in ("text", "reasoning"):
        node_id = feeder._unique(event.id)
        fragments = Fragments(text)
        if kind == "text":
            return TextNode(id=node_id, run_id=run, fragments=fragments)
        return ReasoningNode(
            id=node_id,
            run_id=run,
            fragments=fragments,
            signature=signature or event.signature,
            redacted_data=event.redacted_data,
        )
    if kind == "tool_progress":
        return ToolProgressNode(
            id=feeder._unique(event.id),
            run_id=run,
            tool_call_id=event.tool_call_id,
            name=event.name,
            content=event.content,
        )
    if kind in ("harness_start", "harness_end"):
        node_id = feeder._unique(f"{run}:{kind}")
        if kind == "harness_start":
            return HarnessStartNode(id=node_id, run_id=run, agent_id=event.agent_id)
        return HarnessEndNode(id=node_id, run_id=run, agent_id=event.agent_id)
    if kind == "tool_error":
        kind = "error"
    # tool_call, tool_result, usage, user, relay, error, repl_*: as the incremental feeder makes them
    return feeder._node(FedChunk(block_id, event, kind, run), event, kind, block_id, None)


_WHOLE_KINDS: Final = frozenset({"text", "reasoning"})
"""Block kinds placed once, with their whole text (`queries.ShownPaths.feed`'s ``texts``), and
whose DAG label reads the joined text of their first chunks."""

_SEVERAL: Final = "several chunks"
"""`_fill_blocks`' kind for a block of several chunks of a kind not in `_BATCHED`."""

_BATCHED: Final = frozenset({"tool_progress", "usage"})
"""Kinds, beyond text and reasoning, whose blocks of several chunks `_fill_blocks` places in one
step (a block of several chunks of any other kind goes through the builder a chunk at a time)."""


def _fill_one_shot(feeder: ConversationFeeder, shown: Any) -> None:
    """Place the shown paths (`queries.ShownPaths`: blocks in arrival order, summaries merged in
    by ``seq``) into the feeder's one-shot builder: `_placements` and the builder's one-shot loop
    (`ThreadBuilder._place_many`, given-list case) fused, so the common kinds (text, reasoning,
    tool call / result / progress, usage, lifecycle, user, relay) make their views straight from
    the events, with no `Node` record, placement tuple or generator step per chunk. Everything
    else (spawn triggers, errors, REPL chunks, chunks waiting for their spawner, summaries, blocks
    of several chunks of another kind) goes through `_chunk_node` / `ConversationFeeder.prepare`
    and `ThreadBuilder._place_many`, one node at a time. The golden-output tests and the
    projector-equals-one-shot property tests (the projector places through `_placements` and
    `ThreadBuilder.add_in`) hold the paths equal.

    What the fused path leaves out, because nothing reads it in a one-shot build over one version:
    the builder's ``_placed`` / ``_view_of`` entries of non-trigger nodes (read only to place a
    child by its parent, which the hypergraph never asks, to place a spawned thread under its
    trigger, and by incremental updates) and the feeder's per-block records (only triggers'
    are read). Its views get their statuses when made, so the builder's settle pass at the end
    visits only the views made through the builder. O(1) amortised per chunk; no tracked object
    is kept per chunk."""
    builder = feeder.builder
    settle = builder._open_one_shot()
    try:
        _fill_blocks(feeder, builder, shown)
    finally:
        builder._close_one_shot(settle)


def _fill_blocks(feeder: ConversationFeeder, builder: ThreadBuilder, shown: Any) -> None:
    """The loop of `_fill_one_shot`, over blocks rather than chunks: a block's chunks are placed in
    one step, at its first chunk, which is the chunk order (`ShownPaths.feed`'s, the incremental
    projector's) when no other chunk comes between them: a text or reasoning block is placed once,
    with its whole text, and its later chunks are not placed at all; a block of one chunk, or
    whose chunks are consecutive, has nothing between them (nor a summary, whose place is the first
    chunk of a block). A block that breaks this (chunks of runs streaming concurrently) is split:
    its chunks go, as `_Part` records, into a heap by chunk index, and from the first such block on
    the walk takes the blocks with the parts merged in (`_merged`), so every chunk is placed in
    chunk order. A summary is placed before the first block whose first chunk is not before the
    summary's ``seq`` (the chunks before it are placed first, as `_segments` cuts the feed).
    Chunks waiting for their spawner are retried after each chunk of a spawn trigger only: nothing
    else gives a waiting thread its list. O(1) amortised per chunk in Python (O(log k) per part of
    a split block), no copy of the chunks."""
    events = shown.chunk_events
    n_chunks = len(events)
    whole = _WHOLE_KINDS
    batched = _BATCHED
    clip = _prefix()
    joined_text = _queries().joined_text
    rows = iter(shown.summaries)
    row = next(rows, None)
    # place ``row`` before chunk index ``cut`` and on; no summary left: ``n_chunks``, which no chunk
    # index reaches (an int the interpreter compares in its fast path, as it does the indexes)
    cut = n_chunks if row is None else row.seq - 1
    run_level_get = feeder._run_level.get
    level_of_run = feeder._level_of_run
    # `ConversationFeeder._unique` is inlined at each node kind (the same four lines, on purpose: a
    # method call per chunk costs ~5-8 ms on a 100k-chunk one-shot).
    used = feeder._used_ids
    usage = feeder._usage
    usage_get = usage.get
    triggers = _trigger_ids(feeder)
    place = builder._place_many
    # the builder's state, hoisted as in `ThreadBuilder._place_many`
    pending = builder._pending
    drop_pending = builder._drop_pending
    calls: dict[str, Any] = builder._calls  # views of tool calls: their content is a ToolCallContent
    calls_get = calls.get
    relay_params = builder._relay_params
    results = builder._results
    progress = builder._progress
    progress_get = progress.get
    runs = builder._runs
    runs_get = runs.get
    pieces = builder._pieces
    pieces_get = pieces.get
    accumulators = _Memo(builder.registry.get)  # tool name -> accumulator, looked up once
    options = builder.options
    # Nothing to fold (no accumulator, collapsed tools): progress chunks only count their ids.
    skip_progress = builder.registry.folds_nothing or options.collapse_tools
    hide_reasoning = options.hide_reasoning
    collapse = options.collapse_tools
    new_branches = builder._new_branches
    cut_suffix = -len(RESULT_SUFFIX)
    # A new assistant view gets its run's status when it is made: the build's status memo
    # (`_Statuses`, always given by `build_from_conversation`) answers for one version, so that is
    # the status `ThreadBuilder._settle_statuses` would give it at the end; it is asked once per
    # stretch of one run's views. Views made through the builder (user views, the rare paths,
    # pending markers) are still settled at the end, in a pass over them only. A top-level-only
    # build (`project_messages`) reads no status: its views stay "complete", as they were.
    status_of = None if builder._top_level_only else builder._external_status
    status_run: Any = None
    run_status: Status = "complete"
    # A progress chunk of an `ExecAccumulator` tool is folded inline, into the call's state in place:
    # every state this build holds is its own (`ExecAccumulator.init`'s copy, or a fresh dict from
    # its `reduce`) and referenced by that one call view only, so no other state can see the change;
    # the result is what the reducer returns (same keys, order and values).
    exec_type = ExecAccumulator
    exec_init = _EXEC_INIT.copy
    deferred: list[tuple[Any, str | None]] = []
    # a run's list never changes once known (`ConversationFeeder._level_of_run` sets it once), so
    # the level of the previous block's run is reused while the run stays the same
    last_run: Any = None
    level: Any = None
    rest = iter(shown.blocks())
    items: Iterator[Any] = rest
    later: list[tuple[int, _Part]] = []  # the chunks of split blocks still to place (a heap)
    while True:
        for block in items:
            chunks = block.chunks
            first = chunks[0]
            while first >= cut:  # summaries before this block
                _place_summary(feeder, place, row)
                row = next(rows, None)
                cut = n_chunks if row is None else row.seq - 1
            kind = block.kind
            if len(chunks) != 1:
                if chunks[-1] >= n_chunks:  # (a block of an older version may have newer chunks)
                    chunks = clip(chunks, n_chunks)
                if len(chunks) != 1 and kind not in whole:
                    if chunks[-1] - first >= len(chunks):  # other chunks come between: split it
                        for i in chunks:
                            heappush(later, (i, _Part(block.id, kind, block.run, (i,))))
                        if items is rest:  # from here on, the blocks merged with the parts
                            items = _merged(rest, later)
                            break
                        continue
                    if kind not in batched:
                        kind = _SEVERAL  # no fast branch takes it: the builder places them one at a time
            event = events[first]
            run = block.run
            if run != last_run:
                found = run_level_get(run)
                if found is None:
                    found = level_of_run(run)
                    if found is None:  # its spawner has not been placed yet: wait for it
                        _defer(deferred, events, block.id, block.kind, run, chunks)
                        continue
                level = found
                last_run = run
            # Each branch places its block; those that make a new assistant view (text, reasoning,
            # call, relay) set its ``content`` and fall through to the tail, the others continue.
            if triggers and block.id in triggers:  # its placement places the thread it spawned
                deferred = _place_chunks(
                    feeder, place, events, block.id, block.kind, run, chunks, level, deferred, triggers
                )
                continue
            if kind == "tool_progress":
                if pending and run in pending:
                    drop_pending(run)
                for i in chunks:
                    event = events[i]
                    node_id = event.id
                    if node_id in used:  # (a miss, the usual case, costs no call)
                        count = used[node_id] + 1
                        used[node_id] = count
                        node_id = f"{node_id}#{count}"
                    else:
                        used[node_id] = 1
                    if skip_progress:
                        continue
                    call_id = event.tool_call_id
                    view = calls_get(call_id)
                    if view is None:  # folded when the call arrives
                        entries = progress_get(call_id)
                        if entries is None:
                            entries = progress[call_id] = {}
                        entries[node_id] = (event.name, event.content)
                    elif not collapse:
                        accumulator = accumulators[event.name]
                        if accumulator is None:
                            pass
                        elif type(accumulator) is exec_type:  # `ExecAccumulator.reduce`, in place
                            call_content = view.content
                            state = call_content.progress
                            if state is None:
                                state = call_content.progress = exec_init()
                            chunk = event.content
                            if isinstance(chunk, dict):
                                channel = chunk.get("channel")
                                data = (
                                    chunk.get("data") if channel == "stdout" or channel == "stderr" else None
                                )
                                if isinstance(data, str):
                                    state[channel] = state[channel] + data
                                else:
                                    pid = chunk.get("pid")
                                    if isinstance(pid, (int, float)) and not isinstance(pid, bool):
                                        state["metrics"] = {
                                            "pid": pid,
                                            "cpuPercent": chunk.get("cpuPercent"),
                                            "rssKb": chunk.get("rssKb"),
                                            "wallMs": chunk.get("wallMs"),
                                        }
                        else:
                            call_content = view.content
                            state = call_content.progress
                            call_content.progress = accumulator.reduce(
                                accumulator.init() if state is None else state, event.content
                            )
                continue
            if kind == "text" or kind == "reasoning":
                node_id = event.id
                if node_id in used:  # (a miss, the usual case, costs no call)
                    count = used[node_id] + 1
                    used[node_id] = count
                    node_id = f"{node_id}#{count}"
                else:
                    used[node_id] = 1
                if pending and run in pending:
                    drop_pending(run)
                is_reasoning = kind == "reasoning"
                if is_reasoning and hide_reasoning:
                    continue
                if len(chunks) == 1:
                    text = event.content
                    signature = event.signature if is_reasoning else None
                elif not is_reasoning:  # (`joined_text`'s join, inline: its call per text block is ~1 %)
                    text = "".join([events[i].content for i in chunks])
                    signature = None
                else:
                    text, signature = joined_text(events, chunks, True)
                    signature = signature or event.signature
                redacted = event.redacted_data if is_reasoning else None  # (the block's first event's)
                items_of = level.items
                if items_of and level.deferred_pending is None:  # else a pending view stands last
                    last = items_of[-1]
                    last_content: Any = last.content
                    if (
                        last.run_id == run
                        and type(last_content) is (ReasoningContent if is_reasoning else TextContent)
                        and (not is_reasoning or _unsealed(signature, redacted, last_content))
                    ):  # merged into the list's last view, joined once when read (a signed or
                        # redacted thinking block stays a view of its own: `ThreadBuilder._add_text`)
                        entry = pieces_get(id(last))
                        if entry is None:
                            pieces[id(last)] = (last_content, [last_content.text, text])
                        else:
                            entry[1].append(text)
                        continue
                content: Any = (
                    ReasoningContent(text=text, signature=signature, redacted_data=redacted)
                    if is_reasoning
                    else TextContent(text=text)
                )
            elif kind == "tool_call":
                node_id = event.id
                if pending and run in pending:
                    drop_pending(run)
                if node_id in calls:  # a result came first and already shows the call
                    builder._add_tool_call(  # (which records the call node: see `call_is_real`)
                        ToolCallNode(id=node_id, run_id=run, name=event.name, input=event.input), level
                    )
                    continue
                content = (
                    ToolCallContent(name=event.name)
                    if collapse
                    else ToolCallContent(name=event.name, input=event.input)
                )
                if results and node_id in results:
                    builder._set_output(content, results[node_id])
                if not collapse and progress and node_id in progress:
                    content.progress = builder._fold_progress(node_id)
            elif kind == "tool_result":
                node_id = f"{event.id}:result"
                # the call id: the node id without its suffix, or all of it once "#n" follows
                if node_id in used:  # (a miss, the usual case, costs no call)
                    count = used[node_id] + 1
                    used[node_id] = count
                    node_id = call_id = f"{node_id}#{count}"
                else:
                    used[node_id] = 1
                    call_id = node_id[:cut_suffix]
                if pending and run in pending:
                    drop_pending(run)
                output = event.output
                view = calls_get(call_id)
                if view is None:  # a denied call or an orphan result (`_add_tool_result` keeps it)
                    builder._add_tool_result(
                        ToolResultNode(id=node_id, run_id=run, name=event.name, output=output), level
                    )
                else:
                    view.content.output = True if collapse else output
                continue
            elif kind == "usage":
                usage[run] = usage_get(run, 0) + len(chunks)
                if pending and run in pending:
                    drop_pending(run)
                continue
            elif kind == "harness_start" or kind == "harness_end":
                node_id = f"{run}:{kind}"
                if node_id in used:  # (a miss, the usual case, costs no call)
                    count = used[node_id] + 1
                    used[node_id] = count
                    node_id = f"{node_id}#{count}"
                else:
                    used[node_id] = 1
                if pending and run in pending:
                    drop_pending(run)
                run_record = runs_get(run)
                if run_record is None:
                    run_record = runs[run] = _Run()
                if kind == "harness_end":
                    run_record.ended = True
                else:  # as `ThreadBuilder._place_many`: a pending view, made only if nothing follows
                    run_record.started = True
                    if not run_record.ended and not run_record.errored:
                        items_of = level.items
                        if level.deferred_pending is not None:
                            drop_pending(level.deferred_pending)
                        elif pending and items_of and type(items_of[-1].content) is PendingContent:
                            drop_pending(items_of[-1].run_id)
                        if not level.attached and level.owner is not None:
                            level.owner.branches.append(items_of)
                            level.attached = True
                        level.deferred_pending = run
                        level.deferred_id = node_id
                        pending[run] = (level, None)
                continue
            elif kind == "relay":
                node_id = event.id
                if node_id in used:  # (a miss, the usual case, costs no call)
                    count = used[node_id] + 1
                    used[node_id] = count
                    node_id = f"{node_id}#{count}"
                else:
                    used[node_id] = 1
                if pending and run in pending:
                    drop_pending(run)
                relay_params[event.tool_call_id] = event.params
                content = RelayContent(
                    relay_kind=event.kind,
                    tool_call_id=event.tool_call_id,
                    tool=event.tool,
                    params=event.params,
                )
            elif kind == "user":
                node_id = f"{run}:user"
                if node_id in used:  # (a miss, the usual case, costs no call)
                    count = used[node_id] + 1
                    used[node_id] = count
                    node_id = f"{node_id}#{count}"
                else:
                    used[node_id] = 1
                if pending and run in pending:
                    drop_pending(run)
                builder._append(
                    level,
                    ViewNode(
                        id=node_id,
                        run_id=run,
                        role="user",
                        content=UserContent(content=event.content),
                        status="complete",
                        branches=new_branches(),
                    ),
                )
                continue
            else:  # errors, REPL chunks, several chunks of another kind: through the builder's loop
                _place_chunks(feeder, place, events, block.id, block.kind, run, chunks, level, deferred, None)
                continue
            # a new assistant view: `ThreadBuilder._place_many`'s tail
            if status_of is not None and run != status_run:
                status_run = run
                run_status = status_of(run)
            view = ViewNode(
                id=node_id,
                run_id=run,
                role="assistant",
                content=content,
                status=run_status,
                branches=new_branches(),
            )
            if kind == "tool_call":
                calls[node_id] = view
            items_of = level.items
            if level.deferred_pending is not None:
                drop_pending(level.deferred_pending)
            elif pending and items_of and type(items_of[-1].content) is PendingContent:
                drop_pending(items_of[-1].run_id)
            items_of.append(view)
            if not level.attached and level.owner is not None:
                level.owner.branches.append(items_of)
                level.attached = True
        else:
            break
    while row is not None:  # summaries after the last chunk
        _place_summary(feeder, place, row)
        row = next(rows, None)
    for chunk, whole_text in deferred:  # spawner never shown: the top level rather than nowhere
        feeder.show_at_top(chunk.run_id)
        _, node, level = feeder.prepare(chunk, whole_text)
        if node is not None:
            place(((node, None, level),))


class _Part(msgspec.Struct, gc=False):
    """One chunk of a block that `_fill_blocks` places chunk by chunk: the block's `BlockRef`
    fields, and ``chunks`` holding that chunk's index (a Struct: made by a C-level constructor,
    untracked by the cyclic GC)."""

    id: str
    kind: str
    run: str
    chunks: tuple[int]


def _merged(blocks: Iterator[Any], later: list[tuple[int, _Part]]) -> Iterator[Any]:
    """``blocks`` with the parts of ``later`` (a heap by chunk index, which the caller may push to
    while this is suspended) merged in by chunk index: a part before the first block whose first
    chunk comes after it. O(log k) per part."""
    for block in blocks:
        first = block.chunks[0]
        while later and later[0][0] < first:
            yield heappop(later)[1]
        yield block
    while later:
        yield heappop(later)[1]


def _prefix() -> Callable[[Any, int], Any]:
    from convograph.hypergraph.model import prefix

    return prefix


def _defer(
    deferred: list[tuple[Any, str | None]],
    events: Sequence[Any],
    block_id: str,
    kind: str,
    run: str,
    chunks: Sequence[int],
) -> None:
    """Queue a block's chunks (a text or reasoning block's first, with its whole text) until their
    spawner is placed (`_retry_deferred`)."""
    if kind in _WHOLE_KINDS:
        deferred.append(
            (
                FedChunk(block_id, events[chunks[0]], kind, run),
                _queries().joined_text(events, chunks, False)[0],
            )
        )
        return
    if kind == "tool_error":
        kind = "error"
    deferred.extend((FedChunk(block_id, events[i], kind, run), None) for i in chunks)


def _place_chunks(
    feeder: ConversationFeeder,
    place: Callable[[Any], None],
    events: Sequence[Any],
    block_id: str,
    kind: str,
    run: str,
    chunks: Sequence[int],
    level: _Level,
    deferred: list[tuple[Any, str | None]],
    triggers: set[str] | None,
) -> list[tuple[Any, str | None]]:
    """Place a block's chunks (a text or reasoning block's first, with its whole text) one at a time
    through the builder (`_chunk_node`, `ThreadBuilder._place_many`): a spawn trigger, whose
    placement is recorded (it places the thread it spawned: waiting chunks are retried after each
    chunk, as they would be in chunk order; ``triggers`` is then the build's set of spawn triggers),
    or a rare kind (``triggers`` None). The chunks still waiting."""
    text = signature = None
    if kind in _WHOLE_KINDS:
        text, signature = _queries().joined_text(events, chunks, kind == "reasoning")
        chunks = chunks[:1]
    for i in chunks:
        node = _chunk_node(feeder, events[i], block_id, kind, run, text, signature)
        if triggers is not None and block_id not in feeder._blocks:
            feeder._blocks[block_id] = (node.id if node is not None else None, level.index)
        if node is not None:
            place(((node, None, level),))
        if triggers is not None and deferred:  # the thread it spawned may be waiting
            deferred = _retry_deferred(feeder, place, deferred, triggers)
    return deferred


def _place_summary(feeder: ConversationFeeder, place: Callable[[Any], None], row: Any) -> None:
    summary, level = _summary_node(feeder, row)
    if summary is not None:
        place(((summary, None, level),))


def _retry_deferred(
    feeder: ConversationFeeder,
    place: Callable[[Any], None],
    deferred: list[tuple[Any, str | None]],
    triggers: set[str] | None = None,
) -> list[tuple[Any, str | None]]:
    """Place the waiting chunks whose spawner has been placed (`_drain`); those still waiting."""
    drain = _drain(feeder, deferred, triggers)
    while True:
        try:
            placement = next(drain)
        except StopIteration as done:
            still: list[tuple[Any, str | None]] = done.value
            return still
        place((placement,))


def _drain(
    feeder: ConversationFeeder, deferred: list[tuple[Any, str | None]], triggers: set[str] | None
) -> Generator[tuple[Node, None, _Level], None, list[tuple[Any, str | None]]]:
    """Yield the placements of the waiting chunks that can be placed now, **in arrival order**;
    return those still waiting. Placing a chunk that spawned a thread (a block id in ``triggers``;
    any chunk when ``triggers`` is None) may let earlier waiting chunks in: they are tried again
    before the later ones, so a later chunk never overtakes an earlier one of the same thread.
    O(waiting) plus one retry of the skipped chunks per such placement."""
    pending = deque(deferred)
    skipped: list[tuple[Any, str | None]] = []
    while pending:
        waiting, whole = pending.popleft()
        placed, node, level = feeder.prepare(waiting, whole)
        if not placed:
            skipped.append((waiting, whole))
            continue
        if node is not None:
            yield node, None, level  # type: ignore[misc]  # (placed: level is set)
        if skipped and (triggers is None or waiting.block_id in triggers):
            pending.extendleft(reversed(skipped))
            skipped = []
    return skipped


def _trigger_ids(feeder: ConversationFeeder) -> set[str]:
    """Ids of the blocks that spawned a thread."""
    q = feeder._q
    conversation = feeder.conversation
    out: set[str] = set()
    for thread in q.thread_ids(conversation):
        spawn = q.spawn_row(conversation, thread)
        if spawn is not None:
            out.add(spawn[1])
    return out


def _summary_node(feeder: ConversationFeeder, row: Any) -> tuple[Node | None, _Level | None]:
    """`ConversationFeeder.summary_node` for a `queries.SummaryRow`."""
    level = feeder._level_of_thread(row.thread_id)
    if level is None:
        return None, None
    node = TextNode(
        id=row.message_id, run_id=f"{SUMMARY_RUN_PREFIX}{row.thread_id}", fragments=Fragments(row.text)
    )
    return node, level


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
    shown = _queries().shown_paths(conversation, active, nested=conversation.view.subagents == "show")
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
