"""A GenAI span's messages -> content events, with identities chained across spans.

Every model call re-sends the whole history, and spans arrive in any order (children before
parents, usually). So each message gets an identity chained from the one before it,
``h_i = H(h_{i-1}, role, canonical content)``, starting from the system instructions; its events
carry ``eventId``s derived from it, and the event log stores each at most once. Whichever span
shows a message first writes it, into the content run ``otel:<parent span>/m`` of the span's parent
(or ``otel:<trace>/m`` for a root span), with ``parentId`` ``otel:<parent span>``. Canonical content
leaves out reasoning (often dropped from the history sent back) and tool-call arguments
(re-serialized by frameworks), so the same message seen again has the same identity. Each user
message is its own run ``otel:u:<h>`` (one ``user`` per run, as the flat graph wants). Tool calls
and results are identified by their call id (``otel:call:<id>``, ``otel:result:<id>``).
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from collections.abc import Container
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import msgspec

from convograph.events import (
    ContentPart,
    DocumentPart,
    Event,
    ImagePart,
    Reasoning,
    Text,
    TextPart,
    ToolCall,
    ToolResult,
    User,
)
from convograph.integrations.otlp.messages import HistoryPrefixes, SpanMessages, maybe_json
from convograph.integrations.otlp.model import Span

__all__ = [
    "HistoryMemo",
    "Step",
    "content_events",
    "content_parent",
    "content_run",
    "iso",
    "run_id",
    "text_of",
]


def run_id(span_id: str) -> str:
    """The run of an agent span or a provider call: ``otel:<span id>``."""
    return f"otel:{span_id}"


def content_parent(span: Span) -> str | None:
    """``parentId`` of the content a span writes: its parent span's run (None for a root span)."""
    return run_id(span.parent_span_id) if span.parent_span_id is not None else None


def content_run(span: Span) -> str:
    return f"otel:{span.parent_span_id or span.trace_id}/m"


def _digest(previous: bytes, role: bytes, content: bytes) -> bytes:
    """The identity of a message after ``previous`` (16 bytes), with ``role`` (no NUL) and content."""
    return hashlib.blake2b(previous + role + b"\x00" + content, digest_size=16).digest()


_canonical = msgspec.json.Encoder(order="sorted")
_ROOT: Final = hashlib.blake2b(b"otel-conversation", digest_size=16).digest()


def _canonical_parts(parts: list[dict[str, Any]]) -> bytes:
    """What identifies a message's content: texts, tool call / response ids, media references.
    Reasoning and tool-call arguments are left out (module docstring)."""
    key: list[Any] = []
    for part in parts:
        kind = part.get("type")
        if kind == "text":
            key.append(("t", part.get("content")))
        elif kind in ("tool_call", "server_tool_call"):
            key.append(("c", part.get("id") or part.get("name")))
        elif kind in ("tool_call_response", "server_tool_call_response"):
            key.append(("r", part.get("id")))
        elif kind in ("blob", "uri", "file"):
            key.append(("m", part.get("uri") or part.get("file_id") or _short(part.get("content"))))
    return _canonical.encode(key)


def _short(value: Any) -> str:
    return hashlib.blake2b(_canonical.encode(value), digest_size=12).hexdigest()


