"""Message rows derived from events (pure)."""

from __future__ import annotations

from convograph.events import HarnessStart, User
from convograph.store.base import StoredEvent
from convograph.store.messages import is_top_level_start, run_message, user_message
from convograph.testing import sample_run


def stored(events: list, first: int = 1) -> list[StoredEvent]:
    return [
        StoredEvent(seq=first + i, conversation_id="c", event=e, received_at=1.0)
        for i, e in enumerate(events)
    ]


def test_user_message_ids_and_text() -> None:
    [item] = stored([User(run_id="u", content="hi")])
    message = user_message(item, None)
    assert (message.id, message.role, message.text, message.parent_message_id) == (
        "u:user",
        "user",
        "hi",
        None,
    )
    [named] = stored([User(run_id="u", id="m-7", content="edit")])
    assert user_message(named, "m-1").id == "m-7"
    assert user_message(named, "m-1").parent_message_id == "m-1"


def test_run_message_merges_text_deltas_and_keeps_tools_in_order() -> None:
    run = stored(sample_run("r", deltas=3, user=None), first=10)
    message = run_message(run, "u:user")
    assert message.id == "r"
    assert message.role == "assistant"
    assert message.text == "chunk 0. chunk 1. chunk 2. "
    assert [p["type"] for p in message.parts] == ["text", "tool_call", "tool_result", "end"]
    assert (message.first_seq, message.last_seq) == (10, 10 + len(run) - 1)


def test_top_level_detection() -> None:
    assert is_top_level_start(HarnessStart(run_id="r"), set())
    assert not is_top_level_start(HarnessStart(run_id="r", depth=1), set())
    assert not is_top_level_start(HarnessStart(run_id="r", parent_id="tool-call-1"), set())
    assert is_top_level_start(HarnessStart(run_id="r", parent_id="m1"), {"m1"})
