"""Property: how a trace's spans arrive does not change the conversation.

Generated agent runs (model calls with reasoning, text and tool calls; tools that run subagents, two
levels deep) are ingested once in the order their spans ended, in one export: the reference. Then
the same spans arrive in any order in which a span that ended before another one started comes
first (the order every exporter keeps: parents may come before or after their children, spans
that overlap in time in any order), split into any number of exports, with exports re-sent. The
thread, the OpenAI message history and the usage totals must equal the reference's.

The same holds when the messages come as log records (`tests.support.genai_traces.logged`):
spans without content from one exporter, records from another, interleaved any way.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
from convograph.hypergraph import queries as q
from convograph.integrations.otlp import OtlpIngestor, Span
from convograph.jsonable import to_jsonable
from convograph.projections import project_messages, project_thread
from convograph.testing import MemoryEventLog
from tests.support.genai_traces import (
    TRACE,
    Simulation,
    assistant,
    call,
    logged,
    reasoning,
    text,
    tool_message,
    user,
)


@st.composite
def agent_runs(draw: st.DrawFn) -> list[Span]:
    """The spans of one generated agent run, in end order."""
    sim = Simulation()
    calls = iter(range(1000))

    def run_agent(parent: str | None, name: str, task: str, depth: int) -> str:
        answer = f"{name} answered {task!r}"

        def body(agent_span: str) -> None:
            history: list[dict[str, Any]] = [user(task)]
            steps = draw(st.integers(1, 3))
            for step in range(steps):
                last = step == steps - 1
                parts: list[dict[str, Any]] = []
                if draw(st.booleans()):
                    parts.append(reasoning(f"{name} thinks at step {step}"))
                if last or draw(st.booleans()):
                    parts.append(text(answer if last else f"{name} step {step}"))
                requested = [] if last else [f"call_{next(calls)}" for _ in range(draw(st.integers(1, 2)))]
                parts += [call(cid, "lookup", {"q": cid}) for cid in requested]
                output = assistant(*parts)
                sim.chat(
                    agent_span, history, output, usage=(draw(st.integers(1, 50)), draw(st.integers(1, 50)))
                )
                history.append(output)
                for cid in requested:
                    nested = depth < 2 and draw(st.booleans())
                    runner = (
                        (lambda span, cid=cid: run_agent(span, f"sub{depth + 1}", cid, depth + 1))
                        if nested
                        else None
                    )
                    _span, result = sim.tool(
                        agent_span, cid, "lookup", {"q": cid}, f"result of {cid}", runner
                    )
                    history.append(tool_message(cid, result))

        sim.agent(parent, name, body)
        return answer

    run_agent(None, "main", "the question", 0)
    return sim.ended


def deliveries(data: st.DataObject, spans: list[Span]) -> list[list[Span]]:
    """An arrival order keeping happens-before, split into exports, some exports re-sent."""
    keys = data.draw(st.lists(st.floats(0, 1), min_size=len(spans), max_size=len(spans)))
    order: list[Span] = []
    waiting = list(range(len(spans)))
    while waiting:
        ready = [
            i for i in waiting if not any(spans[j].end_ns < spans[i].start_ns for j in waiting if j != i)
        ]
        pick = min(ready, key=lambda i: keys[i])
        order.append(spans[pick])
        waiting.remove(pick)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(order) - 1)), max_size=6))))
    batches = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True) if order[a:b]]
    resent = data.draw(st.lists(st.integers(0, len(batches) - 1), max_size=3))
    for index in resent:
        batches.insert(data.draw(st.integers(index + 1, len(batches))), batches[index])
    return batches


def conversation_of(batches: list[list[Span]]) -> tuple[Any, Any, Any]:
    async def run() -> list[Any]:
        log = MemoryEventLog()
        ingestor = OtlpIngestor(log)
        for batch in batches:
            await ingestor.ingest(batch)
        await ingestor.close()
        return [stored.event for stored in await log.read(batches[0][0].trace_id)]

    conversation = reduce_conversation_events(create_conversation(), asyncio.run(run()))
    active = default_active(conversation)
    return (
        to_jsonable(project_thread(conversation, active)),
        project_messages(conversation, active, format="openai"),
        q.usage_totals(conversation),
    )


@settings(
    max_examples=int(os.environ.get("OTLP_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(spans=agent_runs(), data=st.data())
def test_arrival_order_splits_and_resends_do_not_change_the_conversation(
    spans: list[Span], data: st.DataObject
) -> None:
    reference = conversation_of([spans])
    assert conversation_of(deliveries(data, spans)) == reference


def test_the_reference_itself_is_the_agent_run() -> None:
    """The comparison above is not vacuous: the end-order ingest shows every message, nested."""
    sim = Simulation()

    def researcher(tool_span: str) -> str:
        sim.agent(tool_span, "sub", lambda span: sim.chat(span, [user("dig")], assistant(text("found it"))))
        return "found it"

    def body(span: str) -> None:
        first = assistant(call("call_1", "lookup", {"q": 1}))
        sim.chat(span, [user("question")], first)
        sim.tool(span, "call_1", "lookup", {"q": 1}, "", researcher)
        sim.chat(span, [user("question"), first, tool_message("call_1", "found it")], assistant(text("done")))

    sim.agent(None, "main", body)
    thread, messages, usage = conversation_of([sim.ended])
    assert [message["role"] for message in messages] == ["user", "assistant", "tool", "assistant"]
    assert thread[1]["content"]["kind"] == "tool_call"
    assert [view["content"].get("text") for view in thread[1]["branches"][0][1:]] == ["found it"]
    assert (usage.input_tokens, usage.output_tokens) == (30, 15)


# -- messages sent as log records ----------------------------------------------------------------------


def cut(data: st.DataObject, items: list[Any]) -> list[list[Any]]:
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(items) - 1)), max_size=6))))
    return [items[a:b] for a, b in zip([0, *cuts], [*cuts, len(items)], strict=True) if items[a:b]]


def logged_deliveries(data: st.DataObject, spans: list[Span]) -> list[tuple[str, list[Any]]]:
    """Spans as `deliveries` orders them, records in the order they were emitted (one exporter),
    each cut into exports; the two streams interleaved any way, some exports re-sent."""
    bare, records = logged(spans)
    span_exports = [("spans", batch) for batch in deliveries(data, bare)]
    record_exports = [("logs", batch) for batch in cut(data, records)]
    merged: list[tuple[str, list[Any]]] = []
    while span_exports or record_exports:
        take_spans = bool(span_exports) and (not record_exports or data.draw(st.booleans()))
        merged.append((span_exports if take_spans else record_exports).pop(0))
    for index in data.draw(st.lists(st.integers(0, len(merged) - 1), max_size=3)):
        merged.insert(data.draw(st.integers(index + 1, len(merged))), merged[index])
    return merged


def logged_conversation(exports: list[tuple[str, list[Any]]]) -> tuple[Any, Any, Any]:
    """The conversation after the exports, the receiver having seen this source log messages
    before (an earlier trace), as a long-running server has."""

    async def run() -> list[Any]:
        log = MemoryEventLog()
        ingestor = OtlpIngestor(log)
        teach = Simulation(trace_id="f" * 32)
        teach.agent(None, "t", lambda span: teach.chat(span, [user("hi")], assistant(text("hello"))))
        await ingestor.ingest_logs(logged(teach.ended)[1])
        for kind, items in exports:
            await (ingestor.ingest(items) if kind == "spans" else ingestor.ingest_logs(items))
        await ingestor.close()
        assert ingestor.held_count == 0
        return [stored.event for stored in await log.read(TRACE)]

    conversation = reduce_conversation_events(create_conversation(), asyncio.run(run()))
    active = default_active(conversation)
    return (
        to_jsonable(project_thread(conversation, active)),
        project_messages(conversation, active, format="openai"),
        q.usage_totals(conversation),
    )


@settings(
    max_examples=int(os.environ.get("OTLP_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(spans=agent_runs(), data=st.data())
def test_logged_messages_any_interleaving_of_logs_and_spans_gives_the_same_conversation(
    spans: list[Span], data: st.DataObject
) -> None:
    """Messages as log records (conventions 1.30): every record before every span is the
    reference; any interleaving of the two exporters' streams, split and re-sent, gives it."""
    bare, records = logged(spans)
    reference = logged_conversation([("logs", records), ("spans", bare)])
    assert logged_conversation(logged_deliveries(data, spans)) == reference


def test_the_logged_reference_shows_the_messages() -> None:
    """Not vacuous: records-first shows the run's messages (reasoning has no 1.30 event)."""
    sim = Simulation()

    def body(span: str) -> None:
        first = assistant(reasoning("hmm"), call("call_1", "lookup", {"q": 1}))
        sim.chat(span, [user("question")], first)
        sim.tool(span, "call_1", "lookup", {"q": 1}, "found it")
        sim.chat(span, [user("question"), first, tool_message("call_1", "found it")], assistant(text("done")))

    sim.agent(None, "main", body)
    bare, records = logged(sim.ended)
    _thread, messages, usage = logged_conversation([("logs", records), ("spans", bare)])
    assert [message["role"] for message in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[-1]["content"] == "done"
    assert (usage.input_tokens, usage.output_tokens) == (20, 10)
