"""Shared fixtures and helpers for the context-intelligence tests (no tests in this module).

The embedded FalkorDB child is started once per test session; every test gets its own graph
prefix, so tests never see each other's graphs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from convograph.intelligence.blobs import MemoryBlobStore
from convograph.intelligence.embedded import EmbeddedFalkorDB
from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.journal import MemoryJournal
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import GraphNames

SID = "f881e0a0-c055-4ee4-84ed-ff44703150ea"
CHILD = "a1b2c3d4e5f67890-abcdef1234567890_foundation:explorer"
WS = "-home-alice-repos-api"


@pytest.fixture(scope="session")
def falkor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FalkorEngine]:
    embedded = EmbeddedFalkorDB(tmp_path_factory.mktemp("falkordb"))
    engine = embedded.start()
    yield engine
    embedded.close()


@pytest.fixture
def names(falkor: FalkorEngine) -> Iterator[GraphNames]:
    graph_names = GraphNames(f"t{uuid.uuid4().hex[:10]}:")
    yield graph_names
    for graph in falkor.graphs():
        if graph.startswith(graph_names.prefix):
            falkor.delete_graph(graph)


def make_service(engine: FalkorEngine, names: GraphNames, **options: Any) -> IntelligenceService:
    service = IntelligenceService(MemoryJournal(), engine, MemoryBlobStore(), names=names, **options)
    service.start()
    return service


@pytest.fixture
def service(falkor: FalkorEngine, names: GraphNames) -> Iterator[IntelligenceService]:
    svc = make_service(falkor, names)
    yield svc
    svc.close()


def envelope(
    event: str, data: dict[str, Any], *, workspace: str = WS, key: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"event": event, "workspace": workspace, "data": data}
    if key is not None:
        body["idempotency_key"] = key
    return body


def ev(event: str, ms: int, session: str = SID, **fields: Any) -> dict[str, Any]:
    """Envelope for ``event`` at 2026-03-15T06:02:25.{ms} UTC-ish (epoch 1742018545000 + ms)."""
    from convograph.intelligence.layer1 import iso_ms

    data = {"session_id": session, "timestamp": iso_ms(1742018545000 + ms), **fields}
    return envelope(event, data)


def snapshot(svc: IntelligenceService, workspace: str = WS) -> dict[str, Any]:
    """Order-independent picture of a workspace graph: nodes (labels, props) and edges."""
    nodes = svc.cypher(
        "MATCH (n {workspace: $workspace}) RETURN labels(n) AS labels, properties(n) AS props",
        workspace=workspace,
    ).results
    edges = svc.cypher(
        "MATCH (a {workspace: $workspace})-[r]->(b) RETURN a.node_id AS a, type(r) AS t, b.node_id AS b",
        workspace=workspace,
    ).results
    return {
        "nodes": sorted(
            msgspec.json.encode([sorted(n["labels"]), n["props"]], order="sorted").decode() for n in nodes
        ),
        "edges": sorted((e["a"], e["t"], e["b"]) for e in edges),
    }


def session_stream() -> list[dict[str, Any]]:
    """A small seed-shaped stream: root session, tool calls (one parallel pair, one failing), a fork."""
    return [
        ev("session:start", 0, parent_id=None),
        ev("prompt:submit", 10, prompt="fix the bug"),
        ev("llm:request", 20, model="claude-sonnet-4-5", provider="anthropic"),
        ev("llm:response", 30, model="claude-sonnet-4-5", provider="anthropic", usage={"input_tokens": 5}),
        ev(
            "tool:pre",
            40,
            tool_name="bash",
            tool_call_id="call_a",
            tool_input={"command": "ls"},
            parallel_group_id="g1",
        ),
        ev(
            "tool:pre",
            40,
            tool_name="grep",
            tool_call_id="call_b",
            tool_input={"pattern": "x"},
            parallel_group_id="g1",
        ),
        ev(
            "tool:post",
            55,
            tool_name="bash",
            tool_call_id="call_a",
            result={"success": True, "output": "a.py", "error": None},
        ),
        ev(
            "tool:post",
            60,
            tool_name="grep",
            tool_call_id="call_b",
            result={"success": False, "output": None, "error": {"message": "bad pattern"}},
        ),
        ev(
            "delegate:agent_spawned",
            70,
            parent_session_id=SID,
            sub_session_id=CHILD,
            agent="foundation:explorer",
            tool_call_id="call_c",
        ),
        ev(
            "session:fork",
            80,
            session=CHILD,
            parent=SID,
            metadata={"agent_name": "foundation:explorer", "tool_call_id": "call_c"},
        ),
        ev("session:start", 81, session=CHILD, parent_id=SID),
        ev(
            "tool:pre", 90, session=CHILD, tool_name="read_file", tool_call_id="call_d", tool_input={"p": "x"}
        ),
        ev(
            "tool:error",
            95,
            session=CHILD,
            tool_name="read_file",
            tool_call_id="call_d",
            error={"type": "FileNotFoundError", "msg": "no such file"},
        ),
        ev("session:end", 99, session=CHILD, status="completed", parent_id=SID),
        ev("skill:loaded", 100, skill_name="python-testing", skill_directory="/skills/pt"),
        ev("session:end", 120, status="failed"),
    ]
