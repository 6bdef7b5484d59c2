"""Conversation events -> GenAI semantic-convention spans -> OTLP (JSON or protobuf).

The way out of convograph for tracing tools (Langfuse, Phoenix, Jaeger, an OpenTelemetry
Collector): a conversation becomes one trace (id derived from the conversation id, so exporting
twice gives the same trace) whose spans follow the conventions `genai` reads, so ingesting an
export gives the same conversation back:

- each agent run (a run with ``harness_start``) -> an ``invoke_agent`` span, under the
  ``execute_tool`` span of the tool call that spawned it (a subagent) or its parent agent's span;
- each assistant turn of the thread projection -> a ``chat`` span under the agent that produced it,
  with ``gen_ai.input.messages`` = every message before the turn (the history a model call sends)
  and ``gen_ai.output.messages`` = the turn; the agent's ``usage`` events go to its model calls in
  order;
- each tool call -> an ``execute_tool`` span (arguments, result, an error status for an ``error``
  or denied output).

Messages come from the neutral history (`convograph.projections.history.build_history`), so they
are what the messages projection would send a model, repairs included; a placeholder result
stands for no result, so it is not exported. Every span carries ``gen_ai.conversation.id``.

Times: spans are placed on a clock that starts at the conversation's first timestamp (or
``start_ns``) and ticks 1 ms per span boundary in conversation order, so nesting and order hold;
event timestamps are not durations, so no span claims a measured duration.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final

import msgspec

from convograph.events import DocumentPart, Error, Event, ImagePart, TextPart, Usage
from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
from convograph.hypergraph import queries as q
from convograph.hypergraph.model import Conversation
from convograph.integrations.otlp.genai import RELAY_EVENT
from convograph.integrations.otlp.model import (
    SPAN_KIND_CLIENT,
    SPAN_KIND_INTERNAL,
    STATUS_ERROR,
    Span,
    SpanEvent,
)
from convograph.integrations.otlp.serialize import to_otlp_json, to_otlp_protobuf
from convograph.projections.history import (
    OPENING_USER_TEXT,
    AssistantTurn,
    TextBlock,
    ThinkingBlock,
    ToolExchange,
    UserTurn,
    build_history,
)
from convograph.projections.thread import build_thread
from convograph.projections.view import (
    ErrorContent,
    ReasoningContent,
    RelayContent,
    TextContent,
    ToolCallContent,
    UserContent,
    ViewNode,
)

__all__ = [
    "conversation_spans",
    "first_timestamp_ns",
    "spans_of",
    "to_otlp_json",
    "to_otlp_protobuf",
    "trace_id_for",
]

TICK_NS: Final = 1_000_000
SCOPE: Final = "convograph"
_json = msgspec.json.Encoder()


def trace_id_for(conversation_id: str) -> str:
    """The trace id of a conversation (stable: the same conversation is always the same trace)."""
    return _hex_id("trace", conversation_id, size=16)


def _hex_id(*parts: str, size: int) -> str:
    digest = hashlib.blake2b("\x00".join(parts).encode(), digest_size=size).digest()
    return digest.hex() if any(digest) else "01" * size


def conversation_spans(
    events: Sequence[Event], conversation_id: str, *, start_ns: int | None = None
) -> list[Span]:
    """The spans of a conversation's events, in the order a batching exporter sends them (a span
    after its children). O(events + views + turns x history)."""
    conv = reduce_conversation_events(create_conversation(), events)
    base = start_ns if start_ns is not None else first_timestamp_ns(events)
    return spans_of(conv, conversation_id, base)


def spans_of(conv: Conversation, conversation_id: str, start_ns: int) -> list[Span]:
    """`conversation_spans` of a conversation already reduced, its clock starting at ``start_ns``."""
    builder = build_thread(conv, default_active(conv))
    exporter = _Exporter(conv, conversation_id, start_ns, builder.model_call_starts())
    exporter.thread(builder.views, parent=None, key="main")
    exporter.close_agents()
    return exporter.spans


class _Agent:
    """An agent run's span, open while its turns are exported."""

    __slots__ = ("calls", "end", "name", "parent", "run", "span_id", "start", "usage")

    def __init__(self, run: str, span_id: str, parent: str | None, name: str, start: int) -> None:
        self.run = run
        self.span_id = span_id
        self.parent = parent
        self.name = name
        self.start = start
        self.end = start
        self.calls = 0
        self.usage: list[dict[str, int]] = []


