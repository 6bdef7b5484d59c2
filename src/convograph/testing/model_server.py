"""A scripted local model server: real HTTP on 127.0.0.1 speaking the OpenAI Chat Completions,
OpenAI Responses and Anthropic Messages wire formats, driven by a `Script`.

Every request is recorded (`ModelServer.requests`: method, path, API, headers, parsed body, arrival
time, status, the reply it got, and any problems found in it) and answered with the next scripted
`Reply` that matches it (`convograph.testing.model_script`), rendered by
`convograph.testing.model_wire`: SSE exactly as each API frames it over HTTP/1.1 chunked transfer
encoding, or a JSON body for a non-streaming call, or the API's error body with ``Retry-After``,
or a stream cut mid-answer (the connection is aborted without the terminating chunk).

Requests are checked like the real APIs check them (`convograph.testing.request_check`: the SDK's
request types and the structural rules); a failing request gets the API's 400 and its problems
are recorded. With ``api_key`` set, a request without that key gets the API's 401.

Run it in the current event loop (``async with ModelServer(...)``) or in a background thread
(``with ModelServer(...)``, for synchronous clients); ``convograph model-server SCRIPT.json`` runs it
from the command line. Point the SDKs at it with ``base_url=server.openai_base_url`` (``.../v1``)
or ``base_url=server.anthropic_base_url``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from types import TracebackType
from typing import Any, Final, Self

from convograph.testing.model_script import Api, Pace, Reply, Script
from convograph.testing.model_wire import error_body, error_headers, render_response, render_stream
from convograph.testing.request_check import check_request

__all__ = ["ModelServer", "RecordedRequest"]

_MAX_BODY: Final = 64 * 1024 * 1024
CLOSE_WAIT_SECONDS: Final = 5.0
"""How long `ModelServer.aclose` waits for asyncio to see its dropped connections closed."""


@dataclass(slots=True)
class RecordedRequest:
    """One request the server received, and what it answered."""

    index: int
    method: str
    path: str
    api: Api | None
    headers: dict[str, str]
    """Header names in lower case."""
    body: Any
    """The parsed JSON body (None when there was none or it was not JSON)."""
    received_at: float
    """`time.monotonic()` when the request was complete."""
    status: int = 0
    reply_index: int | None = None
    """Position of the scripted reply used in `ModelServer.replies` (None: none used)."""
    problems: list[str] = field(default_factory=list)
    """What `check_request` found wrong (the request then got a 400)."""


@dataclass(slots=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


def _api_of(path: str) -> Api | None:
    route = path.split("?", 1)[0].rstrip("/")
    if route.endswith("/chat/completions"):
        return "chat"
    if route.endswith("/responses"):
        return "responses"
    if route.endswith("/messages"):
        return "messages"
    return None


def _conversation_text(body: dict[str, Any]) -> str:
    """The parts of a request a `Match` looks at, as JSON text."""
    parts = {key: body[key] for key in ("system", "instructions", "messages", "input") if key in body}
    return json.dumps(parts, ensure_ascii=False)


class ModelServer:
    """The scripted model server (module docstring). Thread-safe: tests may add replies and read
    records from another thread while it serves."""

    def __init__(
        self,
        script: Script | Sequence[Reply] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        check_requests: bool = True,
        on_request: Callable[[RecordedRequest], None] | None = None,
        speed: float = 1.0,
    ) -> None:
        if script is None:
            script = Script()
        elif not isinstance(script, Script):
            script = Script(replies=list(script))
        if not speed > 0:
            raise ValueError(f"speed must be positive (math.inf: no delays at all), got {speed}")
        self.replies: list[Reply] = list(script.replies)
        self.default: Reply | None = script.default
        self.pace: Pace = script.pace or Pace()
        self.speed = speed
        """Every delay (time to first token, between events, stalls) is divided by this."""
        self.api_key = api_key
        self.check_requests = check_requests
        self.on_request = on_request
        self.requests: list[RecordedRequest] = []
        self._host = host
        self._port = port
        self._used: set[int] = set()
        self._lock = threading.Lock()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- script ------------------------------------------------------------------------------------------

    def add(self, *replies: Reply) -> None:
        """Append replies to the script (they answer requests that arrive from now on)."""
        with self._lock:
            self.replies.extend(replies)

    @property
    def unused(self) -> list[Reply]:
        """Scripted replies no request has taken yet."""
        with self._lock:
            return [reply for i, reply in enumerate(self.replies) if i not in self._used]

    def requests_to(self, api: Api) -> list[RecordedRequest]:
        """The recorded requests to one API, in arrival order."""
        return [request for request in self.requests if request.api == api]

    def _take(self, api: Api, body: dict[str, Any]) -> tuple[int | None, Reply | None]:
        text = _conversation_text(body)
        model = body.get("model")
        with self._lock:
            for i, reply in enumerate(self.replies):
                if i in self._used:
                    continue
                if reply.match is None or reply.match.accepts(api, model, text):
                    self._used.add(i)
                    return i, reply
        return None, self.default

    # -- addresses -----------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the model server is not running (use `async with` or `with`)")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the Anthropic SDK's ``base_url``)."""
        return f"http://{self._host}:{self.port}"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def openai_base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (the OpenAI SDK's ``base_url``)."""
        return f"{self.url}/v1"

    # -- lifecycle in the current event loop ---------------------------------------------------------------

    async def start(self) -> None:
        """Listen (in the running event loop) until `aclose`."""
        if self._server is not None:
            raise RuntimeError("the model server is already running")
        self._server = await asyncio.start_server(self._connection, self._host, self._port)

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for _ in range(3):  # (a connection accepted as the server closed starts its handler late)
            for writer in list(self._writers):
                writer.transport.abort()
            handlers = [task for task in self._handlers if not task.done()]
            for task in handlers:
                task.cancel()  # a handler may be pacing a reply (asleep); it has nobody to talk to now
            await asyncio.gather(*handlers, return_exceptions=True)
            await asyncio.sleep(0)
        with contextlib.suppress(TimeoutError):  # every connection was dropped: never wait on one
            await asyncio.wait_for(server.wait_closed(), CLOSE_WAIT_SECONDS)

    async def serve_forever(self) -> None:
        """Start and serve until cancelled."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.aclose()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- lifecycle in a background thread -----------------------------------------------------------------

    def start_in_thread(self) -> None:
        """Serve from a daemon thread with its own event loop (for synchronous clients)."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.aclose())
            loop.close()

        self._thread = threading.Thread(target=run, name="convograph-model-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]

    def stop(self) -> None:
        """Stop a server started by `start_in_thread`."""
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._thread = None

    def __enter__(self) -> Self:
        self.start_in_thread()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- HTTP/1.1 ------------------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                if not await self._answer(request, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the client went away or sent something unreadable: drop the connection
        except asyncio.CancelledError:
            # `aclose` stops handlers that are pacing a reply. Ending normally keeps asyncio's
            # connection callback from logging the cancellation as an error.
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must not be reused."""
        api = _api_of(request.path)
        try:
            body = json.loads(request.body) if request.body else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        with self._lock:
            record = RecordedRequest(
                index=len(self.requests),
                method=request.method,
                path=request.path,
                api=api,
                headers=request.headers,
                body=body,
                received_at=time.monotonic(),
            )
            self.requests.append(record)
        try:
            return await self._dispatch(record, writer)
        finally:
            if self.on_request is not None:
                self.on_request(record)

    async def _dispatch(self, record: RecordedRequest, writer: asyncio.StreamWriter) -> bool:
        api, body = record.api, record.body
        if record.method == "GET" and record.path.split("?", 1)[0].rstrip("/").endswith("/models"):
            data = [{"id": "scripted-model", "object": "model", "created": 0, "owned_by": "convograph"}]
            return await self._json(record, writer, 200, {"object": "list", "data": data})
        if api is None or record.method != "POST":
            message = f"model server: no route for {record.method} {record.path}"
            return await self._json(record, writer, 404, {"error": {"message": message, "type": "not_found"}})
        if not isinstance(body, dict):
            return await self._json(
                record, writer, 400, error_body(api, 400, "the request body must be a JSON object")
            )
        if not self._authorized(api, record.headers):
            message = "invalid x-api-key" if api == "messages" else "Incorrect API key provided."
            return await self._json(record, writer, 401, error_body(api, 401, message))
        if self.check_requests:
            record.problems = check_request(api, body)
            if record.problems:
                return await self._json(record, writer, 400, error_body(api, 400, "; ".join(record.problems)))
        record.reply_index, reply = self._take(api, body)
        if reply is None:
            message = f"model server: no scripted reply left for request #{record.index} ({api}, model {body.get('model')!r})"
            return await self._json(record, writer, 400, error_body(api, 400, message))
        if reply.status != 200:
            payload = error_body(api, reply.status, reply.error)
            return await self._json(record, writer, reply.status, payload, error_headers(reply))
        tag = f"{record.index:04d}"
        if body.get("stream") is True:
            events = render_stream(api, reply, body, _conversation_text(body), tag)
            return await self._stream(record, writer, reply, events)
        await asyncio.sleep(self._delays(reply)[0])
        return await self._json(
            record, writer, 200, render_response(api, reply, body, _conversation_text(body), tag)
        )

    def _delays(self, reply: Reply) -> tuple[float, float, float]:
        """(time to first event, time between events, the stall) of ``reply``, in seconds: its own,
        else the script's `Pace`, divided by `speed`."""
        first = reply.first_delay or self.pace.first_delay
        chunk = reply.chunk_delay or self.pace.chunk_delay
        return first / self.speed, chunk / self.speed, reply.stall / self.speed

    def _authorized(self, api: Api, headers: dict[str, str]) -> bool:
        if self.api_key is None:
            return True
        bearer = headers.get("authorization", "")
        if bearer == f"Bearer {self.api_key}":
            return True
        return api == "messages" and headers.get("x-api-key") == self.api_key

    async def _json(
        self,
        record: RecordedRequest,
        writer: asyncio.StreamWriter,
        status: int,
        payload: Any,
        headers: Sequence[tuple[str, str]] = (),
    ) -> bool:
        data = json.dumps(payload, ensure_ascii=False).encode()
        head = [("content-type", "application/json"), ("content-length", str(len(data))), *headers]
        writer.write(_head(status, [*head, ("x-request-id", f"req_{record.index:04d}")]) + data)
        await writer.drain()
        record.status = status
        return True

    async def _stream(
        self, record: RecordedRequest, writer: asyncio.StreamWriter, reply: Reply, events: list[bytes]
    ) -> bool:
        head = [
            ("content-type", "text/event-stream; charset=utf-8"),
            ("transfer-encoding", "chunked"),
            ("cache-control", "no-cache"),
            ("x-request-id", f"req_{record.index:04d}"),
        ]
        writer.write(_head(200, head))
        record.status = 200
        await writer.drain()
        first_delay, chunk_delay, stall = self._delays(reply)
        if first_delay:
            await asyncio.sleep(first_delay)
        for n, event in enumerate(events):
            if reply.cut_after is not None and n >= reply.cut_after:
                await writer.drain()
                writer.transport.abort()  # no terminating chunk: the client sees a truncated body
                return False
            if reply.end_after is not None and n >= reply.end_after:
                break
            if n and chunk_delay:
                await asyncio.sleep(chunk_delay)
            if n == reply.stall_after:
                await writer.drain()
                await asyncio.sleep(stall)
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            if chunk_delay or n % 64 == 63:
                await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def _head(status: int, headers: Sequence[tuple[str, str]]) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Overloaded" if status == 529 else "Error"
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{name}: {value}" for name, value in headers), "", ""]
    return "\r\n".join(lines).encode("latin-1")


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """One HTTP/1.1 request (Content-Length or chunked body); None at a clean end of the connection."""
    line = await reader.readline()
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts: list[bytes] = []
        while True:
            size = int((await reader.readline()).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readline()
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    else:
        length = int(headers.get("content-length", "0"))
        if length > _MAX_BODY:
            raise ValueError(f"request body of {length} bytes is too large")
        body = await reader.readexactly(length) if length else b""
    return _Request(method, path, headers, body)
