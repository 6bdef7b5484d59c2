"""The in-memory event log: a supported backend for tests, demos and single-process use.

Nothing survives the process. Appends are atomic because they run without an ``await`` in between.
Costs: append O(batch); read O(log n + page) (bisect on seq); list O(conversations log conversations).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

from convograph.events import Event
from convograph.store.base import (
    AppendResult,
    ConversationInfo,
    Snapshot,
    StoredEvent,
    read_range,
    validate_conversation_id,
)
from convograph.store.batch import assign_seqs, check_events
from convograph.store.status import RunTally, fold_status
from convograph.store.tail import ChangeSignal, follow

__all__ = ["MemoryEventLog"]


class _Conversation:
    __slots__ = ("event_ids", "events", "last_activity", "snapshots", "tally")

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []
        self.event_ids: set[str] = set()
        self.tally = RunTally()
        self.last_activity = 0.0
        self.snapshots: dict[str, Snapshot] = {}


class MemoryEventLog:
    """`EventLog` held in process memory (``memory://``)."""

    def __init__(self) -> None:
        self._conversations: dict[str, _Conversation] = {}
        self._signal = ChangeSignal()
        self._closed = False

    async def append(self, conversation_id: str, events: Sequence[Event]) -> AppendResult:
        validate_conversation_id(conversation_id)
        check_events(events)
        self._check_open()
        conv = self._conversations.get(conversation_id)
        if conv is None:
            conv = _Conversation()
        now = time.time()
        last = conv.events[-1].seq if conv.events else 0
        stored, dups = assign_seqs(conversation_id, events, conv.event_ids, last, now)
        if stored:
            self._conversations[conversation_id] = conv
            conv.events.extend(stored)
            conv.event_ids.update(s.event.event_id for s in stored if s.event.event_id is not None)
            conv.tally = fold_status(conv.tally, (s.event for s in stored))
            conv.last_activity = now
            self._signal.notify(conversation_id)
        return AppendResult(
            accepted=len(stored),
            duplicates=len(dups),
            first_seq=stored[0].seq if stored else None,
            last_seq=stored[-1].seq if stored else None,
            conversation_last_seq=conv.events[-1].seq if conv.events else 0,
            stored=stored,
            duplicate_indexes=dups,
        )

    async def read(
        self, conversation_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        validate_conversation_id(conversation_id)
        conv = self._conversations.get(conversation_id)
        bounds = read_range(after_seq, limit)
        if conv is None or bounds is None:
            return []
        # seqs are 1..n without gaps, so seq k sits at index k - 1.
        start, limit = bounds
        end = None if limit is None else start + limit
        return conv.events[start:end]

    def subscribe(self, conversation_id: str, after_seq: int = 0) -> AsyncIterator[StoredEvent]:
        validate_conversation_id(conversation_id)
        return follow(self.read, self._signal, conversation_id, after_seq)

    async def list_conversations(self) -> list[ConversationInfo]:
        infos = [self._info(cid, conv) for cid, conv in self._conversations.items()]
        infos.sort(key=lambda info: info.last_activity, reverse=True)
        return infos

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        validate_conversation_id(conversation_id)
        conv = self._conversations.get(conversation_id)
        return None if conv is None else self._info(conversation_id, conv)

    async def delete(self, conversation_id: str) -> bool:
        validate_conversation_id(conversation_id)
        return self._conversations.pop(conversation_id, None) is not None

    async def save_snapshot(self, conversation_id: str, snapshot: Snapshot) -> None:
        validate_conversation_id(conversation_id)
        conv = self._conversations.get(conversation_id)
        if conv is not None:
            current = conv.snapshots.get(snapshot.name)
            if current is None or snapshot.seq >= current.seq:
                conv.snapshots[snapshot.name] = snapshot

    async def load_snapshot(self, conversation_id: str, name: str) -> Snapshot | None:
        validate_conversation_id(conversation_id)
        conv = self._conversations.get(conversation_id)
        return None if conv is None else conv.snapshots.get(name)

    async def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("event log is closed")

    @staticmethod
    def _info(cid: str, conv: _Conversation) -> ConversationInfo:
        return ConversationInfo(
            id=cid,
            event_count=len(conv.events),
            last_seq=conv.events[-1].seq if conv.events else 0,
            last_activity=conv.last_activity,
            status=conv.tally.status,
        )
