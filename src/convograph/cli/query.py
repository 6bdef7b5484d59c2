"""``convograph query CYPHER``: run a read-only Cypher query and print the rows as a table.

By default the query goes to a running server (``--url``, ``POST /cypher``); ``--graph-url
falkordb://host:port`` queries a FalkorDB server directly through the same read-only guard.
Exit code 0 on success, 1 when the query is rejected, 2 when the target cannot be reached.
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import typer
from rich.table import Table

from convograph.cli.app import app, console, print_error
from convograph.cli.errors import server_refused, server_unreachable
from convograph.intelligence.tools import HttpBackend, ToolError, graph_query

__all__ = ["parse_params", "query", "render_table"]


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """``["sid=abc", "n=3"]`` → ``{"sid": "abc", "n": 3}`` (values parsed as JSON when possible)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"--param must be NAME=VALUE, got {pair!r}")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    return out


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def render_table(result: dict[str, Any]) -> Table:
    """A rich table of ``{"columns", "results"}``."""
    table = Table(show_header=True, header_style="bold")
    columns = list(result.get("columns") or [])
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in result.get("results", []):
        table.add_row(*(_cell(row.get(column)) for column in columns))
    return table


@app.command("query")
def query(
    cypher: Annotated[str, typer.Argument(help="One read-only Cypher statement.")],
    workspace: Annotated[
        str | None, typer.Option("--workspace", "-w", help='Workspace ($workspace); "*" for all.')
    ] = None,
    param: Annotated[list[str] | None, typer.Option("--param", "-p", help="NAME=VALUE (JSON value).")] = None,
    url: Annotated[
        str, typer.Option("--url", help="convograph server.", envvar="CONVOGRAPH_URL")
    ] = "http://127.0.0.1:8321",
    graph_url: Annotated[
        str | None,
        typer.Option(
            "--graph-url",
            help="Query a FalkorDB server directly: falkordb://host:port (several: separated by commas).",
        ),
    ] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="CONVOGRAPH_API_KEY")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON result.")] = False,
) -> None:
    """Run a read-only Cypher query on the context-intelligence graph and print a table."""
    params = parse_params(param or [])
    result: dict[str, Any]
    try:
        if graph_url is not None:
            from convograph.intelligence.engine import EngineUnavailable
            from convograph.intelligence.placement import PlacementError, connect_graph
            from convograph.intelligence.query import AccessDenied, QueryError, run_cypher
            from convograph.intelligence.writer import GraphNames

            names = GraphNames(os.environ.get("CONVOGRAPH_GRAPH_PREFIX", "convograph_ci:"))
            try:
                engine = connect_graph(graph_url, names, record=False)
            except (EngineUnavailable, PlacementError, ValueError) as exc:
                print_error(f"cannot reach {graph_url}: {exc}")
                raise typer.Exit(2) from None
            try:
                found = run_cypher(engine, names, cypher, params, workspace, union_graph=names.all_graph)
            except (QueryError, AccessDenied) as exc:
                print_error(f"query refused: {exc.message}")
                raise typer.Exit(1) from None
            finally:
                engine.close()
            result = {"columns": found.columns, "results": found.results, "truncated": found.truncated}
        else:
            backend = HttpBackend(url, api_key=api_key)
            try:
                result = graph_query(cypher, params, workspace, backend=backend)
            finally:
                backend.close()
    except ToolError as exc:
        unreachable = exc.code in ("connection_error", "timeout")
        message = (
            server_unreachable(url, exc.message)
            if unreachable
            else server_refused(url, exc.status, exc.message)
        )
        print_error(message)
        raise typer.Exit(2 if unreachable else 1) from None
    if as_json:
        console.print_json(json.dumps(result, ensure_ascii=False))
        return
    console.print(render_table(result))
    rows = len(result.get("results", []))
    note = " (truncated by the row cap)" if result.get("truncated") else ""
    console.print(f"{rows} row{'s' if rows != 1 else ''}{note}", style="dim")
