"""The event-log contract: value types, the `EventLog` protocol, errors and id validation.

Invariants every backend keeps (the contract suite in ``tests/test_store_contract.py`` checks them):
- ``seq`` is per conversation, starts at 1 and grows by exactly 1 per accepted event: no gaps, no reuse.
- An event whose ``event_id`` is already stored for that conversation is not stored again; it is
  reported in `AppendResult.duplicates` (also when it repeats inside one batch).
- A batch is appended atomically: every accepted event of it becomes visible at once, or none does.
- `EventLog.append` returns only after the events are durable under the backend's stated policy
  (docs/store.md). If it raises, the caller must assume nothing was stored unless told otherwise;
  retrying with ``eventId`` set is always safe.
- ``subscribe(cid, after_seq)`` yields every event with ``seq > after_seq`` exactly once, in order,
  first the stored ones, then live ones as they are appended, with no gap between the two.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from typing import Final, Protocol, runtime_checkable

import msgspec

from convograph.events import Event

__all__ = [
    "CONVERSATION_ID_PATTERN",
    "MAX_SEQ",
    "AppendResult",
    "BackendUnavailable",
    "ConversationInfo",
    "EventLog",
    "EventsExpired",
    "InvalidConversationId",
    "Snapshot",
    "StoreError",
    "StoredEvent",
    "read_range",
    "validate_conversation_id",
]

CONVERSATION_ID_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}"
"""1-128 characters: ASCII letters, digits and ``. _ : @ -``, not starting with punctuation."""

_ID_RE: Final = re.compile(CONVERSATION_ID_PATTERN)


class StoreError(Exception):
    """Base class of every event-log error."""


class InvalidConversationId(StoreError, ValueError):
    """A conversation id that is empty, too long or holds characters outside the allowed set."""


class BackendUnavailable(StoreError):
    """The backend cannot be reached or failed mid-operation.

    ``backend`` names it (``"postgres"``, ``"redis"``, ``"sqlite"``). Unless ``outcome_unknown`` is
    True, nothing of the failed call was stored. When it is True (the connection died while
    committing), retrying events that carry ``eventId`` is safe: duplicates are skipped.
    """

    def __init__(self, backend: str, message: str, *, outcome_unknown: bool = False) -> None:
        self.backend = backend
        self.outcome_unknown = outcome_unknown
        super().__init__(f"{backend} event log unavailable: {message}")


class EventsExpired(StoreError):
    """The requested range is no longer held (a bounded Redis stream was trimmed or expired).

    ``first_available`` is the lowest seq still readable, or None when nothing is.
    """

    def __init__(self, conversation_id: str, after_seq: int, first_available: int | None) -> None:
        self.conversation_id = conversation_id
        self.after_seq = after_seq
        self.first_available = first_available
        super().__init__(
            f"conversation {conversation_id!r}: events after seq {after_seq} are no longer available "
            f"(first available: {first_available}); the stream is not resumable from there"
        )


MAX_SEQ: Final = 2**63 - 1
"""The largest seq any backend can hold (a signed 64-bit integer in SQLite, Postgres and Redis)."""


def read_range(after_seq: int, limit: int | None) -> tuple[int, int | None] | None:
    """``(after_seq, limit)`` as a backend can bind them, or ``None`` when nothing can match:
    ``after_seq`` below 0 reads from the start, at or past `MAX_SEQ` nothing; a ``limit`` of 0
    or less matches nothing, one past `MAX_SEQ` means no limit. (A huge ``Last-Event-ID`` used
    to raise ``OverflowError`` out of SQLite in the middle of an SSE response.)"""
    if after_seq >= MAX_SEQ or (limit is not None and limit <= 0):
        return None
    return max(after_seq, 0), None if limit is None or limit >= MAX_SEQ else limit


def validate_conversation_id(conversation_id: object) -> str:
    """Return ``conversation_id`` if valid, else raise `InvalidConversationId` saying why."""
    if not isinstance(conversation_id, str):
        raise InvalidConversationId(f"conversation id must be a string, got {type(conversation_id).__name__}")
    if not conversation_id:
        raise InvalidConversationId("conversation id must not be empty")
    if len(conversation_id) > 128:
        raise InvalidConversationId(
            f"conversation id is {len(conversation_id)} characters long; the limit is 128"
        )
    if _ID_RE.fullmatch(conversation_id) is None:
        raise InvalidConversationId(
            f"conversation id {conversation_id!r} has characters outside [A-Za-z0-9._:@-] "
            "or starts with punctuation"
        )
    return conversation_id


class StoredEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event as the log holds it. ``event.seq == seq`` always."""

    seq: int
    conversation_id: str
    event: Event
    received_at: float
    """Unix time (seconds) at which the log accepted the event."""


class AppendResult(msgspec.Struct, frozen=True, kw_only=True):
    """What `EventLog.append` did with one batch.

    - ``accepted``: events stored now; ``duplicates``: events skipped because their ``eventId`` was
      already stored (or repeated earlier in the batch); ``duplicate_indexes`` locates them.
    - ``first_seq`` / ``last_seq``: seqs of the first and last accepted event, None when none was.
    - ``conversation_last_seq``: the conversation's newest seq after this append (0 when empty).
    - ``spooled``: True when the backend was down and the batch went to the local spool instead; it
      gets its seqs when the spool drains (``first_seq``/``last_seq`` are then None).
    """

    accepted: int
    duplicates: int
    first_seq: int | None
    last_seq: int | None
    conversation_last_seq: int
    stored: list[StoredEvent]
    duplicate_indexes: tuple[int, ...] = ()
    spooled: bool = False


class ConversationInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Summary row of `EventLog.list_conversations` (status: see `convograph.store.status`)."""

    id: str
    event_count: int
    last_seq: int
    last_activity: float
    status: str


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A reducer's state dumped at ``seq`` (see `convograph.store.snapshots`)."""

    name: str
    seq: int
    data: bytes


@runtime_checkable
class EventLog(Protocol):
    """A durable, per-conversation, append-only event log. All backends implement this."""

    async def append(self, conversation_id: str, events: Sequence[Event]) -> AppendResult:
        """Store a batch atomically; assign seqs; skip and report duplicates by ``eventId``."""
        ...

    async def read(
        self, conversation_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        """Stored events with ``seq > after_seq`` in seq order, at most ``limit``."""
        ...

    def subscribe(self, conversation_id: str, after_seq: int = 0) -> AsyncIterator[StoredEvent]:
        """Replay after ``after_seq``, then follow the live tail. No gap, no duplicate."""
        ...

    async def list_conversations(self) -> list[ConversationInfo]:
        """Every conversation, most recently active first."""
        ...

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        """One conversation's summary, or None when it holds no events."""
        ...

    async def delete(self, conversation_id: str) -> bool:
        """Remove a conversation, its events and snapshots. True when it existed."""
        ...

    async def save_snapshot(self, conversation_id: str, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` as the newest of its name (replaces an older one)."""
        ...

    async def load_snapshot(self, conversation_id: str, name: str) -> Snapshot | None:
        """The newest snapshot of ``name``, or None."""
        ...

    async def close(self) -> None:
        """Flush and release resources. Pending appends finish first."""
        ...
