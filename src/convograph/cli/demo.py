"""``convograph demo``: start a server on embedded defaults, run the bundled conversations into it with
the real agent harness against the scripted local model server, print the URL, and keep serving
(new conversations keep starting) until Ctrl-C.

The server runs as a child process (``python -m convograph serve``), so the demo exercises exactly
what a user runs; the agents run in this process (`convograph.demo.live`) and talk to it over HTTP
only, each serving its conversation: a message typed in the viewer starts its next turn.
``--url`` runs into a server that is already running instead; ``--replay`` (and ``--url ...
--fast``) posts the recorded copies of the conversations instead of running agents.
"""

from __future__ import annotations

import asyncio
import math
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


def _say(text: str) -> None:
    console.print(text, highlight=False, soft_wrap=True)
    sys.stdout.flush()


def _say_waiting(base_url: str, cid: str, relay_id: str) -> None:
    _say(
        f"  {cid} waits for a decision on permission request {relay_id}: Allow or Deny it at "
        f"{base_url}/c/{cid} (Ctrl-C stops the demo)"
    )


def _explorer_on(base_url: str, headers: dict[str, str] | None) -> bool:
    """Whether the server runs the context-intelligence service (then the explorer gets the demo's
    sessions in workspace ``demo``); says which."""
    try:
        paths = httpx.get(f"{base_url}/openapi.json", headers=headers, timeout=10).json().get("paths", {})
    except (httpx.HTTPError, ValueError):
        paths = {}
    if "/events" not in paths:
        _say("  (context intelligence is off on this server: the graph explorer stays empty)")
        return False
    _say("  the graph explorer (/explore) holds the same sessions in workspace 'demo'")
    return True


def _own_server(
    host: str, port: int, data_dir: Path | None
) -> tuple[subprocess.Popen[bytes], str, Path | None]:
    """Start ``convograph serve`` for the demo: (the process, its URL, the temporary data directory
    to remove afterwards, if one was made). A busy port is refused (exit 2)."""
    if port == 0:
        port = _free_port(host)
    elif _port_taken(host, port):
        err_console.print(
            f"[red]error:[/] port {port} on {host} is already in use. Pass --port 0 for a free port, "
            f"or --url http://{host}:{port} to play into the server that is running there."
        )
        raise typer.Exit(2)
    temp_dir = None if data_dir is not None else Path(tempfile.mkdtemp(prefix="convograph-demo-"))
    command = [
        sys.executable, "-m", "convograph", "serve", "--host", host, "--port", str(port),
        "--data-dir", str(data_dir or temp_dir), "--log-level", "warning",
    ]  # fmt: skip
    # The server dies with the demo even when the demo is killed outright (no finally runs then).
    return subprocess.Popen(command, preexec_fn=die_with_parent), f"http://{host}:{port}", temp_dir


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
    speed: Annotated[float, typer.Option(min=0.01, help="Pace (2.0 = twice as fast).")] = 1.0,
    fast: Annotated[
        bool, typer.Option("--fast", help="No pacing, and no rolling schedule of new conversations.")
    ] = False,
    once: Annotated[
        bool, typer.Option("--once", help="Run each conversation once: no rolling schedule.")
    ] = False,
    replay: Annotated[
        bool, typer.Option("--replay", help="Post the recorded conversations instead of running agents.")
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(
            help="Run the agents on a real model: openai:MODEL or anthropic:MODEL (key from the environment)."
        ),
    ] = None,
    base_url: Annotated[str | None, typer.Option(help="The model API's base URL (with --model).")] = None,
    browser: Annotated[
        bool, typer.Option("--browser/--no-browser", help="Open the viewer in a browser.")
    ] = True,
    url: Annotated[
        str | None, typer.Option(help="Run into an already running server at this URL instead.")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="CONVOGRAPH_API_KEY", help="Bearer key for a --url server started with keys."),
    ] = None,
) -> None:
    """Run live multi-agent conversations into a server (the agent harness on a scripted model) and open the viewer."""
    if url is not None and not url.startswith(("http://", "https://")):
        err_console.print(f"[red]error:[/] --url must be an http:// or https:// URL, got {url!r}")
        raise typer.Exit(2)
    process, server_url, temp_dir = (
        _own_server(host, port, data_dir) if url is None else (None, url.rstrip("/"), None)
    )
    data_dir = data_dir or temp_dir
    signal.signal(signal.SIGTERM, _interrupt)  # stop the server and clean up on SIGTERM as on Ctrl-C
    # A shell starts a background job with SIGINT ignored, and Python keeps it ignored: Ctrl-C after
    # `fg` would do nothing. The demo always stops on Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    recorded = replay or (fast and process is None)  # into someone else's server, --fast loads and ends
    try:
        _wait_ready(server_url, process)
        _say(f"[bold]convograph demo[/] · server at [link={server_url}/]{server_url}/[/link]")
        if data_dir is not None:
            _say(f"  data directory: {data_dir}")
        _say(f"Open {server_url}/c/demo-research  (the conversation list is at {server_url}/)")
        if browser:
            webbrowser.open(f"{server_url}/c/demo-research")
        if recorded:
            _play_recorded(
                server_url, speed=None if fast else speed, api_key=api_key, owned=process is not None
            )
        else:
            pace = math.inf if fast else speed
            rolling = not (fast or once or model)
            asyncio.run(_run_live(server_url, pace, model, base_url, api_key=api_key, rolling=rolling))
        if process is not None:
            process.wait()
    except KeyboardInterrupt:
        console.print("Stopping.")
    except (RuntimeError, httpx.HTTPError) as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    finally:
        if process is not None:
            _stop(process)
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


