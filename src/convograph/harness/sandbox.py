"""A Python interpreter in a child process, for the REPL harness: a persistent scope, live output,
and limits on time, memory, output and network.

What it does (docs/harness.md says the same, and what it does *not* guarantee):

- **Process**: ``python -I`` (no user site, no ``PYTHON*`` variables, the script's directory not
  on ``sys.path``) in its own session, in a fresh temporary working directory, with a minimal
  environment (``PATH``, ``HOME``, ``LANG``: no API keys of the parent).
- **Time**: each execution has a wall-clock limit; past it the whole process group is killed.
- **Memory**: ``RLIMIT_AS`` (address space) set in the child before any model code runs (soft
  and hard, so the code cannot raise it back); going over raises ``MemoryError`` in the code, or
  kills the process.
- **Output**: the model gets at most ``max_output`` characters (``truncated`` says so), the
  viewer the same; a process writing more than ``hard_output_limit`` is killed.
- **Network**: unless allowed, the child runs in a new network namespace (``unshare --net``, no
  interface but loopback) when the kernel allows it, which stops every process it starts too; in
  all cases Python's ``socket`` refuses internet sockets. Without the namespace, the Python-level
  block is *not* a security boundary: native code or a subprocess (``curl``) can still connect.
- **Not isolated**: the file system (the code runs as this user and can read and write what it
  can), other processes and the CPU. Run untrusted code in a container or VM on top of this.

A crash or a timeout kills the interpreter; the next execution starts a fresh one (the REPL
harness tells the model its variables are gone).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from convograph.harness.sandbox_child import SYNC_MARK

__all__ = ["ExecResult", "Sandbox", "SandboxLimits", "network_namespace_available"]

CHILD_SCRIPT: Final = str(Path(__file__).with_name("sandbox_child.py"))
MESSAGE_LIMIT: Final = 64 * 1024 * 1024
"""Longest message line from the child (a big ``llm_query`` prompt or final answer)."""

Stream = Literal["stdout", "stderr"]
OnOutput = Callable[[Stream, str], Awaitable[None]]
OnQuery = Callable[[str], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Limits of one sandbox (module docstring)."""

    timeout: float = 30.0
    """Seconds one execution may take (wall clock)."""
    memory_bytes: int | None = 2 * 1024**3
    """``RLIMIT_AS`` of the interpreter; None leaves it unlimited."""
    max_output: int = 20_000
    """Characters of output kept per execution (for the model and the viewer)."""
    hard_output_limit: int = 10_000_000
    """Characters after which the process is killed."""
    allow_network: bool = False


@dataclass(frozen=True, slots=True)
class ExecResult:
    """One execution: ``output`` (stdout and stderr in order, at most ``max_output`` characters),
    ``error`` (a traceback, a timeout, a crash), ``final`` (the ``FINAL`` answer), ``restarted``
    (the interpreter died: the next execution gets a fresh one)."""

    output: str
    error: str | None
    final: str | None
    duration_ms: float
    truncated: bool
    restarted: bool


_NETNS: dict[str, bool] = {}


def network_namespace_available() -> bool:
    """True when ``unshare --net --map-root-user`` works here (probed once per process)."""
    if "ok" not in _NETNS:
        binary = shutil.which("unshare")
        ok = False
        if binary is not None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                probe = subprocess.run(
                    [binary, "--net", "--map-root-user", "true"], capture_output=True, timeout=10
                )
                ok = probe.returncode == 0
        _NETNS["ok"] = ok
    return _NETNS["ok"]


