"""Chat-product operations on a conversation: append, edit, regenerate, switch branch, summarize,
close the stream. Each returns a new `Conversation`; the input and every older version are unchanged.

Operations are log entries like events (so a lineage replays them exactly). Each public function
validates against the given version and raises `OperationError` before anything changes; the entry
it commits holds the resolved decision, so replay never re-decides.

Costs (n = conversation size, p = active path length): append O(1); edit, regenerate, switch and
summarize O(p + blocks of the messages inspected); close_stream O(threads + unresolved parents).
On an older version each also pays one O(n) lineage fork (see `model`).

Fork rule: edit and regenerate create a sibling of the message, so the new branch starts after the
message's parent, which must be a clean turn (`queries.message_health`): the fork point moves up
past errored, aborted and unresolved-tool-call turns.
"""

from __future__ import annotations

from array import array
from typing import Any

import msgspec

from convograph.events.types import ContentPart, Text, User
from convograph.hypergraph.active import default_active, raw_path
from convograph.hypergraph.model import Conversation
from convograph.hypergraph.records import Message, message_record, stored_message
from convograph.hypergraph.reducer import commit, reduce_conversation
from convograph.hypergraph.store import (
    MAIN_THREAD,
    Diagnostic,
    SummaryInfo,
    _Message,
    _Run,
    _Store,
    link_at,
    prefix,
)
from convograph.hypergraph.tiers import siblings_of
from convograph.hypergraph.views import message_health
from convograph.hypergraph.writer import add_block, new_message, set_tip

__all__ = [
    "OperationError",
    "append_user_message",
    "close_stream",
    "edit_message",
    "fork_point",
    "list_siblings",
    "regenerate",
    "summarize_range",
    "switch_branch",
]


class OperationError(ValueError):
    """An operation that cannot apply to this conversation version; nothing was changed."""


# --- log entries ------------------------------------------------------------------------------------


def _new_run(s: _Store, run_id: str, thread: str) -> _Run:
    run = _Run(run_id, thread, None)
    run.epoch = s.threads[thread].epoch
    s.runs[run_id] = run
    s.status.set(run_id, "complete", s.version + 1)
    return run


class _NewBranchMessage(msgspec.Struct, frozen=True):
    """Edit: a new message (with one chunk) after ``parent`` (-1: a new root) in ``thread``."""

    thread: str
    parent: int
    role: str
    run_id: str
    event: User | Text

    def apply(self, s: _Store) -> bool:
        thread = s.threads[self.thread]
        thread.epoch += 1
        parent = s.messages[self.parent] if self.parent >= 0 else None
        message = new_message(s, thread, parent, self.role)
        if parent is not None:
            s.chosen.set(parent.index, message.index, s.version + 1)
        run = _new_run(s, self.run_id, self.thread)
        key = f"{self.run_id}:{self.event.type}"
        add_block(s, run, key, self.event.type, self.event, s.n_chunks, message)
        run.ended = True
        thread.open = None
        thread.after_result = False
        return True


class _Placeholder(msgspec.Struct, frozen=True):
    """Regenerate: an empty assistant message after ``parent``, open for the next run's blocks."""

    thread: str
    parent: int

    def apply(self, s: _Store) -> bool:
        thread = s.threads[self.thread]
        thread.epoch += 1
        parent = s.messages[self.parent] if self.parent >= 0 else None
        message = new_message(s, thread, parent, "assistant")
        if parent is not None:
            s.chosen.set(parent.index, message.index, s.version + 1)
        thread.open = message
        thread.after_result = False
        return True


class _Switch(msgspec.Struct, frozen=True):
    """Switch branch: make ``path`` (root -> new tip) the thread's selected branch."""

    thread: str
    path: tuple[int, ...]

    def apply(self, s: _Store) -> bool:
        stamp = s.version + 1
        for parent, child in zip(self.path, self.path[1:], strict=False):
            if s.chosen.get_at(parent, s.version) != child:
                s.chosen.set(parent, child, stamp)
        thread = s.threads[self.thread]
        thread.epoch += 1
        set_tip(s, thread, s.messages[self.path[-1]])
        thread.open = None
        thread.after_result = False
        return True


