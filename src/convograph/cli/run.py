"""``convograph run "TASK" --model PROVIDER:MODEL``: run an agent (or, with ``--repl``, the REPL
harness) and show its thread live in the terminal.

Events go to a ``convograph serve`` (``--server URL``: the viewer URL is printed, and permission
relays can be decided there) or to the local event log (``$CONVOGRAPH_DATABASE_URL``, else
``.convograph/events.db``: ``convograph serve`` shows it later). ``--conversation ID`` continues a
conversation: the task becomes the next user message on its active path. On a terminal, a
permission relay can also be answered here (``y`` / ``n``), whichever comes first.

Exit status: 0 when the run ends with its answer (``reason: "final"``), 1 when it ends otherwise
(an error, a budget), 130 when interrupted (Ctrl-C ends the run with ``harness_end`` ``cancelled``),
2 for bad arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from convograph.cli.app import app, console, err_console
from convograph.client import ApiError
from convograph.events import Event, Relay
from convograph.harness import (
    Agent,
    Budget,
    ConversationPort,
    Decision,
    LogPort,
    Provider,
    ReplHarness,
    RunHandle,
    Tool,
    new_id,
)
from convograph.harness.base import MessageFormat
from convograph.harness.remote import RemotePort
from convograph.harness.serving import honour_cancels
from convograph.testing.providers import ScriptedCall, ScriptedProvider, ScriptedTurn

__all__ = ["TerminalPort", "make_provider"]


class UsageError(Exception):
    """A bad argument: printed, exit status 2."""


# --- models -----------------------------------------------------------------------------------------


def make_provider(spec: str, *, base_url: str | None) -> tuple[Provider, str]:
    """The provider and model name for ``--model``: ``API:MODEL`` for the SDK providers
    (`convograph.harness.providers.make_provider`: ``openai:``, ``openai-responses:``,
    ``anthropic:``; keys from the SDKs' environment variables), or the offline test models
    ``scripted:echo`` and ``scripted:FILE.json``."""
    kind, _, model = spec.partition(":")
    if kind == "scripted" and model:
        return _scripted(model), model
    from convograph.harness.providers import make_provider as sdk_provider  # the SDKs load only when used

    try:
        return sdk_provider(spec, base_url=base_url)
    except ValueError as exc:
        raise UsageError(f"{exc} (or scripted:echo / scripted:FILE.json to run offline)") from None


def _scripted(name: str) -> Provider:
    """``echo``: answers each request with the last user message; a ``.json`` file: a list of turns
    ``{"text", "reasoning", "tool_calls": [{"name", "arguments"}], "usage": [in, out], "error",
    "delay", "hang"}`` (`ScriptedTurn`'s fields)."""
    if name == "echo":

        def echo(request: Any) -> ScriptedTurn:
            last = request.messages[-1].get("content") if request.messages else ""
            text = last if isinstance(last, str) else json.dumps(last)
            return ScriptedTurn(text=f"You said: {text}")

        return ScriptedProvider([echo] * 1000)
    path = Path(name)
    try:
        items = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read the scripted model {name!r}: {exc}") from None
    turns = []
    for item in items:
        calls = [
            ScriptedCall(c["name"], c.get("arguments", {}), c.get("id")) for c in item.get("tool_calls", [])
        ]
        usage = tuple(item["usage"]) if "usage" in item else "auto"
        turns.append(
            ScriptedTurn(
                text=item.get("text", ""),
                reasoning=item.get("reasoning", ""),
                tool_calls=calls,
                usage=usage,  # type: ignore[arg-type]
                error=item.get("error"),
                delay=float(item.get("delay", 0.0)),
                hang=bool(item.get("hang", False)),
            )
        )
    return ScriptedProvider(turns)


def load_tools(specs: Sequence[str]) -> list[Tool]:
    """Tools named ``module:attribute`` (a `Tool`, or a list of them)."""
    tools: list[Tool] = []
    for spec in specs:
        module_name, _, attribute = spec.partition(":")
        if not attribute:
            raise UsageError(f"--tools must look like module:attribute, got {spec!r}")
        try:
            value = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"cannot load tools {spec!r}: {exc}") from None
        found = value if isinstance(value, list | tuple) else [value]
        for item in found:
            if not isinstance(item, Tool):
                raise UsageError(f"{spec!r} holds {type(item).__name__}, not a convograph Tool (use @tool)")
            tools.append(item)
    return tools


# --- the terminal view ------------------------------------------------------------------------------


class TerminalPort:
    """A port that prints each event as it passes to the real one: text streams inline, tool calls
    and results one line each, subagent runs indented under their call."""

    def __init__(self, port: ConversationPort) -> None:
        self.inner = port
        self._depth: dict[str, int] = {}
        self._call_depth: dict[str, int] = {}
        self._block: str | None = None

    @property
    def conversation_id(self) -> str:
        return self.inner.conversation_id

    async def emit(self, events: Sequence[Event]) -> None:
        await self.inner.emit(events)
        for event in events:
            self._show(event)

    async def flush(self) -> None:
        await self.inner.flush()

    async def history(self, format: MessageFormat) -> list[dict[str, Any]]:
        return await self.inner.history(format)

    async def relay_decision(self, relay_id: str) -> Any:
        return await self.inner.relay_decision(relay_id)

    async def standing_grants(self) -> list[Relay]:
        return await self.inner.standing_grants()

    # serving (`convograph.harness.serving`): the inner port's, with the claim shown when won

    async def claim(self, event: Event) -> bool:
        won = bool(await self.inner.claim(event))  # type: ignore[attr-defined]
        if won:
            self._show(event)
        return won

    async def head(self) -> int:
        return int(await self.inner.head())  # type: ignore[attr-defined]

    def changes(self, after: int) -> AsyncIterator[Event]:
        changes: AsyncIterator[Event] = self.inner.changes(after)  # type: ignore[attr-defined]
        return changes

    async def pending_turn(self) -> Any:
        return await self.inner.pending_turn()  # type: ignore[attr-defined]

    def control(self, agent_id: str, **info: Any) -> AsyncIterator[tuple[str, Any]]:
        control: AsyncIterator[tuple[str, Any]] = self.inner.control(agent_id, **info)  # type: ignore[attr-defined]
        return control

    def _indent(self, event: Any) -> str:
        run_id = getattr(event, "run_id", None)
        if run_id is None:
            return ""
        depth = self._depth.get(run_id)
        if depth is None:
            parent = event.parent_id
            depth = self._call_depth.get(parent, self._depth.get(parent, 0)) if parent else 0
            self._depth[run_id] = depth
        return "  " * depth

    def _line(self, text: str, style: str | None = None) -> None:
        if self._block is not None:
            console.print()
            self._block = None
        console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)

    def _stream(self, block: str, indent: str, text: str, style: str | None) -> None:
        if self._block != block:
            if self._block is not None:
                console.print()
            console.print(indent, end="")
            self._block = block
        console.print(text.replace("\n", "\n" + indent), end="", style=style, markup=False, highlight=False)

    def _show(self, event: Any) -> None:
        indent = self._indent(event)
        kind = event.type
        if kind in ("text", "reasoning"):
            style = "dim italic" if kind == "reasoning" else None
            self._stream(f"{event.run_id}:{event.id}", indent, event.content, style)
        elif kind == "repl_progress":
            self._stream(f"{event.id}:progress", indent + "│ ", event.chunk, "dim")
        elif kind == "user":
            self._line(f"{indent}> {event.content}", "bold")
        elif kind == "harness_start" and indent:
            self._line(f"{indent}┌ {event.agent_id or 'agent'} started", "magenta")
        elif kind == "harness_end" and indent:
            self._line(f"{indent}└ {event.agent_id or 'agent'} ended ({event.reason})", "magenta")
        elif kind == "tool_call":
            self._call_depth[event.id] = len(indent) // 2 + 1
            self._line(f"{indent}⚙ {event.name} {json.dumps(event.input, ensure_ascii=False)[:300]}", "cyan")
        elif kind == "tool_result":
            self._line(*_result_line(indent, event.output))
        elif kind == "tool_progress":
            self._line(f"{indent}  … {json.dumps(event.content, ensure_ascii=False)[:200]}", "dim")
        elif kind == "relay":
            params = json.dumps(event.params, ensure_ascii=False)[:300]
            self._line(f"{indent}? permission needed: {event.tool} {params}", "yellow bold")
        elif kind == "relay_resolved":
            verdict = "approved" if event.approved else f"denied ({event.reason or 'no reason'})"
            self._line(f"{indent}  permission {verdict}", "yellow")
        elif kind == "repl_input":
            self._call_depth[event.id] = len(indent) // 2 + 1
            self._line(f"{indent}[{event.iteration}] ```python\n{event.code}\n```", "cyan")
        elif kind == "repl_output":
            if event.error:
                self._line(f"{indent}✗ {event.error}", "red")
        elif kind == "error":
            self._line(f"{indent}error: {event.message}", "red")


