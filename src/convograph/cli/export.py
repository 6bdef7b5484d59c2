"""``convograph export SOURCE --format ...``: a projection of a conversation as JSON (or SVG).

Formats: ``openai`` / ``anthropic`` / ``gateway`` (request histories), ``thread`` (nested views),
``dag`` (layout JSON), ``svg`` (the DAG drawn), ``repl`` (the REPL view of recursive-LM runs: agents,
turns with code, output and child agents; read from the hypergraph, since the flat graph keeps no
``repl_*`` events), ``otlp`` (the conversation as OpenTelemetry GenAI spans: one OTLP/JSON
``ExportTraceServiceRequest`` on one line, the line format of the OpenTelemetry Collector's
``otlpjsonfile`` receiver and ``file`` exporter; `convograph.integrations.otlp.encode`).
Writes to stdout unless ``--output`` is given.
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
from convograph.cli.view import load_events, load_graph
from convograph.graph import Graph
from convograph.hypergraph import create_conversation, reduce_conversation_events
from convograph.jsonable import to_jsonable
from convograph.projections.dag import project_dag
from convograph.projections.messages import project_messages
from convograph.projections.repl import project_repl
from convograph.projections.thread import project_thread

__all__ = ["ExportFormat", "export"]


class ExportFormat(StrEnum):
    openai = "openai"
    anthropic = "anthropic"
    gateway = "gateway"
    thread = "thread"
    dag = "dag"
    svg = "svg"
    repl = "repl"
    otlp = "otlp"


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
    conversation_id: Annotated[
        str | None,
        typer.Option(
            help="otlp: the gen_ai.conversation.id to write \\[default: the conversation id or file name]."
        ),
    ] = None,
) -> None:
    """Export a projection of a conversation: openai|anthropic|gateway|thread|dag|svg|repl|otlp."""
    if format is ExportFormat.otlp:
        from convograph.integrations.otlp.encode import conversation_spans, to_otlp_json

        events, invalid = load_events(source, data_dir)
        name = conversation_id or (Path(source).stem if Path(source).exists() else source)
        text = json.dumps(
            to_otlp_json(conversation_spans(events, name)), ensure_ascii=False, separators=(",", ":")
        )
    elif format is ExportFormat.repl:
        events, invalid = load_events(source, data_dir)
        view = project_repl(reduce_conversation_events(create_conversation(), events))
        text = json.dumps(to_jsonable(view), ensure_ascii=False, indent=2)
    else:
        graph, invalid = load_graph(source, data_dir)
        text = _render(graph, format)
    _write(text, output)
    if invalid:
        raise typer.Exit(1)


def _render(graph: Graph, format: ExportFormat) -> str:
    """A flat-graph projection as text: SVG, or indented JSON."""
    if format is ExportFormat.svg:
        return project_dag(graph).to_svg()
    data: Any
    if format is ExportFormat.thread:
        data = to_jsonable(project_thread(graph))
    elif format is ExportFormat.dag:
        data = to_jsonable(project_dag(graph))
    else:
        data = project_messages(graph, format=format.value)
    return json.dumps(data, ensure_ascii=False, indent=2)


def _write(text: str, output: Path | None) -> None:
    """``text`` to stdout, or to ``output`` (exit code 2 when it cannot be written)."""
    if output is None:
        typer.echo(text)
        return
    try:
        output.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        err_console.print(f"[red]cannot write {output}:[/red] {exc.strerror or exc}", highlight=False)
        raise typer.Exit(2) from None
