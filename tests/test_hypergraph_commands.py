"""Command events (edit, regenerate, switch_branch, summarize) replay into the same conversation."""

from __future__ import annotations

from typing import Any

import pytest

from convograph.events import Edit, Event, Regenerate, Summarize, SwitchBranch, parse_event
from convograph.examples import multi_agent_events
from convograph.hypergraph import create_conversation, default_active, list_siblings, walk
from convograph.hypergraph.commands import check_command, reduce_with_commands, reduce_with_commands_events
from convograph.hypergraph.model import Conversation
from convograph.hypergraph.operations import OperationError


def build(events: list[Any]) -> Conversation:
    return reduce_with_commands_events(create_conversation(), events)


def path(conversation: Conversation) -> list[tuple[str, str]]:
    return [(message.id, message.role) for message in walk(conversation, default_active(conversation))]


def base() -> list[Event]:
    return [parse_event(event) for event in multi_agent_events()]


def test_edit_creates_an_active_sibling_and_switch_returns() -> None:
    events = base()
    original = build(events)
    first_user = path(original)[0][0]
    edited = reduce_with_commands(
        original, Edit(message_id=first_user, content="Which is faster?", run_id="e1")
    )
    assert path(edited)[0][0] != first_user
    assert [m.id for m in list_siblings(edited, first_user)] == [first_user, path(edited)[0][0]]
    back = reduce_with_commands(edited, SwitchBranch(message_id=first_user))
    assert path(back) == path(original)
    assert path(original) == path(build(events))  # the input was not changed


def test_replaying_a_log_with_commands_reproduces_state() -> None:
    events: list[Any] = base()
    first_user = path(build(events))[0][0]
    log = [
        *events,
        Edit(message_id=first_user, content="Which is faster?", run_id="edit-1"),
        {"type": "harness_start", "runId": "agent-2", "parentId": "edit-1:user"},
        {"type": "text", "runId": "agent-2", "id": "a2", "content": "B is faster."},
        {"type": "harness_end", "runId": "agent-2"},
        SwitchBranch(message_id=first_user),
    ]
    once, twice = build(log), build(log)
    assert path(once) == path(twice) == path(build(events))
    switched = reduce_with_commands(once, SwitchBranch(message_id=list_siblings(once, first_user)[1].id))
    assert [role for _, role in path(switched)] == ["user", "assistant"]


def test_regenerate_opens_a_sibling_that_the_next_run_fills() -> None:
    conversation = build(
        [
            {"type": "user", "runId": "u1", "content": "hi"},
            {"type": "harness_start", "runId": "a1", "parentId": "u1:user"},
            {"type": "text", "runId": "a1", "id": "t1", "content": "first answer"},
            {"type": "harness_end", "runId": "a1"},
        ]
    )
    answer = path(conversation)[1][0]
    regenerated = reduce_with_commands(conversation, Regenerate(message_id=answer))
    placeholder = path(regenerated)[1][0]
    assert placeholder != answer
    filled = reduce_with_commands_events(
        regenerated,
        [
            {"type": "harness_start", "runId": "a2", "parentId": "u1:user"},
            {"type": "text", "runId": "a2", "id": "t2", "content": "second answer"},
            {"type": "harness_end", "runId": "a2"},
        ],
    )
    assert len(list_siblings(filled, answer)) == 2
    assert path(filled)[1][0] == placeholder


def test_summarize_replaces_a_range_on_the_active_path() -> None:
    conversation = build(base())
    messages = [mid for mid, _ in path(conversation)]
    summarized = reduce_with_commands(
        conversation, Summarize(first_id=messages[0], last_id=messages[2], text="They compared clients.")
    )
    assert path(summarized)[0][1] == "summary"
    assert len(path(summarized)) == len(messages) - 2


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        (Edit(message_id="msg:999", content="x"), "msg:999"),
        (Regenerate(message_id="msg:1"), "only assistant turns regenerate"),
        (SwitchBranch(message_id="nope"), "nope"),
    ],
)
def test_commands_that_cannot_apply_are_refused_and_ignored_on_replay(command: Any, fragment: str) -> None:
    conversation = build(base())
    with pytest.raises(OperationError, match=fragment):
        check_command(conversation, command)
    assert reduce_with_commands(conversation, command) is conversation