def _result_line(indent: str, output: Any) -> tuple[str, str]:
    if isinstance(output, dict) and "error" in output:
        return f"{indent}  ↳ error: {output['error']}", "red"
    if isinstance(output, dict) and output.get("status") == "denied":
        return f"{indent}  ↳ denied: {output.get('reason')}", "yellow"
    context = output.get("context") if isinstance(output, dict) else output
    text = context if isinstance(context, str) else json.dumps(context, ensure_ascii=False)
    return f"{indent}  ↳ {text[:300]}", "green"


async def _terminal_answer(relay: Relay) -> Decision | None:
    """Ask on the terminal (without blocking the loop: a reader on stdin, removed if the relay is
    decided elsewhere first)."""
    if not sys.stdin.isatty():
        return None
    console.print(f"  allow {relay.tool}? [y/N] ", end="", markup=False)
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()

    def readable() -> None:
        if not answer.done():
            answer.set_result(sys.stdin.readline())

    loop.add_reader(sys.stdin.fileno(), readable)
    try:
        line = await answer
    finally:
        loop.remove_reader(sys.stdin.fileno())
    approved = line.strip().lower() in ("y", "yes")
    return Decision(approved, None if approved else "denied in the terminal")


# --- the command ------------------------------------------------------------------------------------


@app.command()
def run(
    task: Annotated[
        str | None, typer.Argument(help="What the agent should do (the user message); optional with --serve.")
    ] = None,
    model: Annotated[str, typer.Option("--model", "-m", help="openai:MODEL or anthropic:MODEL.")] = "",
    base_url: Annotated[
        str | None, typer.Option(help="The provider's API base URL (an OpenAI-compatible server, a proxy).")
    ] = None,
    server: Annotated[
        str | None, typer.Option(help="A convograph server to stream into (else the local log).")
    ] = None,
    conversation: Annotated[
        str | None, typer.Option(help="Continue this conversation (else a new one).")
    ] = None,
    repl: Annotated[
        bool, typer.Option("--repl", help="Run the REPL harness instead of the tool agent.")
    ] = False,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve", help="Then stay attached: answer each new message, edit and regenerate (Ctrl-C stops)."
        ),
    ] = False,
    name: Annotated[str | None, typer.Option(help="The agent's name (its runs' agentId).")] = None,
    tools: Annotated[
        list[str] | None, typer.Option("--tools", help="Tools to offer: module:attribute.")
    ] = None,
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    max_turns: Annotated[int, typer.Option(help="Model calls (REPL iterations) at most.")] = 10,
    max_seconds: Annotated[float | None, typer.Option(help="Wall-time budget of the run.")] = None,
    api_key: Annotated[
        str | None, typer.Option(envvar="CONVOGRAPH_API_KEY", help="Key for --server.")
    ] = None,
) -> None:
    """Run an agent and show its thread live; exit when the run ends (0 on success). With --serve,
    keep serving the conversation: messages sent in the viewer start the agent's next turn."""
    try:
        if not model:
            raise UsageError("--model is required (openai:MODEL, anthropic:MODEL, scripted:echo, ...)")
        if task is None and not serve:
            raise UsageError("give the TASK to run, or --serve to answer the conversation's messages")
        provider, model_name = make_provider(model, base_url=base_url)
        offered = load_tools(tools or [])
        if repl and offered:
            raise UsageError("--tools does not apply to --repl (the REPL is the tool)")
        if server is not None and not server.startswith(("http://", "https://")):
            raise UsageError(f"--server must be an http:// or https:// URL, got {server!r}")
        if max_turns < 1:
            raise UsageError(f"--max-turns must be at least 1, got {max_turns}")
    except UsageError as exc:
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    cid = conversation or f"run-{new_id()}"
    harness: Agent | ReplHarness
    if repl:
        harness = ReplHarness(
            provider, model_name, system=system, max_iterations=max_turns, max_seconds=max_seconds,
            name=name or "repl",
        )  # fmt: skip
    else:
        budget = Budget(max_turns=max_turns, max_seconds=max_seconds)
        harness = Agent(
            provider, model=model_name, tools=offered, system=system, budget=budget, ask=_terminal_answer,
            name=name or "agent",
        )  # fmt: skip
    try:
        code = asyncio.run(
            _run(harness, task, cid, server=server, api_key=api_key, provider=provider, serve=serve)
        )
    except Exception as exc:  # the port failed (server unreachable for too long, events refused)
        err_console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    raise typer.Exit(code)


