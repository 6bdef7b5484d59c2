"""Messages projection: ``project_messages(graph, format=...)`` for OpenAI, Anthropic or the gateway.

The top-level thread (`convograph.projections.thread`) becomes a neutral history
(`convograph.projections.history`: repairs dangling calls and orphan results, keeps text streams
apart, turns REPL turns into code and feedback), which one adapter module per format renders
(`openai`, `anthropic`, `gateway`). Every list returned is a valid
request history for its API: no call without a result, no result without a call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

import msgspec

from convograph.graph.model import Graph
from convograph.projections.anthropic import render_anthropic
from convograph.projections.gateway import render_gateway
from convograph.projections.history import History, build_history
from convograph.projections.openai import render_openai
from convograph.projections.progress import ProgressRegistry
from convograph.projections.thread import ThreadBuilder, build_thread
from convograph.projections.view import ViewNode, ViewOptions

__all__ = ["FORMATS", "MessageFormat", "project_messages", "render_history", "render_views"]

MessageFormat = Literal["openai", "anthropic", "gateway"]

FORMATS: Final[dict[str, Callable[[History], list[dict[str, Any]]]]] = {
    "openai": render_openai,
    "anthropic": render_anthropic,
    "gateway": render_gateway,
}


def render_history(history: History, format: str) -> list[dict[str, Any]]:
    """Render a neutral history in ``format``; an unknown format is a `ValueError` naming the choices."""
    renderer = FORMATS.get(format)
    if renderer is None:
        choices = ", ".join(sorted(FORMATS))
        raise ValueError(f"unknown message format {format!r}: expected one of {choices}")
    return renderer(history)


def render_views(builder: ThreadBuilder, format: str) -> list[dict[str, Any]]:
    """Messages for the top-level views of a filled `ThreadBuilder` (its REPL turns too, when
    it was built with ``ViewOptions(repl_cells=True)``)."""
    views: list[ViewNode] = builder.views
    history = build_history(
        views,
        include_call=builder.real_call_filter(),
        text_parts=builder.text_parts(),
        starts_turn=builder.model_call_starts(),
    )
    return render_history(history, format)


def project_messages(source: Any, active: Any = None, *, format: str = "openai") -> list[dict[str, Any]]:
    """Request history of a flat `Graph` or a hypergraph ``(conversation, active)``.

    ``format``: ``"openai"`` (Chat Completions), ``"anthropic"`` (Messages API) or ``"gateway"``
    (seed 001's own format). O(N + E).
    """
    if format not in FORMATS:
        render_history([], format)  # raises the ValueError naming the choices
    # No progress accumulators: a request history carries no tool progress (`build_history` reads
    # a call's name, input and output only), so folding it would be wasted work (~25 % of the
    # thread build for a tool-heavy conversation) and one tracked state dict per call.
    # The views are read for their top level only and dropped here: no branch lists (`ThreadBuilder`
    # ``top_level_only``).
    builder = build_thread(
        source, active, options=_message_options(source), registry=_NO_PROGRESS, top_level_only=True
    )
    return render_views(builder, format)


def _message_options(source: Any) -> ViewOptions | None:
    """A hypergraph's own view options with REPL cells (a REPL turn is model context: the code
    the model ran and what it printed); ``None`` (the defaults) for a flat graph, which keeps no
    ``repl_*`` nodes, or anything else (`build_thread` names what is wrong with it)."""
    if isinstance(source, Graph) or getattr(source, "view", None) is None:
        return None
    from convograph.projections.sources import options_of

    return msgspec.structs.replace(options_of(source), repl_cells=True)


_NO_PROGRESS: Final = ProgressRegistry()
"""A registry without accumulators (and no fallback): every view's ``progress`` stays ``None``."""
