# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
"""Forgetting a session on a real FalkorDB: the graph equals one built without it, nothing comes back."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convograph.intelligence.blobs import LocalBlobStore, MemoryBlobStore
from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.journal import MemoryJournal, SqliteJournal
from convograph.intelligence.query import AccessDenied
from convograph.intelligence.service import IntelligenceService, NotFound
from convograph.intelligence.writer import GraphNames
from tests.test_intelligence_support import falkor, snapshot  # noqa: F401  (fixture)

DATASET = Path(__file__).resolve().parent / "fixtures" / "ci_layers.ndjson"
LINES: list[dict[str, Any]] = [json.loads(x) for x in DATASET.read_text(encoding="utf-8").splitlines()]
WS = LINES[0]["workspace"]
ROOT = "8201e2bd-73ab-4876-b734-d7c1c7fde805"  # a root session with forks below it
FORK = "3a1b793d5c0ef226-a6dc0aa866545e14_zen-architect"  # one of them (its parent stays)
BIG = "x" * 6000  # over the offload threshold: the field goes to the blob store


def with_blobs(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The dataset plus, per session, one tool:post whose result is offloaded to a blob."""
    out = list(lines)
    for sid in sorted({line["data"]["session_id"] for line in lines}):
        out.append(
            {
                "event": "tool:post",
                "workspace": WS,
                "data": {
                    "session_id": sid,
                    "timestamp": "2026-03-02T09:00:00.000+00:00",
                    "tool_name": "bash",
                    "tool_call_id": f"blob_{sid[:8]}",
                    "result": {"success": True, "output": f"{sid} {BIG}"},
                },
            }
        )
    return out


class Services:
    def __init__(self, engine: FalkorEngine, tmp_path: Path) -> None:
        self.engine = engine
        self.tmp_path = tmp_path
        self.prefixes: list[str] = []
        self.open: list[IntelligenceService] = []

    def make(
        self, *, durable: bool = False, prefix: str | None = None, layers: bool = True, **options: Any
    ) -> IntelligenceService:
        """A started service; ``layers=False`` runs layer 1 only, where a forget is applied in place
        (`purge.purge_sessions`) instead of a rebuild."""
        if prefix is None:
            prefix = f"f{uuid.uuid4().hex[:10]}:"
            self.prefixes.append(prefix)
        if durable:
            root = self.tmp_path / prefix.rstrip(":")
            journal: Any = SqliteJournal(root / "journal.sqlite3")
            blobs: Any = LocalBlobStore(root / "blobs")
        else:
            journal, blobs = MemoryJournal(), MemoryBlobStore()
        svc = IntelligenceService(
            journal, self.engine, blobs, names=GraphNames(prefix), semantic_layers=layers, **options
        )
        svc.start()
        self.open.append(svc)
        return svc

    def reopen(self, svc: IntelligenceService, *, layers: bool = True) -> IntelligenceService:
        """A new service, not started, on the durable journal and blobs of ``svc`` (made with
        ``durable=True``): a restart after a crash, ``svc``'s applier never ran to the end."""
        svc.journal.close()
        root = self.tmp_path / svc.names.prefix.rstrip(":")
        restarted = IntelligenceService(
            SqliteJournal(root / "journal.sqlite3"),
            self.engine,
            LocalBlobStore(root / "blobs"),
            names=GraphNames(svc.names.prefix),
            semantic_layers=layers,
        )
        self.open.append(restarted)
        return restarted


@pytest.fixture
def services(falkor: FalkorEngine, tmp_path: Path) -> Iterator[Services]:
    made = Services(falkor, tmp_path)
    yield made
    for svc in made.open:
        svc.close()
    for graph in falkor.graphs():
        if any(graph.startswith(p) for p in made.prefixes):
            falkor.delete_graph(graph)


def ingest(svc: IntelligenceService, lines: list[dict[str, Any]]) -> None:
    svc.ingest_many(lines)
    assert svc.wait_applied(timeout=120)
    assert svc.applier.dead_lettered == 0, svc.applier.last_error