async def _open_port(cid: str, server: str | None, api_key: str | None) -> tuple[Any, Any]:
    """The port for ``cid`` (a `RemotePort` with ``server``, else a `LogPort` over the local log)
    and the log to close afterwards (None for a server)."""
    if server is not None:
        base = server.rstrip("/")
        port = RemotePort.connect(base, cid, api_key=api_key)
        try:
            await port.client.conversations()  # reachable, and the key (if any) is accepted
        except (httpx.HTTPError, ApiError) as exc:
            await port.aclose()
            raise RuntimeError(f"cannot reach the convograph server at {base}: {exc}") from None
        console.print(
            f"conversation {cid}: watch it at {base}/c/{cid}", markup=False, highlight=False, soft_wrap=True
        )
        return port, None
    from convograph.store import default_url, open_event_log

    url = default_url()
    log = await open_event_log(url)
    console.print(
        f"conversation {cid} in {url} (convograph serve shows it at /c/{cid})", markup=False, soft_wrap=True
    )
    return LogPort(log, cid), log


async def _run(
    harness: Agent | ReplHarness,
    task: str | None,
    cid: str,
    *,
    server: str | None,
    api_key: str | None,
    provider: Provider,
    serve: bool,
) -> int:
    port, log = await _open_port(cid, server, api_key)
    terminal = TerminalPort(port)
    try:
        code = 0
        if task is not None:
            handle = harness.start(terminal, task)
            attached = None
            if server is not None:  # listed on the server while it runs, and stoppable from the API
                attached = asyncio.ensure_future(
                    honour_cancels(
                        terminal,
                        harness,
                        lambda: handle,
                        agent_id=f"{harness.name}-{new_id()}",
                        serving=False,
                    )
                )
            try:
                code = await _until_interrupted(handle)
            finally:
                if attached is not None:
                    attached.cancel()
                    await asyncio.gather(attached, return_exceptions=True)
        if serve and code != 130:
            code = await _serve(harness, terminal)
    finally:
        await port.aclose()
        if log is not None:
            await log.close()
        close = getattr(provider, "aclose", None)
        if close is not None:
            await close()  # the SDK client's connections
    return code


