"""Operations: append, edit, regenerate, switch branch, summarize, close stream, fork rules."""

from __future__ import annotations

from typing import Any

import pytest

from convograph.hypergraph import (
    OperationError,
    append_user_message,
    close_stream,
    create_conversation,
    default_active,
    edit_message,
    find_edges,
    fork_point,
    list_siblings,
    reduce_conversation,
    reduce_conversation_events,
    regenerate,
    summarize_range,
    switch_branch,
    walk,
)
from convograph.hypergraph import queries as q
from convograph.hypergraph.model import Conversation


def turn(n: int, answer: str) -> list[dict[str, Any]]:
    agent = f"a{n}"
    return [
        {"type": "user", "runId": f"u{n}", "content": f"question {n}"},
        {"type": "harness_start", "runId": agent, "parentId": f"u{n}:user"},
        {"type": "text", "runId": f"{agent}:p", "parentId": agent, "id": "t", "content": answer},
        {"type": "harness_end", "runId": agent},
    ]


def chat(*answers: str) -> Conversation:
    events = [e for i, a in enumerate(answers) for e in turn(i, a)]
    return reduce_conversation_events(create_conversation(), events)


def path_text(conv: Conversation) -> list[str]:
    out = []
    for message in walk(conv):
        for block in q.blocks_of(conv, message.id):
            for chunk in q.chunks_of(conv, block.id):
                content = getattr(chunk.event, "content", None)
                if isinstance(content, str) and block.kind in ("user", "text", "summary"):
                    out.append(content)
    return out


def test_chat_path_alternates_user_and_assistant() -> None:
    conv = chat("A0", "A1")
    assert default_active(conv).message_ids == ("msg:1", "msg:2", "msg:3", "msg:4")
    assert [m.role for m in walk(conv)] == ["user", "assistant", "user", "assistant"]
    assert path_text(conv) == ["question 0", "A0", "question 1", "A1"]


def test_append_user_message_goes_to_the_tip() -> None:
    conv = append_user_message(chat("A0"), "thanks", run_id="u9")
    assert path_text(conv)[-1] == "thanks"
    assert q.get_message(conv, default_active(conv).tip_id or "").role == "user"


def test_edit_creates_a_sibling_branch_and_never_deletes() -> None:
    before = chat("A0", "A1")
    edited = edit_message(before, "msg:3", "question 1, rephrased", run_id="ue")
    assert path_text(edited) == ["question 0", "A0", "question 1, rephrased"]
    assert [m.id for m in list_siblings(edited, "msg:3")] == ["msg:3", "msg:5"]
    assert q.get_message(edited, "msg:4").block_ids  # the old answer is still there
    assert path_text(before) == ["question 0", "A0", "question 1", "A1"]
    # the next run answers on the new branch
    reply = reduce_conversation_events(
        edited,
        [
            {"type": "harness_start", "runId": "b", "parentId": "ue:user"},
            {"type": "text", "runId": "b:p", "parentId": "b", "id": "t", "content": "B1"},
            {"type": "harness_end", "runId": "b"},
        ],
    )
    assert path_text(reply) == ["question 0", "A0", "question 1, rephrased", "B1"]


def test_edit_of_an_assistant_message_is_a_text_sibling() -> None:
    conv = edit_message(chat("A0"), "msg:2", "A0 (fixed)")
    assert path_text(conv) == ["question 0", "A0 (fixed)"]
    with pytest.raises(OperationError):
        edit_message(conv, "msg:2", [])


def test_regenerate_opens_a_sibling_that_the_next_run_fills() -> None:
    conv = chat("A0", "A1")
    regen = regenerate(conv, "msg:4")
    tip = default_active(regen).tip_id
    assert tip == "msg:5"
    assert q.get_message(regen, "msg:5").block_ids == ()
    filled = reduce_conversation_events(
        regen,
        [
            {"type": "harness_start", "runId": "r"},
            {"type": "text", "runId": "r:p", "parentId": "r", "id": "t", "content": "A1 again"},
            {"type": "harness_end", "runId": "r"},
        ],
    )
    assert path_text(filled) == ["question 0", "A0", "question 1", "A1 again"]
    assert default_active(filled).message_ids == ("msg:1", "msg:2", "msg:3", "msg:5")
    assert [m.id for m in list_siblings(filled, "msg:4")] == ["msg:4", "msg:5"]
    with pytest.raises(OperationError):
        regenerate(conv, "msg:3")


def test_switch_branch_is_part_of_the_state_and_remembers_choices() -> None:
    conv = chat("A0", "A1")
    edited = edit_message(conv, "msg:3", "Q1b")
    edited = reduce_conversation_events(
        edited,
        [
            {"type": "harness_start", "runId": "b"},
            {"type": "text", "runId": "b", "id": "t", "content": "B1"},
            {"type": "harness_end", "runId": "b"},
        ],
    )
    back = switch_branch(edited, "msg:3")
    assert path_text(back) == ["question 0", "A0", "question 1", "A1"]
    forth = switch_branch(back, "msg:5")
    assert path_text(forth) == ["question 0", "A0", "Q1b", "B1"]
    # switching at an ancestor keeps the choice made below it
    again = switch_branch(switch_branch(forth, "msg:3"), "msg:1")
    assert path_text(again) == ["question 0", "A0", "question 1", "A1"]
    assert switch_branch(again, "msg:4") is again  # already selected
    # new messages continue the selected branch
    more = append_user_message(back, "follow-up", run_id="u7")
    assert path_text(more)[-2:] == ["A1", "follow-up"]
    assert path_text(edited) == ["question 0", "A0", "Q1b", "B1"]


