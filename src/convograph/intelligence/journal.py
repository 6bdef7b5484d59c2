"""Durable ingest journal for hook envelopes: accepted → durable → acknowledged.

`Journal` is the protocol; `SqliteJournal` (WAL) is the durable implementation and
`MemoryJournal` the in-memory double with identical semantics.

Invariants:

- ``append`` is atomic per call and returns only after commit ("durable before 202"; with
  ``synchronous="normal"`` a committed append survives a process crash, with ``"full"`` also
  power loss).
- Deduplication survives restarts: an envelope is a duplicate when its ``idempotency_key`` was
  already accepted *for the same session* (workspace and ``data.session_id``) or its content
  fingerprint *in the same workspace* (the key is recorded in the same transaction as the
  event, never before it — upstream §10 B7). The unique indexes hold 128-bit BLAKE2b digests of
  ``(workspace, key)`` (after the session's 64-bit key) and ``(workspace, fingerprint)`` (after
  the base-id key): short fixed-size keys make an append ~2x cheaper than indexing the text, and
  both indexes grow where current events go, not on random pages. A forgotten session's key
  digests stay refused in its whole workspace (tombstones).
- ``seq`` is a global, strictly increasing integer; records become visible to ``read_after`` in
  seq order, so per-session order is arrival order.
- Events sharing a seed-format base id but differing in content (same session, type and
  millisecond; upstream §10 B4) form *collision groups* (`collision_groups`, an indexed query);
  the writer gives the bare id to the smallest fingerprint and suffixes the others, whatever the
  arrival order. The base-id key that index holds starts with the event's millisecond, so
  appends land near the index's end instead of on random pages (schema 4).
- Dead letters reference journal rows. Replay moves the rows to the tail (new seq), purge
  forgets the dead-letter entries (the event stays known for deduplication).
- ``forget_session`` deletes a session's rows (payloads included) and keeps only their dedupe
  digests as tombstones, so a redelivered copy of a forgotten event is a duplicate, never a
  resurrection. Tombstones hold 128-bit digests, no content.

The journals: `SqliteJournal` (`convograph.intelligence.journal_sqlite`), `MemoryJournal`
(`journal_memory`) and `convograph.intelligence.journal_pg.PostgresJournal`; what they share
(records, keys, the clock) is in `journal_base`.
"""

from convograph.intelligence.journal_base import (
    AppendResult,
    DeadLetterGroup,
    Journal,
    JournalRecord,
    RecentRecord,
    event_base_key,
)
from convograph.intelligence.journal_memory import MemoryJournal
from convograph.intelligence.journal_sqlite import SqliteJournal

__all__ = [
    "AppendResult",
    "DeadLetterGroup",
    "Journal",
    "JournalRecord",
    "MemoryJournal",
    "RecentRecord",
    "SqliteJournal",
    "event_base_key",
]
