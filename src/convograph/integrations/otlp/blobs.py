"""Oversized OTLP values -> the context-intelligence blob store, replaced by a reference.

`offload` replaces, in mapped events, each unmapped span attribute (and other large section of the
``otel`` extra) of ``attribute_threshold`` bytes or more, and each tool input / output of
``content_threshold`` bytes or more, by ``{"$blob_ref", "sha256", "bytes", "preview"}``.
`rebase_blobs` copies the blobs events refer to into another conversation's session (when a
trace's events move to the conversation it names).

Sizes are the value's JSON encoding; a string's is bounded from its length first (a character is
at most 6 bytes of JSON), so the common small value is not encoded just to be measured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

import msgspec

from convograph.events import Event, ToolCall, ToolResult, parse_event
from convograph.events.codec import event_to_wire
from convograph.intelligence.blobs import BlobStore, parse_blob_uri
from convograph.intelligence.conversations import conversation_target

__all__ = ["BLOB_REF", "BlobSink", "ConversationBlobs", "offload", "rebase_blobs"]

BLOB_REF: Final = "$blob_ref"

_json = msgspec.json.Encoder(order="sorted")


class BlobSink(Protocol):
    """Where oversized values go: ``put`` returns the reference that replaces the value."""

    def put(self, conversation_id: str, key: str, content: bytes) -> dict[str, Any]: ...

    def get(self, uri: str) -> bytes | None: ...


def offload(
    events: list[Event], cid: str, sink: BlobSink, *, attribute_threshold: int, content_threshold: int
) -> list[Event]:
    """``events`` with their oversized values in ``sink`` (module docstring); O(size of the events)."""
    put = sink.put
    out: list[Event] = []
    for event in events:
        extra = event.extra
        if extra is not None and isinstance(extra.get("otel"), dict):
            meta = _offload_meta(extra["otel"], cid, put, attribute_threshold)
            if meta is not extra["otel"]:
                event = msgspec.structs.replace(event, extra={**extra, "otel": meta})
        if isinstance(event, ToolCall | ToolResult):
            field = "input" if isinstance(event, ToolCall) else "output"
            encoded = _encoded_if_large(getattr(event, field), content_threshold)
            if encoded is not None:
                ref = put(cid, f"otlp__{_safe(event.event_id or event.id)}__{field}", encoded)
                event = msgspec.structs.replace(event, **{field: ref})
        out.append(event)
    return out


def _encoded_if_large(value: Any, threshold: int) -> bytes | None:
    """``value`` as JSON when that is ``threshold`` bytes or more, else None (cheaply for scalars)."""
    if value is None or isinstance(value, bool | int | float):
        return None
    if isinstance(value, str) and 6 * len(value) + 2 < threshold:  # \u00XX escapes: 6 bytes
        return None
    encoded = _json.encode(value)
    return encoded if len(encoded) >= threshold else None


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-:" else "_" for ch in text)[:200]


def _offload_meta(
    meta: dict[str, Any], cid: str, put: Callable[[str, str, bytes], dict[str, Any]], threshold: int
) -> dict[str, Any]:
    """``meta`` with each large value of its ``attributes`` (and other large sections) replaced by a
    blob reference; the same object when nothing is large (the common case)."""
    out: dict[str, Any] | None = None
    span_id = _safe(str(meta.get("spanId", "span")))
    attributes = meta.get("attributes")
    if isinstance(attributes, dict):
        kept: dict[str, Any] | None = None
        for key, value in attributes.items():
            encoded = _encoded_if_large(value, threshold)
            if encoded is not None:
                kept = dict(attributes) if kept is None else kept
                kept[key] = put(cid, f"otlp__{span_id}__{_safe(key)}", encoded)
        if kept is not None:
            out = {**meta, "attributes": kept}
    for section in ("systemInstructions", "events", "unmappedParts", "resource"):
        encoded = _encoded_if_large(meta.get(section), threshold)
        if encoded is not None:
            out = dict(meta) if out is None else out
            out[section] = put(cid, f"otlp__{span_id}__{section}", encoded)
    return meta if out is None else out


def rebase_blobs(events: list[Event], new: str, blobs: BlobSink) -> list[Event]:
    """Copies of ``events`` whose blob references name ``new``'s blobs (the content copied there)."""
    out: list[Event] = []
    for event in events:
        wire = event_to_wire(event)
        if BLOB_REF.encode() not in _json.encode(wire):
            out.append(event)
            continue

        def rebase(value: Any) -> Any:
            if isinstance(value, dict):
                uri = value.get(BLOB_REF)
                if isinstance(uri, str):
                    content = blobs.get(uri)
                    return value if content is None else blobs.put(new, uri.rsplit("/", 1)[-1], content)
                return {key: rebase(item) for key, item in value.items()}
            if isinstance(value, list):
                return [rebase(item) for item in value]
            return value

        out.append(parse_event(rebase(wire)))
    return out


class ConversationBlobs:
    """`BlobSink` over the context-intelligence `BlobStore`: a conversation's blobs live in its
    session (`conversation_target`), so forgetting the conversation forgets them too."""

    def __init__(self, store: BlobStore) -> None:
        self.store = store

    def put(self, conversation_id: str, key: str, content: bytes) -> dict[str, Any]:
        workspace, session = conversation_target(conversation_id)
        ref = self.store.put(workspace, session, key, content)
        return {
            BLOB_REF: ref.uri,
            "sha256": ref.sha256,
            "bytes": ref.size,
            "preview": content[:256].decode(errors="ignore"),
        }

    def get(self, uri: str) -> bytes | None:
        session, key = parse_blob_uri(uri)
        return self.store.get(session, key)
