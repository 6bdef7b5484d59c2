"""`pending_turn`: the reply a conversation awaits, from its active path; and its claim."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from convograph.events import Event, HarnessEnd, HarnessStart, Text, User
from convograph.hypergraph import (
    Conversation,
    create_conversation,
    edit_message,
    reduce_conversation,
    reduce_conversation_events,
    regenerate,
    summarize_range,
    switch_branch,
)
from convograph.hypergraph.turns import PendingTurn, pending_turn


def answered(
    conversation: Conversation, run: str, parent: str | None, claim: str | None = None
) -> Conversation:
    return reduce_conversation_events(
        conversation,
        [
            HarnessStart(run_id=run, parent_id=parent, event_id=claim),
            Text(run_id=run, id=f"{run}-t", content=f"answer of {run}"),
            HarnessEnd(run_id=run, parent_id=parent, reason="final"),
        ],
    )


def test_an_empty_conversation_awaits_nothing() -> None:
    assert pending_turn(create_conversation()) is None


def test_a_user_message_awaits_a_reply_until_a_run_starts_answering() -> None:
    conversation = reduce_conversation(create_conversation(), User(run_id="u1", content="hi"))
    turn = pending_turn(conversation)
    assert turn == PendingTurn(message_id="msg:1", kind="message", claim="turn:u1:user", parent_id="u1:user")
    started = reduce_conversation(conversation, HarnessStart(run_id="a1", parent_id="u1:user"))
    assert pending_turn(started) is None  # streaming: being answered
    assert pending_turn(answered(conversation, "a1", "u1:user")) is None


def test_a_failed_or_cancelled_answer_awaits_nothing() -> None:
    conversation = reduce_conversation(create_conversation(), User(run_id="u1", content="hi"))
    failed = reduce_conversation_events(
        conversation,
        [HarnessStart(run_id="a1", parent_id="u1:user"), HarnessEnd(run_id="a1", reason="cancelled")],
    )
    assert pending_turn(failed) is None


def test_an_edit_awaits_a_reply_to_the_edited_message() -> None:
    conversation = answered(
        reduce_conversation(create_conversation(), User(run_id="u1", content="hi")), "a1", "u1:user"
    )
    edited = edit_message(conversation, "msg:1", "hello", run_id="e7")
    turn = pending_turn(edited)
    assert turn is not None
    assert (turn.kind, turn.claim, turn.parent_id) == ("message", "turn:e7:user", "e7:user")
    assert turn.message_id != "msg:1"


def test_a_regenerate_awaits_its_empty_turn_and_the_answer_fills_it() -> None:
    conversation = answered(
        reduce_conversation(create_conversation(), User(run_id="u1", content="hi")), "a1", "u1:user"
    )
    opened = regenerate(conversation, "msg:2")
    turn = pending_turn(opened)
    assert turn == PendingTurn(message_id="msg:3", kind="regenerate", claim="turn:msg:3", parent_id="u1:user")
    filled = answered(opened, "a2", turn.parent_id, turn.claim)
    assert pending_turn(filled) is None
    from convograph.hypergraph import default_active

    assert default_active(filled).message_ids == ("msg:1", "msg:3")


def test_switching_back_to_an_answered_branch_awaits_nothing() -> None:
    conversation = answered(
        reduce_conversation(create_conversation(), User(run_id="u1", content="hi")), "a1", "u1:user"
    )
    edited = edit_message(conversation, "msg:1", "hello", run_id="e1")
    assert pending_turn(edited) is not None
    assert pending_turn(switch_branch(edited, "msg:1")) is None


def test_a_summary_at_the_tip_awaits_nothing() -> None:
    conversation = answered(
        reduce_conversation(create_conversation(), User(run_id="u1", content="hi")), "a1", "u1:user"
    )
    summarized = summarize_range(conversation, "msg:1", "msg:2", "they said hi")
    assert pending_turn(summarized) is None


_STEP = st.sampled_from(["user", "answer", "start"])


@settings(max_examples=60, deadline=None)
@given(st.lists(_STEP, max_size=12))
def test_pending_means_the_tip_is_an_unanswered_user_message(steps: list[str]) -> None:
    """Over any sequence of messages, answers and unfinished starts: a turn is pending iff the last
    thing on the path is a user message, and its claim names that message's block."""
    conversation = create_conversation()
    last: Event | None = None
    for n, step in enumerate(steps):
        if step == "user":
            last = User(run_id=f"u{n}", content=f"m{n}")
            conversation = reduce_conversation(conversation, last)
        elif step == "answer":
            conversation = answered(conversation, f"a{n}", None)
            last = None
        else:
            conversation = reduce_conversation(conversation, HarnessStart(run_id=f"s{n}"))
            last = None
    turn = pending_turn(conversation)
    if isinstance(last, User):
        assert turn is not None
        assert turn.claim == f"turn:{last.run_id}:user"
    else:
        assert turn is None
