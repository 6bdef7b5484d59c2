"""Which view a node makes or changes, by kind: the second half of thread placement.

`ThreadBuilder.place` (`convograph.projections.placement`) decides a node's list and calls these
through `ThreadBuilder.place_in`: text and reasoning append a view or merge into the list's last
one (`add_text`); tool calls, results and progress meet in one call view through an index by call
id, in either arrival order (`add_tool_call`, `add_tool_result`, `add_progress`); lifecycle nodes
set their run's flags and show a pending or error view (`add_lifecycle`). ``item`` carries the
content fields (a node's, or a hypergraph event's with the same names). O(1) amortised per node.
Compiled with mypyc (`convograph._native`); see `placement` for the `Final` names below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from convograph.projections.thread_nodes import Run, call_id_of_result
from convograph.projections.view import (
    ErrorContent,
    PendingContent,
    ReasoningContent,
    RelayContent,
    Status,
    TextContent,
    ToolCallContent,
    ViewNode,
    add_branch,
)

if TYPE_CHECKING:
    from convograph.projections.placement import Level, ThreadBuilder

__all__ = [
    "add_lifecycle",
    "add_progress",
    "add_text",
    "add_tool_call",
    "add_tool_result",
    "compute_status",
    "defer_pending",
    "drop_deferred",
    "fold_progress",
    "make_deferred",
    "note_model_call",
    "remove_view",
    "restamp",
    "settle_statuses",
    "shown_views",
    "update_tool_call",
]

_TextContent: Final = TextContent
_ReasoningContent: Final = ReasoningContent
_PendingContent: Final = PendingContent
_ErrorContent: Final = ErrorContent
_ToolCallContent: Final = ToolCallContent
_RelayContent: Final = RelayContent
_call_id_of_result: Final = call_id_of_result


def add_text(
    builder: ThreadBuilder, node_id: str, run_id: str, item: Any, is_reasoning: bool, level: Level
) -> None:
    if is_reasoning and builder.hide_reasoning:
        return
    text: str = item.content
    signature: str | None = item.signature if is_reasoning else None
    redacted: str | None = item.redacted_data if is_reasoning else None
    if builder.track_changes:
        builder._texts[node_id] = text
        builder._signatures[node_id] = signature
    items = level.items
    if items and level.pending_run is None:  # (a deferred pending view stands last: no merge)
        last = items[-1]
        content: Any = last.content
        # A signed or redacted thinking block is a view of its own: its signature covers exactly
        # its text (the Anthropic history sends it back verbatim), so merging would void it.
        if (
            last.run_id == run_id
            and type(content) is (_ReasoningContent if is_reasoning else _TextContent)
            and (not is_reasoning or _unsealed(signature, redacted, content))
        ):
            merge_text(builder, last, content, node_id, text)
            return
    new: Any = (
        _ReasoningContent(text=text, signature=signature, redacted_data=redacted)
        if is_reasoning
        else _TextContent(text=text)
    )
    view = builder._new_view(node_id, run_id, new)
    if builder.track_changes:
        builder._members[id(view)] = [node_id]
    if builder._index_views:
        builder._view_of[node_id] = view
    builder._append(level, view)


def merge_text(builder: ThreadBuilder, view: ViewNode, content: Any, node_id: str, text: str) -> None:
    """Merge ``text`` (of node ``node_id``) into ``view``: at once when tracking changes, else
    joined once when read (merging n pieces stays O(total length))."""
    if builder._index_views:
        builder._view_of[node_id] = view
    if builder.track_changes:
        builder._members[id(view)].append(node_id)
        content.text += text
        builder.changed.add(view.id)
        return
    entry = builder._pieces.get(id(view))
    if entry is None:
        builder._pieces[id(view)] = (content, [content.text, text])
    else:
        entry[1].append(text)


def add_tool_call(builder: ThreadBuilder, call_id: str, run_id: str, item: Any, level: Level) -> None:
    existing = builder._calls.get(call_id)
    if existing is not None:  # the result came first and already shows the call
        builder._call_nodes.add(call_id)  # (a call view made by its call node is real already)
        if builder._index_views:
            builder._view_of[call_id] = existing
        update_tool_call(builder, call_id, item)
        return
    content = builder._call_content(item.name, item.input)
    if call_id in builder._results:
        builder._set_output(content, builder._results[call_id])
    if call_id in builder._progress and not builder.collapse_tools:
        content.progress = fold_progress(builder, call_id)
    view = builder._new_view(call_id, run_id, content)
    builder._calls[call_id] = view
    if builder._index_views:
        builder._view_of[call_id] = view
    builder._append(level, view)


def add_tool_result(builder: ThreadBuilder, node_id: str, run_id: str, item: Any, level: Level) -> None:
    call_id = _call_id_of_result(node_id)
    output = item.output
    view = builder._calls.get(call_id)
    if view is None or builder.track_changes:  # (read when the call arrives later / updates)
        builder._results[call_id] = output
    if view is not None:
        builder._set_output(view.content, output)
        if builder.track_changes:
            builder.changed.add(view.id)
        return
    # No call seen: a denied call (input from its relay) or an orphan result.
    content = builder._call_content(item.name, builder._relay_params.get(call_id))
    builder._set_output(content, output)
    if call_id in builder._progress and not builder.collapse_tools:
        content.progress = fold_progress(builder, call_id)
    view = builder._new_view(call_id, run_id, content)
    builder._calls[call_id] = view
    builder._calls_from_results.add(call_id)
    builder._append(level, view)


def add_progress(builder: ThreadBuilder, node_id: str, item: Any) -> None:
    if builder.skips_progress:  # nothing folds (or tools are collapsed): progress shows nowhere
        return
    call_id: str = item.tool_call_id
    view = builder._calls.get(call_id)
    if view is None or builder.track_changes:  # folded when the call arrives / kept for updates
        entries = builder._progress.get(call_id)
        if entries is None:
            entries = builder._progress[call_id] = {}
        entries[node_id] = (item.name, item.content)
    if view is None:
        return
    name: str = item.name
    fold = builder._fold_step(name)
    if fold is None:
        return
    content: Any = view.content
    state = content.progress
    if state is None:
        state = builder.accumulator(name).init()
    content.progress = fold(state, item.content)
    if builder.track_changes:
        builder.changed.add(view.id)


def fold_progress(builder: ThreadBuilder, call_id: str) -> Any:
    """The progress state of call ``call_id`` from every progress node kept for it."""
    entries = builder._progress.get(call_id)
    if not entries:
        return None
    name = next(iter(entries.values()))[0]
    return builder.registry.accumulate(name, [content for _, content in entries.values()])


def add_lifecycle(
    builder: ThreadBuilder, kind: str, node_id: str, run_id: str, item: Any, level: Level
) -> None:
    run = builder._run(run_id)
    if kind == "harness_start":
        run.started = True
    elif kind == "harness_end":
        run.ended = True
    else:
        run.errored = True
    if not builder._filling:  # (a one-shot fill settles every status at the end)
        restamp(builder, run_id)
    if kind == "error":
        builder._add_view(node_id, run_id, _ErrorContent(message=item.message), level)
    elif kind == "harness_start" and not run.ended and not run.errored and builder._filling:
        defer_pending(builder, node_id, run_id, level)
    elif kind == "harness_start" and not run.ended and not run.errored:
        pending = builder._new_view(node_id, run_id, _PendingContent())
        builder._append(level, pending)
        builder._pending[run_id] = (level, pending)


def _unsealed(signature: str | None, redacted: str | None, content: Any) -> bool:
    """True when a reasoning node (its ``signature`` and ``redacted`` data) may merge into the
    reasoning view ``content``: neither is signed or redacted."""
    return (
        signature is None and redacted is None and content.signature is None and content.redacted_data is None
    )


def update_tool_call(builder: ThreadBuilder, call_id: str, item: Any) -> None:
    """The call's name and input (``item``'s), into its view (also when its result made the view
    first)."""
    view = builder._calls.get(call_id)
    if view is None:
        return
    content: Any = view.content
    content.name = item.name
    if not builder.collapse_tools:
        content.input = item.input
    if builder.track_changes:
        builder.changed.add(view.id)


def restamp(builder: ThreadBuilder, run_id: str) -> None:
    """Give the views of ``run_id``, and of its descendant runs without lifecycle, their
    current status."""
    stack = [run_id]
    seen: set[str] = set()
    while stack:
        current = stack.pop()
        run = builder._runs.get(current)
        if current in seen or run is None:
            continue
        seen.add(current)
        status = builder._status[current] = compute_status(builder, current)
        for view in run.views or ():
            if view.role != "user" and view.status != status:
                view.status = status
                if builder.track_changes:
                    builder.changed.add(view.id)
        for child in run.children or ():
            child_run = builder._runs.get(child)
            if child_run is not None and not (child_run.started or child_run.ended or child_run.errored):
                stack.append(child)


def settle_statuses(builder: ThreadBuilder, views: list[ViewNode]) -> None:
    """Give every non-user view of ``views`` its run's final status: the re-stamps of an
    incremental build, done once. With the builder's own flags and no run open or failed,
    every view is ``complete`` already (O(runs)). O(runs + views)."""
    builder._status.clear()
    if builder._external_status is None and not any(_open_or_failed(run) for run in builder._runs.values()):
        return
    last_run = ""
    status: Status = "complete"
    for view in views:  # (asked once per stretch of views of one run)
        if view.role != "user":
            if view.run_id != last_run:
                last_run = view.run_id
                status = builder.status_of(last_run)
            view.status = status


def _open_or_failed(run: Run) -> bool:
    """A run whose own status is not ``complete``."""
    return run.errored or (run.started and not run.ended)


def compute_status(builder: ThreadBuilder, run_id: str) -> Status:
    """A run's status from the source's statuses, else its own lifecycle flags, else its
    spawner's (`ThreadBuilder.status_of` memoises it). O(spawner chain)."""
    if builder._external_status is not None:
        return builder._external_status(run_id)
    seen: set[str] = set()
    current: str | None = run_id
    while current is not None and current not in seen:
        seen.add(current)
        run = builder._runs.get(current)
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


