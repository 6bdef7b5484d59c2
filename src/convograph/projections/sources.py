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

Complexity: one-shot O(N log N) for the N chunks on the shown paths (a sort by seq); the feeder's
per-chunk work is O(1) amortised, which the incremental `ConversationProjector` relies on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, NamedTuple

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
from convograph.projections.dag import LayoutInput, compact, compact_json
from convograph.projections.history import SUMMARY_RUN_PREFIX
from convograph.projections.progress import ProgressRegistry
from convograph.projections.thread import ThreadBuilder, _Level
from convograph.projections.view import Status, ViewOptions

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
            q = self._q
            spawn = q.spawn_of(self.conversation, thread_id)
            if spawn is None:  # its parent has not arrived: shown at the top until it does
                level = self.builder.top_level
                self.orphans.add(thread_id)
            elif spawn.kind in _SPAWNED_THREAD_KINDS and self.builder.options.hide_subagents:
                level = self.builder.sink_level
            else:
                trigger = self._blocks.get(spawn.trigger_block_id)
                if trigger is None:
                    return None  # the spawner has not been placed yet
                node_id, trigger_index = trigger
                trigger_level = self.builder.level_at(trigger_index)
                if spawn.kind in _SPAWNED_THREAD_KINDS:
                    level = self.builder.spawn_level(node_id, trigger_level)
                else:  # a reply or provider call continues its trigger's list
                    level = trigger_level
        self._thread_level[thread_id] = level
        return level

    def show_at_top(self, run_id: str) -> None:
        """Place the thread of ``run_id`` at the top level (its spawner is not shown)."""
        thread = self._run_thread.get(run_id) or self._q.run_info(self.conversation, run_id).thread_id
        self._run_thread[run_id] = thread
        self._thread_level.setdefault(thread, self.builder.top_level)

    def _level_of_run(self, run_id: str) -> _Level | None:
        level = self._run_level.get(run_id)
        if level is not None:
            return level
        thread = self._run_thread.get(run_id)
        if thread is None:
            info = self._q.run_info(self.conversation, run_id)
            thread = info.thread_id
            if info.parent_run_id is not None:
                self.builder.link_run(run_id, info.parent_run_id)
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
                id=node_id, run_id=run_id, fragments=fragments, signature=signature or event.signature
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
        return None  # repl_* and anything else: structural, no node

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


class FedChunk(NamedTuple):
    """What the feeder reads of a chunk, built from `queries.chunk_event` (no `Chunk` record)."""

    block_id: str
    event: Any
    kind: str
    run_id: str


def _shown_items(conversation: Any, active: Any, show_spawned: bool) -> list[tuple[int, int, Any, Any]]:
    """(seq, order, kind, payload) for every block (with its chunks) and summary on the shown
    paths: the active path of ``active``'s thread and, recursively, of every spawned thread."""
    from convograph.hypergraph import default_active

    q = _queries()
    items: list[tuple[int, int, Any, Any]] = []
    pending: list[Any] = [active]
    seen_threads: set[str] = set()
    order = 0
    # Spawned threads by trigger block: one query per thread instead of one per block.
    spawned: dict[str, list[Any]] = {}
    orphans: list[str] = []
    for thread in q.thread_ids(conversation):
        if thread == MAIN_THREAD:
            continue
        spawn = q.spawn_of(conversation, thread)
        if spawn is None:
            orphans.append(thread)
        elif show_spawned or spawn.kind not in _SPAWNED_THREAD_KINDS:
            spawned.setdefault(spawn.trigger_block_id, []).append(spawn)
    if active.thread_id == MAIN_THREAD:  # threads whose parent has not arrived are not hidden
        pending.extend(default_active(conversation, thread) for thread in reversed(orphans))
        pending.reverse()
    while pending:
        path = pending.pop()
        if path.thread_id in seen_threads:
            continue
        seen_threads.add(path.thread_id)
        for message_id in path.message_ids:
            message = q.get_message(conversation, message_id)
            if message.summary is not None:
                seq = _summary_seq(conversation, message)
                items.append((seq, order, "summary", (message, path.thread_id)))
                order += 1
                continue
            for block in q.block_rows(conversation, message_id):
                items.append((block.first_seq, order, "block", block))
                order += 1
                for spawn in spawned.get(block.id, ()):
                    if spawn.thread_id != path.thread_id:
                        pending.append(default_active(conversation, spawn.thread_id))
    items.sort()  # (seq, order) pairs are unique: the payloads are never compared
    return items


