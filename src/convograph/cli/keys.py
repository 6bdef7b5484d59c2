"""``convograph keys create | revoke | list``: API keys in a key file or in PostgreSQL (only hashes
are stored; a new key is printed once)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import psycopg
import typer

from convograph.cli.app import app, console, err_console
from convograph.server.auth import Scope, add_key_to_file

if TYPE_CHECKING:
    from convograph.server.keystore import PostgresKeyStore

keys_app = typer.Typer(help="Manage API keys.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        help="Store the key in this PostgreSQL database (the servers' --database-url, postgresql://… or"
        " redis://…?finalize=postgresql://…) instead of a file: every instance serving it knows the key"
        " within 5 s."
    ),
]


def _key_store(database_url: str) -> PostgresKeyStore:
    from convograph.server.keystore import PostgresKeyStore
    from convograph.store.url import shared_postgres

    try:
        conninfo = shared_postgres(database_url)
    except ValueError as exc:
        err_console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    if conninfo is None:
        err_console.print(
            f"[red]error:[/] --database-url must name a PostgreSQL database, got {database_url!r}",
            highlight=False,
        )
        raise typer.Exit(2)
    return PostgresKeyStore(conninfo)


@keys_app.command("create")
def create(
    key_id: Annotated[str, typer.Argument(help="A name for the key, unique in the file.")],
    file: Annotated[Path, typer.Option(help="Key file to add to.")] = Path(".convograph/api-keys.json"),
    scope: Annotated[list[str] | None, typer.Option(help="read, write or admin; repeatable.")] = None,
    workspace: Annotated[
        list[str] | None, typer.Option(help="Restrict to this workspace; repeatable.")
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a key and print it (only its SHA-256 is stored)."""
    scopes = [cast(Scope, name) for name in scope or ["read"]]  # add_key_to_file checks them
    if database_url is not None:
        try:
            key = _key_store(database_url).create(key_id, scopes=scopes, workspaces=workspace)
        except (ValueError, psycopg.Error) as exc:
            err_console.print(f"[red]error:[/] {' '.join(str(exc).split())}", highlight=False)
            raise typer.Exit(2) from None
        console.print(key, highlight=False, soft_wrap=True)
        err_console.print(f"key {key_id!r} added to the database; it is shown only now.")
        return
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


@keys_app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id.")],
    database_url: Annotated[str, typer.Option(help="The PostgreSQL database holding the key.")],
) -> None:
    """Delete a key from the database: every instance refuses it within 5 s."""
    try:
        found = _key_store(database_url).revoke(key_id)
    except psycopg.Error as exc:
        err_console.print(f"[red]error:[/] {' '.join(str(exc).split())}", highlight=False)
        raise typer.Exit(2) from None
    if not found:
        err_console.print(f"[red]error:[/] no key {key_id!r} in the database", highlight=False)
        raise typer.Exit(1)
    err_console.print(f"key {key_id!r} revoked.")


@keys_app.command("list")
def list_keys(
    database_url: Annotated[str, typer.Option(help="The PostgreSQL database holding the keys.")],
) -> None:
    """The database's keys (id, scopes, workspaces); never the keys themselves."""
    try:
        keys = _key_store(database_url).load()
    except psycopg.Error as exc:
        err_console.print(f"[red]error:[/] {' '.join(str(exc).split())}", highlight=False)
        raise typer.Exit(2) from None
    for key in keys:
        workspaces = ",".join(key.workspaces) if key.workspaces is not None else "*"
        console.print(f"{key.id}\t{','.join(key.scopes)}\t{workspaces}", highlight=False)
