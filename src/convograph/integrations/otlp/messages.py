"""The messages of a GenAI span, read from wherever the instrumentation put them.

GenAI semantic conventions record a model call's messages in three shapes; `span_messages` reads
all of them into one form, the current one (``{"role", "parts": [...]}`` lists,
``gen_ai.input.messages`` / ``gen_ai.output.messages`` / ``gen_ai.system_instructions``):

1. span attributes holding those lists, as JSON text (what the Python ``opentelemetry-util-genai``
   writes) or as structured ``AnyValue`` arrays;
2. a span event ``gen_ai.client.inference.operation.details`` carrying the same attributes;
3. the older per-message span events ``gen_ai.system.message``, ``gen_ai.user.message``,
   ``gen_ai.assistant.message``, ``gen_ai.tool.message`` and ``gen_ai.choice`` (semantic
   conventions up to 1.36), whose fields (``content``, ``role``, ``tool_calls``, ``id``,
   ``message``, ``index``, ``finish_reason``) sit in the event's attributes, often as JSON text.

Shapes 2 and 3 also come as OpenTelemetry **log records** (events of the Logs API) correlated to
the span by its trace and span id, which is how most instrumentations send content by default;
`convograph.integrations.otlp.logs` turns such a record into a `SpanEvent` (the record's body
fields over its attributes), read here after the span's own.

What is read is reported (`SpanMessages.consumed_attributes`, ``consumed_events``) so the caller
keeps everything else. Unreadable JSON is not an error: it is listed in ``problems`` and the raw
value stays with the span's kept attributes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from convograph.integrations.otlp.model import Span, SpanEvent

__all__ = [
    "DETAILS_EVENT",
    "INPUT_MESSAGES",
    "LEGACY_MESSAGE_EVENTS",
    "OUTPUT_MESSAGES",
    "SYSTEM_INSTRUCTIONS",
    "HistoryPrefixes",
    "SpanMessages",
    "maybe_json",
    "span_messages",
]

INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
DETAILS_EVENT: Final = "gen_ai.client.inference.operation.details"
LEGACY_MESSAGE_EVENTS: Final = frozenset(
    {
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
    }
)

_decode = msgspec.json.Decoder()


class SpanMessages(msgspec.Struct, kw_only=True):
    """A span's messages in the current semantic-convention form."""

    input: list[dict[str, Any]] = msgspec.field(default_factory=list)
    output: list[dict[str, Any]] = msgspec.field(default_factory=list)
    system: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """System instruction parts (``gen_ai.system_instructions``)."""
    consumed_attributes: frozenset[str] = frozenset()
    consumed_events: frozenset[int] = frozenset()
    """Indexes of the span events that were read as messages."""
    problems: list[str] = msgspec.field(default_factory=list)
    unmapped: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """Messages and parts no event represents (unknown roles or part types), kept verbatim."""


