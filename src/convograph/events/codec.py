"""Decode and encode events: wire JSON <-> `Event` values, with errors that name the field.

Two formats:
- **wire**: the public camelCase JSON object. `parse_event` / `encode_event`. Unknown fields are kept
  in ``Event.extra`` and flattened back on encode, so ``parse_event(encode_event(e)) == e``.
- **packed**: the storage form event logs use (`pack_event` / `unpack_event`). Extras stay nested
  under one key, so unpacking is a single typed msgspec decode with no per-field Python work.

Cost: `parse_event` is one JSON decode plus one typed conversion, O(size of the event).

Ids (``runId``, ``id``, ``eventId``, ``parentId``, ``agentId``, ``toolCallId``, ``messageId``, ...;
`ID_FIELDS`) must not contain NUL (U+0000): they become keys and text columns, and PostgreSQL text
cannot hold NUL. Content may hold it and is kept exactly. The check costs one substring search of the
JSON text (for a mapping, of the encoding `parse_event` already makes) and looks at the id fields only
when ``\\u0000`` occurs somewhere in the event.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from operator import attrgetter
from typing import Any, Final

import msgspec

from convograph.events.types import EVENT_CLASSES, EXTRA_FIELD, Event
from convograph.events.values import COUNTED_TYPES, value_problem

__all__ = [
    "ID_FIELDS",
    "EventError",
    "check_ids",
    "encode_event",
    "event_to_wire",
    "json_error_text",
    "pack_event",
    "parse_event",
    "unpack_event",
]


class EventError(ValueError):
    """An event that cannot be accepted.

    ``field`` is the wire path of the offending field (``"content"``, ``"content[0].text"``) or
    ``None`` when the whole input is wrong; ``problem`` says what is wrong with it. ``line`` and
    ``index`` locate the event inside an NDJSON stream or a batch when known.
    """

    def __init__(
        self,
        problem: str,
        *,
        field: str | None = None,
        line: int | None = None,
        index: int | None = None,
    ) -> None:
        self.problem = problem
        self.field = field
        self.line = line
        self.index = index
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.index is not None:
            where.append(f"item {self.index}")
        if self.field is not None:
            where.append(f"field `{self.field}`")
        prefix = ", ".join(where)
        return f"{prefix}: {self.problem}" if prefix else self.problem

    def located(self, *, line: int | None = None, index: int | None = None) -> EventError:
        """The same error, placed at a line of a stream or an index of a batch."""
        return EventError(self.problem, field=self.field, line=line, index=index)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"index"?, "line"?, "field", "message"}``."""
        out: dict[str, Any] = {}
        if self.index is not None:
            out["index"] = self.index
        if self.line is not None:
            out["line"] = self.line
        out["field"] = self.field
        out["message"] = self.problem
        return out


_CLASS_BY_TAG: Final[dict[str, type[Any]]] = {str(cls.__struct_config__.tag): cls for cls in EVENT_CLASSES}
_KNOWN_FIELDS: Final[dict[str, frozenset[str]]] = {
    tag: frozenset(cls.__struct_encode_fields__) - {EXTRA_FIELD} | {"type"}
    for tag, cls in _CLASS_BY_TAG.items()
}
_TYPES_HINT: Final = ", ".join(sorted(_CLASS_BY_TAG))
_AT_PATH = re.compile(r"^(?P<problem>.*) - at `\$(?P<path>[^`]*)`$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`$")

ID_FIELDS: Final[frozenset[str]] = frozenset(
    {
        "run_id",
        "id",
        "event_id",
        "parent_id",
        "agent_id",
        "tool_call_id",
        "session_id",
        "source_ids",
        "relay_id",
        "message_id",
        "first_id",
        "last_id",
        "thread_id",
    }
)
"""Event attributes holding ids (``source_ids`` a list of them): no NUL allowed, see `check_ids`."""


