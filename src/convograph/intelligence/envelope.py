"""Validation of the Amplifier hook envelope ``{event, workspace, data, idempotency_key?}``.

`parse_envelope` turns one request body (a mapping, or JSON ``str``/``bytes``) into an `Envelope`
or raises `EnvelopeError`, whose ``code`` and ``message`` name the field and the problem. Every
check is O(size of the body); nothing here does I/O.

Rules (decided here, documented in ``docs/intelligence.md``):

- ``event``: non-blank string, at most 200 characters.
- ``workspace``: non-blank string (after stripping), at most 512 characters, no NUL.
- ``data``: a JSON object carrying ``session_id`` (non-blank string, at most 512 characters, no
  ``/``, ``\\`` or NUL: it names a blob directory) and ``timestamp`` (ISO 8601; a string without
  a UTC offset is read as UTC — upstream read it in the server's local zone, §10 B15).
- ``data.session_id`` must be a key the graph engine can hold as it is (`keys.is_graph_safe`: no
  edge whitespace, no U+0001, at most 1,024 UTF-8 bytes; FalkorDB crashes on the others). Other
  ids built from the payload (``tool_call_id``, parents, tool and model names) are keyed
  downstream (`keys.graph_key`), never refused.
- ``idempotency_key``: optional non-blank string, at most 512 characters. Without one, the
  envelope's content fingerprint is the key, so a blind re-send is still a duplicate.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec

from convograph.events.codec import has_non_finite
from convograph.intelligence.keys import MAX_KEY_BYTES, is_graph_safe

__all__ = [
    "Envelope",
    "EnvelopeError",
    "base_event_id",
    "check_session_id",
    "check_workspace",
    "content_fingerprint",
    "parse_envelope",
    "parse_timestamp_ms",
]

_MAX_NAME = 200
_MAX_ID = 512
_decoder = msgspec.json.Decoder()
_sorted_encoder = msgspec.json.Encoder(order="sorted")


class EnvelopeError(ValueError):
    """An envelope that cannot be accepted. ``code`` is machine-readable, ``field`` the JSON path."""

    def __init__(self, code: str, message: str, *, field: str | None = None, index: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.index = index

    def to_dict(self) -> dict[str, Any]:
        """JSON form used in HTTP error ``details``."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        if self.index is not None:
            out["index"] = self.index
        return out


# gc=False: never part of a reference cycle (it holds only decoded JSON values), so the cyclic
# GC need not track it; the ingest path makes one per event and GC passes were ~20 % of its CPU
class Envelope(msgspec.Struct, frozen=True, gc=False):
    """One accepted hook event. ``data`` is the original payload, unchanged.

    Derived, immutable facts: ``session_id``, ``epoch_ms`` (UTC milliseconds of ``data.timestamp``),
    ``fingerprint`` (sha256 of the canonical ``{event, data}``), ``data_json`` (the canonical,
    sorted-key JSON of ``data``, which the journal stores), ``dedupe_key`` (the idempotency
    key, else ``"sha256:" + fingerprint``) and ``base_id`` (the seed-004 Event node id).
    """

    event: str
    workspace: str
    data: dict[str, Any]
    session_id: str
    epoch_ms: int
    fingerprint: str
    dedupe_key: str
    base_id: str
    idempotency_key: str | None = None
    data_json: bytes = b""


_UTC_TIMESTAMP = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9])\.([0-9]{3}|[0-9]{6})(?:Z|\+00:00)?"
)
"""The common shape, ``2026-03-02T09:00:00.007+00:00`` (UTC or naive, 3 or 6 fraction digits):
read by `parse_timestamp_ms` through a per-second cache (what ``fromisoformat`` gives for
exactly these strings; anything else takes ``fromisoformat`` itself)."""
_SECONDS_CACHE = 65536
_second_ms: dict[str, int] = {}