class _Writer:
    """Turns one span's messages into content events (see the module docstring). An event whose
    ``eventId`` is in ``known`` (already stored, the caller says) is not built at all: every model
    call re-sends the history, so most of a span's messages usually are."""

    def __init__(self, span: Span, found: SpanMessages, known: Container[str]) -> None:
        self.run = content_run(span)
        self.parent = content_parent(span)
        self.known = known
        self.events: list[Event] = []
        self.tool_names: dict[str, str] = {}
        self.unmapped: list[dict[str, Any]] = []
        system = [part for part in found.system if part.get("type") == "text"]
        self.identity = _digest(_ROOT, b"system", _canonical_parts(system))
        self.ids: list[str] = []
        """The event ids of the message being written (for `HistoryMemo`)."""
        self.names: list[tuple[str, str]] = []
        """The tool names the message being written gave (for `HistoryMemo`)."""

    def message(self, message: dict[str, Any], timestamp: str | None) -> Step:
        """Write ``message``'s events that are not known; returns what replaying it takes."""
        role = message["role"]
        parts: list[dict[str, Any]] = message["parts"]
        self.identity = _digest(self.identity, role.encode(), _canonical_parts(parts))
        self.ids, self.names = [], []
        unmapped_before = len(self.unmapped)
        tag = self.identity.hex()[:20]
        if role not in ("system", "developer"):  # those stay with the span's anchor (`_meta`)
            results = [part for part in parts if part.get("type") in _RESULT_PARTS]
            for part in results:
                self._result(part, timestamp)
            if role in ("assistant", "model"):
                self._assistant(tag, parts, timestamp)
            elif role in ("user", "human"):
                self._user(tag, [part for part in parts if part.get("type") not in _RESULT_PARTS], timestamp)
            elif not results:
                self.unmapped.append({"role": role, "parts": parts})
        return Step(
            message,
            self.identity,
            tuple(self.ids),
            tuple(self.names),
            tuple(self.unmapped[unmapped_before:]),
        )

    def replay(self, step: Step) -> None:
        """What `message` does for a message whose events are all known (`HistoryMemo`)."""
        self.identity = step.identity
        self.tool_names.update(step.tool_names)
        self.unmapped.extend(step.unmapped)

    def _assistant(self, tag: str, parts: list[dict[str, Any]], timestamp: str | None) -> None:
        texts = thoughts = calls = 0
        run, parent, known, events = self.run, self.parent, self.known, self.events
        for part in parts:
            kind = part.get("type")
            content = part.get("content")
            if kind == "text" and isinstance(content, str):
                texts += 1
                event_id = f"otel:{tag}:t{texts}"
                self.ids.append(event_id)
                if event_id not in known:
                    events.append(
                        Text(
                            run_id=run,
                            id=f"otel:t:{tag}:{texts}",
                            content=content,
                            parent_id=parent,
                            event_id=event_id,
                            timestamp=timestamp,
                        )
                    )
            elif kind == "reasoning" and isinstance(content, str):
                thoughts += 1
                event_id = f"otel:{tag}:r{thoughts}"
                self.ids.append(event_id)
                if event_id not in known:
                    events.append(
                        Reasoning(
                            run_id=run,
                            id=f"otel:r:{tag}:{thoughts}",
                            content=content,
                            signature=text_of(part.get("signature")),
                            redacted_data=text_of(part.get("redacted_data")),
                            parent_id=parent,
                            event_id=event_id,
                            timestamp=timestamp,
                        )
                    )
            elif kind in ("tool_call", "server_tool_call"):
                calls += 1
                call = text_of(part.get("id")) or f"otel:c:{tag}:{calls}"
                name = text_of(part.get("name")) or "tool"
                self.tool_names[call] = name
                self.names.append((call, name))
                event_id = f"otel:call:{call}"
                self.ids.append(event_id)
                if event_id not in known:
                    arguments = part.get("arguments") if kind == "tool_call" else part.get("server_tool_call")
                    events.append(
                        ToolCall(
                            run_id=run,
                            id=call,
                            name=name,
                            input=maybe_json(arguments),
                            parent_id=parent,
                            event_id=event_id,
                            timestamp=timestamp,
                        )
                    )
            elif kind not in _RESULT_PARTS:
                self.unmapped.append(part)

    def _user(self, tag: str, parts: list[dict[str, Any]], timestamp: str | None) -> None:
        event_id = f"otel:{tag}:user"
        self.ids.append(event_id)
        if event_id in self.known:
            return
        content: list[ContentPart] = []
        kept: list[dict[str, Any]] = []
        for part in parts:
            converted = _user_part(part)
            if converted is None:
                kept.append(part)
            else:
                content.append(converted)
        if not content and not kept:
            return
        body: str | list[ContentPart]
        if len(content) == 1 and isinstance(content[0], TextPart) and not kept:
            body = content[0].text
        else:
            body = content
        self.events.append(
            User(
                run_id=f"otel:u:{tag}",
                id=f"otel:u:{tag}",
                content=body,
                extra={"otelParts": kept} if kept else None,
                parent_id=self.parent,
                event_id=event_id,
                timestamp=timestamp,
            )
        )

    def _result(self, part: dict[str, Any], timestamp: str | None) -> None:
        call = part.get("id")
        if not isinstance(call, str) or not call:
            self.unmapped.append(part)
            return
        event_id = f"otel:result:{call}"
        self.ids.append(event_id)
        if event_id in self.known:
            return
        output = part.get("response", part.get("result", part.get("server_tool_call_response")))
        name = self.tool_names.get(call) or text_of(part.get("name"))
        self.events.append(
            ToolResult(
                run_id=self.run,
                id=call,
                name=name or "tool",
                output=maybe_json(output),
                parent_id=self.parent,
                event_id=event_id,
                timestamp=timestamp,
            )
        )