class Sandbox:
    """One interpreter with a persistent scope (module docstring). Use ``async with``."""

    def __init__(self, limits: SandboxLimits | None = None, *, context: Any = None) -> None:
        self.limits = limits or SandboxLimits()
        self._context = context
        self._process: asyncio.subprocess.Process | None = None
        self._queue: asyncio.Queue[dict[str, Any] | None] | None = None
        self._pumps: list[asyncio.Task[None]] = []
        self._transport: asyncio.BaseTransport | None = None
        self._workdir: str | None = None
        self.isolation: str = "none"
        """How the network is blocked: ``"network namespace"``, ``"python socket block"``, or
        ``"none"`` (allowed)."""

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> None:
        """Start the interpreter (done by `execute` when needed)."""
        if self.running:
            return
        await self._kill()
        limits = self.limits
        self._workdir = tempfile.mkdtemp(prefix="convograph-repl-")
        read_fd, write_fd = os.pipe()
        command = [sys.executable, "-I", "-u", CHILD_SCRIPT, str(write_fd)]
        self.isolation = "none" if limits.allow_network else "python socket block"
        if not limits.allow_network and network_namespace_available():
            command = [shutil.which("unshare") or "unshare", "--net", "--map-root-user", *command]
            self.isolation = "network namespace"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self._workdir, "LANG": "C.UTF-8"}
        try:
            self._process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
                cwd=self._workdir,
                env=env,
            )
        finally:
            os.close(write_fd)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MESSAGE_LIMIT)
        self._transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb")
        )
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._queue = queue
        self._pumps = [
            asyncio.create_task(_pump_messages(reader, queue)),
            asyncio.create_task(_pump_raw(self._process, queue)),
        ]
        await self._send(
            {
                "op": "init",
                "memory": limits.memory_bytes,
                "network": limits.allow_network,
                "context": self._context,
            }
        )
        early: list[str] = []
        while True:
            message = await asyncio.wait_for(self._receive(), 30)
            if message is not None and message.get("op") == "out":
                early.append(str(message.get("data", "")))
                continue
            if message is not None and message.get("op") == "ready":
                return
            await self._kill()
            raise RuntimeError(f"the sandbox interpreter did not start: {''.join(early).strip() or message}")

    async def execute(self, code: str, *, on_output: OnOutput, on_query: OnQuery) -> ExecResult:
        """Run ``code`` in the persistent scope. Output goes to ``on_output`` as it comes (cut at
        ``max_output``); each ``llm_query`` prompt goes to ``on_query`` (concurrently), whose answer
        (or exception, as an error in the code) goes back to the code."""
        await self.start()
        started = time.monotonic()
        run = _Execution(self, on_output, on_query)
        await self._send({"op": "exec", "code": code})
        error: str | None
        try:
            error, final = await asyncio.wait_for(run.follow(), self.limits.timeout)
        except TimeoutError:
            error, final = (
                f"TimeoutError: the execution took longer than {self.limits.timeout:g} s and was killed",
                None,
            )
            await self._kill()
        except _Crashed as crash:
            error, final = str(crash), None
            await self._kill()
        finally:
            await run.stop_queries()
        restarted = not self.running
        return ExecResult(
            output="".join(run.kept),
            error=error,
            final=final,
            duration_ms=round((time.monotonic() - started) * 1000, 3),
            truncated=run.truncated,
            restarted=restarted,
        )

    async def close(self) -> None:
        await self._kill()

    # -- plumbing --------------------------------------------------------------------------------

    async def _send(self, message: dict[str, Any]) -> None:
        process = self._process
        if process is None or process.stdin is None or process.returncode is not None:
            raise _Crashed("the interpreter is not running")
        process.stdin.write(json.dumps(message, ensure_ascii=False, default=str).encode() + b"\n")
        try:
            await process.stdin.drain()
        except ConnectionError:
            raise _Crashed("the interpreter is not running") from None

    async def _receive(self) -> dict[str, Any] | None:
        """The next message (protocol messages and raw process output, in arrival order), or None
        when the interpreter is gone."""
        assert self._queue is not None
        return await self._queue.get()

    async def _exit_status(self) -> str:
        process = self._process
        if process is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 2)
        code = process.returncode if process is not None else None
        if code is not None and code < 0:
            return f"killed by signal {signal.Signals(-code).name}"
        return "exited" if code is None else f"exit status {code}"

    async def _kill(self) -> None:
        process, self._process = self._process, None
        pumps, self._pumps = self._pumps, []
        for pump in pumps:
            pump.cancel()
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()
        if process is not None:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                await process.wait()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