def session_nodes(svc: IntelligenceService, sid: str) -> int:
    """Nodes holding the session's own data: its events, tool calls and derived entities (a
    ``:Session`` node the *parent's* events name, e.g. a delegation's sub-session, is not one)."""
    rows = svc.cypher(
        "MATCH (n) WHERE NOT n:Session AND (n.session_id = $sid OR n.node_id STARTS WITH $events"
        " OR n.node_id STARTS WITH $derived) RETURN count(n) AS c",
        {"sid": sid, "events": f"{sid}__", "derived": f"{sid}::"},
        workspace=WS,
    ).results
    return int(rows[0]["c"])


@pytest.mark.parametrize(
    ("layers", "in_place"),
    [(True, True), (False, True), (True, False)],
    ids=["layers", "layer1", "layers-rebuilt"],
)
@pytest.mark.parametrize("durable", [False, True], ids=["memory", "sqlite+local"])
@pytest.mark.parametrize("forgotten", [ROOT, FORK], ids=["root", "fork"])
def test_the_graph_after_forgetting_equals_the_graph_built_without_the_session(
    services: Services, durable: bool, forgotten: str, layers: bool, in_place: bool
) -> None:
    lines = with_blobs(LINES)
    kept = [line for line in lines if line["data"]["session_id"] != forgotten]
    svc = services.make(durable=durable, layers=layers)
    svc.applier.purge_in_place = in_place
    ingest(svc, lines)
    assert session_nodes(svc, forgotten) > 0
    assert svc.list_blobs(forgotten)
    result = svc.forget_session(WS, forgotten)
    assert result.events == sum(1 for line in lines if line["data"]["session_id"] == forgotten)
    assert result.blobs == 1
    assert result.rebuilding == [WS]
    assert svc.wait_rebuilt(timeout=120)
    assert svc.wait_applied(timeout=120)
    assert svc.status()["rebuilding"] == []
    assert svc.list_blobs(forgotten) == []
    assert session_nodes(svc, forgotten) == 0
    # in place (layer 1 alone by session, with the semantic layers by component), or rebuilt
    assert (svc.applier.purges_done, svc.applier.rebuilds_done) == ((1, 0) if in_place else (0, 1))
    reference = services.make(durable=durable, layers=layers)
    ingest(reference, kept)
    expected = snapshot(reference, WS)
    assert snapshot(svc, WS) == expected
    # redelivery (the hook client re-sends everything) changes nothing
    again = svc.ingest_many(lines)
    assert again.accepted == 0
    assert svc.wait_applied(timeout=120)
    assert snapshot(svc, WS) == expected
    # new events go on as usual after the rebuild
    extra = {
        "event": "session:start",
        "workspace": WS,
        "data": {"session_id": "after-forget", "timestamp": "2026-03-03T00:00:00.000+00:00"},
    }
    ingest(svc, [extra])
    ingest(reference, [extra])
    assert snapshot(svc, WS) == snapshot(reference, WS)


@pytest.mark.parametrize("layers", [True, False], ids=["layers", "layer1"])
def test_events_arriving_during_the_rebuild_are_applied_once(services: Services, layers: bool) -> None:
    lines = with_blobs(LINES)
    half = len(lines) // 2
    svc = services.make(batch_size=97, layers=layers)  # small batches: the forget interleaves with ingest
    ingest(svc, lines[:half])
    svc.forget_session(WS, FORK)
    svc.ingest_many(lines[half:])
    assert svc.wait_rebuilt(timeout=120)
    assert svc.wait_applied(timeout=120)
    # the session's events that arrive after the forget were never seen: they are new data
    reference = services.make(layers=layers)
    ingest(reference, [line for line in lines[:half] if line["data"]["session_id"] != FORK] + lines[half:])
    assert snapshot(svc, WS) == snapshot(reference, WS)
    # so is the field one of them offloaded (the forget's blob sweeps ran before it was replayed)
    assert svc.list_blobs(FORK) == reference.list_blobs(FORK) != []