_RESULT_PARTS: Final = frozenset({"tool_call_response", "server_tool_call_response"})


def text_of(value: Any) -> str | None:
    """``value`` when it is a non-empty string."""
    return value if isinstance(value, str) and value else None


def _user_part(part: dict[str, Any]) -> ContentPart | None:
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("content"), str):
        return TextPart(text=part["content"])
    if kind == "blob" and isinstance(part.get("content"), str):
        mime = part.get("mime_type") or ""
        if not isinstance(mime, str):
            return None
        if part.get("modality") == "image" or mime.startswith("image/"):
            return ImagePart(media_type=mime or "image/*", data=part["content"])
        return DocumentPart(media_type=mime or "application/octet-stream", data=part["content"])
    return None


def content_events(
    span: Span, found: SpanMessages, known: Container[str] = frozenset(), memo: HistoryMemo | None = None
) -> list[Event]:
    """The events of ``found``'s messages (module docstring), leaving out ids in ``known``. With a
    ``memo``, messages equal to those of the history last shown in the same content run, after the
    same identity, with all their events known, are replayed instead of re-derived."""
    if not found.input and not found.output:
        return []
    writer = _Writer(span, found, known)
    root = writer.identity
    remembered = memo.get(writer.run, root) if memo is not None else ()
    steps: list[Step] = []
    start, end = iso(span.start_ns), iso(span.end_ns)
    for index, message in enumerate(found.input):
        if index < len(remembered):
            step = remembered[index]
            before = remembered[index - 1].identity if index else root
            if (
                writer.identity == before
                and (step.message is message or step.message == message)
                and all(event_id in known for event_id in step.event_ids)
            ):
                writer.replay(step)
                steps.append(step)
                continue
        steps.append(writer.message(message, start))
    for message in found.output[:1]:  # the first choice continues the conversation
        output = {"role": message.get("role") or "assistant", "parts": message.get("parts", [])}
        steps.append(writer.message(output, end))
    if memo is not None:
        memo.put(writer.run, root, steps)
    found.unmapped.extend(writer.unmapped)
    return writer.events


class Step(NamedTuple):
    """One message as `_Writer.message` took it: the identity after it, the ids of its events, the
    tool names and unmapped parts it contributed."""

    message: dict[str, Any]
    identity: bytes
    event_ids: tuple[str, ...]
    tool_names: tuple[tuple[str, str], ...]
    unmapped: tuple[dict[str, Any], ...]


class HistoryMemo:
    """The history last written in each content run (per root identity), message by message, for
    the ``size`` most recently used runs. Every model call re-sends the whole history: with the
    memo, the part already seen costs a dict comparison per message (C) instead of its identity
    digest and part walk. Exact: a step is reused only after the same identity, for an equal
    message, when all its events are known, which is when `_Writer.message` would write nothing.
    Memory: the messages of ``size`` histories."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._runs: OrderedDict[tuple[str, bytes], list[Step]] = OrderedDict()
        self.prefixes = HistoryPrefixes()
        """The history texts read last (`messages.span_messages`), so a re-sent history is not
        parsed again and its messages are the remembered objects."""

    def get(self, run: str, root: bytes) -> list[Step]:
        steps = self._runs.get((run, root))
        if steps is None:
            return []
        self._runs.move_to_end((run, root))
        return steps

    def put(self, run: str, root: bytes, steps: list[Step]) -> None:
        self._runs[(run, root)] = steps
        self._runs.move_to_end((run, root))
        while len(self._runs) > self.size:
            self._runs.popitem(last=False)


@functools.lru_cache(maxsize=4096)
def iso(ns: int) -> str | None:
    """ISO 8601 UTC with microseconds, or None for an unset (zero) time."""
    if ns <= 0:
        return None
    seconds, rest = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{rest // 1000:06d}Z"
