"""The active path: which messages of a thread are "the conversation" right now.

A thread's messages form a tree; the thread's **tip** (kept by the reducer and the operations,
O(1) per new message) selects one root-to-tip path. Summaries whose whole source range lies on
that path replace it with the summary message. Nothing here scans the conversation: materialising
the path is O(path length).

Cycles cannot exist (a message's parent always has a lower index), and every walk still carries a
visited guard.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress
from typing import TYPE_CHECKING

import msgspec

from convograph.hypergraph.records import Message, message_record
from convograph.hypergraph.store import MAIN_THREAD, prefix

if TYPE_CHECKING:
    from convograph.hypergraph.model import Conversation

__all__ = ["Active", "default_active", "raw_path", "walk"]

_CACHE_SIZE = 64


class Active(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The active path of one thread: ``message_ids`` in conversation order (summaries replacing
    their sources), ``tip_id`` the newest message on the branch (``None`` when empty)."""

    thread_id: str
    tip_id: str | None
    message_ids: tuple[str, ...]

    def __contains__(self, message_id: object) -> bool:
        return message_id in self.message_ids

    def __len__(self) -> int:
        return len(self.message_ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self.message_ids)


def raw_path(conv: Conversation, thread_id: str = MAIN_THREAD) -> list[int]:
    """Message indexes root -> tip of the thread's selected branch, summaries not applied."""
    s = conv._store
    tip = s.tips.get_at(thread_id, conv._version)
    path: list[int] = []
    if tip is None:
        return path
    seen: set[int] = set()
    current = tip
    while current >= 0 and current not in seen:
        seen.add(current)
        path.append(current)
        current = s.messages[current].parent
    path.reverse()
    return path


def _with_summaries(conv: Conversation, path: list[int]) -> list[int]:
    s = conv._store
    if not s.summaries_by_first:
        return path
    position = {m: i for i, m in enumerate(path)}
    out: list[int] = []
    i = 0
    while i < len(path):
        current = path[i]
        summaries = s.summaries_by_first.get(current)
        replaced = False
        if summaries:
            for summary in reversed(prefix(summaries, conv._n_messages)):
                info = s.messages[summary].summary
                assert info is not None
                end = position.get(_last_raw(conv, summary))
                if end is not None and end >= i:
                    out.append(summary)
                    i = end + 1
                    replaced = True
                    break
        if not replaced:
            out.append(current)
            i += 1
    return out


def _last_raw(conv: Conversation, summary: int) -> int:
    """The last non-summary message a summary covers (summaries of summaries unwrap)."""
    s = conv._store
    seen: set[int] = set()
    current = summary
    while current not in seen:
        seen.add(current)
        info = s.messages[current].summary
        if info is None:
            return current
        current = info[0][-1]
    return current


def default_active(conv: Conversation, thread_id: str = MAIN_THREAD) -> Active:
    """The thread's active path as selected by the conversation's state (tip and branch choices).
    O(path) to walk; O(1) when memoised, and one tuple copy when the tip just advanced by one
    message from a memoised path."""
    s = conv._store
    tip = s.tips.get_at(thread_id, conv._version)
    # The path is a function of the tip and of the summaries that exist: memoise on both, so a
    # projection run after every event does not re-walk an unchanged path.
    summaries: int = s.meta.get_at("summaries", conv._version, 0) or 0
    key = (thread_id, tip, summaries)
    cached: Active | None = s.active_cache.get(key)
    if cached is not None:
        return cached
    cache = s.active_cache
    base = None
    if tip is not None and s.messages[tip].parent >= 0:
        # The usual step: one message appended after the previous tip, whose path is cached.
        # Appending never changes which summaries apply to the prefix.
        base = cache.get((thread_id, s.messages[tip].parent, summaries))
    if base is not None and tip is not None:
        tip_id = s.messages[tip].id
        active = Active(thread_id=thread_id, tip_id=tip_id, message_ids=(*base.message_ids, tip_id))
    else:
        path = _with_summaries(conv, raw_path(conv, thread_id))
        active = Active(
            thread_id=thread_id,
            tip_id=s.messages[tip].id if tip is not None else None,
            message_ids=tuple(s.messages[i].id for i in path),
        )
    if len(cache) >= _CACHE_SIZE:
        # evict the oldest entry; a concurrent reader may have done it already
        with suppress(KeyError, RuntimeError, StopIteration):
            del cache[next(iter(cache))]
    cache[key] = active
    return active


def walk(conv: Conversation, active: Active | None = None) -> Iterator[Message]:
    """The messages of ``active`` (default: `default_active`) in order, as `Message` records.
    Stops rather than loops if an id repeats."""
    if active is None:
        active = default_active(conv)
    s = conv._store
    seen: set[str] = set()
    for message_id in active.message_ids:
        if message_id in seen:
            return
        seen.add(message_id)
        index = s.message_ids.get(message_id)
        if index is None or index >= conv._n_messages:
            raise KeyError(f"no message {message_id!r} in this conversation version")
        yield message_record(conv, s.messages[index])
