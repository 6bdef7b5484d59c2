"""The graph applier: journal → (collision ids, blob offload, layer 1) → graph, in batches.

One background thread reads the journal after the *applied cursor*, in seq order (arrival
order; the semantic layers fold each session in event-time order all the same:
`convograph.intelligence.layer_semantic`), up to ``batch_size`` records at a time, and
writes them with the writer's statements (rendered while planning). When only a few records are
waiting it lingers up to ``linger_s`` (100 ms) while more keep arriving (`GraphApplier._linger`),
so events arriving one POST at a time still travel in batches. While a batch is
written, the next one is planned (ids, blob offload, layer-1 rows) on a second thread: the engine
works in its own process and the socket wait releases the GIL, so planning and writing overlap.
The cursor lives in the graph engine beside the graphs it
describes (``__applied__:{prefix}{journal_id}``) and is re-read before every batch, so a graph
that loses data (an older snapshot, a restarted server, a new server) replays from where *its*
data ends, at start-up and while running. Delivery into the graph is at-least-once;
every write is a commutative MERGE, so redelivery, restarts and replays converge.

Collision ids (`resolve_node_ids`): the journal is asked for the collision groups of a batch's
base ids only where a filter of base-id keys (a 2**27-bit set, `GraphApplier._planned`) has seen
the key before: every record the journal held at `GraphApplier.start` and every record planned
since. A clear bit proves that no record the graph may hold shares the base id (anything in a
graph was planned from a journal record, before this start or since), so the event keeps the
seed id for now; a later event that shares it finds the bit set, and its group renames as when a
later-arriving member wins. O(1) per event instead of a key computation and an index probe; the
fill at start is O(N) (~0.6 s of CPU per million records).

Failure policy (upstream §10 B9):

- `EngineUnavailable` (connection refused, server restarting): park and retry the same batch
  with exponential back-off (0.05 s → 5 s); never dead-letter.
- Any other error: apply the batch record by record; a record that still fails is written to
  the journal's dead-letter table with the error and skipped. Dead letters can be listed,
  replayed (moved to the journal tail) and purged.

Workspace rebuilds (`rebuild_after`, used when sessions are forgotten): the applier thread,
between two batches, drops the workspace's graph and replays the workspace's live journal records
up to the applied cursor through the same plan and write path, so the rebuilt graph is what the
journal without the forgotten records produces (the convergence the layers are tested for), with
no per-entity deletion logic to drift from the writers. O(events of the workspace). A pending
rebuild is recorded in the engine's meta before the journal forgets anything, and resumed from
scratch after a restart.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, cast

import msgspec

from convograph.intelligence.blobs import BlobStore, offload_fields
from convograph.intelligence.engine import EngineUnavailable, GraphEngine
from convograph.intelligence.journal import Journal, JournalRecord, event_base_key
from convograph.intelligence.keys import graph_key
from convograph.intelligence.layer1 import LAYER1_HANDLERS, EventFacts, Handler, plan_batch
from convograph.intelligence.lease import ApplierLease
from convograph.intelligence.purge import component_of, purge_component, purge_sessions
from convograph.intelligence.writer import (
    GraphNames,
    Statement,
    backfill_rollups,
    batch_statements,
    ensure_schema,
    rename_collided_events,
    render_statements,
    write_statements,
)

__all__ = ["GraphApplier", "PlannedStage", "Stage", "resolve_node_ids"]

log = logging.getLogger(__name__)

CURSOR_MARK = "__applied__:"
"""Prefix of the applied-journal cursor's meta key (on every graph server: `convograph.intelligence.shards`)."""
REBUILD_MARK = "__rebuild__:"
"""Meta key prefix (+ graph prefix + journal id): JSON ``{workspace: [token, [session ids]]}`` of
pending rebuilds."""
ROLLUPS_MARK = "__rollups__:"
"""Meta key prefix (+ graph key): the rollup version a graph was backfilled to."""
ROLLUPS_VERSION = "2"
"""Bumped when a rollup kind (or a source of rows: conversation ToolCalls, version 2) is added,
so graphs written before it are backfilled once more."""

