"""FalkorDB connection: an embedded, supervised server (default) or an existing one by URL.

`GraphEngine` is the narrow interface everything else uses: run one Cypher statement on a named
graph (``read_only`` uses ``GRAPH.RO_QUERY``, ``timeout_ms`` the engine's own query timeout), list
graphs, and keep a few small metadata values (the applied-journal cursor) beside the graphs.

`FalkorEngine.read` runs a user's read-only statement within the read limits
(`convograph.intelligence.reads`: time, memory, rows, slots per engine and per key); the writer
and the service's own reads use `execute`. No statement is ever re-sent by the client library
(redis-py retries by default, and re-sent a slow statement every 5 s).

`convograph.intelligence.embedded.EmbeddedFalkorDB` runs the embedded server;
`connect_engine("falkordb://host:port")` talks to an existing server (``redis://`` and
``unix:///path.sock`` are accepted too) and sets its ``QUERY_MEM_CAPACITY`` when the server has
none or a larger one (a server-wide setting: see docs/intelligence.md).

Parameters are rendered into FalkorDB's ``CYPHER name=value`` header by
`convograph.intelligence.literals` (re-exported here: `MapFreeList`, `NormalFloatList`,
`cypher_literal`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import urlparse

import msgspec
import redis
from falkordb.edge import Edge
from falkordb.node import Node
from falkordb.path import Path as FPath
from redis.backoff import NoBackoff
from redis.retry import Retry

from convograph.intelligence.literals import MapFreeList, NormalFloatList, cypher_literal, params_header
from convograph.intelligence.reads import (
    WRITER_THREADS,
    ReadAddress,
    ReadBusy,
    ReadLimits,
    ReadPool,
    ReadTimeout,
    TooManyQueries,
    ping,
)

__all__ = [
    "ENGINE_SOCKET_TIMEOUT_S",
    "EngineError",
    "EngineUnavailable",
    "FalkorEngine",
    "GraphEngine",
    "MapFreeList",
    "NormalFloatList",
    "QueryMemoryExceeded",
    "QueryRows",
    "QueryTimeout",
    "ReadBusy",
    "TooManyQueries",
    "WriteMirror",
    "check_graph_url",
    "connect_engine",
    "cypher_literal",
    "engine_client",
    "engine_client_options",
]

log = logging.getLogger(__name__)


class EngineError(Exception):
    """The engine rejected a statement (syntax, semantics, read-only violation ...)."""


class QueryTimeout(EngineError):
    """The statement ran past its timeout and was aborted by the engine."""


class QueryMemoryExceeded(EngineError):
    """The statement needed more memory than the engine's per-query limit and was aborted."""


class EngineUnavailable(Exception):
    """The engine cannot be reached (infrastructure failure: retry, never dead-letter)."""


class QueryRows(msgspec.Struct, frozen=True):
    """Result of one statement: column names, rows of JSON-able values, write statistics."""

    columns: list[str]
    rows: list[list[Any]]
    stats: dict[str, float] = {}


class WriteMirror(Protocol):
    """Receives every write to a graph (`convograph.intelligence.union.AllWorkspaces`)."""

    def prepare(
        self, engine: FalkorEngine, graph: str, statements: list[tuple[str, Mapping[str, Any] | None]]
    ) -> list[tuple[str, Mapping[str, Any] | None]] | None:
        """Before ``statements`` run on ``graph``: what to write to the mirror once they succeeded."""
        ...

    def commit(
        self, engine: FalkorEngine, statements: list[tuple[str, Mapping[str, Any] | None]]
    ) -> None: ...

    def deleted(self, engine: FalkorEngine, graph: str) -> None: ...

    def reset(self) -> None: ...


class GraphEngine(Protocol):
    """What the ingest writer and the query side need from a graph database."""

    limits: ReadLimits

    @property
    def memory_limit_bytes(self) -> int:
        """The engine's per-query memory limit as last seen (0: none)."""
        ...

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

    def read(
        self,
        graph: str,
        cypher: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout_ms: int,
        row_cap: int,
        key: str | None = None,
    ) -> tuple[QueryRows, bool]: ...

    def reachable(self) -> bool: ...

    def command(self, *args: Any) -> Any:
        """A raw server command (``GRAPH.CONSTRAINT``, ``GRAPH.LIST`` ...)."""
        ...

    def close(self) -> None: ...


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
    if "mem consumption exceeded" in message.lower():
        return QueryMemoryExceeded(message)
    return EngineError(message)


CLIENT_NAME = "convograph-ci"
"""The name our engine connections give themselves (``CLIENT LIST``): `convograph rebalance`
refuses to move graphs while a server has such clients (a running instance)."""

ENGINE_SOCKET_TIMEOUT_S = 300.0
"""How long the writer's connection waits for one reply before it counts the engine as unavailable."""


def engine_client_options() -> dict[str, Any]:
    """redis-py client settings for the engine: no retries (redis-py's default re-sends a command
    up to 10 times after a 5 s socket timeout, so one slow statement ran many times over) and a
    socket timeout long enough for the largest write batch."""
    return {
        "socket_connect_timeout": 5,
        "socket_timeout": ENGINE_SOCKET_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": True,
        "client_name": CLIENT_NAME,
    }


