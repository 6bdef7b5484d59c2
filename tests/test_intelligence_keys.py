"""Node ids the graph engine can hold: `graph_key` and the ids that used to crash FalkorDB."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convograph.intelligence.envelope import EnvelopeError, parse_envelope
from convograph.intelligence.keys import MAX_KEY_BYTES, graph_key, is_graph_safe
from convograph.intelligence.service import IntelligenceService
from tests.test_intelligence_support import SID, WS, ev

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=300) | st.sampled_from(
    ["a ", " a", "a\t", "\n", "a\x01b", "x" * 5000, "é" * 600, "~", " ~ "]
)


@given(_text)
def test_a_key_is_safe_idempotent_and_the_value_itself_when_safe(value: str) -> None:
    key = graph_key(value)
    assert is_graph_safe(key)
    assert graph_key(key) == key
    if is_graph_safe(value):
        assert key == value


@given(_text, _text)
def test_different_values_get_different_keys(a: str, b: str) -> None:
    if a != b:
        assert graph_key(a) != graph_key(b)


@pytest.mark.parametrize(
    "value", ["bash ", " bash", "bash\t", "bash\n", "bash\x0b", "bash\x0c", "bash\r", "ba\x01sh", "b" * 5000]
)
def test_values_the_engine_cannot_key_are_replaced(value: str) -> None:
    assert not is_graph_safe(value)
    key = graph_key(value)
    assert key.startswith(value.replace("\x01", "").strip()[:8])
    assert len(key.encode()) <= MAX_KEY_BYTES


@pytest.mark.parametrize(
    "session_id", [" s", "s ", "s\x0b", "s\x01", "a\x01b", "é" * 513 + "x" * 0, "\U0001516d" * 300]
)
def test_session_ids_the_engine_cannot_key_are_refused(session_id: str) -> None:
    body = ev("session:start", 1, parent_id=None)
    body["data"]["session_id"] = session_id
    with pytest.raises(EnvelopeError) as caught:
        parse_envelope(body)
    assert caught.value.code == "invalid_session_id"


# Each of these crashed the embedded FalkorDB (SIGSEGV in EnforceUniqueEntity) when its node was
# created: a constrained node_id with edge whitespace, U+0001 anywhere, or over 4,096 bytes.
_CRASHERS: list[tuple[str, dict[str, Any]]] = [
    ("session:start", {"parent_id": "parent\x01"}),
    ("tool:pre", {"tool_name": "bash ", "tool_call_id": "c1", "parallel_group_id": "g1 "}),
    ("tool:pre", {"tool_name": "\x01grep", "tool_call_id": "c2\n", "parallel_group_id": "g\x012"}),
    ("tool:pre", {"tool_name": "t" * 5000, "tool_call_id": "c" * 5000}),
    ("tool:post", {"tool_name": "bash ", "tool_call_id": "c1", "result": {"success": True}}),
    ("llm:response", {"model": "gpt ", "usage": {"input_tokens": 3, "output_tokens": 4}}),
    ("llm:response", {"model": "m" * 5000, "usage": {"input_tokens": 1}}),
    ("session:fork", {"parent": "p\x01arent"}),
    ("delegate:agent_spawned", {"tool_call_id": "c\x013", "sub_session_id": "child\x01", "agent": "helper"}),
    (
        "delegate:agent_completed",
        {"tool_call_id": "c\x013", "sub_session_id": "child\x01", "agent": "helper"},
    ),
]
"""Under a plain index (the semantic layers' labels) the same ids do not crash the engine, but an
index lookup never finds them: each MERGE of one made another duplicate node."""


@pytest.mark.parametrize("semantic_layers", [False, True], ids=["layer1", "layers"])
def test_ids_that_crashed_the_engine_are_keyed_and_the_engine_stays_up(
    tmp_path: Path, semantic_layers: bool
) -> None:
    with IntelligenceService.open(tmp_path, semantic_layers=semantic_layers) as svc:
        assert svc.embedded is not None
        pid = svc.embedded.pid
        svc.ingest_many([ev(event, 10 + i, **fields) for i, (event, fields) in enumerate(_CRASHERS)])
        assert svc.wait_applied(timeout=60)
        assert svc.embedded.pid == pid, "the embedded FalkorDB restarted: an id crashed it"
        assert svc.status()["last_error"] is None
        q = "MATCH (t:ToolCall {workspace: $workspace}) RETURN t.node_id AS id, t.tool_name AS name ORDER BY id"
        calls = {row["id"]: row["name"] for row in svc.cypher(q, workspace=WS).results}
        assert calls[f"{SID}__tool_call__c1"] == graph_key("bash ")
        assert graph_key(f"{SID}__tool_call__c2\n") in calls
        assert graph_key(f"{SID}__tool_call__{'c' * 5000}") in calls
        tools = svc.cypher(
            "MATCH (t:Tool {workspace: $workspace}) RETURN t.node_id AS id, t.calls AS calls", workspace=WS
        ).results
        assert {"id": "tool:" + graph_key("bash "), "calls": 1} in tools
        assert len(tools) == 3
        models = svc.cypher(
            "MATCH (m:Model {workspace: $workspace}) RETURN m.model AS model ORDER BY model", workspace=WS
        ).results
        assert [row["model"] for row in models] == sorted([graph_key("gpt "), graph_key("m" * 5000)])
        sessions = {
            row["id"]
            for row in svc.cypher(
                "MATCH (s:Session {workspace: $workspace}) RETURN s.node_id AS id", workspace=WS
            ).results
        }
        assert {SID, graph_key("p\x01arent")} <= sessions  # a fork's parent is a node, a start's a property
        if semantic_layers:
            assert graph_key("child\x01") in sessions
            delegations = svc.cypher(
                "MATCH (d:Delegation {workspace: $workspace}) RETURN d.node_id AS id, d.status AS status",
                workspace=WS,
            ).results
            assert delegations == [{"id": graph_key(f"{SID}::delegation::c\x013"), "status": "completed"}]
        # the payload is kept as sent
        data = svc.cypher(
            "MATCH (e:Event {workspace: $workspace}) WHERE e.event_name = 'llm:response' RETURN e.data AS d",
            workspace=WS,
        ).results
        assert any('"gpt "' in row["d"] for row in data)
        forgotten = svc.forget_session(WS, SID)
        assert forgotten.events == len(_CRASHERS)
        assert svc.wait_rebuilt(timeout=60)
        assert svc.embedded.pid == pid
        left = svc.cypher(
            "MATCH (e:Event {workspace: $workspace}) RETURN count(e) AS n", workspace=WS
        ).results
        assert left == [{"n": 0}]
