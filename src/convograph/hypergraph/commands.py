"""User commands as log events: ``edit``, ``regenerate``, ``switch_branch``, ``summarize``.

An event log holds only events, so steering a conversation (editing a message, regenerating a
reply, choosing a branch, summarizing a range) is recorded as a command event and applied here
through the operations of `convograph.hypergraph.operations`. Message ids are numbered by arrival,
so replaying the same log reproduces the same ids, and a command recorded against ``msg:3``
finds ``msg:3`` again on every replay: the conversation state is a pure function of the log.

`check_command` tells, without changing anything, whether a command would apply (the server
refuses one that would not, so the log never holds a command that does nothing); a command that
cannot apply on replay anyway (e.g. a log edited by hand) changes nothing.

Cost: ``reduce_with_commands`` is `reduce_conversation` for ordinary events; a command costs what
its operation costs (O(path)).
"""

from __future__ import annotations

from collections.abc import Iterable

from convograph.events import Edit, Event, Regenerate, Summarize, SwitchBranch, parse_event
from convograph.events.types import _Event
from convograph.hypergraph.model import Conversation
from convograph.hypergraph.operations import (
    OperationError,
    edit_message,
    regenerate,
    summarize_range,
    switch_branch,
)
from convograph.hypergraph.reducer import EventLike, reduce_conversation

__all__ = [
    "COMMAND_TYPES",
    "apply_command",
    "check_command",
    "reduce_with_commands",
    "reduce_with_commands_events",
]

COMMAND_TYPES = (Edit, Regenerate, SwitchBranch, Summarize)


def apply_command(
    conversation: Conversation, command: Edit | Regenerate | SwitchBranch | Summarize
) -> Conversation:
    """The conversation after ``command``. Raises `OperationError` when it cannot apply."""
    if isinstance(command, Edit):
        return edit_message(conversation, command.message_id, command.content, run_id=command.run_id)
    if isinstance(command, Regenerate):
        return regenerate(conversation, command.message_id)
    if isinstance(command, SwitchBranch):
        return switch_branch(conversation, command.message_id)
    thread = {"thread_id": command.thread_id} if command.thread_id is not None else {}
    return summarize_range(
        conversation,
        command.first_id,
        command.last_id,
        command.text,
        model=command.model,
        created_at=str(command.timestamp) if command.timestamp is not None else None,
        **thread,
    )


def check_command(conversation: Conversation, command: Edit | Regenerate | SwitchBranch | Summarize) -> None:
    """Raise `OperationError` (saying why) when ``command`` would not apply; change nothing."""
    try:
        apply_command(conversation, command)
    except KeyError as exc:
        raise OperationError(str(exc.args[0])) from None


def reduce_with_commands(conversation: Conversation, event: EventLike) -> Conversation:
    """`reduce_conversation`, also applying command events. The input is never changed."""
    parsed: Event = event if isinstance(event, _Event) else parse_event(event)
    if isinstance(parsed, COMMAND_TYPES):
        try:
            return apply_command(conversation, parsed)
        except (OperationError, KeyError):
            return conversation
    return reduce_conversation(conversation, parsed)


def reduce_with_commands_events(conversation: Conversation, events: Iterable[EventLike]) -> Conversation:
    """`reduce_with_commands` over ``events`` in order."""
    for event in events:
        conversation = reduce_with_commands(conversation, event)
    return conversation
