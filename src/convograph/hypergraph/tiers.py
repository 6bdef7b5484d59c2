"""Queries over the tiers of one `Conversation` version: chunks, blocks and messages by id, the
message tree (parents, children, siblings, summaries) and threads. O(answer size) plus O(log n) lookups unless stated; the ``iter_*`` helpers scan.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from convograph.hypergraph.records import (
    Block,
    Chunk,
    Message,
    block_record,
    chunk_id,
    chunk_index,
    chunk_record,
    message_record,
    stored_block,
    stored_message,
)
from convograph.hypergraph.store import (
    EMPTY,
    MAIN_THREAD,
    prefix,
)

if TYPE_CHECKING:
    from convograph.hypergraph.model import Conversation

# --- tiers ------------------------------------------------------------------------------------------


def get_chunk(conv: Conversation, cid: str) -> Chunk:
    return chunk_record(conv, chunk_index(conv, cid))


def chunk_message(conv: Conversation, seq: int) -> tuple[str, str, str | None]:
    """``(message id, thread id, parent message id or None)`` of the chunk with arrival number
    ``seq``. O(1): no record (`get_block` and `get_message` list a block's chunk ids and a
    message's block ids, O(their size): per chunk of a long stream that was quadratic)."""
    s = conv._store
    if not 0 < seq <= conv._n_chunks:
        raise KeyError(f"no chunk {chunk_id(seq - 1)!r} in this conversation version")
    message = s.messages[s.blocks[s.chunk_block[seq - 1]].message]
    parent = s.messages[message.parent].id if message.parent >= 0 else None
    return message.id, message.thread, parent


def get_block(conv: Conversation, block_id: str) -> Block:
    return block_record(conv, stored_block(conv, block_id))


def get_message(conv: Conversation, message_id: str) -> Message:
    return message_record(conv, stored_message(conv, message_id))


def chunks_of(conv: Conversation, block_id: str) -> tuple[Chunk, ...]:
    """The block's chunks in arrival order."""
    block = stored_block(conv, block_id)
    return tuple(chunk_record(conv, i) for i in prefix(block.chunks, conv._n_chunks))


def blocks_of(conv: Conversation, message_id: str) -> tuple[Block, ...]:
    """The message's blocks in arrival order (a summary has one block holding its text)."""
    message = stored_message(conv, message_id)
    blocks = conv._store.blocks
    return tuple(block_record(conv, blocks[i]) for i in prefix(message.blocks, conv._n_blocks))


class BlockRow(NamedTuple):
    """A block as plain values, for bulk readers (one-shot projections): no record, no chunk id
    strings. ``first_seq`` is the arrival number of its first chunk; ``chunk_count`` how many it has."""

    id: str
    kind: str
    run_id: str
    first_seq: int
    chunk_count: int


def block_rows(conv: Conversation, message_id: str) -> tuple[BlockRow, ...]:
    """`blocks_of` as `BlockRow`s (same blocks, same order). O(blocks of the message)."""
    message = stored_message(conv, message_id)
    blocks = conv._store.blocks
    n_chunks = conv._n_chunks
    out: list[BlockRow] = []
    for i in prefix(message.blocks, conv._n_blocks):
        block = blocks[i]
        chunks = prefix(block.chunks, n_chunks)
        out.append(BlockRow(block.id, block.kind, block.run, chunks[0] + 1, len(chunks)))
    return tuple(out)


def chunk_seqs(conv: Conversation, block_id: str) -> tuple[int, ...]:
    """The arrival numbers (``Chunk.seq``) of the block's chunks, in order. O(chunks of the block)."""
    block = stored_block(conv, block_id)
    return tuple(i + 1 for i in prefix(block.chunks, conv._n_chunks))


def chunk_event(conv: Conversation, seq: int) -> Any:
    """The event of the chunk with arrival number ``seq`` (``get_chunk(conv, chunk_id(seq - 1)).event``)
    without building the record. O(1)."""
    index = seq - 1
    if not 0 <= index < conv._n_chunks:
        raise KeyError(f"no chunk with seq {seq} in this conversation version")
    return conv._store.events[index]


def block_text(conv: Conversation, block_id: str) -> str:
    """The joined ``content`` of a text, reasoning or summary block (``""`` for other kinds), or the
    joined ``chunk`` of a repl_progress block. O(chunks of the block)."""
    block = stored_block(conv, block_id)
    events: list[Any] = [conv._store.events[i] for i in prefix(block.chunks, conv._n_chunks)]
    if block.kind in ("text", "reasoning", "summary"):
        return "".join(e.content for e in events)
    if block.kind == "repl_progress":
        return "".join(e.chunk for e in events)
    return ""


def block_of(conv: Conversation, cid: str) -> Block:
    s = conv._store
    return block_record(conv, s.blocks[s.chunk_block[chunk_index(conv, cid)]])


def message_of(conv: Conversation, block_id: str) -> Message:
    return message_record(conv, conv._store.messages[stored_block(conv, block_id).message])


def parent_of(conv: Conversation, message_id: str) -> Message | None:
    message = stored_message(conv, message_id)
    if message.parent < 0:
        return None
    return message_record(conv, conv._store.messages[message.parent])


def children_of(conv: Conversation, message_id: str) -> tuple[Message, ...]:
    """Messages that continue ``message_id`` (more than one = a branch point), oldest first."""
    message = stored_message(conv, message_id)
    messages = conv._store.messages
    return tuple(message_record(conv, messages[i]) for i in prefix(message.children, conv._n_messages))


def siblings_of(conv: Conversation, message_id: str) -> tuple[Message, ...]:
    """Every alternative at ``message_id``'s position (itself included), oldest first. Roots of a
    thread are siblings of each other."""
    message = stored_message(conv, message_id)
    s = conv._store
    if message.role == "summary":
        return (message_record(conv, message),)
    indexes: Sequence[int]
    if message.parent >= 0:
        indexes = prefix(s.messages[message.parent].children, conv._n_messages)
    else:
        thread = s.threads[message.thread]
        indexes = [
            i
            for i in prefix(thread.messages, conv._n_messages)
            if s.messages[i].parent < 0 and s.messages[i].role != "summary"
        ]
    return tuple(message_record(conv, s.messages[i]) for i in indexes)


def sources_of(conv: Conversation, summary_id: str) -> tuple[Message, ...]:
    """The messages a summary replaces ([] for a non-summary)."""
    message = stored_message(conv, summary_id)
    if message.summary is None:
        return ()
    messages = conv._store.messages
    return tuple(message_record(conv, messages[i]) for i in message.summary[0])


def summaries_of(conv: Conversation, message_id: str) -> tuple[Message, ...]:
    """Every summary that lists ``message_id`` among its sources, oldest first."""
    message = stored_message(conv, message_id)
    s = conv._store
    found = prefix(s.summaries_of.get(message.index, EMPTY), conv._n_messages)
    return tuple(message_record(conv, s.messages[i]) for i in found)


def thread_ids(conv: Conversation) -> tuple[str, ...]:
    """Threads that have messages at this version, ``"main"`` first. O(threads)."""
    s = conv._store
    out = [
        t.id
        for t in tuple(s.threads.values())
        if t.messages and t.messages[0] < conv._n_messages and t.id != MAIN_THREAD
    ]
    main = s.threads.get(MAIN_THREAD)
    if main is not None and main.messages and main.messages[0] < conv._n_messages:
        out.insert(0, MAIN_THREAD)
    return tuple(out)


def thread_messages(conv: Conversation, thread_id: str) -> tuple[Message, ...]:
    """Every message of a thread (all branches, summaries included) in creation order."""
    thread = conv._store.threads.get(thread_id)
    if thread is None:
        return ()
    messages = conv._store.messages
    return tuple(message_record(conv, messages[i]) for i in prefix(thread.messages, conv._n_messages))


def iter_chunks(conv: Conversation) -> Iterator[Chunk]:
    """All chunks in arrival order. O(n)."""
    for i in range(conv._n_chunks):
        yield chunk_record(conv, i)


def iter_blocks(conv: Conversation) -> Iterator[Block]:
    """All blocks in creation order. O(n)."""
    blocks = conv._store.blocks
    for i in range(conv._n_blocks):
        yield block_record(conv, blocks[i])


def iter_messages(conv: Conversation) -> Iterator[Message]:
    """All messages in creation order. O(n)."""
    messages = conv._store.messages
    for i in range(conv._n_messages):
        yield message_record(conv, messages[i])