def test_a_pending_rebuild_survives_a_restart(services: Services) -> None:
    svc = services.make(durable=True)
    ingest(svc, LINES)
    reference = services.make()
    ingest(reference, [line for line in LINES if line["data"]["session_id"] != FORK])
    svc.applier.stop()  # the rebuild cannot run before the "crash"
    svc.forget_session(WS, FORK)
    assert svc.status()["rebuilding"] == [WS]
    assert session_nodes(svc, FORK) > 0
    # a batch planned before the forget offloads a field of the session after the blob sweep
    svc.blobs.put(WS, FORK, "late-offload", b'"planned before the forget"')
    assert svc.list_blobs(FORK) == [f"ci-blob://{FORK}/late-offload"]
    restarted = services.reopen(svc)
    restarted.start()
    assert restarted.wait_rebuilt(timeout=120)
    assert restarted.wait_applied(timeout=120)
    assert session_nodes(restarted, FORK) == 0
    assert restarted.list_blobs(FORK) == []  # swept again after the rebuild
    assert snapshot(restarted, WS) == snapshot(reference, WS)


def test_unknown_sessions_bad_names_and_other_workspaces_are_refused(services: Services) -> None:
    svc = services.make()
    ingest(svc, LINES[:50])
    sid = LINES[0]["data"]["session_id"]
    with pytest.raises(NotFound):
        svc.forget_session(WS, "no-such-session")
    with pytest.raises(NotFound):
        svc.forget_session("other-workspace", sid)
    with pytest.raises(AccessDenied):
        svc.forget_session(WS, sid, allowed_workspaces=frozenset({"other-workspace"}))
    from convograph.intelligence.envelope import EnvelopeError

    with pytest.raises(EnvelopeError, match="session_id"):
        svc.forget_session(WS, "a/b")
    with pytest.raises(EnvelopeError, match="workspace"):
        svc.forget_session(" ", sid)
    with pytest.raises(NotFound):  # a workspace name with '/' is valid (as in ingest), just unknown here
        svc.forget_session("team/a", sid)
    assert svc.status()["rebuilding"] == []  # nothing refused queued a rebuild
    assert session_nodes(svc, sid) > 0


