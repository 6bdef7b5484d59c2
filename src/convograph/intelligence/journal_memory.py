"""`MemoryJournal`: the ingest journal in memory, with `SqliteJournal`'s semantics (tests and
ephemeral services)."""

from __future__ import annotations

import bisect
import threading
import time
import uuid
from collections.abc import Collection, Iterator, Sequence

import msgspec

from convograph.intelligence import journal_base
from convograph.intelligence.envelope import Envelope
from convograph.intelligence.journal_base import (
    AppendResult,
    DeadLetterGroup,
    JournalRecord,
    RecentRecord,
    event_base_key,
)

__all__ = ["MemoryJournal"]

_json = msgspec.json.Encoder()


class MemoryJournal:
    """In-memory `Journal` with the same semantics (tests and ephemeral services)."""

    def __init__(self) -> None:
        self.journal_id = uuid.uuid4().hex
        self._records: dict[int, JournalRecord] = {}
        self._order: list[int] = []  # seqs in increasing order (replay appends a bigger seq)
        self._keys: set[tuple[str, str, str]] = set()  # (workspace, session_id, idempotency key)
        self._forgotten_keys: set[tuple[str, str]] = set()  # (workspace, key): tombstones
        self._fingerprints: set[tuple[str, str]] = set()
        self._bases: dict[tuple[str, str], set[str]] = {}
        self._dead: dict[int, tuple[str, float]] = {}
        self._idem_of: dict[int, str] = {}  # seq -> idempotency key (to forget without a tombstone)
        self._received: dict[int, int] = {}  # seq -> received_ms
        self._next = 1
        self._lock = threading.Lock()

    def append(self, envelopes: Sequence[Envelope], created_by: str | None = None) -> list[AppendResult]:
        results: list[AppendResult] = []
        now = journal_base.now_ms()
        with self._lock:
            for env in envelopes:
                fp_key = (env.workspace, env.fingerprint)
                idem = (
                    (env.workspace, env.session_id, env.idempotency_key)
                    if env.idempotency_key is not None
                    else None
                )
                if fp_key in self._fingerprints or (
                    idem is not None
                    and (idem in self._keys or (env.workspace, env.idempotency_key) in self._forgotten_keys)
                ):
                    results.append(AppendResult("duplicate"))
                    continue
                self._fingerprints.add(fp_key)
                if idem is not None:
                    self._keys.add(idem)
                self._bases.setdefault((env.workspace, env.base_id), set()).add(env.fingerprint)
                seq = self._next
                self._next += 1
                if env.idempotency_key is not None:
                    self._idem_of[seq] = env.idempotency_key
                self._received[seq] = now
                self._records[seq] = JournalRecord(
                    seq,
                    env.workspace,
                    env.session_id,
                    env.event,
                    env.epoch_ms,
                    env.fingerprint,
                    env.base_id,
                    env.data_json or _json.encode(env.data),
                    created_by,
                    event_base_key(env.workspace, env.base_id, env.epoch_ms),
                )
                self._order.append(seq)
                results.append(AppendResult("queued", seq))
        return results

    def read_after(self, seq: int, limit: int) -> list[JournalRecord]:
        """O(log N + limit)."""
        with self._lock:
            start = bisect.bisect_right(self._order, seq)
            return [self._records[s] for s in self._order[start : start + limit]]

    def read_session(self, workspace: str, session_id: str, before_seq: int) -> list[JournalRecord]:
        """One session's records with ``seq < before_seq`` in seq order."""
        with self._lock:
            return [
                r
                for s, r in sorted(self._records.items())
                if s < before_seq and r.workspace == workspace and r.session_id == session_id
            ]

    def last_seq(self) -> int:
        with self._lock:
            return max(self._records, default=0)

    def base_keys(self) -> Iterator[int]:
        with self._lock:
            keys = [
                r.base_key if r.base_key is not None else event_base_key(r.workspace, r.base_id, r.epoch_ms)
                for r in self._records.values()
            ]
        return iter(keys)

    def collision_groups(self, workspace: str, events: Collection[tuple[str, int]]) -> dict[str, list[str]]:
        with self._lock:
            out = {}
            for base_id in {base_id for base_id, _ in events}:
                fps = self._bases.get((workspace, base_id), set())
                if len(fps) > 1:
                    out[base_id] = sorted(fps)
            return out

    def dead_letter(self, seq: int, error: str) -> None:
        with self._lock:
            self._dead[seq] = (error, time.time())

    def dead_letters(self, workspaces: frozenset[str] | None = None) -> list[DeadLetterGroup]:
        with self._lock:
            groups: dict[tuple[str, str], list[tuple[float, str]]] = {}
            for seq, (error, ts) in self._dead.items():
                record = self._records[seq]
                if workspaces is None or record.workspace in workspaces:
                    groups.setdefault((record.session_id, record.workspace), []).append((ts, error))
            return [
                DeadLetterGroup(key, ws, len(items), max(items)[1], max(items)[0])
                for (key, ws), items in sorted(groups.items())
            ]

    def _dead_seqs(self, key: str, workspaces: frozenset[str] | None) -> list[int]:
        return sorted(
            seq
            for seq in self._dead
            if self._records[seq].session_id == key
            and (workspaces is None or self._records[seq].workspace in workspaces)
        )

    def replay_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int:
        with self._lock:
            seqs = self._dead_seqs(key, workspaces)
            for seq in seqs:
                record = self._records.pop(seq)
                del self._dead[seq]
                self._order.remove(seq)
                new_seq = self._next
                self._next += 1
                if seq in self._idem_of:
                    self._idem_of[new_seq] = self._idem_of.pop(seq)
                self._received[new_seq] = self._received.pop(seq)
                self._records[new_seq] = msgspec.structs.replace(record, seq=new_seq)
                self._order.append(new_seq)
            return len(seqs)

    def purge_dead(self, key: str, workspaces: frozenset[str] | None = None) -> int:
        with self._lock:
            seqs = self._dead_seqs(key, workspaces)
            for seq in seqs:
                del self._dead[seq]
            return len(seqs)

    def forget_session(
        self, workspace: str, session_id: str, *, tombstone: bool = True, idle_before_ms: int | None = None
    ) -> int:
        """Drop the records; their fingerprints and keys stay in the dedupe sets (tombstones)
        unless ``tombstone`` is false."""
        with self._lock:
            gone = [
                seq
                for seq, r in self._records.items()
                if r.workspace == workspace and r.session_id == session_id
            ]
            if (
                idle_before_ms is not None
                and max((self._received[s] for s in gone), default=idle_before_ms) >= idle_before_ms
            ):
                return 0
            for seq in gone:
                record = self._records.pop(seq)
                self._dead.pop(seq, None)
                fingerprints = self._bases.get((workspace, record.base_id))
                if fingerprints is not None:
                    fingerprints.discard(record.fingerprint)
                key = self._idem_of.get(seq)
                if key is not None:
                    self._keys.discard((workspace, session_id, key))
                    if tombstone:  # as SQLite's tombstones: refused in every session of the workspace
                        self._forgotten_keys.add((workspace, key))
                if not tombstone:
                    self._fingerprints.discard((workspace, record.fingerprint))
                self._idem_of.pop(seq, None)
                self._received.pop(seq, None)
            if gone:
                dropped = set(gone)
                self._order = [s for s in self._order if s not in dropped]
            return len(gone)

    def idle_sessions(self, received_before_ms: int, workspace: str | None = None) -> list[tuple[str, str]]:
        with self._lock:
            newest: dict[tuple[str, str], int] = {}
            for seq, record in self._records.items():
                if workspace is None or record.workspace == workspace:
                    key = (record.workspace, record.session_id)
                    newest[key] = max(newest.get(key, 0), self._received[seq])
            return sorted(key for key, ms in newest.items() if ms < received_before_ms)

    def session_count(self, workspace: str, session_id: str) -> int:
        with self._lock:
            return sum(
                1 for r in self._records.values() if r.workspace == workspace and r.session_id == session_id
            )

    def recent(self, limit: int) -> list[RecentRecord]:
        with self._lock:
            newest = sorted(self._records, reverse=True)[:limit]
            return [
                RecentRecord(
                    seq,
                    self._records[seq].workspace,
                    self._records[seq].session_id,
                    self._records[seq].event,
                    self._received[seq],
                    self._dead[seq][0] if seq in self._dead else None,
                )
                for seq in newest
            ]

    def dead_letters_since(self, ts: float) -> int:
        with self._lock:
            return sum(1 for _, when in self._dead.values() if when >= ts)

    def read_workspace(
        self, workspace: str, after_seq: int, upto_seq: int, limit: int
    ) -> list[JournalRecord]:
        with self._lock:
            start = bisect.bisect_right(self._order, after_seq)
            out: list[JournalRecord] = []
            for seq in self._order[start:]:
                if seq > upto_seq or len(out) >= limit:
                    break
                record = self._records[seq]
                if record.workspace == workspace and seq not in self._dead:
                    out.append(record)
            return out

    def close(self) -> None:
        return None
