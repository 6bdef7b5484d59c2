"""GenAI traces for tests: agents that call models and tools, as the spans their instrumentation
emits (GenAI semantic conventions), with the times and the end order a real exporter has.

`Simulation` plays an agent loop: each model call is a ``chat`` span whose ``gen_ai.input.messages``
is the whole history so far and whose ``gen_ai.output.messages`` is the answer; each tool run is an
``execute_tool`` span; a tool may run a subagent (``invoke_agent`` under ``execute_tool``). Spans
are returned in the order they end (what a batching exporter sends). `logged` turns such a run
into what an instrumentation on semantic conventions 1.30 sends: spans without messages, and the
messages as log records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec

from convograph.integrations.otlp.model import LogRecord, Span

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def assistant(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "parts": list(parts)}


def text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


def reasoning(content: str) -> dict[str, Any]:
    return {"type": "reasoning", "content": content}


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


def tool_message(call_id: str, response: Any) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": response}]}


@dataclass
class Simulation:
    """Builds one trace. Times come from a counter, so ends and starts are ordered as played."""

    trace_id: str = TRACE
    clock: int = 1_700_000_000_000_000_000
    ended: list[Span] = field(default_factory=list)
    _ids: int = 0

    def tick(self) -> int:
        self.clock += 1_000_000
        return self.clock

    def span_id(self) -> str:
        self._ids += 1
        return f"{self._ids:016x}"

    def finish(
        self,
        span_id: str,
        parent: str | None,
        name: str,
        start: int,
        attributes: dict[str, Any],
        *,
        kind: int = 1,
        status: int = 0,
        message: str = "",
    ) -> Span:
        span = Span(
            trace_id=self.trace_id,
            span_id=span_id,
            parent_span_id=parent,
            name=name,
            kind=kind,
            start_ns=start,
            end_ns=self.tick(),
            attributes=attributes,
            status_code=status,
            status_message=message,
            resource={"service.name": "agent-app"},
            scope_name="tests",
        )
        self.ended.append(span)
        return span

    def chat(
        self,
        parent: str | None,
        history: list[dict[str, Any]],
        output: dict[str, Any],
        *,
        usage: tuple[int, int] = (10, 5),
        extra: dict[str, Any] | None = None,
    ) -> Span:
        span_id, start = self.span_id(), self.tick()
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-test",
            "gen_ai.input.messages": json.dumps(history),
            "gen_ai.output.messages": json.dumps([{**output, "finish_reason": "stop"}]),
            "gen_ai.usage.input_tokens": usage[0],
            "gen_ai.usage.output_tokens": usage[1],
            **(extra or {}),
        }
        return self.finish(span_id, parent, "chat gpt-test", start, attributes, kind=3)

    def tool(
        self, parent: str, call_id: str, name: str, arguments: Any, result: Any, run: Any = None
    ) -> tuple[Span, Any]:
        """A tool execution; ``run(span_id)`` runs inside it (a subagent) and returns the result."""
        span_id, start = self.span_id(), self.tick()
        if run is not None:
            result = run(span_id)
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": json.dumps(arguments),
            "gen_ai.tool.call.result": result if isinstance(result, str) else json.dumps(result),
        }
        return self.finish(span_id, parent, f"execute_tool {name}", start, attributes), result

    def agent(self, parent: str | None, name: str, body: Any, *, conversation: str | None = None) -> Span:
        """An ``invoke_agent`` span around ``body(span_id)``."""
        span_id, start = self.span_id(), self.tick()
        body(span_id)
        attributes: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
        if conversation is not None:
            attributes["gen_ai.conversation.id"] = conversation
        return self.finish(span_id, parent, f"invoke_agent {name}", start, attributes)


def weather_trace(*, conversation: str | None = None, subagent: bool = True) -> list[Span]:
    """A two-step agent: a tool call (run by a subagent when ``subagent``), then the answer."""
    sim = Simulation()

    def researcher(tool_span: str) -> str:
        def body(agent_span: str) -> None:
            history = [user("Find the weather in Paris")]
            sim.chat(agent_span, history, assistant(text("Paris: rainy, 57F")))

        sim.agent(tool_span, "researcher", body)
        return "rainy, 57F"

    def body(agent_span: str) -> None:
        history = [user("What's the weather in Paris?")]
        request = assistant(reasoning("I should look it up"), call("call_1", "research", {"city": "Paris"}))
        sim.chat(agent_span, history, request)
        _span, result = sim.tool(
            agent_span,
            "call_1",
            "research",
            {"city": "Paris"},
            "rainy, 57F",
            researcher if subagent else None,
        )
        history += [request, tool_message("call_1", result)]
        sim.chat(agent_span, history, assistant(text("It is rainy in Paris, 57F.")))

    sim.agent(None, "weather", body, conversation=conversation)
    return sim.ended


CONTENT_ATTRIBUTES = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions")


def logged(spans: list[Span]) -> tuple[list[Span], list[LogRecord]]:
    """The same run as an instrumentation on semantic conventions 1.30 sends it: spans without
    message content, and per chat span one log record per input message and a ``gen_ai.choice``
    (the message in the record's body, OpenAI's shapes: reasoning has none and is dropped), timed
    inside their span. Records are returned in the order they were emitted."""
    bare: list[Span] = []
    records: list[LogRecord] = []
    for span in spans:
        if "gen_ai.input.messages" not in span.attributes:
            bare.append(span)
            continue
        bare.append(
            msgspec.structs.replace(
                span, attributes={k: v for k, v in span.attributes.items() if k not in CONTENT_ATTRIBUTES}
            )
        )
        history = json.loads(span.attributes["gen_ai.input.messages"])
        output = json.loads(span.attributes["gen_ai.output.messages"])[0]

        def record(name: str, body: dict[str, Any], at: int, span: Span = span) -> LogRecord:
            return LogRecord(
                trace_id=span.trace_id,
                span_id=span.span_id,
                event_name=name,
                observed_ns=at,
                body=body,
                attributes={"gen_ai.system": "openai"},
                resource=span.resource,
                scope_name="tests",
            )

        for index, message in enumerate(history):
            name, body = _legacy_message(message)
            records.append(record(name, body, span.start_ns + index + 1))
        _name, body = _legacy_message(output)
        choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", **body}}
        records.append(record("gen_ai.choice", choice, span.end_ns - 1))
    records.sort(key=lambda r: r.observed_ns)
    return bare, records


def _legacy_message(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(event name, body)`` of a message in the parts shape, as OpenAI's 1.30 events write it."""
    role = message["role"]
    parts = message["parts"]
    if role == "tool":
        part = parts[0]
        return "gen_ai.tool.message", {"content": part["response"], "id": part["id"]}
    body: dict[str, Any] = {}
    texts = [part["content"] for part in parts if part["type"] == "text"]
    if texts:
        body["content"] = "".join(texts)
    calls = [
        {
            "id": part["id"],
            "type": "function",
            "function": {"name": part["name"], "arguments": json.dumps(part["arguments"])},
        }
        for part in parts
        if part["type"] == "tool_call"
    ]
    if calls:
        body["tool_calls"] = calls
    return f"gen_ai.{role}.message", body