def maybe_json(value: Any) -> Any:
    """``value``, or the JSON it holds when it is a string that decodes to an object or an array.

    The conventions ask instrumentations to record structured values, but span attributes often
    carry them serialized; a plain string that is not such JSON is returned as it is."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return _decode.decode(value)
        except (msgspec.DecodeError, RecursionError):
            return value
    return value


def span_messages(
    span: Span, logged: Sequence[SpanEvent] = (), prefixes: HistoryPrefixes | None = None
) -> SpanMessages:
    """Everything the span says about its messages (attributes first, then span events); when the
    span itself carries none, the message events ``logged`` for it as log records (in order).
    ``consumed_events`` indexes ``span.events`` only. ``prefixes`` saves re-reading the part of
    the input history read before under the same parent span."""
    out = SpanMessages()
    attributes = span.attributes
    if (
        not span.events
        and not logged
        and INPUT_MESSAGES not in attributes
        and OUTPUT_MESSAGES not in attributes
        and SYSTEM_INSTRUCTIONS not in attributes
    ):
        return out  # no content captured: the common case
    consumed: set[str] = set()
    for name, target in ((INPUT_MESSAGES, out.input), (OUTPUT_MESSAGES, out.output)):
        if name in span.attributes:
            value = span.attributes[name]
            if prefixes is not None and name == INPUT_MESSAGES and isinstance(value, str):
                messages = prefixes.read((span.trace_id, span.parent_span_id), value)
                if messages is None:
                    out.problems.append(f"`{name}` is not a JSON array of messages")
            else:
                messages = _message_list(value, name, out.problems)
            if messages is not None:
                target.extend(messages)
                consumed.add(name)
    if SYSTEM_INSTRUCTIONS in span.attributes:
        parts = _part_list(span.attributes[SYSTEM_INSTRUCTIONS], SYSTEM_INSTRUCTIONS, out.problems)
        if parts is not None:
            out.system.extend(parts)
            consumed.add(SYSTEM_INSTRUCTIONS)
    events: set[int] = set()
    if not consumed:
        events = _read_events(span.events, out)
        if not events and logged:
            _read_events(logged, out)
    out.consumed_attributes = frozenset(consumed)
    out.consumed_events = frozenset(events)
    return out


def _read_events(events: Sequence[SpanEvent], out: SpanMessages) -> set[int]:
    """Messages from a details event (the first that has any), else from the per-message events;
    returns the indexes of the events read."""
    for index, event in enumerate(events):
        if event.name == DETAILS_EVENT:
            details = SpanMessages()
            _read_details(event.attributes, details)
            if details.input or details.output or details.system:
                out.input.extend(details.input)
                out.output.extend(details.output)
                out.system.extend(details.system)
                out.problems.extend(details.problems)
                return {index}
    return {
        index
        for index, event in enumerate(events)
        if event.name in LEGACY_MESSAGE_EVENTS and _read_legacy(event.name, event.attributes, out)
    }


def _read_details(attributes: dict[str, Any], out: SpanMessages) -> None:
    for name, target in ((INPUT_MESSAGES, out.input), (OUTPUT_MESSAGES, out.output)):
        if name in attributes:
            target.extend(_message_list(attributes[name], name, out.problems) or ())
    if SYSTEM_INSTRUCTIONS in attributes:
        out.system.extend(
            _part_list(attributes[SYSTEM_INSTRUCTIONS], SYSTEM_INSTRUCTIONS, out.problems) or ()
        )


def _message_list(value: Any, name: str, problems: list[str]) -> list[dict[str, Any]] | None:
    value = maybe_json(value)
    if not isinstance(value, list):
        problems.append(f"`{name}` is not a JSON array of messages")
        return None
    return [message for message in (_message(item) for item in value) if message is not None]


class HistoryPrefixes:
    """The input-history text last read under each parent span, with the messages it held, for the
    most recently used parents (at most ``max_chars`` characters of text in all). Every model call
    re-sends the whole history as one JSON array: when the new text extends the last one (the same
    text up to its closing bracket, then more elements), only the new elements are parsed and the
    earlier messages are the same objects (`content.HistoryMemo` then recognises them by identity).
    Exact: the old text ends with complete elements, so the new array's first elements are those."""

    def __init__(self, max_chars: int = 32 << 20) -> None:
        self.max_chars = max_chars
        self._texts: OrderedDict[tuple[str, str | None], tuple[str, list[dict[str, Any]]]] = OrderedDict()
        self._chars = 0

    def read(self, key: tuple[str, str | None], text: str) -> list[dict[str, Any]] | None:
        """The messages of ``text`` (a JSON array), None when it is not one."""
        known = self._texts.pop(key, None)
        messages = _extended(known[0], known[1], text) if known is not None else None
        if known is not None:
            self._chars -= len(known[0])
        if messages is None:
            messages = _message_list(text, INPUT_MESSAGES, [])
            if messages is None:
                return None
        if len(text) <= self.max_chars // 4:
            self._texts[key] = (text, messages)
            self._chars += len(text)
            while self._chars > self.max_chars:
                old, _ = self._texts.popitem(last=False)[1]
                self._chars -= len(old)
        return messages


