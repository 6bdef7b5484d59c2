"""Records of the hypergraph's tiers (`Chunk`, `Block`, `Message`) and of runs, spawns, tool calls
and relays, as the queries return them; the id helpers and the record builders over the store.

Ids: chunks ``chunk:<n>`` (``n`` = global arrival number, also ``Chunk.seq``), blocks
``block:<key>`` / ``block:<key>#<k>``, messages ``msg:<n>`` (main thread) / ``msg:<thread>:<n>``,
summaries ``summary:<n>``. Unknown ids (or ids that do not exist yet at this version) raise
``KeyError`` naming the id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import msgspec

from convograph.events.types import Event
from convograph.hypergraph.store import (
    RelayDecision,
    RunStatus,
    SummaryInfo,
    _Block,
    _Message,
    prefix,
)

if TYPE_CHECKING:
    from convograph.hypergraph.model import Conversation


# --- records ----------------------------------------------------------------------------------------


class Chunk(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One event as stored. ``seq`` is the global arrival number (1-based) in this conversation."""

    id: str
    seq: int
    kind: str
    run_id: str
    block_id: str
    event: Event


class Block(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Consecutive chunks of one run with one block key. ``kind`` is the first chunk's event type,
    or ``"tool_error"`` for a tool exception reported as an ``error`` event."""

    id: str
    key: str
    kind: str
    run_id: str
    message_id: str
    chunk_ids: tuple[str, ...]
    first_seq: int
    last_seq: int


class Message(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One turn of one thread. ``role`` is ``user``, ``assistant`` or ``summary``; ``parent_id`` is
    the previous message on its branch (``None`` for the first)."""

    id: str
    thread_id: str
    role: str
    parent_id: str | None
    depth: int
    block_ids: tuple[str, ...]
    summary: SummaryInfo | None = None


class SpawnInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A ``spawn`` hyperedge: ``trigger_block_id`` started ``run_id``, whose first chunk is
    ``invocation_chunk_id``. ``thread_id`` is where the spawned run's messages live: the trigger's
    own thread for ``call``/``reply`` spawns (inline), a nested thread for ``subagent``/``repl``
    spawns and for runs whose parent arrived after them (render those as branches)."""

    id: str
    kind: str
    trigger_block_id: str
    trigger_run_id: str
    run_id: str
    invocation_chunk_id: str
    thread_id: str


class RunInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    id: str
    thread_id: str
    parent_id: str | None
    """``parentId`` as sent on the run's first event."""
    parent_run_id: str | None
    """The run this run belongs to (``call``) or was spawned by (``subagent``/``repl``)."""
    status: RunStatus
    has_lifecycle: bool
    spawn: SpawnInfo | None
    first_seq: int
    agent_id: str | None


class ToolCallInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A tool call with everything attached to it, whichever order it arrived in.

    ``status``: ``pending`` (no result yet), ``complete``, ``error`` (an ``error`` output or a tool
    exception) or ``denied`` (the relay was refused). ``synthesized`` is True when no ``tool_call``
    event arrived (a denied call): ``name``/``input`` then come from the relay or the result.
    """

    call_id: str
    name: str
    input: Any
    status: Literal["pending", "complete", "error", "denied"]
    synthesized: bool
    run_id: str
    call_block_id: str | None
    result_block_id: str | None
    output: Any = None
    error: str | None = None
    relay_id: str | None = None
    progress_chunk_ids: tuple[str, ...] = ()


class RelayInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A permission relay. ``status``: ``pending``, ``approved``, ``denied``, or ``resolved`` (the
    call went ahead or got a result without a recorded decision)."""

    relay_id: str
    tool_call_id: str
    tool: str
    params: dict[str, Any]
    run_id: str
    block_id: str
    status: Literal["pending", "approved", "denied", "resolved"]
    decision: RelayDecision | None


class MessageHealth(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Whether a branch may start after this message (``clean``): no run-level error, no errored
    or aborted run, and no tool call without a result."""

    status: RunStatus
    unresolved_call_ids: tuple[str, ...]
    has_error: bool

    @property
    def clean(self) -> bool:
        return not self.has_error and not self.unresolved_call_ids and self.status not in ("error", "aborted")


# --- id helpers -------------------------------------------------------------------------------------


def chunk_id(index: int) -> str:
    return f"chunk:{index + 1}"


def chunk_index(conv: Conversation, cid: str) -> int:
    if cid.startswith("chunk:"):
        try:
            index = int(cid[6:]) - 1
        except ValueError:
            index = -1
        if 0 <= index < conv._n_chunks:
            return index
    raise KeyError(f"no chunk {cid!r} in this conversation version")


def stored_block(conv: Conversation, block_id: str) -> _Block:
    index = conv._store.block_ids.get(block_id)
    if index is None or index >= conv._n_blocks:
        raise KeyError(f"no block {block_id!r} in this conversation version")
    return conv._store.blocks[index]


def stored_message(conv: Conversation, message_id: str) -> _Message:
    index = conv._store.message_ids.get(message_id)
    if index is None or index >= conv._n_messages:
        raise KeyError(f"no message {message_id!r} in this conversation version")
    return conv._store.messages[index]


def chunk_record(conv: Conversation, index: int) -> Chunk:
    s = conv._store
    event = s.events[index]
    block = s.blocks[s.chunk_block[index]]
    return Chunk(
        id=chunk_id(index), seq=index + 1, kind=event.type, run_id=block.run, block_id=block.id, event=event
    )


def block_record(conv: Conversation, block: _Block) -> Block:
    chunks = prefix(block.chunks, conv._n_chunks)
    return Block(
        id=block.id,
        key=block.key,
        kind=block.kind,
        run_id=block.run,
        message_id=conv._store.messages[block.message].id,
        chunk_ids=tuple(chunk_id(i) for i in chunks),
        first_seq=chunks[0] + 1,
        last_seq=chunks[-1] + 1,
    )


def message_record(conv: Conversation, message: _Message) -> Message:
    s = conv._store
    return Message(
        id=message.id,
        thread_id=message.thread,
        role=message.role,
        parent_id=s.messages[message.parent].id if message.parent >= 0 else None,
        depth=message.depth,
        block_ids=tuple(s.blocks[i].id for i in prefix(message.blocks, conv._n_blocks)),
        summary=message.summary[1] if message.summary is not None else None,
    )
