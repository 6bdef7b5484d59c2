"""The shared Typer application every command module registers on."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from convograph import __version__

app = typer.Typer(
    name="convograph",
    help="Turn multi-agent LLM event streams into conversation graphs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

console = Console()
err_console = Console(stderr=True, soft_wrap=True)


def print_error(message: str) -> None:
    """``error: message`` on stderr; the message is shown as written (no markup, no highlighting)."""
    err_console.print(f"[red]error:[/] {escape(message)}", highlight=False)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"convograph {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Turn multi-agent LLM event streams into conversation graphs."""
