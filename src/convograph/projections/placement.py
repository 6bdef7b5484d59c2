"""Thread placement (seed 001 "Thread Projection"): where a node goes in the threaded view, and
which view it makes or changes. **The one algorithm every thread projection runs**: one-shot and
incremental, flat graph and hypergraph.

A source (`convograph.projections.thread` for a flat graph, `convograph.projections.feed` for a
hypergraph) says, per node, in arrival order: the node (its kind, run and content are the node's
own fields), and either its parent (the source of its incoming edge) or the list it goes to (a
hypergraph thread's). `ThreadBuilder.place` decides the rest; `add`, `add_in`, `add_all`,
`add_all_in` and `add_placed` are its entry points.

Which list (`ThreadBuilder.level_for_parent`; seed rules, spec §4.1), for a node ``n`` whose
incoming edge comes from ``p``:

- no ``p`` (a root), or ``p`` not placed: the top-level list;
- ``p`` in the same run (sequential edge): ``p``'s list;
- ``p`` in another run (cross-run edge):
  - ``p`` is a tool call: a new branch of ``p``'s view (a subagent stays nested even before the
    result arrives); nowhere shown when subagents are hidden;
  - ``p`` emits a view (text, user, ...): the first such child of ``p`` continues ``p``'s list when
    ``p`` had no same-run continuation yet (a user message flows into its reply); other children
    open branches of ``p``'s view;
  - ``p`` is structural (lifecycle, usage, tool result, progress): ``p``'s list ("spliced").

A hypergraph thread spawned by a block goes to a new branch of that block's view
(`ThreadBuilder.spawn_level`), or the block's own list when it has no view.

Which view (`ThreadBuilder.place_in`): text, reasoning, tool_call, user, error and relay nodes emit
one, appended to the list in arrival order (content is never reordered, fixing upstream's §9 #1);
consecutive text (or reasoning) of one run in one list merge into one view (a signed or redacted
thinking block stays its own). Tool results and progress merge into their call through an index by
call id, in either arrival order (§9 #4, #20); a result without a call shows as a call view with
its output, its input from the relay that asked for it (§9 #3). A run whose ``harness_start`` is its
newest node shows a ``pending`` view until anything of the run follows.

Status per run (seed 001 "Status Derivation"): error, else complete once ended, else streaming once
started; a run without lifecycle inherits its spawner's (§9 #2), else complete. User views are
always complete. Incremental builds (``track_changes``) re-stamp a run's views at each lifecycle
node; a one-shot build (`add_placed`) settles every view's status once at the end.

Complexity: O(1) amortised per node placed or updated; a lifecycle node of an incremental build
re-stamps its run's views (and those of descendant runs without lifecycle), O(views) once per run.
Compiled with mypyc (`convograph._native`); the same code runs interpreted without a build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from convograph.graph.nodes import KIND_OF_NODE_TYPE
from convograph.projections import thread_updates, thread_views
from convograph.projections.progress import ProgressRegistry, default_registry, fold_step
from convograph.projections.thread_nodes import Run, call_id_of_result
from convograph.projections.view import (
    NO_BRANCHES,
    ErrorContent,
    PendingContent,
    ReasoningContent,
    Role,
    Status,
    TextContent,
    ToolCallContent,
    UserContent,
    ViewNode,
    ViewOptions,
    add_branch,
)

__all__ = ["CONTENT_KINDS", "Level", "ThreadBuilder"]

CONTENT_KINDS: Final = frozenset({"text", "reasoning", "tool_call", "user", "error", "relay"})
"""Kinds whose node emits a view (or merges into one)."""
LIFECYCLE_KINDS: Final = frozenset({"harness_start", "harness_end", "error"})
VIEW_KINDS: Final = frozenset({*CONTENT_KINDS, "repl_input"})
"""Kinds whose node `place_in` always gives a view (made or merged into), but hidden reasoning."""

# Names from interpreted modules that placement uses per node, bound once: compiled, a `Final`
# name is a C static, while an imported name is looked up in the module's dict at each use.
_KIND_OF_TYPE: Final = KIND_OF_NODE_TYPE
_ViewNode: Final = ViewNode
_UserContent: Final = UserContent
_TextContent: Final = TextContent
_ReasoningContent: Final = ReasoningContent
_ToolCallContent: Final = ToolCallContent
_PendingContent: Final = PendingContent
_ErrorContent: Final = ErrorContent
_Run: Final = Run
_call_id_of_result: Final = call_id_of_result
_NO_BRANCHES: Final = NO_BRANCHES
_add_branch: Final = add_branch


class Level:
    """One list of views: the top level, or one branch of ``owner`` (attached on its first view).
    ``index`` is its position in the builder's level list (placement records hold the int)."""

    def __init__(self, owner: ViewNode | None, attached: bool, index: int) -> None:
        self.items: list[ViewNode] = []
        self.owner = owner
        self.attached = attached
        self.index = index
        self.pending_run: str | None = None
        """The run whose pending view a fill deferred (`thread_views.defer_pending`): it stands
        last in this list, not made unless it stays there to the end."""
        self.after_boundary = False
        """A model call's or run's boundary (a ``usage``, ``harness_start`` or ``harness_end``
        node) was placed in this list since its last view (`thread_views.note_model_call`)."""


