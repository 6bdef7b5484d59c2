"""``convograph model-server``: the scripted local model server from the command line.

It speaks the OpenAI Chat Completions, OpenAI Responses and Anthropic Messages wire formats on
127.0.0.1 and answers each request with the next reply of a JSON script
(`convograph.testing.model_script`), so an agent, the demo or any OpenAI / Anthropic client can run
offline: point ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` at the printed addresses. Without a
script every request gets one fixed answer. Each request is logged as it is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Annotated

import typer

from convograph.cli.app import app, console, err_console

__all__ = ["model_server"]

DEFAULT_ANSWER = "This is the convograph scripted model server: give it a script to say more."


@app.command("model-server")
def model_server(
    script: Annotated[
        Path | None,
        typer.Argument(help='JSON script: a list of replies, or {"replies": [...], "default": {...}}.'),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0 picks a free one).")] = 0,
    api_key: Annotated[
        str | None, typer.Option(help="Answer 401 to requests that do not carry this key.")
    ] = None,
    check_requests: Annotated[
        bool,
        typer.Option(
            "--check-requests/--no-check-requests", help="Answer 400 to requests the real API would refuse."
        ),
    ] = True,
    quiet: Annotated[bool, typer.Option(help="Do not log each request.")] = False,
    speed: Annotated[
        float, typer.Option(min=0.001, help="Divide every scripted delay by this (2.0 = twice as fast).")
    ] = 1.0,
) -> None:
    """Serve scripted model replies (OpenAI Chat / Responses, Anthropic Messages) until interrupted."""
    from convograph.testing.model_script import Reply, Say, Script, ScriptError, load_script
    from convograph.testing.model_server import ModelServer, RecordedRequest

    try:
        loaded = load_script(script) if script is not None else Script()
    except ScriptError as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    if loaded.default is None and script is None:
        loaded.default = Reply(content=[Say(text=DEFAULT_ANSWER)])

    def log(record: RecordedRequest) -> None:
        if quiet:
            return
        reply = "" if record.reply_index is None else f" (reply {record.reply_index})"
        problems = f": {'; '.join(record.problems)}" if record.problems else ""
        console.print(
            f"#{record.index} {record.method} {record.path} -> {record.status}{reply}{problems}",
            highlight=False,
        )

    server = ModelServer(
        loaded,
        host=host,
        port=port,
        api_key=api_key,
        check_requests=check_requests,
        on_request=log,
        speed=speed,
    )

    # Runs until Ctrl-C, also when started with SIGINT ignored (a shell's background job, or a
    # parent that ignores it), which Python would keep ignored: as the demo does.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    async def run() -> None:
        try:
            await server.start()
        except OSError as exc:
            err_console.print(f"[red]error:[/] cannot listen on {host}:{port}: {exc.strerror or exc}")
            raise typer.Exit(1) from None
        console.print(
            f"model server listening on {server.url} ({len(loaded.replies)} scripted replies)",
            highlight=False,
        )
        console.print(f"OPENAI_BASE_URL={server.openai_base_url}", highlight=False)
        console.print(f"ANTHROPIC_BASE_URL={server.anthropic_base_url}", highlight=False)
        try:
            await asyncio.Event().wait()
        finally:
            await server.aclose()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    unused = len(server.unused)
    console.print(
        f"stopped after {len(server.requests)} requests; {unused} scripted replies unused", highlight=False
    )
