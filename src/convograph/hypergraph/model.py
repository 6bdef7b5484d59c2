"""The hypergraph's immutable `Conversation` value (seed 000 "Hypergraph model"): one version of a
lineage's `convograph.hypergraph.store._Store`.

Every ``reduce`` returns a new `Conversation` and every older one keeps answering exactly as before
(property-tested in ``tests/test_hypergraph_properties.py``); see `convograph.hypergraph.store` for
the tiers and how versions share one store. This module also re-exports the store's public names.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from convograph.hypergraph.active import default_active
from convograph.hypergraph.store import (
    BLOCK_HEAD,
    MAIN_THREAD,
    PAGE,
    STREAM_RUN_ID,
    Diagnostic,
    Paged,
    RelayDecision,
    RunStatus,
    SpawnKind,
    SummaryInfo,
    UsageTotals,
    ViewOptions,
    _Store,
    prefix,
)
from convograph.hypergraph.tiers import iter_blocks, iter_chunks, iter_messages, thread_ids

__all__ = [
    "BLOCK_HEAD",
    "MAIN_THREAD",
    "PAGE",
    "STREAM_RUN_ID",
    "Conversation",
    "Diagnostic",
    "Paged",
    "RelayDecision",
    "RunStatus",
    "SpawnKind",
    "SummaryInfo",
    "UsageTotals",
    "ViewOptions",
    "create_conversation",
    "prefix",
    "snapshot_of",
]


class Conversation:
    """One immutable version of a conversation hypergraph.

    Read it with `convograph.hypergraph.queries` and `default_active`; change it only through
    `reduce_conversation` and the operations, which return new values. ``view`` holds the selective
    view options (`with_view`), which do not change the data.
    """

    __slots__ = ("_n_blocks", "_n_chunks", "_n_messages", "_store", "_version", "view")

    def __init__(
        self,
        store: _Store,
        version: int,
        n_chunks: int,
        n_blocks: int,
        n_messages: int,
        view: ViewOptions,
    ) -> None:
        self._store = store
        self._version = version
        self._n_chunks = n_chunks
        self._n_blocks = n_blocks
        self._n_messages = n_messages
        self.view = view

    @property
    def version(self) -> int:
        """Number of log entries (events and operations) applied to reach this version."""
        return self._version

    @property
    def chunk_count(self) -> int:
        return self._n_chunks

    @property
    def block_count(self) -> int:
        return self._n_blocks

    @property
    def message_count(self) -> int:
        return self._n_messages

    def with_view(self, view: ViewOptions) -> Conversation:
        """The same version with other view options. O(1)."""
        return Conversation(
            self._store, self._version, self._n_chunks, self._n_blocks, self._n_messages, view
        )

    def to_jsonable(self) -> dict[str, Any]:
        """Plain JSON data (camelCase keys): threads with their active paths, then every message,
        block and chunk of this version. O(n); used by `convograph.to_jsonable`."""
        threads = {}
        for thread_id in thread_ids(self):
            active = default_active(self, thread_id)
            threads[thread_id] = {"tipId": active.tip_id, "activeMessageIds": list(active.message_ids)}
        everything = {
            "version": self._version,
            "threads": threads,
            "messages": list(iter_messages(self)),
            "blocks": list(iter_blocks(self)),
            "chunks": list(iter_chunks(self)),
        }
        data: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(everything))
        return data

    def __eq__(self, other: object) -> bool:
        """Same threads, active paths, messages, blocks and chunks (the version number and the
        view options do not count). O(1) for the same version of one lineage, else O(n)."""
        if not isinstance(other, Conversation):
            return NotImplemented
        if self._store is other._store and self._version == other._version:
            return True
        mine, theirs = self.to_jsonable(), other.to_jsonable()
        del mine["version"], theirs["version"]
        return mine == theirs

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Conversation(version={self._version}, chunks={self._n_chunks}, "
            f"blocks={self._n_blocks}, messages={self._n_messages})"
        )


DEFAULT_VIEW: Final = ViewOptions()


def create_conversation(view: ViewOptions | None = None) -> Conversation:
    """An empty conversation."""
    return Conversation(_Store(), 0, 0, 0, 0, view if view is not None else DEFAULT_VIEW)


def snapshot_of(store: _Store, view: ViewOptions) -> Conversation:
    """The head of ``store`` as a `Conversation`."""
    return Conversation(store, store.version, store.n_chunks, store.n_blocks, store.n_messages, view)
