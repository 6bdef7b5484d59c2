"""The shared Typer application every command module registers on."""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(
    name="convograph",
    help="Turn multi-agent LLM event streams into conversation graphs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

console = Console()
err_console = Console(stderr=True, soft_wrap=True)


@app.callback()
def _root() -> None:
    """Turn multi-agent LLM event streams into conversation graphs."""
