"""What the forwarder sends when (`forward.due_spans`), and its settings."""

from __future__ import annotations

import pytest

from convograph.events import parse_event
from convograph.hypergraph import create_conversation, reduce_conversation_events
from convograph.integrations.otlp.encode import conversation_spans
from convograph.integrations.otlp.forward import due_spans, traces_url
from convograph.server.config import ConfigError, ServerConfig


def events(*items: dict[str, object]) -> list[object]:
    return [parse_event(item) for item in items]


STREAMING = [
    {"type": "user", "runId": "u1", "content": "list files"},
    {"type": "harness_start", "runId": "a1", "parentId": "u1:user", "agentId": "main"},
    {"type": "text", "runId": "a1", "id": "t1", "content": "Listing."},
    {"type": "tool_call", "runId": "a1", "id": "c1", "name": "ls", "input": {}},
    {"type": "tool_result", "runId": "a1", "id": "c1", "name": "ls", "output": "a.txt"},
    {"type": "text", "runId": "a1", "id": "t2", "content": "There is a.txt"},
]


def names(spans: list[object]) -> list[str]:
    return sorted(span.name for span in spans)  # type: ignore[attr-defined]


def test_a_running_agent_keeps_its_span_and_its_latest_turn() -> None:
    stream = events(*STREAMING)
    spans = conversation_spans(stream, "c")
    assert names(spans) == ["chat", "chat", "execute_tool ls", "invoke_agent main"]
    conv = reduce_conversation_events(create_conversation(), stream)
    due = due_spans(spans, conv, flush=False)
    assert names(due) == ["chat", "execute_tool ls"]  # the first turn and its tool are over
    assert names(due_spans(spans, conv, flush=True)) == names(spans)
    ended = events(*STREAMING, {"type": "harness_end", "runId": "a1"})
    spans = conversation_spans(ended, "c")
    conv = reduce_conversation_events(create_conversation(), ended)
    assert names(due_spans(spans, conv, flush=False)) == names(spans)


def test_spans_already_closed_do_not_change_as_the_conversation_grows() -> None:
    """What the forwarder sent stays what it is: a later turn changes only its agent's end."""
    before = {span.span_id: span for span in conversation_spans(events(*STREAMING[:5]), "c")}
    after = {span.span_id: span for span in conversation_spans(events(*STREAMING), "c")}
    assert set(before) <= set(after)
    changed = [span.name for span_id, span in before.items() if after[span_id] != span]
    assert changed == ["invoke_agent main"]
    assert after[next(i for i, s in before.items() if s.name == "invoke_agent main")].end_ns > max(
        span.end_ns for span in before.values() if span.name != "invoke_agent main"
    )


def test_endpoints_and_headers() -> None:
    assert traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert traces_url("https://cloud.langfuse.com/api/public/otel/v1/traces").endswith("/otel/v1/traces")
    with pytest.raises(ValueError, match="must be an http"):
        traces_url("collector:4318")
    with pytest.raises(ConfigError, match="must be an http"):
        ServerConfig.from_env(otlp_endpoint="grpc://collector:4317")


def test_headers_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVOGRAPH_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("CONVOGRAPH_OTLP_HEADERS", "Authorization=Basic abc, x-team=ai")
    config = ServerConfig.from_env()
    assert config.otlp_endpoint == "http://127.0.0.1:4318"
    assert config.otlp_headers == {"Authorization": "Basic abc", "x-team": "ai"}
    monkeypatch.setenv("CONVOGRAPH_OTLP_HEADERS", "no-equals-sign")
    with pytest.raises(ConfigError, match="CONVOGRAPH_OTLP_HEADERS: expected KEY=VALUE"):
        ServerConfig.from_env()