def _extended(old_text: str, old: list[dict[str, Any]], text: str) -> list[dict[str, Any]] | None:
    """``old`` plus the messages ``text`` adds after ``old_text``'s elements; None when ``text``
    does not continue ``old_text`` (then it is read whole)."""
    base = old_text.rstrip()
    if not base.endswith("]") or not text.startswith(base[:-1]):
        return None
    tail = text[len(base) - 1 :].lstrip()
    if tail.startswith("]"):
        return old if not tail[1:].strip() else None
    if not tail.startswith(","):
        return None
    try:
        more = _decode.decode("[" + tail[1:])
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(more, list):
        return None
    return old + [message for message in (_message(item) for item in more) if message is not None]


def _part_list(value: Any, name: str, problems: list[str]) -> list[dict[str, Any]] | None:
    value = maybe_json(value)
    if isinstance(value, str):  # a bare string of instructions
        return [{"type": "text", "content": value}]
    if not isinstance(value, list):
        problems.append(f"`{name}` is not a JSON array of parts")
        return None
    return [part for part in value if isinstance(part, dict)]


def _message(item: Any) -> dict[str, Any] | None:
    """A message as ``{"role": str, "parts": [dict, ...], ...}``; a ``content`` string (an older
    shape) becomes one text part. The item itself when it already has that shape (the usual case)."""
    if not isinstance(item, dict):
        return None
    role = item.get("role")
    parts = item.get("parts")
    if isinstance(role, str) and isinstance(parts, list) and all(isinstance(part, dict) for part in parts):
        return item
    if isinstance(parts, list):
        clean = [part for part in parts if isinstance(part, dict)]
    elif isinstance(item.get("content"), str):
        clean = [{"type": "text", "content": item["content"]}]
    else:
        clean = []
    return {**item, "role": role if isinstance(role, str) else "user", "parts": clean}


# -- the older per-message events --------------------------------------------------------------------


def _read_legacy(name: str, attributes: dict[str, Any], out: SpanMessages) -> bool:
    """Append the message a ``gen_ai.*.message`` / ``gen_ai.choice`` event describes. False when it
    says nothing readable (content capture off: the event has no content)."""
    if name == "gen_ai.choice":
        message = maybe_json(attributes.get("message"))
        index = attributes.get("index", 0)
        if not isinstance(message, dict):
            message = {"role": "assistant", "content": attributes.get("content"), "tool_calls": None}
        if index not in (0, "0", None):
            return True  # only the first choice continues the conversation; the event is read
        parts = _legacy_parts(message.get("content"), message.get("tool_calls"))
        if not parts:
            return False
        out.output.append(
            {"role": "assistant", "parts": parts, "finish_reason": attributes.get("finish_reason")}
        )
        return True
    role = name.removeprefix("gen_ai.").removesuffix(".message")
    content = attributes.get("content")
    if role == "system":
        parts = _legacy_parts(content, None)
        out.system.extend(parts)
        return bool(parts)
    if role == "tool":
        call_id = attributes.get("id")
        if not isinstance(call_id, str):
            return False
        out.input.append(
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": content}]}
        )
        return True
    parts = _legacy_parts(content, attributes.get("tool_calls") if role == "assistant" else None)
    if not parts:
        return False
    out.input.append({"role": role if role in ("user", "assistant") else "user", "parts": parts})
    return True


def _legacy_parts(content: Any, tool_calls: Any) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    content = maybe_json(content)
    if isinstance(content, str) and content:
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):  # OpenAI-style content parts
        for item in content:
            if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
                parts.append({"type": "text", "content": item["text"]})
            elif isinstance(item, str):
                parts.append({"type": "text", "content": item})
    calls = maybe_json(tool_calls)
    if isinstance(calls, list):
        for call in calls:
            if not isinstance(call, dict):
                continue
            raw_function = call.get("function")
            function: dict[str, Any] = raw_function if isinstance(raw_function, dict) else {}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name") or call.get("name") or "tool",
                    "arguments": maybe_json(function.get("arguments", call.get("arguments"))),
                }
            )
    return parts
