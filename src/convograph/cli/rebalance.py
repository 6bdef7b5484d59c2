"""``convograph rebalance --graph-url a,b,c``: put every workspace graph on the server the new list
of graph servers places it on (`convograph.intelligence.placement.rebalance`).

Run it with every convograph instance stopped, after adding, removing or re-listing graph servers;
then start the instances with the same list. ``--dry-run`` prints the moves only. Exit code 0 on
success, 1 when refused (instances still connected, a copy that differs), 2 when a server cannot be
reached or a URL is malformed.
"""

from __future__ import annotations

import os
from typing import Annotated

import redis
import typer

from convograph.cli.app import app, console, print_error

__all__ = ["rebalance"]


@app.command("rebalance")
def rebalance(
    graph_url: Annotated[
        list[str],
        typer.Option("--graph-url", help="The new list of FalkorDB servers (repeat, or separate by commas)."),
    ],
    previous_graph_url: Annotated[
        list[str] | None,
        typer.Option(help="A server leaving the list whose URL needs credentials (repeatable)."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the moves; change nothing.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Move even while convograph instances are connected.")
    ] = False,
) -> None:
    """Move workspace graphs to the servers a new --graph-url list places them on."""
    from convograph.intelligence.placement import PlacementError
    from convograph.intelligence.placement import rebalance as move_graphs
    from convograph.intelligence.shards import parse_graph_urls
    from convograph.intelligence.writer import GraphNames

    names = GraphNames(os.environ.get("CONVOGRAPH_GRAPH_PREFIX", "convograph_ci:"))
    try:
        urls = parse_graph_urls(graph_url)
        previous = parse_graph_urls(previous_graph_url) if previous_graph_url else []
        report = move_graphs(urls, names, previous_urls=previous, dry_run=dry_run, force=force)
    except ValueError as exc:
        print_error(str(exc))
        raise typer.Exit(2) from None
    except redis.RedisError as exc:
        print_error(f"a graph server cannot be reached: {exc}")
        raise typer.Exit(2) from None
    except PlacementError as exc:
        print_error(str(exc))
        raise typer.Exit(1) from None
    was = ", ".join(report.previous) if report.previous else "not recorded"
    console.print(f"graph servers: {', '.join(report.servers)} (before: {was})")
    for move in report.moves:
        console.print(f"{'would move' if dry_run else 'moved'} {move.graph}: {move.source} -> {move.target}")
    if not report.moves:
        console.print("every graph is on its server already")
    for address in report.left:
        console.print(
            f"{address} left the list: {'would clear' if dry_run else 'cleared'} this deployment's keys"
        )
