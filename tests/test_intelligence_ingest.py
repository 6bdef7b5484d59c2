"""`convograph.intelligence.ingest.GraphApplier` on its own: how long it lingers for a batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from convograph.intelligence.blobs import MemoryBlobStore
from convograph.intelligence.envelope import parse_envelope
from convograph.intelligence.ingest import GraphApplier
from convograph.intelligence.journal import MemoryJournal


def _envelope(i: int) -> Any:
    return parse_envelope(
        {
            "event": "tool:pre",
            "workspace": "w",
            "data": {"session_id": "S", "timestamp": f"2026-03-02T09:00:00.{i % 1000:03d}Z", "n": i},
        }
    )


class _Clock:
    """Fake waits for `GraphApplier._linger`: ``wait`` records its timeout and lets ``arrive`` append."""

    def __init__(self, arrive: Callable[[], None]) -> None:
        self.waits: list[float] = []
        self.arrive = arrive
        self.stopped = False

    def wait(self, timeout: float) -> bool:
        self.waits.append(round(timeout, 6))
        self.arrive()
        return self.stopped


def _linger(monkeypatch: pytest.MonkeyPatch, journal: MemoryJournal, clock: _Clock, **kwargs: Any) -> None:
    applier = GraphApplier(journal, engine=object(), blobs=MemoryBlobStore(), **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(applier, "_stop", clock)
    applier._linger()


def test_a_lone_event_or_a_finished_burst_waits_one_fifth(monkeypatch: pytest.MonkeyPatch) -> None:
    journal = MemoryJournal()
    journal.append([_envelope(0)])
    clock = _Clock(lambda: None)
    _linger(monkeypatch, journal, clock, linger_s=0.1)
    assert clock.waits == [0.02]


def test_a_steady_trickle_waits_the_whole_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    journal = MemoryJournal()
    arrivals = iter(range(1, 100))
    clock = _Clock(lambda: journal.append([_envelope(next(arrivals))]))
    _linger(monkeypatch, journal, clock, linger_s=0.1)
    assert clock.waits == [0.02] * 5


def test_lingering_ends_once_a_quarter_batch_waits_or_on_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    journal = MemoryJournal()
    arrivals = iter(range(0, 1000, 10))
    clock = _Clock(lambda: journal.append([_envelope(i) for i in range(next(arrivals), next(arrivals))]))
    _linger(monkeypatch, journal, clock, linger_s=0.1, batch_size=40)  # 10 records a fifth, 10 needed
    assert clock.waits == [0.02]
    stopping = _Clock(lambda: journal.append([_envelope(999)]))
    stopping.stopped = True
    _linger(monkeypatch, journal, stopping, linger_s=0.1)
    assert stopping.waits == [0.02]
