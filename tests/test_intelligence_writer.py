# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
"""Plan tests: every write statement finds its nodes through an index (upstream's 1.3M-node
AllNodesScan stall, spec §5.5) and merges edges with Expand Into. The CREATE form of the Event
statements builds the same graph as the MERGE form, and falls back to it when nodes exist."""

from __future__ import annotations

import logging

import pytest

from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import (
    _EVENTS,
    _EVENTS_NEW,
    _FORKED,
    _FORKS,
    _RENAME,
    _ROOT,
    _SESSIONS,
    _TOOL_CALLS,
    GraphNames,
    _positional,
    ensure_schema,
    write_batch,
    write_statements,
)
from tests.test_intelligence_support import (  # noqa: F401
    falkor,
    make_service,
    names,
    session_stream,
    snapshot,
)

SESSION_ROW = {
    "id": 0,
    "start": 1,
    "start_iso": 2,
    "last": 3,
    "last_iso": 4,
    "end": 5,
    "end_iso": 6,
    "rank": 7,
    "status": 8,
    "fork_parent": 9,
    "start_parent": 10,
    "agent": 11,
}
TOOL_ROW = {
    "id": 0,
    "sid": 1,
    "tcid": 2,
    "name": 3,
    "group": 4,
    "start": 5,
    "start_iso": 6,
    "end": 7,
    "end_iso": 8,
    "success": 9,
    "error": 10,
    "out_bytes": 11,
    "events": 12,
}
STATEMENTS = {
    "sessions": _positional(_SESSIONS, [SESSION_ROW])[0],
    "root": _ROOT,
    "forked": _FORKED,
    "events": _EVENTS.format(assignments="e:ToolEvent:ToolPreEvent, e.`tool_name` = row[2]"),
    "events_new": _EVENTS_NEW.format(
        labels=":ToolEvent:ToolPreEvent", properties="node_id: row[0], workspace: $ws, `tool_name`: row[2]"
    ),
    "tool_calls": _positional(_TOOL_CALLS, [TOOL_ROW])[0],
    "forks": _positional(_FORKS, [{"parent": 0, "child": 1, "at": 2}])[0],
    "rename": _RENAME,
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_write_statements_use_index_lookups(falkor: FalkorEngine, names: GraphNames, name: str) -> None:
    graph = names.graph("w")
    ensure_schema(falkor, graph)
    plan = "\n".join(
        falkor.command("GRAPH.EXPLAIN", graph, 'CYPHER rows=[] ids=[] groups=[] ws="w" ' + STATEMENTS[name])
    )
    assert "All Node Scan" not in plan
    assert "Label Scan" not in plan
    assert "Node By Index Scan" in plan
    if "-[" in STATEMENTS[name] and "CREATE (" not in STATEMENTS[name]:
        assert "Expand Into" in plan


def test_write_batch_of_nothing_issues_nothing(falkor: FalkorEngine, names: GraphNames) -> None:
    from convograph.intelligence.layer1 import WorkspaceBatch

    assert write_batch(falkor, names.graph("w"), WorkspaceBatch("w")) == 0


def test_schema_reports_the_event_unique_constraint(falkor: FalkorEngine, names: GraphNames) -> None:
    graph = names.graph("w")
    assert ensure_schema(falkor, graph) is True
    assert ensure_schema(falkor, graph) is True  # idempotent
    falkor.command("GRAPH.CONSTRAINT", "DROP", graph, "UNIQUE", "NODE", "Event", "PROPERTIES", 1, "node_id")
    falkor.execute(graph, "MATCH (n) RETURN n")  # the graph still exists
    assert ensure_schema(falkor, graph, wait_s=5.0) is True  # re-created


def _planned(svc: IntelligenceService) -> tuple[str, list]:  # type: ignore[type-arg]
    records = svc.journal.read_after(0, 10_000)
    planned = svc.applier._plan(records)
    ((workspace, statements),) = planned.statements.items()  # rendered, as the applier writes them
    return workspace, statements


def test_create_form_builds_the_merge_form_graph_and_falls_back_on_existing_events(
    falkor: FalkorEngine, names: GraphNames, caplog: pytest.LogCaptureFixture
) -> None:
    stream = session_stream()
    graphs = []
    for label, create in (("merge", False), ("create", True)):
        svc = make_service(falkor, GraphNames(f"{names.prefix}{label}:"))
        svc.applier.stop()  # the test drives the writes
        try:
            for body in stream:
                svc.ingest(body)
            workspace, statements = _planned(svc)
            graph = svc.names.graph(workspace)
            assert ensure_schema(falkor, graph)
            assert any(s.merge_text for s in statements)
            write_statements(falkor, graph, statements, create=create)
            graphs.append(snapshot(svc, workspace))
            if create:
                # the same batch again (a replay): CREATE is refused, the MERGE form converges
                caplog.set_level(logging.INFO, logger="convograph.intelligence.writer")
                write_statements(falkor, graph, statements, create=True)
                assert "writing the batch with MERGE" in caplog.text
                assert snapshot(svc, workspace) == graphs[0]
                dupes = falkor.execute(
                    graph, "MATCH (e:Event) WITH e.node_id AS id, count(*) AS c WHERE c > 1 RETURN id"
                ).rows
                assert dupes == []
        finally:
            svc.close()
            for graph in falkor.graphs():
                if graph.startswith(f"{names.prefix}{label}:"):
                    falkor.delete_graph(graph)
    assert graphs[0] == graphs[1]
    assert len(graphs[0]["nodes"]) > len(stream)  # sessions, tool calls and every event
