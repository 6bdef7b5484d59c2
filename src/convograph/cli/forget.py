"""``convograph forget SESSION -w WORKSPACE``: delete one session of a workspace on a running server;
``convograph forget --idle-days D [-w WORKSPACE]``: delete every session idle for more than D days.

Sends ``DELETE /sessions/{session}?workspace=`` (or ``DELETE /sessions?idle_days=``) with an
admin-scope key when the server has keys: the journal records and blobs are deleted at once, the
graph nodes once the server has removed them from the graph (``--wait`` blocks until then). A redelivered
copy of a forgotten event is refused as a duplicate. Exit code 0 on success, 1 when refused (unknown session, no access),
2 when the server cannot be reached or the graph is not updated within ``--timeout``.
"""

from __future__ import annotations

import math
import time
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer

from convograph.cli.app import app, console, err_console, print_error
from convograph.cli.errors import server_refused, server_unreachable

__all__ = ["forget"]


def _error(response: httpx.Response) -> str:
    try:
        body: Any = response.json()
        return f"{body['error']['code']}: {body['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return " ".join(response.text.split())[:200]  # an HTML error page is many lines


def _json_object(response: httpx.Response, url: str) -> dict[str, Any]:
    """The JSON object a convograph server answers; exit 2 naming ``url`` when it is not one
    (``--url`` points at something else)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        text = " ".join(response.text.split())[:200]
        err_console.print(
            f"[red]{url} did not answer like a convograph server: HTTP {response.status_code}: {text}"
        )
        raise typer.Exit(2)
    return body


@app.command("forget")
def forget(
    session_id: Annotated[str | None, typer.Argument(help="The session id to forget.")] = None,
    workspace: Annotated[
        str | None, typer.Option("--workspace", "-w", help="The workspace (required with SESSION).")
    ] = None,
    idle_days: Annotated[
        float | None, typer.Option("--idle-days", help="Instead of SESSION: every session idle this long.")
    ] = None,
    url: Annotated[
        str, typer.Option("--url", help="convograph server.", envvar="CONVOGRAPH_URL")
    ] = "http://127.0.0.1:8321",
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="CONVOGRAPH_API_KEY")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Block until the graph no longer holds it.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait with --wait.")] = 600.0,
) -> None:
    """Forget context-intelligence sessions: journal records, blobs and graph nodes."""
    if (session_id is None) == (idle_days is None):
        raise typer.BadParameter("give either SESSION (with --workspace) or --idle-days")
    if session_id is not None and not workspace:
        raise typer.BadParameter("--workspace is required with SESSION")
    if idle_days is not None and not (math.isfinite(idle_days) and idle_days >= 0):
        raise typer.BadParameter(f"--idle-days must be a number of days >= 0, got {idle_days:g}")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            params: dict[str, str] = {"workspace": workspace} if workspace else {}
            if session_id is not None:
                path = f"/sessions/{quote(session_id, safe='')}"
            else:
                path, params["idle_days"] = "/sessions", str(idle_days)
            response = http.delete(path, params=params)
            if response.status_code != 202:
                print_error(server_refused(url, response.status_code, _error(response)))
                raise typer.Exit(1)
            result = _json_object(response, url)
            what = (
                f"session {session_id} of {workspace}"
                if session_id is not None
                else f"{result.get('sessions', '?')} sessions idle for more than {idle_days:g} days"
            )
            console.print(
                f"forgot {what}: {result.get('events', '?')} events, {result.get('blobs', '?')} blobs; "
                f"graph update {'pending' if result.get('rebuilding') else 'done'}"
            )
            if not wait:
                return
            deadline = time.monotonic() + timeout
            while _json_object(http.get("/intelligence/status"), url).get("rebuilding", []):
                if time.monotonic() >= deadline:
                    err_console.print(f"[red]the graph was not updated within {timeout:g} s")
                    raise typer.Exit(2)
                time.sleep(0.25)
            console.print("graph updated")
    except httpx.HTTPError as exc:
        print_error(server_unreachable(url, exc))
        raise typer.Exit(2) from None
