"""What a reader is shown about one `Conversation` version besides its tiers: unresolved parents,
diagnostics, the session, a message's health and the selective views (`ViewOptions`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from convograph.hypergraph.records import Block, MessageHealth, SpawnInfo, stored_message
from convograph.hypergraph.runs import run_status, spawns_from
from convograph.hypergraph.store import (
    Diagnostic,
    RunStatus,
    prefix,
)
from convograph.hypergraph.tiers import blocks_of
from convograph.hypergraph.tools import tool_call_for_block

if TYPE_CHECKING:
    from convograph.hypergraph.model import Conversation


def unresolved_parents(conv: Conversation) -> dict[str, tuple[str, ...]]:
    """``parentId`` values that have not arrived -> the runs waiting for them. O(unresolved)."""
    return {key: tuple(value) for key, value in _items_at(conv)}


def _items_at(conv: Conversation) -> Iterator[tuple[str, tuple[str, ...]]]:
    unresolved = conv._store.unresolved
    for key in unresolved.keys_at(conv._version):
        value = unresolved.get_at(key, conv._version)
        if value is not None:
            yield key, value


def diagnostics(conv: Conversation) -> tuple[Diagnostic, ...]:
    return conv._store.diagnostics.get_at(conv._version)


def session_id(conv: Conversation) -> str | None:
    value: str | None = conv._store.meta.get_at("session_id", conv._version)
    return value


def is_stream_closed(conv: Conversation) -> bool:
    return bool(conv._store.meta.get_at("closed", conv._version, False))


def message_health(conv: Conversation, message_id: str) -> MessageHealth:
    """Status of a message from its blocks' runs. O(blocks of the message)."""
    message = stored_message(conv, message_id)
    s = conv._store
    has_error = False
    unresolved: list[str] = []
    statuses: set[str] = set()
    runs_seen: set[str] = set()
    for b in prefix(message.blocks, conv._n_blocks):
        block = s.blocks[b]
        if block.kind == "error":
            has_error = True
        elif block.kind == "tool_call":
            info = tool_call_for_block(conv, block.id)
            if info is not None and info.status == "pending":
                unresolved.append(info.call_id)
        if block.run not in runs_seen:
            runs_seen.add(block.run)
            statuses.add(run_status(conv, block.run))
    status: RunStatus
    if "error" in statuses:
        status = "error"
    elif "aborted" in statuses:
        status = "aborted"
    elif "streaming" in statuses:
        status = "streaming"
    else:
        status = "complete"
    return MessageHealth(status=status, unresolved_call_ids=tuple(unresolved), has_error=has_error)


# --- selective views --------------------------------------------------------------------------------

_FOLDED_INTO_CALL = frozenset({"tool_result", "tool_error", "tool_progress", "relay"})


def visible_blocks(conv: Conversation, message_id: str) -> tuple[Block, ...]:
    """The message's blocks as ``conv.view`` shows them: reasoning dropped when ``hide_reasoning``;
    results, progress and relays folded into their call's block when ``collapse_tools`` (a denied
    call has no ``tool_call`` event: its result block stands for the call; a relay or progress
    whose call has not arrived stays visible)."""
    view = conv.view
    blocks = blocks_of(conv, message_id)
    if not view.hide_reasoning and not view.collapse_tools:
        return blocks
    out: list[Block] = []
    for block in blocks:
        if view.hide_reasoning and block.kind == "reasoning":
            continue
        if view.collapse_tools and block.kind in _FOLDED_INTO_CALL:
            info = tool_call_for_block(conv, block.id)
            if info is not None:
                representative = info.call_block_id or info.result_block_id
                if representative is not None and representative != block.id:
                    continue
        out.append(block)
    return tuple(out)


def visible_spawns(conv: Conversation, block_id: str) -> tuple[SpawnInfo, ...]:
    """`spawns_from` as ``conv.view.subagents`` shows them: ``hide`` -> none; ``show`` and
    ``collapse`` -> all (projections expand only under ``show``). Provider ``call`` spawns are part
    of the same thread and always returned."""
    spawns = spawns_from(conv, block_id)
    if conv.view.subagents == "hide":
        return tuple(sp for sp in spawns if sp.kind in ("call", "reply"))
    return spawns
