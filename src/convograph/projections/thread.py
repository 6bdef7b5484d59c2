"""Thread projection (seed 001 "Thread Projection"): the graph as nested `ViewNode`s for chat UIs.

One builder, `ThreadBuilder`, places graph nodes **one at a time in arrival order**. The one-shot
`project_thread` feeds it every node of a finished graph; the incremental projector
(`convograph.projections.incremental`) feeds it each node as its event arrives. Both therefore give
the same views by construction.

Placement of a node ``n`` whose incoming edge comes from ``p`` (seed rules, spec §4.1):

- no ``p`` (a root): the top-level list;
- ``p`` in the same run (sequential edge): ``p``'s list;
- ``p`` in another run (cross-run edge):
  - ``p`` is a tool call: a new branch of ``p``'s view (a subagent stays nested even before the
    result arrives);
  - ``p`` emits a view (text, user, ...): the first such child of ``p`` continues ``p``'s list when
    ``p`` had no same-run continuation yet (a user message flows into its reply); other children
    open branches of ``p``'s view;
  - ``p`` is structural (lifecycle, usage, tool result, progress): ``p``'s list ("spliced"); this is
    how provider runs join their agent's list.

Every list is appended to in arrival order, so content is never reordered (fixes upstream's §9 #1,
where every provider text came before the agent's first tool call).

Views: text, reasoning, tool_call, user, error and relay nodes emit one; consecutive text (or
reasoning) of one run in one list merge into one view, and the merged view still collects the
branches of every merged node (§9 #18). Tool results and progress merge into their call through an
index by call id over the whole projection, in either arrival order (§9 #4, #20). A result without
a call (a denied call, or an orphan) shows as a tool_call view with its output; a denied call takes
its input from the relay that asked for it (§9 #3). A run whose ``harness_start`` is its newest node
shows a ``pending`` view until anything follows it.

Status per run (seed 001 "Status Derivation"): ``<run>:error`` -> error, else ``<run>:harness_end``
-> complete, else ``<run>:harness_start`` -> streaming; a run without lifecycle nodes (a provider
call) inherits the status of the run that spawned it (§9 #2), else complete. User views are always
complete.

Complexity: O(1) amortised per node placed or updated; a lifecycle node re-stamps the views of its
run (and of descendant runs without lifecycle), which is O(views) once per run. `project_thread` is
O(N + E). Iterative throughout: nesting depth is unbounded and cycles terminate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import repeat
from typing import Any, Final

import msgspec

from convograph.graph.model import Graph
from convograph.graph.nodes import (
    KIND_OF_NODE_TYPE as _KIND_OF_TYPE,
)
from convograph.graph.nodes import (
    ErrorNode,
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
from convograph.projections.progress import ProgressRegistry, default_registry
from convograph.projections.view import (
    ErrorContent,
    PendingContent,
    ReasoningContent,
    RelayContent,
    ReplContent,
    ReplResult,
    Role,
    Status,
    TextContent,
    ToolCallContent,
    UserContent,
    ViewNode,
    ViewOptions,
)

__all__ = ["ThreadBuilder", "copy_views", "graph_arrival_order", "project_graph_thread", "project_thread"]


class _ReplNode(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", gc=False):
    """A REPL chunk made a thread node (hypergraph, ``ViewOptions(repl_cells=True)`` only: the flat
    graph keeps no ``repl_*`` nodes, so these are not `convograph.graph` node types)."""

    id: str
    run_id: str

    @property
    def kind(self) -> str:
        return self.__struct_config__.tag  # type: ignore[return-value]


class ReplInputNode(_ReplNode, frozen=True, tag="repl_input"):
    code: str
    iteration: int | None = None


class ReplProgressNode(_ReplNode, frozen=True, tag="repl_progress"):
    repl_id: str
    """The event's ``id``: its turn's ``repl_input`` id (or a fresh id: then the run's latest turn)."""
    chunk: str
    stream: str = "stdout"


class ReplOutputNode(_ReplNode, frozen=True, tag="repl_output"):
    repl_id: str
    result: ReplResult


RESULT_SUFFIX: Final = ":result"
_CONTENT_KINDS: Final = frozenset({"text", "reasoning", "tool_call", "user", "error", "relay"})
_LIFECYCLE_KINDS: Final = frozenset({"harness_start", "harness_end", "error"})
_CONTENT_TYPES: Final[frozenset[type[Any]]] = frozenset(
    {TextNode, ReasoningNode, ToolCallNode, UserNode, ErrorNode, RelayNode}
)
"""The flat node types of `_CONTENT_KINDS` (`ThreadBuilder._place_flat` dispatches on types)."""


def _open_or_failed(run: _Run) -> bool:
    """A run whose own status is not ``complete`` (`ThreadBuilder._compute_status`)."""
    return run.errored or (run.started and not run.ended)


def _unsealed(signature: str | None, redacted: str | None, content: Any) -> bool:
    """True when a reasoning node (its ``signature`` and ``redacted`` data) may merge into the
    reasoning view ``content``: neither is signed or redacted."""
    return signature is None is redacted and content.signature is None is content.redacted_data


def call_id_of_result(node_id: str) -> str:
    """The tool call id of a tool_result node id (``<id>:result``)."""
    return node_id[: -len(RESULT_SUFFIX)] if node_id.endswith(RESULT_SUFFIX) else node_id


class _Level:
    """One list of views: the top level, or one branch of ``owner`` (attached on first view)."""

    __slots__ = ("attached", "deferred_id", "deferred_pending", "index", "items", "owner")

    def __init__(self, owner: ViewNode | None, *, attached: bool, index: int) -> None:
        self.items: list[ViewNode] = []
        self.owner = owner
        self.attached = attached
        self.index = index
        """Position in the builder's level list: placement records hold this int rather than the
        level itself, so they stay plain (untracked) tuples for the garbage collector."""
        self.deferred_pending: str | None = None
        """The run whose pending view stands, not yet made, at the end of this list (one-shot loop:
        most are dropped by the next node, so the view is only made for those left at the end)."""
        self.deferred_id = ""
        """The id that view will have (its ``harness_start`` node's)."""


class _Run(msgspec.Struct, gc=False):
    """Lifecycle flags and views of one run (untracked by the cyclic GC: it holds strings and
    lists of views, never itself)."""

    started: bool = False
    ended: bool = False
    errored: bool = False
    parent: str | None = None
    children: list[str] | None = None
    """Runs it spawned, created with the first one (most runs spawn none)."""
    views: list[ViewNode] | None = None
    """Its views, for re-stamping (incremental builds), created with the first one. The one-shot
    loop keeps no per-run lists (one list per run was ~18k GC-tracked objects for 100k nodes): it
    collects every view in one list and settles statuses at the end (`ThreadBuilder._add_many`)."""

    def add_child(self, run_id: str) -> None:
        if self.children is None:
            self.children = [run_id]
        else:
            self.children.append(run_id)

    @property
    def has_lifecycle(self) -> bool:
        return self.started or self.ended or self.errored


class _Memo(dict[str, Any]):
    """``key -> fn(key)``, computed on first use: a hit is a C-level dict lookup (the one-shot
    loops look a tool's accumulator up per progress node, ~27k times per 100k nodes, without
    calling `ProgressRegistry.get`, a Python method, each time)."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[str], Any]) -> None:
        super().__init__()
        self._fn = fn

    def __missing__(self, key: str) -> Any:
        value = self[key] = self._fn(key)
        return value


class ThreadBuilder:
    """Builds thread views from nodes given in arrival order (see the module docstring).

    ``add(node, parent_id)`` places a new node; ``update(node)`` refreshes the views of a node that
    changed (a streamed delta, a redelivered call). ``views`` is the live top-level list.
    ``track_changes=True`` (the incremental projectors) records changed view ids and what updates
    need; without it (one-shot projections) merged text is joined once, when ``views`` is read.
    """

    def __init__(
        self,
        *,
        options: ViewOptions | None = None,
        registry: ProgressRegistry | None = None,
        track_changes: bool = False,
        status_of: Callable[[str], Status] | None = None,
        top_level_only: bool = False,
    ) -> None:
        self.track_changes = track_changes
        self._external_status = status_of
        self._top_level_only = top_level_only and not track_changes
        """Only the top-level list's content will be read (`project_messages`): nested lists are
        built by the same rules but never attached to their owner views, every view shares one
        empty ``branches`` list, so a 100k-view build allocates no list per view (~41k long-lived
        GC-tracked objects), and statuses are not settled (~7 ms; views keep ``"complete"``).
        Such views must not leave the caller."""
        self._new_branches: Callable[[], list[list[ViewNode]]] = (
            repeat([]).__next__ if self._top_level_only else list
        )
        self.options = options or ViewOptions()
        self.registry = registry if registry is not None else default_registry
        self._levels: list[_Level] = []
        self._top = self._new_level(None, attached=True)
        self._sink = self._new_level(None, attached=False)
        self._placed: dict[str, tuple[int, str, str]] = {}
        """node id -> (index of its list in ``_levels``, its kind, its run)."""
        self._status: dict[str, Status] = {}
        """Effective status per run, kept current by `_restamp`."""
        self._view_of: dict[str, ViewNode] = {}
        self._has_continuation: set[str] = set()
        self._promoted: set[str] = set()
        self._members: dict[int, list[str]] = {}
        self._texts: dict[str, str] = {}
        self._pieces: dict[int, tuple[TextContent | ReasoningContent, list[str]]] = {}
        self._joined: dict[int, list[str]] = {}
        """The pieces `_join_pieces` joined, by view (`text_parts`)."""
        self._signatures: dict[str, str | None] = {}
        self.needs_rebuild = False
        """Set by `update` when a change cannot be patched in place (a reasoning node signed after
        it merged into a view with others): the projector then rebuilds its views."""
        self._calls: dict[str, ViewNode] = {}
        self._call_nodes: set[str] = set()
        """Ids of tool_call nodes placed (all of them, except in the one-shot fills of a flat graph
        or a hypergraph, which need only those that joined a view made by their result: see
        `call_is_real`)."""
        self._calls_from_results: set[str] = set()
        """Call ids whose view a tool_result made (no call node yet: a denial or an orphan)."""
        self._results: dict[str, Any] = {}
        self._progress: dict[str, dict[str, tuple[str, Any]]] = {}
        self._relay_params: dict[str, dict[str, Any]] = {}
        self._repls: dict[str, ViewNode] = {}
        """``repl_input`` id -> its cell (``ViewOptions.repl_cells``); the latest per run below."""
        self._latest_repl: dict[str, ViewNode] = {}
        self._runs: dict[str, _Run] = {}
        self._pending: dict[str, tuple[_Level, ViewNode | None]] = {}
        """run -> (its list, its pending view; ``None`` while deferred: `_Level.deferred_pending`)."""
        self._settle: list[ViewNode] | None = None
        """While the one-shot loop runs: every view created, for `_settle_statuses`."""
        self.changed: set[str] = set()
        """Ids of views created or changed since the last `take_changed`, when ``track_changes``."""

    @property
    def views(self) -> list[ViewNode]:
        if self._pieces:
            self._join_pieces()
        return self._top.items

    def take_changed(self) -> set[str]:
        changed, self.changed = self.changed, set()
        return changed

    def is_placed(self, node_id: str) -> bool:
        """Whether ``node_id`` was placed (builders that place by parent id: incremental ones and
        the general one-shot loop; a flat graph's one-shot fill keeps no record per node)."""
        return node_id in self._placed

    def call_is_real(self, call_id: str) -> bool:
        """True when a tool_call node, or a relay asking permission, exists for ``call_id``: a call
        view made by a tool_call node (every one not made by its result), or a call node that
        joined a view its result made, or a relay."""
        return (
            (call_id in self._calls and call_id not in self._calls_from_results)
            or call_id in self._call_nodes
            or call_id in self._relay_params
        )

    def real_call_filter(self) -> Callable[[str], bool] | None:
        """`call_is_real`, or ``None`` when every call view was made by a tool_call node (no
        result came before or without its call), so that every call is real (`build_history`'s
        ``include_call``)."""
        return self.call_is_real if self._calls_from_results else None

    def text_parts(self) -> Callable[[ViewNode], list[str] | None]:
        """``parts(view)``: the texts of the nodes merged into a text or reasoning ``view``, in
        order (``None``: one node), so a request history can keep distinct text streams apart
        (`build_history`). O(merged views) to take; O(parts) per merged view asked."""
        if self.track_changes:
            members, texts = self._members, self._texts

            def merged(view: ViewNode) -> list[str] | None:
                ids = members.get(id(view))
                return [texts[i] for i in ids] if ids is not None and len(ids) > 1 else None

            return merged
        if self._pieces:
            self._join_pieces()
        return lambda view: self._joined.get(id(view))

    # -- runs and status -----------------------------------------------------------------------------

    def _run(self, run_id: str) -> _Run:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run()
        return run

    def status_of(self, run_id: str) -> Status:
        """Effective status of a run (own lifecycle, else inherited from its spawner). O(1)."""
        status = self._status.get(run_id)
        if status is None:
            status = self._status[run_id] = self._compute_status(run_id)
        return status

    def _compute_status(self, run_id: str) -> Status:
        if self._external_status is not None:
            return self._external_status(run_id)
        seen: set[str] = set()
        current: str | None = run_id
        while current is not None and current not in seen:
            seen.add(current)
            run = self._runs.get(current)
            if run is None:
                return "complete"
            if run.errored:
                return "error"
            if run.ended:
                return "complete"
            if run.started:
                return "streaming"
            current = run.parent
        return "complete"

    def _is_open(self, run_id: str) -> bool:
        """Started, and neither ended nor failed, as far as the nodes placed so far tell."""
        run = self._runs.get(run_id)
        return run is not None and run.started and not run.ended and not run.errored

    def _restamp(self, run_id: str) -> None:
        stack = [run_id]
        seen: set[str] = set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            run = self._runs.get(current)
            if run is None:
                continue
            status = self._status[current] = self._compute_status(current)
            for view in run.views or ():
                if view.role != "user" and view.status != status:
                    view.status = status
                    if self.track_changes:
                        self.changed.add(view.id)
            for child in run.children or ():
                child_run = self._runs.get(child)
                if child_run is not None and not child_run.has_lifecycle:
                    stack.append(child)

    # -- levels --------------------------------------------------------------------------------------

    def _append(self, level: _Level, view: ViewNode) -> None:
        items = level.items
        if level.deferred_pending is not None:
            self._drop_pending(level.deferred_pending)
        elif items and isinstance(items[-1].content, PendingContent):
            self._drop_pending(items[-1].run_id)
        items.append(view)
        if not level.attached and level.owner is not None:
            level.owner.branches.append(items)
            level.attached = True
            if self.track_changes:
                self.changed.add(level.owner.id)
        settle = self._settle
        if settle is not None:
            settle.append(view)
        else:
            run = self._runs.get(view.run_id)
            if run is None:
                run = self._runs[view.run_id] = _Run()
            if run.views is None:
                run.views = [view]
            else:
                run.views.append(view)
        if self.track_changes:
            self.changed.add(view.id)

    def level_at(self, index: int) -> _Level:
        """The list whose `_Level.index` is ``index``."""
        return self._levels[index]

    def _new_level(self, owner: ViewNode | None, *, attached: bool = False) -> _Level:
        if self._top_level_only:
            owner = None  # never attached: see ``top_level_only``
        level = _Level(owner, attached=attached, index=len(self._levels))
        self._levels.append(level)
        return level

    def _drop_pending(self, run_id: str) -> None:
        entry = self._pending.pop(run_id, None)
        if entry is None:
            return
        level, view = entry
        items = level.items
        if view is None:  # deferred (never made): only its list's attachment to undo
            level.deferred_pending = None
            if not items and level.attached and level.owner is not None:
                self._detach(level)
            return
        if items and items[-1] is view:
            items.pop()
        else:
            for i, item in enumerate(items):
                if item is view:
                    del items[i]
                    break
        run_views = self._run(run_id).views or []  # (none in the one-shot loop: see `_settle`)
        for i in range(len(run_views) - 1, -1, -1):
            if run_views[i] is view:
                del run_views[i]
                break
        if not items and level.attached and level.owner is not None:
            self._detach(level)
        if self.track_changes:
            self.changed.add(view.id)

    def _detach(self, level: _Level) -> None:
        """Take an emptied list out of its owner's branches."""
        owner = level.owner
        assert owner is not None
        items = level.items
        branches = owner.branches
        for i, branch in enumerate(branches):
            if branch is items:
                del branches[i]
                break
        level.attached = False
        if self.track_changes:
            self.changed.add(owner.id)

    def _place_cross(
        self, node: Node, parent_id: str, parent_level: _Level, parent_kind: str, parent_run: str
    ) -> _Level:
        run = self._run(node.run_id)
        if run.parent is None:
            run.parent = parent_run
            self._run(parent_run).add_child(node.run_id)
            self._status.pop(node.run_id, None)
        parent_view = self._view_of.get(parent_id)
        if parent_kind == "tool_call":
            if self.options.hide_subagents:
                return self._sink
            if parent_view is not None:
                return self._new_level(parent_view)
            return parent_level
        if parent_kind in _CONTENT_KINDS and parent_view is not None:
            if parent_id not in self._has_continuation and parent_id not in self._promoted:
                self._promoted.add(parent_id)
                return parent_level
            return self._new_level(parent_view)
        return parent_level

    # -- nodes ---------------------------------------------------------------------------------------

    def add(self, node: Node, parent_id: str | None) -> None:
        """Place a new node; ``parent_id`` is the source of its incoming edge (``None``: a root)."""
        run_id = node.run_id
        kind = _KIND_OF_TYPE.get(type(node)) or node.kind
        if self._pending and run_id in self._pending:
            self._drop_pending(run_id)
        placed = self._placed.get(parent_id) if parent_id is not None else None
        if placed is None:
            level = self._top
        else:
            level_index, parent_kind, parent_run = placed
            level = self._levels[level_index]
            if parent_run == run_id:
                self._has_continuation.add(parent_id)  # type: ignore[arg-type]
            else:
                level = self._place_cross(node, parent_id, level, parent_kind, parent_run)  # type: ignore[arg-type]
        self._add_in(node, level, kind)

    def add_all(self, pairs: Iterable[tuple[Node, str | None]]) -> None:
        """`add` for many nodes: the same placement and views (one-shot projections spend most of
        their time here). Without ``track_changes`` the common kinds (text, reasoning, tool call,
        result and progress, user, usage) are handled inline with the loop's lookups hoisted; the
        rare paths call the same methods `add` uses. The golden-output and projector-equals-one-shot
        tests hold the two paths equal."""
        if self.track_changes:
            for node, parent_id in pairs:
                self.add(node, parent_id)
            return
        self._add_many((node, parent_id, None) for node, parent_id in pairs)

    def add_all_in(self, pairs: Iterable[tuple[Node, _Level]]) -> None:
        """`add_in` for many nodes, each in the list given with it (the hypergraph's threads).
        ``pairs`` may be lazy: the next pair is taken only once the previous node is placed."""
        if self.track_changes:
            for node, level in pairs:
                self.add_in(node, level)
            return
        self._add_many((node, None, level) for node, level in pairs)

    def add_placed(self, triples: Iterable[tuple[Node, str | None, _Level | None]]) -> None:
        """The one-shot fast path behind `add_all` / `add_all_in`, taking ``(node, parent id, None)``
        (placed by the parent) or ``(node, None, level)`` (placed in ``level``) directly, so a
        caller that produces triples pays no adapter per node. Needs ``track_changes=False``.
        Statuses are settled when it returns (every view gets its run's status then); the views it
        made are not re-stamped by a later lifecycle node (a one-shot builder is read, not fed)."""
        if self.track_changes:
            raise RuntimeError("ThreadBuilder.add_placed is the one-shot path: use add / add_in")
        self._add_many(triples)

    def _add_many(self, triples: Iterable[tuple[Node, str | None, _Level | None]]) -> None:
        """The one-shot loop: ``(node, parent id, None)`` places by the parent, ``(node, None,
        level)`` in ``level``.

        Statuses are settled once at the end (`_settle_statuses`) instead of re-stamping a run's
        views at each lifecycle node: a one-shot result is only read when complete, and the final
        status of every view is its run's final status, which is what the re-stamps of `add`
        converge to (views of a run are only created once its spawner link is known). Cross-run
        placement (`_place_cross`) and lifecycle nodes (`_add_in`) are inlined with the same
        rules."""
        settle = self._open_one_shot()
        try:
            self._place_many(triples)
        finally:
            self._close_one_shot(settle)

    def _open_one_shot(self) -> list[ViewNode]:
        """Start a one-shot fill (`_add_many`; `convograph.projections.sources` fills the
        hypergraph's chunks between the two calls): views created from here on are collected for
        `_close_one_shot` instead of per run."""
        settle: list[ViewNode] = []
        self._settle = settle
        return settle

    def _close_one_shot(self, settle: list[ViewNode]) -> None:
        """End a one-shot fill: make the pending views still deferred and settle statuses."""
        self._make_deferred_pending(settle)
        self._settle = None
        if not self._top_level_only:  # (that reader takes content only: see the flag)
            self._settle_statuses(settle)

    def _place_many(self, triples: Iterable[tuple[Node, str | None, _Level | None]]) -> None:
        """The loop of `_add_many`, between `_open_one_shot` and `_close_one_shot`."""
        placed = self._placed
        placed_get = placed.get
        levels = self._levels
        top = self._top
        sink = self._sink
        has_continuation = self._has_continuation
        promoted = self._promoted
        pending = self._pending
        kind_of = _KIND_OF_TYPE
        lifecycle = _LIFECYCLE_KINDS
        content_kinds = _CONTENT_KINDS
        view_of = self._view_of
        view_of_get = view_of.get
        calls = self._calls
        calls_get = calls.get
        call_nodes = self._call_nodes
        relay_params = self._relay_params
        results = self._results
        progress = self._progress
        progress_get = progress.get
        runs = self._runs
        runs_get = runs.get
        status_pop = self._status.pop
        pieces = self._pieces
        accumulators = _Memo(self.registry.get)
        options = self.options
        # Nothing to fold (no accumulator, collapsed tools): progress nodes are only placed.
        skip_progress = self.registry.folds_nothing or options.collapse_tools
        hide_reasoning = options.hide_reasoning
        hide_subagents = options.hide_subagents
        collapse = options.collapse_tools
        new_level = self._new_level
        new_branches = self._new_branches
        result_suffix = RESULT_SUFFIX
        cut = -len(RESULT_SUFFIX)
        unsettled: Status = "complete"  # every assistant view's status is set by `_settle_statuses`
        settle = self._settle
        assert settle is not None, "between _open_one_shot and _close_one_shot only"
        settle_append = settle.append
        for node, parent_id, given_level in triples:
            run_id = node.run_id
            kind = kind_of.get(type(node)) or node.kind
            if pending and run_id in pending:
                self._drop_pending(run_id)
            level = top if given_level is None else given_level
            if parent_id is not None:
                parent = placed_get(parent_id)
                if parent is not None:
                    level_index, parent_kind, parent_run = parent
                    level = levels[level_index]
                    if parent_run == run_id:
                        if parent_kind in content_kinds:  # only read for content parents
                            has_continuation.add(parent_id)
                    else:  # `_place_cross`, inline
                        run = runs_get(run_id)
                        if run is None:
                            run = runs[run_id] = _Run()
                        if run.parent is None:
                            run.parent = parent_run
                            spawner = runs_get(parent_run)
                            if spawner is None:
                                spawner = runs[parent_run] = _Run()
                            spawner.add_child(run_id)
                            status_pop(run_id, None)
                        if parent_kind == "tool_call":
                            if hide_subagents:
                                level = sink
                            else:
                                parent_view = view_of_get(parent_id)
                                if parent_view is not None:
                                    level = new_level(parent_view)
                        elif parent_kind in content_kinds:
                            parent_view = view_of_get(parent_id)
                            if parent_view is not None:
                                if parent_id not in has_continuation and parent_id not in promoted:
                                    promoted.add(parent_id)
                                else:
                                    level = new_level(parent_view)
            node_id = node.id
            placed[node_id] = (level.index, kind, run_id)
            if kind in lifecycle:  # `_add_in`, inline (the status re-stamp is deferred)
                run = runs_get(run_id)
                if run is None:
                    run = runs[run_id] = _Run()
                if kind == "harness_start":
                    run.started = True
                    if not run.ended and not run.errored:
                        # `_append` of a pending view, deferred: drop the list's own pending
                        # view, attach the list as the view would, and make the view only if
                        # nothing follows it by the end (`_make_deferred_pending`).
                        items = level.items
                        if level.deferred_pending is not None:
                            self._drop_pending(level.deferred_pending)
                        elif pending and items and type(items[-1].content) is PendingContent:
                            self._drop_pending(items[-1].run_id)
                        if not level.attached and level.owner is not None:
                            level.owner.branches.append(items)
                            level.attached = True
                        level.deferred_pending = run_id
                        level.deferred_id = node_id
                        pending[run_id] = (level, None)
                elif kind == "harness_end":
                    run.ended = True
                else:
                    run.errored = True
                    self._add_error(node, level)  # type: ignore[arg-type]
                continue
            view: ViewNode | None
            content: Any
            if kind == "text" or kind == "reasoning":
                is_reasoning = kind == "reasoning"
                if is_reasoning and hide_reasoning:
                    continue
                text: str = node.fragments.text()  # type: ignore[union-attr]
                signature = node.signature if is_reasoning else None  # type: ignore[union-attr]
                redacted = node.redacted_data if is_reasoning else None  # type: ignore[union-attr]
                items = level.items
                if items and level.deferred_pending is None:  # a pending view stands last
                    last = items[-1]
                    content = last.content
                    if (
                        last.run_id == run_id
                        and type(content) is (ReasoningContent if is_reasoning else TextContent)
                        # (a signed or redacted thinking block stays a view of its own: `_add_text`)
                        and (not is_reasoning or _unsealed(signature, redacted, content))
                    ):
                        entry = pieces.get(id(last))
                        if entry is None:
                            pieces[id(last)] = (content, [content.text, text])
                        else:
                            entry[1].append(text)
                        view_of[node_id] = last
                        continue
                content = (
                    ReasoningContent(text=text, signature=signature, redacted_data=redacted)
                    if is_reasoning
                    else TextContent(text=text)
                )
            elif kind == "tool_progress":
                if skip_progress:
                    continue
                call_id = node.tool_call_id  # type: ignore[union-attr]
                view = calls_get(call_id)
                if view is None:  # folded when the call arrives
                    entries = progress_get(call_id)
                    if entries is None:
                        entries = progress[call_id] = {}
                    entries[node_id] = (node.name, node.content)  # type: ignore[union-attr]
                    continue
                if collapse:
                    continue
                accumulator = accumulators[node.name]  # type: ignore[union-attr]
                if accumulator is None:
                    continue
                content = view.content
                state = content.progress
                content.progress = accumulator.reduce(
                    accumulator.init() if state is None else state,
                    node.content,  # type: ignore[union-attr]
                )
                continue
            elif kind == "tool_result":
                call_id = node_id[:cut] if node_id.endswith(result_suffix) else node_id
                output = node.output  # type: ignore[union-attr]
                results[call_id] = output
                view = calls_get(call_id)
                if view is None:
                    self._add_tool_result(node, level)  # type: ignore[arg-type]
                else:
                    view.content.output = True if collapse else output  # type: ignore[union-attr]
                continue
            elif kind == "tool_call":
                call_nodes.add(node_id)
                if node_id in calls:
                    self._add_tool_call(node, level)  # type: ignore[arg-type]
                    continue
                content = (
                    ToolCallContent(name=node.name)  # type: ignore[union-attr]
                    if collapse
                    else ToolCallContent(name=node.name, input=node.input)  # type: ignore[union-attr]
                )
                if node_id in results:
                    self._set_output(content, results[node_id])
                if not collapse and node_id in progress:
                    content.progress = self._fold_progress(node_id)
            elif kind == "relay":  # `_add_relay`, inline
                relay_params[node.tool_call_id] = node.params  # type: ignore[union-attr]
                content = RelayContent(
                    relay_kind=node.relay_kind,  # type: ignore[union-attr]
                    tool_call_id=node.tool_call_id,  # type: ignore[union-attr]
                    tool=node.tool,  # type: ignore[union-attr]
                    params=node.params,  # type: ignore[union-attr]
                )
            elif kind == "user":
                view = ViewNode(
                    id=node_id,
                    run_id=run_id,
                    role="user",
                    content=UserContent(content=node.content),  # type: ignore[union-attr]
                    status="complete",
                    branches=new_branches(),
                )
                view_of[node_id] = view
                self._append(level, view)
                continue
            else:
                handler = _ADDERS.get(kind)
                if handler is not None:
                    handler(self, node, level)
                continue
            # a new assistant view (text, reasoning, tool call or relay): `_new_view` + `_append`
            view = ViewNode(
                id=node_id,
                run_id=run_id,
                role="assistant",
                content=content,
                status=unsettled,
                branches=new_branches(),
            )
            view_of[node_id] = view
            if kind == "tool_call":
                calls[node_id] = view
            items = level.items
            if level.deferred_pending is not None:
                self._drop_pending(level.deferred_pending)
            elif pending and items and type(items[-1].content) is PendingContent:
                self._drop_pending(items[-1].run_id)
            items.append(view)
            if not level.attached and level.owner is not None:
                level.owner.branches.append(items)
                level.attached = True
            settle_append(view)

    def _fill_flat(
        self, nodes: list[Node], ids: list[str], parents: list[str | None], node_map: Mapping[str, Node]
    ) -> bool:
        """One-shot fill from a flat graph's arrival lists (`_flat_arrival`: the nodes, their ids and
        their parents) and its nodes by id (`Graph.node_map`): `_add_many` with `_place_flat` as its
        loop. False when the graph is not
        run-shaped (see `_place_flat`): the builder is then half filled, to be dropped.

        The loop collects no list of the views it makes: when its lifecycle counts leave a run open
        or failed, statuses are settled over the shown tree (`_shown_views`) instead; views that are
        not shown (hidden subagents) keep ``"complete"``, which nothing reads."""
        if self.track_changes:
            raise RuntimeError("ThreadBuilder._fill_flat is a one-shot path: use add")
        settle = self._open_one_shot()  # (views of the rare paths land there, unread)
        try:
            unsettled = self._place_flat(nodes, ids, parents, node_map)
        finally:
            self._make_deferred_pending(settle)
            self._settle = None
        if unsettled is None:
            return False
        if unsettled and not self._top_level_only:
            self._settle_statuses(self._shown_views())
        return True

    def _shown_views(self) -> Iterator[ViewNode]:
        """Every view of the shown tree (the top-level list, and the branches below each view),
        depth first. O(views)."""
        stack = [self._top.items]
        while stack:
            for view in stack.pop():
                yield view
                if view.branches:
                    stack.extend(view.branches)

    def _place_flat(
        self, nodes: list[Node], ids: list[str], parents: list[str | None], node_map: Mapping[str, Node]
    ) -> bool | None:
        """`_place_many` for a flat graph: ``nodes[i]`` (id ``ids[i]``) placed by its parent ``parents[i]``, in
        arrival order (every parent before its children). Same placement and views, for a graph
        that is *run-shaped*: every node but the first of its run has a parent in its own run. The
        flat reducer makes only such graphs (a run's later nodes hang off the run's previous node;
        only a run's first node takes a cross-run parent, or is adopted by a late one), so every
        node of a run lands in the list of the run's first node. Returns None, having stopped,
        when a node breaks that (the caller then fills a new builder with `_place_many`); else
        whether a run was left open or failed (its views' statuses then need settling).

        What differs from `_place_many` is only how the loop keeps its state:

        - no placement record per node: a run's list is recorded once, at its first node
          (``run_level``); a parent's type and run are read from the parent node (``node_map``);
        - a node whose parent is the node just before it (~90 % of a conversation's nodes) takes
          the parent's list, type and run from the loop's locals, which still describe the
          previous node at the top of each step;
        - dispatch is on the node's exact type (flat nodes are `convograph.graph.nodes` types), the
          most frequent first;
        - write-only state of a one-shot build is not kept: the spawner's list of child runs and the
          status memo (read only by `_restamp` and `status_of` of incremental builds), a result's
          output by call id once its call's view exists (read only to fill a call that arrives
          later, and node ids are unique, so none can), and the id of a call node that made its
          own view (`call_is_real` reads such views as real);
        - whether a cross-run child's parent has a view is read from its type (every content node
          has one, made or merged into, but hidden reasoning), so a top-level-only build, whose
          nested lists have no owner, keeps no view by id at all.

        O(1) amortised per node; placement writes a dict once per run, not per node. Nothing
        tracked by the cyclic GC is allocated per node except the views' ``branches`` lists and
        the progress states (as `_place_many`)."""
        run_level: dict[str, _Level] = {}
        run_level_get = run_level.get
        top = self._top
        sink = self._sink
        has_continuation = self._has_continuation
        promoted = self._promoted
        pending = self._pending
        kind_of = _KIND_OF_TYPE
        content_types = _CONTENT_TYPES
        view_of = self._view_of
        view_of_get = view_of.get
        calls = self._calls
        calls_get = calls.get
        relay_params = self._relay_params
        results = self._results
        progress = self._progress
        progress_get = progress.get
        runs = self._runs
        runs_get = runs.get
        pieces = self._pieces
        accumulators = _Memo(self.registry.get)
        options = self.options
        # Nothing to fold (no accumulator, collapsed tools): progress nodes are only placed.
        skip_progress = self.registry.folds_nothing or options.collapse_tools
        hide_reasoning = options.hide_reasoning
        hide_subagents = options.hide_subagents
        collapse = options.collapse_tools
        new_level = self._new_level
        result_suffix = RESULT_SUFFIX
        cut = -len(RESULT_SUFFIX)
        unsettled: Status = "complete"  # every assistant view's status is set by `_settle_statuses`
        assert self._settle is not None, "between _open_one_shot and _close_one_shot only"
        # Top level only: every view shares one empty ``branches`` list, nested lists have no owner,
        # and no view is kept by id.
        nested = not self._top_level_only
        shared_branches = self._new_branches()
        open_runs = 0  # runs started and not ended so far
        failed = False  # a run has an error node
        progress_type = ToolProgressNode
        result_type = ToolResultNode
        call_type = ToolCallNode
        text_type = TextNode
        reasoning_type = ReasoningNode
        usage_type = UsageNode
        start_type = HarnessStartNode
        end_type = HarnessEndNode
        relay_type = RelayNode
        user_type = UserNode
        # The previous node: its id, type, run and list (the loop's locals at the top of a step).
        node_id: str | None = None
        tp: type[Any] = type(None)
        run_id = ""
        level = top
        parent_tp: type[Any] = tp
        parent_run: str | None
        for node, next_id, parent_id in zip(nodes, ids, parents, strict=True):
            if parent_id is None:
                parent_run = None
            elif parent_id == node_id:  # the previous node: ``level`` is still its list
                parent_tp = tp
                parent_run = run_id
            else:
                parent = node_map[parent_id]
                parent_tp = type(parent)
                parent_run = parent.run_id
                parent_level = run_level_get(parent_run)
                if parent_level is None:  # (never: parents come first) placed as a root
                    parent_run = None
                else:
                    level = parent_level
            tp = type(node)
            node_id = next_id  # (the ids list: no attribute read on a node of any type)
            run_id = node.run_id
            if pending and run_id in pending:
                self._drop_pending(run_id)
            if parent_run == run_id:
                if parent_tp in content_types:  # only read for content parents
                    has_continuation.add(parent_id)  # type: ignore[arg-type]
            else:  # the first node of its run: a root or a cross-run child
                if run_id in run_level:
                    return None  # not run-shaped
                if parent_run is None:
                    level = top
                else:  # `_place_cross`, inline
                    run = runs_get(run_id)
                    if run is None:
                        runs[run_id] = _Run(parent=parent_run)
                    elif run.parent is None:
                        run.parent = parent_run
                    # Every content node has a view (made, or merged into) but hidden reasoning;
                    # the view itself is read only to own a nested list.
                    if parent_tp is call_type:
                        if hide_subagents:
                            level = sink
                        elif not nested:
                            level = new_level(None)
                        else:
                            parent_view = view_of_get(parent_id)  # type: ignore[arg-type]
                            if parent_view is not None:
                                level = new_level(parent_view)
                    elif parent_tp in content_types and not (hide_reasoning and parent_tp is reasoning_type):
                        if parent_id not in has_continuation and parent_id not in promoted:
                            promoted.add(parent_id)  # type: ignore[arg-type]
                        elif not nested:
                            level = new_level(None)
                        else:
                            parent_view = view_of_get(parent_id)
                            if parent_view is not None:
                                level = new_level(parent_view)
                run_level[run_id] = level
            view: ViewNode | None
            content: Any
            if tp is progress_type:
                if skip_progress:  # (also when tools are collapsed)
                    continue
                call_id = node.tool_call_id  # type: ignore[union-attr]
                view = calls_get(call_id)
                if view is None:  # folded when the call arrives
                    entries = progress_get(call_id)
                    if entries is None:
                        entries = progress[call_id] = {}
                    entries[node_id] = (node.name, node.content)  # type: ignore[union-attr]
                    continue
                accumulator = accumulators[node.name]  # type: ignore[union-attr]
                if accumulator is None:
                    continue
                content = view.content
                state = content.progress
                content.progress = accumulator.reduce(
                    accumulator.init() if state is None else state,
                    node.content,  # type: ignore[union-attr]
                )
                continue
            if tp is result_type:
                call_id = node_id[:cut] if node_id[cut:] == result_suffix else node_id  # (no endswith call)
                view = calls_get(call_id)
                if view is None:  # no call yet: a denied or orphan call, or the call comes later
                    results[call_id] = node.output  # type: ignore[union-attr]
                    self._add_tool_result(node, level)  # type: ignore[arg-type]
                else:
                    view.content.output = True if collapse else node.output  # type: ignore[union-attr]
                continue
            if tp is call_type:
                if node_id in calls:
                    self._add_tool_call(node, level)  # type: ignore[arg-type]
                    continue
                content = (
                    ToolCallContent(name=node.name)  # type: ignore[union-attr]
                    if collapse
                    else ToolCallContent(name=node.name, input=node.input)  # type: ignore[union-attr]
                )
                if results and node_id in results:
                    self._set_output(content, results[node_id])
                if not collapse and progress and node_id in progress:
                    content.progress = self._fold_progress(node_id)
            elif tp is text_type or tp is reasoning_type:
                is_reasoning = tp is reasoning_type
                if is_reasoning and hide_reasoning:
                    continue
                text: str = node.fragments.text()  # type: ignore[union-attr]
                signature = node.signature if is_reasoning else None  # type: ignore[union-attr]
                redacted = node.redacted_data if is_reasoning else None  # type: ignore[union-attr]
                items = level.items
                if items and level.deferred_pending is None:  # a pending view stands last
                    last = items[-1]
                    content = last.content
                    if (
                        last.run_id == run_id
                        and type(content) is (ReasoningContent if is_reasoning else TextContent)
                        # (a signed or redacted thinking block stays a view of its own: `_add_text`)
                        and (not is_reasoning or _unsealed(signature, redacted, content))
                    ):
                        entry = pieces.get(id(last))
                        if entry is None:
                            pieces[id(last)] = (content, [content.text, text])
                        else:
                            entry[1].append(text)
                        if nested:
                            view_of[node_id] = last
                        continue
                content = (
                    ReasoningContent(text=text, signature=signature, redacted_data=redacted)
                    if is_reasoning
                    else TextContent(text=text)
                )
            elif tp is usage_type:
                continue
            elif tp is start_type:  # `_add_in`, inline (the status re-stamp is deferred)
                run = runs_get(run_id)
                if run is None:
                    run = runs[run_id] = _Run()
                if not run.started and not run.ended:
                    open_runs += 1
                run.started = True
                if not run.ended and not run.errored:
                    # `_append` of a pending view, deferred: drop the list's own pending view,
                    # attach the list as the view would, and make the view only if nothing
                    # follows it by the end (`_make_deferred_pending`).
                    items = level.items
                    if level.deferred_pending is not None:
                        self._drop_pending(level.deferred_pending)
                    elif pending and items and type(items[-1].content) is PendingContent:
                        self._drop_pending(items[-1].run_id)
                    if not level.attached and level.owner is not None:
                        level.owner.branches.append(items)
                        level.attached = True
                    level.deferred_pending = run_id
                    level.deferred_id = node_id
                    pending[run_id] = (level, None)
                continue
            elif tp is end_type:
                run = runs_get(run_id)
                if run is None:
                    run = runs[run_id] = _Run()
                if run.started and not run.ended:
                    open_runs -= 1
                run.ended = True
                continue
            elif tp is relay_type:  # `_add_relay`, inline
                relay_params[node.tool_call_id] = node.params  # type: ignore[union-attr]
                content = RelayContent(
                    relay_kind=node.relay_kind,  # type: ignore[union-attr]
                    tool_call_id=node.tool_call_id,  # type: ignore[union-attr]
                    tool=node.tool,  # type: ignore[union-attr]
                    params=node.params,  # type: ignore[union-attr]
                )
            elif tp is user_type:
                view = ViewNode(
                    id=node_id,
                    run_id=run_id,
                    role="user",
                    content=UserContent(content=node.content),  # type: ignore[union-attr]
                    status="complete",
                    branches=[] if nested else shared_branches,
                )
                if nested:
                    view_of[node_id] = view
                self._append(level, view)
                continue
            else:
                kind = kind_of.get(tp) or node.kind
                if kind == "error":  # a lifecycle node with a view
                    run = runs_get(run_id)
                    if run is None:
                        run = runs[run_id] = _Run()
                    run.errored = True
                    failed = True
                    self._add_error(node, level)  # type: ignore[arg-type]
                    continue
                handler = _ADDERS.get(kind)
                if handler is not None:
                    handler(self, node, level)
                continue
            # a new assistant view (text, reasoning, tool call or relay): `_new_view` + `_append`
            view = ViewNode(
                id=node_id,
                run_id=run_id,
                role="assistant",
                content=content,
                status=unsettled,
                branches=[] if nested else shared_branches,
            )
            if nested:  # (read only to own a nested list: see the cross-run placement above)
                view_of[node_id] = view
            if tp is call_type:
                calls[node_id] = view
            items = level.items
            if level.deferred_pending is not None:
                self._drop_pending(level.deferred_pending)
            elif pending and items and type(items[-1].content) is PendingContent:
                self._drop_pending(items[-1].run_id)
            items.append(view)
            if not level.attached and level.owner is not None:
                level.owner.branches.append(items)
                level.attached = True
        return failed or open_runs > 0

    def _make_deferred_pending(self, settle: list[ViewNode]) -> None:
        """Make the pending views still deferred: each stands at the end of its (already attached)
        list, where `_append` would have put it."""
        pending = self._pending
        for run_id, (level, view) in list(pending.items()):
            if view is not None:
                continue
            marker = ViewNode(
                id=level.deferred_id,
                run_id=run_id,
                role="assistant",
                content=PendingContent(),
                status="complete",
                branches=self._new_branches(),
            )
            level.items.append(marker)
            level.deferred_pending = None
            settle.append(marker)
            pending[run_id] = (level, marker)

    def _settle_statuses(self, views: Iterable[ViewNode]) -> None:
        """Give every non-user view of ``views`` its run's current status: the re-stamps of `add`,
        done once for all runs. O(runs + views).

        An external ``status_of`` (the hypergraph's, memoised there: a hit is a C-level dict
        lookup) is called per view directly, without this builder's memo in front of it. With
        the builder's own lifecycle flags, when no run is open or failed every run is complete (a
        run without lifecycle inherits its spawner's, else is complete), and so is every view
        already: a one-shot fill makes them all ``"complete"`` (`_new_view`, the loops'
        ``unsettled``), so no view is visited (O(runs))."""
        status = self._status
        status.clear()
        external = self._external_status
        if external is not None:  # `_compute_status` is the external status: no memo frames
            # (asked once per stretch of views of one run: the answer cannot change during the pass)
            last: Any = None
            run_status: Any = None
            for view in views:
                if view.role != "user":
                    run_id = view.run_id
                    if run_id != last:
                        run_status = external(run_id)
                        last = run_id
                    view.status = run_status
            return
        if not any(map(_open_or_failed, self._runs.values())):
            return
        status_get = status.get
        status_of = self.status_of
        for view in views:
            if view.role != "user":
                run_id = view.run_id
                view.status = status_get(run_id) or status_of(run_id)

    @property
    def top_level(self) -> _Level:
        return self._top

    @property
    def sink_level(self) -> _Level:
        """A list that is never shown (hidden subagents)."""
        return self._sink

    def link_run(self, run_id: str, parent_run_id: str) -> None:
        """Record that ``run_id`` was spawned by ``parent_run_id`` (status inheritance)."""
        run = self._run(run_id)
        if run.parent is None and parent_run_id != run_id:
            run.parent = parent_run_id
            self._run(parent_run_id).add_child(run_id)
            self._status.pop(run_id, None)

    def add_in(self, node: Node, level: _Level) -> None:
        """Place a new node in a list chosen by the caller (the hypergraph's threads)."""
        if self._pending and node.run_id in self._pending:
            self._drop_pending(node.run_id)
        self._add_in(node, level, node.__struct_config__.tag)  # type: ignore[arg-type]

    def spawn_level(self, trigger_id: str | None, fallback: _Level) -> _Level:
        """The list a run spawned from node ``trigger_id`` goes to: a new branch of the trigger's
        view for a tool call (or any content view), the trigger's own list for a structural node,
        nowhere (a sink) when subagents are hidden."""
        placed = self._placed.get(trigger_id) if trigger_id is not None else None
        if placed is None:
            return fallback
        level_index, kind, _ = placed
        level = self._levels[level_index]
        view = self._view_of.get(trigger_id)  # type: ignore[arg-type]
        if kind == "tool_call" and self.options.hide_subagents:
            return self._sink
        if view is None:
            return level
        return self._new_level(view)

    def _add_in(self, node: Node, level: _Level, kind: str) -> None:
        node_id = node.id
        run_id = node.run_id
        self._placed[node_id] = (level.index, kind, run_id)
        if kind in _LIFECYCLE_KINDS:
            run = self._run(run_id)
            if kind == "harness_start":
                run.started = True
            elif kind == "harness_end":
                run.ended = True
            else:
                run.errored = True
            self._restamp(run_id)
        handler = _ADDERS.get(kind)
        if handler is not None:
            handler(self, node, level)
        elif kind == "harness_start" and self._is_open(run_id):
            view = ViewNode(
                id=node_id,
                run_id=run_id,
                role="assistant",
                content=PendingContent(),
                status=self.status_of(run_id),
                branches=self._new_branches(),
            )
            self._append(level, view)
            self._pending[run_id] = (level, view)

    def update(self, node: Node) -> None:
        """Refresh the views of an already placed node whose value changed (needs a builder made
        with ``track_changes=True``: only that one keeps what an update needs)."""
        if not self.track_changes:
            raise RuntimeError("ThreadBuilder.update needs track_changes=True")
        handler = _UPDATERS.get(node.kind)
        if handler is not None and node.id in self._placed:
            handler(self, node)

    def _new_view(self, node: Node, content: Any, *, view_id: str | None = None) -> ViewNode:
        role: Role = "user" if isinstance(content, UserContent) else "assistant"
        # A one-shot fill settles statuses at the end (`_settle_statuses`), which expects
        # ``"complete"`` on every view it does not visit.
        status: Status = (
            "complete" if role == "user" or self._settle is not None else self.status_of(node.run_id)
        )
        return ViewNode(
            id=node.id if view_id is None else view_id,
            run_id=node.run_id,
            role=role,
            content=content,
            status=status,
            branches=self._new_branches(),
        )

    def _add_text(self, node: TextNode | ReasoningNode, level: _Level) -> None:
        is_reasoning = isinstance(node, ReasoningNode)
        if is_reasoning and self.options.hide_reasoning:
            return
        incremental = self.track_changes
        text = node.content
        signature = node.signature if isinstance(node, ReasoningNode) else None
        redacted = node.redacted_data if isinstance(node, ReasoningNode) else None
        if incremental:
            self._texts[node.id] = text
            self._signatures[node.id] = signature
        items = level.items
        kind = node.kind
        if items and level.deferred_pending is None:  # else a pending view stands last
            last = items[-1]
            content = last.content
            # A signed or redacted thinking block is a view of its own: its signature covers
            # exactly its text (the Anthropic history sends it back verbatim), so merging would
            # void it.
            if (
                last.run_id == node.run_id
                and content.kind == kind
                and (not is_reasoning or _unsealed(signature, redacted, content))
            ):
                assert isinstance(content, TextContent | ReasoningContent)
                if incremental:
                    self._members[id(last)].append(node.id)
                    content.text += text
                    self.changed.add(last.id)
                else:  # joined once at the end: merging n pieces stays O(total length)
                    entry = self._pieces.get(id(last))
                    if entry is None:
                        self._pieces[id(last)] = (content, [content.text, text])
                    else:
                        entry[1].append(text)
                self._view_of[node.id] = last
                return
        new_content: TextContent | ReasoningContent = (
            ReasoningContent(text=text, signature=signature, redacted_data=redacted)
            if is_reasoning
            else TextContent(text=text)
        )
        view = self._new_view(node, new_content)
        if incremental:
            self._members[id(view)] = [node.id]
        self._view_of[node.id] = view
        self._append(level, view)

    def _join_pieces(self) -> None:
        for content, pieces in self._pieces.values():
            content.text = "".join(pieces)
        self._joined.update((key, entry[1]) for key, entry in self._pieces.items())
        self._pieces.clear()

    def _update_text(self, node: TextNode | ReasoningNode) -> None:
        view = self._view_of.get(node.id)
        if view is None:
            return
        self._texts[node.id] = node.content
        content = view.content
        assert isinstance(content, TextContent | ReasoningContent)
        members = self._members[id(view)]
        if isinstance(node, ReasoningNode) and node.signature is not None:  # (a later None keeps it)
            self._signatures[node.id] = node.signature
            if len(members) > 1:  # signed after it merged: it needs a view of its own
                self.needs_rebuild = True
                return
        content.text = "".join(self._texts[m] for m in members)
        if isinstance(content, ReasoningContent):
            content.signature = self._signatures[members[0]] if len(members) == 1 else None
        if self.track_changes:
            self.changed.add(view.id)

    def _call_content(self, name: str, tool_input: Any) -> ToolCallContent:
        if self.options.collapse_tools:
            return ToolCallContent(name=name)
        return ToolCallContent(name=name, input=tool_input)

    def _set_output(self, content: ToolCallContent, output: Any) -> None:
        content.output = True if self.options.collapse_tools else output

    def _add_tool_call(self, node: ToolCallNode, level: _Level) -> None:
        call_id = node.id
        self._call_nodes.add(call_id)
        existing = self._calls.get(call_id)
        if existing is not None:  # the result came first and already shows the call
            self._view_of[call_id] = existing
            self._update_tool_call(node)
            return
        content = self._call_content(node.name, node.input)
        if call_id in self._results:
            self._set_output(content, self._results[call_id])
        if call_id in self._progress and not self.options.collapse_tools:
            content.progress = self._fold_progress(call_id)
        view = self._new_view(node, content)
        self._calls[call_id] = view
        self._view_of[call_id] = view
        self._append(level, view)

    def _update_tool_call(self, node: ToolCallNode) -> None:
        view = self._calls.get(node.id)
        if view is None:
            return
        content = view.content
        assert isinstance(content, ToolCallContent)
        content.name = node.name
        if not self.options.collapse_tools:
            content.input = node.input
        if self.track_changes:
            self.changed.add(view.id)

    def _add_tool_result(self, node: ToolResultNode, level: _Level) -> None:
        call_id = call_id_of_result(node.id)
        self._results[call_id] = node.output
        view = self._calls.get(call_id)
        if view is not None:
            content = view.content
            assert isinstance(content, ToolCallContent)
            self._set_output(content, node.output)
            if self.track_changes:
                self.changed.add(view.id)
            return
        # No call seen: a denied call (input from its relay) or an orphan result.
        content = self._call_content(node.name, self._relay_params.get(call_id))
        self._set_output(content, node.output)
        if call_id in self._progress and not self.options.collapse_tools:
            content.progress = self._fold_progress(call_id)
        view = self._new_view(node, content, view_id=call_id)
        self._calls[call_id] = view
        self._calls_from_results.add(call_id)
        self._append(level, view)

    def _update_tool_result(self, node: ToolResultNode) -> None:
        call_id = call_id_of_result(node.id)
        self._results[call_id] = node.output
        view = self._calls.get(call_id)
        if view is not None:
            content = view.content
            assert isinstance(content, ToolCallContent)
            self._set_output(content, node.output)
            if self.track_changes:
                self.changed.add(view.id)

    def _fold_progress(self, call_id: str) -> Any:
        entries = self._progress.get(call_id)
        if not entries:
            return None
        name = next(iter(entries.values()))[0]
        return self.registry.accumulate(name, (content for _, content in entries.values()))

    def _add_progress(self, node: ToolProgressNode, level: _Level) -> None:
        call_id = node.tool_call_id
        view = self._calls.get(call_id)
        if view is None or self.track_changes:  # folded when the call arrives / kept for updates
            entries = self._progress.get(call_id)
            if entries is None:
                entries = self._progress[call_id] = {}
            entries[node.id] = (node.name, node.content)
        if view is None or self.options.collapse_tools:
            return
        content = view.content
        assert isinstance(content, ToolCallContent)
        accumulator = self.registry.get(node.name)
        if accumulator is None:
            return
        state = content.progress if content.progress is not None else accumulator.init()
        content.progress = accumulator.reduce(state, node.content)
        if self.track_changes:
            self.changed.add(view.id)

    def _update_progress(self, node: ToolProgressNode) -> None:
        entries = self._progress.get(node.tool_call_id)
        if entries is None:
            return
        entries[node.id] = (node.name, node.content)
        view = self._calls.get(node.tool_call_id)
        if view is not None and not self.options.collapse_tools:
            content = view.content
            assert isinstance(content, ToolCallContent)
            content.progress = self._fold_progress(node.tool_call_id)
            if self.track_changes:
                self.changed.add(view.id)

    def _add_user(self, node: UserNode, level: _Level) -> None:
        view = self._new_view(node, UserContent(content=node.content))
        self._view_of[node.id] = view
        self._append(level, view)

    def _update_user(self, node: UserNode) -> None:
        view = self._view_of.get(node.id)
        if view is not None:
            view.content = UserContent(content=node.content)
            if self.track_changes:
                self.changed.add(view.id)

    def _add_error(self, node: ErrorNode, level: _Level) -> None:
        view = self._new_view(node, ErrorContent(message=node.message))
        self._view_of[node.id] = view
        self._append(level, view)

    def _update_error(self, node: ErrorNode) -> None:
        view = self._view_of.get(node.id)
        if view is not None:
            view.content = ErrorContent(message=node.message)
            if self.track_changes:
                self.changed.add(view.id)

    def _relay_content(self, node: RelayNode) -> RelayContent:
        return RelayContent(
            relay_kind=node.relay_kind, tool_call_id=node.tool_call_id, tool=node.tool, params=node.params
        )

    def _add_relay(self, node: RelayNode, level: _Level) -> None:
        self._relay_params[node.tool_call_id] = node.params
        view = self._new_view(node, self._relay_content(node))
        self._view_of[node.id] = view
        self._append(level, view)

    def _update_relay(self, node: RelayNode) -> None:
        self._relay_params[node.tool_call_id] = node.params
        view = self._view_of.get(node.id)
        if view is not None:
            view.content = self._relay_content(node)
            if self.track_changes:
                self.changed.add(view.id)

    # -- REPL cells (``ViewOptions.repl_cells``; the feeder makes these nodes only then) --------

    def _add_repl_input(self, node: ReplInputNode, level: _Level) -> None:
        view = self._new_view(node, ReplContent(code=node.code, iteration=node.iteration))  # type: ignore[arg-type]
        self._view_of[node.id] = view
        self._repls[node.id] = view
        self._latest_repl[node.run_id] = view
        self._append(level, view)

    def _repl_cell(self, node: ReplProgressNode | ReplOutputNode) -> ViewNode | None:
        return self._repls.get(node.repl_id) or self._latest_repl.get(node.run_id)

    def _add_repl_progress(self, node: ReplProgressNode, level: _Level) -> None:
        view = self._repl_cell(node)
        if view is None:
            return
        content: ReplContent = view.content  # type: ignore[assignment]
        if node.stream == "stderr":
            content.stderr += node.chunk
        else:
            content.stdout += node.chunk
        if self.track_changes:
            self.changed.add(view.id)

    def _add_repl_output(self, node: ReplOutputNode, level: _Level) -> None:
        view = self._repls.get(node.repl_id)  # an output names its turn (upstream's harness)
        if view is None:
            return
        view.content.result = node.result  # type: ignore[union-attr]
        if self.track_changes:
            self.changed.add(view.id)


_ADDERS: Final[dict[str, Any]] = {
    "text": ThreadBuilder._add_text,
    "reasoning": ThreadBuilder._add_text,
    "tool_call": ThreadBuilder._add_tool_call,
    "tool_result": ThreadBuilder._add_tool_result,
    "tool_progress": ThreadBuilder._add_progress,
    "user": ThreadBuilder._add_user,
    "error": ThreadBuilder._add_error,
    "relay": ThreadBuilder._add_relay,
    "repl_input": ThreadBuilder._add_repl_input,
    "repl_progress": ThreadBuilder._add_repl_progress,
    "repl_output": ThreadBuilder._add_repl_output,
}

_UPDATERS: Final[dict[str, Any]] = {
    "text": ThreadBuilder._update_text,
    "reasoning": ThreadBuilder._update_text,
    "tool_call": ThreadBuilder._update_tool_call,
    "tool_result": ThreadBuilder._update_tool_result,
    "tool_progress": ThreadBuilder._update_progress,
    "user": ThreadBuilder._update_user,
    "error": ThreadBuilder._update_error,
    "relay": ThreadBuilder._update_relay,
}


def graph_arrival_order(graph: Graph) -> list[tuple[Node, str | None]]:
    """Every node with the source of its incoming edge, parents before children, else by arrival.

    Nodes come in insertion (arrival) order, except that a node whose parent arrived later
    (a child adopted once its parent came) waits for that parent. Nodes on a cycle come last,
    in arrival order, as roots. O(N + E).
    """
    nodes, parents = _arrival_lists(graph)
    return list(zip(nodes, parents, strict=True))


def parent_map(graph: Graph) -> dict[str, str]:
    """Target id -> source id of its first incoming edge (edges in insertion order). O(E): the
    edge lists are read in bulk and walked backwards, so the first edge's source is written last."""
    parent_of: dict[str, str] = {}
    for source, targets in reversed(list(graph.edges.items())):
        for target in targets:
            parent_of[target] = source
    return parent_of


def _arrival_lists(graph: Graph) -> tuple[list[Node], list[str | None]]:
    """`graph_arrival_order` as two parallel lists (no pair allocated per node).

    When the reducer's parent index answers (`Graph.parent_ids`: no late parent was adopted),
    every parent precedes its children in insertion order, so the arrival order is the insertion
    order and the index is the parent list: two list copies, no per-node work."""
    parents = graph.parent_ids()
    if parents is not None:
        return graph.node_list(), parents
    parent_of = parent_map(graph)
    parent_get = parent_of.get
    placed: set[str] = set()
    placed_add = placed.add
    waiting: dict[str, list[Node]] = {}
    out_nodes: list[Node] = []
    out_parents: list[str | None] = []
    node_append = out_nodes.append
    parent_append = out_parents.append
    for node in graph.iter_nodes():
        node_id = node.id
        parent = parent_get(node_id)
        if parent is not None and parent not in placed:
            waiting.setdefault(parent, []).append(node)
            continue
        placed_add(node_id)
        node_append(node)
        parent_append(parent)
        if waiting and node_id in waiting:
            adopted: list[tuple[Node, str]] = [(child, node_id) for child in reversed(waiting.pop(node_id))]
            while adopted:
                current, current_parent = adopted.pop()
                placed_add(current.id)
                node_append(current)
                parent_append(current_parent)
                children = waiting.pop(current.id, None)
                if children:
                    adopted.extend((child, current.id) for child in reversed(children))
    if waiting:
        leftovers = sorted(
            (node for nodes in waiting.values() for node in nodes),
            key=_arrival_key(graph),
        )
        for node in leftovers:
            if node.id in placed:
                continue
            stack: list[tuple[Node, str | None]] = [(node, None)]
            while stack:
                current, leftover_parent = stack.pop()
                if current.id in placed:
                    continue
                placed_add(current.id)
                node_append(current)
                parent_append(leftover_parent)
                children = waiting.pop(current.id, None)
                if children:
                    stack.extend((child, current.id) for child in reversed(children))
    return out_nodes, out_parents


def _flat_arrival(graph: Graph) -> tuple[list[Node], list[str], list[str | None]]:
    """`_arrival_lists` with the nodes' ids as a third list: when the arrival order is the
    insertion order (the parent index answers), `Graph.node_ids` (a C-level slice)."""
    parents = graph.parent_ids()
    if parents is not None:
        return graph.node_list(), graph.node_ids(), parents
    nodes, parents = _arrival_lists(graph)
    return nodes, [node.id for node in nodes], parents


def _arrival_key(graph: Graph) -> Any:
    index = {node_id: i for i, node_id in enumerate(graph.nodes)}
    return lambda node: index[node.id]


def project_graph_thread(
    graph: Graph,
    *,
    options: ViewOptions | None = None,
    registry: ProgressRegistry | None = None,
) -> list[ViewNode]:
    """Thread views of a flat graph. O(N + E)."""
    return build_thread(graph, options=options, registry=registry).views


def copy_views(views: list[ViewNode]) -> list[ViewNode]:
    """A deep copy of a view tree (for a snapshot of the projector's live views). O(views)."""
    return msgspec.convert(msgspec.to_builtins(views), list[ViewNode])


def project_thread(
    source: Any,
    active: Any = None,
    *,
    options: ViewOptions | None = None,
    registry: ProgressRegistry | None = None,
) -> list[ViewNode]:
    """Thread views of a flat `Graph`, or of a hypergraph ``(conversation, active)``.

    ``options`` selects what to show (`ViewOptions`); ``registry`` folds tool progress
    (`default_registry` unless given). O(N + E).
    """
    return build_thread(source, active, options=options, registry=registry).views


def build_thread(
    source: Any,
    active: Any = None,
    *,
    options: ViewOptions | None = None,
    registry: ProgressRegistry | None = None,
    track_changes: bool = False,
    top_level_only: bool = False,
) -> ThreadBuilder:
    """A `ThreadBuilder` filled from ``source`` (see `project_thread`). ``top_level_only``: the
    caller reads the top-level views' content only and keeps none of them (`ThreadBuilder`); for a
    hypergraph the builder is made by `convograph.projections.sources`, which takes it too."""
    if isinstance(source, Graph):
        if active is not None:
            raise TypeError("project_thread(graph) takes no active set; it is for the hypergraph")
        builder = ThreadBuilder(
            options=options, registry=registry, track_changes=track_changes, top_level_only=top_level_only
        )
        if track_changes:
            builder.add_all(graph_arrival_order(source))
            return builder
        nodes, ids, parents = _flat_arrival(source)
        if not builder._fill_flat(nodes, ids, parents, source.node_map()):  # not run-shaped
            builder = ThreadBuilder(options=options, registry=registry, top_level_only=top_level_only)
            builder.add_placed(zip(nodes, parents, repeat(None)))
        return builder
    from convograph.projections.sources import fill_from_conversation

    return fill_from_conversation(
        source,
        active,
        options=options,
        registry=registry,
        track_changes=track_changes,
        top_level_only=top_level_only,
    )
