"""`IntelligenceService`: the HTTP-framework-free context-intelligence service.

Data flows one way: envelope → `parse_envelope` → `Journal.append` (durable, deduplicated; the
caller may now answer 202) → `GraphApplier` (background) → FalkorDB graphs → `run_cypher`.

Authorisation is the caller's: every method takes ``allowed_workspaces`` (``None`` = all), the
set a workspace-restricted API key may touch; the service enforces it for writes, queries, blobs
and dead letters (`AccessDenied`). ``created_by`` is stamped by the caller (the authenticated
principal), never taken from the body.

`IntelligenceService.open(data_dir)` builds the default stack: SQLite journal, local blob
directory and an embedded FalkorDB child, all under ``<data_dir>/intelligence``;
``graph_url="falkordb://host:port"`` uses an existing server instead. ``read_limits`` bound the
engine's user reads (memory per statement, slots); ``query_timeout_ms`` and ``row_cap`` each query.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from convograph.intelligence import journal_base
from convograph.intelligence.blobs import BlobStore, LocalBlobStore, blob_uri, validate_key
from convograph.intelligence.blobs_pg import PostgresBlobStore
from convograph.intelligence.embedded import EmbeddedFalkorDB
from convograph.intelligence.engine import FalkorEngine, GraphEngine
from convograph.intelligence.envelope import (
    Envelope,
    EnvelopeError,
    check_session_id,
    check_workspace,
    parse_envelope,
)
from convograph.intelligence.ingest import GraphApplier
from convograph.intelligence.journal import AppendResult, DeadLetterGroup, Journal, SqliteJournal
from convograph.intelligence.journal_pg import PostgresJournal
from convograph.intelligence.layer_semantic import SemanticLayer
from convograph.intelligence.lease import ApplierLease, PostgresLease
from convograph.intelligence.placement import connect_graph
from convograph.intelligence.query import AccessDenied, CypherResult, run_cypher
from convograph.intelligence.reads import ReadLimits
from convograph.intelligence.shards import ShardedEngine
from convograph.intelligence.union import AllWorkspaces
from convograph.intelligence.writer import GraphNames
from convograph.store.url import shared_postgres

__all__ = [
    "BatchError",
    "BatchResult",
    "ForgetResult",
    "IngestResult",
    "IntelligenceService",
    "NotFound",
    "RetentionResult",
    "check_write",
]


class IngestResult(msgspec.Struct, frozen=True):
    """``{"status": "queued" | "duplicate", "session_id"}`` (+ ``seq`` for queued events)."""

    status: Literal["queued", "duplicate"]
    session_id: str
    seq: int | None = None


class BatchResult(msgspec.Struct, frozen=True):
    """Outcome of `IntelligenceService.ingest_many`."""

    accepted: int
    duplicates: int
    last_seq: int | None


class ForgetResult(msgspec.Struct, frozen=True):
    """Outcome of `IntelligenceService.forget_session`: what was deleted, and the graph work queued.

    ``events`` journal records and ``blobs`` blob refs are gone when this is returned; the
    workspace graph drops the session's nodes once the applier has purged them in place (or, as a
    fallback, rebuilt the workspace) (``rebuilding`` lists the workspaces still waiting for either,
    as ``status()`` does; `IntelligenceService.wait_rebuilt` blocks).
    """

    workspace: str
    session_id: str
    events: int
    blobs: int
    rebuilding: list[str]


class RetentionResult(msgspec.Struct, frozen=True):
    """Outcome of `IntelligenceService.forget_idle_sessions`."""

    idle_days: float
    sessions: int
    events: int
    blobs: int
    rebuilding: list[str]


class BatchError(ValueError):
    """Some envelopes of a batch are invalid; nothing was stored. ``errors`` lists each one."""

    def __init__(self, errors: list[EnvelopeError]) -> None:
        super().__init__(f"{len(errors)} invalid envelope(s); nothing was stored")
        self.errors = errors


class NotFound(LookupError):
    """No such blob or session (or not visible to this key)."""


def _servers(engine: GraphEngine) -> list[FalkorEngine]:
    """The FalkorDB servers behind ``engine`` (none for another kind of engine)."""
    if isinstance(engine, ShardedEngine):
        return engine.shards
    return [engine] if isinstance(engine, FalkorEngine) else []


def check_write(envelope: Envelope, allowed: frozenset[str] | None) -> None:
    """Raise `AccessDenied` if a key limited to ``allowed`` workspaces may not write ``envelope``."""
    _check_workspace_write(envelope.workspace, allowed)


def _check_workspace_write(workspace: str, allowed: frozenset[str] | None) -> None:
    if allowed is not None and workspace not in allowed:
        raise AccessDenied(f"this API key may not write to workspace {workspace!r}")


class IntelligenceService:
    """See the module docstring. Thread-safe; `start` before use, `close` when done."""

    def __init__(
        self,
        journal: Journal,
        engine: GraphEngine,
        blobs: BlobStore,
        *,
        names: GraphNames | None = None,
        row_cap: int = 10_000,
        query_timeout_ms: int = 10_000,
        batch_size: int = 20000,
        offload_threshold: int = 4096,
        embedded: EmbeddedFalkorDB | None = None,
        owns_engine: bool = False,
        semantic_layers: bool = False,
        all_workspaces_graph: bool = True,
        lease: ApplierLease | None = None,
    ) -> None:
        self.journal = journal
        self.engine = engine
        self.blobs = blobs
        self.names = names or GraphNames()
        self.row_cap = row_cap
        self.query_timeout_ms = query_timeout_ms
        self.embedded = embedded
        self._owns_engine = owns_engine or embedded is not None
        semantic = SemanticLayer(journal) if semantic_layers else None
        self.applier = GraphApplier(
            journal,
            engine,
            blobs,
            names=self.names,
            batch_size=batch_size,
            offload_threshold=offload_threshold,
            planned_stages=(semantic,) if semantic is not None else (),
            resets=(semantic.forget,) if semantic is not None else (),
            session_resets=(semantic.forget_sessions,) if semantic is not None else (),
            lease=lease,
        )
        self.union: AllWorkspaces | None = None
        if all_workspaces_graph and isinstance(engine, FalkorEngine | ShardedEngine):
            self.union = AllWorkspaces(
                self.names, home=engine.home if isinstance(engine, ShardedEngine) else None
            )
            for server in _servers(engine):  # on several servers, each copies its writes to the home
                server.mirrors.append(self.union)
        self.lease = lease
        self._started = False

    @classmethod
    def open(
        cls,
        data_dir: str | os.PathLike[str],
        *,
        graph_url: str | None = None,
        graph_prefix: str = "convograph_ci:",
        synchronous: Literal["normal", "full"] = "normal",
        read_limits: ReadLimits | None = None,
        database_url: str | None = None,
        **options: Any,
    ) -> IntelligenceService:
        """Default stack under ``<data_dir>/intelligence`` (embedded FalkorDB unless ``graph_url``).

        With a graph server (``graph_url``) and an event log URL naming PostgreSQL
        (``database_url``: ``postgresql://``, or ``redis://…?finalize=postgresql://…``), nothing
        lives in the data directory: the journal and the blobs are in that database, and the
        applier runs where the lease is held (docs/deploy.md), so any number of instances share
        one journal, one blob store and one graph."""
        conninfo = shared_postgres(database_url) if graph_url is not None else None
        if conninfo is not None:
            return cls._open_shared(
                conninfo, graph_url or "", graph_prefix, read_limits, synchronous, **options
            )
        root = Path(data_dir) / "intelligence"
        root.mkdir(parents=True, exist_ok=True)
        embedded = None
        if graph_url is None:
            embedded = EmbeddedFalkorDB(root / "falkordb", limits=read_limits)
            engine: GraphEngine = embedded.start()
        else:
            engine = connect_graph(graph_url, GraphNames(graph_prefix), limits=read_limits)
        journal = SqliteJournal(root / "journal.sqlite3", synchronous=synchronous)
        options.setdefault("semantic_layers", True)  # kernel + foundation layers (docs/querying.md)
        service = cls(
            journal,
            engine,
            LocalBlobStore(root / "blobs"),
            names=GraphNames(graph_prefix),
            embedded=embedded,
            owns_engine=True,  # connected here: closed with the service (its connections were left open)
            **options,
        )
        service.start()
        return service

    @classmethod
    def _open_shared(
        cls,
        conninfo: str,
        graph_url: str,
        graph_prefix: str,
        read_limits: ReadLimits | None,
        synchronous: Literal["normal", "full"],
        **options: Any,
    ) -> IntelligenceService:
        engine = connect_graph(graph_url, GraphNames(graph_prefix), limits=read_limits)
        journal = PostgresJournal(conninfo, synchronous=synchronous)
        blobs = PostgresBlobStore(conninfo)
        lease = PostgresLease(conninfo, f"convograph-ci-applier:{graph_prefix}{journal.journal_id}")
        options.setdefault("semantic_layers", True)
        service = cls(
            journal, engine, blobs, names=GraphNames(graph_prefix), owns_engine=True, lease=lease, **options
        )
        service.start()
        return service

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Create schemas for existing graphs (and the all-workspaces graph: a copy of every
        workspace graph the first time) and start applying the journal."""
        if not self._started:
            if self.union is not None:
                self.union.backfill(self.engine)
            self.applier.start()
            self._started = True

    def close(self) -> None:
        """Stop the applier and close the journal; close the engine only if this service owns it."""
        self.applier.stop()
        for server in _servers(self.engine):
            if self.union is not None and self.union in server.mirrors:
                server.mirrors.remove(self.union)
        if self.lease is not None:
            self.lease.close()  # another instance takes over at once
        self.journal.close()
        if isinstance(self.blobs, LocalBlobStore | PostgresBlobStore):
            self.blobs.close()
        if self.embedded is not None:
            self.embedded.close()
        elif self._owns_engine:
            with contextlib.suppress(Exception):
                self.engine.close()

    def __enter__(self) -> IntelligenceService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ingest ----------------------------------------------------------------------------------
    def ingest(
        self,
        body: Mapping[str, Any] | str | bytes,
        *,
        created_by: str | None = None,
        allowed_workspaces: frozenset[str] | None = None,
    ) -> IngestResult:
        """Validate and durably append one envelope. Raises `EnvelopeError` / `AccessDenied`."""
        envelope = parse_envelope(body)
        check_write(envelope, allowed_workspaces)
        return self.append_envelopes([envelope], created_by=created_by)[0]

    def append_envelopes(
        self, envelopes: list[Envelope], *, created_by: str | None = None
    ) -> list[IngestResult]:
        """Durably append already-validated envelopes in one transaction (group commit).

        The caller has checked write access (`check_write`); results are in input order.
        """
        results = self.journal.append(envelopes, created_by) if envelopes else []
        return self._appended(envelopes, results)

    def append_envelopes_nowait(
        self, envelopes: list[Envelope], *, created_by: str | None = None
    ) -> list[IngestResult] | None:
        """`append_envelopes` when the journal can commit them at once without waiting (a free
        SQLite write lock: an event loop then commits a few envelopes itself instead of handing
        them to a thread); None, with nothing stored, otherwise."""
        nowait = getattr(self.journal, "append_nowait", None)
        results = nowait(envelopes, created_by) if nowait is not None and envelopes else None
        return None if results is None else self._appended(envelopes, results)

    def _appended(self, envelopes: list[Envelope], results: list[AppendResult]) -> list[IngestResult]:
        if any(r.status == "queued" for r in results):
            self.applier.notify()
        return [IngestResult(r.status, e.session_id, r.seq) for e, r in zip(envelopes, results, strict=True)]

    def ingest_many(
        self,
        bodies: Iterable[Mapping[str, Any] | str | bytes],
        *,
        created_by: str | None = None,
        allowed_workspaces: frozenset[str] | None = None,
        owned: bool = False,
        json_decoded: bool = False,
    ) -> BatchResult:
        """Validate the whole batch, then append it in one transaction (all or nothing).

        ``owned``: the mapping bodies were decoded for this call and nothing else holds them
        (the HTTP routes), so their payloads may be handed to the applier as decoded (`hint`)
        instead of being decoded again from the journal; str / bytes bodies always are.
        ``json_decoded``: the mapping bodies are a msgspec JSON decoder's output (the HTTP
        routes), so they hold no NaN / Infinity to look for (`parse_envelope`)."""
        envelopes: list[Envelope] = []
        errors: list[EnvelopeError] = []
        mine: list[bool] = []
        for index, body in enumerate(bodies):
            try:
                envelope = parse_envelope(body, json_decoded=json_decoded)
            except EnvelopeError as exc:
                exc.index = index
                errors.append(exc)
                continue
            envelopes.append(envelope)
            mine.append(owned or isinstance(body, str | bytes))
        if errors:
            raise BatchError(errors)
        for envelope in envelopes:
            check_write(envelope, allowed_workspaces)
        results = self.journal.append(envelopes, created_by) if envelopes else []
        queued = [r.seq for r in results if r.status == "queued" and r.seq is not None]
        if queued:
            self.applier.hint(
                {
                    r.seq: e.data
                    for e, r, own in zip(envelopes, results, mine, strict=True)
                    if own and r.seq is not None
                }
            )
            self.applier.notify()
        return BatchResult(
            accepted=len(queued),
            duplicates=len(results) - len(queued),
            last_seq=max(queued) if queued else None,
        )

    def wait_applied(self, seq: int | None = None, timeout: float = 30.0) -> bool:
        """Block until the journal up to ``seq`` (default: everything so far) is queryable."""
        target = self.journal.last_seq() if seq is None else seq
        return self.applier.wait_applied(target, timeout)

    # -- query -----------------------------------------------------------------------------------
    def cypher(
        self,
        query: str,
        params: Mapping[str, Any] | None = None,
        workspace: str | None = None,
        *,
        allowed_workspaces: frozenset[str] | None = None,
        key: str | None = None,
    ) -> CypherResult:
        """Read-only Cypher (see `convograph.intelligence.query`); ``key`` is the caller's API key
        id, which the per-key read slots count."""
        return run_cypher(
            self.engine,
            self.names,
            query,
            params,
            workspace,
            allowed_workspaces=allowed_workspaces,
            row_cap=self.row_cap,
            timeout_ms=self.query_timeout_ms,
            key=key,
            union_graph=self.names.all_graph if self.union is not None else None,
        )

    # -- blobs -----------------------------------------------------------------------------------
    def list_blobs(self, session_id: str, *, allowed_workspaces: frozenset[str] | None = None) -> list[str]:
        """Sorted ``ci-blob://`` URIs of one session's blobs visible to the caller."""
        validate_key(session_id, "session id")
        return [blob_uri(session_id, key) for key in self.blobs.list(session_id, allowed_workspaces)]

    def read_blob(
        self, session_id: str, key: str, *, allowed_workspaces: frozenset[str] | None = None
    ) -> bytes:
        """The blob's bytes (JSON). Raises `BlobError` for bad names, `NotFound` if absent/invisible."""
        validate_key(session_id, "session id")
        validate_key(key)
        content = self.blobs.get(session_id, key, allowed_workspaces)
        if content is None:
            raise NotFound(f"no blob {blob_uri(session_id, key)}")
        return content

    # -- dead letters ----------------------------------------------------------------------------
    def dead_letters(self, *, allowed_workspaces: frozenset[str] | None = None) -> list[DeadLetterGroup]:
        return self.journal.dead_letters(allowed_workspaces)

    def replay_dead_letters(self, key: str, *, allowed_workspaces: frozenset[str] | None = None) -> int:
        count = self.journal.replay_dead(key, allowed_workspaces)
        if count:
            self.applier.notify()
        return count

    def purge_dead_letters(self, key: str, *, allowed_workspaces: frozenset[str] | None = None) -> int:
        return self.journal.purge_dead(key, allowed_workspaces)

    # -- forgetting -------------------------------------------------------------------------------
    def forget_session(
        self,
        workspace: str,
        session_id: str,
        *,
        allowed_workspaces: frozenset[str] | None = None,
        tombstone: bool = True,
    ) -> ForgetResult:
        """Delete one session of one workspace: its journal records (their dedupe digests stay as
        tombstones, so a redelivered copy is a duplicate, not a resurrection), its blobs (objects
        no other ref names are deleted), and every graph node derived from it (purged in place:
        the session, or with the semantic layers its component; a rebuild of the workspace graph
        from the journal as the fallback). Other workspaces sharing the session id keep theirs.

        ``tombstone=False`` keeps no dedupe digests: for a source that is itself deleted (a
        conversation removed from the event log), whose id may be used again from seq 1.

        Raises `AccessDenied` for a key that may not write ``workspace``, `EnvelopeError` for a
        bad name (the ingest rules), `NotFound` when the workspace knows nothing of the session. The journal and blob
        deletions are done on return; the graph catches up when ``rebuilding`` is empty.
        """
        check_session_id(session_id)
        check_workspace(workspace)
        _check_workspace_write(workspace, allowed_workspaces)
        known = self.journal.session_count(workspace, session_id)
        if not known and not self.blobs.list(session_id, frozenset({workspace})):
            raise NotFound(f"workspace {workspace!r} has no session {session_id!r}")
        with self.applier.rebuild_after(workspace, [session_id]):  # marked durably before any deletion
            events = self.journal.forget_session(workspace, session_id, tombstone=tombstone)
            blobs = self.blobs.forget_sessions(workspace, [session_id])
        return ForgetResult(workspace, session_id, events, blobs, self.applier.pending_rebuilds())

    def forget_idle_sessions(
        self,
        idle_days: float,
        *,
        workspace: str | None = None,
        allowed_workspaces: frozenset[str] | None = None,
    ) -> RetentionResult:
        """Retention: forget (as `forget_session`, with tombstones) every session, of
        ``workspace`` or of every workspace the caller may write, whose newest event was received
        more than ``idle_days`` days ago. One rebuild and one blob sweep per affected workspace.
        Finding them is one grouped scan of the journal, O(N). A session that receives an event
        while the sweep runs is kept (re-checked inside each deletion's transaction)."""
        if not idle_days > 0:
            raise ValueError(f"idle_days must be a positive number of days, got {idle_days!r}")
        if workspace is not None:
            check_workspace(workspace)
            _check_workspace_write(workspace, allowed_workspaces)
        # float arithmetic, floored at the epoch: a span longer than the clock has run (1e300,
        # inf) means "nothing is that idle", not an int too large for SQLite
        cutoff = int(max(0.0, journal_base.now_ms() - idle_days * 86_400_000.0))
        by_workspace: dict[str, list[str]] = {}
        for ws, session_id in self.journal.idle_sessions(cutoff, workspace):
            if allowed_workspaces is None or ws in allowed_workspaces:
                by_workspace.setdefault(ws, []).append(session_id)
        sessions = events = blobs = 0
        for ws, session_ids in by_workspace.items():
            with self.applier.rebuild_after(ws) as forgotten:
                for session_id in session_ids:
                    count = self.journal.forget_session(ws, session_id, idle_before_ms=cutoff)
                    if count:
                        forgotten.append(session_id)
                        events += count
                blobs += self.blobs.forget_sessions(ws, forgotten)
                sessions += len(forgotten)
        return RetentionResult(idle_days, sessions, events, blobs, self.applier.pending_rebuilds())

    def wait_rebuilt(self, timeout: float = 60.0) -> bool:
        """Block until no workspace rebuild is pending (True) or ``timeout`` seconds pass."""
        return self.applier.wait_rebuilt(timeout)

    # -- status ----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Counters: journal head, applied position, backlog, dead letters, last error."""
        head = self.journal.last_seq()
        applied = self.applier.applied_seq
        return {
            "journal_seq": head,
            "applied_seq": applied,
            "backlog": max(0, head - applied),
            "dead_letters": sum(g.item_count for g in self.journal.dead_letters()),
            "last_error": self.applier.last_error,
            "rebuilding": self.applier.pending_rebuilds(),
            "engine": "embedded" if self.embedded is not None else "server",
            "applying": self.applier.leading,
        }