Stage = Callable[[GraphEngine, GraphNames, Sequence[JournalRecord], Sequence[EventFacts]], None]
"""A later layer: ``(engine, names, records, facts)`` after layer 1 wrote the batch (facts align
with records). It must be idempotent: batches are retried and replayed."""
_decoder = msgspec.json.Decoder(dict[str, Any])
_json = msgspec.json.Encoder()
_FILTER_BITS = 1 << 27
"""Bits of the applier's filter of planned base-id keys (`GraphApplier._planned`): 16 MiB. Its
index is the key's low 27 bits (16 bits of CRC-32 of the base id, 11 of its millisecond); with N
keys set, a new key's false-positive rate is about N / 2**27 (0.75 % at a million)."""
_FILTER_MASK = _FILTER_BITS - 1


def resolve_node_ids(
    records: Sequence[JournalRecord], groups: dict[tuple[str, str], list[str]]
) -> tuple[list[str], dict[str, list[dict[str, str]]]]:
    """Final Event ids and, per workspace, the rename groups the batch touches.

    In a collision group (sorted fingerprints) the smallest fingerprint keeps the seed-format id;
    the others get ``__{fingerprint[:12]}`` appended. Deterministic whatever the arrival order.
    """
    ids: list[str] = []
    renames: dict[str, dict[str, dict[str, str]]] = {}
    for record in records:
        base = graph_key(record.base_id)  # an id the engine cannot key gets its stand-in
        fps = groups.get((record.workspace, record.base_id))
        if not fps:
            ids.append(base)
            continue
        winner = fps[0]
        ids.append(base if record.fingerprint == winner else f"{base}__{record.fingerprint[:12]}")
        renames.setdefault(record.workspace, {})[base] = {"base": base, "winner": winner}
    return ids, {ws: list(g.values()) for ws, g in renames.items()}


def _settled(plan: Future[_Planned] | None) -> Future[_Planned] | None:
    """Let a running plan finish, then drop it (returns ``None``, for ``prefetched =``): two
    plans never run at once, because planned stages fold per-session state in plan order."""
    if plan is not None:
        with contextlib.suppress(Exception):
            plan.result()
    return None


class PlannedStage(Protocol):
    """A later layer split in two: ``plan`` runs with layer 1's planning (on the planner thread,
    batches in seq order, never two at once; a batch may be planned again after a failure),
    ``write`` with layer 1's writes, on the applier thread, in the same order."""

    def plan_stage(
        self, names: GraphNames, records: Sequence[JournalRecord], facts: Sequence[EventFacts]
    ) -> Any: ...

    def write_stage(self, engine: GraphEngine, planned: Any) -> None: ...


class _Mark(msgspec.Struct, array_like=True):
    """A pending workspace rebuild: its token and the sessions whose blobs to sweep again."""

    token: str
    sessions: tuple[str, ...]


class _Planned:
    """A batch ready to write: its records, their facts (kept only for the unplanned stages), the
    rendered layer-1 statements per workspace (in first-seen order), the collision renames and
    the planned stages' plans. Nothing else of the plan is kept: the decoded payloads and the
    layer-1 rows die with the plan instead of waiting (tracked by the cyclic GC, and promoted to
    its oldest generation) until the batch is written."""

    __slots__ = ("extras", "facts", "records", "renames", "statements")

    def __init__(
        self,
        records: Sequence[JournalRecord],
        facts: list[EventFacts],
        renames: dict[str, list[dict[str, str]]],
        statements: dict[str, list[Statement]],
        extras: list[Any],
    ) -> None:
        self.records = records
        self.facts = facts
        self.renames = renames
        self.statements = statements
        self.extras = extras


