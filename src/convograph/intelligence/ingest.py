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

Planning (collision ids, blob offload, layer-1 rows): `convograph.intelligence.batch_plan`.

Failure policy (upstream §10 B9):

- `EngineUnavailable` (connection refused, server restarting): park and retry the same batch
  with exponential back-off (0.05 s → 5 s); never dead-letter.
- Any other error: apply the batch record by record; a record that still fails is written to
  the journal's dead-letter table with the error and skipped. Dead letters can be listed,
  replayed (moved to the journal tail) and purged.

Workspace rebuilds (`rebuild_after`, used when sessions are forgotten): between two batches the
applier drops the workspace's graph and replays its live journal records up to the cursor
(`convograph.intelligence.rebuild_marks`), or purges the forgotten sessions in place.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from convograph.intelligence.batch_plan import (
    PayloadHints,
    PlannedBatch,
    PlannedStage,
    base_id_filter,
    collision_candidates,
    record_facts,
    resolve_node_ids,
)
from convograph.intelligence.blobs import BlobStore
from convograph.intelligence.engine import EngineUnavailable, GraphEngine
from convograph.intelligence.journal import Journal, JournalRecord
from convograph.intelligence.layer1 import LAYER1_HANDLERS, EventFacts, Handler, plan_batch
from convograph.intelligence.lease import ApplierLease
from convograph.intelligence.prefetch import Prefetch, journal_pages, write_pages
from convograph.intelligence.purge import purge_forgotten
from convograph.intelligence.rebuild_marks import REBUILD_MARK, RebuildMark, RebuildMarks
from convograph.intelligence.writer import (
    GraphNames,
    backfill_rollups_once,
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
Stage = Callable[[GraphEngine, GraphNames, Sequence[JournalRecord], Sequence[EventFacts]], None]
"""A later layer: ``(engine, names, records, facts)`` after layer 1 wrote the batch (facts align
with records). It must be idempotent: batches are retried and replayed."""


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
        self.marks = RebuildMarks(engine, self.rebuild_key, lease)
        # seq -> the payload the ingest path already decoded (see `hint`)
        self.hints = PayloadHints(limit=2 * batch_size)
        self.rebuilds_done = 0
        self.purges_done = 0
        """Forgets applied in place (`purge.purge_sessions`) instead of a rebuild."""
        self.purge_in_place = True
        """Apply a layer-1-only forget in place (`purge.purge_sessions`); False always rebuilds."""
        self._schema_ready: dict[str, bool] = {}  # graph -> Events may be CREATEd (unique constraint on)
        self._planned: bytearray | None = None
        """Filter of base-id keys (`batch_plan.FILTER_BITS`): set for every record the journal held
        at `start` and every record planned since, so a clear bit proves no record the graph may
        hold shares the base id and the journal need not be asked (`_plan`); None (a journal
        without ``base_keys``, or before `start`) asks it for every record."""
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
        self._backoff = 0.05
        """The next wait after the engine was found down (`_engine_down`)."""

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
            self.marks.purgeable.clear()
        self.hints.clear()
        for graph in self.engine.graphs():
            workspace = self.names.workspace(graph)
            if workspace is not None:
                self._ensure_schema(graph)
                backfill_rollups_once(self.engine, graph, workspace)
        stored = self.engine.get_meta(self.cursor_key)
        self._applied = int(stored) if stored else 0
        self.marks.read()
        # every record the journal holds sets its bit: whatever a graph may hold was planned from
        # one of them, or is planned by this process later (O(N) once)
        base_keys = getattr(self.journal, "base_keys", None)
        self._planned = base_id_filter(base_keys()) if base_keys is not None else None

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
        with self.marks.marked(workspace, session_ids) as found:
            yield found
        self._wake.set()

    def pending_rebuilds(self) -> list[str]:
        """Workspaces waiting for (or in) a rebuild, as last read or written by this process (no
        engine round trip: status pages keep working while the engine is down); an instance that
        does not apply reads them again, as the applying one may have finished some."""
        if not self.leading:
            with contextlib.suppress(EngineUnavailable):
                self.marks.read()
        return list(self.marks.cached)

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
        with self.marks.locked():
            pending = self.marks.read()
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
            self.marks.done(workspace, mark)

    def _purge(self, workspace: str, mark: RebuildMark) -> bool:
        """Remove the mark's sessions from the graph in place: True when done, False when the
        workspace has to be rebuilt instead (a mark this process did not make, a purge that
        declines or fails half way, stages other than the semantic layers' planned stage);
        `purge.purge_forgotten` says what it removes and which sessions are written again."""
        if not self.purge_in_place or not mark.sessions or self.stages:
            return False
        if not hasattr(self.journal, "read_session"):
            return False  # the replay below needs it
        if mark.token not in self.marks.purgeable:
            return False
        layered = bool(self.planned_stages or self.resets)
        try:
            replay = purge_forgotten(
                self.engine,
                self.names.graph(workspace),
                workspace,
                mark.sessions,
                layered,
                self._forget_folds,
            )
            done = replay is not None
            if replay is not None:
                self._replay_sessions(workspace, replay)
        except EngineUnavailable:
            self.marks.purgeable.discard(mark.token)  # what it wrote is repaired by the rebuild of the retry
            raise
        except Exception as exc:
            self.marks.purgeable.discard(mark.token)
            log.warning("forgetting sessions of %r in place failed (%s); rebuilding instead", workspace, exc)
            return False
        if done:
            self.purges_done += 1
        else:
            log.info("forgetting %d sessions of %r needs a rebuild", len(mark.sessions), workspace)
        return done

    def _forget_folds(self, workspace: str, session_ids: Collection[str]) -> None:
        """Drop the later layers' fold caches of ``session_ids`` (all of them without per-session
        resets), before their records are written again."""
        if self.session_resets:
            for forget_sessions in self.session_resets:
                forget_sessions(workspace, session_ids)
        else:
            for reset in self.resets:
                reset()

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
        write_pages(
            journal_pages(lambda after: self.journal.read_workspace(workspace, after, upto, self.batch_size)),
            plan=self._plan,
            write=self._write,
            isolate=self._isolate,
            planner=planner,
            stop=self._stop,
            what="rebuild",
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the current batch."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def hint(self, payloads: dict[int, dict[str, Any]]) -> None:
        """Payloads the ingest path decoded itself, by seq (`batch_plan.PayloadHints`). The
        caller owns the dicts and never mutates them afterwards. O(len(payloads))."""
        if self.leading:  # else another instance plans them
            self.hints.add(payloads)

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
        """Each turn: take the lead (or wait for it), catch up with the graph store, run pending
        rebuilds (`_ready`), then plan and write one batch (`_apply_next`)."""
        self._backoff = 0.05
        prefetch = Prefetch()
        try:
            while not self._stop.is_set():
                if self._ready(prefetch):
                    self._apply_next(prefetch)
        finally:
            prefetch.close()

    def _ready(self, prefetch: Prefetch) -> bool:
        """Whether to apply a batch now (after the rebuilds pending); False after a wait (not
        leading, the engine down)."""
        if not self._lead():
            prefetch.drop()
            self._stop.wait(self.lease_retry_s)
            return False
        try:
            if self.lease is not None:
                self.marks.read()  # another instance may have marked a forget
            if self._sync_cursor():
                prefetch.drop()  # the store went back: it is not next any more
        except EngineUnavailable as exc:
            self._backoff = self._engine_down(exc, self._backoff)
            return False
        try:
            # this process writes every mark (`rebuild_after`; `start` reads older ones), so
            # its cache says whether any is pending without an engine round trip per batch
            if self.marks.cached:
                # it may hold records planned before a forget (its blob puts are swept
                # after the rebuild)
                prefetch.drop()
                self._run_rebuilds(prefetch.planner)
        except EngineUnavailable as exc:
            self._backoff = self._engine_down(exc, self._backoff, warn=True)
            return False
        return True

    def _next_batch(self, prefetch: Prefetch) -> PlannedBatch | None:
        """The plan run ahead, else the records after the cursor (lingering while a few trickle
        in) planned here; None after waiting for records, or when planning failed (the records
        are isolated and the cursor moves past them)."""
        planned = prefetch.take()
        if planned is not None:
            return planned
        records = self.journal.read_after(self._applied, self.batch_size)
        if not records:
            self._wake.wait(self.idle_poll_s)
            self._wake.clear()
            return None
        if len(records) < self.batch_size // 4 and self.linger_s > 0:
            # events trickling in one by one: wait a moment so one batch carries many
            self._linger()
            records = self.journal.read_after(self._applied, self.batch_size)
        try:
            return self._plan(records)
        except Exception as exc:
            log.warning("planning %d records failed (%s); isolating records", len(records), exc)
        try:
            self._isolate(records)
        except EngineUnavailable as unavailable:
            self._backoff = self._engine_down(unavailable, self._backoff)
            return None
        self._advance(records[-1].seq)
        return None

    def _apply_next(self, prefetch: Prefetch) -> None:
        """Write the next batch (`_next_batch`) while the one after it is planned, and advance."""
        planned = self._next_batch(prefetch)
        if planned is None or not planned.records:
            return
        batch: Sequence[JournalRecord] = planned.records
        # plan the following batch while this one is written (the engine runs in another
        # process and the socket wait releases the GIL, so both cores work)
        following = self.journal.read_after(batch[-1].seq, self.batch_size)
        if following and len(following) >= self.batch_size // 4:
            prefetch.submit(self._plan, following)
        try:
            self._write(planned)
        except EngineUnavailable as exc:
            prefetch.drop()
            self._backoff = self._engine_down(exc, self._backoff, warn=True)
            return
        except Exception as exc:
            log.warning("batch of %d failed (%s); isolating records", len(batch), exc)
            # isolating plans the batch again, record by record: the following batch's
            # plan continued from the first plan's fold state, so it is planned again too
            prefetch.drop()
            try:
                self._isolate(batch)
            except EngineUnavailable as unavailable:
                self._backoff = self._engine_down(unavailable, self._backoff)
                return
        self._backoff = 0.05
        self._advance(batch[-1].seq)

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

    def _plan(self, records: Sequence[JournalRecord]) -> PlannedBatch:
        """Everything but the graph writes: ids, blob offload, layer-1 rows. Thread-safe."""
        groups: dict[tuple[str, str], list[str]] = {}
        for workspace, events in collision_candidates(records, self._planned).items():
            for base_id, fps in self.journal.collision_groups(workspace, events).items():
                groups[(workspace, base_id)] = fps
        node_ids, renames = resolve_node_ids(records, groups)
        hinted = self.hints.take(records)
        facts: list[EventFacts] = []  # kept only for the stages
        keep = facts.append if self.stages or self.planned_stages else None
        each_fact = record_facts(
            records, node_ids, hinted, blobs=self.blobs, threshold=self.offload_threshold, keep=keep
        )
        batch = plan_batch(each_fact, self.handlers)
        statements = {
            workspace: render_statements(self.engine, batch_statements(rows))
            for workspace, rows in batch.workspaces.items()
        }
        extras = [stage.plan_stage(self.names, records, facts) for stage in self.planned_stages]
        return PlannedBatch(records, facts, renames, statements, extras)

    def _write(self, planned: PlannedBatch) -> None:
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