class _Summarize(msgspec.Struct, frozen=True):
    thread: str
    sources: tuple[int, ...]
    first_raw: int
    parent: int
    run_id: str
    info: SummaryInfo

    def apply(self, s: _Store) -> bool:
        thread = s.threads[self.thread]
        index = s.n_messages
        number = _summary_number(s)
        parent = s.messages[self.parent] if self.parent >= 0 else None
        message_id = f"summary:{number}"
        message = _Message(
            index, message_id, self.thread, "summary", self.parent, parent.depth + 1 if parent else 0
        )
        message.summary = (self.sources, self.info)
        s.messages.append(message)
        s.n_messages = index + 1
        s.message_ids[message_id] = index
        thread.messages.append(index)
        s.summaries_by_first.setdefault(self.first_raw, array("q")).append(index)
        for source in self.sources:
            s.summaries_of.setdefault(source, array("q")).append(index)
        run = _new_run(s, self.run_id, self.thread)
        event = Text(run_id=self.run_id, id=message_id, content=self.info.text)
        add_block(s, run, f"{self.run_id}:{message_id}", "summary", event, s.n_chunks, message)
        run.ended = True
        s.meta.set("summaries", _summary_number(s), s.version + 1)
        return True


def _summary_number(s: _Store) -> int:
    count: int = s.meta.get_at("summaries", s.version, 0) or 0
    return count + 1


class _CloseStream(msgspec.Struct, frozen=True):
    def apply(self, s: _Store) -> bool:
        if s.closed:
            return False
        stamp = s.version + 1
        version = s.version
        s.closed = True
        s.meta.set("closed", True, stamp)
        # Close every run that is still streaming, explicitly: lifecycle runs become aborted,
        # lifecycle-less runs with no ancestor status complete. (O(runs), once per stream end.)
        status = s.status
        for run_id in s.runs:
            current = status.get_at(run_id, version)
            if current == "streaming":
                status.set(run_id, "aborted", stamp)
                s.closed_runs[run_id] = "streaming"
            elif current is None and _inherited(s, run_id, version) is None:
                status.set(run_id, "complete", stamp)
                s.closed_runs[run_id] = None
        for thread in s.threads.values():
            thread.open = None
            thread.after_result = False
        for parent_id, waiting in s.pending.items():
            s.diagnostics.append(
                Diagnostic(
                    code="unresolved_parent",
                    subject=parent_id,
                    message=(
                        f"parent {parent_id!r} of run(s) {', '.join(waiting)} never arrived; "
                        "they stay as separate threads"
                    ),
                ),
                stamp,
            )
        return True


def _inherited(s: _Store, run_id: str, version: int) -> str | None:
    """The nearest ancestor's explicit status, or None. Cycle-guarded."""
    seen = {run_id}
    current = link_at(s, run_id, version)[0]
    while current is not None and current not in seen:
        seen.add(current)
        found = s.status.get_at(current, version)
        if found is not None:
            return found
        current = link_at(s, current, version)[0]
    return None


# --- helpers ----------------------------------------------------------------------------------------


def fork_point(conv: Conversation, message_id: str) -> Message | None:
    """Where a sibling of ``message_id`` starts: its parent, moved up past unclean turns
    (errored, aborted, or with an unresolved tool call). None: a new root. O(path)."""
    s = conv._store
    current = stored_message(conv, message_id).parent
    seen: set[int] = set()
    while current >= 0 and current not in seen:
        seen.add(current)
        candidate = s.messages[current]
        if candidate.role != "assistant" or message_health(conv, candidate.id).clean:
            return message_record(conv, candidate)
        current = candidate.parent
    return None


def _fork_parent_index(conv: Conversation, message_id: str) -> int:
    point = fork_point(conv, message_id)
    return -1 if point is None else conv._store.message_ids[point.id]


def _editable(conv: Conversation, message_id: str) -> Any:
    message = stored_message(conv, message_id)
    if message.role == "summary":
        raise OperationError(f"message {message_id!r} is a summary; summarize again instead of editing it")
    return message


# --- public operations ------------------------------------------------------------------------------


def append_user_message(
    conv: Conversation,
    content: str | list[ContentPart],
    *,
    run_id: str | None = None,
    event_id: str | None = None,
) -> Conversation:
    """A user message at the main thread's tip (the same as reducing a ``user`` event). O(1)."""
    user = User(
        run_id=run_id if run_id is not None else f"user-{conv.version + 1}",
        content=content,
        event_id=event_id,
    )
    return reduce_conversation(conv, user)


