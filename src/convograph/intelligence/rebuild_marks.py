"""Pending workspace rebuilds of the graph applier, marked durably in the graph engine's meta.

When sessions are forgotten, the applier (`convograph.intelligence.ingest.GraphApplier`), between
two batches, drops the workspace's graph and replays the workspace's live journal records up to
the applied cursor through the same plan and write path, so the rebuilt graph is what the journal
without the forgotten records produces (the convergence the layers are tested for), with no
per-entity deletion logic to drift from the writers. O(events of the workspace). A pending
rebuild is recorded here before the journal forgets anything, and resumed from scratch after a
restart; the sessions of a mark this process made over a graph that held every earlier forget
may be purged in place instead (`purgeable`).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Collection, Iterator

import msgspec

from convograph.intelligence.engine import GraphEngine
from convograph.intelligence.lease import ApplierLease

__all__ = ["REBUILD_MARK", "RebuildMark", "RebuildMarks"]

REBUILD_MARK = "__rebuild__:"
"""Meta key prefix (+ graph prefix + journal id): JSON ``{workspace: [token, [session ids]]}`` of
pending rebuilds."""
_json = msgspec.json.Encoder()


class RebuildMark(msgspec.Struct, array_like=True):
    """A pending workspace rebuild: its token and the sessions whose blobs to sweep again."""

    token: str
    sessions: tuple[str, ...]


class RebuildMarks:
    """The pending rebuilds under one meta ``key``: a read-modify-write of that key, one writer
    at a time in this process and (with a ``lease``) across every instance (`locked`)."""

    def __init__(self, engine: GraphEngine, key: str, lease: ApplierLease | None) -> None:
        self.engine = engine
        self.key = key
        self.lease = lease
        self.cached: list[str] = []
        """Workspaces pending as last read or written by this process (`read`, `store`)."""
        self.purgeable: set[str] = set()
        """Tokens of marks made by this process over a graph that held every earlier forget: only
        those may be purged in place (a mark read at start may follow a purge cut short)."""
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold while reading and writing the marks."""
        with self._lock, self.lease.mutex() if self.lease is not None else contextlib.nullcontext():
            yield

    def read(self) -> dict[str, RebuildMark]:
        stored = self.engine.get_meta(self.key)
        pending = dict(msgspec.json.decode(stored, type=dict[str, RebuildMark])) if stored else {}
        self.cached = sorted(pending)
        return pending

    def store(self, pending: dict[str, RebuildMark]) -> None:
        self.engine.set_meta(self.key, _json.encode(pending).decode())
        self.cached = sorted(pending)

    @contextlib.contextmanager
    def marked(self, workspace: str, session_ids: Collection[str] = ()) -> Iterator[list[str]]:
        """Mark ``workspace`` (with a fresh token and ``session_ids``) and hold the marks while
        the block runs (`convograph.intelligence.ingest.GraphApplier.rebuild_after`). The
        sessions the block appends to the list join the mark on exit; when it was given no
        sessions and appends none, the mark goes back to what it was."""
        with self.locked():
            pending = self.read()
            previous = pending.get(workspace)
            token = uuid.uuid4().hex
            sessions = {*(previous.sessions if previous is not None else ()), *session_ids}
            pending[workspace] = RebuildMark(token, tuple(sorted(sessions)))
            if previous is None or previous.token in self.purgeable:
                self.purgeable.add(token)
            self.store(pending)
            found: list[str] = []
            yield found
            if found:
                pending[workspace] = RebuildMark(token, tuple(sorted({*sessions, *found})))
                self.store(pending)
            elif not session_ids:  # the block removed nothing: the mark goes back to what it was
                if previous is None:
                    del pending[workspace]
                else:
                    pending[workspace] = previous
                self.store(pending)

    def done(self, workspace: str, mark: RebuildMark) -> None:
        """Unmark ``workspace`` after its rebuild, unless it was marked again meanwhile."""
        with self.locked():
            now = self.read()
            if workspace in now and now[workspace].token == mark.token:
                del now[workspace]
                self.store(now)
            self.purgeable.discard(mark.token)
