"""MemoryEventLog under redelivery and arbitrary batching (hypothesis): the log converges."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from convograph.events import Event
from convograph.graph import create_graph, reduce_events
from convograph.store import MemoryEventLog
from convograph.store.snapshots import FLAT_GRAPH, rebuild
from convograph.testing import sample_run

STREAM: list[Event] = [e for r in range(4) for e in sample_run(f"run-{r}")]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, len(STREAM) - 1), st.integers(1, 8)), min_size=1, max_size=30),
)
def test_redelivered_overlapping_batches_store_each_event_once(slices: list[tuple[int, int]]) -> None:
    """A producer that retries and overlaps windows of one stream (in order) stores it exactly once."""

    async def run() -> None:
        log = MemoryEventLog()
        # Deliver in stream order, with overlapping and repeated windows, then everything once more.
        cursor = 0
        for start, size in sorted(slices):
            window = STREAM[min(start, cursor) : max(start + size, cursor)]
            await log.append("c", window)
            cursor = max(cursor, start + size)
        await log.append("c", STREAM)
        stored = await log.read("c")
        assert [s.event.event_id for s in stored] == [e.event_id for e in STREAM]
        assert [s.seq for s in stored] == list(range(1, len(STREAM) + 1))
        rebuilt = await rebuild(log, "c", FLAT_GRAPH, snapshot_every=7, page_size=5)
        assert rebuilt.state == reduce_events(create_graph(), STREAM)
        info = await log.get_conversation("c")
        assert info is not None
        assert info.status == "complete"

    asyncio.run(run())
