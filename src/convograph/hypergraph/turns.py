"""Whose turn is it? The reply a conversation is waiting for, derived from its active path.

A conversation **awaits a reply** when its main thread's active path ends with

- a user message (a new message, or an edited one: an edit's new branch ends with it), or
- an empty assistant turn (a regenerate opened it; the next run fills it).

Nothing else does: a path that ends with an answer (complete, failed, cancelled or still
streaming) awaits nothing. The answer is a pure function of the conversation, so it is as durable
as the log: after a restart, a replay gives the same pending turn.

Each pending turn names its **claim**: the ``eventId`` the ``harness_start`` of the run answering
it carries. An event log stores an ``eventId`` once per conversation, so when several agents race
to answer one turn exactly one ``harness_start`` is stored, and the others learn from the append
(a duplicate) that they lost. The claim of a user message is ``turn:<its block key>`` (its block key
is ``<userRunId>:user``, the ``parentId`` an agent answering it sends); an agent started with a
task uses the same claim for its own message, so a serving agent never answers it twice. The
claim of a regenerated turn is ``turn:<messageId>`` (message ids are numbered by arrival, so they
are the same on every replay).

O(1) amortised: the active path is memoised (`default_active`); only the tip is read.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from convograph.hypergraph.active import default_active
from convograph.hypergraph.model import Conversation
from convograph.hypergraph.tiers import get_block, get_message

__all__ = ["PendingTurn", "pending_turn", "user_claim"]


class PendingTurn(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The reply a conversation awaits (module docstring)."""

    message_id: str
    """The tip of the active path: the user message to answer, or the empty regenerated turn."""
    kind: Literal["message", "regenerate"]
    claim: str
    """``eventId`` of the answering run's ``harness_start``."""
    parent_id: str | None
    """``parentId`` of that ``harness_start``: the user block it answers (``<runId>:user``)."""


def user_claim(user_block_key: str) -> str:
    """The claim of a reply to the user block ``<runId>:user``."""
    return f"turn:{user_block_key}"


def pending_turn(conversation: Conversation) -> PendingTurn | None:
    """The reply ``conversation`` awaits on its main thread's active path, or None."""
    tip_id = default_active(conversation).tip_id
    if tip_id is None:
        return None
    tip = get_message(conversation, tip_id)
    if tip.role == "user":
        key = _user_key(conversation, tip.block_ids)
        if key is None:
            return None
        return PendingTurn(message_id=tip.id, kind="message", claim=user_claim(key), parent_id=key)
    if tip.role == "assistant" and not tip.block_ids:
        parent = get_message(conversation, tip.parent_id) if tip.parent_id is not None else None
        key = (
            _user_key(conversation, parent.block_ids)
            if parent is not None and parent.role == "user"
            else None
        )
        return PendingTurn(message_id=tip.id, kind="regenerate", claim=f"turn:{tip.id}", parent_id=key)
    return None


def _user_key(conversation: Conversation, block_ids: tuple[str, ...]) -> str | None:
    for block_id in block_ids:
        block = get_block(conversation, block_id)
        if block.kind == "user":
            return block.key
    return None
