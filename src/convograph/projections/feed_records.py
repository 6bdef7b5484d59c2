"""Records of a hypergraph feed: `FedChunk` (what the feeder reads of a chunk), `BlockText` (a
text block's content) and `RunStatuses` (the statuses of one conversation version). A NamedTuple,
a msgspec Struct and a dict subclass, kept apart from the compiled feeder modules (mypyc compiles
none of them as a native class).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from convograph.projections.view import Status

__all__ = ["BlockText", "FedChunk", "RunStatuses"]


def _queries() -> Any:
    from convograph.hypergraph import queries

    return queries


class FedChunk(NamedTuple):
    """What the feeder reads of a chunk (the one-shot path builds one only for a chunk that waits
    for its spawner; the incremental projector passes `queries.Chunk` records)."""

    block_id: str
    event: Any
    kind: str
    run_id: str


class BlockText(msgspec.Struct, frozen=True, gc=False):
    """A text or reasoning block's content as a one-shot build places it (`ThreadBuilder.place`
    reads ``content``, ``signature`` and ``redacted_data``, as of a node): its whole text, newest
    signature and first chunk's redacted data. A one-shot build continues no block, so it needs
    no node (untracked by the cyclic GC)."""

    content: str
    signature: str | None
    redacted_data: str | None


class RunStatuses(dict[str, Status]):
    """Run id -> the hypergraph's status of that run in one conversation version (``aborted`` shows
    as ``error``), computed on first access (`ConversationFeeder.status_of` for a fixed version).

    On the first access the runs with a lifecycle are entered in bulk (`queries.own_run_statuses`:
    one dict copy, no Python call per run), and so are the runs without one whose parent has one
    (`queries.run_parents`: a provider run takes its agent's), so asking for either is then a
    C-level dict hit; any other run walks. O(runs with a status) once; O(1) per run asked, beyond
    the walks. (A builder that never asks, `project_messages`' top-level build, pays nothing.)"""

    def __init__(self, conversation: Any) -> None:
        super().__init__()
        self.conversation = conversation
        self.step = _queries().run_status_step
        self.filled = False

    def _fill(self) -> None:
        self.filled = True
        q = _queries()
        own = q.own_run_statuses(self.conversation)
        self.update(own)
        if "aborted" in own.values():  # (shown as ``error``; `close_stream` leaves it, rarely)
            for run_id, status in own.items():
                if status == "aborted":
                    self[run_id] = "error"
        # and, in one pass, the runs without one whose parent has one (`__missing__`'s first step)
        get = self.get
        inherited = {
            run: status
            for run, parent in q.run_parents(self.conversation).items()
            if (status := get(parent)) is not None and run not in own
        }
        self.update(inherited)

    def __missing__(self, run_id: str) -> Status:
        """Once the runs with a lifecycle are entered, ``run_id`` has none of its own: its parent's
        status when memoised, else `queries.run_status`'s walk up the spawn links, stopped at the
        first run already known (its answer is that walk's from there: a walk that came back to
        this chain would be a cycle, found as such from either end); every run walked is memoised."""
        if not self.filled:
            self._fill()
            known = self.get(run_id)
            if known is not None:
                return known
        step = self.step
        conversation = self.conversation
        found, parent = step(conversation, run_id)
        if found is None and parent is not None:
            known = self.get(parent)
            if known is not None:  # the usual case: a provider run below its agent
                self[run_id] = known
                return known
        chain = [run_id]
        seen = {run_id}
        current = run_id
        while True:
            if found is not None:
                break
            if parent is None or parent in seen:  # a root without lifecycle, or a cycle
                found = "streaming"
                break
            known = self.get(parent)
            if known is not None:
                found = known
                break
            chain.append(parent)
            seen.add(parent)
            current = parent
            found, parent = step(conversation, current)
        status: Status = "error" if found == "aborted" else found
        for run in chain:
            self[run] = status
        return status
