# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
"""Workspace rollups (`Tool`, `ParallelGroup`, `Model`) on a real FalkorDB: they equal the aggregation over
the ToolCalls they summarise, whatever the arrival order, batching and redelivery; a graph written
before them is rolled up on start; the rollup-guided "slowest calls" question equals the full scan."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convograph.intelligence import writer
from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import GraphNames
from tests.test_intelligence_support import falkor, make_service, snapshot  # noqa: F401  (fixture)

DATASET = Path(__file__).parent / "fixtures" / "ci_layers.ndjson"
LINES: list[dict[str, Any]] = [json.loads(line) for line in DATASET.read_text().splitlines()]
WS = LINES[0]["workspace"]

# the literal questions (spec §7.4 Q6, Q7, Q26) and their rollup forms (docs/querying.md)
TOOLS_SCAN = "MATCH (t:ToolCall {workspace: $workspace}) RETURN t.tool_name AS tool, count(*) AS calls"
TOOLS_ROLLUP = "MATCH (s:Tool {workspace: $workspace}) RETURN s.tool_name AS tool, s.calls AS calls"
LONGEST_SCAN = (
    "MATCH (t:ToolCall {workspace: $workspace}) WHERE t.duration_ms IS NOT NULL "
    "RETURN t.tool_name AS tool, max(t.duration_ms) AS ms"
)
LONGEST_ROLLUP = (
    "MATCH (s:Tool {workspace: $workspace}) WHERE s.max_duration_ms IS NOT NULL "
    "RETURN s.tool_name AS tool, s.max_duration_ms AS ms"
)
GROUPS_SCAN = (
    "MATCH (t:ToolCall {workspace: $workspace}) WHERE t.parallel_group_id IS NOT NULL "
    "RETURN t.parallel_group_id AS grp, t.session_id AS session, count(*) AS width"
)
GROUPS_ROLLUP = (
    "MATCH (g:ParallelGroup {workspace: $workspace}) "
    "RETURN g.parallel_group_id AS grp, g.session_id AS session, g.width AS width"
)
SLOWEST_SCAN = (
    "MATCH (t:ToolCall {workspace: $workspace}) WHERE t.duration_ms IS NOT NULL "
    "RETURN t.duration_ms AS ms ORDER BY ms DESC LIMIT $k"
)
SLOWEST_ROLLUP = """
MATCH (tool:Tool {workspace: $workspace}) WHERE tool.max_duration_ms IS NOT NULL
WITH tool.max_duration_ms AS longest ORDER BY longest DESC LIMIT $k
WITH collect(longest) AS maxima
WITH CASE WHEN size(maxima) = $k THEN maxima[$k - 1] ELSE 0 END AS threshold
MATCH (t:ToolCall {workspace: $workspace}) WHERE t.duration_ms >= threshold
WITH t ORDER BY t.duration_ms DESC LIMIT $k
RETURN t.duration_ms AS ms
"""


MODELS_SCAN = (
    "MATCH (e:LlmResponseEvent {workspace: $workspace}) WHERE e.model IS NOT NULL "
    "RETURN e.model AS model, count(*) AS responses"
)
MODELS_ROLLUP = (
    "MATCH (m:Model {workspace: $workspace}) RETURN m.model AS model, m.responses AS responses, "
    "m.input_tokens AS input, m.output_tokens AS output, m.cache_read_input_tokens AS cache_read, "
    "m.cache_creation_input_tokens AS cache_creation"
)


def expected_models() -> list[tuple[Any, ...]]:
    """Responses and token sums per model, computed from the raw events."""
    sums: dict[str, list[int]] = {}
    for line in LINES:
        data = line["data"]
        if line["event"] != "llm:response" or not data.get("model"):
            continue
        usage = data.get("usage") or {}
        totals = sums.setdefault(data["model"], [0, 0, 0, 0, 0])
        totals[0] += 1
        for i, key in enumerate(
            ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        ):
            totals[i + 1] += usage.get(key) or 0
    return sorted((model, *totals) for model, totals in sums.items())


def rows(svc: IntelligenceService, query: str, **params: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(row.values()) for row in svc.cypher(query, params or None, workspace=WS).results)


def assert_rollups_match(svc: IntelligenceService) -> None:
    tools = rows(svc, TOOLS_SCAN)
    assert tools, "the dataset has tool calls"
    assert rows(svc, TOOLS_ROLLUP) == tools
    assert rows(svc, LONGEST_ROLLUP) == rows(svc, LONGEST_SCAN)
    groups = rows(svc, GROUPS_SCAN)
    assert any(width > 1 for _, _, width in groups), "the dataset has parallel fan-outs"
    assert rows(svc, GROUPS_ROLLUP) == groups
    models = expected_models()
    assert sum(row[1] for row in models) > 0, "the dataset has LLM responses"
    assert rows(svc, MODELS_ROLLUP) == models
    assert [row[:2] for row in models] == rows(svc, MODELS_SCAN)


def drop(falkor: FalkorEngine, graph_names: GraphNames) -> None:
    for graph in falkor.graphs():
        if graph.startswith(graph_names.prefix):
            falkor.delete_graph(graph)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.randoms(use_true_random=False))
def test_rollups_equal_the_aggregations_in_any_order_batching_and_redelivery(
    falkor: FalkorEngine, rnd: random.Random
) -> None:
    graph_names = GraphNames(f"r{rnd.getrandbits(40):x}:")
    stream = rnd.sample(LINES, len(LINES))
    stream += rnd.sample(LINES, len(LINES) // 3)  # redelivered copies, anywhere later
    svc = make_service(falkor, graph_names, batch_size=rnd.choice([1, 7, 1000]))
    try:
        for body in stream:
            svc.ingest(body)
        assert svc.wait_applied(timeout=60)
        assert_rollups_match(svc)
        # a replay that bypasses deduplication counts nothing twice
        svc.applier.apply(svc.journal.read_after(0, 100_000))
        assert_rollups_match(svc)
    finally:
        svc.close()
        drop(falkor, graph_names)


def test_a_graph_written_before_the_rollups_is_rolled_up_on_start(
    falkor: FalkorEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph_names = GraphNames("rollup-backfill:")
    svc = make_service(falkor, graph_names)
    try:
        for body in LINES:
            svc.ingest(body)
        assert svc.wait_applied(timeout=60)
        before = snapshot(svc, WS)
        svc.close()
        falkor.execute(
            graph_names.graph(WS), "MATCH (n) WHERE n:Tool OR n:ParallelGroup OR n:Model DETACH DELETE n"
        )
        assert rows(svc, TOOLS_ROLLUP) == []
        svc = make_service(falkor, graph_names)  # the applier's start rolls the old ToolCalls up
        assert snapshot(svc, WS) == before
        assert_rollups_match(svc)
        svc.close()
        # once backfilled, a start skips the scans (the meta mark); writes keep the rollups current
        monkeypatch.setattr(writer, "backfill_rollups", lambda *args: pytest.fail("scanned again"))
        svc = make_service(falkor, graph_names)
        assert_rollups_match(svc)
    finally:
        svc.close()
        drop(falkor, graph_names)


@pytest.mark.parametrize("k", [1, 3, 10, 500])
def test_slowest_calls_through_the_tool_rollup_equal_the_full_scan(falkor: FalkorEngine, k: int) -> None:
    """Exact for any k: with k or more tools, the k-th largest per-tool maximum is reached by k
    distinct calls, so every one of the k slowest calls lies above it; with fewer, it scans all."""
    graph_names = GraphNames(f"rollup-slowest-{k}:")
    svc = make_service(falkor, graph_names)
    try:
        for body in LINES:
            svc.ingest(body)
        assert svc.wait_applied(timeout=60)
        scanned = [row["ms"] for row in svc.cypher(SLOWEST_SCAN, {"k": k}, workspace=WS).results]
        assert scanned
        assert [row["ms"] for row in svc.cypher(SLOWEST_ROLLUP, {"k": k}, workspace=WS).results] == scanned
    finally:
        svc.close()
        drop(falkor, graph_names)
