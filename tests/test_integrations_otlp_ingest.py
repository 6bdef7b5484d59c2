"""`OtlpIngestor` over a real in-memory event log: re-sends, holds, conversation routing and the
move of a trace's early spans, workspaces, rejected and skipped spans, blobs."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from convograph.events import HarnessStart, ToolResult, Usage
from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
from convograph.integrations.otlp import ConversationBlobs, OtlpIngestor, Span
from convograph.intelligence.blobs import MemoryBlobStore
from convograph.projections import project_messages
from convograph.testing import MemoryEventLog
from tests.support.genai_traces import TRACE, Simulation, assistant, text, user, weather_trace


async def stored(log: MemoryEventLog, cid: str) -> list[Any]:
    return [item.event for item in await log.read(cid)]


def history(events: list[Any]) -> list[dict[str, Any]]:
    conversation = reduce_conversation_events(create_conversation(), events)
    return project_messages(conversation, default_active(conversation), format="openai")


async def test_a_resent_export_stores_nothing_new() -> None:
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log)
    spans = weather_trace()
    first = await ingestor.ingest(spans)
    before = await stored(log, TRACE)
    again = await ingestor.ingest(spans)
    assert first.accepted_events == len(before) > 10
    assert (again.accepted_events, again.duplicate_events) == (0, 0)  # known here: not even sent to the log
    assert await stored(log, TRACE) == before
    restarted = await OtlpIngestor(log).ingest(spans)  # a new process knows nothing: the log's dedupe
    assert restarted.accepted_events == 0
    assert restarted.duplicate_events == len(before)
    assert await stored(log, TRACE) == before
    assert history(before) == [
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "research", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "rainy, 57F"},
        {"role": "assistant", "content": "It is rainy in Paris, 57F."},
    ]


async def test_an_agent_waits_for_its_parent_then_links_to_the_tool_call() -> None:
    spans = weather_trace()
    by_name = {span.name: span for span in spans}
    subagent, tool = by_name["invoke_agent researcher"], by_name["execute_tool research"]
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log)
    report = await ingestor.ingest(
        [span for span in spans if span is not tool and span.name != "invoke_agent weather"]
    )
    assert report.held == 1
    assert ingestor.held_count == 1
    assert not any(isinstance(event, HarnessStart) for event in await stored(log, TRACE))
    await ingestor.ingest([tool])
    assert ingestor.held_count == 0
    starts = [event for event in await stored(log, TRACE) if isinstance(event, HarnessStart)]
    assert [(event.run_id, event.parent_id) for event in starts] == [(f"otel:{subagent.span_id}", "call_1")]


async def test_a_parent_that_never_comes_releases_the_agent_after_the_hold() -> None:
    now = [0.0]
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log, hold_seconds=30, clock=lambda: now[0])
    spans = weather_trace()
    subagent = next(span for span in spans if span.name == "invoke_agent researcher")
    await ingestor.ingest([subagent])
    assert await ingestor.release_expired() == 0
    now[0] = 31.0
    assert await ingestor.release_expired() == 1
    (start, _end) = await stored(log, TRACE)
    assert isinstance(start, HarnessStart)
    assert start.parent_id == f"otel:{subagent.parent_span_id}"  # its parent's run: links if it is an agent


async def test_close_writes_what_is_held() -> None:
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log)
    subagent = next(span for span in weather_trace() if span.name == "invoke_agent researcher")
    await ingestor.ingest([subagent])
    await ingestor.close()
    assert [type(event).__name__ for event in await stored(log, TRACE)] == ["HarnessStart", "HarnessEnd"]
    assert ingestor.held_count == 0


async def test_a_trace_moves_to_its_conversation_id_once_the_agent_span_names_it() -> None:
    """Instrumentations (opentelemetry-util-genai among them) set ``gen_ai.conversation.id`` on the
    agent span only, which ends last: the spans before it went to the trace-id conversation."""
    deleted: list[str] = []
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log, on_deleted=deleted.append)
    spans = weather_trace(conversation="chat-42")
    for span in spans:  # one export per span, in end order
        await ingestor.ingest([span])
    assert [info.id for info in await log.list_conversations()] == ["chat-42"]
    assert deleted == [TRACE]
    reference = MemoryEventLog()
    await OtlpIngestor(reference).ingest(spans)
    assert history(await stored(log, "chat-42")) == history(await stored(reference, "chat-42"))
    # later exports of the same trace go to the named conversation directly
    late = weather_trace()[0]
    report = await ingestor.ingest([msgspec.structs.replace(late, span_id="00000000000000ff")])
    assert report.conversations == ["chat-42"]


async def test_conversations_across_traces_share_their_history() -> None:
    """Two turns, two traces, one ``gen_ai.conversation.id``: the second turn re-sends the first
    turn's messages, which are stored once."""
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log)
    first, second = Simulation(trace_id="1" * 32), Simulation(trace_id="2" * 32)
    turn1 = [user("hi"), assistant(text("hello"))]
    first.agent(None, "bot", lambda span: first.chat(span, turn1[:1], turn1[1]), conversation="c")
    second.agent(
        None,
        "bot",
        lambda span: second.chat(span, [*turn1, user("bye")], assistant(text("see you"))),
        conversation="c",
    )
    await ingestor.ingest(first.ended)
    await ingestor.ingest(second.ended)
    assert [message["content"] for message in history(await stored(log, "c"))] == [
        "hi",
        "hello",
        "bye",
        "see you",
    ]