def defer_pending(builder: ThreadBuilder, node_id: str, run_id: str, level: Level) -> None:
    """A fill's pending view of ``run_id`` (its ``harness_start`` ``node_id``) at the end of
    ``level``, not made yet: anything of the run, or any view appended to ``level``, drops it
    (`drop_deferred`); one left standing is made when the fill ends (`make_deferred`). The list is
    attached to its owner now, as the view would attach it, so branches keep their order."""
    if level.pending_run is not None:
        drop_deferred(builder, level.pending_run)
    elif level.items and type(level.items[-1].content) is _PendingContent:
        builder._drop_pending(level.items[-1].run_id)
    level.pending_run = run_id
    builder._deferred[run_id] = (level, node_id)
    owner = level.owner
    if not level.attached and owner is not None:
        add_branch(owner, level.items)
        level.attached = True


def drop_deferred(builder: ThreadBuilder, run_id: str) -> None:
    """Drop the deferred pending view of ``run_id`` (detaching its list if that leaves it empty)."""
    entry = builder._deferred.pop(run_id, None)
    if entry is None:
        return
    level = entry[0]
    if level.pending_run == run_id:
        level.pending_run = None
    if not level.items and level.attached and level.owner is not None:
        builder._detach(level, level.owner)


def make_deferred(builder: ThreadBuilder) -> None:
    """Make the pending views still standing at the end of a fill, last in their lists."""
    for run_id, (level, node_id) in builder._deferred.items():
        level.pending_run = None
        view = builder._new_view(node_id, run_id, _PendingContent())
        level.items.append(view)
        builder._pending[run_id] = (level, view)
    builder._deferred.clear()