class _Exporter:
    def __init__(
        self,
        conv: Conversation,
        conversation_id: str,
        base_ns: int,
        starts_turn: Callable[[str], bool] | None,
    ) -> None:
        self.conv = conv
        self.starts_turn = starts_turn
        """Tool calls that opened a model call's calls: a new ``chat`` span (`build_history`)."""
        self.cid = conversation_id
        self.trace = trace_id_for(conversation_id)
        self.clock = base_ns
        self.spans: list[Span] = []
        self.agents: dict[str, _Agent] = {}
        self.owners: dict[str, str | None] = {}
        self.usage = self._usage_by_agent()

    def tick(self) -> int:
        self.clock += TICK_NS
        return self.clock

    # -- structure -----------------------------------------------------------------------------------

    def owner(self, run_id: str) -> str | None:
        """The agent run (a run with a lifecycle) a run belongs to, or None."""
        if run_id in self.owners:
            return self.owners[run_id]
        seen: set[str] = set()
        current: str | None = run_id
        found: str | None = None
        while current is not None and current not in seen:
            seen.add(current)
            try:
                info = q.run_info(self.conv, current)
            except KeyError:
                break
            if info.has_lifecycle:
                found = current
                break
            current = info.parent_run_id
        self.owners[run_id] = found
        return found

    def _usage_by_agent(self) -> dict[str | None, list[dict[str, int]]]:
        out: dict[str | None, list[dict[str, int]]] = {}
        for chunk in q.iter_chunks(self.conv):
            event = chunk.event
            if isinstance(event, Usage):
                numbers = {
                    "gen_ai.usage.input_tokens": event.input_tokens,
                    "gen_ai.usage.output_tokens": event.output_tokens,
                }
                if event.cache_read_tokens is not None:
                    numbers["gen_ai.usage.cache_read.input_tokens"] = event.cache_read_tokens
                if event.cache_creation_tokens is not None:
                    numbers["gen_ai.usage.cache_creation.input_tokens"] = event.cache_creation_tokens
                out.setdefault(self.owner(chunk.run_id), []).append(numbers)
        return out

    def agent_for(self, run: str | None, parent: str | None) -> _Agent | None:
        if run is None:
            return None
        agent = self.agents.get(run)
        if agent is None:
            info = q.run_info(self.conv, run)
            agent = _Agent(
                run, _hex_id(self.cid, "agent", run, size=8), parent, info.agent_id or "agent", self.tick()
            )
            agent.usage = list(self.usage.get(run, ()))
            self.agents[run] = agent
        return agent

    def close_agents(self) -> None:
        for agent in list(self.agents.values()):
            self._finish_agent(agent)

    def _finish_agent(self, agent: _Agent) -> None:
        if self.agents.pop(agent.run, None) is None:
            return
        status = q.run_status(self.conv, agent.run)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent.name,
            "gen_ai.conversation.id": self.cid,
            "convograph.run_id": agent.run,
        }
        code, message = (
            (STATUS_ERROR, _run_error(self.conv, agent.run)) if status in ("error", "aborted") else (0, "")
        )
        if code:
            attributes["error.type"] = status
        self.spans.append(
            self._span(
                agent.span_id,
                agent.parent,
                f"invoke_agent {agent.name}",
                agent.start,
                self.tick(),
                attributes,
                SPAN_KIND_INTERNAL,
                code,
                message,
            )
        )

    # -- threads, turns, tools ------------------------------------------------------------------------

    def thread(self, views: list[ViewNode], parent: str | None, key: str) -> None:
        """Spans for one level of the thread projection (the main thread, or a subagent branch)."""
        history = build_history(views, starts_turn=self.starts_turn)
        owners, failures = _turn_owners(views, self.owner, self.starts_turn)
        relays = {view.content.tool_call_id: view for view in views if isinstance(view.content, RelayContent)}
        messages: list[dict[str, Any]] = []
        calls_by_id = {view.id: view for view in views if isinstance(view.content, ToolCallContent)}
        remaining = {run: owners.count(run) for run in set(owners)}
        turn_index = 0
        for position, turn in enumerate(history):
            if isinstance(turn, UserTurn):
                if position == 0 and turn.content == OPENING_USER_TEXT:
                    continue  # put there by the projection, never said by anyone
                messages.append(_user_message(turn))
                continue
            self._failed_chats(failures.pop(turn_index, ()), parent, key, messages)
            owner = owners[turn_index] if turn_index < len(owners) else (owners[-1] if owners else None)
            agent = self.agent_for(owner, parent)
            where = agent.span_id if agent is not None else parent
            output = _assistant_message(turn)
            remaining[owner] = remaining.get(owner, 1) - 1
            self._chat(agent, where, key, turn_index, messages, output, last=remaining[owner] <= 0)
            turn_index += 1
            messages.append(output)
            for call in turn.calls:
                if call.missing:
                    continue
                self._tool(where, call, calls_by_id.get(call.id), relays.get(call.id))
                messages.append(
                    {
                        "role": "tool",
                        "parts": [{"type": "tool_call_response", "id": call.id, "response": call.output}],
                    }
                )
        for rest in failures.values():
            self._failed_chats(rest, parent, key, messages)
        for agent in [agent for agent in self.agents.values() if agent.parent == parent]:
            self._finish_agent(agent)

    def _failed_chats(
        self, errors: Sequence[ViewNode], parent: str | None, key: str, history: list[dict[str, Any]]
    ) -> None:
        """A failed model call (an ``error`` of a provider run, e.g. an overloaded API that was
        retried): a ``chat`` span with an error status and the history it was sent."""
        for view in errors:
            agent = self.agent_for(self.owner(view.run_id), parent)
            where = agent.span_id if agent is not None else parent
            assert isinstance(view.content, ErrorContent)
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.conversation.id": self.cid,
                "gen_ai.input.messages": _json.encode(history).decode(),
                "error.type": "provider_error",
            }
            span_id = _hex_id(self.cid, "failed", key, view.id, view.run_id, size=8)
            start = self.tick()
            span = self._span(
                span_id,
                where,
                "chat",
                start,
                self.tick(),
                attributes,
                SPAN_KIND_CLIENT,
                STATUS_ERROR,
                view.content.message,
            )
            self.spans.append(span)

    def _chat(
        self,
        agent: _Agent | None,
        parent: str | None,
        key: str,
        index: int,
        history: list[dict[str, Any]],
        output: dict[str, Any],
        *,
        last: bool,
    ) -> None:
        start = self.tick()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": self.cid,
            "gen_ai.input.messages": _json.encode(history).decode(),
            "gen_ai.output.messages": _json.encode([output]).decode(),
        }
        if agent is not None and agent.usage:
            # in order, one usage per model call; the agent's last turn takes what is left
            taken = agent.usage if last else agent.usage[:1]
            del agent.usage[: len(taken)]
            for numbers in taken:
                for name, value in numbers.items():
                    attributes[name] = attributes.get(name, 0) + value
        span_id = _hex_id(self.cid, "chat", key, agent.run if agent else "", str(index), size=8)
        self.spans.append(
            self._span(span_id, parent, "chat", start, self.tick(), attributes, SPAN_KIND_CLIENT)
        )

    def _tool(
        self, parent: str | None, call: ToolExchange, view: ViewNode | None, relay: ViewNode | None
    ) -> None:
        span_id = _hex_id(self.cid, "tool", call.id, size=8)
        start = self.tick()
        if view is not None:
            for number, branch in enumerate(view.branches):
                self.thread(branch, parent=span_id, key=f"{call.id}/{number}")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.conversation.id": self.cid,
            "gen_ai.tool.call.arguments": _json.encode(call.input).decode(),
        }
        output = call.output
        failed = call.denied or (isinstance(output, dict) and output.get("error") is not None)
        attributes["gen_ai.tool.call.result"] = (
            output if isinstance(output, str) else _json.encode(output).decode()
        )
        status, message = 0, ""
        if failed:
            status, message = STATUS_ERROR, str(output.get("error") or output.get("reason") or "denied")
            attributes["error.type"] = "denied" if call.denied else "tool_error"
        name = f"execute_tool {call.name}"
        span = self._span(
            span_id, parent, name, start, self.tick(), attributes, SPAN_KIND_INTERNAL, status, message
        )
        if relay is not None:
            span = msgspec.structs.replace(span, events=(self._relay_event(relay, start),))
        self.spans.append(span)

    def _relay_event(self, view: ViewNode, time_ns: int) -> SpanEvent:
        """A permission request and its decision (no GenAI convention has one): a span event
        ``convograph.relay`` that `genai.tool_events` reads back as ``relay`` / ``relay_resolved``."""
        content = view.content
        assert isinstance(content, RelayContent)
        attributes: dict[str, Any] = {
            "convograph.relay.id": view.id,
            "convograph.relay.tool": content.tool,
            "convograph.relay.params": _json.encode(content.params).decode(),
        }
        info = q.relay_info(self.conv, view.id)
        if info is not None and info.decision is not None:
            attributes["convograph.relay.approved"] = info.decision.approved
            if info.decision.reason is not None:
                attributes["convograph.relay.reason"] = info.decision.reason
        return SpanEvent(name=RELAY_EVENT, time_ns=time_ns, attributes=attributes)

    def _span(
        self,
        span_id: str,
        parent: str | None,
        name: str,
        start: int,
        end: int,
        attributes: dict[str, Any],
        kind: int,
        status: int = 0,
        message: str = "",
    ) -> Span:
        return Span(
            trace_id=self.trace,
            span_id=span_id,
            parent_span_id=parent,
            name=name,
            kind=kind,
            start_ns=start,
            end_ns=end,
            attributes=attributes,
            status_code=status,
            status_message=message,
            resource={"service.name": "convograph"},
            scope_name=SCOPE,
        )