def _summary_seq(conversation: Any, message: Any) -> int:
    q = _queries()
    for source in message.summary.source_ids:
        for block in q.block_rows(conversation, source):
            return int(block.first_seq)
    return 0


def fill_from_conversation(
    conversation: Any,
    active: Any = None,
    *,
    options: ViewOptions | None = None,
    registry: ProgressRegistry | None = None,
    track_changes: bool = False,
) -> ThreadBuilder:
    """A `ThreadBuilder` filled with the shown paths of a hypergraph conversation."""
    return build_from_conversation(
        conversation, active, options=options, registry=registry, track_changes=track_changes
    )[0]


def build_from_conversation(
    conversation: Any,
    active: Any = None,
    *,
    options: ViewOptions | None = None,
    registry: ProgressRegistry | None = None,
    track_changes: bool = False,
) -> tuple[ThreadBuilder, ConversationFeeder]:
    """`fill_from_conversation`, also returning the feeder (for incremental updates)."""
    if not _is_conversation(conversation):
        raise _unsupported(conversation)
    active = _resolve_active(conversation, active)
    options = options if options is not None else options_of(conversation)
    feeder_box: list[ConversationFeeder] = []
    builder = ThreadBuilder(
        options=options,
        registry=registry,
        track_changes=track_changes,
        status_of=lambda run_id: feeder_box[0].status_of(run_id),
    )
    feeder = ConversationFeeder(conversation, builder, active.thread_id)
    feeder_box.append(feeder)
    q = _queries()
    # Chunks in arrival order; a text / reasoning block enters once, whole, at its first chunk
    # (its later chunks only extend it, they are never placed). The list holds chunk ids, and the
    # chunk record is read when it is fed, so no tracked record lives through the whole build.
    feed: list[tuple[int, int, Any, str | None, str | None]] = []
    for seq, order, kind, payload in _shown_items(conversation, active, not options.hide_subagents):
        if kind == "summary":
            feed.append((seq, order, payload, None, None))
            continue
        if payload.kind in ("text", "reasoning"):  # the first chunk, with the text joined
            feed.append((seq, order, payload.id, payload.run_id, q.block_text(conversation, payload.id)))
        elif payload.chunk_count == 1:
            feed.append((seq, order, payload.id, payload.run_id, None))
        else:
            block_id, run_id = payload.id, payload.run_id
            feed.extend(
                (chunk_seq, order, block_id, run_id, None)
                for chunk_seq in q.chunk_seqs(conversation, block_id)
            )
    feed.sort()  # (seq, order) pairs are unique: the payloads are never compared
    placements = _feed_placements(conversation, feeder, feed)
    if track_changes:
        for node, _, level in placements:
            builder.add_in(node, level)
    else:
        builder.add_placed(placements)
    return builder, feeder


