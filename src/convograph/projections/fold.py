"""`ConversationFold`: a conversation's log folded event by event, user commands included.

The one fold the server's per-conversation cache (`convograph.server.live.LiveState`) and a
harness's port (`convograph.harness.ports.ConversationState`) share: the hypergraph with commands
applied (edit, regenerate, switch_branch, summarize: `reduce_with_commands`), its thread views
kept by a `ConversationProjector`, and the relays with their first decisions. It lives here, not in
either user, so a harness does not import the server (and Litestar) for it.

O(1) amortised per ordinary event; a command costs its operation plus a rebuild of the views.
"""

from __future__ import annotations

from typing import Any, Literal

from convograph.events import Event, Relay, RelayResolved
from convograph.hypergraph.commands import COMMAND_TYPES, reduce_with_commands
from convograph.hypergraph.model import Conversation
from convograph.projections.incremental import ConversationProjector

__all__ = ["ConversationFold", "FoldStep"]

FoldStep = Literal["applied", "replaced", "unchanged"]
"""What `ConversationFold.fold` did: an event applied to the views, a command that changed the
conversation (the views were rebuilt), or a command that changed nothing."""


class ConversationFold:
    """A conversation as of the events folded so far (module docstring)."""

    __slots__ = ("decisions", "projector", "relays")

    def __init__(self, **projector_options: Any) -> None:
        self.projector = ConversationProjector(**projector_options)
        self.relays: dict[str, Relay] = {}
        self.decisions: dict[str, RelayResolved] = {}
        """The first decision recorded for each relay id (later ones are duplicates)."""

    def standing_grants(self) -> list[Relay]:
        """The relays approved with ``always`` ("always allow"), in the order decided. O(decisions)."""
        return [
            self.relays[relay_id]
            for relay_id, decision in self.decisions.items()
            if decision.approved and decision.always and relay_id in self.relays
        ]

    @property
    def conversation(self) -> Conversation:
        conversation: Conversation = self.projector.conversation
        return conversation

    def fold(self, event: Event) -> FoldStep:
        """Apply one stored event (a command through its operation)."""
        projector = self.projector
        if isinstance(event, COMMAND_TYPES):
            changed = reduce_with_commands(projector.conversation, event)
            if changed is projector.conversation:
                return "unchanged"
            projector.replace(changed)
            return "replaced"
        projector.apply(event)
        if isinstance(event, Relay):
            self.relays.setdefault(event.id, event)
        elif isinstance(event, RelayResolved):
            self.decisions.setdefault(event.relay_id, event)
        return "applied"
