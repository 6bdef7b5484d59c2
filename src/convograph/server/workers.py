"""``convograph serve --workers N``: N server processes on one machine sharing one listening socket.

The parent binds the socket once and starts N worker processes (``spawn``), each a whole server
(`serve_app` on the inherited socket); the kernel hands each new connection to one of them. The
parent restarts a worker that dies (after a second, so a crash loop does not spin) and, on
SIGINT / SIGTERM, stops them all (each ends its streams and drains, as one server does).

Workers share nothing in memory, so everything they hold must live in shared services: the event
log in PostgreSQL or Redis, and, with context intelligence, the graph on a FalkorDB server and the
journal and blobs in PostgreSQL (`shareable_problem`). SQLite and the embedded FalkorDB in one data
directory are refused: the embedded engine is one process per data directory, and the feed
cursors and journal there are written by one process (docs/deploy.md).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import signal
import socket
import threading
import time
from multiprocessing.process import BaseProcess
from typing import Any

from convograph.server.config import ServerConfig

__all__ = ["serve_workers", "shareable_problem"]

log = logging.getLogger("convograph.server")


def shareable_problem(config: ServerConfig) -> str | None:
    """Why several processes cannot serve ``config`` together, or None when they can."""
    from convograph.store.url import shared_postgres

    url = config.database_url or ""
    scheme = url.split(":", 1)[0].lower()
    if scheme not in ("postgresql", "postgres", "redis", "rediss"):
        return (
            f"the event log {'(SQLite in the data directory)' if not url else url.split(':', 1)[0] + '://'} is"
            " one process's: pass --database-url postgresql://… (or redis://…?finalize=postgresql://…)"
        )
    if config.intelligence and (config.graph_url is None or shared_postgres(url) is None):
        return (
            "context intelligence keeps its graph, journal and blobs in the data directory unless it has a"
            " FalkorDB server (--graph-url falkordb://…) and a PostgreSQL database (--database-url"
            " postgresql://…, or redis://…?finalize=postgresql://…); pass both, or --no-intelligence"
        )
    return None


def _worker(config: ServerConfig, log_level: str, sock: socket.socket, index: int) -> None:
    """A worker process: one whole server on the parent's socket (the banner from worker 0)."""
    from convograph.server.app import StartupFailed, serve_app

    with contextlib.suppress(StartupFailed, KeyboardInterrupt):
        serve_app(config, log_level=log_level, sockets=[sock], announce=index == 0, check=False)


def serve_workers(config: ServerConfig, workers: int, *, log_level: str = "info") -> None:
    """Serve ``config`` with ``workers`` processes until SIGINT / SIGTERM (see the module docstring).
    Raises `StartupFailed` when the configuration cannot be shared or a backend is unreachable."""
    import asyncio

    import uvicorn

    from convograph.server.app import StartupFailed, check_backends

    problem = shareable_problem(config)
    if problem is not None:
        raise StartupFailed(f"--workers {workers} needs state that every process shares: {problem}")
    asyncio.run(check_backends(config))
    sock = uvicorn.Config(
        app="convograph.server.app:create_app", host=config.host, port=config.port
    ).bind_socket()
    context = multiprocessing.get_context("spawn")
    stop = threading.Event()

    def start(index: int) -> BaseProcess:
        process = context.Process(
            target=_worker, args=(config, log_level, sock, index), name=f"convograph-worker-{index}"
        )
        process.start()
        return process

    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    processes = [start(index) for index in range(workers)]
    try:
        while not stop.wait(0.5):
            for index, process in enumerate(processes):
                if process.exitcode is not None and not stop.is_set():
                    log.warning(
                        "worker %d (pid %s) exited with %s; restarting it",
                        index,
                        process.pid,
                        process.exitcode,
                    )
                    time.sleep(1.0)
                    processes[index] = start(index)
    finally:
        _stop_all(processes)
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_all(processes: list[Any]) -> None:
    """SIGTERM every worker (each shuts down gracefully), then wait; SIGKILL what is left after 30 s."""
    for process in processes:
        if process.exitcode is None and process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
    deadline = time.monotonic() + 30
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.exitcode is None:
            process.kill()
            process.join(5)
