# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
"""Plan tests: every write statement finds its nodes through an index (upstream's 1.3M-node
AllNodesScan stall, spec §5.5) and merges edges with Expand Into."""

from __future__ import annotations

import pytest

from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.writer import (
    _EVENTS,
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
)
from tests.test_intelligence_support import falkor, names  # noqa: F401

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
    if "-[" in STATEMENTS[name]:
        assert "Expand Into" in plan


def test_write_batch_of_nothing_issues_nothing(falkor: FalkorEngine, names: GraphNames) -> None:
    from convograph.intelligence.layer1 import WorkspaceBatch

    assert write_batch(falkor, names.graph("w"), WorkspaceBatch("w")) == 0