def _turn_owners(
    views: list[ViewNode], owner: Any, starts_turn: Callable[[str], bool] | None
) -> tuple[list[str | None], dict[int, list[ViewNode]]]:
    """The agent run of each assistant turn, split as `build_history` splits them (a user message,
    text / reasoning after tool calls, or a call that opened a model call's calls after others,
    starts a new turn); and the errors of provider runs (runs without a lifecycle) by the number of
    turns before them."""
    owners: list[str | None] = []
    failures: dict[int, list[ViewNode]] = {}
    open_turn = False
    has_calls = False
    for view in views:
        content = view.content
        if isinstance(content, ErrorContent) and owner(view.run_id) != view.run_id:
            failures.setdefault(len(owners), []).append(view)  # emitted before the next turn
            continue
        if isinstance(content, UserContent):
            open_turn = has_calls = False
            continue
        if isinstance(content, TextContent | ReasoningContent):
            if open_turn and has_calls:
                open_turn = has_calls = False
        elif not isinstance(content, ToolCallContent):
            continue
        elif open_turn and has_calls and starts_turn is not None and starts_turn(view.id):
            open_turn = has_calls = False
        if not open_turn:
            owners.append(owner(view.run_id))
            open_turn = True
        if isinstance(content, ToolCallContent):
            has_calls = True
    return owners, failures


