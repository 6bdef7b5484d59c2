"""GenAI semantic-convention spans -> convograph events: the one mapping (docs/integrations.md).

Span kinds (`classify`, from ``gen_ai.operation.name``):

- ``invoke_agent`` / ``invoke_workflow`` -> an **agent run** ``otel:<span>``: ``harness_start``
  (``agentId`` = ``gen_ai.agent.name``), ``error`` when the span failed, ``harness_end`` (with
  ``totalUsage`` when the span reports usage). Its ``parentId`` (the *link*, decided by the caller,
  who knows the parent span) is the tool call that ran it (a subagent), the parent agent's run, or
  nothing (a top-level agent).
- ``chat`` / ``text_completion`` / ``generate_content`` -> a **provider call** ``otel:<span>``:
  one ``usage`` (zero, marked ``usageReported: false``, when the span reports none), ``error``
  when it failed; and its messages (input, then output) as content events.
- ``execute_tool`` -> ``tool_call`` (deduplicated with the model's request for it),
  ``tool_progress`` (the execution record, always) and ``tool_result`` (when the span carries a
  result, or failed).
- anything else is not conversation content: another GenAI operation (embeddings, retrieval,
  memory, ...) or a span that is not GenAI at all. The caller skips and counts it.

**Content** (messages) does not belong to the span that shows it: `content` gives each message an
identity chained from the ones before it, so the same message from any span is stored once.

Everything a span says that is not mapped stays on its anchor event (``harness_start``, the
provider call's ``usage``, the tool's ``tool_progress``) under the extra field ``otel``: ids,
name, kind, times, status, unmapped attributes, unmapped span events, links, resource, scope.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any, Final, Literal

from convograph.events import (
    Error,
    Event,
    HarnessEnd,
    HarnessStart,
    Relay,
    RelayResolved,
    ToolCall,
    ToolProgress,
    ToolResult,
    TotalUsage,
    Usage,
)
from convograph.integrations.otlp.content import (
    HistoryMemo,
    content_events,
    content_parent,
    content_run,
    iso,
    run_id,
    text_of,
)
from convograph.integrations.otlp.messages import (
    DETAILS_EVENT,
    INPUT_MESSAGES,
    LEGACY_MESSAGE_EVENTS,
    OUTPUT_MESSAGES,
    SpanMessages,
    maybe_json,
    span_messages,
)
from convograph.integrations.otlp.model import SPAN_KIND_CLIENT, STATUS_ERROR, Span, SpanEvent

__all__ = [
    "AGENT_OPERATIONS",
    "CONVERSATION_ID",
    "INFERENCE_OPERATIONS",
    "MESSAGE_EVENTS",
    "TOOL_OPERATIONS",
    "Kind",
    "agent_events",
    "call_end_events",
    "carries_messages",
    "classify",
    "content_parent",
    "inference_events",
    "logged_content",
    "run_id",
    "tool_call_id",
    "tool_events",
]

OPERATION: Final = "gen_ai.operation.name"
CONVERSATION_ID: Final = "gen_ai.conversation.id"
AGENT_OPERATIONS: Final = frozenset({"invoke_agent", "invoke_workflow"})
INFERENCE_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content"})
TOOL_OPERATIONS: Final = frozenset({"execute_tool"})

USAGE_INPUT: Final = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
USAGE_OUTPUT: Final = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
USAGE_CACHE_READ: Final = ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens")
USAGE_CACHE_CREATION: Final = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
)
_USAGE_KEYS: Final = frozenset(USAGE_INPUT + USAGE_OUTPUT + USAGE_CACHE_READ + USAGE_CACHE_CREATION)
TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_RESULT: Final = "gen_ai.tool.call.result"
RELAY_EVENT: Final = "convograph.relay"
"""A span event convograph's export puts on a tool span for a permission request (`encode`)."""

Kind = Literal["agent", "inference", "tool", "genai", "other"]
MESSAGE_EVENTS: Final = LEGACY_MESSAGE_EVENTS | {DETAILS_EVENT}
"""Span events (and log records, `logs`) that carry messages."""