def _feed_placements(
    conversation: Any, feeder: ConversationFeeder, feed: list[tuple[int, int, Any, str | None, str | None]]
) -> Iterator[tuple[Node, None, _Level]]:
    """The nodes of ``feed`` (in order) with their lists, for `ThreadBuilder.add_placed`. Lazy: a
    placement is computed only after the builder has added every earlier node (a thread's list
    depends on its spawner's view). Chunks whose spawner has not been placed wait and are retried
    after every placement; spawners never shown put their threads at the top level."""
    q = _queries()
    chunk_event = q.chunk_event
    deferred: list[tuple[Any, str | None]] = []
    for seq, _, item, run_id, whole in feed:
        if isinstance(item, tuple):
            node, level = feeder.summary_node(*item)
            if node is not None:
                yield node, None, level  # type: ignore[misc]
            continue
        event = chunk_event(conversation, seq)
        chunk = FedChunk(item, event, event.type, run_id)  # type: ignore[arg-type]
        placed, node, level = feeder.prepare(chunk, whole)
        if not placed:
            deferred.append((chunk, whole))
            continue
        if node is not None:
            yield node, None, level  # type: ignore[misc]
        if deferred:  # a late spawner may have arrived: retry what waited until nothing moves
            progressed = True
            while progressed and deferred:
                still: list[tuple[Any, str | None]] = []
                for waiting, text in deferred:
                    placed, node, level = feeder.prepare(waiting, text)
                    if not placed:
                        still.append((waiting, text))
                    elif node is not None:
                        yield node, None, level  # type: ignore[misc]
                progressed = len(still) < len(deferred)
                deferred = still
    for chunk, text in deferred:  # spawner never shown: the top level rather than nowhere
        feeder.show_at_top(chunk.run_id)
        _, node, level = feeder.prepare(chunk, text)
        if node is not None:
            yield node, None, level  # type: ignore[misc]


def conversation_layout_input(conversation: Any, active: Any = None) -> LayoutInput:
    """Blocks on the shown paths as layout input: sequence edges between consecutive blocks of a
    run, spawn edges from a trigger block to the first block of the run it started."""
    if not _is_conversation(conversation):
        raise _unsupported(conversation)
    active = _resolve_active(conversation, active)
    q = _queries()
    data = LayoutInput()
    index: dict[str, int] = {}
    last_of_run: dict[str, int] = {}
    spawns: list[tuple[str, str]] = []
    for _, _, kind, payload in _shown_items(conversation, active, conversation.view.subagents == "show"):
        if kind == "summary":
            message, thread_id = payload
            i = len(data.ids)
            data.ids.append(message.id)
            data.kinds.append("summary")
            data.labels.append(compact("summary: " + message.summary.text))
            data.runs.append(f"summary:{thread_id}")
            continue
        block = payload
        i = len(data.ids)
        index[block.id] = i
        data.ids.append(block.id)
        data.kinds.append(block.kind)
        data.labels.append(_block_label(conversation, block))
        data.runs.append(block.run_id)
        previous = last_of_run.get(block.run_id)
        if previous is not None:
            data.edges.append((previous, i))
        last_of_run[block.run_id] = i
        for spawn in q.spawns_from(conversation, block.id):
            spawns.append((block.id, spawn.invocation_chunk_id))
    for trigger, invocation in spawns:
        target = index.get(q.get_chunk(conversation, invocation).block_id)
        source = index.get(trigger)
        if source is not None and target is not None:
            data.edges.append((source, target))
    return data


def _block_label(conversation: Any, block: Any) -> str:
    q = _queries()
    kind = block.kind
    if kind in ("text", "reasoning"):  # the label reads the first 8 chunks
        if block.chunk_count <= 8:
            text = q.block_text(conversation, block.id)
        else:
            text = "".join(chunk.event.content for chunk in q.chunks_of(conversation, block.id)[:8])
        if kind == "reasoning":
            return compact("thinking: " + text) if text else "thinking..."
        return compact(text) or "text"
    event = q.chunk_event(conversation, block.first_seq)
    if kind == "tool_call":
        return compact(event.name)
    if kind == "tool_result":
        return compact(f"{event.name} result")
    if kind == "user":
        return (compact(event.content) or "user") if isinstance(event.content, str) else "[media]"
    if kind == "error":
        return compact("error: " + event.message)
    if kind == "relay":
        return compact(f"permission: {event.tool}")
    if kind == "repl_input":
        return compact("repl: " + event.code)
    if kind == "repl_output":
        return (
            compact("output: " + (event.error or event.stdout or ""))
            if (event.error or event.stdout)
            else "output"
        )
    if kind == "repl_progress":
        return "repl progress"
    if kind == "usage":
        return f"usage {event.input_tokens}/{event.output_tokens}"
    fixed = {"harness_start": "run start", "harness_end": "run end"}.get(kind)
    return fixed if fixed is not None else compact_json(kind)
