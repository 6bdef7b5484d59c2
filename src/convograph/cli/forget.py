"""``convograph forget SESSION -w WORKSPACE``: delete one session of a workspace on a running server.

Sends ``DELETE /sessions/{session}?workspace=`` (an admin-scope key when the server has keys):
the session's journal records and blobs are deleted at once, its graph nodes when the workspace
rebuild finishes (``--wait`` blocks until then). A redelivered copy of a forgotten event is
refused as a duplicate. Exit code 0 on success, 1 when refused (unknown session, no access),
2 when the server cannot be reached or the rebuild does not finish within ``--timeout``.
"""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer

from convograph.cli.app import app, console, err_console

__all__ = ["forget"]


def _error(response: httpx.Response) -> str:
    try:
        body: Any = response.json()
        return f"{body['error']['code']}: {body['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {response.text[:200]}"


@app.command("forget")
def forget(
    session_id: Annotated[str, typer.Argument(help="The session id to forget.")],
    workspace: Annotated[str, typer.Option("--workspace", "-w", help="The workspace it belongs to.")],
    url: Annotated[
        str, typer.Option("--url", help="convograph server.", envvar="CONVOGRAPH_URL")
    ] = "http://127.0.0.1:8321",
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="CONVOGRAPH_API_KEY")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Block until the graph no longer holds it.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait with --wait.")] = 600.0,
) -> None:
    """Forget one context-intelligence session: journal records, blobs and graph nodes."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            response = http.delete(f"/sessions/{quote(session_id, safe='')}", params={"workspace": workspace})
            if response.status_code != 202:
                err_console.print(f"[red]{_error(response)}")
                raise typer.Exit(1)
            result = response.json()
            console.print(
                f"forgot session {session_id} of {workspace}: {result['events']} events, "
                f"{result['blobs']} blobs; graph rebuild {'pending' if result['rebuilding'] else 'done'}"
            )
            if not wait:
                return
            deadline = time.monotonic() + timeout
            while workspace in http.get("/intelligence/status").json().get("rebuilding", []):
                if time.monotonic() >= deadline:
                    err_console.print(f"[red]the rebuild of {workspace} did not finish in {timeout:g} s")
                    raise typer.Exit(2)
                time.sleep(0.25)
            console.print("graph rebuilt")
    except httpx.HTTPError as exc:
        err_console.print(f"[red]cannot reach {url}: {exc}")
        raise typer.Exit(2) from None
