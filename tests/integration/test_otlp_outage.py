"""OTLP ingest through an event-log outage (a real Redis the test stops and restarts): the request
fails with `BackendUnavailable` (the receiver answers 503, retryable), nothing is half-stored, and
an agent span that a failed request had released is held again, so the client's retry stores it."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.genai_traces import TRACE, weather_trace

from convograph.events import HarnessStart
from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
from convograph.integrations.otlp import OtlpIngestor
from convograph.projections import project_messages
from convograph.store import BackendUnavailable, open_event_log
from convograph.testing import MemoryEventLog

RedisServer = Any  # the fixture's type lives in tests/integration/conftest.py


async def history(log: Any) -> list[dict[str, Any]]:
    events = [stored.event for stored in await log.read(TRACE)]
    conversation = reduce_conversation_events(create_conversation(), events)
    return project_messages(conversation, default_active(conversation), format="anthropic")


async def test_a_failed_request_leaves_nothing_half_done(redis_server: RedisServer) -> None:
    spans = weather_trace()
    cut = next(index for index, span in enumerate(spans) if span.name == "execute_tool research")
    log = await open_event_log(redis_server.url)
    try:
        ingestor = OtlpIngestor(log)
        report = await ingestor.ingest(spans[:cut])  # the subagent ended; its tool span has not
        assert report.held == 1
        stored_before = len(await log.read(TRACE))
        redis_server.stop()
        with pytest.raises(BackendUnavailable):
            await ingestor.ingest(spans[cut:])  # releases the subagent, then cannot store
        assert ingestor.held_count == 1  # held again, not lost
        redis_server.start()
        assert len(await log.read(TRACE)) == stored_before  # nothing of the failed request
        await ingestor.ingest(spans[cut:])  # the exporter's retry
        assert ingestor.held_count == 0
        starts = {
            event.agent_id: event.parent_id
            for stored in await log.read(TRACE)
            if isinstance(event := stored.event, HarnessStart)
        }
        assert starts == {"researcher": "call_1", "weather": None}
        reference = MemoryEventLog()
        await OtlpIngestor(reference).ingest(spans)
        assert await history(log) == await history(reference)
    finally:
        await log.close()