def test_forks_skip_errored_and_unresolved_turns() -> None:
    events = [
        *turn(0, "A0"),
        {"type": "user", "runId": "u1", "content": "question 1"},
        {"type": "harness_start", "runId": "a1"},
        {"type": "tool_call", "runId": "a1", "id": "a1/x", "name": "bash"},
        {"type": "error", "runId": "a1:p", "parentId": "a1", "message": "provider down"},
    ]
    conv = reduce_conversation_events(create_conversation(), events)
    conv = close_stream(conv)
    conv = append_user_message(conv, "hello?", run_id="u2")
    # msg:4 (a1's turn) has an unresolved call and an error: a fork after msg:5 starts from msg:3
    assert not q.message_health(conv, "msg:4").clean
    point = fork_point(conv, "msg:5")
    assert point is not None
    assert point.id == "msg:3"
    edited = edit_message(conv, "msg:5", "hello again")
    assert default_active(edited).message_ids == ("msg:1", "msg:2", "msg:3", "msg:6")


def test_summarize_range_keeps_text_and_provenance() -> None:
    conv = chat("A0", "A1", "A2")
    summed = summarize_range(
        conv, "msg:1", "msg:4", "User asked two things.", model="m-1", created_at="2026-11-22T00:00:00Z"
    )
    active = default_active(summed)
    assert active.message_ids == ("summary:1", "msg:5", "msg:6")
    summary = q.get_message(summed, "summary:1")
    assert summary.role == "summary"
    assert summary.summary is not None
    assert summary.summary.source_ids == ("msg:1", "msg:2", "msg:3", "msg:4")
    assert (summary.summary.model, summary.summary.text) == ("m-1", "User asked two things.")
    assert path_text(summed)[0] == "User asked two things."
    (edge,) = find_edges(summed, type="summary", node="msg:2", role="source")
    assert edge.roles["result"] == ("summary:1",)
    assert [m.id for m in q.sources_of(summed, "summary:1")] == ["msg:1", "msg:2", "msg:3", "msg:4"]
    assert [m.id for m in q.summaries_of(summed, "msg:3")] == ["summary:1"]
    assert default_active(conv).message_ids == ("msg:1", "msg:2", "msg:3", "msg:4", "msg:5", "msg:6")
    # a summary of a range that includes a summary
    nested = summarize_range(summed, "summary:1", "msg:5", "Three questions.")
    assert default_active(nested).message_ids == ("summary:2", "msg:6")
    # switching to another branch inside the range drops the summary from the path
    edited = edit_message(summed, "msg:3", "other question")
    assert default_active(edited).message_ids == ("msg:1", "msg:2", "msg:7")


def test_summarize_rejects_ranges_off_the_path() -> None:
    conv = chat("A0", "A1")
    with pytest.raises(OperationError):
        summarize_range(conv, "msg:3", "msg:1", "backwards")
    with pytest.raises(OperationError):
        summarize_range(conv, "msg:1", "msg:99", "unknown")


def test_operations_leave_earlier_versions_identical() -> None:
    versions = [chat("A0", "A1")]
    versions.append(edit_message(versions[-1], "msg:3", "Q1b"))
    versions.append(regenerate(versions[-1], "msg:2"))
    versions.append(switch_branch(versions[-1], "msg:4"))
    versions.append(summarize_range(versions[-1], "msg:1", "msg:2", "S"))
    versions.append(close_stream(versions[-1]))
    snapshots = [(default_active(v), path_text(v), list(q.iter_messages(v))) for v in versions]
    # operate on old versions too (each forks its lineage)
    edit_message(versions[0], "msg:1", "Q0b")
    regenerate(versions[2], "msg:2")
    summarize_range(versions[1], "msg:1", "msg:2", "T")
    assert snapshots == [(default_active(v), path_text(v), list(q.iter_messages(v))) for v in versions]


def test_close_stream_closes_open_messages_and_is_idempotent() -> None:
    conv = reduce_conversation_events(
        create_conversation(),
        [{"type": "harness_start", "runId": "a"}, {"type": "text", "runId": "a", "id": "t", "content": "x"}],
    )
    closed = close_stream(conv)
    assert close_stream(closed) is closed
    after = reduce_conversation(closed, {"type": "text", "runId": "b", "id": "t", "content": "y"})
    assert default_active(after).message_ids == ("msg:1", "msg:2")


