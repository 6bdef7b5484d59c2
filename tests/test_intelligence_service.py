"""Durability: restarts, graph loss and dead letters with the default on-disk stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from convograph.intelligence.embedded import EmbeddedFalkorDB
from convograph.intelligence.engine import EngineError
from convograph.intelligence.service import IntelligenceService
from tests.test_intelligence_support import SID, WS, ev, session_stream


def picture(svc: IntelligenceService) -> Any:
    from tests.test_intelligence_support import snapshot

    return snapshot(svc)


def test_restart_keeps_graph_journal_and_idempotency(tmp_path: Path) -> None:
    stream = session_stream()
    svc = IntelligenceService.open(tmp_path)
    for body in stream[:10]:
        svc.ingest(body)
    assert svc.wait_applied(timeout=30)
    svc.close()
    again = IntelligenceService.open(tmp_path)
    try:
        statuses = [again.ingest(body).status for body in stream]
        assert statuses == ["duplicate"] * 10 + ["queued"] * (len(stream) - 10)
        assert again.wait_applied(timeout=30)
        restarted = picture(again)
    finally:
        again.close()
    fresh_dir = tmp_path / "fresh"
    fresh = IntelligenceService.open(fresh_dir)
    try:
        for body in stream:
            fresh.ingest(body)
        assert fresh.wait_applied(timeout=30)
        assert picture(fresh) == restarted
    finally:
        fresh.close()


def test_a_lost_graph_is_rebuilt_from_the_journal(tmp_path: Path) -> None:
    svc = IntelligenceService.open(tmp_path)
    for body in session_stream():
        svc.ingest(body)
    assert svc.wait_applied(timeout=30)
    before = picture(svc)
    svc.close()
    for stale in (tmp_path / "intelligence" / "falkordb").glob("*.rdb"):
        stale.unlink()  # the graph store lost everything; the journal did not
    again = IntelligenceService.open(tmp_path)
    try:
        assert again.wait_applied(timeout=30)
        assert picture(again) == before
    finally:
        again.close()


def test_stale_embedded_server_is_detected_and_replaced(tmp_path: Path) -> None:
    first = EmbeddedFalkorDB(tmp_path)
    first.start()
    stale_pid = first.pid
    assert stale_pid is not None
    # simulate a crashed owner: forget the child without stopping it
    first._process = None
    first._closed = True
    second = EmbeddedFalkorDB(tmp_path)
    try:
        second.start()
        assert second.stale_pid_stopped == stale_pid
        assert (
            not Path(f"/proc/{stale_pid}").exists()
            or "zombie" in Path(f"/proc/{stale_pid}/status").read_text()
        )
        assert second.pid != stale_pid
    finally:
        second.close()
    assert second.pid is None


def test_poison_events_are_dead_lettered_not_retried_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = IntelligenceService.open(tmp_path)
    try:
        real = svc.applier.handlers

        def poisoned(facts, batch):  # type: ignore[no-untyped-def]
            if facts.data.get("poison"):
                raise EngineError("deterministic failure for this event")

        monkeypatch.setattr(svc.applier, "handlers", (poisoned, *real))
        svc.ingest(ev("session:start", 1))
        svc.ingest(ev("prompt:submit", 2, poison=True))
        svc.ingest(ev("prompt:submit", 3, prompt="fine"))
        assert svc.wait_applied(timeout=30)
        (group,) = svc.dead_letters()
        assert (group.key, group.workspace, group.item_count) == (SID, WS, 1)
        assert "deterministic failure" in group.last_error
        prompts = svc.cypher("MATCH (e:PromptSubmitEvent) RETURN e.prompt AS p", workspace=WS).results
        assert prompts == [{"p": "fine"}]
        monkeypatch.setattr(svc.applier, "handlers", real)  # the bug is fixed: replay it
        assert svc.replay_dead_letters(SID) == 1
        assert svc.wait_applied(timeout=30)
        assert svc.dead_letters() == []
        assert len(svc.cypher("MATCH (e:PromptSubmitEvent) RETURN e", workspace=WS).results) == 2
    finally:
        svc.close()


def test_a_crashed_embedded_child_is_restarted_and_the_graph_replayed(tmp_path: Path) -> None:
    import os
    import signal

    stream = session_stream()
    svc = IntelligenceService.open(tmp_path)
    try:
        for body in stream[:8]:
            svc.ingest(body)
        assert svc.wait_applied(timeout=30)
        assert svc.embedded is not None
        old_pid = svc.embedded.pid
        assert old_pid is not None
        os.kill(old_pid, signal.SIGKILL)  # no snapshot: the restarted child comes back empty
        for body in stream[8:]:
            svc.ingest(body)
        assert svc.wait_applied(timeout=60)
        assert svc.embedded.pid not in (None, old_pid)
        events = svc.cypher("MATCH (e:Event) RETURN count(e) AS n", workspace=WS).results
        assert events == [{"n": len(stream)}]
        assert svc.dead_letters() == []
    finally:
        svc.close()


def test_a_restart_waits_while_a_large_snapshot_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-server answers nothing while it loads a big ``falkordb.rdb`` (10 s for a 1M-event
    graph): the start allows time by snapshot size and treats a read timeout as "still loading"."""
    import redis

    from convograph.intelligence import embedded as embedded_module

    first = EmbeddedFalkorDB(tmp_path)
    first.start().execute("g", "CREATE (:X {v: 1})")
    first.close()
    size = (tmp_path / "falkordb.rdb").stat().st_size
    assert size > 0
    # no start budget of its own: only the snapshot allowance (here ~30 s) lets the start wait
    monkeypatch.setattr(embedded_module, "LOAD_BYTES_PER_S", size / 30)
    timeouts = iter(range(3))
    real_ping = redis.Redis.ping

    def ping_as_while_loading(self: redis.Redis, **kwargs: Any) -> Any:
        if next(timeouts, None) is not None:
            raise redis.TimeoutError("Timeout reading from socket")
        return real_ping(self, **kwargs)

    monkeypatch.setattr(redis.Redis, "ping", ping_as_while_loading)
    second = EmbeddedFalkorDB(tmp_path, start_timeout=0.0)
    try:
        assert second._load_allowance() == pytest.approx(30.0)
        assert second.start().execute("g", "MATCH (x:X) RETURN x.v", read_only=True).rows == [[1]]
    finally:
        second.close()