class GraphApplier:
    """Background thread applying the journal to the graph. See the module docstring."""

    def __init__(
        self,
        journal: Journal,
        engine: GraphEngine,
        blobs: BlobStore,
        *,
        names: GraphNames | None = None,
        batch_size: int = 20000,
        offload_threshold: int = 4096,
        handlers: tuple[Handler, ...] = LAYER1_HANDLERS,
        on_applied: Callable[[int], None] | None = None,
        linger_s: float = 0.1,
        stages: Sequence[Stage] = (),
        planned_stages: Sequence[PlannedStage] = (),
        resets: Sequence[Callable[[], None]] = (),
        session_resets: Sequence[Callable[[str, Collection[str]], None]] = (),
        lease: ApplierLease | None = None,
    ) -> None:
        self.journal = journal
        self.engine = engine
        self.blobs = blobs
        self.names = names or GraphNames()
        self.batch_size = batch_size
        self.offload_threshold = offload_threshold
        self.handlers = handlers
        self.linger_s = linger_s
        self.stages = tuple(stages)  # later layers, run after layer 1 on every applied batch
        self.planned_stages = tuple(planned_stages)  # later layers planned with layer 1 (overlapped)
        self.resets = tuple(resets)  # drop the stages' journal-derived caches before a rebuild
        # drop those of some sessions only (a purged component); without them, `resets` serve
        self.session_resets = tuple(session_resets)
        # outside the graph-name space, so no workspace name can collide with it
        self.cursor_key = f"{CURSOR_MARK}{self.names.prefix}{journal.journal_id}"
        self.rebuild_key = f"{REBUILD_MARK}{self.names.prefix}{journal.journal_id}"
        self._rebuild_lock = threading.Lock()
        self._pending_cache: list[str] = []
        # seq -> the payload the ingest path already decoded (see `hint`)
        self._hints: dict[int, dict[str, Any]] = {}
        self._hint_lock = threading.Lock()
        self.hint_limit = 2 * batch_size
        self.rebuilds_done = 0
        self.purges_done = 0
        """Forgets applied in place (`purge.purge_sessions`) instead of a rebuild."""
        self.purge_in_place = True
        """Apply a layer-1-only forget in place (`purge.purge_sessions`); False always rebuilds."""
        self._purgeable: set[str] = set()
        """Tokens of marks made by this process over a graph that held every earlier forget: only
        those may be purged in place (a mark read at start may follow a purge cut short)."""
        self._schema_ready: dict[str, bool] = {}  # graph -> Events may be CREATEd (unique constraint on)
        self._planned: bytearray | None = None
        """Filter of base-id keys (`_FILTER_BITS`): set for every record the journal held at `start`
        and every record planned since, so a clear bit proves no record the graph may hold shares
        the base id and the journal need not be asked (`_plan`); None (a journal without
        ``base_keys``, or before `start`) asks it for every record."""
        self._applied = 0
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_applied = on_applied
        self.last_error: str | None = None
        self.dead_lettered = 0
        self.lease = lease
        """Several instances share the journal: only the holder of this lease applies it
        (`convograph.intelligence.lease`); the others follow the cursor in the graph store."""
        self.leading = lease is None
        self.idle_poll_s = 0.25 if lease is None else 0.05  # appends elsewhere wake no one here
        self.lease_retry_s = 0.5

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Create the schema of every existing graph, load the cursor, start the thread (with a
        lease: the thread does that once it holds the lease, `_lead`)."""
        if self.lease is None:
            self._take_over()
        self._thread = threading.Thread(target=self._run, name="convograph-ci-applier", daemon=True)
        self._thread.start()

    def _take_over(self) -> None:
        """Start applying from the graph store's cursor with nothing cached: another instance may
        have applied (and folded sessions) since this one last did."""
        for reset in self.resets:
            reset()
        self._schema_ready.clear()
        if self.lease is not None:  # another instance may have cut a purge short meanwhile
            self._purgeable.clear()
        with self._hint_lock:
            self._hints.clear()
        for graph in self.engine.graphs():
            workspace = self.names.workspace(graph)
            if workspace is not None:
                self._ensure_schema(graph)
                self._backfill_rollups(graph, workspace)
        stored = self.engine.get_meta(self.cursor_key)
        self._applied = int(stored) if stored else 0
        self._read_pending()
        self._fill_planned()

    def _lead(self) -> bool:
        """Whether this process applies now: always without a lease; with one, while it holds
        it (checked before every batch), taking over when it becomes free."""
        lease = self.lease
        if lease is None:
            return True
        if self.leading:
            if lease.held():
                return True
            self.leading = False
            self.last_error = "lost the applier lease; following"
            log.warning("lost the applier lease: another instance applies the journal now")
            return False
        if not lease.acquire():
            return False
        try:
            self._take_over()
        except BaseException:
            lease.close()  # let another instance try
            raise
        self.leading = True
        log.info("holding the applier lease: applying the journal from seq %s", self._applied)
        return True

    @contextlib.contextmanager
    def _marks_lock(self) -> Iterator[None]:
        """Rebuild marks are a read-modify-write of one meta key: one writer at a time, in this
        process and (with a lease) across every instance."""
        with self._rebuild_lock, self.lease.mutex() if self.lease is not None else contextlib.nullcontext():
            yield

    def _fill_planned(self) -> None:
        """Set the filter's bit of every record the journal holds (`_planned`): whatever a graph
        may hold was planned from one of them, or is planned by this process later. O(N) once;
        records appended meanwhile are set when planned."""
        base_keys = getattr(self.journal, "base_keys", None)
        if base_keys is None:
            self._planned = None
            return
        bits = bytearray(_FILTER_BITS >> 3)
        mask = _FILTER_MASK
        for key in base_keys():
            index = key & mask
            bits[index >> 3] |= 1 << (index & 7)
        self._planned = bits

    @contextlib.contextmanager
    def rebuild_after(self, workspace: str, session_ids: Collection[str] = ()) -> Iterator[list[str]]:
        """Hold while removing ``workspace`` data (``session_ids``) from the journal: the workspace
        is marked for a rebuild first (durably, in the engine's meta, with a fresh token and the
        sessions), and no rebuild starts or is marked done while the block runs. A crash inside
        the block costs a harmless rebuild, never a graph that keeps what the journal forgot; a
        forget during a rebuild changes the token, so that rebuild runs again. After the rebuild,
        the sessions' blobs are swept once more: a batch planned before the forget may have
        offloaded a field of theirs after the first sweep. The block may append to the list it is
        given the sessions it found only once inside (they join the mark on exit); when it was
        given no sessions and appends none, nothing was removed and no rebuild is left queued."""
        with self._marks_lock():
            pending = self._read_pending()
            previous = pending.get(workspace)
            token = uuid.uuid4().hex
            sessions = {*(previous.sessions if previous is not None else ()), *session_ids}
            pending[workspace] = _Mark(token, tuple(sorted(sessions)))
            if previous is None or previous.token in self._purgeable:
                self._purgeable.add(token)
            self._store_pending(pending)
            found: list[str] = []
            yield found
            if found:
                pending[workspace] = _Mark(token, tuple(sorted({*sessions, *found})))
                self._store_pending(pending)
            elif not session_ids:  # the block removed nothing: the mark goes back to what it was
                if previous is None:
                    del pending[workspace]
                else:
                    pending[workspace] = previous
                self._store_pending(pending)
        self._wake.set()

    def _read_pending(self) -> dict[str, _Mark]:
        stored = self.engine.get_meta(self.rebuild_key)
        pending = dict(msgspec.json.decode(stored, type=dict[str, _Mark])) if stored else {}
        self._pending_cache = sorted(pending)
        return pending

    def _store_pending(self, pending: dict[str, _Mark]) -> None:
        self.engine.set_meta(self.rebuild_key, _json.encode(pending).decode())
        self._pending_cache = sorted(pending)

    def pending_rebuilds(self) -> list[str]:
        """Workspaces waiting for (or in) a rebuild, as last read or written by this process (no
        engine round trip: status pages keep working while the engine is down); an instance that
        does not apply reads them again, as the applying one may have finished some."""
        if not self.leading:
            with contextlib.suppress(EngineUnavailable):
                self._read_pending()
        return list(self._pending_cache)

    def wait_rebuilt(self, timeout: float = 60.0) -> bool:
        """Poll until no rebuild is pending (True) or ``timeout`` seconds pass (False)."""
        deadline = time.monotonic() + timeout
        while self.pending_rebuilds():
            if time.monotonic() >= deadline:
                return False
            self._wake.set()
            time.sleep(0.02)
        return True

    def _run_rebuilds(self, planner: ThreadPoolExecutor | None = None) -> None:
        """Rebuild every pending workspace (applier thread only, no plan in flight); each is
        unmarked when done, unless it was marked again meanwhile."""
        with self._marks_lock():
            pending = self._read_pending()
        for workspace, mark in sorted(pending.items()):
            if self._stop.is_set():
                return
            if mark.sessions:
                # before the graph work: no plan is in flight, so every late offload of a batch
                # planned before the forget has happened; what the replay below offloads again
                # (events of those ids that arrived after the forget) must stay
                self.blobs.forget_sessions(workspace, mark.sessions)
            if not self._purge(workspace, mark):
                self._rebuild(workspace, planner)
            with self._marks_lock():
                now = self._read_pending()
                if workspace in now and now[workspace].token == mark.token:
                    del now[workspace]
                    self._store_pending(now)
                self._purgeable.discard(mark.token)

    def _purge(self, workspace: str, mark: _Mark) -> bool:
        """Remove the mark's sessions from the graph in place: True when done, False when the
        workspace has to be rebuilt instead (a mark this process did not make, a purge that
        declines or fails half way, stages other than the semantic layers' planned stage).

        Layer 1 only: `purge.purge_sessions`, then the sessions' own records since the forget are
        written again. With the semantic layers (which write across sessions): the sessions'
        whole component (`purge.component_of`) is deleted, the layers' fold caches dropped, and
        the records of every session of the component written again, O(component)."""
        if not self.purge_in_place or not mark.sessions or self.stages:
            return False
        if not hasattr(self.journal, "read_session"):
            return False  # the replay below needs it
        if mark.token not in self._purgeable:
            return False
        graph = self.names.graph(workspace)
        layered = bool(self.planned_stages or self.resets)
        try:
            # no graph yet: nothing of the workspace was applied, so nothing to remove
            done = graph not in self.engine.graphs()
            replay: Collection[str] = mark.sessions
            if not done and layered:
                component = component_of(self.engine, graph, workspace, mark.sessions)
                done = purge_component(self.engine, graph, workspace, component)
                if done:
                    replay = {*component.sessions, *mark.sessions}
                    if self.session_resets:
                        for forget_sessions in self.session_resets:
                            forget_sessions(workspace, replay)
                    else:
                        for reset in self.resets:
                            reset()
            elif not done:
                done = purge_sessions(self.engine, graph, workspace, mark.sessions)
            if done:
                self._replay_sessions(workspace, replay)
        except EngineUnavailable:
            self._purgeable.discard(mark.token)  # what it wrote is repaired by the rebuild of the retry
            raise
        except Exception as exc:
            self._purgeable.discard(mark.token)
            log.warning("forgetting sessions of %r in place failed (%s); rebuilding instead", workspace, exc)
            return False
        if done:
            self.purges_done += 1
        else:
            log.info("forgetting %d sessions of %r needs a rebuild", len(mark.sessions), workspace)
        return done

    def _replay_sessions(self, workspace: str, session_ids: Collection[str]) -> None:
        """Write again the live records of ``session_ids`` up to the cursor: events of those ids
        that arrived after the forget are new data, and the batch being applied when the forget
        came may have written them before the purge removed every node of the session."""
        read_session = cast(
            "Callable[[str, str, int], list[JournalRecord]]", getattr(self.journal, "read_session", None)
        )
        records = sorted(
            (r for sid in session_ids for r in read_session(workspace, sid, self._applied + 1)),
            key=lambda record: record.seq,
        )
        for start in range(0, len(records), self.batch_size):
            page = records[start : start + self.batch_size]
            try:
                self._write(self._plan(page))
            except EngineUnavailable:
                raise
            except Exception as exc:
                log.warning(
                    "replaying %d records after a purge failed (%s); isolating records", len(page), exc
                )
                self._isolate(page)

    def _rebuild(self, workspace: str, planner: ThreadPoolExecutor | None = None) -> None:
        """Drop the workspace graph and replay its live journal records up to the cursor, planning
        the next page on ``planner`` while one is written (as the main loop does)."""
        graph = self.names.graph(workspace)
        self.rebuilds_done += 1
        log.info("rebuilding the graph of workspace %r from the journal", workspace)
        for reset in self.resets:
            reset()
        self.engine.delete_graph(graph)
        self._schema_ready.pop(graph, None)
        upto = self._applied
        records = self.journal.read_workspace(workspace, 0, upto, self.batch_size)
        ahead: Future[_Planned] | None = None
        while records and not self._stop.is_set():
            planned: _Planned | None = None
            try:
                planned = ahead.result() if ahead is not None else self._plan(records)
            except Exception as exc:
                log.warning("rebuild planning of %d failed (%s); isolating records", len(records), exc)
            following = self.journal.read_workspace(workspace, records[-1].seq, upto, self.batch_size)
            ahead = planner.submit(self._plan, following) if following and planner is not None else None
            try:
                if planned is not None:
                    try:
                        self._write(planned)
                    except EngineUnavailable:
                        raise
                    except Exception as exc:
                        log.warning("rebuild batch of %d failed (%s); isolating records", len(records), exc)
                        planned = None
                if planned is None:  # isolating plans again: the next page is planned again too
                    ahead = _settled(ahead)
                    self._isolate(records)
            except BaseException:
                _settled(ahead)  # never leave a plan running behind a failed rebuild
                raise
            records = following

    def _backfill_rollups(self, graph: str, workspace: str) -> None:
        """Roll up what ``graph`` holds from before the rollups (`writer.backfill_rollups`), once:
        a meta key records that it ran for `ROLLUPS_VERSION`, so later starts skip the two label
        scans (~3 s on a 1M-event graph). Writes keep the rollups current after that."""
        mark = f"{ROLLUPS_MARK}{graph}"
        if self.engine.get_meta(mark) == ROLLUPS_VERSION:
            return
        rolled = backfill_rollups(self.engine, graph, workspace)
        if rolled:
            log.info(
                "rolled up %d tool calls and LLM responses of %s written before the rollups", rolled, graph
            )
        self.engine.set_meta(mark, ROLLUPS_VERSION)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the current batch."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def hint(self, payloads: dict[int, dict[str, Any]]) -> None:
        """Payloads the ingest path decoded itself, by seq, so planning need not decode the
        journal's bytes again. A cache, never the truth: a missing hint is decoded from the
        record; at most ``hint_limit`` are held (new ones are dropped when full, so a backlog
        keeps the hints of its oldest records, the next to be planned). The caller owns the
        dicts and never mutates them afterwards. O(len(payloads))."""
        if not self.leading:
            return  # another instance plans them
        with self._hint_lock:
            room = self.hint_limit - len(self._hints)
            if room >= len(payloads):
                self._hints.update(payloads)
            elif room > 0:
                for seq, payload in itertools.islice(payloads.items(), room):
                    self._hints[seq] = payload

    def notify(self) -> None:
        """Wake the thread: new records were appended."""
        self._wake.set()

    @property
    def applied_seq(self) -> int:
        """Highest journal seq whose effects are in the graph (an instance that does not apply
        reads the applying one's cursor from the graph store)."""
        if not self.leading:
            with contextlib.suppress(EngineUnavailable):
                stored = self.engine.get_meta(self.cursor_key)
                return int(stored) if stored else 0
        return self._applied

    def wait_applied(self, seq: int, timeout: float = 30.0) -> bool:
        """Block until ``applied_seq >= seq`` (True) or ``timeout`` (False); polled every 20 ms
        where another instance applies."""
        deadline = time.monotonic() + timeout
        while not self.leading:
            if self.applied_seq >= seq:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        with self._cond:
            while self._applied < seq:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    # -- work ----------------------------------------------------------------------------------
    def _ensure_schema(self, graph: str) -> bool:
        """Schema of ``graph`` in place; True when new Events may be written with ``CREATE``."""
        ready = self._schema_ready.get(graph)
        if ready is None:
            ready = self._schema_ready[graph] = ensure_schema(self.engine, graph)
        return ready

    def _run(self) -> None:
        """Apply until stopped. An unexpected error is logged and kept in ``last_error``, and the
        loop restarts from the journal after a pause: the applier thread never dies silently."""
        while not self._stop.is_set():
            try:
                self._run_loop()
            except Exception as exc:
                log.exception("graph applier failed; restarting from the journal")
                self.last_error = f"applier failed: {type(exc).__name__}: {exc}"
                self._stop.wait(1.0)

    def _run_loop(self) -> None:
        backoff = 0.05
        planner = ThreadPoolExecutor(1, thread_name_prefix="convograph-ci-planner")
        prefetched: Future[_Planned] | None = None
        try:
            while not self._stop.is_set():
                if not self._lead():
                    prefetched = _settled(prefetched)
                    self._stop.wait(self.lease_retry_s)
                    continue
                try:
                    if self.lease is not None:
                        self._read_pending()  # another instance may have marked a forget
                    if self._sync_cursor():
                        prefetched = _settled(prefetched)  # the store went back: it is not next any more
                except EngineUnavailable as exc:
                    backoff = self._engine_down(exc, backoff)
                    continue
                try:
                    # this process writes every mark (`rebuild_after`; `start` reads older ones), so
                    # its cache says whether any is pending without an engine round trip per batch
                    if self._pending_cache:
                        # it may hold records planned before a forget (its blob puts are swept
                        # after the rebuild)
                        prefetched = _settled(prefetched)
                        self._run_rebuilds(planner)
                except EngineUnavailable as exc:
                    backoff = self._engine_down(exc, backoff, warn=True)
                    continue
                planned: _Planned | None = None
                if prefetched is not None:
                    try:
                        planned = prefetched.result()
                    except Exception as exc:  # planning failed: redo it inline below, isolating if needed
                        log.warning("prefetched planning failed (%s)", exc)
                    prefetched = None
                if planned is None:
                    records = self.journal.read_after(self._applied, self.batch_size)
                    if not records:
                        self._wake.wait(self.idle_poll_s)
                        self._wake.clear()
                        continue
                    if len(records) < self.batch_size // 4 and self.linger_s > 0:
                        # events trickling in one by one: wait a moment so one batch carries many
                        self._linger()
                        records = self.journal.read_after(self._applied, self.batch_size)
                    try:
                        planned = self._plan(records)
                    except Exception as exc:
                        log.warning("planning %d records failed (%s); isolating records", len(records), exc)
                        try:
                            self._isolate(records)
                        except EngineUnavailable as unavailable:
                            backoff = self._engine_down(unavailable, backoff)
                            continue
                        self._advance(records[-1].seq)
                        continue
                batch: Sequence[JournalRecord] = planned.records
                if not batch:
                    continue
                # plan the following batch while this one is written (the engine runs in another
                # process and the socket wait releases the GIL, so both cores work)
                following = self.journal.read_after(batch[-1].seq, self.batch_size)
                if following and len(following) >= self.batch_size // 4:
                    prefetched = planner.submit(self._plan, following)
                try:
                    self._write(planned)
                except EngineUnavailable as exc:
                    prefetched = _settled(prefetched)
                    backoff = self._engine_down(exc, backoff, warn=True)
                    continue
                except Exception as exc:
                    log.warning("batch of %d failed (%s); isolating records", len(batch), exc)
                    # isolating plans the batch again, record by record: the following batch's
                    # plan continued from the first plan's fold state, so it is planned again too
                    prefetched = _settled(prefetched)
                    try:
                        self._isolate(batch)
                    except EngineUnavailable as unavailable:
                        backoff = self._engine_down(unavailable, backoff)
                        continue
                backoff = 0.05
                self._advance(batch[-1].seq)
        finally:
            planner.shutdown(wait=True, cancel_futures=True)

    def _linger(self) -> None:
        """Wait up to ``linger_s`` for more records while they keep coming, in fifths of it: stop
        after a fifth that brought none (a burst is over: a lone event or an upload waits one
        fifth, 20 ms by default) or once a quarter batch waits; a steady trickle waits it all."""
        step = self.linger_s / 5
        seen = self.journal.last_seq()
        for _ in range(5):
            if self._stop.wait(step):
                return
            latest = self.journal.last_seq()
            if latest == seen or latest - self._applied >= self.batch_size // 4:
                return
            seen = latest

    def _engine_down(self, exc: EngineUnavailable, backoff: float, *, warn: bool = False) -> float:
        """Record the outage, wait ``backoff`` seconds (or until stopped); the next, doubled, wait."""
        self.last_error = f"graph engine unavailable: {exc}"
        if warn:
            log.warning("%s; retrying in %.2fs", self.last_error, backoff)
        self._stop.wait(backoff)
        return min(backoff * 2, 5.0)

    def _sync_cursor(self) -> bool:
        """Rewind if the graph store is behind us (it restarted empty or from an older snapshot)."""
        stored = self.engine.get_meta(self.cursor_key)
        position = int(stored) if stored else 0
        if position < self._applied:
            log.warning(
                "graph store is at seq %s but we applied %s: it lost data; replaying", position, self._applied
            )
            with self._cond:
                self._applied = position
            self._schema_ready.clear()
            return True
        return False

    def _advance(self, seq: int) -> None:
        self.engine.set_meta(self.cursor_key, str(seq))
        with self._cond:
            self._applied = seq
            self._cond.notify_all()
        if self._on_applied is not None:
            self._on_applied(seq)

    def _isolate(self, records: Sequence[JournalRecord]) -> None:
        for record in records:
            try:
                self.apply([record])
            except EngineUnavailable:
                raise
            except Exception as exc:
                self.dead_lettered += 1
                self.last_error = f"seq {record.seq}: {exc}"
                log.error(
                    "dead-lettering seq %s (%s %s): %s", record.seq, record.workspace, record.event, exc
                )
                self.journal.dead_letter(record.seq, f"{type(exc).__name__}: {exc}")

    def apply(self, records: Sequence[JournalRecord]) -> None:
        """Apply ``records`` to the graph (no cursor change). Raises on failure."""
        self._write(self._plan(records))

    def _plan(self, records: Sequence[JournalRecord]) -> _Planned:
        """Everything but the graph writes: ids, blob offload, layer-1 rows. Thread-safe."""
        groups: dict[tuple[str, str], list[str]] = {}
        by_workspace: dict[str, list[tuple[str, int]]] = {}
        bits, mask = self._planned, _FILTER_MASK
        for record in records:
            if bits is not None:
                # the journal is asked only about a base id whose key was seen before (planned, in
                # the journal at start, or earlier in this batch); a first sighting sets the bit
                key = record.base_key
                if key is None:
                    key = event_base_key(record.workspace, record.base_id, record.epoch_ms)
                index = key & mask
                byte, bit = bits[index >> 3], 1 << (index & 7)
                if not byte & bit:
                    bits[index >> 3] = byte | bit
                    continue
            events = by_workspace.get(record.workspace)
            if events is None:  # not setdefault: no throwaway list per record
                events = by_workspace[record.workspace] = []
            events.append((record.base_id, record.epoch_ms))
        for workspace, events in by_workspace.items():
            for base_id, fps in self.journal.collision_groups(workspace, events).items():
                groups[(workspace, base_id)] = fps
        node_ids, renames = resolve_node_ids(records, groups)
        with self._hint_lock:
            pop = self._hints.pop
            hinted = [pop(record.seq, None) for record in records] if self._hints else [None] * len(records)
        hinted.reverse()  # popped from the end below: a payload is let go of once planned
        # `plan_batch` consumes the facts as they are made: each event goes through the handlers
        # as soon as its facts exist, and its facts are kept only for the stages. Without stages
        # the decoded payload dies here, young, instead of being promoted through the cyclic GC's
        # generations while the whole batch is planned (its oldest generation's full passes were
        # ~3 us per event).
        facts: list[EventFacts] = []
        keep = facts.append if self.stages or self.planned_stages else None
        threshold = self.offload_threshold

        def each_fact() -> Iterator[EventFacts]:
            for record, node_id in zip(records, node_ids, strict=True):
                hint = hinted.pop()
                raw = record.data
                data = hint if hint is not None else _decoder.decode(raw)
                # a field's JSON is shorter than the whole payload's (key order does not change
                # the length), so a payload under the threshold has nothing to offload (most events)
                stored = (
                    data
                    if isinstance(raw, bytes) and len(raw) < threshold
                    else offload_fields(
                        self.blobs,
                        workspace=record.workspace,
                        session_id=record.session_id,
                        base_id=record.base_id,
                        fingerprint=record.fingerprint,
                        data=data,
                        threshold=threshold,
                    )
                )
                fact = EventFacts(  # positional: workspace, event, session_id, epoch_ms, fingerprint,
                    record.workspace,  # node_id, data, stored_data, created_by, data_json
                    record.event,
                    record.session_id,
                    record.epoch_ms,
                    record.fingerprint,
                    node_id,
                    data,
                    stored,
                    record.created_by,
                    raw.decode() if isinstance(raw, bytes) else str(raw),
                )
                if keep is not None:
                    keep(fact)
                yield fact

        batch = plan_batch(each_fact(), self.handlers)
        statements = {
            workspace: render_statements(self.engine, batch_statements(rows))
            for workspace, rows in batch.workspaces.items()
        }
        extras = [stage.plan_stage(self.names, records, facts) for stage in self.planned_stages]
        return _Planned(records, facts, renames, statements, extras)

    def _write(self, planned: _Planned) -> None:
        """The graph writes of a planned batch, then the later-layer stages."""
        for workspace in planned.statements:
            graph = self.names.graph(workspace)
            create = self._ensure_schema(graph)
            rename_collided_events(self.engine, graph, workspace, planned.renames.get(workspace, []))
            write_statements(self.engine, graph, planned.statements[workspace], create=create)
        for planned_stage, extra in zip(self.planned_stages, planned.extras, strict=True):
            planned_stage.write_stage(self.engine, extra)
        for stage in self.stages:
            stage(self.engine, self.names, planned.records, planned.facts)