def _to_rows(result: Any) -> QueryRows:
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


def _config_value(reply: Any) -> int:
    """``GRAPH.CONFIG GET NAME`` → its integer value (``[name, value]``)."""
    value = reply[1] if isinstance(reply, list | tuple) and len(reply) == 2 else reply
    return int(value)


class FalkorEngine:
    """`GraphEngine` over a redis-py connection pool to a FalkorDB server. Thread-safe.

    ``limits`` bound `read` (see `convograph.intelligence.reads`); with ``set_memory_limit`` every
    read connection makes sure the server's ``QUERY_MEM_CAPACITY`` is at most ``limits.memory_mb``
    (a server restarted without it gets it back on the next connection)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        on_unavailable: Any = None,
        limits: ReadLimits | None = None,
        set_memory_limit: bool = True,
    ) -> None:
        import falkordb

        self._client = client
        self._falkordb = falkordb
        self._graphs: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._on_unavailable = on_unavailable
        self.limits = limits or ReadLimits()
        self._set_memory_limit = set_memory_limit
        self._reads: ReadPool | None = None
        self.mirrors: list[WriteMirror] = []
        """Receive every write (the all-workspaces graph of each service using this engine)."""
        self._mirror_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.memory_limit_bytes = 0
        """The engine's ``QUERY_MEM_CAPACITY`` as last seen by a read connection (0: none)."""
        self._timeout_max_ms = 0

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
        mirrored = [] if read_only else self._prepare_mirrors(graph, [(cypher, params)])
        g = self._graph(graph)
        text = params_header(params) + cypher
        try:
            result = g.ro_query(text, None, timeout_ms) if read_only else g.query(text, None, timeout_ms)
        except redis.ResponseError as exc:
            raise _classify(exc) from None
        except (redis.ConnectionError, redis.TimeoutError, ConnectionError) as exc:
            raise self._unavailable(exc) from None
        except Exception as exc:  # schema refresh errors and the like
            raise _classify(exc) from None
        self._commit_mirrors(mirrored)
        return _to_rows(result)

    def read(
        self,
        graph: str,
        cypher: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout_ms: int,
        row_cap: int,
        key: str | None = None,
    ) -> tuple[QueryRows, bool]:
        """Run a user's read-only statement within the read limits; returns its first ``row_cap``
        rows and whether it had more. Raises `QueryTimeout`, `QueryMemoryExceeded`, `EngineError`,
        `TooManyQueries`, `ReadBusy` or `EngineUnavailable`. O(kept rows) memory."""
        pool = self._read_pool()
        text = params_header(params) + cypher
        engine_timeout = min(timeout_ms, self._timeout_max_ms) if self._timeout_max_ms else timeout_ms
        command = ("GRAPH.RO_QUERY", graph, text, "--compact", "timeout", max(1, engine_timeout))
        try:
            reply, total = pool.run(key, command, timeout_ms, row_cap)
        except ReadTimeout as exc:
            raise QueryTimeout(str(exc)) from None
        except redis.ResponseError as exc:
            raise _classify(exc) from None
        except (OSError, ConnectionError) as exc:
            raise self._unavailable(exc) from None
        try:
            result = self._falkordb.query_result.QueryResult(self._graph(graph), reply)
        except (redis.ConnectionError, redis.TimeoutError, ConnectionError) as exc:
            raise self._unavailable(exc) from None
        except Exception as exc:  # a runtime error in the reply, a schema refresh error ...
            raise _classify(exc) from None
        return _to_rows(result), total > row_cap

    def reachable(self) -> bool:
        """Whether the engine answers ``PING`` on a new connection within 2 s."""
        return ping(ReadAddress.of(self._client))

    def _read_pool(self) -> ReadPool:
        pool = self._reads
        if pool is not None:
            return pool
        with self._lock:
            if self._reads is None:
                try:
                    threads = _config_value(self.command("GRAPH.CONFIG", "GET", "THREAD_COUNT"))
                except (redis.ConnectionError, redis.TimeoutError, ConnectionError) as exc:
                    raise self._unavailable(exc) from None
                except (redis.ResponseError, ValueError):
                    threads = self.limits.slots + WRITER_THREADS
                slots = max(1, min(self.limits.slots, threads - WRITER_THREADS))
                self._reads = ReadPool(
                    ReadAddress.of(self._client),
                    slots=slots,
                    per_key=min(self.limits.per_key, slots),
                    on_connect=self._configure_connection,
                )
            return self._reads

    def _configure_connection(self, call: Any) -> None:
        """On each new read connection: read ``TIMEOUT_MAX`` (per-query timeouts may not exceed
        it) and bring ``QUERY_MEM_CAPACITY`` down to the limit when the engine has a larger one."""
        try:
            self._timeout_max_ms = _config_value(call("GRAPH.CONFIG", "GET", "TIMEOUT_MAX"))
            current = _config_value(call("GRAPH.CONFIG", "GET", "QUERY_MEM_CAPACITY"))
        except (redis.ResponseError, ValueError) as exc:
            log.warning("cannot read the graph engine's configuration (%s): query limits are ours only", exc)
            return
        wanted = self.limits.memory_mb * 1024 * 1024
        if self._set_memory_limit and wanted and (current == 0 or current > wanted):
            try:
                call("GRAPH.CONFIG", "SET", "QUERY_MEM_CAPACITY", wanted)
            except redis.ResponseError as exc:
                log.warning(
                    "cannot set the graph engine's QUERY_MEM_CAPACITY (%s): queries are not memory-capped",
                    exc,
                )
            else:
                log.warning(
                    "set the graph engine's QUERY_MEM_CAPACITY to %d MB (was %s; server-wide, until it restarts)",
                    self.limits.memory_mb,
                    f"{current // (1024 * 1024)} MB" if current else "unlimited",
                )
                current = wanted
        self.memory_limit_bytes = current

    def render(self, cypher: str, params: Mapping[str, Any] | None) -> str:
        """``cypher`` with ``params`` folded in (FalkorDB's ``CYPHER k=v ...`` prefix): running the
        result with no parameters is the same statement. O(size of params)."""
        return params_header(params) + cypher

    def execute_many(self, graph: str, statements: Sequence[tuple[str, Mapping[str, Any] | None]]) -> None:
        """Run write statements in order in one round trip (a pipeline, not a transaction: each
        statement is atomic on its own, as with `execute`). Raises the first statement's error.
        The mirrors' copies are written at the same time, on a connection of their own (the engine
        runs writes to different graphs in parallel); both are done when this returns."""
        if not statements:
            return
        mirrored = self._prepare_mirrors(graph, list(statements))
        copies = self._mirror_executor().submit(self._commit_mirrors, mirrored) if mirrored else None
        try:
            self._pipeline(graph, statements)
        finally:
            if copies is not None:
                failure = copies.exception()  # always waited for: the next batch comes after both
        if copies is not None and failure is not None:
            raise failure

    def _pipeline(self, graph: str, statements: Sequence[tuple[str, Mapping[str, Any] | None]]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for cypher, params in statements:
            pipe.execute_command("GRAPH.QUERY", graph, params_header(params) + cypher, "--compact")  # type: ignore[no-untyped-call]
        try:
            replies = pipe.execute(raise_on_error=False)
        except (redis.ConnectionError, redis.TimeoutError, ConnectionError) as exc:
            raise self._unavailable(exc) from None
        for reply in replies:
            if isinstance(reply, Exception):
                raise _classify(reply)

    def _mirror_executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._mirror_pool is None:
                self._mirror_pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="convograph-mirror"
                )
            return self._mirror_pool

    def _prepare_mirrors(
        self, graph: str, statements: list[tuple[str, Mapping[str, Any] | None]]
    ) -> list[tuple[WriteMirror, list[tuple[str, Mapping[str, Any] | None]]]]:
        prepared = []
        for mirror in self.mirrors:
            copy = mirror.prepare(self, graph, statements)
            if copy:
                prepared.append((mirror, copy))
        return prepared

    def _commit_mirrors(
        self, prepared: list[tuple[WriteMirror, list[tuple[str, Mapping[str, Any] | None]]]]
    ) -> None:
        for mirror, statements in prepared:
            mirror.commit(self, statements)

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
        for mirror in self.mirrors:
            mirror.deleted(self, graph)

    def close(self) -> None:
        if self._reads is not None:
            self._reads.close()
        if self._mirror_pool is not None:
            self._mirror_pool.shutdown(wait=True)
        self._client.close()


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


