"""Turning a batch into stored events: duplicate detection and seq assignment (pure, shared by backends)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec

from convograph.events import Event, EventError
from convograph.events.codec import check_ids
from convograph.events.types import _Event
from convograph.store.base import StoredEvent

__all__ = ["assign_seqs", "check_events", "event_ids_of"]


def check_events(events: Sequence[Event]) -> None:
    """Reject anything that is not an `Event`, or an event whose id holds NUL (`check_ids`: events
    built as Python objects skip `parse_event`), before any of the batch is stored."""
    for index, event in enumerate(events):
        if not isinstance(event, _Event):
            raise EventError(
                f"expected an Event, got {type(event).__name__}; parse wire input with parse_event first",
                index=index,
            )
        try:
            check_ids(event)
        except EventError as exc:
            raise exc.located(index=index) from None


def event_ids_of(events: Sequence[Event]) -> list[str]:
    """The ``eventId`` values present in ``events`` (in order, repeats kept)."""
    return [e.event_id for e in events if e.event_id is not None]


def assign_seqs(
    conversation_id: str,
    events: Sequence[Event],
    known_ids: Collection[str],
    last_seq: int,
    received_at: float,
) -> tuple[list[StoredEvent], tuple[int, ...]]:
    """Stored events for the accepted part of ``events`` and the indexes of duplicates.

    An event is a duplicate when its ``eventId`` is in ``known_ids`` or appeared earlier in the batch.
    Accepted events get seqs ``last_seq + 1, last_seq + 2, ...``. O(len(events)).
    """
    stored: list[StoredEvent] = []
    duplicates: list[int] = []
    seen: set[str] = set()
    seq = last_seq
    replace = msgspec.structs.replace
    for index, event in enumerate(events):
        event_id = event.event_id
        if event_id is not None:
            if event_id in seen or event_id in known_ids:
                duplicates.append(index)
                continue
            seen.add(event_id)
        seq += 1
        stored.append(
            StoredEvent(
                seq=seq,
                conversation_id=conversation_id,
                event=replace(event, seq=seq),
                received_at=received_at,
            )
        )
    return stored, tuple(duplicates)
