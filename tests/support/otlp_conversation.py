"""A conversation the OTLP ingest builds from GenAI spans (`OtlpIngestor` over a real event log):
each model call is a ``chat`` span (a provider run ``otel:<span>``) naming its model, its
messages land in the agent's message run ``otel:<agent span>/m``.

The agent ``planner`` asks for the weather in two cities at once (one answer, two tool calls),
the second tool runs the subagent ``checker``; then it calls ``book``, whose span failed; then it
answers. Every span ends 1 ms after it starts (`genai_traces.Simulation`).
"""

from __future__ import annotations

import json
from typing import Any

from convograph.integrations.otlp import OtlpIngestor, Span
from convograph.store import EventLog, StoredEvent
from tests.support.genai_traces import Simulation, assistant, call, text, tool_message, user

CONVERSATION = "trip"
TRACE = "5cf92f3577b34da6a3ce929d0e0e4737"


def _failed_tool(sim: Simulation, parent: str, call_id: str, name: str, arguments: Any) -> Span:
    span_id, start = sim.span_id(), sim.tick()
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": json.dumps(arguments),
    }
    return sim.finish(
        span_id, parent, f"execute_tool {name}", start, attributes, status=2, message="no seats"
    )


def trip_trace() -> list[Span]:
    """The spans, in the order they end (module docstring)."""
    sim = Simulation(trace_id=TRACE)
    cache = {"gen_ai.usage.cache_read.input_tokens": 40}

    def checker(tool_span: str) -> str:
        def body(agent_span: str) -> None:
            sim.chat(agent_span, [user("Check Rome")], assistant(text("Rome: cloudy")), usage=(30, 4))

        sim.agent(tool_span, "checker", body)
        return "cloudy"

    def body(agent_span: str) -> None:
        history = [user("Weather in Paris and Rome, then book Paris")]
        ask = assistant(call("c1", "weather", {"city": "Paris"}), call("c2", "weather", {"city": "Rome"}))
        sim.chat(agent_span, history, ask, usage=(120, 30), extra=cache)
        _span, paris = sim.tool(agent_span, "c1", "weather", {"city": "Paris"}, "sunny")
        _span, rome = sim.tool(agent_span, "c2", "weather", {"city": "Rome"}, None, checker)
        history += [ask, tool_message("c1", paris), tool_message("c2", rome)]
        booking = assistant(call("c3", "book", {"city": "Paris"}))
        sim.chat(agent_span, history, booking, usage=(200, 15))
        _failed_tool(sim, agent_span, "c3", "book", {"city": "Paris"})
        history += [booking, tool_message("c3", {"error": "no seats"})]
        sim.chat(
            agent_span, history, assistant(text("Sunny in Paris; no seats.")), usage=(260, 9), extra=cache
        )

    sim.agent(None, "planner", body, conversation=CONVERSATION)
    return sim.ended


async def record_otlp_conversation(log: EventLog, workspace: str) -> tuple[str, list[StoredEvent]]:
    """Ingest `trip_trace` into ``log`` under ``workspace``; returns the conversation id and what
    the log stored."""
    await OtlpIngestor(log).ingest(trip_trace(), prefix=f"{workspace}:")
    cid = f"{workspace}:{CONVERSATION}"
    return cid, list(await log.read(cid))