def engine_client(url: str, **overrides: Any) -> redis.Redis:
    """A redis-py client (not yet connected) for the server ``url`` names, with
    `engine_client_options` updated by ``overrides``. Raises ValueError for a bad URL."""
    check_graph_url(url)
    parsed = urlparse(url)
    options = {**engine_client_options(), **overrides}
    if parsed.scheme in ("falkordb", "redis", "falkordbs", "rediss"):
        return redis.Redis(
            host=parsed.hostname or "127.0.0.1",
            port=parsed.port or 6379,
            password=parsed.password,
            username=parsed.username,
            ssl=parsed.scheme.endswith("s"),
            **options,
        )
    return redis.Redis(unix_socket_path=parsed.path, **options)


def connect_engine(url: str, *, limits: ReadLimits | None = None, wait_s: float = 5.0) -> FalkorEngine:
    """Engine for ``falkordb://host:port``, ``redis://host:port`` or ``unix:///path/to.sock``. A
    server that is still starting (it resets connections or answers LOADING while its modules
    load) is asked again for up to ``wait_s``; then `EngineUnavailable` names it."""
    client = engine_client(url)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            client.ping()
            return FalkorEngine(client, limits=limits)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if time.monotonic() >= deadline:
                raise EngineUnavailable(f"cannot reach FalkorDB at {url}: {exc}") from None
            time.sleep(0.2)
