"""The per-event objects of the ingest path stay out of the cyclic GC (they cannot form cycles):
tracking them made GC passes ~20 % of the ingest process's CPU (docs/intelligence.md)."""

from __future__ import annotations

import gc

from convograph.intelligence.envelope import parse_envelope
from convograph.intelligence.journal import MemoryJournal
from convograph.intelligence.layer1 import EventFacts, SessionRow, ToolCallRow


def test_per_event_structs_are_not_tracked() -> None:
    envelope = parse_envelope(
        {
            "event": "tool:post",
            "workspace": "w",
            "data": {"session_id": "S", "timestamp": "2026-03-02T09:00:00Z", "result": {"output": [1]}},
        }
    )
    assert not gc.is_tracked(envelope)
    journal = MemoryJournal()
    [result] = journal.append([envelope])
    assert not gc.is_tracked(result)
    [record] = journal.read_after(0, 10)
    assert not gc.is_tracked(record)
    facts = EventFacts("w", "tool:post", "S", 0, "f", "n", envelope.data, envelope.data)
    assert not gc.is_tracked(facts)
    assert not gc.is_tracked(SessionRow("S"))
    assert not gc.is_tracked(ToolCallRow("t", "S", "c"))
