"""Hypergraph chunks as thread nodes: the hypergraph's side of the placement source protocol.

A `ConversationFeeder` tells `ThreadBuilder` (`convograph.projections.placement`), per chunk, the
node it becomes (`ConversationFeeder.chunk_node`: kind, run, content, a unique id) and the list it
goes to: its run's **thread**'s list. The requested thread (``active.thread_id``, usually
``"main"``) is the top level; a spawned thread (subagent, REPL child) goes where
`ThreadBuilder.spawn_level` puts a thread spawned by its trigger block; a reply or provider call
continues its trigger's list. Statuses are the hypergraph's (`queries.run_status`; ``aborted``
shows as ``error``). O(1) amortised per chunk. Compiled with mypyc (`convograph._native`).
"""

from __future__ import annotations

from typing import Any, Final

from convograph.graph.nodes import (
    Fragments,
    Node,
    ReasoningNode,
    RelayNode,
    TextNode,
)
from convograph.projections import thread_views
from convograph.projections.feed_records import BlockText
from convograph.projections.placement import Level, ThreadBuilder
from convograph.projections.thread_nodes import ReplInputNode, ReplOutputNode, ReplProgressNode
from convograph.projections.view import ReplResult, Status

__all__ = ["ConversationFeeder", "queries"]

_SPAWNED_THREAD_KINDS: Final = frozenset({"subagent", "repl"})
_EVENT_KINDS: Final = frozenset(
    {"tool_progress", "tool_call", "tool_result", "usage", "user", "error", "harness_start", "harness_end"}
)
"""Chunk kinds whose event has the content fields of the node it becomes (`ThreadBuilder.place`
reads them from the event: no node is made)."""


def queries() -> Any:
    """`convograph.hypergraph.queries`, imported on first use (the hypergraph imports the
    projections package)."""
    from convograph.hypergraph import queries as q

    return q


# Node types made per chunk, bound once: compiled, a `Final` name is a C static, while an
# imported name is looked up in the module's dict at each use.
_BlockText: Final = BlockText
_Fragments: Final = Fragments
_TextNode: Final = TextNode
_ReasoningNode: Final = ReasoningNode


