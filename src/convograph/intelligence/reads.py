"""Bounded user reads: the statements of ``POST /cypher`` never run unbounded, never pile up and
never hold up the ingest writer.

FalkorDB enforces two limits itself, both best-effort (measured on the bundled FalkorDB 4.22):
the per-query ``TIMEOUT`` is checked between records, so an expression that runs long inside one
record (a ``reduce`` building a long string) ends only when it is done; ``QUERY_MEM_CAPACITY`` is
checked after each allocation and stops the statement at the next record, so one expression that
allocates a lot at once (``range(1, 200000000)``) gets its memory first. This module adds what a
server needs on top:

- **A deadline of its own.** The caller gets `QueryTimeout` ``timeout_ms`` + `GRACE_S` after it
  started at the latest, whether or not the engine has stopped the statement.
- **Read slots.** At most ``slots`` user statements are in the engine at once, each on a
  connection of its own (never the writer's). A statement keeps its slot until the engine has
  really finished it, even after its caller got its timeout, so runaways cannot pile up; the
  embedded engine runs ``slots +`` `WRITER_THREADS` worker threads, so the writer always finds its
  own free (a FalkorDB server gets at most its ``THREAD_COUNT`` - `WRITER_THREADS` slots).
- **Per-key slots.** One API key holds at most ``per_key`` slots (`TooManyQueries`, HTTP 429), so
  one key's runaways leave the other keys room.
- **Rows read as a stream.** Only the first ``keep_rows`` rows of a reply are decoded; the rest
  are skipped as they arrive (a 4.8M-row cartesian product costs the server no memory).

A slot is never given up while the engine still runs its statement (the engine has no way to
cancel one): freeing it would let the next statements queue inside the engine, in front of the
writer's. Shapes the engine cannot bound at all are refused before they are sent
(`convograph.intelligence.query.check_complexity`, `check_range_bounds`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
import redis

__all__ = [
    "GRACE_S",
    "WRITER_THREADS",
    "ReadAddress",
    "ReadBusy",
    "ReadLimits",
    "ReadPool",
    "ReadTimeout",
    "RespReader",
    "TooManyQueries",
    "pack_command",
    "ping",
]

WRITER_THREADS = 2
"""Engine worker threads kept for the ingest writer: its statements and their copies to the
all-workspaces graph, which run at the same time (`convograph.intelligence.union`)."""

GRACE_S = 1.0
"""Seconds past a statement's own timeout before its caller is answered without the engine."""

_READ_CHUNK = 256 * 1024


class ReadLimits(msgspec.Struct, frozen=True):
    """Engine-wide bounds of user reads (the per-statement time limit and row cap are the
    service's: `convograph.intelligence.service.IntelligenceService`)."""

    memory_mb: int = 512
    """Per-statement memory (FalkorDB ``QUERY_MEM_CAPACITY``); 0 leaves the engine's setting."""
    slots: int = 4
    """User statements in the engine at once (fewer on a server with fewer worker threads)."""
    per_key: int = 2
    """Of those, statements one API key may hold."""


class ReadTimeout(Exception):
    """The engine did not answer within the statement's time limit (+ `GRACE_S`)."""


class TooManyQueries(Exception):
    """This key already has ``limit`` statements in the engine (HTTP 429)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"this API key already has {limit} queries running in the graph engine (the per-key limit, "
            "query_concurrency_per_key); retry when one of them has finished"
        )
        self.limit = limit


class ReadBusy(Exception):
    """Every read slot stayed busy for the whole of a statement's time limit (HTTP 503)."""


class ReadAddress(msgspec.Struct, frozen=True):
    """Where the read connections go: a Unix socket path, or host and port (TLS optional)."""

    unix_path: str | None = None
    host: str = "127.0.0.1"
    port: int = 6379
    username: str | None = None
    password: str | None = None
    tls: bool = False

    @classmethod
    def of(cls, client: redis.Redis) -> ReadAddress:
        """The address a redis-py client connects to (its pool's connection settings)."""
        kwargs = client.connection_pool.connection_kwargs
        tls = "ssl" in getattr(client.connection_pool.connection_class, "__name__", "").lower()
        return cls(
            unix_path=kwargs.get("path") or kwargs.get("unix_socket_path"),
            host=str(kwargs.get("host") or "127.0.0.1"),
            port=int(kwargs.get("port") or 6379),
            username=kwargs.get("username"),
            password=kwargs.get("password"),
            tls=tls,
        )


