"""``convograph export SOURCE --format ...``: a projection of a conversation as JSON (or SVG).

Formats: ``openai`` / ``anthropic`` / ``gateway`` (request histories), ``thread`` (nested views),
``dag`` (layout JSON), ``svg`` (the DAG drawn). Writes to stdout unless ``--output`` is given.
Exit code 1 when invalid lines were skipped, 2 when the source cannot be read or the output
not written.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from convograph.cli.app import app, err_console
from convograph.cli.view import load_graph
from convograph.jsonable import to_jsonable
from convograph.projections.dag import project_dag
from convograph.projections.messages import project_messages
from convograph.projections.thread import project_thread

__all__ = ["ExportFormat", "export"]


class ExportFormat(StrEnum):
    openai = "openai"
    anthropic = "anthropic"
    gateway = "gateway"
    thread = "thread"
    dag = "dag"
    svg = "svg"


@app.command()
def export(
    source: Annotated[str, typer.Argument(help="NDJSON event file, or a stored conversation id.")],
    format: Annotated[
        ExportFormat, typer.Option("--format", "-f", help="What to export.")
    ] = ExportFormat.openai,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where stored conversations live (default .convograph).")
    ] = None,
) -> None:
    """Export a projection of a conversation: openai|anthropic|gateway|thread|dag|svg."""
    graph, invalid = load_graph(source, data_dir)
    text: str
    if format is ExportFormat.svg:
        text = project_dag(graph).to_svg()
    else:
        data: Any
        if format is ExportFormat.thread:
            data = to_jsonable(project_thread(graph))
        elif format is ExportFormat.dag:
            data = to_jsonable(project_dag(graph))
        else:
            data = project_messages(graph, format=format.value)
        text = json.dumps(data, ensure_ascii=False, indent=2)
    if output is None:
        typer.echo(text)
    else:
        try:
            output.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            err_console.print(f"[red]cannot write {output}:[/red] {exc.strerror or exc}", highlight=False)
            raise typer.Exit(2) from None
    if invalid:
        raise typer.Exit(1)