def test_regenerate_after_an_aborted_turn_forks_from_the_last_clean_one() -> None:
    conv = reduce_conversation_events(
        create_conversation(),
        [
            *turn(0, "A0"),
            {"type": "harness_start", "runId": "a1"},  # answers again without a user turn
            {"type": "text", "runId": "a1", "id": "t", "content": "half"},
        ],
    )
    conv = close_stream(conv)  # a1 never ended: aborted
    conv = reduce_conversation_events(
        conv,
        [
            {"type": "harness_start", "runId": "a2"},
            {"type": "text", "runId": "a2", "id": "t", "content": "whole"},
            {"type": "harness_end", "runId": "a2"},
        ],
    )
    assert q.message_health(conv, "msg:3").status == "aborted"
    regen = regenerate(conv, "msg:4")
    assert q.get_message(regen, default_active(regen).tip_id or "").parent_id == "msg:2"


def test_operations_reject_what_they_cannot_do() -> None:
    conv = summarize_range(chat("A0", "A1"), "msg:1", "msg:2", "S")
    with pytest.raises(OperationError):
        switch_branch(conv, "summary:1")
    with pytest.raises(OperationError):
        edit_message(conv, "summary:1", "x")
    with pytest.raises(OperationError):
        edit_message(conv, "msg:1", "x", run_id="u0")  # run id already used
    with pytest.raises(KeyError):
        edit_message(conv, "msg:404", "x")
    assert list_siblings(conv, "summary:1")[0].id == "summary:1"


def test_a_run_still_streaming_when_the_user_regenerates_stays_on_its_own_branch() -> None:
    conv = reduce_conversation_events(
        create_conversation(),
        [
            {"type": "user", "runId": "u0", "content": "question"},
            {"type": "harness_start", "runId": "a", "parentId": "u0:user"},
            {"type": "text", "runId": "a:p1", "parentId": "a", "id": "t", "content": "old "},
        ],
    )
    regen = regenerate(conv, "msg:2")
    assert default_active(regen).tip_id == "msg:3"
    after = reduce_conversation_events(
        regen,
        [
            {"type": "text", "runId": "a:p1", "parentId": "a", "id": "t", "content": "answer"},
            {"type": "tool_call", "runId": "a", "id": "a/x", "name": "bash"},
            {"type": "tool_result", "runId": "a", "id": "a/x", "name": "bash", "output": 1},
            {"type": "text", "runId": "a:p2", "parentId": "a", "id": "t", "content": "old tail"},
            {"type": "harness_start", "runId": "b", "parentId": "u0:user"},
            {"type": "text", "runId": "b:p1", "parentId": "b", "id": "t", "content": "new answer"},
            {"type": "harness_end", "runId": "a"},
            {"type": "harness_end", "runId": "b"},
        ],
    )
    old = [b.run_id for b in q.blocks_of(after, "msg:2")]
    new = [b.run_id for b in q.blocks_of(after, "msg:3")]
    assert set(old) == {"a", "a:p1", "a:p2"}
    assert set(new) == {"b", "b:p1"}
    assert path_text(after) == ["question", "new answer"]
    assert default_active(after).message_ids == ("msg:1", "msg:3")
    assert len(q.thread_messages(after, "main")) == 3


def test_a_run_still_streaming_when_the_user_edits_does_not_answer_the_edit() -> None:
    conv = reduce_conversation_events(
        create_conversation(),
        [
            {"type": "user", "runId": "u0", "content": "question"},
            {"type": "harness_start", "runId": "a", "parentId": "u0:user"},
            {"type": "text", "runId": "a", "id": "t", "content": "old"},
        ],
    )
    edited = edit_message(conv, "msg:1", "better question", run_id="u1")
    after = reduce_conversation_events(
        edited,
        [
            {"type": "text", "runId": "a", "id": "t", "content": " answer"},
            {"type": "harness_end", "runId": "a"},
            {"type": "harness_start", "runId": "b", "parentId": "u1:user"},
            {"type": "text", "runId": "b", "id": "t", "content": "new answer"},
        ],
    )
    assert path_text(after) == ["better question", "new answer"]
    assert q.block_text(after, "block:a:t") == "old answer"
    assert q.message_of(after, "block:a:harness_end").id == "msg:2"


def test_active_path_extended_from_the_cache_equals_a_fresh_walk() -> None:
    events = [e for i in range(6) for e in turn(i, f"A{i}")]
    conv = create_conversation()
    for event in events:
        conv = reduce_conversation(conv, event)
        default_active(conv)  # warm the cache step by step
    summed = summarize_range(conv, "msg:1", "msg:4", "S")
    summed = append_user_message(summed, "more", run_id="u9")
    default_active(summed)
    summed = append_user_message(summed, "and more", run_id="u10")
    fresh = reduce_conversation_events(create_conversation(), events)
    fresh = append_user_message(
        append_user_message(summarize_range(fresh, "msg:1", "msg:4", "S"), "more", run_id="u9"),
        "and more",
        run_id="u10",
    )
    assert default_active(summed) == default_active(fresh)
    assert default_active(summed).message_ids[:2] == ("summary:1", "msg:5")
    assert default_active(conv).message_ids == tuple(f"msg:{i}" for i in range(1, 13))
