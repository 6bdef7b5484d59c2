"""Typed hyperedges, derived on demand from the tier indexes (the node -> edge index).

The reducer never allocates edge objects: the tiers (chunk -> block -> message), the per-run chunk
and block lists, the message tree, the summary records and the spawn links *are* the edges. This
module renders them as upstream-shaped `HyperEdge` values:

| type       | id                              | roles                                     |
|------------|---------------------------------|-------------------------------------------|
| `block`    | ``be:<block>``                  | ``part`` (chunks), ``whole`` [block]       |
| `message`  | ``me:<message>``                | ``part`` (blocks), ``whole`` [message]     |
| `sequence` | ``seq:chunk:<a>:<b>``           | consecutive chunks of one run              |
|            | ``seq:block:<a>:<b>``           | consecutive blocks of one run              |
|            | ``seq:msg:<a>:<b>``             | message ``b`` continues ``a`` (tree edge)  |
| `summary`  | ``sum:<summary>``               | ``source`` (messages), ``result`` [summary]|
| `spawn`    | ``spawn:<block>:<chunk>``       | ``trigger`` [block], ``invocation`` [chunk]|

`edges_of` is O(degree of the node + sizes of the role lists returned); `iter_edges` is O(n).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Iterator
from typing import Literal

import msgspec

from convograph.hypergraph.model import Conversation
from convograph.hypergraph.records import chunk_id, chunk_index, stored_block, stored_message
from convograph.hypergraph.runs import run_chunk_indexes, spawn_record
from convograph.hypergraph.store import EMPTY, Ints, _Block, _Message, link_at, prefix, spawns_at

__all__ = ["EdgeType", "HyperEdge", "edges_of", "find_edges", "iter_edges"]

EdgeType = Literal["sequence", "block", "message", "summary", "spawn"]


class HyperEdge(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    id: str
    type: EdgeType
    roles: dict[str, tuple[str, ...]]


def _block_edge(conv: Conversation, block: _Block) -> HyperEdge:
    chunks = prefix(block.chunks, conv._n_chunks)
    return HyperEdge(
        id=f"be:{block.id}",
        type="block",
        roles={"part": tuple(chunk_id(i) for i in chunks), "whole": (block.id,)},
    )


def _message_edge(conv: Conversation, message: _Message) -> HyperEdge:
    blocks = conv._store.blocks
    return HyperEdge(
        id=f"me:{message.id}",
        type="message",
        roles={
            "part": tuple(blocks[i].id for i in prefix(message.blocks, conv._n_blocks)),
            "whole": (message.id,),
        },
    )


def _seq(level: str, a: str, b: str) -> HyperEdge:
    return HyperEdge(
        id=f"seq:{level}:{a}:{b}", type="sequence", roles={"predecessor": (a,), "successor": (b,)}
    )


def _summary_edge(conv: Conversation, summary: _Message) -> HyperEdge:
    assert summary.summary is not None
    messages = conv._store.messages
    return HyperEdge(
        id=f"sum:{summary.id}",
        type="summary",
        roles={"source": tuple(messages[i].id for i in summary.summary[0]), "result": (summary.id,)},
    )


def _spawn_edges_of_block(conv: Conversation, block: _Block) -> list[HyperEdge]:
    out = []
    for spawn in spawns_at(conv._store, block.index, conv._version):
        info = spawn_record(conv, spawn)
        out.append(
            HyperEdge(
                id=info.id,
                type="spawn",
                roles={"trigger": (info.trigger_block_id,), "invocation": (info.invocation_chunk_id,)},
            )
        )
    return out


def _neighbours(items: Ints, index: int, limit: int) -> tuple[int | None, int | None]:
    pos = bisect_left(items, index)
    prev = items[pos - 1] if pos > 0 else None
    nxt = items[pos + 1] if pos + 1 < len(items) and items[pos + 1] < limit else None
    return prev, nxt


def _chunk_neighbours(conv: Conversation, block: _Block, index: int) -> tuple[int | None, int | None]:
    """The previous and next chunk of the same run (a run's chunks are its blocks' chunks)."""
    s = conv._store
    chunks = prefix(block.chunks, conv._n_chunks)
    pos = bisect_left(chunks, index)
    prev = chunks[pos - 1] if pos > 0 else None
    nxt = chunks[pos + 1] if pos + 1 < len(chunks) else None
    if prev is None or nxt is None:
        before, after = _neighbours(s.runs[block.run].blocks, block.index, conv._n_blocks)
        if prev is None and before is not None:
            prev = s.blocks[before].chunks[-1]
        if nxt is None and after is not None:
            nxt = s.blocks[after].chunks[0]
    return prev, nxt


def edges_of(conv: Conversation, node_id: str) -> tuple[HyperEdge, ...]:
    """Every hyperedge touching ``node_id`` (a chunk, block or message id). O(degree)."""
    s = conv._store
    out: list[HyperEdge] = []
    if node_id.startswith("chunk:"):
        index = chunk_index(conv, node_id)
        block = s.blocks[s.chunk_block[index]]
        out.append(_block_edge(conv, block))
        run = s.runs[block.run]
        prev, nxt = _chunk_neighbours(conv, block, index)
        if prev is not None:
            out.append(_seq("chunk", chunk_id(prev), node_id))
        if nxt is not None:
            out.append(_seq("chunk", node_id, chunk_id(nxt)))
        if run.first_chunk == index:
            spawn = link_at(s, run.id, conv._version)[1]
            if spawn is not None:
                out.extend(e for e in _spawn_edges_of_block(conv, s.blocks[spawn.trigger]) if node_id in e.id)
        return tuple(out)
    if node_id.startswith("block:"):
        block = stored_block(conv, node_id)
        out.append(_block_edge(conv, block))
        out.append(_message_edge(conv, s.messages[block.message]))
        prev, nxt = _neighbours(s.runs[block.run].blocks, block.index, conv._n_blocks)
        if prev is not None:
            out.append(_seq("block", s.blocks[prev].id, block.id))
        if nxt is not None:
            out.append(_seq("block", block.id, s.blocks[nxt].id))
        out.extend(_spawn_edges_of_block(conv, block))
        return tuple(out)
    message = stored_message(conv, node_id)
    out.append(_message_edge(conv, message))
    if message.summary is not None:
        out.append(_summary_edge(conv, message))
    elif message.parent >= 0:
        out.append(_seq("msg", s.messages[message.parent].id, message.id))
    for child in prefix(message.children, conv._n_messages):
        out.append(_seq("msg", message.id, s.messages[child].id))
    for summary in prefix(s.summaries_of.get(message.index, EMPTY), conv._n_messages):
        out.append(_summary_edge(conv, s.messages[summary]))
    return tuple(out)


def iter_edges(conv: Conversation) -> Iterator[HyperEdge]:
    """Every hyperedge of this version. O(n)."""
    s = conv._store
    for b in range(conv._n_blocks):
        yield _block_edge(conv, s.blocks[b])
    for m in range(conv._n_messages):
        message = s.messages[m]
        yield _message_edge(conv, message)
        if message.summary is not None:
            yield _summary_edge(conv, message)
        elif message.parent >= 0:
            yield _seq("msg", s.messages[message.parent].id, message.id)
    for run in tuple(s.runs.values()):
        chunks = run_chunk_indexes(conv, run)
        for a, b in itertools.pairwise(chunks):
            yield _seq("chunk", chunk_id(a), chunk_id(b))
        blocks = prefix(run.blocks, conv._n_blocks)
        for a, b in itertools.pairwise(blocks):
            yield _seq("block", s.blocks[a].id, s.blocks[b].id)
    for b in range(conv._n_blocks):
        yield from _spawn_edges_of_block(conv, s.blocks[b])


def find_edges(
    conv: Conversation,
    *,
    type: EdgeType | None = None,
    node: str | None = None,
    role: str | None = None,
) -> tuple[HyperEdge, ...]:
    """Edges filtered by type, by a node they touch, and (with ``node``) by the role it plays.
    O(degree) with ``node``, else O(n)."""
    edges = edges_of(conv, node) if node is not None else tuple(iter_edges(conv))
    out = []
    for edge in edges:
        if type is not None and edge.type != type:
            continue
        if node is not None and role is not None and node not in edge.roles.get(role, ()):
            continue
        out.append(edge)
    return tuple(out)
