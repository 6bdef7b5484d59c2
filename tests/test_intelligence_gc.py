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


def test_a_planned_batch_keeps_its_payloads_only_for_the_stages() -> None:
    import weakref
    from collections.abc import Sequence
    from typing import Any

    from convograph.intelligence.blobs import MemoryBlobStore
    from convograph.intelligence.ingest import GraphApplier
    from convograph.intelligence.journal import JournalRecord

    class Payload(dict[str, Any]):  # a dict that can be weakly referenced
        pass

    journal = MemoryJournal()
    bodies = [
        {"event": e, "workspace": "w", "data": {"session_id": "S", "timestamp": f"2026-03-02T09:00:0{i}Z"}}
        for i, e in enumerate(("session:start", "tool:pre", "prompt:submit"))
    ]
    results = journal.append([parse_envelope(body) for body in bodies])
    records = journal.read_after(0, 10)
    seen: list[Sequence[Any]] = []

    def stage(engine: Any, names: Any, records: Sequence[JournalRecord], facts: Sequence[EventFacts]) -> None:
        seen.append(facts)

    for stages, kept in (((), False), ((stage,), True)):
        applier = GraphApplier(journal, engine=object(), blobs=MemoryBlobStore(), stages=stages)  # type: ignore[arg-type]
        payloads = {r.seq: Payload(body["data"]) for r, body in zip(results, bodies, strict=True) if r.seq}
        refs = [weakref.ref(p) for p in payloads.values()]
        applier.hint(payloads)
        del payloads
        planned = applier._plan(records)
        assert list(planned.statements) == ["w"]
        assert [r() is not None for r in refs] == [kept] * len(refs)  # alive only while a stage needs them
        assert len(planned.facts) == (len(records) if kept else 0)