def _user_message(turn: UserTurn) -> dict[str, Any]:
    content = turn.content
    if isinstance(content, str):
        return {"role": "user", "parts": [{"type": "text", "content": content}]}
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "content": part.text})
        elif isinstance(part, ImagePart | DocumentPart):
            modality = "image" if isinstance(part, ImagePart) else "document"
            parts.append(
                {"type": "blob", "modality": modality, "mime_type": part.media_type, "content": part.data}
            )
    return {"role": "user", "parts": parts}


def _assistant_message(turn: AssistantTurn) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for block in turn.blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ThinkingBlock):
            part: dict[str, Any] = {"type": "reasoning", "content": block.text}
            if block.signature is not None:
                part["signature"] = block.signature
            if block.redacted_data is not None:
                part["redacted_data"] = block.redacted_data
            parts.append(part)
    for call in turn.calls:
        parts.append({"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.input})
    return {"role": "assistant", "parts": parts}


def _run_error(conv: Conversation, run_id: str) -> str:
    for chunk in q.run_chunks(conv, run_id):
        if isinstance(chunk.event, Error):
            return chunk.event.message
    return "aborted"


def first_timestamp_ns(events: Sequence[Event]) -> int:
    """The first event timestamp in nanoseconds (epoch milliseconds or seconds, or ISO 8601), else 0."""
    for event in events:
        stamp = event.timestamp
        if isinstance(stamp, int) and not isinstance(stamp, bool):
            return stamp * 1_000_000 if stamp > 10**11 else stamp * 1_000_000_000
        if isinstance(stamp, float):
            return round(stamp * 1e6) if stamp > 1e11 else round(stamp * 1e6) * 1000  # ms, or s to the µs
        if isinstance(stamp, str):
            try:
                moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            except ValueError:
                continue
            return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000
    return 0
