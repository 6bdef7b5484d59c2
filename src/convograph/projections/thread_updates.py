"""What an incremental thread build does when a placed node changes, and REPL cells.

`ThreadBuilder.update` calls `update` for a node already placed whose value changed (a streamed
text delta, a redelivered call, a result or progress sent again): the node's views are patched in
place, and their ids recorded as changed. REPL chunks (hypergraph, ``ViewOptions.repl_cells``)
make or extend REPL cells (`add_repl`). Both are rare next to placement, so they run interpreted
beside the compiled `convograph.projections.placement`. O(1) amortised per node, except a merged
text view, which is re-joined (O(its length)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from convograph.projections import thread_views
from convograph.projections.thread_nodes import call_id_of_result
from convograph.projections.view import ErrorContent, RelayContent, ReplContent, UserContent

if TYPE_CHECKING:
    from convograph.projections.placement import Level, ThreadBuilder

__all__ = ["add_repl", "relay_content", "update"]


def relay_content(node: Any) -> RelayContent:
    return RelayContent(
        relay_kind=node.relay_kind, tool_call_id=node.tool_call_id, tool=node.tool, params=node.params
    )


def update(builder: ThreadBuilder, node: Any) -> None:
    """Refresh the views of the placed node ``node`` (its new value)."""
    kind = node.kind
    if kind in ("text", "reasoning"):
        _update_text(builder, node, kind == "reasoning")
    elif kind == "tool_call":
        thread_views.update_tool_call(builder, node.id, node)
    elif kind == "tool_result":
        _update_tool_result(builder, node)
    elif kind == "tool_progress":
        _update_progress(builder, node)
    elif kind == "user":
        _replace_content(builder, node.id, UserContent(content=node.content))
    elif kind == "error":
        _replace_content(builder, node.id, ErrorContent(message=node.message))
    elif kind == "relay":
        builder._relay_params[node.tool_call_id] = node.params
        _replace_content(builder, node.id, relay_content(node))


def _changed(builder: ThreadBuilder, view_id: str) -> None:
    if builder.track_changes:
        builder.changed.add(view_id)


def _replace_content(builder: ThreadBuilder, node_id: str, content: Any) -> None:
    view = builder._view_of.get(node_id)
    if view is not None:
        view.content = content
        _changed(builder, view.id)


def _update_text(builder: ThreadBuilder, node: Any, is_reasoning: bool) -> None:
    view = builder._view_of.get(node.id)
    if view is None:
        return
    members = builder._members.get(id(view))
    if members is None:  # the id names another kind's view too (ids are the producers'): rebuild
        builder.needs_rebuild = True
        return
    builder._texts[node.id] = node.content
    content: Any = view.content
    if is_reasoning and node.signature is not None:  # (a later None keeps it)
        builder._signatures[node.id] = node.signature
        if len(members) > 1:  # signed after it merged: it needs a view of its own
            builder.needs_rebuild = True
            return
    content.text = "".join(builder._texts[m] for m in members)
    if is_reasoning:
        content.signature = builder._signatures[members[0]] if len(members) == 1 else None
    _changed(builder, view.id)


def _update_tool_result(builder: ThreadBuilder, node: Any) -> None:
    call_id = call_id_of_result(node.id)
    builder._results[call_id] = node.output
    view = builder._calls.get(call_id)
    if view is not None:
        builder._set_output(view.content, node.output)
        _changed(builder, view.id)


def _update_progress(builder: ThreadBuilder, node: Any) -> None:
    entries = builder._progress.get(node.tool_call_id)
    if entries is None:
        return
    entries[node.id] = (node.name, node.content)
    view = builder._calls.get(node.tool_call_id)
    if view is not None and not builder.collapse_tools:
        content: Any = view.content
        content.progress = thread_views.fold_progress(builder, node.tool_call_id)
        _changed(builder, view.id)


def add_repl(builder: ThreadBuilder, node: Any, kind: str, level: Level) -> None:
    """A REPL chunk: ``repl_input`` opens a cell; progress streams into its turn's cell (else the
    run's latest); ``repl_output`` gives its turn's cell its result."""
    if kind == "repl_input":
        view = builder._new_view(node.id, node.run_id, ReplContent(code=node.code, iteration=node.iteration))
        if builder._index_views:
            builder._view_of[node.id] = view
        builder._repls[node.id] = view
        builder._latest_repl[node.run_id] = view
        builder._append(level, view)
        return
    if kind == "repl_progress":
        cell = builder._repls.get(node.repl_id) or builder._latest_repl.get(node.run_id)
        if cell is None:
            return
        content: Any = cell.content
        if node.stream == "stderr":
            content.stderr += node.chunk
        else:
            content.stdout += node.chunk
        _changed(builder, cell.id)
    elif kind == "repl_output":
        cell = builder._repls.get(node.repl_id)  # an output names its turn (upstream's harness)
        if cell is not None:
            cell.content.result = node.result  # type: ignore[union-attr]
            _changed(builder, cell.id)
