"""The interpreter process of `convograph.harness.sandbox` (run as a script: stdlib only, imports
nothing from convograph, so the model's code sees a plain Python).

Protocol: JSON lines. Commands arrive on stdin (moved to a private descriptor; the code's stdin is
``/dev/null``); messages go out on descriptor ``argv[1]``:

- in: ``{"op": "init", "memory": bytes|null, "network": bool, "context": any}``, then
  ``{"op": "exec", "code": str}`` and ``{"op": "llm_result", "id": n, "text": str|null, "error": str|null}``;
- out: ``{"op": "ready"}``; ``{"op": "out", "stream": "stdout"|"stderr", "data": str}`` (print output,
  in order with the rest); ``{"op": "llm_query", "id": n, "prompt": str}``; ``{"op": "done",
  "error": str|null, "final": str|null}`` after each exec.

The scope persists across execs. ``FINAL(value)`` / ``FINAL_VAR(name)`` stop the code where they
are and report the answer as text. A last expression statement is echoed as in a REPL.
"""

from __future__ import annotations

import ast
import io
import json
import os
import socket
import sys
import threading
import traceback
from typing import Any, Final

SYNC_MARK: Final = b"\x00\x1b[convograph-sync]\x00"
"""Written to descriptor 1 after each execution, behind everything the code wrote there."""


class _Final(BaseException):
    def __init__(self, answer: str) -> None:
        self.answer = answer


class _Channel:
    """The message descriptor (thread-safe writes) and the command reader."""

    def __init__(self, out_fd: int, in_fd: int) -> None:
        self._out = os.fdopen(out_fd, "w", encoding="utf-8", buffering=1)
        self._in = os.fdopen(in_fd, encoding="utf-8")
        self._lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False, default=str)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def receive(self) -> dict[str, Any]:
        line = self._in.readline()
        if not line:
            raise SystemExit(0)  # the parent went away
        message: dict[str, Any] = json.loads(line)
        return message


class _Writer(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr``: sends what is written as ``out`` messages, a line at a time
    (or 4 KiB, or at the end of an exec)."""

    def __init__(self, channel: _Channel, stream: str) -> None:
        self._channel = channel
        self._stream = stream
        self._buffer: list[str] = []
        self._size = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._buffer.append(text)
        self._size += len(text)
        if "\n" in text or self._size >= 4096:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if self._buffer:
            data = "".join(self._buffer)
            self._buffer, self._size = [], 0
            self._channel.send({"op": "out", "stream": self._stream, "data": data})


class _Queries:
    """``llm_query`` / ``llm_query_batched``: ask the parent, block until it answers."""

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel
        self._next = 0
        self._lock = threading.Lock()

    def ask(self, prompts: list[str]) -> list[str]:
        with self._lock:  # one batch at a time: answers are read on this thread
            ids = []
            for prompt in prompts:
                if not isinstance(prompt, str):
                    raise TypeError(f"llm_query prompt must be a str, got {type(prompt).__name__}")
                self._next += 1
                ids.append(self._next)
                self._channel.send({"op": "llm_query", "id": self._next, "prompt": prompt})
            answers: dict[int, dict[str, Any]] = {}
            while len(answers) < len(ids):
                message = self._channel.receive()
                if message.get("op") == "llm_result":
                    answers[int(message["id"])] = message
        out = []
        for query_id in ids:
            answer = answers[query_id]
            if answer.get("error"):
                raise RuntimeError(f"llm_query failed: {answer['error']}")
            out.append(str(answer.get("text") or ""))
        return out


def _block_network() -> None:
    """Refuse internet sockets at the Python level (not a security boundary: see docs/harness.md)."""
    real = socket.socket

    class _NoNetworkSocket(real):  # type: ignore[misc, valid-type]
        def __init__(self, family: int = -1, *args: Any, **kwargs: Any) -> None:
            if family in (-1, socket.AF_INET, socket.AF_INET6):
                raise PermissionError("network access is disabled in this sandbox")
            super().__init__(family, *args, **kwargs)

    def _refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError("network access is disabled in this sandbox")

    socket.socket = _NoNetworkSocket  # type: ignore[misc]
    socket.create_connection = _refuse
    socket.getaddrinfo = _refuse


def _run(code: str, scope: dict[str, Any]) -> None:
    """Execute ``code`` in ``scope``; echo the value of a last expression statement."""
    tree = ast.parse(code, "<repl>", "exec")
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr):
        tree.body.pop()
        exec(compile(tree, "<repl>", "exec"), scope)
        value = eval(compile(ast.Expression(last.value), "<repl>", "eval"), scope)
        if value is not None:
            print(repr(value))
    else:
        exec(compile(tree, "<repl>", "exec"), scope)


def _error_text(exc: BaseException) -> str:
    """The traceback without this file's frames."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<repl>"]
    lines = traceback.format_list(frames)
    lines += traceback.format_exception_only(type(exc), exc)
    return ("Traceback (most recent call last):\n" if frames else "") + "".join(lines).rstrip()


def main() -> None:
    out_fd = int(sys.argv[1])
    in_fd = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    channel = _Channel(out_fd, in_fd)
    init = channel.receive()
    if init.get("memory"):
        import resource

        limit = int(init["memory"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if not init.get("network"):
        _block_network()
    stdout, stderr = _Writer(channel, "stdout"), _Writer(channel, "stderr")
    sys.stdout, sys.stderr = stdout, stderr
    queries = _Queries(channel)

    def final(value: Any) -> None:
        raise _Final(value if isinstance(value, str) else str(value))

    def final_var(name: str) -> None:
        if name not in scope:
            raise NameError(f"FINAL_VAR: no variable named {name!r}")
        final(scope[name])

    scope: dict[str, Any] = {
        "__name__": "__repl__",
        "context": init.get("context"),
        "llm_query": lambda prompt: queries.ask([prompt])[0],
        "llm_query_batched": lambda prompts: queries.ask(list(prompts)),
        "FINAL": final,
        "FINAL_VAR": final_var,
    }
    channel.send({"op": "ready"})
    while True:
        command = channel.receive()
        if command.get("op") != "exec":
            continue
        error: str | None = None
        answer: str | None = None
        try:
            _run(command["code"], scope)
        except _Final as done:
            answer = done.answer
        except MemoryError:
            error = "MemoryError: the code went over the sandbox's memory limit"
        except BaseException as exc:  # the code's own errors, SystemExit and KeyboardInterrupt too
            error = _error_text(exc)
        stdout.flush()
        stderr.flush()
        os.write(1, SYNC_MARK)  # after all raw output of the code: the parent reads up to here
        channel.send({"op": "done", "error": error, "final": answer})


if __name__ == "__main__":
    main()
