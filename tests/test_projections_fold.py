"""`ConversationFold`: the fold the server's cache and a harness's port share (commands applied, the
thread kept incrementally, relays with their first decision)."""

from __future__ import annotations

from convograph.events import Edit, HarnessStart, Regenerate, Relay, RelayResolved, Text, User
from convograph.harness import ConversationState
from convograph.hypergraph import default_active
from convograph.projections import project_thread
from convograph.projections.fold import ConversationFold
from convograph.server.live import LiveState


def test_commands_are_applied_and_the_views_follow() -> None:
    fold = ConversationFold()
    assert fold.fold(User(run_id="u1", content="hi")) == "applied"
    assert fold.fold(HarnessStart(run_id="a1", parent_id="u1:user")) == "applied"
    assert fold.fold(Text(run_id="a1", id="t", content="hello")) == "applied"
    assert fold.fold(Edit(message_id="msg:1", content="hey", run_id="e1", event_id="c1")) == "replaced"
    assert fold.fold(Regenerate(message_id="msg:1", event_id="c2")) == "unchanged"  # a user message: no-op
    assert fold.projector.views == project_thread(fold.conversation, default_active(fold.conversation))
    assert default_active(fold.conversation).message_ids == ("msg:3",)


def test_relays_keep_their_first_decision() -> None:
    fold = ConversationFold()
    fold.fold(User(run_id="u1", content="go"))
    fold.fold(HarnessStart(run_id="a1", parent_id="u1:user"))
    relay = Relay(run_id="a1", id="r1", kind="permission", tool_call_id="a1/c", tool="f")
    fold.fold(relay)
    fold.fold(RelayResolved(relay_id="r1", approved=False, reason="first"))
    fold.fold(RelayResolved(relay_id="r1", approved=True, reason="second"))
    assert fold.relays == {"r1": relay}
    assert fold.decisions["r1"].reason == "first"


def test_the_server_cache_and_the_port_fold_alike() -> None:
    events = [
        User(run_id="u1", content="hi"),
        HarnessStart(run_id="a1", parent_id="u1:user"),
        Text(run_id="a1", id="t", content="hello"),
        Edit(message_id="msg:1", content="hey", run_id="e1", event_id="c1"),
        HarnessStart(run_id="a2", parent_id="e1:user"),
        Text(run_id="a2", id="t2", content="hey yourself"),
    ]
    live, port = LiveState(), ConversationState()
    live.apply(events, len(events))
    for event in events:
        port.apply(event)
    assert live.projector.views == port.projector.views
    assert live.projector.messages("openai") == port.messages("openai")
