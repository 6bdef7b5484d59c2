"""Conversation status, derived from harness events only (a pure fold).

- ``idle``: no run has started yet;
- ``active``: at least one run has a ``harness_start`` without its ``harness_end``;
- ``complete``: every run has ended and the last ending was normal;
- ``error``: every run has ended and the last ending was a failure (an ``error`` event, or a
  ``harness_end`` whose ``reason`` is ``"error"``).

An ``error`` event with a ``runId`` also closes that run. The fold is order-sensitive only in the way
the events are (it is replayed in seq order), and redelivering an event that the log skips as a
duplicate never reaches it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from convograph.events import Error, Event, HarnessEnd, HarnessStart

__all__ = ["ACTIVE", "COMPLETE", "ERROR", "IDLE", "RunTally", "fold_status"]

IDLE: Final = "idle"
ACTIVE: Final = "active"
COMPLETE: Final = "complete"
ERROR: Final = "error"


class RunTally(msgspec.Struct, frozen=True):
    """Open run ids and the outcome of the most recent ending."""

    open_runs: tuple[str, ...] = ()
    last_outcome: str = IDLE

    @property
    def status(self) -> str:
        return ACTIVE if self.open_runs else self.last_outcome


_RELEVANT: Final = frozenset({HarnessStart, HarnessEnd, Error})


def fold_status(tally: RunTally, events: Iterable[Event]) -> RunTally:
    """The tally after ``events``. O(len(events) + open runs)."""
    open_runs = list(tally.open_runs)
    outcome = tally.last_outcome
    changed = False
    for event in events:
        kind = type(event)
        if kind not in _RELEVANT:
            continue
        if isinstance(event, HarnessStart):
            if event.run_id not in open_runs:
                open_runs.append(event.run_id)
                changed = True
        elif isinstance(event, HarnessEnd):
            if event.run_id in open_runs:
                open_runs.remove(event.run_id)
            outcome = ERROR if event.reason == "error" else COMPLETE
            changed = True
        elif isinstance(event, Error):
            if event.run_id is not None and event.run_id in open_runs:
                open_runs.remove(event.run_id)
            outcome = ERROR
            changed = True
    if not changed:
        return tally
    return RunTally(tuple(open_runs), outcome)