def edit_message(
    conv: Conversation,
    message_id: str,
    content: str | list[ContentPart],
    *,
    run_id: str | None = None,
) -> Conversation:
    """A new sibling of ``message_id`` holding ``content`` (the original stays on its branch); the
    new branch becomes active. A user message gets a ``user`` chunk, an assistant message a ``text``
    chunk. The next run's reply continues the new branch. O(path)."""
    message = _editable(conv, message_id)
    if message.role == "assistant" and not isinstance(content, str):
        raise OperationError("an assistant message can only be edited to text (a str)")
    parent = _fork_parent_index(conv, message_id)
    rid = run_id if run_id is not None else f"edit-{conv.version + 1}"
    existing = conv._store.runs.get(rid)
    if existing is not None and 0 <= existing.first_chunk < conv._n_chunks:
        raise OperationError(f"run id {rid!r} is already used in this conversation")
    event: User | Text
    if message.role == "user":
        event = User(run_id=rid, content=content)
    else:
        event = Text(run_id=rid, id=f"{rid}:text", content=content)  # type: ignore[arg-type]
    return commit(conv, _NewBranchMessage(message.thread, parent, message.role, rid, event))


def regenerate(conv: Conversation, message_id: str) -> Conversation:
    """An empty sibling assistant turn of ``message_id``, made active and open: the next run's
    blocks fill it. The original stays on its branch. O(path)."""
    message = _editable(conv, message_id)
    if message.role != "assistant":
        raise OperationError(
            f"message {message_id!r} is a {message.role} message; only assistant turns regenerate"
        )
    return commit(conv, _Placeholder(message.thread, _fork_parent_index(conv, message_id)))


def list_siblings(conv: Conversation, message_id: str) -> tuple[Message, ...]:
    """The alternatives at ``message_id``'s position (itself included), oldest first. O(siblings)."""
    return siblings_of(conv, message_id)


def switch_branch(conv: Conversation, message_id: str) -> Conversation:
    """Select the branch through ``message_id``: the path continues below it along the choice made
    last time (else the newest child). The choice is part of the conversation state. O(path)."""
    message = stored_message(conv, message_id)
    if message.role == "summary":
        raise OperationError(f"message {message_id!r} is a summary, not a branch")
    s = conv._store
    path: list[int] = []
    seen: set[int] = set()
    current = message.index
    while current >= 0 and current not in seen:  # up to the root
        seen.add(current)
        path.append(current)
        current = s.messages[current].parent
    path.reverse()
    current = message.index
    while True:  # down along remembered choices
        children = prefix(s.messages[current].children, conv._n_messages)
        if not children:
            break
        chosen = s.chosen.get_at(current, conv._version)
        following = chosen if chosen is not None and chosen in children else children[-1]
        if following in seen:
            break
        seen.add(following)
        path.append(following)
        current = following
    if tuple(raw_path(conv, message.thread)) == tuple(path):
        return conv
    return commit(conv, _Switch(message.thread, tuple(path)))


def summarize_range(
    conv: Conversation,
    first_id: str,
    last_id: str,
    text: str,
    *,
    model: str | None = None,
    created_at: str | None = None,
    thread_id: str = MAIN_THREAD,
) -> Conversation:
    """Replace the active messages ``first_id``..``last_id`` (inclusive, in path order) by a summary
    message holding ``text`` as its own chunk and block, with provenance (`SummaryInfo`: sources,
    model, time). The sources stay in the graph (a ``summary`` hyperedge links them). O(path)."""
    active = default_active(conv, thread_id).message_ids
    try:
        start = active.index(first_id)
        end = active.index(last_id)
    except ValueError:
        raise OperationError(
            f"both {first_id!r} and {last_id!r} must be on the active path of thread {thread_id!r}"
        ) from None
    if end < start:
        raise OperationError(f"{first_id!r} comes after {last_id!r} on the active path")
    s = conv._store
    sources = tuple(s.message_ids[mid] for mid in active[start : end + 1])
    first_raw = sources[0]
    seen: set[int] = set()
    while s.messages[first_raw].summary is not None and first_raw not in seen:
        seen.add(first_raw)
        first_raw = s.messages[first_raw].summary[0][0]  # type: ignore[index]
    info = SummaryInfo(
        source_ids=tuple(active[start : end + 1]), text=text, model=model, created_at=created_at
    )
    run_id = f"summary-{conv.version + 1}"
    return commit(conv, _Summarize(thread_id, sources, first_raw, s.messages[first_raw].parent, run_id, info))


def close_stream(conv: Conversation) -> Conversation:
    """End of stream: close every open message; runs still streaming become ``aborted`` (with a
    lifecycle) or ``complete`` (without); unresolved parents are reported in
    `queries.diagnostics`. A later event reopens the stream; a closed run that sends again streams
    again. O(runs + threads + unresolved)."""
    return commit(conv, _CloseStream())