async def _until_interrupted(handle: RunHandle[Any]) -> int:
    """Wait for one run (Ctrl-C cancels it), print how it ended; its exit status."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGINT, handle.cancel)
    try:
        result = await handle.wait()
    finally:
        with contextlib.suppress(NotImplementedError):
            loop.remove_signal_handler(signal.SIGINT)
    return _report(result)


def _report(result: Any) -> int:
    console.print()
    usage = result.usage
    console.print(
        f"run {result.run_id}: {result.reason} after {result.iterations} model calls, "
        f"{usage.input_tokens} in / {usage.output_tokens} out tokens",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if result.reason == "final":
        return 0
    if result.reason == "cancelled":
        err_console.print("interrupted: the run was cancelled")
        return 130
    detail = f": {result.error}" if result.error else ""
    err_console.print(f"[red]the run ended without an answer[/] ({result.reason}{detail})", highlight=False)
    return 1


async def _serve(harness: Agent | ReplHarness, port: TerminalPort) -> int:
    """Serve the conversation until Ctrl-C (`convograph.harness.serving`); 0 when stopped."""
    console.print(
        f"{harness.name} is serving conversation {port.conversation_id}: each new message, edit or "
        "regenerate starts its next turn (Ctrl-C stops)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )

    def on_run(turn: Any, handle: RunHandle[Any]) -> None:
        handle.add_done_callback(lambda: _report_served(handle))

    serving = asyncio.ensure_future(harness.serve(port, on_run=on_run))
    loop = asyncio.get_running_loop()
    stops = (signal.SIGINT, signal.SIGTERM)  # a supervisor's SIGTERM detaches as cleanly as Ctrl-C
    for stop in stops:
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(stop, serving.cancel)
    try:
        await serving
    except asyncio.CancelledError:
        console.print("stopped serving", markup=False)
    finally:
        for stop in stops:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(stop)
    return 0


def _report_served(handle: RunHandle[Any]) -> None:
    with contextlib.suppress(BaseException):  # a run that raised (it never should) reports nothing
        result = handle.result()
        if result.reason != "claimed":
            _report(result)