def classify(span: Span) -> Kind:
    """What the span is to a conversation (module docstring)."""
    operation = span.attributes.get(OPERATION)
    if isinstance(operation, str):
        if operation in INFERENCE_OPERATIONS:
            return "inference"
        if operation in AGENT_OPERATIONS:
            return "agent"
        if operation in TOOL_OPERATIONS:
            return "tool"
        return "genai"
    if "gen_ai.request.model" in span.attributes and "gen_ai.tool.name" not in span.attributes:
        return "inference"  # conventions older than gen_ai.operation.name
    return "other"


def carries_messages(span: Span) -> bool:
    """Whether the span itself records messages (attributes or message span events)."""
    attributes = span.attributes
    if INPUT_MESSAGES in attributes or OUTPUT_MESSAGES in attributes:
        return True
    return any(event.name in MESSAGE_EVENTS for event in span.events)


def tool_call_id(span: Span) -> str:
    """The call id of an ``execute_tool`` span (``gen_ai.tool.call.id``, else one made from the span)."""
    value = span.attributes.get("gen_ai.tool.call.id")
    return value if isinstance(value, str) and value else f"otel:call:{span.span_id}"


# -- anchors: what each span kind writes about itself ------------------------------------------------


def agent_events(span: Span, link: str | None) -> list[Event]:
    """The agent run of an ``invoke_agent`` / ``invoke_workflow`` span; ``link`` is its ``parentId``."""
    run = run_id(span.span_id)
    attributes = span.attributes
    name = attributes.get("gen_ai.agent.name") or attributes.get("gen_ai.workflow.name")
    agent = name if isinstance(name, str) and name else span.name or "agent"
    consumed = set(_USAGE_KEYS)
    events: list[Event] = []
    content: list[Event] = []
    found = SpanMessages()
    if span.kind == SPAN_KIND_CLIENT:  # a remote agent: no local model calls carry its messages
        found = span_messages(span)
        consumed |= found.consumed_attributes
        content = content_events(span, found)
    meta = _meta(span, consumed, found)
    events.append(
        HarnessStart(
            run_id=run,
            parent_id=link,
            agent_id=agent,
            event_id=f"otel:{span.span_id}:start",
            timestamp=iso(span.start_ns),
            extra={"otel": meta},
        )
    )
    events.extend(content)
    failed = span.status_code == STATUS_ERROR
    if failed:
        events.append(
            Error(
                run_id=run,
                message=_error_message(span),
                event_id=f"otel:{span.span_id}:error",
                timestamp=iso(span.end_ns),
            )
        )
    usage = _usage_numbers(attributes)
    events.append(
        HarnessEnd(
            run_id=run,
            agent_id=agent,
            reason="error" if failed else _finish_reason(attributes) or "stop",
            total_usage=TotalUsage(**usage) if usage is not None else None,
            event_id=f"otel:{span.span_id}:end",
            timestamp=iso(span.end_ns),
        )
    )
    return events


def inference_events(
    span: Span,
    known: Container[str] = frozenset(),
    logged: Sequence[SpanEvent] = (),
    memo: HistoryMemo | None = None,
    *,
    with_end: bool = True,
) -> list[Event]:
    """A model call: its messages as content events, then its ``usage`` (and ``error``,
    `call_end_events`; left out when not ``with_end``). Content events whose ids are in ``known``
    are left out (`content_events`, which ``memo`` speeds up). ``logged``: the message events sent
    for the span as log records (`logs`), read when the span carries no messages itself."""
    found = span_messages(span, logged, memo.prefixes if memo is not None else None)
    events = content_events(span, found, known, memo)
    if with_end:
        events += call_end_events(span, found)
    return events