async def test_workspace_prefix_and_refused_conversations_are_rejected_spans() -> None:
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log)
    spans = weather_trace()
    report = await ingestor.ingest(spans, prefix="acme:", can_write=lambda cid: cid.startswith("acme:"))
    assert report.rejected == {}
    assert report.conversations == [f"acme:{TRACE}"]
    report = await ingestor.ingest(spans, prefix="other:", can_write=lambda cid: cid.startswith("acme:"))
    assert report.rejected == {f"this API key may not write conversation 'other:{TRACE}'": len(spans)}
    assert [info.id for info in await log.list_conversations()] == [f"acme:{TRACE}"]


async def test_an_unusable_conversation_id_rejects_its_spans() -> None:
    sim = Simulation()
    sim.agent(
        None,
        "bot",
        lambda span: sim.chat(span, [user("x")], assistant(text("y"))),
        conversation="has spaces/slash",
    )
    report = await OtlpIngestor(MemoryEventLog()).ingest(sim.ended)
    ((reason, count),) = report.rejected.items()
    assert count == 2
    assert "has characters outside" in reason
    assert "gen_ai.conversation.id" in reason


async def test_spans_that_are_not_conversation_content_are_skipped_and_counted() -> None:
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log)
    http = Span(trace_id="9" * 32, span_id="1" * 16, name="GET /", attributes={"http.method": "GET"})
    embed = Span(trace_id="9" * 32, span_id="2" * 16, attributes={"gen_ai.operation.name": "embeddings"})
    report = await ingestor.ingest([http, embed])
    assert report.skipped == {"not a GenAI span": 1, "GenAI operation without conversation content": 1}
    assert report.mapped == 0
    assert await log.list_conversations() == []
    other = Span(trace_id="8" * 32, span_id="1" * 16, attributes={"http.method": "GET"})
    await ingestor.ingest([other])
    assert "8" * 32 not in ingestor._traces  # a trace with no GenAI span is not remembered


async def test_an_agent_under_a_span_that_is_not_genai_links_through_it() -> None:
    """tool -> the application's own span -> agent: the agent is still the tool call's subagent."""
    sim = Simulation()

    def body(agent_span: str) -> None:
        sim.chat(
            agent_span,
            [user("go")],
            assistant({"type": "tool_call", "id": "call_x", "name": "delegate", "arguments": {}}),
        )

        def run(tool_span: str) -> str:
            wrapper, start = sim.span_id(), sim.tick()
            sim.agent(
                wrapper, "helper", lambda span: sim.chat(span, [user("sub task")], assistant(text("ok")))
            )
            sim.finish(wrapper, tool_span, "my.app.step", start, {"app.step": 1})
            return "ok"

        sim.tool(agent_span, "call_x", "delegate", {}, "", run)

    sim.agent(None, "boss", body)
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log)
    for span in sim.ended:
        await ingestor.ingest([span])
    helper = next(
        event
        for event in await stored(log, sim.trace_id)
        if isinstance(event, HarnessStart) and event.agent_id == "helper"
    )
    assert helper.parent_id == "call_x"


async def test_oversized_values_go_to_the_blob_store() -> None:
    blobs = MemoryBlobStore()
    log = MemoryEventLog()
    ingestor = OtlpIngestor(
        log, blobs=ConversationBlobs(blobs), attribute_threshold=1000, content_threshold=2000
    )
    sim = Simulation()
    big = "x" * 5000

    def body(span: str) -> None:
        sim.chat(span, [user("q")], assistant(text("a")), extra={"app.debug": big})
        sim.tool(span, "call_1", "dump", {}, {"blob": big})

    sim.agent(None, "bot", body, conversation="acme:c1")
    await ingestor.ingest(sim.ended)
    events = await stored(log, "acme:c1")
    usage = next(event for event in events if isinstance(event, Usage))
    ref = usage.extra["otel"]["attributes"]["app.debug"]
    assert ref["bytes"] == 5002
    assert ref["$blob_ref"].startswith("ci-blob://c1/otlp__")
    assert json.loads(blobs.get("c1", ref["$blob_ref"].rsplit("/", 1)[1]) or b"") == big
    result = next(event for event in events if isinstance(event, ToolResult))
    assert isinstance(result.output, dict)
    assert "$blob_ref" in result.output
    assert len(json.dumps(msgspec.to_builtins(usage))) < 3000


async def test_a_moved_trace_takes_its_blobs_along() -> None:
    """The spans before the agent span went to the trace-id conversation, their large values to
    its blob session; moving them to the named conversation copies the blobs to its session and
    points the events there (the old session is forgotten with the old conversation)."""
    blobs = MemoryBlobStore()
    log = MemoryEventLog()
    ingestor = OtlpIngestor(log, blobs=ConversationBlobs(blobs), attribute_threshold=1000)
    sim = Simulation()
    big = "y" * 4000
    sim.agent(
        None,
        "bot",
        lambda span: sim.chat(span, [user("q")], assistant(text("a")), extra={"app.dump": big}),
        conversation="c2",
    )
    chat, agent = sim.ended
    await ingestor.ingest([chat])
    await ingestor.ingest([agent])
    assert [info.id for info in await log.list_conversations()] == ["c2"]
    usage = next(event for event in await stored(log, "c2") if isinstance(event, Usage))
    ref = usage.extra["otel"]["attributes"]["app.dump"]
    assert ref["$blob_ref"].startswith("ci-blob://c2/")
    assert json.loads(blobs.get("c2", ref["$blob_ref"].rsplit("/", 1)[1]) or b"") == big
