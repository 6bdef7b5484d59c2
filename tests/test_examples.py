"""The bundled example stream: committed file matches its generator and has what it promises."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from convograph import create_graph, reduce_events
from convograph.events import parse_ndjson
from convograph.examples import example_ndjson, multi_agent_events

EXAMPLE_FILE = Path(__file__).resolve().parents[1] / "examples" / "multi-agent.ndjson"


def test_committed_example_matches_generator() -> None:
    assert EXAMPLE_FILE.read_bytes() == example_ndjson()


def test_example_is_valid_and_rich() -> None:
    batch = parse_ndjson(example_ndjson())
    assert batch.ok
    types = Counter(event.type for event in batch.events)
    for required in (
        "user",
        "reasoning",
        "tool_call",
        "tool_result",
        "tool_progress",
        "relay",
        "usage",
        "error",
    ):
        assert types[required] > 0, required
    graph = reduce_events(create_graph(), batch.events)
    assert not graph.pending_parents
    assert not graph.diagnostics
    # The subagent hangs under the agent tool call.
    assert "run-sub:harness_start" in graph.edges["run-agent/call-agent"]
    # Every event carries a unique eventId, so replaying the example twice changes nothing.
    assert reduce_events(graph, batch.events) is graph
    assert len({event["eventId"] for event in multi_agent_events()}) == len(batch.events)