async def _pump_messages(reader: asyncio.StreamReader, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
    """Protocol lines into ``queue``; None at the end (the interpreter is gone)."""
    try:
        while line := await reader.readline():
            queue.put_nowait(json.loads(line))
    except ValueError:  # a line over MESSAGE_LIMIT, or not JSON: the protocol is broken
        pass
    queue.put_nowait(None)


async def _pump_raw(process: asyncio.subprocess.Process, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
    """What the process writes to its own descriptors 1 and 2 (subprocesses, C extensions) as
    ``out`` messages, so it reaches the output and never fills the pipe. The child writes
    `SYNC_MARK` there after each execution; it becomes a ``synced`` message, so an execution is
    finished only once everything written before it has been read (the two pipes race otherwise)."""
    assert process.stdout is not None
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = b""
    while data := await process.stdout.read(65536):
        pending += data
        while (at := pending.find(SYNC_MARK)) >= 0:
            _put_raw(queue, decoder.decode(pending[:at]))
            queue.put_nowait({"op": "synced"})
            pending = pending[at + len(SYNC_MARK) :]
        keep = _partial_mark(pending)
        _put_raw(queue, decoder.decode(pending[: len(pending) - keep]))
        pending = pending[len(pending) - keep :]
    _put_raw(queue, decoder.decode(pending, final=True))


def _put_raw(queue: asyncio.Queue[dict[str, Any] | None], text: str) -> None:
    if text:
        queue.put_nowait({"op": "out", "stream": "stdout", "data": text})


def _partial_mark(data: bytes) -> int:
    """Length of the longest tail of ``data`` that is a proper prefix of `SYNC_MARK`."""
    for size in range(min(len(data), len(SYNC_MARK) - 1), 0, -1):
        if SYNC_MARK.startswith(data[-size:]):
            return size
    return 0


class _Crashed(Exception):
    """The interpreter died or broke the protocol during an execution."""


class _Execution:
    """Follows one execution's messages until ``done``."""

    def __init__(self, sandbox: Sandbox, on_output: OnOutput, on_query: OnQuery) -> None:
        self.sandbox = sandbox
        self.on_output = on_output
        self.on_query = on_query
        self.kept: list[str] = []
        self.size = 0
        self.seen = 0
        self.truncated = False
        self.queries: set[asyncio.Task[None]] = set()

    async def follow(self) -> tuple[str | None, str | None]:
        """Until the child's ``done`` and its raw-output ``synced`` mark have both arrived."""
        done: dict[str, Any] | None = None
        synced = False
        while done is None or not synced:
            message = await self.sandbox._receive()
            if message is None:
                raise _Crashed(f"the interpreter process died ({await self.sandbox._exit_status()})")
            op = message.get("op")
            if op == "synced":
                synced = True
            elif op == "out":
                await self._output(message.get("stream", "stdout"), str(message.get("data", "")))
            elif op == "llm_query":
                task = asyncio.create_task(self._answer(int(message["id"]), str(message.get("prompt", ""))))
                self.queries.add(task)
                task.add_done_callback(self.queries.discard)
            elif op == "done":
                done = message
        return done.get("error"), done.get("final")

    async def _output(self, stream: Stream, data: str) -> None:
        limits = self.sandbox.limits
        self.seen += len(data)
        if self.seen > limits.hard_output_limit:
            raise _Crashed(f"the code wrote more than {limits.hard_output_limit} characters and was killed")
        room = limits.max_output - self.size
        if room <= 0:
            self.truncated = True
            return
        if len(data) > room:
            data, self.truncated = data[:room], True
        self.kept.append(data)
        self.size += len(data)
        await self.on_output(stream, data)

    async def _answer(self, query_id: int, prompt: str) -> None:
        try:
            text = await self.on_query(prompt)
            reply: dict[str, Any] = {"op": "llm_result", "id": query_id, "text": text, "error": None}
        except Exception as exc:
            reply = {
                "op": "llm_result",
                "id": query_id,
                "text": None,
                "error": f"{type(exc).__name__}: {exc}",
            }
        with contextlib.suppress(_Crashed):
            await self.sandbox._send(reply)

    async def stop_queries(self) -> None:
        for task in self.queries:
            task.cancel()
        if self.queries:
            await asyncio.gather(*self.queries, return_exceptions=True)
