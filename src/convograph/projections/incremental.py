"""Incremental projection: consume events, keep the thread views current in O(delta) per event.

`ThreadProjector` owns a flat `Graph` and a `ThreadBuilder`. Each `apply(event)` reduces the event
(O(1) amortised), finds the one node it created or changed, and places or refreshes that node's
views (O(1) amortised; a lifecycle event re-stamps the statuses of its run's views once). It
returns the ids of the views that changed, so a UI can re-render exactly those on every event.

Invariant (tested as a property): after any prefix of a stream, ``projector.views`` equals
``project_thread(projector.graph)`` with the same options. The one exception to O(delta): when a
node arrives whose children came first (a parent that arrived late), the projector rebuilds its
views from the graph, O(N), so the children move under their parent exactly as the one-shot
projection places them. This happens at most once per late parent.

``views`` is live: the projector mutates those objects on later events. Take `snapshot()` for a
copy that stays fixed. Messages and DAG layouts are computed on demand from the current graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from convograph.events import codec
from convograph.events.types import (
    Error,
    Event,
    HarnessEnd,
    HarnessStart,
    ToolResult,
    User,
    _Event,
)
from convograph.graph.model import Graph, create_graph
from convograph.graph.reducer import STREAM_RUN_ID, reduce_event
from convograph.projections.dag import DAGLayout, project_graph_dag
from convograph.projections.messages import project_messages, render_views
from convograph.projections.progress import ProgressRegistry
from convograph.projections.thread import ThreadBuilder, build_thread, copy_views
from convograph.projections.view import ViewNode, ViewOptions

__all__ = ["ConversationProjector", "ThreadProjector"]

_SUFFIX: Final[dict[type[Any], str]] = {
    HarnessStart: ":harness_start",
    HarnessEnd: ":harness_end",
    Error: ":error",
    User: ":user",
}


class ThreadProjector:
    """Thread views kept current event by event (see the module docstring)."""

    __slots__ = ("_builder", "_graph", "_options", "_registry", "rebuilds")

    def __init__(
        self,
        graph: Graph | None = None,
        *,
        options: ViewOptions | None = None,
        registry: ProgressRegistry | None = None,
    ) -> None:
        self._graph = graph if graph is not None else create_graph()
        self._options = options
        self._registry = registry
        self._builder: ThreadBuilder = build_thread(
            self._graph, options=options, registry=registry, track_changes=True
        )
        self._builder.take_changed()
        self.rebuilds = 0
        """How many times a late parent forced a full rebuild."""

    @property
    def graph(self) -> Graph:
        return self._graph

    @property
    def views(self) -> list[ViewNode]:
        """The live top-level views (mutated by later events)."""
        return self._builder.views

    def snapshot(self) -> list[ViewNode]:
        """A deep copy of the current views. O(views)."""
        return copy_views(self._builder.views)

    def messages(self, format: str = "openai") -> list[dict[str, Any]]:
        """The current request history (see `project_messages`). O(views)."""
        return render_views(self._builder, format)

    def dag(self) -> DAGLayout:
        """The current DAG layout. O(N + E)."""
        return project_graph_dag(self._graph)

    def to_jsonable(self) -> Any:
        from convograph.jsonable import to_jsonable

        return to_jsonable(self._builder.views)

    def apply_all(self, events: Iterable[Event | Mapping[str, Any] | str | bytes]) -> set[str]:
        """Apply events in order; the union of the changed view ids."""
        changed: set[str] = set()
        for event in events:
            changed |= self.apply(event)
        return changed

    def apply(self, event: Event | Mapping[str, Any] | str | bytes) -> set[str]:
        """Reduce one event and update the views; the ids of the views that changed.

        Invalid input raises `convograph.EventError` and changes nothing.
        """
        parsed: Any = event if isinstance(event, _Event) else codec.parse_event(event)
        prev = self._graph
        new = reduce_event(prev, parsed)
        if new is prev:
            return set()
        self._graph = new
        builder = self._builder
        run_id: str = parsed.run_id if parsed.run_id is not None else STREAM_RUN_ID
        if len(new) > len(prev):
            node_id = new.last_node_by_run_id[run_id]
            node = new.nodes[node_id]
            pending = prev.pending_parents
            first_of_run = run_id not in prev.last_node_by_run_id
            if node_id in pending or (first_of_run and run_id in pending):
                return self._rebuild()
            builder.add(node, self._parent_of(prev, new, parsed, node_id, run_id))
        else:
            changed_id = self._node_id(parsed, run_id)
            existing = new.nodes.get(changed_id) if changed_id is not None else None
            if existing is not None:
                builder.update(existing)
                if builder.needs_rebuild:
                    return self._rebuild()
        return builder.take_changed()

    def _rebuild(self) -> set[str]:
        self.rebuilds += 1
        self._builder = build_thread(
            self._graph, options=self._options, registry=self._registry, track_changes=True
        )
        return self._builder.take_changed()

    @staticmethod
    def _node_id(event: Any, run_id: str) -> str | None:
        suffix = _SUFFIX.get(type(event))
        if suffix is not None:
            return run_id + suffix
        if isinstance(event, ToolResult):
            return f"{event.id}:result"
        event_id: str | None = getattr(event, "id", None)
        return event_id

    @staticmethod
    def _parent_of(prev: Graph, new: Graph, event: Any, node_id: str, run_id: str) -> str | None:
        candidate: str | None = prev.last_node_by_run_id.get(run_id)
        if candidate is None:
            parent_id: str | None = event.parent_id
            if parent_id is None:
                return None
            candidate = parent_id if parent_id in prev.nodes else prev.last_node_by_run_id.get(parent_id)
        if candidate is not None and node_id in new.children_ids(candidate):
            return candidate
        return None


class ConversationProjector:
    """Thread views of a hypergraph conversation kept current event by event.

    Each `apply(event)` reduces the event into the conversation (`reduce_conversation`) and feeds
    the chunks it created (usually one) to the same builder the one-shot projection uses: O(1)
    amortised per event. It rebuilds from the conversation (O(N)) only when the shown path changes
    shape rather than growing: a new main-thread message that does not continue the current tip (an
    edited or regenerated turn), or a spawned run whose spawner arrived after it. `replace(conv)`
    adopts a conversation changed by an operation (edit, switch, summarize, ...): a rebuild.

    Invariant (tested): ``views == project_thread(conversation, default_active(conversation))``
    after every event, for the conversation's own view options.
    """

    def __init__(
        self,
        conversation: Any = None,
        *,
        registry: ProgressRegistry | None = None,
        repl_cells: bool = False,
    ) -> None:
        from convograph.hypergraph import create_conversation

        self._registry = registry
        self._repl_cells = repl_cells
        """The conversation's own view options plus ``ViewOptions.repl_cells`` (REPL turns as
        views; `messages` renders them as code and feedback, as `project_messages` does)."""
        self._repl: Any = None
        """The `ReplProjector` behind `repl`, once asked."""
        self.rebuilds = 0
        self._conversation: Any = conversation if conversation is not None else create_conversation()
        self._build()

    def _build(self) -> None:
        from convograph.hypergraph import default_active
        from convograph.projections.sources import build_from_conversation, options_of

        conversation = self._conversation
        active = default_active(conversation)
        options = None
        if self._repl_cells:
            options = msgspec.structs.replace(options_of(conversation), repl_cells=True)
        builder, feeder = build_from_conversation(
            conversation, active, options=options, registry=self._registry, track_changes=True
        )
        builder.take_changed()
        self._builder = builder
        self._feeder = feeder
        self._tip: str | None = active.tip_id
        self._seen_chunks = conversation.chunk_count

    @property
    def conversation(self) -> Any:
        return self._conversation

    @property
    def views(self) -> list[ViewNode]:
        """The live top-level views (mutated by later events)."""
        return self._builder.views

    def snapshot(self) -> list[ViewNode]:
        return copy_views(self._builder.views)

    def messages(self, format: str = "openai") -> list[dict[str, Any]]:
        """The current request history (see `project_messages`): from the live views, O(views),
        unless REPL turns were shown and this projector's views have no cells for them; then
        one-shot, O(N)."""
        if self._repl_cells or not self._feeder.saw_repl:
            return render_views(self._builder, format)
        return project_messages(self._conversation, format=format)

    def to_jsonable(self) -> Any:
        from convograph.jsonable import to_jsonable

        return to_jsonable(self._builder.views)

    def dag(self) -> DAGLayout:
        """The current DAG layout of the active path. O(N log N)."""
        from convograph.projections.dag import project_dag

        return project_dag(self._conversation)

    def repl(self) -> Any:
        """The current REPL view (equal to `project_repl` of the conversation): a `ReplProjector`
        made on the first call (O(N) once) folds only the chunks that arrived since the last call,
        and the view costs O(agents + turns). Its objects are live (changed by a later call)."""
        from convograph.projections.repl import ReplProjector

        if self._repl is None:
            self._repl = ReplProjector(self._conversation)
        else:
            self._repl.advance(self._conversation)
        return self._repl.view()

    def replace(self, conversation: Any) -> set[str]:
        """Adopt a conversation changed outside `apply` (an operation): rebuild. O(N)."""
        self._conversation = conversation
        self._repl = None  # it follows extensions only: made again on the next `repl()`
        return self._rebuild()

    def _rebuild(self) -> set[str]:
        self.rebuilds += 1
        self._build()
        return {view.id for view in self._builder.views}

    def apply(self, event: Event | Mapping[str, Any] | str | bytes) -> set[str]:
        """Reduce one event and update the views; the ids of the views that changed."""
        from convograph.hypergraph import reduce_conversation

        return self.advance(reduce_conversation(self._conversation, event))

    def advance(self, new: Any) -> set[str]:
        """Follow ``new``: this projector's conversation with more events reduced into it (e.g. by
        another projector of the same conversation; a conversation changed by an operation goes
        to `replace`). Its new chunks are fed as `apply` feeds them: O(new chunks), or a rebuild
        when the shown path changed shape."""
        from convograph.hypergraph import queries as q

        if new is self._conversation:
            return set()
        self._conversation = new
        feeder = self._feeder
        feeder.conversation = new
        first, last = self._seen_chunks + 1, new.chunk_count
        self._seen_chunks = last
        for number in range(first, last + 1):
            chunk = q.get_chunk(new, f"chunk:{number}")
            message_id, thread_id, parent_id = q.chunk_message(new, number)
            if thread_id == "main" and message_id != self._tip:
                if parent_id != self._tip:
                    return self._rebuild()
                self._tip = message_id
            if not feeder.feed(chunk) or feeder.builder.needs_rebuild:
                return self._rebuild()
        if feeder.orphans:  # a late parent arrived: its child threads move under it
            for thread in feeder.orphans:
                if q.spawn_of(new, thread) is not None:
                    return self._rebuild()
        return self._builder.take_changed()