def note_model_call(builder: ThreadBuilder, level: Level, view: ViewNode) -> None:
    """``view`` was just appended to ``level`` after a boundary there (a ``usage`` node: a model
    call's end; or a run's ``harness_start`` / ``harness_end``: with SDK instrumentation each model
    call is a run): a tool call view opens the next model call's calls
    (`ThreadBuilder.model_call_starts`); any other view a request history keeps (text, reasoning,
    user, REPL) opens its turn itself. Relay, error and pending views are not model context: the
    mark waits for the next view."""
    kind = type(view.content)
    if kind is _ToolCallContent:
        builder._model_call_starts.add(view.id)
    elif kind is _RelayContent or kind is _ErrorContent or kind is _PendingContent:
        return
    level.after_boundary = False


def shown_views(top: list[ViewNode]) -> list[ViewNode]:
    """Every view of the tree below the list ``top``: that list, then the branches below each view,
    depth first. O(views)."""
    out: list[ViewNode] = []
    stack = [top]
    while stack:
        for view in stack.pop():
            out.append(view)
            if view.branches:
                stack.extend(view.branches)
    return out


def remove_view(items: list[ViewNode], view: ViewNode) -> None:
    """Remove ``view`` (by identity) from ``items``, the last occurrence, if there."""
    for i in range(len(items) - 1, -1, -1):
        if items[i] is view:
            del items[i]
            return