def parse_timestamp_ms(value: Any, *, field: str = "data.timestamp") -> int:
    """UTC epoch milliseconds of an ISO 8601 string; naive strings are UTC. Raises `EnvelopeError`."""
    if type(value) is str:
        # ``…:SS.mmm`` then ``+00:00``, ``Z`` or nothing: a second the cache holds matched
        # `_UTC_TIMESTAMP` before, so only the fraction is left to check (no regex; ~0.5 us)
        size = len(value)
        if (size == 29 and value.endswith("+00:00")) or (size == 24 and value[23] == "Z") or size == 23:
            base = _second_ms.get(value[:19])
            fraction = value[20:23]
            if base is not None and value[19] == "." and fraction.isdigit() and fraction.isascii():
                return base + int(fraction)
    if type(value) is str and (match := _UTC_TIMESTAMP.fullmatch(value)) is not None:
        second, fraction = match.groups()
        base = _second_ms.get(second)
        if base is None:
            try:
                base = _exact_ms(datetime.fromisoformat(second).replace(tzinfo=UTC))
            except ValueError:  # e.g. 2026-02-30: the full parse below refuses it with its message
                base = None
            else:
                if len(_second_ms) >= _SECONDS_CACHE:
                    _second_ms.clear()
                _second_ms[second] = base
        if base is not None:
            return base + int(fraction[:3])
    if not isinstance(value, str) or not value.strip():
        raise EnvelopeError(
            "invalid_timestamp", f"{field} must be a non-blank ISO 8601 string, got {value!r}", field=field
        )
    try:
        if "\x00" in value:  # CPython's fromisoformat stops reading at a NUL and accepts the rest
            raise ValueError(value)
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise EnvelopeError(
            "invalid_timestamp", f"{field} is not an ISO 8601 timestamp: {value!r}", field=field
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return _exact_ms(parsed)


def _exact_ms(parsed: datetime) -> int:
    # integer arithmetic: floor to the millisecond without float rounding surprises
    delta = parsed - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def content_fingerprint(event: str, data: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical (sorted-key, compact) JSON of ``{"event", "data"}``. O(size)."""
    return _fingerprint(event, _sorted_encoder.encode(data))


_event_tails: dict[str, bytes] = {}  # event name -> b',"event":"<name>"}' (few distinct names)


def _fingerprint(event: str, canonical_data: bytes) -> str:
    # the sorted encoding of {"data": ..., "event": ...}, assembled from the data's own encoding
    digest = hashlib.sha256(b'{"data":')
    digest.update(canonical_data)  # fed in parts: no copy of the payload
    tail = _event_tails.get(event)
    if tail is None:
        tail = b',"event":' + _sorted_encoder.encode(event) + b"}"
        if len(_event_tails) < 4096:
            _event_tails[event] = tail
    digest.update(tail)
    return digest.hexdigest()


def base_event_id(session_id: str, event: str, epoch_ms: int, tool_call_id: Any) -> str:
    """Seed-004 Event node id: ``{session_id}__{event with ':'→'_'}__{epoch_ms}[__{tool_call_id}]``.

    The ``tool_call_id`` disambiguator is appended whenever ``data.tool_call_id`` is a non-blank
    string (tool lifecycle events, and delegate events that carry one).
    """
    base = f"{session_id}__{event.replace(':', '_')}__{epoch_ms}"
    if isinstance(tool_call_id, str) and tool_call_id:
        return f"{base}__{tool_call_id}"
    return base


def _check_graph_safe(value: str, field: str) -> None:
    """A session id names its Session node as it is (`convograph.intelligence.keys`): one the
    engine cannot hold under a unique constraint is refused here rather than crash it later."""
    if not is_graph_safe(value):
        raise EnvelopeError(
            f"invalid_{field.split('.')[-1]}",
            f"{field} must not start or end with whitespace, contain U+0001 or exceed"
            f" {MAX_KEY_BYTES} UTF-8 bytes: {value[:80]!r}",
            field=field,
        )


def _check_name(value: Any, field: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise EnvelopeError(
            f"invalid_{field.split('.')[-1]}", f"{field} must be a non-blank string", field=field
        )
    if len(value) > limit:
        raise EnvelopeError(
            f"invalid_{field.split('.')[-1]}", f"{field} is longer than {limit} characters", field=field
        )
    if "\x00" in value:
        raise EnvelopeError(
            f"invalid_{field.split('.')[-1]}", f"{field} contains a NUL character", field=field
        )
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise EnvelopeError(
                f"invalid_{field.split('.')[-1]}", f"{field} contains a lone surrogate character", field=field
            ) from None
    return value


def check_workspace(value: Any, field: str = "workspace") -> str:
    """A valid workspace name (non-blank, at most 512 characters, no NUL), else `EnvelopeError`."""
    return _check_name(value, field, _MAX_ID)


def check_session_id(value: Any, field: str = "session_id") -> str:
    """A valid session id (as `check_workspace`, and no ``/``, ``\\``, ``.`` or ``..``: it names
    blob directories), else `EnvelopeError` naming ``field``."""
    session_id = _check_name(value, field, _MAX_ID)
    if "/" in session_id or "\\" in session_id or session_id in (".", ".."):
        raise EnvelopeError(
            "invalid_session_id",
            f"{field} must not contain '/' or '\\' nor be '.' or '..': {session_id!r}",
            field=field,
        )
    return session_id


def _canonical_data(data: dict[str, Any], *, decoded: bool = False) -> bytes:
    """The sorted-key JSON of ``data``; `EnvelopeError` when a mapping body holds what JSON cannot
    carry (objects, non-string keys, lone surrogates) or NaN / Infinity (msgspec would write them
    as ``null``: the stored payload would silently differ from the one accepted). ``decoded``:
    ``data`` comes from our JSON decoder, which refuses NaN, Infinity and out-of-range numbers,
    so there is no non-finite float to look for."""
    try:
        data_json = _sorted_encoder.encode(data)
    except (TypeError, ValueError) as exc:
        raise EnvelopeError(
            "invalid_data", f"data is not representable as JSON: {exc}", field="data"
        ) from None
    except RecursionError:
        raise EnvelopeError("invalid_data", "data is nested too deeply", field="data") from None
    if not decoded and b"null" in data_json and has_non_finite(data):
        raise EnvelopeError(
            "invalid_data", "data holds NaN or Infinity, which JSON cannot carry", field="data"
        )
    return data_json


_VALID_CACHE = 65536
_valid_events: dict[str, str] = {}
"""Event names as sent that passed `_check_name` -> the stripped name."""
_valid_workspaces: dict[str, bool] = {}
"""Workspace names that passed `check_workspace`."""
_valid_sessions: dict[str, bool] = {}
"""Session ids that passed `check_session_id` and `_check_graph_safe`."""


def _remember(cache: dict[str, Any], name: str, value: Any) -> None:
    """Record a name that passed its checks (pure functions of the string, so a later event
    with the same name skips them: ~0.8 us per event of the ~5.5 of `parse_envelope`); emptied
    at `_VALID_CACHE` entries. Thread-safe (dict get/set)."""
    if len(cache) >= _VALID_CACHE:
        cache.clear()
    cache[name] = value


def parse_envelope(
    body: Mapping[str, Any] | str | bytes | bytearray | memoryview, *, json_decoded: bool = False
) -> Envelope:
    """Validate one envelope. O(size of ``data``) (one canonical encoding for the fingerprint).

    ``json_decoded``: a mapping ``body`` is what a msgspec JSON decoder made of JSON text (the
    HTTP routes), so it holds no NaN or Infinity (the decoder refuses them) and is not walked
    for them."""
    decoded = json_decoded  # by a JSON decoder, which refuses NaN and Infinity
    if isinstance(body, str | bytes | bytearray | memoryview):
        decoded = True
        try:
            body = _decoder.decode(body)
        except msgspec.DecodeError as exc:
            raise EnvelopeError("invalid_json", f"body is not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:
            raise EnvelopeError("invalid_json", f"body is not UTF-8 text: {exc.reason}") from None
        except UnicodeEncodeError:
            raise EnvelopeError("invalid_json", "body holds a lone surrogate character") from None
        except RecursionError:
            raise EnvelopeError("invalid_json", "body is not valid JSON: nested too deeply") from None
    if type(body) is not dict and not isinstance(body, Mapping):
        raise EnvelopeError("invalid_envelope", "envelope must be a JSON object")
    event = body.get("event")
    known = _valid_events.get(event) if type(event) is str else None
    if known is None:
        name = _check_name(event, "event", _MAX_NAME)
        known = name.strip()
        _remember(_valid_events, name, known)
    event = known
    workspace = body.get("workspace")
    if type(workspace) is not str or workspace not in _valid_workspaces:
        workspace = check_workspace(workspace)
        _remember(_valid_workspaces, workspace, True)
    data = body.get("data")
    if not isinstance(data, dict):
        raise EnvelopeError("invalid_data", "data must be a JSON object", field="data")
    session_id = data.get("session_id")
    if session_id is None:
        raise EnvelopeError("missing_session_id", "data.session_id is required", field="data.session_id")
    if type(session_id) is not str or session_id not in _valid_sessions:
        session_id = check_session_id(session_id, "data.session_id")
        _check_graph_safe(session_id, "data.session_id")
        _remember(_valid_sessions, session_id, True)
    tool_call_id = data.get("tool_call_id")
    epoch_ms = parse_timestamp_ms(data.get("timestamp"))
    key = body.get("idempotency_key")
    if key is not None:
        key = _check_name(key, "idempotency_key", _MAX_ID)
    data_json = _canonical_data(data, decoded=decoded)  # canonical form: fingerprinted and stored as is
    fingerprint = _fingerprint(event, data_json)
    return Envelope(  # positional (field order): cheaper than keywords, once per event
        event,
        workspace,
        data,
        session_id,
        epoch_ms,
        fingerprint,
        key if key is not None else f"sha256:{fingerprint}",  # dedupe_key
        base_event_id(session_id, event, epoch_ms, tool_call_id),  # base_id
        key,  # idempotency_key
        data_json,
    )