def test_retention_forgets_sessions_idle_for_longer_than_the_limit(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from convograph.intelligence import journal_base as journal_module

    day = 86_400_000
    clock = {"now": 100 * day}
    monkeypatch.setattr(journal_module, "now_ms", lambda: clock["now"])
    lines = with_blobs(LINES)
    sessions = sorted({line["data"]["session_id"] for line in lines})
    old = set(sessions[: len(sessions) // 2])
    old_lines = [line for line in lines if line["data"]["session_id"] in old]
    new_lines = [line for line in lines if line["data"]["session_id"] not in old]
    svc = services.make(durable=True)
    ingest(svc, old_lines)
    clock["now"] = 140 * day
    ingest(svc, new_lines)
    with pytest.raises(ValueError, match="idle_days"):
        svc.forget_idle_sessions(0)
    assert svc.forget_idle_sessions(30, allowed_workspaces=frozenset({"elsewhere"})).sessions == 0
    result = svc.forget_idle_sessions(30)
    assert result.sessions == len(old)
    assert result.events == len(old_lines)
    assert result.blobs == len(old)
    assert svc.wait_rebuilt(timeout=120)
    assert svc.wait_applied(timeout=120)
    for sid in old:
        assert svc.list_blobs(sid) == []
    reference = services.make()
    ingest(reference, new_lines)
    assert snapshot(svc, WS) == snapshot(reference, WS)
    again = svc.forget_idle_sessions(30)
    assert again.sessions == 0
    assert again.rebuilding == []  # nothing removed: no rebuild queued
    assert svc.ingest_many(old_lines).accepted == 0  # tombstoned


def _reversed_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _reversed_keys(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed_keys(item) for item in value]
    return value


def test_payloads_handed_over_by_the_ingest_path_build_the_graph_a_replay_builds(services: Services) -> None:
    """Bytes bodies reach the planner as the dicts ingest decoded (sender's key order, `hint`);
    dict bodies are decoded again from the journal (canonical order). Same graph, blobs included."""
    lines = with_blobs(LINES)
    hinted = services.make(durable=True)
    hinted.ingest_many([json.dumps(_reversed_keys(line)).encode() for line in lines])
    assert hinted.wait_applied(timeout=120)
    assert not hinted.applier.hints.held  # every hint was used (or none would be needed)
    decoded = services.make(durable=True)
    ingest(decoded, lines)
    assert snapshot(hinted, WS) == snapshot(decoded, WS)
    sid = lines[0]["data"]["session_id"]
    assert [hinted.read_blob(sid, uri.rsplit("/", 1)[1]) for uri in hinted.list_blobs(sid)] == [
        decoded.read_blob(sid, uri.rsplit("/", 1)[1]) for uri in decoded.list_blobs(sid)
    ]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_forgets_at_any_point_of_the_stream_leave_the_graph_of_what_remains(
    services: Services, data: st.DataObject
) -> None:
    """Property: ingest the stream in random chunks and batch sizes, forgetting random sessions
    between chunks; the graph equals a fresh graph of the events that remain (a forgotten
    session's later events are new data), and re-sending everything changes nothing."""
    lines = with_blobs(LINES)
    cuts = sorted(data.draw(st.lists(st.integers(1, len(lines) - 1), min_size=1, max_size=4, unique=True)))
    chunks = [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True)]
    layers = data.draw(st.booleans())
    svc = services.make(batch_size=data.draw(st.sampled_from([53, 400, 20000])), layers=layers)
    remaining: list[dict[str, Any]] = []
    for chunk in chunks:
        svc.ingest_many(chunk)
        remaining.extend(chunk)
        seen = sorted({line["data"]["session_id"] for line in remaining})
        if seen:
            for sid in data.draw(st.lists(st.sampled_from(seen), max_size=2, unique=True)):
                svc.forget_session(WS, sid)
                remaining = [line for line in remaining if line["data"]["session_id"] != sid]
    assert svc.wait_rebuilt(timeout=120)
    assert svc.wait_applied(timeout=120)
    assert svc.applier.rebuilds_done == 0
    reference = services.make(layers=layers)
    ingest(reference, remaining)
    assert snapshot(svc, WS) == snapshot(reference, WS)
    svc.ingest_many(lines)  # everything again: forgotten events are tombstoned, the rest known
    assert svc.wait_applied(timeout=120)
    assert snapshot(svc, WS) == snapshot(reference, WS)


def test_an_isolated_batch_with_a_plan_in_flight_keeps_the_semantic_folds_right(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch write fails once (not an outage): the applier isolates it record by record while
    the next batch was already planned (its fold continued from the failed one). The result must
    still be the graph of the stream."""
    from convograph.intelligence import ingest as ingest_module

    real = ingest_module.write_statements
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected write failure")
        real(*args, **kwargs)

    monkeypatch.setattr(ingest_module, "write_statements", flaky)
    svc = services.make(batch_size=120)
    svc.ingest_many(LINES)
    assert svc.wait_applied(timeout=120)
    assert calls["n"] > 3
    assert svc.applier.dead_lettered == 0
    monkeypatch.setattr(ingest_module, "write_statements", real)
    reference = services.make()
    ingest(reference, LINES)
    assert snapshot(svc, WS) == snapshot(reference, WS)


def test_a_rebuild_block_that_removes_nothing_leaves_the_marks_as_they_were(services: Services) -> None:
    svc = services.make()
    svc.applier.stop()  # nothing runs the rebuilds: the marks stay as written
    with svc.applier.rebuild_after(WS):
        pass
    assert svc.applier.pending_rebuilds() == []
    with svc.applier.rebuild_after(WS, ["S1"]):
        pass
    with svc.applier.rebuild_after(WS) as found:
        assert found == []
    assert svc.applier.pending_rebuilds() == [WS]
    assert svc.applier.marks.read()[WS].sessions == ("S1",)
    with svc.applier.rebuild_after(WS) as found:
        found.append("S2")
    assert svc.applier.marks.read()[WS].sessions == ("S1", "S2")


def test_a_purge_that_fails_half_way_is_repaired_by_a_rebuild(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-place purge is not atomic: when a statement fails after others ran, the applier
    rebuilds the workspace instead, so the graph still equals a fresh build of what remains."""
    import convograph.intelligence.purge as purge_module

    svc = services.make(layers=False)
    ingest(svc, with_blobs(LINES))
    real = purge_module._RECOUNT_TOOLS
    monkeypatch.setattr(
        purge_module, "_RECOUNT_TOOLS", real.replace("SET x.calls", "SET x.calls = nosuchfn(), x.c")
    )
    svc.forget_session(WS, ROOT)  # events and tool calls go, then the Tool recount fails
    assert svc.wait_rebuilt(timeout=120)
    assert (svc.applier.purges_done, svc.applier.rebuilds_done) == (0, 1)
    reference = services.make(layers=False)
    ingest(reference, [line for line in with_blobs(LINES) if line["data"]["session_id"] != ROOT])
    assert snapshot(svc, WS) == snapshot(reference, WS)


def test_forgetting_a_parent_and_its_forks_together_leaves_no_stub(services: Services) -> None:
    """A forgotten parent stays as a bare node while a remaining session forks from it; forgotten
    with all its forks, nothing of it stays (nor of a parent only its forks named)."""
    forks = sorted(
        {
            line["data"]["session_id"]
            for line in LINES
            if line["data"].get("parent_id") == ROOT or line["event"] == "session:fork"
        }
    )
    svc = services.make(layers=False)
    ingest(svc, LINES)
    svc.applier.stop()
    for sid in [ROOT, *forks]:
        svc.forget_session(WS, sid)
    svc.applier._stop.clear()
    svc.applier.start()
    assert svc.wait_rebuilt(timeout=120)
    assert (svc.applier.purges_done, svc.applier.rebuilds_done) == (1, 0)  # one mark, all sessions
    reference = services.make(layers=False)
    ingest(reference, [line for line in LINES if line["data"]["session_id"] not in {ROOT, *forks}])
    assert snapshot(svc, WS) == snapshot(reference, WS)


def test_a_forget_marked_before_a_restart_is_rebuilt_not_purged(services: Services) -> None:
    """A mark read at start may follow an in-place purge cut short by a crash: only a rebuild is
    sure to repair that, so it gets one (and a later forget in the same workspace too)."""
    svc = services.make(durable=True, layers=False)
    ingest(svc, LINES)
    svc.applier.stop()
    svc.forget_session(WS, FORK)
    restarted = services.reopen(svc, layers=False)
    restarted.applier._stop.set()  # hold the rebuild until a second forget joins the mark
    restarted.start()
    restarted.applier._thread.join()  # type: ignore[union-attr]
    restarted.forget_session(WS, ROOT)
    restarted.applier._stop.clear()
    restarted.applier.start()
    assert restarted.wait_rebuilt(timeout=120)
    assert (restarted.applier.purges_done, restarted.applier.rebuilds_done) == (0, 1)
    reference = services.make(layers=False)
    ingest(reference, [line for line in LINES if line["data"]["session_id"] not in {FORK, ROOT}])
    assert snapshot(restarted, WS) == snapshot(reference, WS)


def test_a_component_purge_keeps_the_fold_state_of_every_other_session(services: Services) -> None:
    """Only the component's sessions fold again from the journal; a session elsewhere in the
    workspace goes on from its cached state (a full reset would re-fold every active session)."""
    lonely = "aebf7e0e-4b98-44ea-aba9-b6c811267bdd"  # a component of its own in the fixture
    other = ROOT
    svc = services.make(layers=True)
    last_of_other = max(i for i, line in enumerate(LINES) if line["data"]["session_id"] == other)
    ingest(svc, [line for i, line in enumerate(LINES) if i != last_of_other])
    layer = svc.applier.planned_stages[0]
    svc.forget_session(WS, lonely)
    assert svc.wait_rebuilt(timeout=120)
    assert svc.applier.purges_done == 1
    refolds = layer.rebuilds  # type: ignore[attr-defined]
    ingest(svc, [LINES[last_of_other]])
    assert layer.rebuilds == refolds  # type: ignore[attr-defined]
    reference = services.make(layers=True)
    ingest(reference, [line for line in LINES if line["data"]["session_id"] != lonely])
    assert snapshot(svc, WS) == snapshot(reference, WS)