class ConversationFeeder:
    """Feeds hypergraph chunks into a `ThreadBuilder` (see the module docstring)."""

    def __init__(self, conversation: Any, builder: ThreadBuilder, root_thread: str) -> None:
        self.conversation = conversation
        self.builder = builder
        self.root_thread = root_thread
        self._q = queries()
        self._thread_level: dict[str, Level] = {}
        self._run_thread: dict[str, str] = {}
        self._run_level: dict[str, Level] = {}
        """run id -> its thread's list, once known (a thread's list never changes once set)."""
        self._blocks: dict[str, tuple[str | None, str, Level]] = {}
        """block id -> (the id of the node its first chunk became, if any; its kind; its list):
        every block's when
        ``triggers`` is None (an incremental build continues blocks), else spawn triggers' only."""
        self.triggers: set[str] | None = None
        """Set by a one-shot build over one version (`use_one_version`): the blocks that spawned a
        thread, the only ones whose record it reads."""
        self._texts: dict[str, Fragments] = {}
        self._used_ids: set[str] = set()
        self._repeated_ids: dict[str, int] = {}
        """Node ids given out (`_unique`), and how often those given more than once were asked."""
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

    def level_of_thread(self, thread_id: str) -> Level | None:
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
                if spawn_kind in _SPAWNED_THREAD_KINDS and self.builder.hide_subagents:
                    level = self.builder.sink_level
                else:
                    trigger = self._blocks.get(trigger_block_id)
                    if trigger is None:
                        return None  # the spawner has not been placed yet
                    trigger_id, trigger_kind, trigger_level = trigger
                    if spawn_kind in _SPAWNED_THREAD_KINDS:
                        level = self.builder.spawn_level(trigger_id, trigger_kind, trigger_level)
                    else:  # a reply or provider call continues its trigger's list
                        level = trigger_level
        self._thread_level[thread_id] = level
        return level

    def show_at_top(self, run_id: str) -> None:
        """Place the thread of ``run_id`` at the top level (its spawner is not shown)."""
        thread = self._run_thread.get(run_id) or self._q.run_thread(self.conversation, run_id)[0]
        self._run_thread[run_id] = thread
        self._thread_level.setdefault(thread, self.builder.top_level)

    def level_of_run(self, run_id: str) -> Level | None:
        level = self._run_level.get(run_id)
        if level is not None:
            return level
        thread = self._run_thread.get(run_id)
        if thread is None:
            thread, parent_run_id = self._q.run_thread(self.conversation, run_id)
            if parent_run_id is not None and self.link_runs:
                self.builder.link_run(run_id, parent_run_id)
            self._run_thread[run_id] = thread
        level = self.level_of_thread(thread)
        if level is not None:
            self._run_level[run_id] = level
        return level

    # -- chunks --------------------------------------------------------------------------------------

    def _unique(self, node_id: str) -> str:
        """``node_id`` the first time it is asked, then ``node_id#2``, ``#3``, ... One set probe
        for a first use (the usual case)."""
        used = self._used_ids
        size = len(used)
        used.add(node_id)
        if len(used) != size:
            return node_id
        count = self._repeated_ids.get(node_id, 1) + 1
        self._repeated_ids[node_id] = count
        return f"{node_id}#{count}"

    def feed(self, chunk: Any, *, whole_block_text: str | None = None) -> bool:
        """Place one chunk (`queries.Chunk` or `FedChunk`); False when its thread's spawner has not
        been placed yet. A text / reasoning chunk opens its block's node or appends to it; with
        ``whole_block_text`` the node is made with the block's whole text at once."""
        block_id = chunk.block_id
        kind = chunk.kind
        known = self._blocks.get(block_id)
        if known is not None and (kind == "text" or kind == "reasoning"):
            node_id = known[0]
            if node_id is not None and whole_block_text is None:
                fragments = self._texts[block_id].append(chunk.event.content)
                self._texts[block_id] = fragments
                self.builder.update(self._text_node(kind, node_id, chunk.run_id, fragments, chunk.event))
            return True
        level = self.level_of_run(chunk.run_id)
        if level is None:
            return False
        signature = None
        if kind == "reasoning" and whole_block_text is not None:
            signature = self._block_signature(block_id)
        self.place_chunk(kind, chunk.event, block_id, chunk.run_id, whole_block_text, signature, level)
        return True

    def place_chunk(
        self,
        kind: str,
        event: Any,
        block_id: str,
        run: str,
        whole: str | None,
        signature: str | None,
        level: Level,
    ) -> None:
        """Place one chunk of block ``block_id`` (of ``kind``, run ``run``) in ``level`` with
        `ThreadBuilder.place`: the event itself gives the content of the kinds whose fields are a
        node's (`_EVENT_KINDS`, and in a one-shot build a text or reasoning chunk, or its block's
        whole text as a `BlockText`), a node (`chunk_node`) that of the others. ``whole`` and ``signature``: a
        text or reasoning block's whole text and newest signature, when not the chunk's own."""
        item: Any = event
        one_shot_text = self.triggers is not None and (kind == "text" or kind == "reasoning")
        if kind in _EVENT_KINDS or one_shot_text:  # (a one-shot build's text is never continued)
            node_id: str | None = self.chunk_id(kind, event, run)
            if one_shot_text and whole is not None:  # (else the chunk's own text is the block's)
                if kind == "reasoning":
                    item = _BlockText(whole, signature or event.signature, event.redacted_data)
                else:
                    item = _BlockText(whole, None, None)
        else:
            item = self.chunk_node(kind, event, block_id, run, whole, signature)
            node_id = None if item is None else item.id
        triggers = self.triggers
        if (triggers is None or block_id in triggers) and block_id not in self._blocks:
            self._blocks[block_id] = (node_id, kind, level)
        if node_id is not None:
            self.builder.place(kind, node_id, run, item, None, level)

    def place_progress(self, event: Any) -> None:
        """A later chunk of a progress block placed in a row by a one-shot build (`feed`): its
        node id (counted as placing it would count it), then its fold into its call's view."""
        thread_views.add_progress(self.builder, self._unique(event.id), event)

    def use_one_version(self) -> None:
        """Set up a one-shot build over this version: keep records of spawn triggers only (no
        block is continued later) and no text per block, and no spawn links (the builder takes
        every status, inherited ones included, from this version: nothing is re-stamped)."""
        q = self._q
        conversation = self.conversation
        triggers: set[str] = set()
        for thread in q.thread_ids(conversation):
            spawn = q.spawn_row(conversation, thread)
            if spawn is not None:
                triggers.add(spawn[1])
        self.triggers = triggers
        self.link_runs = False

    @staticmethod
    def _text_node(
        kind: str, node_id: str, run_id: str, fragments: Fragments, event: Any, signature: str | None = None
    ) -> Node:
        if kind == "reasoning":
            return _ReasoningNode(
                id=node_id,
                run_id=run_id,
                fragments=fragments,
                signature=signature or event.signature,
                redacted_data=event.redacted_data,
            )
        return _TextNode(id=node_id, run_id=run_id, fragments=fragments)

    def _block_signature(self, block_id: str) -> str | None:
        """The newest thinking signature in a reasoning block (providers often send it last,
        in a chunk of its own). O(chunks in the block)."""
        found = None
        for chunk in self._q.chunks_of(self.conversation, block_id):
            signature = getattr(chunk.event, "signature", None)
            if signature is not None:
                found = signature
        return found

    def chunk_id(self, kind: str, event: Any, run: str) -> str:
        """The id of the node a chunk of one of `_EVENT_KINDS` becomes, unique per conversation (a
        repeated id gets ``#2``, ``#3``, ...; a usage chunk is numbered in its run)."""
        if kind == "tool_progress" or kind == "text" or kind == "reasoning":
            return self._unique(event.id)
        if kind == "tool_call":
            call_id: str = event.id
            return call_id
        if kind == "tool_result":
            return self._unique(f"{event.id}:result")
        if kind == "usage":
            count = self._usage.get(run, 0)
            self._usage[run] = count + 1
            return f"{run}:usage:{count}"
        return self._unique(f"{run}:{kind}")  # harness_start, harness_end, user, error

    def chunk_node(
        self, kind: str, event: Any, block_id: str, run: str, whole: str | None, signature: str | None
    ) -> Node | None:
        """The node a text, reasoning, relay or REPL chunk becomes (``whole``: a text or reasoning
        block's whole text, else the chunk's own; ``signature``: that block's newest). ``None``:
        a chunk that shows nothing (``repl_*`` unless ``ViewOptions.repl_cells``, other kinds)."""
        if kind == "text" or kind == "reasoning":
            fragments = _Fragments(whole if whole is not None else event.content)
            if self.triggers is None:  # (continued by later chunks: incremental builds only)
                self._texts[block_id] = fragments
            return self._text_node(kind, self._unique(event.id), run, fragments, event, signature)
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
        return None

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