def call_end_events(span: Span, found: SpanMessages | None = None) -> list[Event]:
    """What ends a model call: its ``usage`` (a model call's end marks where the next one's tool
    calls begin, docs/projections.md), and an ``error`` when it failed. ``found``: its messages
    (`span_messages`; read from the span when not given), whose attributes the ``otel`` extra
    leaves out."""
    if found is None:
        found = span_messages(span)
    run = run_id(span.span_id)
    usage = _usage_numbers(span.attributes)
    consumed = found.consumed_attributes
    meta = _meta(span, _USAGE_KEYS | consumed if consumed else _USAGE_KEYS, found)
    meta["usageReported"] = usage is not None
    numbers = usage if usage is not None else {}
    events: list[Event] = [
        Usage(
            run_id=run,
            parent_id=content_parent(span),
            input_tokens=numbers.get("input_tokens", 0),
            output_tokens=numbers.get("output_tokens", 0),
            cache_read_tokens=numbers.get("cache_read_tokens"),
            cache_creation_tokens=numbers.get("cache_creation_tokens"),
            event_id=f"otel:{span.span_id}:usage",
            timestamp=iso(span.end_ns),
            extra={"otel": meta},
        )
    ]
    if span.status_code == STATUS_ERROR:
        events.append(
            Error(
                run_id=run,
                parent_id=content_parent(span),
                message=_error_message(span),
                event_id=f"otel:{span.span_id}:error",
                timestamp=iso(span.end_ns),
            )
        )
    return events


def logged_content(
    span: Span,
    logged: Sequence[SpanEvent],
    known: Container[str] = frozenset(),
    memo: HistoryMemo | None = None,
) -> list[Event]:
    """The content events of the messages logged for ``span`` (log records, `logs`), as its own
    messages would give (`content_events`); ``span`` may be only what is known of it (ids, parent,
    times), when it arrived before (or never arrives). Ids in ``known`` are left out."""
    return content_events(span, span_messages(span, logged), known, memo)


def tool_events(span: Span) -> list[Event]:
    """A tool execution: the call (deduplicated with the model's request), its record, its result."""
    attributes = span.attributes
    call = tool_call_id(span)
    raw_name = attributes.get("gen_ai.tool.name")
    name = raw_name if isinstance(raw_name, str) and raw_name else span.name or "tool"
    parent = content_parent(span)
    run = content_run(span)
    failed = span.status_code == STATUS_ERROR
    consumed = {TOOL_ARGUMENTS, TOOL_RESULT}
    events: list[Event] = [
        ToolCall(
            run_id=run,
            parent_id=parent,
            id=call,
            name=name,
            input=maybe_json(attributes.get(TOOL_ARGUMENTS)),
            event_id=f"otel:call:{call}",
            timestamp=iso(span.start_ns),
        ),
        ToolProgress(
            run_id=run,
            parent_id=parent,
            id=f"otel:{span.span_id}:exec",
            tool_call_id=call,
            name=name,
            content={"status": "error" if failed else "ok", "durationMs": _duration_ms(span)},
            event_id=f"otel:{span.span_id}:exec",
            timestamp=iso(span.end_ns),
            extra={"otel": _meta(span, consumed, None, skip_events=RELAY_EVENT)},
        ),
    ]
    if span.events:
        events.extend(_relay_events(span, run, parent, call, name))
    if failed or TOOL_RESULT in attributes:
        # a recorded result wins (a denial is a result too); a failure without one is {"error"}
        output = (
            maybe_json(attributes[TOOL_RESULT])
            if TOOL_RESULT in attributes
            else {"error": _error_message(span)}
        )
        events.append(
            ToolResult(
                run_id=run,
                parent_id=parent,
                id=call,
                name=name,
                output=output,
                event_id=f"otel:result:{call}",
                timestamp=iso(span.end_ns),
            )
        )
    return events