def pack_command(*args: str | int) -> bytes:
    """A RESP2 command: an array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class RespReader:
    """RESP2 replies read from a socket as they arrive. Bulk strings are decoded as UTF-8 (as
    redis-py's ``decode_responses``), error replies nested in arrays become `redis.ResponseError`
    values (as in redis-py), a top-level error reply is raised. O(reply size), memory O(what is kept)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._pos = 0

    def _fill(self) -> None:
        if self._pos > _READ_CHUNK:
            del self._buf[: self._pos]
            self._pos = 0
        chunk = self._sock.recv(_READ_CHUNK)
        if not chunk:
            raise ConnectionError("the graph engine closed the connection")
        self._buf += chunk

    def _line(self) -> bytes:
        while True:
            end = self._buf.find(b"\r\n", self._pos)
            if end >= 0:
                line = bytes(self._buf[self._pos : end])
                self._pos = end + 2
                return line
            self._fill()

    def _bytes(self, size: int) -> bytes:
        while len(self._buf) - self._pos < size + 2:
            self._fill()
        data = bytes(self._buf[self._pos : self._pos + size])
        self._pos += size + 2
        return data

    def _skip_bytes(self, size: int) -> None:
        remaining = size + 2
        while remaining:
            available = len(self._buf) - self._pos
            if available == 0:
                self._fill()
                continue
            step = min(available, remaining)
            self._pos += step
            remaining -= step

    def value(self) -> Any:
        """One whole reply (nested arrays included)."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode(errors="replace")
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self._bytes(size).decode(errors="replace")
        if kind == b"*":
            count = int(rest)
            return None if count < 0 else [self.value() for _ in range(count)]
        if kind == b"-":
            return redis.ResponseError(rest.decode(errors="replace"))
        raise ConnectionError(f"unexpected reply from the graph engine: {line[:80]!r}")

    def skip(self) -> None:
        """Consume one reply without building it. Iterative: any nesting depth."""
        pending = 1
        while pending:
            pending -= 1
            line = self._line()
            kind, rest = line[:1], line[1:]
            if kind == b"$":
                size = int(rest)
                if size >= 0:
                    self._skip_bytes(size)
            elif kind == b"*":
                pending += max(0, int(rest))
            elif kind not in (b"+", b":", b"-"):
                raise ConnectionError(f"unexpected reply from the graph engine: {line[:80]!r}")

    def query_reply(self, keep_rows: int) -> tuple[Any, int]:
        """A ``GRAPH.QUERY`` reply with only its first ``keep_rows`` rows decoded, and the number of
        rows the engine sent. Raises `redis.ResponseError` for an error reply."""
        line = self._line()
        if line[:1] == b"-":
            raise redis.ResponseError(line[1:].decode(errors="replace"))
        if line[:1] != b"*":
            self._pos -= len(line) + 2
            return self.value(), 0
        count = int(line[1:])
        if count != 3:  # statistics only, or an error reply shape: small
            return [self.value() for _ in range(count)], 0
        header = self.value()
        rows_line = self._line()
        if rows_line[:1] != b"*":
            raise ConnectionError(f"unexpected rows in a query reply: {rows_line[:80]!r}")
        total = max(0, int(rows_line[1:]))
        rows = []
        for index in range(total):
            if index < keep_rows:
                rows.append(self.value())
            else:
                self.skip()
        return [header, rows, self.value()], total


class _Link:
    """One read connection: a plain socket speaking RESP2 to FalkorDB."""

    def __init__(self, address: ReadAddress, timeout_s: float | None = None) -> None:
        if address.unix_path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5.0)
            try:
                sock.connect(address.unix_path)
            except OSError:
                sock.close()
                raise
        else:
            sock = socket.create_connection((address.host, address.port), timeout=5.0)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # a vanished server ends the wait
            if address.tls:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=address.host)
        sock.settimeout(timeout_s)  # None: a reply takes as long as the engine takes (module docstring)
        self.sock = sock
        self.reader = RespReader(sock)
        if address.password is not None:
            auth = (address.password,) if address.username is None else (address.username, address.password)
            self.call("AUTH", *auth)

    def call(self, *args: str | int) -> Any:
        self.sock.sendall(pack_command(*args))
        reply = self.reader.value()
        if isinstance(reply, redis.ResponseError):
            raise reply
        return reply

    def query(self, args: tuple[str | int, ...], keep_rows: int) -> tuple[Any, int]:
        self.sock.sendall(pack_command(*args))
        return self.reader.query_reply(keep_rows)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def ping(address: ReadAddress, timeout_s: float = 2.0) -> bool:
    """Whether the engine at ``address`` answers ``PING`` on a new connection within ``timeout_s``."""
    try:
        link = _Link(address, timeout_s)
    except (OSError, ConnectionError, redis.ResponseError):
        return False
    try:
        return bool(link.call("PING") in ("PONG", b"PONG"))
    except (OSError, ConnectionError, redis.ResponseError):
        return False
    finally:
        link.close()


class ReadPool:
    """``slots`` worker threads, each with its own connection; see the module docstring.

    ``on_connect(call)`` runs on every new connection before its first statement (the engine
    re-applies the query memory limit there, so a restarted server gets it back)."""

    def __init__(
        self,
        address: ReadAddress,
        *,
        slots: int,
        per_key: int,
        on_connect: Callable[[Callable[..., Any]], None] | None = None,
    ) -> None:
        if slots < 1 or per_key < 1:
            raise ValueError("read slots and per-key slots must be at least 1")
        self.address = address
        self.slots = slots
        self.per_key = per_key
        self._on_connect = on_connect
        self._executor = concurrent.futures.ThreadPoolExecutor(slots, thread_name_prefix="convograph-read")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._by_key: dict[str | None, int] = {}
        self._links: list[_Link] = []
        self._closed = False

    def in_flight(self, key: str | None = None) -> int:
        """Statements admitted and not yet finished by the engine (of ``key``, or all)."""
        with self._lock:
            return self._by_key.get(key, 0) if key is not None else sum(self._by_key.values())

    def run(
        self, key: str | None, args: tuple[str | int, ...], timeout_ms: int, keep_rows: int
    ) -> tuple[Any, int]:
        """Run one query command (``GRAPH.RO_QUERY graph text --compact timeout T``) in a slot.

        Raises `TooManyQueries` at once when ``key`` holds ``per_key`` slots, `ReadBusy` when no
        slot freed within the time limit, `ReadTimeout` when the engine has not answered `GRACE_S`
        after the limit (the statement keeps its slot until the engine ends it), `ConnectionError`
        when the engine cannot be reached, `redis.ResponseError` for the engine's own errors."""
        with self._lock:
            if self._closed:
                raise ConnectionError("the read pool is closed")
            held = self._by_key.get(key, 0)
            if held >= self.per_key:
                raise TooManyQueries(self.per_key)
            self._by_key[key] = held + 1
        deadline = time.monotonic() + timeout_ms / 1000
        try:
            future = self._executor.submit(self._work, key, args, keep_rows, deadline)
        except RuntimeError:
            self._release(key)
            raise ConnectionError("the read pool is closed") from None
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()) + GRACE_S)
        except concurrent.futures.TimeoutError:
            if future.cancel():  # never started: it held no engine slot
                self._release(key)
                raise ReadBusy(
                    f"all {self.slots} query slots of the graph engine stayed busy for {timeout_ms} ms; retry shortly"
                ) from None
            raise ReadTimeout(
                f"no answer within {timeout_ms} ms; the engine is still running the query "
                "(it keeps one of this key's query slots until it ends)"
            ) from None

    def _release(self, key: str | None) -> None:
        with self._lock:
            left = self._by_key.get(key, 0) - 1
            if left > 0:
                self._by_key[key] = left
            else:
                self._by_key.pop(key, None)

    def _link(self) -> _Link:
        link: _Link | None = getattr(self._local, "link", None)
        if link is None:
            link = _Link(self.address)
            try:
                if self._on_connect is not None:
                    self._on_connect(link.call)
            except BaseException:
                link.close()
                raise
            self._local.link = link
            with self._lock:
                self._links.append(link)
        return link

    def _work(
        self, key: str | None, args: tuple[str | int, ...], keep_rows: int, deadline: float
    ) -> tuple[Any, int]:
        try:
            if time.monotonic() >= deadline:  # waited out its whole budget in the queue
                raise ReadTimeout("no read slot became free in time")
            link = self._link()
            try:
                return link.query(args, keep_rows)
            except OSError as exc:  # the connection broke (engine restarted or gone)
                self._drop(link)
                raise ConnectionError(f"graph engine connection: {exc}") from None
            except ConnectionError:
                self._drop(link)
                raise
        finally:
            self._release(key)

    def _drop(self, link: _Link) -> None:
        """Close ``link``; the next statement on this thread connects again."""
        link.close()
        self._local.link = None
        with self._lock, contextlib.suppress(ValueError):
            self._links.remove(link)

    def close(self) -> None:
        """Stop taking statements and close every connection (running statements then fail)."""
        with self._lock:
            self._closed = True
            links, self._links = self._links, []
        self._executor.shutdown(wait=False, cancel_futures=True)
        for link in links:
            link.close()
