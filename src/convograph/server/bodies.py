"""Request bodies holding events: one object, a JSON array, or NDJSON. Validated whole.

`parse_event_batch` either returns every event of the body or raises `ApiError` listing **every**
bad item (index, line for NDJSON, field, message), so a batch is stored entirely or not at all.
O(body size).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from convograph.events import Event, EventError, parse_event
from convograph.http.bodies import JSON_ERRORS, json_problem
from convograph.server.errors import ApiError

__all__ = ["JSON_TYPES", "NDJSON_TYPES", "decode_body", "parse_event_batch"]

JSON_TYPES: Final = frozenset({"application/json", "text/json"})
NDJSON_TYPES: Final = frozenset(
    {"application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"}
)
MAX_REPORTED_ERRORS: Final = 1000

_decode = msgspec.json.Decoder()


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def parse_event_batch(body: bytes, content_type: str | None, *, max_events: int) -> list[Event]:
    """Events in ``body``; `ApiError` 400/413/415/422 otherwise."""
    media = _media_type(content_type)
    if media in NDJSON_TYPES:
        items = _ndjson_items(body)
    elif media in JSON_TYPES or (media == "" and body.lstrip()[:1] in (b"{", b"[")):
        items = _json_items(body)
    else:
        raise ApiError(
            415,
            f"unsupported Content-Type {content_type or '(none)'!r}: send application/json "
            "(one event or an array) or application/x-ndjson (one event per line)",
        )
    if len(items) > max_events:
        raise ApiError(413, f"batch holds {len(items)} events; the limit is {max_events} per request")
    events: list[Event] = []
    errors: list[dict[str, Any]] = []
    for index, (line, item) in enumerate(items):
        try:
            if isinstance(item, EventError):
                raise item
            events.append(parse_event(item))
        except EventError as exc:
            if len(errors) < MAX_REPORTED_ERRORS:
                errors.append(exc.located(line=line, index=index).to_dict())
            else:
                break
    if errors:
        invalid = len(errors) if len(errors) < MAX_REPORTED_ERRORS else f"at least {len(errors)}"
        raise ApiError(
            422,
            f"{invalid} of {len(items)} events are invalid; nothing was stored",
            code="invalid_events",
            details=errors,
        )
    return events


def _json_items(body: bytes) -> list[tuple[int | None, Any]]:
    if not body.strip():
        raise ApiError(400, "request body is empty: send an event object or an array of events")
    try:
        data = _decode.decode(body)
    except JSON_ERRORS as exc:
        raise ApiError(400, f"malformed JSON: {json_problem(exc, body)}", code="malformed_json") from None
    if isinstance(data, dict):
        return [(None, data)]
    if isinstance(data, list):
        return [(None, item) for item in data]
    raise ApiError(400, f"expected an event object or an array of events, got a JSON {type(data).__name__}")


def _ndjson_items(body: bytes) -> list[tuple[int | None, Any]]:
    items: list[tuple[int | None, Any]] = []
    for number, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((number, _decode.decode(line)))
        except JSON_ERRORS as exc:
            items.append((number, EventError(f"invalid JSON: {json_problem(exc, line)}")))
    if not items:
        raise ApiError(400, "request body holds no events: send one JSON event per line")
    return items


def decode_body[T](raw: bytes, kind: type[T]) -> T:
    """A small JSON request body as ``kind`` (an empty body counts as ``{}``); 400 naming the problem."""
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except msgspec.ValidationError as exc:
        raise ApiError(400, f"invalid body: {exc}") from None
    except JSON_ERRORS as exc:
        raise ApiError(400, f"malformed JSON: {json_problem(exc, raw)}", code="malformed_json") from None
