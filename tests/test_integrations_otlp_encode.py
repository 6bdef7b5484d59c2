"""Conversations out as OTLP GenAI spans, and back in: ``convograph export --format otlp``, then
ingesting the export, gives the same conversation (the same request histories in every format,
the same thread up to ids), and the export follows what the conventions say."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from convograph.cli.app import app
from convograph.events import Event, read_ndjson_file
from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
from convograph.integrations.otlp import OtlpIngestor, Span, decode_request
from convograph.integrations.otlp.decode import JSON, PROTOBUF
from convograph.integrations.otlp.encode import (
    conversation_spans,
    to_otlp_json,
    to_otlp_protobuf,
    trace_id_for,
)
from convograph.jsonable import to_jsonable
from convograph.projections import project_messages, project_thread
from convograph.testing import MemoryEventLog
from tests.test_integrations_otlp_properties import agent_runs

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "multi-agent.ndjson"
runner = CliRunner()


def ingest(spans: list[Span], cid: str) -> list[Event]:
    async def run() -> list[Event]:
        log = MemoryEventLog()
        ingestor = OtlpIngestor(log)
        report = await ingestor.ingest(spans)
        assert report.rejected == {}
        assert report.skipped == {}
        await ingestor.close()
        return [stored.event for stored in await log.read(cid)]

    return asyncio.run(run())


def shape(views: list[dict[str, Any]], depth: int = 0) -> list[tuple[Any, ...]]:
    """The thread without ids: role, kind, text or name, tool output, nesting."""
    out: list[tuple[Any, ...]] = []
    for view in views:
        content = view["content"]
        label = content.get("text") or content.get("content") or content.get("name") or content.get("message")
        out.append(
            (depth, view["role"], content["kind"], json.dumps(label), json.dumps(content.get("output")))
        )
        for branch in view["branches"]:
            out += shape(branch, depth + 1)
    return out


def conversation(events: list[Event]) -> dict[str, Any]:
    conv = reduce_conversation_events(create_conversation(), events)
    active = default_active(conv)
    views = shape(to_jsonable(project_thread(conv, active)))
    return {
        "thread": [view for view in views if view[2] != "relay"],
        "relays": sorted(view for view in views if view[2] == "relay"),
        **{
            format: project_messages(conv, active, format=format)
            for format in ("openai", "anthropic", "gateway")
        },
    }


def test_the_example_conversation_survives_a_round_trip() -> None:
    events = read_ndjson_file(EXAMPLE).events
    spans = conversation_spans(events, "example")
    body = json.dumps(to_otlp_json(spans)).encode()
    decoded = decode_request(body, JSON)
    assert decoded.spans == decode_request(to_otlp_protobuf(spans), PROTOBUF).spans  # both encodings agree
    assert conversation(ingest(decoded.spans, "example")) == conversation(events)


def test_what_the_export_looks_like() -> None:
    events = read_ndjson_file(EXAMPLE).events
    spans = conversation_spans(events, "example")
    assert {span.trace_id for span in spans} == {trace_id_for("example")}
    assert all(span.attributes["gen_ai.conversation.id"] == "example" for span in spans)
    by_id = {span.span_id: span for span in spans}
    operations = [span.attributes["gen_ai.operation.name"] for span in spans]
    assert operations.count("invoke_agent") == 2
    assert operations.count("execute_tool") == 5
    for span in spans:  # children end before their parents, inside their time span
        if span.parent_span_id is not None:
            parent = by_id[span.parent_span_id]
            assert spans.index(span) < spans.index(parent)
            assert parent.start_ns <= span.start_ns <= span.end_ns <= parent.end_ns
    subagent = next(span for span in spans if span.attributes.get("gen_ai.agent.name") == "agent-research")
    tool = by_id[subagent.parent_span_id or ""]
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "agent"
    denied = next(span for span in spans if span.attributes.get("gen_ai.tool.name") == "exec")
    assert denied.status_code == 2
    assert denied.attributes["error.type"] == "denied"
    assert denied.events[0].name == "convograph.relay"
    assert denied.events[0].attributes["convograph.relay.approved"] is False
    failed = [
        span for span in spans if span.attributes["gen_ai.operation.name"] == "chat" and span.status_code == 2
    ]
    assert [span.status_message for span in failed] == ["provider overloaded (HTTP 529); retrying"]
    assert conversation_spans(events, "example") == spans  # deterministic: same ids and times


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(spans=agent_runs())
def test_ingested_traces_export_and_come_back_the_same(spans: list[Span]) -> None:
    """A generated agent trace, ingested, exported and ingested again: the same conversation."""
    first = ingest(spans, spans[0].trace_id)
    again = ingest(conversation_spans(first, "again"), "again")
    assert conversation(again) == conversation(first)


def test_the_cli_writes_one_request_per_line(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    result = runner.invoke(app, ["export", str(EXAMPLE), "--format", "otlp", "--output", str(out)])
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    decoded = decode_request(lines[0].encode(), JSON)
    assert decoded.spans[0].attributes["gen_ai.conversation.id"] == "multi-agent"
    named = runner.invoke(app, ["export", str(EXAMPLE), "--format", "otlp", "--conversation-id", "c-9"])
    assert json.loads(named.stdout)["resourceSpans"][0]["scopeSpans"][0]["spans"][0][
        "traceId"
    ] == trace_id_for("c-9")