def _id_fields(cls: type[Any]) -> tuple[Any, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """A getter of the class's single-id fields, their wire names, and its id-list fields."""
    pairs = [
        (attr, wire)
        for attr, wire in zip(cls.__struct_fields__, cls.__struct_encode_fields__, strict=True)
        if attr in ID_FIELDS
    ]
    lists = tuple((attr, wire) for attr, wire in pairs if attr == "source_ids")
    single = [(attr, wire) for attr, wire in pairs if attr != "source_ids"]
    return attrgetter(*(attr for attr, _ in single)), tuple(wire for _, wire in single), lists


_ID_GETTERS: Final[dict[type[Any], tuple[Any, tuple[str, ...], tuple[tuple[str, str], ...]]]] = {
    cls: _id_fields(cls) for cls in EVENT_CLASSES
}
_NUL: Final = "\x00"
_NUL_ESCAPE: Final = "\\u0000"
_NUL_ESCAPE_BYTES: Final = b"\\u0000"
_NUL_IN_ID: Final = "ids must not contain the NUL character (U+0000)"


def check_ids(event: Event) -> None:
    """Raise `EventError` naming the first id field of ``event`` that holds a NUL character.

    `parse_event` calls it; event logs call it on every appended event, so events built as Python
    objects are held to the same rule on every backend. O(number of id fields)."""
    entry = _ID_GETTERS.get(type(event))
    if entry is None:  # a subclass of an event class
        entry = _ID_GETTERS[type(event)] = _id_fields(type(event))
    getter, wires, lists = entry
    try:
        for value in getter(event):
            if value and _NUL in value:
                wire = wires[getter(event).index(value)]
                raise EventError(_NUL_IN_ID, field=wire)
    except TypeError:  # an event built in Python with a non-string id: it could not be read back
        wire, bad = next(
            ((w, v) for w, v in zip(wires, getter(event), strict=True) if v and not isinstance(v, str)),
            (None, None),
        )
        raise EventError(f"expected `str`, got `{type(bad).__name__}`", field=wire) from None
    for attr, wire in lists:
        for position, item in enumerate(getattr(event, attr) or ()):
            if _NUL in item:
                raise EventError(_NUL_IN_ID, field=f"{wire}[{position}]")


_decode_any = msgspec.json.Decoder()
_BOM: Final = "\ufeff"
_BOM_BYTES: Final = _BOM.encode()
_encode = msgspec.json.Encoder()
_decode_packed = msgspec.json.Decoder(Event)


def _problem_from(exc: msgspec.ValidationError) -> EventError:
    """Turn msgspec's message into (field path, problem)."""
    text = str(exc)
    path = ""
    match = _AT_PATH.match(text)
    if match:
        text, path = match["problem"], match["path"]
    path = path.removeprefix(".")
    missing = _MISSING.match(text)
    if missing:
        name = missing["name"]
        return EventError("required field is missing", field=f"{path}.{name}" if path else name)
    problem = text[0].lower() + text[1:] if text else "invalid value"
    return EventError(problem, field=path or None)


def _decode_json(obj: str | bytes | bytearray | memoryview) -> tuple[Any, bool]:
    """One JSON value, and whether the text holds the escape ``\\u0000`` (JSON text cannot hold a
    raw NUL; a false positive, an escaped backslash before ``u0000``, only costs `check_ids`).
    `EventError` for every way the text can be wrong (msgspec raises ``UnicodeDecodeError`` /
    ``UnicodeEncodeError`` / ``RecursionError`` besides ``DecodeError``)."""
    original = obj
    if isinstance(obj, str):
        obj = obj.removeprefix(_BOM)
        maybe_nul = _NUL_ESCAPE in obj
    else:
        if bytes(obj[:3]) == _BOM_BYTES:
            obj = obj[3:]
        # `find`, not `in`: `in` on bytes first tries the needle as an int, 3x slower
        maybe_nul = (obj if type(obj) is not memoryview else obj.tobytes()).find(_NUL_ESCAPE_BYTES) >= 0
    try:
        return _decode_any.decode(obj), maybe_nul
    except (msgspec.DecodeError, UnicodeDecodeError, UnicodeEncodeError, RecursionError) as exc:
        raise EventError(f"invalid JSON: {json_error_text(exc, original)}") from None


_ESCAPED_SURROGATE: Final = re.compile(rb"(\\+)u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LOW_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def json_error_text(exc: BaseException, data: str | bytes | bytearray | memoryview | None = None) -> str:
    """What is wrong with JSON text ``data`` that a msgspec decode refused with ``exc`` (a
    ``DecodeError``, ``UnicodeDecodeError``, ``UnicodeEncodeError`` or ``RecursionError``), with
    the byte offset in ``data`` where it can be told. msgspec's own message is kept, except where
    it misleads: a lone UTF-16 surrogate escape at the end of a string reads "Input data was
    truncated", and invalid UTF-8 is located within its string, not the text. Only on the error
    path: O(len(data))."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, UnicodeEncodeError):
        return f"holds a lone surrogate character ({exc.reason})"
    raw = _utf8_bytes(data)
    if isinstance(exc, UnicodeDecodeError):
        if raw is not None:  # msgspec's offset is within the string it decoded: find the text's
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as whole:
                return f"not UTF-8 text ({whole.reason}) at byte {whole.start}"
        return f"not UTF-8 text ({exc.reason})"
    message = str(exc)
    if raw is not None and ("surrogate" in message or "truncated" in message):
        lone = _lone_surrogate_escape(raw)
        if lone is not None:
            escape, at = lone
            return (
                f"lone UTF-16 surrogate escape {escape} at byte {at}: a high surrogate (\\ud800-\\udbff)"
                " must be followed by a low one (\\udc00-\\udfff)"
            )
    return message


def _utf8_bytes(data: str | bytes | bytearray | memoryview | None) -> bytes | None:
    if data is None:
        return None
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    return bytes(data)


def _lone_surrogate_escape(raw: bytes) -> tuple[str, int] | None:
    """The first ``\\uD800``-``\\uDFFF`` escape in ``raw`` that is not half of a high-low pair,
    and its byte offset. Backslashes escaping a backslash do not start an escape."""
    paired_low_at = -1
    for match in _ESCAPED_SURROGATE.finditer(raw):
        backslashes = len(match[1])
        if backslashes % 2 == 0:  # ``\\\\uD800``: an escaped backslash, then text
            continue
        at = match.start() + backslashes - 1
        escape = raw[at : match.end()].decode("ascii")
        if escape[3].lower() in "89ab":  # high: a low escape must follow at once
            if _LOW_SURROGATE_ESCAPE.match(raw, match.end()) is None:
                return escape, at
            paired_low_at = match.end()
        elif at != paired_low_at:
            return escape, at
    return None


def _check_json_values(raw: dict[str, Any]) -> bool:
    """A mapping given directly (not JSON text) must hold only what JSON can carry, or the event
    could not be stored or sent (lone surrogates, arbitrary objects) or would silently change
    (NaN / Infinity become ``null``). One encode pass; the field is located only on failure.
    Returns whether the mapping may hold a NUL character somewhere."""
    try:
        encoded = _encode.encode(raw)
    except (TypeError, ValueError, RecursionError):
        for key, value in raw.items():
            try:
                _encode.encode(value)
            except (TypeError, ValueError) as exc:
                raise EventError(f"not representable as JSON: {exc}", field=str(key)) from None
            except RecursionError:
                raise EventError("not representable as JSON: nested too deeply", field=str(key)) from None
        raise EventError("not representable as JSON") from None
    if b"null" in encoded:  # NaN and Infinity encode as null: look for them only then
        for key, value in raw.items():
            if has_non_finite(value):
                raise EventError("NaN and Infinity are not JSON numbers", field=str(key))
    return encoded.find(_NUL_ESCAPE_BYTES) >= 0  # `find`: see _decode_json


def has_non_finite(value: Any) -> bool:
    """Whether a decoded JSON-like value holds a NaN or an infinite float anywhere. O(size)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _to_mapping(obj: Mapping[str, Any] | str | bytes | bytearray | memoryview) -> tuple[dict[str, Any], bool]:
    """The event's fields, and whether a NUL character may occur in them."""
    if isinstance(obj, Mapping):
        raw = dict(obj)
        bad = next((key for key in raw if not isinstance(key, str)), None)
        if bad is not None:
            raise EventError(f"field names must be strings, got {bad!r}")
        return raw, _check_json_values(raw)
    if isinstance(obj, (str, bytes, bytearray, memoryview)):
        raw, maybe_nul = _decode_json(obj)
        if not isinstance(raw, dict):
            raise EventError(f"expected a JSON object, got {type(raw).__name__}")
        return raw, maybe_nul
    raise EventError(f"expected a mapping, str or bytes holding one JSON object, got {type(obj).__name__}")


def parse_event(obj: Mapping[str, Any] | str | bytes | bytearray | memoryview) -> Event:
    """Validate one wire event.

    Raises `EventError` naming the field and the problem. Unknown extra fields are kept in
    ``extra``; an unknown ``type`` is an error; an id holding NUL (U+0000) is an error; so are a
    count or a timestamp outside `convograph.events.values`' rules.
    """
    raw, maybe_nul = _to_mapping(obj)
    tag = raw.get("type")
    if tag is None:
        raise EventError("required field is missing", field="type")
    cls = _CLASS_BY_TAG.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise EventError(f"unknown event type {tag!r}; expected one of: {_TYPES_HINT}", field="type")
    known = _KNOWN_FIELDS[tag]
    if not known.issuperset(raw):
        extras = {key: raw.pop(key) for key in [k for k in raw if k not in known]}
        raw[EXTRA_FIELD] = extras
    try:
        event: Event = msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        raise _problem_from(exc) from None
    if maybe_nul:
        check_ids(event)
    if event.timestamp is not None or type(event) in COUNTED_TYPES:
        found = value_problem(event)
        if found is not None:
            raise EventError(found[1], field=found[0])
    return event


def event_to_wire(event: Event) -> dict[str, Any]:
    """The wire JSON object of ``event`` as plain Python data (extras flattened in)."""
    out: dict[str, Any] = msgspec.to_builtins(event)
    extras = out.pop(EXTRA_FIELD, None)
    if extras:
        for key, value in extras.items():
            out.setdefault(key, value)
    return out


def encode_event(event: Event) -> bytes:
    """The wire JSON of ``event``; ``parse_event(encode_event(e)) == e``."""
    if event.extra is None:
        return _encode.encode(event)
    return _encode.encode(event_to_wire(event))


def pack_event(event: Event) -> bytes:
    """Storage form of ``event`` (not the wire format: extras stay nested)."""
    return _encode.encode(event)


def unpack_event(data: bytes | str | memoryview) -> Event:
    """Inverse of `pack_event`. Raises `EventError` on corrupt data."""
    try:
        event: Event = _decode_packed.decode(data)
    except msgspec.ValidationError as exc:
        raise _problem_from(exc) from None
    except msgspec.DecodeError as exc:
        raise EventError(f"corrupt packed event: {exc}") from None
    return event