async def _run_live(
    server_url: str,
    speed: float,
    model: str | None,
    base_url: str | None,
    *,
    api_key: str | None,
    rolling: bool,
) -> None:
    """The live demo (`convograph.demo.live.LiveDemo`) until cancelled (Ctrl-C)."""
    from convograph.demo.live import LiveDemo, ModelChoice, Round
    from convograph.demo.scenario import SCENARIOS

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    explorer = _explorer_on(server_url, headers)
    _say(
        "  demo-research ends on a permission request: Allow or Deny it in the viewer and the agent goes on."
    )

    def started(round_: Round) -> None:
        live = "" if not round_.rolling else " (a new round)"
        _say(f"  · {round_.conversation_id}: {round_.scenario.title}{live}")

    live = LiveDemo(
        server_url, speed=speed, api_key=api_key, on_round=started,
        model=ModelChoice(model, base_url) if model else None,
        on_relay=lambda cid, relay_id: _say_waiting(server_url, cid, relay_id),
    )  # fmt: skip
    feeding = asyncio.create_task(live.feed_explorer()) if explorer else None
    try:
        rounds = await live.first_round(SCENARIOS)
        await asyncio.gather(*(r.answered for r in rounds))
        events = sum(
            [(await live.server.conversation(r.conversation_id) or {}).get("lastSeq", 0) for r in rounds]
        )
        who = f"on {model}" if model else "on the scripted model server"
        _say(
            f"Played {len(rounds)} conversations live with the agent harness {who} ({events} events). The agents "
            f"keep serving them: a message sent in the viewer starts the next turn. Ctrl-C to stop."
        )
        if rolling:
            _say(
                f"  A new conversation starts every {live.interval / speed:.0f} s (the newest {live.keep} are kept)."
            )
            await live.rolling(SCENARIOS)
        await asyncio.Event().wait()
    finally:
        if feeding is not None:
            feeding.cancel()
            await asyncio.gather(feeding, return_exceptions=True)
        await live.close()


def _play_recorded(server_url: str, *, speed: float | None, api_key: str | None, owned: bool) -> None:
    """Post the recorded conversations (`convograph.demo.player`), stopping at pending relays when
    the server is someone else's and ``speed`` is None (``--url ... --fast``)."""
    from convograph.demo import DEMO_CONVERSATIONS, play_all
    from convograph.demo.intelligence import hook_envelopes

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    scripts = [factory() for factory in DEMO_CONVERSATIONS]
    for script in scripts:
        _say(f"  · {script.conversation_id}: {script.title} (recorded)")
    envelopes: list[dict[str, Any]] = []
    if _explorer_on(server_url, headers):
        envelopes = [e for s in scripts for e in hook_envelopes(s.events(), prefix=s.conversation_id)]
    wait_for_relays = not (speed is None and not owned)
    playing = play_all(
        server_url, scripts, speed=speed, headers=headers, envelopes=envelopes,
        wait_for_relays=wait_for_relays, on_relay=lambda cid, relay_id: _say_waiting(server_url, cid, relay_id),
    )  # fmt: skip
    results = asyncio.run(playing)  # a refusal is a DemoError (a RuntimeError): the command reports it
    for result in results:
        if result.pending_relay is not None:
            _say(
                f"  {result.conversation_id} stops at permission request {result.pending_relay}: "
                f"decide it at {server_url}/c/{result.conversation_id}"
            )
    still = f" Still serving {server_url}/ — Ctrl-C to stop." if owned else ""
    _say(f"Played {len(results)} conversations ({sum(r.posted for r in results)} new events).{still}")
