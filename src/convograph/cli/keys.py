"""``convograph keys create``: make an API key, store only its hash, print the key once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, cast

import typer

from convograph.cli.app import app, console, err_console
from convograph.server.auth import Scope, add_key_to_file

keys_app = typer.Typer(help="Manage API keys.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


@keys_app.command("create")
def create(
    key_id: Annotated[str, typer.Argument(help="A name for the key, unique in the file.")],
    file: Annotated[Path, typer.Option(help="Key file to add to.")] = Path(".convograph/api-keys.json"),
    scope: Annotated[list[str] | None, typer.Option(help="read, write or admin; repeatable.")] = None,
    workspace: Annotated[
        list[str] | None, typer.Option(help="Restrict to this workspace; repeatable.")
    ] = None,
) -> None:
    """Create a key and print it (only its SHA-256 is stored)."""
    scopes = [cast(Scope, name) for name in scope or ["read"]]  # add_key_to_file checks them
    try:
        key = add_key_to_file(file, key_id=key_id, scopes=scopes, workspaces=workspace)
    except OSError as exc:
        err_console.print(
            f"[red]error:[/] cannot write key file {file}: {exc.strerror or exc}", highlight=False
        )
        raise typer.Exit(2) from None
    except ValueError as exc:
        where = "" if str(file) in str(exc) else f"key file {file}: "
        err_console.print(f"[red]error:[/] {where}{exc}", highlight=False)
        raise typer.Exit(2) from None
    console.print(key, highlight=False, soft_wrap=True)
    err_console.print(f"key {key_id!r} added to {file}; it is shown only now.")
