"""``convograph demo``: start a server on embedded defaults, play the bundled conversations into it
at a human pace, print the URL, and keep serving until Ctrl-C.

The server runs as a child process (``python -m convograph serve``), so the demo exercises exactly
what a user runs; the player talks to it over HTTP only. ``--url`` plays into a server that is
already running instead.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import webbrowser
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from convograph._process import die_with_parent
from convograph.cli.app import app, console, err_console

__all__ = ["demo"]

READY_TIMEOUT_S = 60.0


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_taken(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _wait_ready(base_url: str, process: subprocess.Popen[bytes] | None) -> None:
    """Poll ``/openapi.json`` until it answers 200. Raises `typer.Exit` if the server dies."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            err_console.print(
                f"[red]error:[/] the server exited with status {process.returncode} before it was ready"
            )
            raise typer.Exit(1)
        try:
            if httpx.get(f"{base_url}/openapi.json", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    err_console.print(f"[red]error:[/] no answer from {base_url}/openapi.json after {READY_TIMEOUT_S:.0f} s")
    raise typer.Exit(1)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, not SIGINT: a demo started as a background job inherits SIGINT ignored."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _say_waiting(base_url: str, cid: str, relay_id: str) -> None:
    console.print(
        f"  {cid} waits for a decision on permission request {relay_id}: Allow or Deny it at "
        f"{base_url}/c/{cid} (Ctrl-C stops the demo)",
        highlight=False,
        soft_wrap=True,
    )
    sys.stdout.flush()


def _envelopes(base_url: str, scripts: list[Any], headers: dict[str, str] | None) -> list[dict[str, Any]]:
    """Hook envelopes for the explorer (workspace ``demo``), or none when the server does not run
    the context-intelligence service (then the explorer has nothing to show; say so)."""
    from convograph.demo.intelligence import hook_envelopes

    try:
        paths = httpx.get(f"{base_url}/openapi.json", headers=headers, timeout=10).json().get("paths", {})
    except (httpx.HTTPError, ValueError):
        paths = {}
    if "/events" not in paths:
        console.print("  (context intelligence is off on this server: the graph explorer stays empty)")
        return []
    console.print(
        "  the graph explorer (/explore) holds the same sessions in workspace 'demo'",
        highlight=False,
        soft_wrap=True,
    )
    out: list[dict[str, Any]] = []
    for script in scripts:
        out += hook_envelopes(script.events(), prefix=script.conversation_id)
    return out


@app.command()
def demo(
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port for the server (0 picks a free one).")
    ] = 8321,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Where the server keeps its stores \\[default: a fresh temporary directory]."),
    ] = None,
    speed: Annotated[float, typer.Option(min=0.01, help="Playback speed (2.0 = twice as fast).")] = 1.0,
    fast: Annotated[bool, typer.Option("--fast", help="No delays: post every conversation at once.")] = False,
    browser: Annotated[
        bool, typer.Option("--browser/--no-browser", help="Open the viewer in a browser.")
    ] = True,
    url: Annotated[
        str | None, typer.Option(help="Play into an already running server at this URL instead.")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="CONVOGRAPH_API_KEY", help="Bearer key for a --url server started with keys."),
    ] = None,
) -> None:
    """Play realistic multi-agent conversations into a live server and open the viewer."""
    from convograph.demo import DEMO_CONVERSATIONS, play_all
    from convograph.demo.player import DemoError

    if url is not None and not url.startswith(("http://", "https://")):
        err_console.print(f"[red]error:[/] --url must be an http:// or https:// URL, got {url!r}")
        raise typer.Exit(2)
    process: subprocess.Popen[bytes] | None = None
    temp_dir: Path | None = None
    if url is None:
        if port == 0:
            port = _free_port(host)
        elif _port_taken(host, port):
            err_console.print(
                f"[red]error:[/] port {port} on {host} is already in use. Pass --port 0 for a free port, "
                f"or --url http://{host}:{port} to play into the server that is running there."
            )
            raise typer.Exit(2)
        if data_dir is None:
            temp_dir = Path(tempfile.mkdtemp(prefix="convograph-demo-"))
            data_dir = temp_dir
        base_url = f"http://{host}:{port}"
        command = [
            sys.executable, "-m", "convograph", "serve",
            "--host", host, "--port", str(port), "--data-dir", str(data_dir), "--log-level", "warning",
        ]  # fmt: skip
        # The server dies with the demo even when the demo is killed outright (no finally runs then).
        process = subprocess.Popen(command, preexec_fn=die_with_parent)
    else:
        base_url = url.rstrip("/")

    scripts = [factory() for factory in DEMO_CONVERSATIONS]
    signal.signal(signal.SIGTERM, _interrupt)  # stop the server and clean up on SIGTERM as on Ctrl-C
    # A shell starts a background job with SIGINT ignored, and Python keeps it ignored: Ctrl-C after
    # `fg` would do nothing. The demo always stops on Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _wait_ready(base_url, process)
        first = f"{base_url}/c/{scripts[0].conversation_id}"
        console.print(
            f"[bold]convograph demo[/] · server at [link={base_url}/]{base_url}/[/link]",
            highlight=False,
            soft_wrap=True,
        )
        if data_dir is not None:
            console.print(f"  data directory: {data_dir}", highlight=False, soft_wrap=True)
        for script in scripts:
            console.print(f"  · {script.conversation_id}: {script.title}", highlight=False, soft_wrap=True)
        console.print(
            f"Open {first}  (the conversation list is at {base_url}/)", highlight=False, soft_wrap=True
        )
        console.print(
            "  demo-research ends on a permission request: Allow or Deny it in the viewer and the agent goes on.",
            highlight=False,
            soft_wrap=True,
        )
        sys.stdout.flush()
        if browser:
            webbrowser.open(first)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        envelopes = _envelopes(base_url, scripts, headers)
        # Into someone else's server, --fast loads the conversations and ends: it does not sit at a
        # permission request (it says which are pending instead).
        wait_for_relays = not (fast and process is None)
        results = asyncio.run(
            play_all(
                base_url,
                scripts,
                speed=None if fast else speed,
                headers=headers,
                envelopes=envelopes,
                wait_for_relays=wait_for_relays,
                on_relay=lambda cid, relay_id: _say_waiting(base_url, cid, relay_id),
            )
        )
        total = sum(r.posted for r in results)
        for result in results:
            if result.pending_relay is not None:
                console.print(
                    f"  {result.conversation_id} stops at permission request {result.pending_relay}: "
                    f"decide it at {base_url}/c/{result.conversation_id}",
                    highlight=False,
                    soft_wrap=True,
                )
        still = f" Still serving {base_url}/ — Ctrl-C to stop." if process is not None else ""
        console.print(
            f"Played {len(results)} conversations ({total} new events).{still}",
            highlight=False,
            soft_wrap=True,
        )
        sys.stdout.flush()
        if process is not None:
            process.wait()
    except KeyboardInterrupt:
        console.print("Stopping.")
    except (DemoError, httpx.HTTPError) as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    finally:
        if process is not None:
            _stop(process)
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
