"""``convograph view SOURCE``: render a conversation's thread in the terminal.

``SOURCE`` is an NDJSON event file, or the id of a stored conversation (read from the event log
under ``--data-dir`` / ``$CONVOGRAPH_DATABASE_URL``). The thread shows nested branches (subagents)
indented under the tool call that spawned them; ``--tree`` shows the raw graph instead: runs and
their nodes as a tree, child runs under the node that spawned them.

Invalid lines in a file are reported on stderr with their line numbers and skipped (the rest is
still shown); exit code 1 then, 2 when the source cannot be read.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.text import Text
from rich.tree import Tree

from convograph.cli.app import app, console, err_console
from convograph.events import Event, EventError, iter_ndjson
from convograph.graph import Graph, create_graph, reduce_event
from convograph.projections.thread import graph_arrival_order, project_thread
from convograph.projections.view import (
    ErrorContent,
    PendingContent,
    ReasoningContent,
    RelayContent,
    TextContent,
    ToolCallContent,
    UserContent,
    ViewNode,
    ViewOptions,
)

__all__ = ["load_graph", "render_thread", "render_tree"]

_STATUS_STYLE = {"streaming": "yellow", "complete": "green", "error": "red"}
_MAX_PAYLOAD = 300


def _read_file(path: Path) -> tuple[list[Event], list[EventError]]:
    events: list[Event] = []
    errors: list[EventError] = []
    with open(path, "rb") as handle:
        for _, item in iter_ndjson(handle):
            if isinstance(item, EventError):
                errors.append(item)
            else:
                events.append(item)
    return events, errors


async def _read_stored(conversation_id: str, data_dir: Path | None) -> list[Event]:
    from convograph.store import open_event_log
    from convograph.store.url import default_url

    url = default_url(data_dir)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        # reading must not create an empty event log (nor its directory) as a side effect
        raise FileNotFoundError(
            f"no file and no stored conversation named {conversation_id!r} "
            f"(no event log at {url.removeprefix('sqlite:///')})"
        )
    log = await open_event_log(url)
    try:
        if await log.get_conversation(conversation_id) is None:
            raise FileNotFoundError(f"no file and no stored conversation named {conversation_id!r}")
        return [stored.event for stored in await log.read(conversation_id)]
    finally:
        await log.close()


def load_events(source: str, data_dir: Path | None) -> tuple[list[Event], int]:
    """Events of ``source`` (a file path or a stored conversation id) and the number of invalid
    lines skipped (each reported on stderr). Exits with code 2 when the source cannot be read."""
    from convograph.store.base import StoreError

    path = Path(source)
    try:
        if path.is_dir():
            raise IsADirectoryError(f"{source} is a directory, not an NDJSON file")
        if path.exists():
            events, errors = _read_file(path)
            for error in errors:
                err_console.print(f"[red]skipped:[/red] {error}")
            if errors:
                err_console.print(f"[red]{len(errors)} invalid line(s) skipped[/red]")
            return events, len(errors)
        if "/" in source or path.suffix in (".ndjson", ".jsonl", ".json"):
            raise FileNotFoundError("no such file")
        return asyncio.run(_read_stored(source, data_dir)), 0
    except (OSError, ValueError, StoreError) as exc:
        err_console.print(f"[red]cannot read {source}:[/red] {_reason(exc, source)}", highlight=False)
        raise typer.Exit(2) from None


def _reason(exc: BaseException, source: str) -> str:
    """``exc`` as a user reads it: an OSError's reason without the errno (and without the path
    when it is ``source`` itself, which the message already names)."""
    if isinstance(exc, OSError) and exc.strerror:
        if exc.filename is None or str(exc.filename) == source:
            return exc.strerror
        return f"{exc.strerror}: {exc.filename}"
    return str(exc)


def load_graph(source: str, data_dir: Path | None = None) -> tuple[Graph, int]:
    """The flat graph of ``source`` and the number of invalid lines skipped."""
    events, invalid = load_events(source, data_dir)
    graph = create_graph()
    for event in events:
        graph = reduce_event(graph, event)
    return graph, invalid


def _payload(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_PAYLOAD else text[: _MAX_PAYLOAD - 1] + "…"


def _render_view(view: ViewNode) -> RenderableType:
    content = view.content
    status = Text(f" {view.status}", style=_STATUS_STYLE.get(view.status, ""))
    if isinstance(content, UserContent):
        body = content.content if isinstance(content.content, str) else _payload(content.content)
        return Panel(Text(body), title="user", title_align="left", border_style="green")
    if isinstance(content, TextContent):
        return Group(Text.assemble(("assistant", "bold blue"), status), Text(content.text))
    if isinstance(content, ReasoningContent):
        if content.redacted_data is not None:  # an encrypted payload, not text to show
            return Text.assemble(("thinking ", "magenta"), ("[redacted by the provider]", "dim"))
        return Text.assemble(("thinking ", "magenta"), (content.text, "dim italic"))
    if isinstance(content, ToolCallContent):
        line = Text.assemble(
            ("⚙ ", "bold"), (content.name, "bold yellow"), (" ", ""), (_payload(content.input), "dim")
        )
        parts: list[RenderableType] = [line]
        if content.progress is not None:
            parts.append(Text.assemble(("  progress ", "cyan"), _payload(content.progress)))
        if content.has_output:
            parts.append(Text.assemble(("  → ", "green"), _payload(content.output)))
        else:
            parts.append(Text("  … waiting for result", style="yellow"))
        return Group(*parts)
    if isinstance(content, RelayContent):
        return Text.assemble(
            ("⚠ permission: ", "bold yellow"), content.tool, " ", (_payload(content.params), "dim")
        )
    if isinstance(content, ErrorContent):
        return Text.assemble(("✖ error: ", "bold red"), content.message)
    if isinstance(content, PendingContent):
        return Text("… working", style="yellow italic")
    return Text(repr(content))


def render_thread(views: list[ViewNode]) -> RenderableType:
    """The thread as rich renderables, each branch indented under its node. Iterative."""
    out: list[RenderableType] = []
    work: list[tuple[ViewNode | str, int]] = [(view, 0) for view in reversed(views)]
    while work:
        item, depth = work.pop()
        if isinstance(item, str):
            out.append(Padding(Text(item, style="dim"), (0, 0, 0, 4 * depth)))
            continue
        out.append(Padding(_render_view(item), (0, 0, 0, 4 * depth)))
        for number in range(len(item.branches), 0, -1):
            branch = item.branches[number - 1]
            work.extend((child, depth + 1) for child in reversed(branch))
            run = branch[0].run_id if branch else "?"
            work.append((f"↳ branch {number}: run {run}", depth + 1))
    return Group(*out)


def render_tree(graph: Graph) -> Tree:
    """Runs and nodes as a tree: each run a branch, child runs under the node that spawned them."""
    tree = Tree(
        Text(f"conversation ({len(graph)} nodes, {len(graph.last_node_by_run_id)} runs)", style="bold")
    )
    run_branch: dict[str, Tree] = {}
    node_branch: dict[str, Tree] = {}
    for node, parent_id in graph_arrival_order(graph):
        branch = run_branch.get(node.run_id)
        if branch is None:
            holder = node_branch.get(parent_id, tree) if parent_id is not None else tree
            branch = holder.add(Text.assemble(("run ", "dim"), (node.run_id, "bold cyan")))
            run_branch[node.run_id] = branch
        label = Text.assemble((node.kind, "magenta"), " ", (node.id, "dim"))
        detail = _node_detail(node)
        if detail:
            label.append("  " + detail)
        node_branch[node.id] = branch.add(label)
    return tree


def _node_detail(node: Any) -> str:
    kind = node.kind
    if kind in ("text", "reasoning", "user"):
        content = node.content
        return _payload(content)[:80] if isinstance(content, str) else "[parts]"
    if kind in ("tool_call", "tool_result", "tool_progress"):
        return str(node.name)
    if kind == "error":
        return str(node.message)[:80]
    if kind == "relay":
        return str(node.tool)
    if kind == "usage":
        return f"{node.input_tokens} in / {node.output_tokens} out"
    return ""


@app.command()
def view(
    source: Annotated[str, typer.Argument(help="NDJSON event file, or a stored conversation id.")],
    tree: Annotated[bool, typer.Option("--tree", help="Show runs and nodes as a tree.")] = False,
    hide_reasoning: Annotated[bool, typer.Option(help="Leave reasoning out.")] = False,
    collapse_tools: Annotated[bool, typer.Option(help="Show tool calls without payloads.")] = False,
    hide_subagents: Annotated[bool, typer.Option(help="Leave subagent branches out.")] = False,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where stored conversations live (default .convograph).")
    ] = None,
) -> None:
    """Render a conversation's thread (or, with --tree, its graph) in the terminal."""
    graph, invalid = load_graph(source, data_dir)
    if tree:
        console.print(render_tree(graph))
    else:
        options = ViewOptions(
            hide_reasoning=hide_reasoning, collapse_tools=collapse_tools, hide_subagents=hide_subagents
        )
        views = project_thread(graph, options=options)
        console.print(render_thread(views) if views else Text("(empty conversation)", style="dim"))
    if invalid:
        raise typer.Exit(1)