class ThreadBuilder:
    """Builds thread views from nodes given in arrival order (see the module docstring).

    ``add(node, parent_id)`` / ``add_in(node, level)`` place a new node; ``update(node)`` refreshes
    the views of a node that changed (a streamed delta, a redelivered call). ``views`` is the live
    top-level list. ``track_changes=True`` (incremental projectors) records changed view ids and
    what updates need. ``top_level_only`` (one-shot, `project_messages`): nested lists are built by
    the same rules but never attached and statuses are not settled; such views must not leave the
    caller. ``status_of``: the source's statuses (the hypergraph's) instead of the builder's own
    lifecycle flags.
    """

    def __init__(
        self,
        *,
        options: ViewOptions | None = None,
        registry: ProgressRegistry | None = None,
        track_changes: bool = False,
        status_of: Callable[[str], Status] | None = None,
        top_level_only: bool = False,
        nodes: Mapping[str, Any] | None = None,
        by_parent: bool = True,
    ) -> None:
        self.track_changes = track_changes
        self.options: ViewOptions = options if options is not None else ViewOptions()
        self.registry: ProgressRegistry = registry if registry is not None else default_registry
        self._external_status = status_of
        self._top_level_only = top_level_only and not track_changes
        self.hide_reasoning = self.options.hide_reasoning  # (flags read per node: native attributes,
        self.collapse_tools = self.options.collapse_tools  # not a Struct field lookup each time)
        self.hide_subagents = self.options.hide_subagents
        self.skips_progress = self.registry.folds_nothing or self.collapse_tools
        """Progress shows nowhere (nothing folds, or tools are collapsed): it changes no view."""
        self._levels: list[Level] = []
        self._top = self._new_level(None, True)
        self._sink = self._new_level(None, False)
        self._recorded: dict[str, Any] = {}
        self._nodes: Mapping[str, Any] = self._recorded if nodes is None else nodes
        """Nodes by id, to read a parent's kind and run: the source's (a flat graph's node map),
        else every node placed, recorded here (unless the source places by list only,
        ``by_parent=False``, and nothing is updated)."""
        self._record = nodes is None and (by_parent or track_changes)
        self._run_level: dict[str, int] = {}
        """run -> the index of the list of its first node: every node of a run goes there unless
        its parent says otherwise (then it is in `_moved`). A record per run, not per node."""
        self._moved: dict[str, int] = {}
        """node id -> the index of its list, for nodes not in their run's (`_run_level`)."""
        self._last_id = ""
        self._last_run = ""
        self._last_kind = ""
        self._last_first = -1
        self._last_index = -1
        """The node placed last (its id, run, kind, list): most nodes' parent, without a lookup."""
        self._stamp_in_fill = status_of is not None and not self._top_level_only
        """A fill gives views the source's statuses when made (those of one version: final)."""
        self._runs: dict[str, Run] = {}
        self._status: dict[str, Status] = {}
        """Effective status per run (memo, kept current by `thread_views.restamp`)."""
        self._pending: dict[str, tuple[Level, ViewNode]] = {}  # run -> its pending view, its list
        self._deferred: dict[str, tuple[Level, str]] = {}
        """During a fill: run -> the list and node id of its pending view, made at the end."""
        self._index_views = not self._top_level_only
        """Keep ``_view_of`` (a top-level-only build tells a view's presence by kind instead)."""
        self._filling = False
        """During a one-shot fill (`start_fill` .. `finish_fill`)."""
        self._view_of: dict[str, ViewNode] = {}
        self._has_continuation: set[str] = set()
        self._promoted: set[str] = set()
        self._pieces: dict[int, tuple[Any, list[str]]] = {}
        """Merged text of a one-shot build, by view: joined once, when ``views`` is read."""
        self._joined: dict[int, list[str]] = {}
        self._members: dict[int, list[str]] = {}
        """Merged text of an incremental build: node ids by view (`thread_updates`)."""
        self._texts: dict[str, str] = {}
        self._signatures: dict[str, str | None] = {}
        self.needs_rebuild = False
        """Set by `update` when a change cannot be patched in place: the projector rebuilds."""
        self._calls: dict[str, ViewNode] = {}
        self._model_call_starts: set[str] = set()  # (`model_call_starts`)
        self._call_nodes: set[str] = set()
        self._calls_from_results: set[str] = set()
        """Call ids whose view a tool_result made (no call node yet: a denial or an orphan)."""
        self._results: dict[str, Any] = {}
        self._progress: dict[str, dict[str, tuple[str, Any]]] = {}
        self._accumulators: dict[str, Any] = {}
        self._fold_steps: dict[str, Callable[[Any, Any], Any] | None] = {}
        self._relay_params: dict[str, Any] = {}
        self._repls: dict[str, ViewNode] = {}
        self._latest_repl: dict[str, ViewNode] = {}
        self.changed: set[str] = set()
        """Ids of views created or changed since the last `take_changed` (``track_changes``)."""

    # -- reading -------------------------------------------------------------------------------------

    @property
    def views(self) -> list[ViewNode]:
        if self._pieces:
            self._join_pieces()
        return self._top.items

    def take_changed(self) -> set[str]:
        changed = self.changed
        self.changed = set()
        return changed

    def is_placed(self, node_id: str) -> bool:
        """Whether ``node_id`` was placed (or, with the source's node map, is known)."""
        return node_id in self._nodes

    def call_is_real(self, call_id: str) -> bool:
        """True when a tool_call node, or a relay asking permission, exists for ``call_id``."""
        return (
            (call_id in self._calls and call_id not in self._calls_from_results)
            or call_id in self._call_nodes
            or call_id in self._relay_params
        )

    def real_call_filter(self) -> Callable[[str], bool] | None:
        """`call_is_real`, or ``None`` when every call view was made by a tool_call node."""
        return self.call_is_real if self._calls_from_results else None

    def model_call_starts(self) -> Callable[[str], bool] | None:
        """``starts(call_id)``: whether a tool call view opened a model call's calls (a ``usage``
        node, or a run's start or end, stood between it and the list's previous view:
        `build_history` starts a new assistant turn there); ``None`` when no call did."""
        return self._model_call_starts.__contains__ if self._model_call_starts else None

    def text_parts(self) -> Callable[[ViewNode], list[str] | None]:
        """``parts(view)``: the texts merged into a text or reasoning view, in order (``None``: one
        node), so a request history keeps distinct text streams apart (`build_history`)."""
        if self.track_changes:
            return self._merged_texts
        if self._pieces:
            self._join_pieces()
        return self._joined_texts

    def _merged_texts(self, view: ViewNode) -> list[str] | None:
        ids = self._members.get(id(view))
        return [self._texts[i] for i in ids] if ids is not None and len(ids) > 1 else None

    def _joined_texts(self, view: ViewNode) -> list[str] | None:
        return self._joined.get(id(view))

    def _join_pieces(self) -> None:
        for key, (content, pieces) in self._pieces.items():
            content.text = "".join(pieces)
            self._joined[key] = pieces
        self._pieces.clear()

    @property
    def top_level(self) -> Level:
        return self._top

    @property
    def sink_level(self) -> Level:
        """A list that is never shown (hidden subagents)."""
        return self._sink

    def level_at(self, index: int) -> Level:
        return self._levels[index]

    # -- entry points --------------------------------------------------------------------------------

    def add(self, node: Any, parent_id: str | None) -> None:
        """Place a new node by its parent (``None``: a root)."""
        self.place_node(node, parent_id, None)

    def add_in(self, node: Any, level: Level) -> None:
        """Place a new node in a list chosen by the source (a hypergraph thread's)."""
        self.place_node(node, None, level)

    def add_all(self, pairs: Iterable[tuple[Any, str | None]]) -> None:
        """`add` for many nodes (one-shot unless ``track_changes``: see `add_placed`)."""
        if self.track_changes:
            for node, parent_id in pairs:
                self.place_node(node, parent_id, None)
        else:
            self.add_placed((node, parent_id, None) for node, parent_id in pairs)

    def add_all_in(self, pairs: Iterable[tuple[Any, Level]]) -> None:
        """`add_in` for many nodes; ``pairs`` may be lazy (taken one placement at a time)."""
        if self.track_changes:
            for node, level in pairs:
                self.place_node(node, None, level)
        else:
            self.add_placed((node, None, level) for node, level in pairs)

    def add_placed(self, triples: Iterable[tuple[Any, str | None, Level | None]]) -> None:
        """The one-shot fill: `place_node` for every ``(node, parent id, list or None)``, between
        `start_fill` and `finish_fill`. Needs ``track_changes=False``. ``triples`` may be lazy."""
        self.start_fill()
        try:
            for node, parent_id, level in triples:
                self.place_node(node, parent_id, level)
        finally:
            self.finish_fill()

    def start_fill(self) -> None:
        """Start a one-shot fill (`add_placed`, or a source that calls `place` itself): until
        `finish_fill`, a lifecycle node re-stamps nothing; every view gets its run's final status
        when the fill ends (or, with the source's statuses of one version, when it is made)."""
        if self.track_changes:
            raise RuntimeError("ThreadBuilder.add_placed is the one-shot path: use add / add_in")
        self._filling = True

    def finish_fill(self) -> None:
        """End a one-shot fill: every view made gets its run's final status."""
        if self._deferred:
            thread_views.make_deferred(self)
        if self._filling and not self._top_level_only and not self._stamp_in_fill:
            thread_views.settle_statuses(self, thread_views.shown_views(self._top.items))
        self._filling = False

    def update(self, node: Any) -> None:
        """Refresh the views of an already placed node whose value changed (``track_changes``)."""
        if not self.track_changes:
            raise RuntimeError("ThreadBuilder.update needs track_changes=True")
        if node.id in self._nodes:
            thread_updates.update(self, node)

    # -- placement -----------------------------------------------------------------------------------

    def place_node(self, node: Any, parent_id: str | None, level: Level | None) -> None:
        """`place` for a node (a flat graph's, or a `thread_nodes` REPL node): it tells its kind,
        id, run and content itself."""
        self.place(_kind(node), node.id, node.run_id, node, parent_id, level)

    def place(
        self, kind: str, node_id: str, run_id: str, item: Any, parent_id: str | None, level: Level | None
    ) -> None:
        """**Where a node goes**, for every projection: node ``node_id`` of kind ``kind`` and run
        ``run_id``, whose content fields are ``item``'s (a node's, or a hypergraph event's with
        the same names), goes in ``level`` when the source chose the list, else in the list its
        parent ``parent_id`` gives (`level_for_parent`); its view is then made or updated there
        (`place_in`). Anything of a run first drops that run's pending view. O(1) amortised."""
        if self._pending and run_id in self._pending:
            self._drop_pending(run_id)
        if self._deferred and run_id in self._deferred:
            thread_views.drop_deferred(self, run_id)
        if level is None:
            level = self.level_for_parent(run_id, parent_id)
        if self._record:
            self._recorded[node_id] = item
        # the run's list (a run's nodes mostly come in a row: the last node's run is remembered)
        first = self._last_first if run_id == self._last_run else self._run_level.get(run_id, -1)
        if first == -1:
            first = self._run_level[run_id] = level.index
        elif first != level.index:
            self._moved[node_id] = level.index
        self._last_run = run_id
        self._last_kind = kind
        self._last_first = first
        self._last_index = level.index
        self._last_id = node_id
        self.place_in(kind, node_id, run_id, item, level)

    def level_for_parent(self, run_id: str, parent_id: str | None) -> Level:
        """The list a node of ``run_id`` goes to, given its parent (the rules in the module
        docstring). A cross-run parent also records which run spawned ``run_id``."""
        if parent_id is None:
            return self._top
        if parent_id == self._last_id:
            parent_run = self._last_run
            parent_kind = self._last_kind
            level: Level | None = self._levels[self._last_index]
        else:
            parent = self._nodes.get(parent_id)
            if parent is None:  # a parent not placed: a root
                return self._top
            parent_run = parent.run_id
            parent_kind = _kind(parent)
            level = self._level_of(parent_id, parent_run)
        if level is None:
            return self._top
        if parent_run == run_id:
            if parent_kind in CONTENT_KINDS:  # (read only for content parents)
                self._has_continuation.add(parent_id)
            return level
        self.link_run(run_id, parent_run)
        parent_view = self.view_of(parent_id, parent_kind)
        if parent_kind == "tool_call":
            if self.hide_subagents:
                return self._sink
            return level if parent_view is None else self._new_level(parent_view, False)
        if parent_kind in CONTENT_KINDS and parent_view is not None:
            if parent_id not in self._has_continuation and parent_id not in self._promoted:
                self._promoted.add(parent_id)
                return level
            return self._new_level(parent_view, False)
        return level

    def _level_of(self, node_id: str, run_id: str) -> Level | None:
        """The list of placed node ``node_id`` of run ``run_id`` (None: its run has none)."""
        index = self._moved.get(node_id) if self._moved else None
        if index is None:
            index = self._run_level.get(run_id)
        return None if index is None else self._levels[index]

    def spawn_level(self, trigger_id: str | None, trigger_kind: str, level: Level) -> Level:
        """The list a thread spawned from node ``trigger_id`` (of ``trigger_kind``, placed in
        ``level``) goes to: a new branch of the trigger's view, ``level`` when it has no view (or
        made no node: ``trigger_id`` None), nowhere (a sink) for a tool call when subagents are
        hidden."""
        if trigger_id is None:
            return level
        if trigger_kind == "tool_call" and self.hide_subagents:
            return self._sink
        view = self.view_of(trigger_id, trigger_kind)
        return level if view is None else self._new_level(view, False)

    def view_of(self, node_id: str, kind: str) -> ViewNode | None:
        """The view placed node ``node_id`` (of ``kind``) made or merged into, if any. A
        top-level-only build keeps no index (its nested lists have no owner: only whether there is
        a view matters, told by `VIEW_KINDS`): `_NO_VIEW` stands for any."""
        if self._index_views:
            return self._view_of.get(node_id)
        if kind not in VIEW_KINDS or (kind == "reasoning" and self.hide_reasoning):
            return None
        return _NO_VIEW

    def link_run(self, run_id: str, parent_run_id: str) -> None:
        """Record that ``run_id`` was spawned by ``parent_run_id`` (status inheritance)."""
        run = self._run(run_id)
        if run.parent is None and parent_run_id != run_id:
            run.parent = parent_run_id
            self._status.pop(run_id, None)
            if self._filling:  # (children are read by `thread_views.restamp` only, never one-shot)
                return
            spawner = self._run(parent_run_id)
            if spawner.children is None:
                spawner.children = [run_id]
            else:
                spawner.children.append(run_id)

    def place_in(self, kind: str, node_id: str, run_id: str, item: Any, level: Level) -> None:
        """**Which view a node makes or changes** in its list ``level``, by its kind."""
        if kind == "tool_progress":
            thread_views.add_progress(self, node_id, item)
        elif kind == "text" or kind == "reasoning":
            thread_views.add_text(self, node_id, run_id, item, kind == "reasoning", level)
        elif kind == "tool_call":
            thread_views.add_tool_call(self, node_id, run_id, item, level)
        elif kind == "tool_result":
            thread_views.add_tool_result(self, node_id, run_id, item, level)
        elif kind == "user":
            self._add_view(node_id, run_id, _UserContent(content=item.content), level)
        elif kind == "relay":
            self._relay_params[item.tool_call_id] = item.params
            self._add_view(node_id, run_id, thread_updates.relay_content(item), level)
        elif kind == "usage":
            level.after_boundary = True
        elif kind in LIFECYCLE_KINDS:
            if kind != "error":  # (a run's start or end)
                level.after_boundary = True
            thread_views.add_lifecycle(self, kind, node_id, run_id, item, level)
        elif kind.startswith("repl_"):
            thread_updates.add_repl(self, item, kind, level)

    # -- views ---------------------------------------------------------------------------------------

    def _new_view(self, view_id: str, run_id: str, content: Any) -> ViewNode:
        role: Role = "user" if type(content) is _UserContent else "assistant"
        status: Status = "complete"  # (a fill settles it at the end, expecting "complete")
        if role != "user" and (not self._filling or self._stamp_in_fill):
            status = self.status_of(run_id)
        return _ViewNode(
            id=view_id, run_id=run_id, role=role, content=content, status=status, branches=_NO_BRANCHES
        )

    def _add_view(self, node_id: str, run_id: str, content: Any, level: Level) -> None:
        view = self._new_view(node_id, run_id, content)
        if self._index_views:
            self._view_of[node_id] = view
        self._append(level, view)

    def _call_content(self, name: str, tool_input: Any) -> ToolCallContent:
        if self.collapse_tools:
            return _ToolCallContent(name=name)
        return _ToolCallContent(name=name, input=tool_input)

    def _set_output(self, content: Any, output: Any) -> None:
        content.output = True if self.collapse_tools else output
        content.has_output = True

    def accumulator(self, tool: str) -> Any:
        """The registry's accumulator for ``tool`` (looked up once per tool)."""
        if tool in self._accumulators:
            return self._accumulators[tool]
        found = self._accumulators[tool] = self.registry.get(tool)
        return found

    def _fold_step(self, tool: str) -> Callable[[Any, Any], Any] | None:
        """`progress.fold_step` of ``tool``'s accumulator (looked up once per tool): the state it
        folds is its call view's own (made by ``init`` or by an earlier step)."""
        if tool in self._fold_steps:
            return self._fold_steps[tool]
        accumulator = self.accumulator(tool)
        step = self._fold_steps[tool] = None if accumulator is None else fold_step(accumulator)
        return step

    # -- lists ---------------------------------------------------------------------------------------

    def _new_level(self, owner: ViewNode | None, attached: bool) -> Level:
        # a top-level-only build never attaches a nested list: it has no owner
        level = Level(None if self._top_level_only else owner, attached, len(self._levels))
        self._levels.append(level)
        return level

    def _append(self, level: Level, view: ViewNode) -> None:
        """Append ``view`` to ``level`` (after dropping a pending view standing last), attach the
        list to its owner on its first view, and record the view for its status."""
        items = level.items
        if level.pending_run is not None:
            thread_views.drop_deferred(self, level.pending_run)
        elif items and type(items[-1].content) is _PendingContent:
            self._drop_pending(items[-1].run_id)
        items.append(view)
        if level.after_boundary:
            thread_views.note_model_call(self, level, view)
        owner = level.owner
        if not level.attached and owner is not None:
            _add_branch(owner, items)
            level.attached = True
            if self.track_changes:
                self.changed.add(owner.id)
        if not self._filling:  # (a fill settles statuses over the shown tree: `finish_fill`)
            run = self._run(view.run_id)
            if run.views is None:
                run.views = [view]
            else:
                run.views.append(view)
        if self.track_changes:
            self.changed.add(view.id)

    def _drop_pending(self, run_id: str) -> None:
        entry = self._pending.pop(run_id, None)
        if entry is None:
            return
        level, view = entry
        items = level.items
        if items and items[-1] is view:
            items.pop()
        else:
            thread_views.remove_view(items, view)
        run_views = self._run(run_id).views
        if run_views is not None:
            thread_views.remove_view(run_views, view)
        if not items and level.attached and level.owner is not None:
            self._detach(level, level.owner)
        if self.track_changes:
            self.changed.add(view.id)

    def _detach(self, level: Level, owner: ViewNode) -> None:
        """Take an emptied list out of its owner's branches."""
        branches = owner.branches
        for i in range(len(branches)):
            if branches[i] is level.items:
                del branches[i]
                break
        level.attached = False
        if self.track_changes:
            self.changed.add(owner.id)

    # -- runs and status -----------------------------------------------------------------------------

    def _run(self, run_id: str) -> Run:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run()
        return run

    def status_of(self, run_id: str) -> Status:
        """Effective status of a run (own lifecycle, else inherited from its spawner). O(1)."""
        status = self._status.get(run_id)
        if status is None:
            status = self._status[run_id] = thread_views.compute_status(self, run_id)
        return status


_NO_VIEW: Final = ViewNode(id="", run_id="", role="assistant", content=PendingContent(), status="complete")
"""Stands for "a view" where a top-level-only build keeps none (`ThreadBuilder.view_of`)."""


def _kind(node: Any) -> str:
    """A node's kind (a flat node's by its type: no property call)."""
    kind: str | None = _KIND_OF_TYPE.get(type(node))
    return node.kind if kind is None else kind
