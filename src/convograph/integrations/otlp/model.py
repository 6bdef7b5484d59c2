"""The spans the OTLP adapter works on: one plain, typed value per span, whatever the wire encoding.

`decode` makes them from OTLP/HTTP bodies (protobuf or JSON), `genai` maps them to convograph
events, `encode` makes them from events and writes them back as OTLP. Attribute values are plain
Python values (``str``, ``int``, ``float``, ``bool``, lists, dicts); bytes are kept as
``{"$base64": "..."}`` so every value survives JSON. Ids are lowercase hex (trace 32, span 16
characters), as in OTLP/JSON.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = [
    "SPAN_KIND_CLIENT",
    "SPAN_KIND_INTERNAL",
    "STATUS_ERROR",
    "STATUS_OK",
    "STATUS_UNSET",
    "LogRecord",
    "Span",
    "SpanEvent",
]

SPAN_KIND_INTERNAL: Final = 1
SPAN_KIND_SERVER: Final = 2
SPAN_KIND_CLIENT: Final = 3
STATUS_UNSET: Final = 0
STATUS_OK: Final = 1
STATUS_ERROR: Final = 2

EMPTY: Final[dict[str, Any]] = {}
"""Shared read-only default for absent attribute maps (never mutated)."""


class SpanEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A timed event inside a span (OTLP ``Span.Event``)."""

    name: str
    time_ns: int = 0
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)


class Span(msgspec.Struct, frozen=True, kw_only=True):
    """One OTLP span with its resource and instrumentation scope.

    Invariants (checked by `decode`): ``trace_id`` is 32 and ``span_id`` 16 lowercase hex
    characters, neither all zeros; ``parent_span_id`` is ``None`` for a root span.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    name: str = ""
    kind: int = 0
    start_ns: int = 0
    end_ns: int = 0
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    links: tuple[dict[str, Any], ...] = ()
    status_code: int = STATUS_UNSET
    status_message: str = ""
    resource: dict[str, Any] = msgspec.field(default_factory=dict)
    """The resource's attributes (shared by every span of one ``ResourceSpans``)."""
    scope_name: str = ""
    scope_version: str = ""
    trace_state: str = ""
    flags: int = 0
    dropped_attributes: int = 0
    dropped_events: int = 0
    dropped_links: int = 0


class LogRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One OTLP log record with its resource and instrumentation scope.

    Invariants (checked by `decode_logs`): ``trace_id`` is ``None`` or 32 and ``span_id``
    ``None`` or 16 lowercase hex characters, never all zeros (OTLP writes an absent id as empty or
    zeros). ``event_name`` is the record's ``event_name`` field, else its ``event.name`` attribute
    (how SDKs before that field named an event)."""

    trace_id: str | None = None
    span_id: str | None = None
    event_name: str = ""
    time_ns: int = 0
    observed_ns: int = 0
    severity_number: int = 0
    severity_text: str = ""
    body: Any = None
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)
    resource: dict[str, Any] = msgspec.field(default_factory=dict)
    scope_name: str = ""
    scope_version: str = ""
    flags: int = 0
    dropped_attributes: int = 0
