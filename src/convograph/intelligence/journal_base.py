"""What every ingest journal shares (`convograph.intelligence.journal`): the `Journal` protocol,
the records it stores and returns, the keys its indexes hold, and the clock of an append."""

from __future__ import annotations

import hashlib
import time
import zlib
from collections.abc import Collection, Iterator, Sequence
from typing import Literal, Protocol

import msgspec

from convograph.intelligence.envelope import Envelope

__all__ = [
    "AppendResult",
    "DeadLetterGroup",
    "Journal",
    "JournalRecord",
    "RecentRecord",
    "digest16",
    "event_base_key",
    "now_ms",
    "session_index_key",
]


# gc=False: never part of a reference cycle (it holds only decoded JSON values), so the cyclic
# GC need not track it; the ingest path makes one per event and GC passes were ~20 % of its CPU
class JournalRecord(msgspec.Struct, frozen=True, gc=False):
    """One accepted envelope as stored. ``data`` is the compact JSON of the original payload."""

    seq: int
    workspace: str
    session_id: str
    event: str
    epoch_ms: int
    fingerprint: str
    base_id: str
    data: bytes
    created_by: str | None = None
    base_key: int | None = None
    """`event_base_key` of ``(workspace, base_id, epoch_ms)`` as the journal indexed it (None: not
    known, compute it)."""


class RecentRecord(msgspec.Struct, frozen=True):
    """One of the newest records (`Journal.recent`): what the status page shows of it."""

    seq: int
    workspace: str
    session_id: str
    event: str
    received_ms: int
    error: str | None = None
    """Its dead-letter error, if it was dead-lettered."""


class AppendResult(msgspec.Struct, frozen=True, gc=False):
    """Outcome for one envelope: ``queued`` with its seq, or ``duplicate``."""

    status: Literal["queued", "duplicate"]
    seq: int | None = None


class DeadLetterGroup(msgspec.Struct, frozen=True):
    """Dead letters of one session key (upstream: per worker key)."""

    key: str
    workspace: str
    item_count: int
    last_error: str
    last_ts: float


class Journal(Protocol):
    """Durable, ordered, deduplicating store of accepted envelopes."""

    journal_id: str

    def append(self, envelopes: Sequence[Envelope], created_by: str | None = None) -> list[AppendResult]: ...

    def read_after(self, seq: int, limit: int) -> list[JournalRecord]: ...

    def last_seq(self) -> int: ...

    def collision_groups(self, workspace: str, events: Collection[tuple[str, int]]) -> dict[str, list[str]]:
        """Sorted fingerprints of every base id among ``events`` (``(base_id, epoch_ms)`` pairs
        of appended events) that distinct events of ``workspace`` share."""
        ...

    def base_keys(self) -> Iterator[int]:
        """`event_base_key` of every record held (any order; repeats allowed). O(N): the
        applier reads it once at start (`GraphApplier.start`)."""
        ...

    def dead_letter(self, seq: int, error: str) -> None: ...

    def dead_letters(self, workspaces: frozenset[str] | None = None) -> list[DeadLetterGroup]: ...

    def replay_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int: ...

    def purge_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int: ...

    def forget_session(
        self, workspace: str, session_id: str, *, tombstone: bool = True, idle_before_ms: int | None = None
    ) -> int:
        """Delete one session's records, keeping their dedupe digests as tombstones unless
        ``tombstone`` is false (then a re-sent copy is new data); returns how many. With
        ``idle_before_ms``, only if its newest record was received before then (checked in the
        same transaction: a session that just became active again is kept, and 0 returned)."""
        ...

    def session_count(self, workspace: str, session_id: str) -> int:
        """How many records the session has in ``workspace``."""
        ...

    def idle_sessions(self, received_before_ms: int, workspace: str | None = None) -> list[tuple[str, str]]:
        """``(workspace, session_id)`` of every session (of ``workspace``, or all) whose newest
        record was received before ``received_before_ms``, sorted."""
        ...

    def recent(self, limit: int) -> list[RecentRecord]:
        """The newest ``limit`` records, newest first. O(limit)."""
        ...

    def dead_letters_since(self, ts: float) -> int:
        """How many records were dead-lettered at or after ``ts`` (epoch seconds)."""
        ...

    def read_workspace(
        self, workspace: str, after_seq: int, upto_seq: int, limit: int
    ) -> list[JournalRecord]:
        """Up to ``limit`` live (not dead-lettered) records of ``workspace`` with
        ``after_seq < seq <= upto_seq``, in seq order (a workspace rebuild replays them)."""
        ...

    def close(self) -> None: ...


def now_ms() -> int:
    """Server time of an append (``received_ms``), in epoch milliseconds; tests replace it here
    (`journal_base.now_ms`: every journal reads it through this module)."""
    return int(time.time() * 1000)


def digest16(*parts: str) -> bytes:
    """128 bits of BLAKE2b of ``parts`` (joined by NUL): the journals' dedupe and tombstone keys."""
    return hashlib.blake2b("\x00".join(parts).encode(), digest_size=16).digest()


_KEY_MS = 1 << 46  # |milliseconds| kept in a base key: ~2,230 years either side of 1970


def event_base_key(workspace: str, base_id: str, epoch_ms: int) -> int:
    """The collision index's key of a base id: its millisecond (clamped to +-2**46) in the high
    bits, 16 bits of CRC-32 of ``(workspace, base_id)`` below; a signed 64-bit integer. Keys
    follow time, so appends of current events touch the index's last pages; any two events with
    one base id share the key (the base id holds its millisecond), and an equal key of another
    base id is told apart on the exact workspace and base id (`collision_groups`)."""
    ms = epoch_ms if -_KEY_MS <= epoch_ms < _KEY_MS else (_KEY_MS - 1 if epoch_ms > 0 else -_KEY_MS)
    return (ms << 16) | (zlib.crc32(f"{workspace}\x00{base_id}".encode()) & 0xFFFF)


def session_index_key(workspace: str, session_id: str) -> int:
    """The session index's key: 64 bits of BLAKE2b of ``(workspace, session_id)``, signed. Two
    sessions with one key only cost extra rows read: queries compare the exact columns too."""
    digest = hashlib.blake2b(f"{workspace}\x00{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
