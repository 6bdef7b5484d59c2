"""AG-UI in: an AG-UI event stream (as ``ag-ui-protocol`` 1.0 defines it) as convograph events.

`read_ag_ui_events` takes a posted body (SSE ``data:`` lines, a JSON array, or NDJSON) and
validates every event with the protocol's own models; `AGUIConverter` turns the validated events
into convograph events. Both raise `AGUIInputError`, naming the event (index, type, field), for
anything they cannot take. Mapping:

| AG-UI | convograph |
|---|---|
| ``RUN_STARTED`` (+ ``input.messages``' user messages not stored yet) | ``user`` events (``runId`` ``user:<message id>``), then ``harness_start`` (``parentId``: ``parentRunId``, else the last input user message) |
| ``RUN_FINISHED`` / ``RUN_ERROR`` | ``harness_end`` (``reason`` ``final`` / the outcome's type / ``error``; ``totalUsage`` from ``usage``), a run error also as ``error`` |
| ``SUBAGENT_STARTED`` / ``_FINISHED`` / ``_ERROR`` | ``harness_start`` (``runId`` = ``subagentRunId``, ``parentId`` = ``parentToolCallId``, else ``metadata.convograph.parentId``, else the enclosing run, ``agentId`` = ``name``) / ``harness_end`` (an error also as ``error``); attributed events go to that run |
| ``TEXT_MESSAGE_*`` / ``_CHUNK`` (assistant, system, developer) | ``text`` deltas (``id`` = ``messageId``) |
| ``TEXT_MESSAGE_*`` with ``role: user`` | one ``user`` event when it ends |
| ``TOOL_CALL_START`` / ``ARGS`` / ``END`` / ``_CHUNK`` | one ``tool_call`` at the end (``input``: the parsed arguments; text that is not JSON as ``{"__toolParseError": true, "parseError", "rawArguments"}``) |
| ``TOOL_CALL_RESULT`` | ``tool_result`` (``output``: the content as sent) |
| ``REASONING_MESSAGE_*`` / ``_CHUNK``, ``REASONING_ENCRYPTED_VALUE`` (of a message) | ``reasoning`` deltas; the encrypted value as ``redactedData``; a ``metadata.convograph.signature`` as ``signature`` |
| ``MESSAGES_SNAPSHOT`` | the messages not stored yet and not streamed in the same post |
| ``CUSTOM`` named ``convograph.<type>`` (what the AG-UI stream out sends) | the convograph event it carries |
| steps, reasoning spans, state, activity, ``RAW``, other ``CUSTOM`` | not stored: counted in ``skipped`` |

Identity: every event gets an ``eventId`` derived from AG-UI ids (``ag-ui:<runId>:<n>`` for the
``n``-th event of a run, ``ag-ui:message:<id>`` for messages from inputs and snapshots), so posting
the same stream again, or a stream that replays earlier runs, stores nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import msgspec
from ag_ui.core import Event as AGUIEvent
from pydantic import TypeAdapter, ValidationError

from convograph.client.sse import SSEDecoder
from convograph.events import Event, EventError, parse_event

__all__ = ["AGUIConverter", "AGUIInputError", "Conversion", "read_ag_ui_events"]

_EVENTS: Final = TypeAdapter(AGUIEvent)
_CUSTOM_PREFIX: Final = "convograph."
_RESTORED: Final = frozenset(
    {"relay", "relay_resolved", "error", "tool_progress", "repl_input", "repl_progress", "repl_output"}
    | {"edit", "regenerate", "switch_branch", "summarize", "usage"}
)
"""Convograph event types a ``CUSTOM`` ``convograph.<type>`` event is stored back as."""
_SKIPPED: Final = frozenset(
    {"STEP_STARTED", "STEP_FINISHED", "REASONING_START", "REASONING_END", "STATE_SNAPSHOT", "STATE_DELTA"}
    | {"ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA", "RAW"}
)


class AGUIInputError(ValueError):
    """Bad AG-UI input; ``problems`` lists each as ``{"index", "type"?, "field"?, "message"}``."""

    def __init__(self, message: str, problems: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.problems = problems


def _problem(
    index: int, message: str, event_type: str | None = None, field: str | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index}
    if event_type is not None:
        out["type"] = event_type
    if field is not None:
        out["field"] = field
    out["message"] = message
    return out


def _raw_items(body: bytes, media: str) -> list[Any]:
    if media == "text/event-stream":
        decoder = SSEDecoder()
        messages = decoder.feed(body + b"\n\n")
        items: list[Any] = []
        for number, message in enumerate(messages):
            try:
                items.append(json.loads(message.data))
            except ValueError as exc:
                raise AGUIInputError(
                    f"SSE message {number} is not JSON: {exc}", [_problem(number, f"not JSON: {exc}")]
                ) from None
        return items
    if media in ("application/x-ndjson", "application/ndjson", "application/jsonl"):
        lines = [line for line in body.splitlines() if line.strip()]
        out = []
        for number, line in enumerate(lines):
            try:
                out.append(json.loads(line))
            except ValueError as exc:
                raise AGUIInputError(
                    f"line {number + 1} is not JSON: {exc}", [_problem(number, str(exc))]
                ) from None
        return out
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise AGUIInputError(f"malformed JSON: {exc}", [_problem(0, str(exc))]) from None
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list):
        return data
    raise AGUIInputError(f"expected AG-UI events, got a JSON {type(data).__name__}", [])


def read_ag_ui_events(body: bytes, media: str) -> list[Any]:
    """The AG-UI events of a body (``media``: ``text/event-stream``, NDJSON, or JSON: one event or
    an array), each validated by ``ag-ui-protocol``'s models. Raises `AGUIInputError` listing every
    invalid event (its index, type, the field and the problem). O(body)."""
    items = _raw_items(body, media)
    if not items:
        raise AGUIInputError("the body holds no AG-UI events", [])
    events: list[Any] = []
    problems: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        event_type = item.get("type") if isinstance(item, dict) else None
        try:
            events.append(_EVENTS.validate_python(item))
        except ValidationError as exc:
            for error in exc.errors()[:3]:
                where = ".".join(str(part) for part in error["loc"][1:]) or None
                problems.append(
                    _problem(index, error["msg"], event_type if isinstance(event_type, str) else None, where)
                )
    if problems:
        first = problems[0]
        where = f", field {first['field']}" if first.get("field") else ""
        raise AGUIInputError(
            f"{len({p['index'] for p in problems})} of {len(items)} AG-UI events are invalid; nothing was"
            f" stored. First: event {first['index']} ({first.get('type', '?')}){where}: {first['message']}",
            problems,
        )
    return events


@dataclass(slots=True)
class Conversion:
    events: list[Event] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    """AG-UI event types that have no convograph counterpart, with their counts."""


@dataclass(slots=True)
class _Open:
    """A message or tool call being streamed."""

    kind: str
    item_id: str
    run_id: str
    role: str = "assistant"
    name: str = ""
    parts: list[str] = field(default_factory=list)
    sent: bool = False


class AGUIConverter:
    """Validated AG-UI events -> convograph events, one pass. ``known``: ids already in the
    conversation (message ids, tool call ids), whose copies in run inputs and snapshots are not
    stored again. Raises `AGUIInputError` naming an event that breaks the sequence rules."""

    def __init__(self, known: Container[str] = ()) -> None:
        self.known = known
        self.out = Conversion()
        self.run_id: str | None = None
        self.counter = 0
        self.index = 0
        self.seen: set[str] = set()
        """Message and call ids this post has streamed."""
        self.open: dict[tuple[str, str], _Open] = {}
        self.chunk_open: dict[str, _Open] = {}
        self.call_names: dict[str, str] = {}
        self.subagent_parent: dict[str, str] = {}

    def convert(self, events: list[Any]) -> Conversion:
        for index, event in enumerate(events):
            self.index = index
            kind = event.type.value
            handler = getattr(self, f"_on_{kind.lower()}", None)
            if handler is not None:
                handler(event)
            elif kind in _SKIPPED or kind == "CUSTOM":
                self.out.skipped[kind] = self.out.skipped.get(kind, 0) + 1
        for item in list(self.open.values()):  # left open by a stream that ended: flushed
            self._close(item)
        return self.out

    # -- helpers -----------------------------------------------------------------------------------

    def _fail(self, event: Any, message: str) -> NoReturn:
        kind = event.type.value
        raise AGUIInputError(f"event {self.index} ({kind}): {message}", [_problem(self.index, message, kind)])

    def _emit(self, wire: dict[str, Any], event_id: str | None = None) -> None:
        if event_id is None:
            event_id = f"ag-ui:{self.run_id or '-'}:{self.counter}"
            self.counter += 1
        wire["eventId"] = event_id
        try:
            self.out.events.append(parse_event(wire))
        except EventError as exc:
            raise AGUIInputError(
                f"event {self.index}: {exc}", [_problem(self.index, str(exc), field=exc.field)]
            ) from None

    def _owner(self, event: Any) -> str:
        sub = getattr(event, "subagent_run_id", None)
        if sub is not None:
            return str(sub)
        if self.run_id is None:
            self._fail(event, "an AG-UI stream begins with RUN_STARTED (this event comes before any run)")
        return str(self.run_id)

    # -- runs --------------------------------------------------------------------------------------

    def _on_run_started(self, event: Any) -> None:
        self.run_id = event.run_id
        self.counter = 0
        parent = event.parent_run_id
        inputs = event.input.messages if event.input is not None else []
        for message in inputs:
            if message.role == "user" and message.id not in self.known and message.id not in self.seen:
                self.seen.add(message.id)
                self._emit(
                    {
                        "type": "user",
                        "runId": f"user:{message.id}",
                        "content": _user_content(message.content),
                    },
                    f"ag-ui:message:{message.id}",
                )
            if message.role == "user" and parent is None:
                parent = f"user:{message.id}:user"
        start: dict[str, Any] = {"type": "harness_start", "runId": event.run_id}
        if parent is not None:
            start["parentId"] = parent
        self._emit(start)

    def _end_run(self, reason: str, usage: Any = None, extra: dict[str, Any] | None = None) -> None:
        for key, item in list(self.open.items()):
            if item.run_id == self.run_id:
                self._close(item)
                self.open.pop(key, None)
        end: dict[str, Any] = {"type": "harness_end", "runId": self.run_id, "reason": reason, **(extra or {})}
        if usage:
            end["totalUsage"] = {
                "inputTokens": sum(item.input_tokens or 0 for item in usage),
                "outputTokens": sum(item.output_tokens or 0 for item in usage),
            }
        self._emit(end)
        self.run_id = None

    def _on_run_finished(self, event: Any) -> None:
        if self.run_id is None or event.run_id != self.run_id:
            self._fail(event, f"RUN_FINISHED for run {event.run_id!r}, which is not the open run")
        outcome = event.outcome.type if event.outcome is not None else "final"
        extra = {"result": event.result} if event.result is not None else None
        self._end_run("final" if outcome == "success" else outcome, event.usage, extra)

    def _on_run_error(self, event: Any) -> None:
        error: dict[str, Any] = {"type": "error", "message": event.message}
        if self.run_id is not None:
            error["runId"] = self.run_id
        if event.code is not None:
            error["code"] = event.code
        self._emit(error, None if self.run_id is not None else f"ag-ui:error:{self.index}")
        if self.run_id is not None:
            self._end_run("error", event.usage)

    def _on_subagent_started(self, event: Any) -> None:
        spawner = _convograph_metadata(event).get("parentId")
        parent = (
            event.parent_tool_call_id
            or (spawner if isinstance(spawner, str) else None)
            or event.parent_subagent_run_id
            or self._owner(event)
        )
        start = {
            "type": "harness_start",
            "runId": event.subagent_run_id,
            "parentId": parent,
            "agentId": event.name,
        }
        self._emit(start)

    def _on_subagent_finished(self, event: Any) -> None:
        outcome = event.outcome.type if event.outcome is not None else "success"
        reason = "final" if outcome == "success" else outcome
        self._emit({"type": "harness_end", "runId": event.subagent_run_id, "reason": reason})

    def _on_subagent_error(self, event: Any) -> None:
        self._emit({"type": "error", "runId": event.subagent_run_id, "message": event.message})
        self._emit({"type": "harness_end", "runId": event.subagent_run_id, "reason": "error"})

    # -- messages ----------------------------------------------------------------------------------

    def _start(self, kind: str, item_id: str, run_id: str, role: str = "assistant", name: str = "") -> _Open:
        item = self.open.get((kind, item_id))
        if item is None:
            item = self.open[(kind, item_id)] = _Open(kind, item_id, run_id, role, name)
            self.seen.add(item_id)
        return item

    def _delta(self, event: Any, kind: str, item_id: str, delta: str) -> None:
        item = self.open.get((kind, item_id))
        if item is None:
            self._fail(event, f"no open {kind} {item_id!r}: it was never started (or already ended)")
        if kind == "text" and item.role == "user":
            item.parts.append(delta)
        elif kind in ("text", "reasoning"):
            wire = {"type": "text" if kind == "text" else "reasoning", "runId": item.run_id, "id": item_id}
            if kind == "text" and item.role != "assistant":
                wire["role"] = item.role
            self._emit({**wire, "content": delta})
            item.sent = True
        else:
            item.parts.append(delta)

    def _end(self, event: Any, kind: str, item_id: str) -> None:
        item = self.open.pop((kind, item_id), None)
        if item is None:
            self._fail(event, f"no open {kind} {item_id!r} to end")
        self._close(item, getattr(event, "metadata", None))

    def _close(self, item: _Open, metadata: Any = None) -> None:
        if item.kind == "text" and item.role == "user":
            wire = {
                "type": "user",
                "runId": f"user:{item.item_id}",
                "id": item.item_id,
                "content": "".join(item.parts),
            }
            self._emit(wire)
        elif item.kind == "tool":
            self.call_names[item.item_id] = item.name
            self._emit(
                {
                    "type": "tool_call",
                    "runId": item.run_id,
                    "id": item.item_id,
                    "name": item.name,
                    "input": _arguments(item.parts),
                }
            )
        elif not item.sent or (item.kind == "reasoning" and _signature(metadata)):
            wire = {
                "type": "text" if item.kind == "text" else "reasoning",
                "runId": item.run_id,
                "id": item.item_id,
                "content": "",
            }
            signature = _signature(metadata)
            if signature is not None and item.kind == "reasoning":
                wire["signature"] = signature
            self._emit(wire)

    def _on_text_message_start(self, event: Any) -> None:
        self._start("text", event.message_id, self._owner(event), event.role or "assistant")

    def _on_text_message_content(self, event: Any) -> None:
        self._delta(event, "text", event.message_id, event.delta)

    def _on_text_message_end(self, event: Any) -> None:
        self._end(event, "text", event.message_id)

    def _on_reasoning_message_start(self, event: Any) -> None:
        self._start("reasoning", event.message_id, self._owner(event))

    def _on_reasoning_message_content(self, event: Any) -> None:
        self._delta(event, "reasoning", event.message_id, event.delta)

    def _on_reasoning_message_end(self, event: Any) -> None:
        self._end(event, "reasoning", event.message_id)

    def _on_reasoning_encrypted_value(self, event: Any) -> None:
        if event.subtype != "message":
            self.out.skipped["REASONING_ENCRYPTED_VALUE"] = (
                self.out.skipped.get("REASONING_ENCRYPTED_VALUE", 0) + 1
            )
            return
        wire = {"type": "reasoning", "runId": self._owner(event), "id": event.entity_id, "content": ""}
        self._emit({**wire, "redactedData": event.encrypted_value})

    def _chunk(self, event: Any, kind: str, item_id: str | None, delta: str | None, **start: Any) -> None:
        """The ``*_CHUNK`` shorthand: a chunk naming a new id opens it (closing the open one)."""
        current = self.chunk_open.get(kind)
        if item_id is not None and (current is None or current.item_id != item_id):
            if current is not None and (kind, current.item_id) in self.open:
                self._close(self.open.pop((kind, current.item_id)))
            current = self.chunk_open[kind] = self._start(kind, item_id, self._owner(event), **start)
        if current is None:
            self._fail(event, f"a {kind} chunk without an id continues nothing")
        if delta is not None:
            self._delta(event, kind, current.item_id, delta)

    def _on_text_message_chunk(self, event: Any) -> None:
        self._chunk(event, "text", event.message_id, event.delta, role=event.role or "assistant")

    def _on_reasoning_message_chunk(self, event: Any) -> None:
        self._chunk(event, "reasoning", event.message_id, event.delta)

    def _on_tool_call_chunk(self, event: Any) -> None:
        self._chunk(event, "tool", event.tool_call_id, event.delta, name=event.tool_call_name or "")

    # -- tools -------------------------------------------------------------------------------------

    def _on_tool_call_start(self, event: Any) -> None:
        self._start("tool", event.tool_call_id, self._owner(event), name=event.tool_call_name)

    def _on_tool_call_args(self, event: Any) -> None:
        self._delta(event, "tool", event.tool_call_id, event.delta)

    def _on_tool_call_end(self, event: Any) -> None:
        self._end(event, "tool", event.tool_call_id)

    def _on_tool_call_result(self, event: Any) -> None:
        call_id = event.tool_call_id
        if ("tool", call_id) in self.open:
            self._close(self.open.pop(("tool", call_id)))
        name = self.call_names.get(call_id, "unknown")
        output = (
            event.content
            if isinstance(event.content, str)
            else [part.model_dump(mode="json", by_alias=True) for part in event.content]
        )
        self._emit(
            {
                "type": "tool_result",
                "runId": self._owner(event),
                "id": call_id,
                "name": name,
                "output": output,
            }
        )

    # -- snapshots and extensions ------------------------------------------------------------------

    def _on_messages_snapshot(self, event: Any) -> None:
        for message in event.messages:
            if message.id in self.known or message.id in self.seen:
                continue
            self.seen.add(message.id)
            self._snapshot_message(event, message)

    def _snapshot_message(self, event: Any, message: Any) -> None:
        event_id = f"ag-ui:message:{message.id}"
        run_id = getattr(message, "subagent_run_id", None) or self.run_id or "ag-ui"
        role = message.role
        if role == "user":
            self._emit(
                {"type": "user", "runId": f"user:{message.id}", "content": _user_content(message.content)},
                event_id,
            )
        elif role in ("assistant", "system", "developer"):
            if message.content:
                wire = {"type": "text", "runId": run_id, "id": message.id, "content": message.content}
                self._emit(wire if role == "assistant" else {**wire, "role": role}, event_id)
            for call in getattr(message, "tool_calls", None) or ():
                if call.id in self.known or call.id in self.seen:
                    continue
                self.seen.add(call.id)
                self.call_names[call.id] = call.function.name
                parts = [call.function.arguments]
                wire = {
                    "type": "tool_call",
                    "runId": run_id,
                    "id": call.id,
                    "name": call.function.name,
                    "input": _arguments(parts),
                }
                self._emit(wire, f"ag-ui:call:{call.id}")
        elif role == "tool":
            name = self.call_names.get(message.tool_call_id, "unknown")
            output = (
                message.content
                if isinstance(message.content, str)
                else [p.model_dump(mode="json", by_alias=True) for p in message.content]
            )
            self._emit(
                {
                    "type": "tool_result",
                    "runId": run_id,
                    "id": message.tool_call_id,
                    "name": name,
                    "output": output,
                },
                event_id,
            )
        elif role == "reasoning":
            wire = {"type": "reasoning", "runId": run_id, "id": message.id, "content": message.content}
            if message.encrypted_value is not None:
                wire["redactedData"] = message.encrypted_value
            self._emit(wire, event_id)
        else:
            self.out.skipped[f"MESSAGES_SNAPSHOT:{role}"] = (
                self.out.skipped.get(f"MESSAGES_SNAPSHOT:{role}", 0) + 1
            )

    def _on_custom(self, event: Any) -> None:
        name = event.name
        value = event.value
        kind = name[len(_CUSTOM_PREFIX) :] if name.startswith(_CUSTOM_PREFIX) else None
        if kind not in _RESTORED or not isinstance(value, dict) or value.get("type") != kind:
            self.out.skipped["CUSTOM"] = self.out.skipped.get("CUSTOM", 0) + 1
            return
        wire = {key: item for key, item in value.items() if key not in ("seq", "eventId")}
        event_id = value.get("eventId")
        self._emit(wire, event_id if isinstance(event_id, str) else None)


def _user_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.type == "text":
            parts.append({"type": "text", "text": part.text})
        elif part.type in ("image", "document") and part.source.type == "data":
            parts.append({"type": part.type, "mediaType": part.source.mime_type, "data": part.source.value})
        else:  # a URL or provider file: kept as text naming it
            parts.append({"type": "text", "text": f"[{part.type}: {part.source.value}]"})
    return parts


def _arguments(parts: list[str]) -> Any:
    """A call's argument text as its input: JSON, else the seed's parse-error record."""
    text = "".join(parts)
    if not text.strip():
        return None
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        return {"__toolParseError": True, "parseError": str(exc), "rawArguments": text}


def _convograph_metadata(event: Any) -> dict[str, Any]:
    """``metadata.convograph`` of an AG-UI event (what the stream out keeps there), or ``{}``."""
    metadata = getattr(event, "metadata", None)
    mine = metadata.get("convograph") if isinstance(metadata, dict) else None
    return mine if isinstance(mine, dict) else {}


def _signature(metadata: Any) -> str | None:
    if isinstance(metadata, dict):
        mine = metadata.get("convograph")
        if isinstance(mine, dict) and isinstance(mine.get("signature"), str):
            return str(mine["signature"])
    return None