def _relay_events(span: Span, run: str, parent: str | None, call: str, name: str) -> list[Event]:
    """``convograph.relay`` span events (convograph's own export of a permission request and its
    decision, `encode`) back as ``relay`` and ``relay_resolved``."""
    out: list[Event] = []
    for event in span.events:
        if event.name != RELAY_EVENT:
            continue
        attributes = event.attributes
        relay_id = text_of(attributes.get("convograph.relay.id"))
        if relay_id is None:
            continue
        params = maybe_json(attributes.get("convograph.relay.params"))
        out.append(
            Relay(
                run_id=run,
                parent_id=parent,
                id=relay_id,
                kind="permission",
                tool_call_id=call,
                tool=text_of(attributes.get("convograph.relay.tool")) or name,
                params=params if isinstance(params, dict) else {},
                event_id=f"otel:relay:{relay_id}",
                timestamp=iso(event.time_ns),
            )
        )
        approved = attributes.get("convograph.relay.approved")
        if isinstance(approved, bool):
            out.append(
                RelayResolved(
                    relay_id=relay_id,
                    approved=approved,
                    tool=text_of(attributes.get("convograph.relay.tool")) or name,
                    reason=text_of(attributes.get("convograph.relay.reason")),
                    event_id=f"relay-decision:{relay_id}",
                    timestamp=iso(event.time_ns),
                )
            )
    return out


# -- metadata kept on the anchor events ---------------------------------------------------------------


def _meta(
    span: Span, consumed: set[str] | frozenset[str], found: SpanMessages | None, *, skip_events: str = ""
) -> dict[str, Any]:
    """Everything about the span that is not mapped to an event field (the ``otel`` extra)."""
    meta: dict[str, Any] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "name": span.name,
        "kind": span.kind,
        "startTimeUnixNano": span.start_ns,
        "endTimeUnixNano": span.end_ns,
    }
    if span.parent_span_id is not None:
        meta["parentSpanId"] = span.parent_span_id
    operation = span.attributes.get(OPERATION)
    if isinstance(operation, str):
        meta["operation"] = operation
    if span.status_code or span.status_message:
        meta["status"] = {"code": span.status_code, "message": span.status_message}
    kept = {key: value for key, value in span.attributes.items() if key not in consumed}
    if kept:
        meta["attributes"] = kept
    if span.events:
        skip = found.consumed_events if found is not None else frozenset()
        events = [
            {"name": event.name, "timeUnixNano": event.time_ns, "attributes": event.attributes}
            for index, event in enumerate(span.events)
            if index not in skip and event.name != skip_events
        ]
        if events:
            meta["events"] = events
    if span.links:
        meta["links"] = list(span.links)
    if span.resource:
        meta["resource"] = span.resource
    if span.scope_name:
        meta["scope"] = {"name": span.scope_name, "version": span.scope_version}
    if found is not None:
        if found.system:
            meta["systemInstructions"] = found.system
        if found.unmapped:
            meta["unmappedParts"] = found.unmapped
        if found.problems:
            meta["problems"] = found.problems
    if span.dropped_attributes or span.dropped_events or span.dropped_links:
        meta["dropped"] = {
            "attributes": span.dropped_attributes,
            "events": span.dropped_events,
            "links": span.dropped_links,
        }
    return meta


def _usage_numbers(attributes: dict[str, Any]) -> dict[str, int] | None:
    numbers: dict[str, int] = {}
    for field, names in (
        ("input_tokens", USAGE_INPUT),
        ("output_tokens", USAGE_OUTPUT),
        ("cache_read_tokens", USAGE_CACHE_READ),
        ("cache_creation_tokens", USAGE_CACHE_CREATION),
    ):
        for name in names:
            value = attributes.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                numbers[field] = value
                break
    if not numbers:
        return None
    numbers.setdefault("input_tokens", 0)
    numbers.setdefault("output_tokens", 0)
    return numbers


def _finish_reason(attributes: dict[str, Any]) -> str | None:
    reasons = attributes.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and reasons and isinstance(reasons[0], str):
        return reasons[0]
    return None


def _error_message(span: Span) -> str:
    """The span's failure in words: the status message, else the exception event, else error.type."""
    if span.status_message:
        return span.status_message
    for event in span.events:
        if event.name == "exception":
            kind = event.attributes.get("exception.type")
            text = event.attributes.get("exception.message")
            if text or kind:
                return f"{kind}: {text}" if kind and text else str(text or kind)
    error_type = span.attributes.get("error.type")
    return f"{span.name or 'span'} failed" + (f" ({error_type})" if error_type else "")


def _duration_ms(span: Span) -> float:
    return round(max(span.end_ns - span.start_ns, 0) / 1e6, 3)
