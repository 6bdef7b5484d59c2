"""``convograph ingest FILE``: validate an NDJSON stream, build its graph, print a summary.

Reads the file once, streaming (O(file size) time, memory for the graph only). Every invalid line
is reported with its number and reason; valid lines are still applied. Exit code 1 when any line was
invalid, 2 when the file cannot be read.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn
from rich.table import Table
from rich.text import Text

from convograph.cli.app import app, console, err_console
from convograph.events import EventError, iter_ndjson
from convograph.graph import Graph, create_graph, reduce_event

PROGRESS_THRESHOLD_BYTES = 4 * 1024 * 1024
"""Files at least this large get a progress bar (on a terminal)."""


def ingest_file(path: Path, *, show_progress: bool = False) -> tuple[Graph, list[EventError], Counter[str]]:
    """Reduce every valid line of ``path`` into a new graph; collect the errors and type counts."""
    graph = create_graph()
    errors: list[EventError] = []
    types: Counter[str] = Counter()
    size = os.path.getsize(path)
    with (
        open(path, "rb") as handle,
        _progress(show_progress and size >= PROGRESS_THRESHOLD_BYTES) as progress,
    ):
        task = progress.add_task("ingest", total=size) if progress is not None else None
        for count, (_, item) in enumerate(iter_ndjson(handle)):
            if isinstance(item, EventError):
                errors.append(item)
                continue
            types[item.type] += 1
            graph = reduce_event(graph, item)
            if progress is not None and task is not None and count % 2048 == 0:
                progress.update(task, completed=handle.tell())
        if progress is not None and task is not None:
            progress.update(task, completed=size)
    return graph, errors, types


class _NoProgress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _progress(enabled: bool) -> Progress | _NoProgress:
    if not enabled:
        return _NoProgress()
    return Progress(
        TextColumn("[bold]ingesting"),
        BarColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )


@app.command()
def ingest(
    file: Annotated[Path, typer.Argument(help="NDJSON file: one wire event per line.")],
    max_errors: Annotated[int, typer.Option(help="Print at most this many invalid lines.")] = 50,
) -> None:
    """Validate an NDJSON event stream and summarise the graph it builds."""
    if file.is_dir() or not file.exists():
        # anything else that opens (a FIFO, /dev/stdin, `<(zcat log.gz)`) is read like a file
        err_console.print(f"[red]error:[/] {file}: {'is a directory' if file.is_dir() else 'no such file'}")
        raise typer.Exit(2)
    try:
        graph, errors, types = ingest_file(file, show_progress=err_console.is_terminal)
    except OSError as exc:
        err_console.print(f"[red]error:[/] {file}: {exc.strerror or exc}")
        raise typer.Exit(2) from None

    edge_count = sum(len(children) for children in graph.edges.values())
    summary = Table(title=f"{file.name}", show_header=False, box=None)
    summary.add_row("events", str(sum(types.values())))
    summary.add_row("nodes", str(len(graph.nodes)))
    summary.add_row("edges", str(edge_count))
    summary.add_row("runs", str(len(graph.last_node_by_run_id)))
    summary.add_row("invalid lines", str(len(errors)))
    if graph.pending_parents:
        summary.add_row("unresolved parents", ", ".join(sorted(graph.pending_parents)))
    for diagnostic in graph.diagnostics:
        summary.add_row("diagnostic", diagnostic.message)
    console.print(summary)
    if types:
        console.print("types: " + ", ".join(f"{name}={count}" for name, count in sorted(types.items())))
    for error in errors[:max_errors]:
        err_console.print(Text.assemble(("invalid ", "red"), str(error)), highlight=False)
    if len(errors) > max_errors:
        err_console.print(f"... and {len(errors) - max_errors} more invalid lines")
    if errors:
        raise typer.Exit(1)
