"""Reducer and queries of `convograph.hypergraph`: tiers, ids, and each fix over upstream (spec §9)."""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks.hypergraph_workload import rlm_stream

from convograph.events import EventError, Text
from convograph.hypergraph import (
    MAIN_THREAD,
    Active,
    ViewOptions,
    close_stream,
    create_conversation,
    default_active,
    edges_of,
    find_edges,
    iter_edges,
    reduce_conversation,
    reduce_conversation_events,
    summarize_range,
    walk,
)
from convograph.hypergraph import queries as q
from convograph.hypergraph.model import Conversation


def build(*events: dict[str, Any]) -> Conversation:
    return reduce_conversation_events(create_conversation(), events)


def texts(conv: Conversation, message_id: str) -> list[str]:
    out = []
    for block in q.blocks_of(conv, message_id):
        if block.kind in ("text", "reasoning"):
            out.append(q.block_text(conv, block.id))
    return out


def kinds(conv: Conversation, message_id: str) -> list[str]:
    return [b.kind for b in q.blocks_of(conv, message_id)]


HS = {"type": "harness_start", "runId": "A"}
HE = {"type": "harness_end", "runId": "A"}


def agent_with_provider_runs() -> list[dict[str, Any]]:
    """Spec §9 #1: every provider call is its own run parented to the agent run."""
    return [
        HS,
        {"type": "text", "runId": "P1", "parentId": "A", "id": "t1", "content": "Let me "},
        {"type": "text", "runId": "P1", "parentId": "A", "id": "t1", "content": "check"},
        {"type": "usage", "runId": "P1", "parentId": "A", "inputTokens": 10, "outputTokens": 2},
        {"type": "tool_call", "runId": "A", "id": "A/x", "name": "bash", "input": {"cmd": "ls"}},
        {"type": "tool_result", "runId": "A", "id": "A/x", "name": "bash", "output": {"context": "f"}},
        {"type": "text", "runId": "P2", "parentId": "A", "id": "t2", "content": "Done"},
        {"type": "usage", "runId": "P2", "parentId": "A", "inputTokens": 20, "outputTokens": 1},
        HE,
    ]


# --- tiers and the upstream worked example ----------------------------------------------------------


def test_upstream_worked_example_gives_upstream_tiers() -> None:
    conv = build(
        HS,
        {"type": "text", "runId": "A", "id": "t1", "content": "Let me check"},
        {"type": "tool_call", "runId": "A", "id": "tc1", "name": "bash", "input": {}},
        {"type": "tool_result", "runId": "A", "id": "tc1", "name": "bash", "output": "ok"},
        {"type": "text", "runId": "A", "id": "t2", "content": "Done"},
        HE,
    )
    assert [b.id for b in q.blocks_of(conv, "msg:1")] == [
        "block:A:harness_start",
        "block:A:t1",
        "block:tc1",
        "block:tc1:result",
    ]
    assert [b.id for b in q.blocks_of(conv, "msg:2")] == ["block:A:t2", "block:A:harness_end"]
    assert default_active(conv).message_ids == ("msg:1", "msg:2")
    assert q.block_of(conv, "chunk:2").id == "block:A:t1"
    assert q.message_of(conv, "block:tc1").id == "msg:1"
    assert [c.id for c in q.chunks_of(conv, "block:A:t1")] == ["chunk:2"]


def test_streaming_deltas_join_one_block_and_keep_arrival_seq() -> None:
    conv = build(
        {"type": "text", "runId": "r", "id": "t", "content": "Hel"},
        {"type": "text", "runId": "r", "id": "t", "content": "lo"},
    )
    (block,) = q.blocks_of(conv, "msg:1")
    chunks = q.chunks_of(conv, block.id)
    assert [c.seq for c in chunks] == [1, 2]
    assert (block.first_seq, block.last_seq) == (1, 2)
    assert texts(conv, "msg:1") == ["Hello"]
    assert q.chunk_message(conv, 2) == ("msg:1", "main", None)
    for seq in (0, 3):
        with pytest.raises(KeyError, match="no chunk"):
            q.chunk_message(conv, seq)


def test_upstream_generator_workload_counts_match_upstream() -> None:
    conv = reduce_conversation_events(create_conversation(), rlm_stream(100, 50, 1))
    # spec §8.1: chunks = events, blocks = 2 + 4N, messages = N (5804 nodes in all)
    assert (conv.chunk_count, conv.block_count, conv.message_count) == (5302, 402, 100)
    assert q.run_status(conv, "run-0") == "complete"


def test_multi_run_workload_nests_each_child_in_its_own_thread() -> None:
    conv = reduce_conversation_events(create_conversation(), rlm_stream(5, 3, 3))
    assert q.thread_ids(conv) == (MAIN_THREAD, "run-0", "run-1", "run-2")
    spawns = q.spawns_from(conv, "block:run-root:spawn1")
    assert [(s.run_id, s.kind, s.thread_id) for s in spawns] == [("run-1", "subagent", "run-1")]
    assert spawns[0].invocation_chunk_id == q.run_chunks(conv, "run-1")[0].id
    assert len(default_active(conv, "run-1")) == 5
    # the main path holds only the root's own blocks
    for message in walk(conv):
        assert {b.run_id for b in q.blocks_of(conv, message.id)} == {"run-root"}


# --- §9 #1: arrival order ---------------------------------------------------------------------------


def test_provider_runs_keep_arrival_order_and_turn_boundaries() -> None:
    conv = build(*agent_with_provider_runs())
    assert default_active(conv).message_ids == ("msg:1", "msg:2")
    assert texts(conv, "msg:1") == ["Let me check"]
    assert kinds(conv, "msg:1") == ["harness_start", "text", "usage", "tool_call", "tool_result"]
    assert texts(conv, "msg:2") == ["Done"]
    spawn = q.spawn_of(conv, "P2")
    assert spawn is not None
    assert (spawn.kind, spawn.trigger_block_id) == ("call", "block:A/x:result")
    assert q.usage_totals(conv).input_tokens == 30
    assert q.usage_totals(conv, "P1").output_tokens == 2


# --- §9 #5: unique ids ------------------------------------------------------------------------------


def test_repeated_block_keys_get_new_ids_and_keep_old_chunks() -> None:
    conv = build(
        HS,
        {"type": "error", "runId": "A", "message": "first"},
        {"type": "text", "runId": "A", "id": "t", "content": "retrying"},
        {"type": "error", "runId": "A", "message": "second"},
        {"type": "tool_call", "runId": "A", "id": "tc", "name": "x", "input": 1},
        {"type": "tool_result", "runId": "A", "id": "tc", "name": "x", "output": 1},
        {"type": "tool_call", "runId": "A", "id": "tc", "name": "x", "input": 2},
    )
    ids = [b.id for b in q.iter_blocks(conv)]
    assert len(ids) == len(set(ids))
    assert "block:A:error" in ids
    assert "block:A:error#2" in ids
    assert "block:tc#2" in ids
    assert q.chunks_of(conv, "block:A:error")[0].event.message == "first"  # type: ignore[union-attr]
    assert q.chunks_of(conv, "block:A:error#2")[0].event.message == "second"  # type: ignore[union-attr]
    edge_ids = [e.id for e in iter_edges(conv)]
    assert len(edge_ids) == len(set(edge_ids))


# --- §9 #6: duplicates ------------------------------------------------------------------------------


def test_duplicate_event_id_is_a_no_op() -> None:
    first = {"type": "text", "runId": "r", "id": "t", "content": "Hi", "eventId": "e1"}
    conv = build(first)
    again = reduce_conversation(conv, first)
    assert again is conv
    assert texts(again, "msg:1") == ["Hi"]


def test_event_id_seen_only_in_a_later_version_is_not_a_duplicate_for_an_earlier_one() -> None:
    base = create_conversation()
    first = reduce_conversation(base, {"type": "user", "runId": "u", "content": "a", "eventId": "e1"})
    forked = reduce_conversation(base, {"type": "user", "runId": "u", "content": "a", "eventId": "e1"})
    assert forked is not base
    assert forked.chunk_count == first.chunk_count == 1


# --- §9 #10: late parents ---------------------------------------------------------------------------


def test_child_arriving_before_its_parent_is_linked_when_the_parent_arrives() -> None:
    child = [
        {"type": "harness_start", "runId": "S", "parentId": "A/x"},
        {"type": "text", "runId": "S", "id": "s1", "content": "searching"},
    ]
    early = build(HS, *child)
    assert q.unresolved_parents(early) == {"A/x": ("S",)}
    assert q.spawn_of(early, "S") is None
    late = reduce_conversation(early, {"type": "tool_call", "runId": "A", "id": "A/x", "name": "agent"})
    assert q.unresolved_parents(late) == {}
    spawn = q.spawn_of(late, "S")
    assert spawn is not None
    assert (spawn.trigger_block_id, spawn.kind, spawn.thread_id) == ("block:A/x", "subagent", "S")
    assert q.run_info(late, "S").parent_run_id == "A"
    # the earlier version still reports the parent as missing
    assert q.unresolved_parents(early) == {"A/x": ("S",)}


def test_unresolved_parents_are_reported_at_stream_end() -> None:
    conv = close_stream(build({"type": "harness_start", "runId": "S", "parentId": "ghost"}))
    (diag,) = q.diagnostics(conv)
    assert (diag.code, diag.subject) == ("unresolved_parent", "ghost")
    assert "S" in diag.message


# --- §9 #2, #9: status and stream end ----------------------------------------------------------------


def test_lifecycle_less_runs_inherit_status_and_close_at_stream_end() -> None:
    events = agent_with_provider_runs()
    streaming = build(*events[:-1])
    assert q.run_status(streaming, "P2") == "streaming"
    assert q.run_status(build(*events), "P2") == "complete"
    closed = close_stream(streaming)
    assert q.run_status(closed, "A") == "aborted"
    assert q.run_status(closed, "P1") == "aborted"
    assert q.run_status(streaming, "A") == "streaming"  # older version unchanged
    orphan = close_stream(build({"type": "text", "runId": "P", "id": "t", "content": "x"}))
    assert q.run_status(orphan, "P") == "complete"
    assert q.is_stream_closed(orphan)
    reopened = reduce_conversation(
        closed, {"type": "text", "runId": "P9", "parentId": "A", "id": "z", "content": "."}
    )
    assert not q.is_stream_closed(reopened)
    assert q.run_status(reopened, "A") == "streaming"  # its new provider call shows it is alive
    assert q.run_status(closed, "A") == "aborted"
    unrelated = reduce_conversation(closed, {"type": "user", "runId": "u2", "content": "hello?"})
    assert q.run_status(unrelated, "A") == "aborted"  # stays closed until it sends again
    resumed = reduce_conversation(unrelated, {"type": "text", "runId": "A", "id": "r", "content": "back"})
    assert q.run_status(resumed, "A") == "streaming"
    assert q.run_status(resumed, "P1") == "streaming"


def test_error_marks_only_its_run() -> None:
    conv = build(
        HS,
        {"type": "text", "runId": "P1", "parentId": "A", "id": "t", "content": "x"},
        {"type": "error", "runId": "P1", "message": "rate limited"},
    )
    assert q.run_status(conv, "P1") == "error"
    assert q.run_status(conv, "A") == "streaming"
    assert not q.message_health(conv, "msg:1").clean


# --- §9 #3, #7: denied calls and tool exceptions -----------------------------------------------------


def test_denied_tool_call_stays_visible() -> None:
    conv = build(
        HS,
        {
            "type": "relay",
            "runId": "A",
            "id": "rl",
            "kind": "permission",
            "toolCallId": "A/x",
            "tool": "bash",
            "params": {"cmd": "rm -rf /"},
        },
        {"type": "relay_resolved", "relayId": "rl", "approved": False, "reason": "no"},
        {
            "type": "tool_result",
            "runId": "A",
            "id": "A/x",
            "name": "bash",
            "output": {"status": "denied", "reason": "no"},
        },
    )
    info = q.tool_call(conv, "A/x")
    assert info is not None
    assert (info.status, info.synthesized, info.name, info.input) == (
        "denied",
        True,
        "bash",
        {"cmd": "rm -rf /"},
    )
    assert info.relay_id == "rl"
    (relay,) = q.relays(conv)
    assert relay.status == "denied"
    assert relay.decision is not None
    assert relay.decision.reason == "no"
    assert q.pending_relays(conv) == ()
    # collapsed views keep the result block: it stands for the call
    collapsed = conv.with_view(ViewOptions(collapse_tools=True))
    assert "tool_result" in kinds(conv, "msg:1")
    assert [b.kind for b in q.visible_blocks(collapsed, "msg:1")] == ["harness_start", "tool_result"]


def test_pending_relay_until_decided() -> None:
    conv = build(
        HS,
        {
            "type": "relay",
            "runId": "A",
            "id": "rl",
            "kind": "permission",
            "toolCallId": "A/x",
            "tool": "bash",
        },
    )
    assert [r.relay_id for r in q.pending_relays(conv)] == ["rl"]
    decided = reduce_conversation(conv, {"type": "relay_resolved", "relayId": "rl", "approved": True})
    assert q.pending_relays(decided) == ()
    assert q.relay_info(decided, "rl").status == "approved"  # type: ignore[union-attr]
    assert [r.relay_id for r in q.pending_relays(conv)] == ["rl"]


def test_tool_exception_is_a_tool_result_with_an_error() -> None:
    conv = build(
        HS,
        {"type": "tool_call", "runId": "A", "id": "A/x", "name": "bash", "input": {}},
        {"type": "error", "runId": "A", "message": "tool crashed"},
        {"type": "text", "runId": "P2", "parentId": "A", "id": "t", "content": "It failed, sorry"},
        HE,
    )
    info = q.tool_call(conv, "A/x")
    assert info is not None
    assert (info.status, info.error, info.output) == ("error", "tool crashed", {"error": "tool crashed"})
    assert q.run_status(conv, "A") == "complete"
    assert texts(conv, "msg:2") == ["It failed, sorry"]
    assert q.message_health(conv, "msg:1").clean


def test_tool_progress_is_indexed_by_call() -> None:
    conv = build(
        HS,
        {"type": "tool_call", "runId": "A", "id": "c", "name": "exec"},
        {
            "type": "tool_progress",
            "runId": "A",
            "id": "p1",
            "toolCallId": "c",
            "name": "exec",
            "content": {"channel": "stdout", "data": "a"},
        },
        {
            "type": "tool_progress",
            "runId": "A",
            "id": "p2",
            "toolCallId": "c",
            "name": "exec",
            "content": {"channel": "stdout", "data": "b"},
        },
    )
    info = q.tool_call(conv, "c")
    assert info is not None
    assert info.status == "pending"
    assert info.progress_chunk_ids == ("chunk:3", "chunk:4")
    assert q.message_health(conv, "msg:1").unresolved_call_ids == ("c",)


# --- §9 #13: cycle guards ---------------------------------------------------------------------------


def test_parent_cycles_terminate() -> None:
    conv = build(
        {"type": "text", "runId": "X", "parentId": "Y", "id": "x", "content": "."},
        {"type": "text", "runId": "Y", "parentId": "X", "id": "y", "content": "."},
    )
    assert q.run_status(conv, "X") == "streaming"
    assert q.run_info(conv, "X").parent_run_id == "Y"
    assert q.run_info(conv, "Y").parent_run_id == "X"


def test_walk_stops_on_a_repeated_id() -> None:
    conv = build({"type": "user", "runId": "u", "content": "hi"})
    looped = Active(thread_id=MAIN_THREAD, tip_id="msg:1", message_ids=("msg:1", "msg:1"))
    assert [m.id for m in walk(conv, looped)] == ["msg:1"]


# --- wire forms, validation, persistence ------------------------------------------------------------


def test_wire_forms_are_accepted() -> None:
    conv = reduce_conversation(create_conversation(), '{"type":"user","runId":"u","content":"hi"}')
    conv = reduce_conversation(conv, b'{"type":"text","runId":"a","id":"t","content":"yo"}')
    conv = reduce_conversation(conv, Text(run_id="a", id="t", content="!"))
    assert conv.chunk_count == 3


def test_batch_is_validated_whole() -> None:
    base = build({"type": "user", "runId": "u", "content": "hi"})
    with pytest.raises(EventError) as excinfo:
        reduce_conversation_events(
            base, [{"type": "text", "runId": "a", "id": "t", "content": "ok"}, {"type": "text", "runId": "a"}]
        )
    assert excinfo.value.index == 1
    assert base.chunk_count == 1
    assert q.thread_messages(base, MAIN_THREAD)[0].id == "msg:1"


def test_connected_sets_the_session_and_makes_no_chunk() -> None:
    conv = build({"type": "connected", "sessionId": "s-1"})
    assert q.session_id(conv) == "s-1"
    assert conv.chunk_count == 0


def test_older_versions_answer_as_before() -> None:
    events = agent_with_provider_runs()
    versions = [create_conversation()]
    for event in events:
        versions.append(reduce_conversation(versions[-1], event))
    before = [
        (v.chunk_count, default_active(v).message_ids, [texts(v, m) for m in default_active(v)])
        for v in versions
    ]
    # extend an old version (forks the lineage) and the head again
    reduce_conversation(versions[3], {"type": "text", "runId": "Z", "id": "z", "content": "fork"})
    reduce_conversation(versions[-1], {"type": "user", "runId": "u2", "content": "more"})
    after = [
        (v.chunk_count, default_active(v).message_ids, [texts(v, m) for m in default_active(v)])
        for v in versions
    ]
    assert before == after


def test_forking_an_old_version_equals_building_fresh() -> None:
    events = agent_with_provider_runs()
    head = build(*events)
    del head
    mid = build(*events[:4])
    extra = {"type": "text", "runId": "Z", "id": "z", "content": "fork"}
    forked = reduce_conversation(mid, extra)
    fresh = build(*events[:4], extra)
    assert [m.block_ids for m in q.iter_messages(forked)] == [m.block_ids for m in q.iter_messages(fresh)]


# --- hyperedges -------------------------------------------------------------------------------------


def test_edges_up_and_down_the_tiers() -> None:
    conv = build(*agent_with_provider_runs())
    assert {e.type for e in edges_of(conv, "chunk:2")} == {"block", "sequence", "spawn"}
    assert {e.type for e in edges_of(conv, "chunk:3")} == {"block", "sequence"}
    (block_edge,) = find_edges(conv, type="block", node="block:P1:t1")
    assert block_edge.roles == {"part": ("chunk:2", "chunk:3"), "whole": ("block:P1:t1",)}
    (message_edge,) = find_edges(conv, type="message", node="block:P1:t1", role="part")
    assert message_edge.id == "me:msg:1"
    spawn_edges = find_edges(conv, type="spawn", node="block:A:harness_start", role="trigger")
    assert [e.roles["invocation"] for e in spawn_edges] == [("chunk:2",)]
    (seq,) = find_edges(conv, type="sequence", node="msg:2")
    assert seq.roles == {"predecessor": ("msg:1",), "successor": ("msg:2",)}
    all_edges = list(iter_edges(conv))
    for edge in all_edges:
        for ids in edge.roles.values():
            for node_id in ids:
                assert edge in edges_of(conv, node_id)


def test_unknown_ids_raise_key_error_naming_them() -> None:
    conv = build({"type": "user", "runId": "u", "content": "hi"})
    with pytest.raises(KeyError, match="msg:9"):
        q.get_message(conv, "msg:9")
    with pytest.raises(KeyError, match="block:nope"):
        q.get_block(conv, "block:nope")
    with pytest.raises(KeyError, match="chunk:5"):
        q.get_chunk(conv, "chunk:5")


# --- selective views --------------------------------------------------------------------------------


def test_view_options_filter_blocks_and_spawns() -> None:
    conv = build(
        HS,
        {"type": "reasoning", "runId": "P1", "parentId": "A", "id": "r", "content": "hmm"},
        {"type": "text", "runId": "P1", "parentId": "A", "id": "t", "content": "ok"},
        {"type": "tool_call", "runId": "A", "id": "A/s", "name": "agent"},
        {"type": "harness_start", "runId": "S", "parentId": "A/s"},
        {"type": "tool_result", "runId": "A", "id": "A/s", "name": "agent", "output": "done"},
    )
    assert kinds(conv, "msg:1") == ["harness_start", "reasoning", "text", "tool_call", "tool_result"]
    view = ViewOptions(hide_reasoning=True, collapse_tools=True, subagents="hide")
    hidden = conv.with_view(view)
    assert hidden.view == view
    assert [b.kind for b in q.visible_blocks(hidden, "msg:1")] == ["harness_start", "text", "tool_call"]
    assert q.visible_spawns(hidden, "block:A/s") == ()
    assert [s.run_id for s in q.visible_spawns(conv, "block:A/s")] == ["S"]
    assert conv.view == ViewOptions()


def test_repl_run_data_without_scans() -> None:
    conv = reduce_conversation_events(create_conversation(), rlm_stream(2, 2, 1))
    chunks = q.run_chunks(conv, "run-0")
    assert [c.kind for c in chunks[:6]] == [
        "harness_start",
        "text",
        "repl_input",
        "repl_progress",
        "repl_progress",
        "repl_output",
    ]
    assert q.block_text(conv, "block:run-0:turn0:progress") == "output chunk 0\noutput chunk 1\n"
    assert q.block_text(conv, "block:run-0:run-0:turn1:text") == "Reasoning for turn 1..."
    assert q.block_text(conv, "block:run-0:turn0") == ""
    child = reduce_conversation_events(
        conv, [{"type": "harness_start", "runId": "kid", "parentId": "run-0:turn1"}]
    )
    (spawn,) = q.child_runs(child, "run-0")
    assert (spawn.run_id, spawn.kind, spawn.trigger_block_id) == ("kid", "repl", "block:run-0:turn1")
    assert q.child_runs(conv, "run-0") == ()


def test_server_level_error_without_run_lands_in_the_stream_run() -> None:
    conv = build({"type": "error", "message": "server exploded"})
    (block,) = q.iter_blocks(conv)
    assert (block.run_id, block.id, block.kind) == ("_stream", "block:_stream:error", "error")
    assert q.run_status(conv, "_stream") == "error"


def test_recovered_rlm_error_does_not_stick_but_a_fatal_one_does() -> None:
    recovered = build(
        {"type": "harness_start", "runId": "R", "maxIterations": 3},
        {"type": "error", "runId": "R", "message": "Response contained no code block."},
        {"type": "harness_end", "runId": "R", "reason": "final", "iterations": 2},
    )
    assert q.run_status(recovered, "R") == "complete"
    fatal = build(HS, {"type": "error", "runId": "A", "message": "API down"}, HE)
    assert q.run_status(fatal, "A") == "error"


def test_conversation_converts_to_plain_json() -> None:
    from convograph import to_jsonable

    conv = build(*agent_with_provider_runs())
    data = to_jsonable(conv)
    assert data["threads"]["main"]["activeMessageIds"] == ["msg:1", "msg:2"]
    assert data["blocks"][1]["chunkIds"] == ["chunk:2", "chunk:3"]
    assert data["chunks"][1]["event"] == {
        "type": "text",
        "id": "t1",
        "content": "Let me ",
        "runId": "P1",
        "parentId": "A",
    }


def test_paged_sequence_reads_across_pages() -> None:
    from convograph.hypergraph.model import PAGE, Paged

    paged: Paged[int] = Paged()
    for i in range(2 * PAGE + 5):
        paged.append(i)
    assert len(paged) == 2 * PAGE + 5
    assert [paged[i] for i in (0, PAGE - 1, PAGE, 2 * PAGE, 2 * PAGE + 4)] == [
        0,
        PAGE - 1,
        PAGE,
        2 * PAGE,
        2 * PAGE + 4,
    ]
    assert list(paged.head(PAGE + 2)) == list(range(PAGE + 2))
    assert list(paged.head(10**6)) == list(range(2 * PAGE + 5))
    assert list(paged.head(0)) == []


def test_late_blocks_rejoin_the_ended_run_and_a_restart_opens_a_new_turn() -> None:
    conv = build(
        HS,
        {"type": "text", "runId": "A", "id": "t", "content": "hi"},
        HE,
        {"type": "usage", "runId": "A", "inputTokens": 1, "outputTokens": 1},
    )
    assert kinds(conv, "msg:1") == ["harness_start", "text", "harness_end", "usage"]
    restarted = reduce_conversation(conv, HS)
    assert kinds(restarted, "msg:2") == ["harness_start"]
    assert q.run_status(restarted, "A") == "streaming"


def test_a_reused_call_id_pairs_each_call_with_its_own_result() -> None:
    conv = build(
        HS,
        {"type": "tool_call", "runId": "A", "id": "tc", "name": "bash", "input": {"i": 1}},
        {"type": "tool_result", "runId": "A", "id": "tc", "name": "bash", "output": "one"},
        {"type": "text", "runId": "A", "id": "t", "content": "again"},
        {"type": "tool_call", "runId": "A", "id": "tc", "name": "bash", "input": {"i": 2}},
    )
    second = q.tool_call_for_block(conv, "block:tc#2")
    assert second is not None
    assert (second.input, second.status, second.result_block_id) == ({"i": 2}, "pending", None)
    first = q.tool_call_for_block(conv, "block:tc")
    assert first is not None
    assert (first.input, first.output, first.status) == ({"i": 1}, "one", "complete")
    assert q.message_health(conv, "msg:2").unresolved_call_ids == ("tc",)
    done = reduce_conversation(
        conv, {"type": "tool_result", "runId": "A", "id": "tc", "name": "bash", "output": "two"}
    )
    latest = q.tool_call(done, "tc")
    assert latest is not None
    assert (latest.output, latest.result_block_id) == ("two", "block:tc:result#2")
    assert q.diagnostics(done) == ()
    assert q.tool_call(done, "tc", 0).output == "one"  # type: ignore[union-attr]


def test_concurrent_reduces_on_one_version_each_get_their_own_result() -> None:
    import threading

    base = build(*agent_with_provider_runs()[:4])
    results: dict[int, Conversation] = {}

    def work(n: int) -> None:
        conv = base
        for i in range(50):
            conv = reduce_conversation(
                conv, {"type": "text", "runId": f"W{n}", "id": "t", "content": f"{i} "}
            )
        results[n] = conv

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n, conv in results.items():
        (block,) = q.run_blocks(conv, f"W{n}")
        assert q.block_text(conv, block.id) == "".join(f"{i} " for i in range(50))
        assert conv.chunk_count == base.chunk_count + 50
        assert {r for r in q.run_ids(conv) if r.startswith("W")} == {f"W{n}"}
    assert base.chunk_count == 4


def test_conversations_compare_by_content() -> None:
    events = agent_with_provider_runs()
    one = build(*events)
    two = build(*events)
    assert one == two
    assert one is not two
    assert one != build(*events[:-1])
    assert one == one.with_view(ViewOptions(hide_reasoning=True))
    assert one != "not a conversation"


def test_batch_on_an_older_version_starting_with_a_duplicate() -> None:
    first = {"type": "user", "runId": "u", "content": "a", "eventId": "e1"}
    v1 = build(first)
    reduce_conversation(v1, {"type": "user", "runId": "u", "content": "b"})  # v1 is no longer the head
    out = reduce_conversation_events(
        v1, [first, {"type": "user", "runId": "u", "content": "c", "eventId": "e2"}]
    )
    assert [texts_of_user(out, m) for m in default_active(out)] == ["a", "c"]
    assert out.chunk_count == 2


def texts_of_user(conv: Conversation, message_id: str) -> str:
    (block,) = q.blocks_of(conv, message_id)
    content = q.chunks_of(conv, block.id)[0].event.content  # type: ignore[union-attr]
    assert isinstance(content, str)
    return content


def test_bulk_rows_match_the_records() -> None:
    """`block_rows`, `chunk_seqs` and `chunk_event` (bulk readers' forms) agree with `blocks_of`,
    `chunks_of` and `get_chunk`, at the newest version and at an older one."""
    events = list(rlm_stream(3, 2, 2))
    versions = [reduce_conversation_events(create_conversation(), events[: len(events) // 2])]
    versions.append(reduce_conversation_events(versions[0], events[len(events) // 2 :]))
    for conv in versions:
        for message in q.iter_messages(conv):
            blocks = q.blocks_of(conv, message.id)
            rows = q.block_rows(conv, message.id)
            assert [(r.id, r.kind, r.run_id, r.first_seq, r.chunk_count) for r in rows] == [
                (b.id, b.kind, b.run_id, b.first_seq, len(b.chunk_ids)) for b in blocks
            ]
            for block in blocks:
                chunks = q.chunks_of(conv, block.id)
                assert q.chunk_seqs(conv, block.id) == tuple(chunk.seq for chunk in chunks)
                assert all(q.chunk_event(conv, chunk.seq) is chunk.event for chunk in chunks)
        with pytest.raises(KeyError, match="no chunk with seq"):
            q.chunk_event(conv, conv.chunk_count + 1)


# --- shown-path bulk readers (one-shot projections) ---------------------------------------------------


def _reference_shown(conv: Conversation, active: Active, nested: bool) -> tuple[list[q.Block], list[Any]]:
    """The blocks (arrival order) and summary messages (seq order) on the shown paths, walked with
    the record queries: the active path, every thread spawned from a shown block (nested ones
    only when ``nested``), and threads whose parent has not arrived."""
    pending = [active]
    if active.thread_id == MAIN_THREAD:
        orphans = [t for t in q.thread_ids(conv) if t != MAIN_THREAD and q.spawn_of(conv, t) is None]
        pending = [default_active(conv, t) for t in orphans] + pending
    blocks: list[q.Block] = []
    summaries: list[tuple[int, int, Any]] = []
    seen: set[str] = set()
    while pending:
        path = pending.pop()
        if path.thread_id in seen:
            continue
        seen.add(path.thread_id)
        for message in walk(conv, path):
            if message.summary is not None:
                seq = next((b.first_seq for s in message.summary.source_ids for b in q.blocks_of(conv, s)), 0)
                summaries.append((seq, len(summaries), (message, path.thread_id)))
                continue
            for block in q.blocks_of(conv, message.id):
                blocks.append(block)
                for spawn in q.spawns_from(conv, block.id):
                    shown = nested or spawn.kind not in ("subagent", "repl")
                    if shown and spawn.thread_id != path.thread_id and q.spawn_of(conv, spawn.run_id):
                        pending.append(default_active(conv, spawn.thread_id))
    blocks.sort(key=lambda b: b.first_seq)
    summaries.sort(key=lambda row: (row[0], row[1]))
    return blocks, [(seq, payload) for seq, _, payload in summaries]


def _content(chunk: q.Chunk) -> str:
    content = getattr(chunk.event, "content", None)
    assert isinstance(content, str)
    return content


def _conversations_for_bulk_readers() -> list[Conversation]:
    events = list(rlm_stream(3, 2, 2))
    half = reduce_conversation_events(create_conversation(), events[: len(events) // 2])
    full = reduce_conversation_events(half, events[len(events) // 2 :])
    special = build(
        {"type": "user", "runId": "u1", "content": "hi"},
        {"type": "harness_start", "runId": "A", "parentId": "u1:user"},
        {"type": "reasoning", "runId": "A", "id": "r1", "content": "hm "},
        {"type": "reasoning", "runId": "A", "id": "r1", "content": "ok", "signature": "sig-1"},
        {"type": "reasoning", "runId": "A", "id": "r1", "content": "", "signature": "sig-2"},
        {"type": "tool_call", "runId": "A", "id": "A/c", "name": "task", "input": {}},
        {"type": "harness_start", "runId": "S", "parentId": "A/c"},
        {"type": "text", "runId": "S", "id": "s1", "content": "sub"},
        {
            "type": "tool_progress",
            "runId": "A",
            "id": "p1",
            "toolCallId": "A/c",
            "name": "task",
            "content": 1,
        },
        {
            "type": "tool_progress",
            "runId": "A",
            "id": "p2",
            "toolCallId": "A/c",
            "name": "task",
            "content": 2,
        },
        {"type": "tool_result", "runId": "A", "id": "A/c", "name": "task", "output": "done"},
        {"type": "tool_call", "runId": "A", "id": "A/d", "name": "bash", "input": {}},
        {"type": "error", "runId": "A", "message": "boom"},
        {"type": "text", "runId": "O", "parentId": "not-yet", "id": "o1", "content": "orphan"},
        {"type": "harness_end", "runId": "A"},
        {"type": "user", "runId": "u2", "content": "more"},
        {"type": "text", "runId": "B", "parentId": "u2:user", "id": "b1", "content": "reply"},
    )
    ids = default_active(special).message_ids
    summarized = summarize_range(special, ids[0], ids[1], "the start")
    return [half, full, special, summarized]


def _plain_conversations() -> list[Conversation]:
    """One thread, never edited or summarised: `shown_paths` shows every block without a walk
    (`queries._shows_everything`), at the newest and an older version."""
    events: list[dict[str, Any]] = []
    for turn in range(3):
        run = f"a{turn}"
        user: dict[str, Any] = {"type": "user", "runId": f"u{turn}", "content": f"q{turn}"}
        if turn:
            user["parentId"] = f"a{turn - 1}:harness_end"
        events += [
            user,
            {"type": "harness_start", "runId": run, "parentId": f"u{turn}:user"},
            {"type": "reasoning", "runId": f"p{turn}", "parentId": run, "id": f"r{turn}", "content": "hm "},
            {"type": "reasoning", "runId": f"p{turn}", "parentId": run, "id": f"r{turn}", "content": "ok"},
            {"type": "text", "runId": f"p{turn}", "parentId": run, "id": f"t{turn}", "content": "a"},
            {"type": "text", "runId": f"p{turn}", "parentId": run, "id": f"t{turn}", "content": "b"},
            {"type": "tool_call", "runId": run, "id": f"{run}/c", "name": "exec", "input": {}},
            *(
                {
                    "type": "tool_progress",
                    "runId": run,
                    "id": f"pg{turn}.{i}",
                    "toolCallId": f"{run}/c",
                    "name": "exec",
                    "content": i,
                }
                for i in range(2)
            ),
            {"type": "tool_result", "runId": run, "id": f"{run}/c", "name": "exec", "output": "ok"},
            {"type": "harness_end", "runId": run},
        ]
    half = build(*events[: len(events) // 2 + 3])
    full = reduce_conversation_events(half, events[len(events) // 2 + 3 :])  # half: an older version
    return [full, half]


@pytest.mark.parametrize("nested", [True, False])
def test_shown_paths_of_a_plain_conversation_show_every_block(nested: bool) -> None:
    """The walk-free case of `shown_paths` reads what the record queries give (the readers below),
    and is taken only for the thread's own default path."""
    for conv in _plain_conversations():
        active = default_active(conv)
        assert q._shows_everything(conv, active, q.thread_ids(conv), default_active)
        blocks, summaries = _reference_shown(conv, active, nested)
        assert not summaries
        assert len(q.shown_paths(conv, active, nested=nested)) == len(blocks) == conv.block_count
    full, half = _plain_conversations()
    assert not q._shows_everything(half, default_active(full), q.thread_ids(half), default_active)
    with pytest.raises(KeyError, match="no message"):  # a path of a later version
        q.shown_paths(half, default_active(full), nested=nested)
    shorter = Active(thread_id="main", tip_id=None, message_ids=default_active(full).message_ids[:-1])
    assert not q._shows_everything(full, shorter, q.thread_ids(full), default_active)


@pytest.mark.parametrize("nested", [True, False])
def test_shown_path_readers_match_the_records(nested: bool) -> None:
    """`shown_paths` (`feed`, `blocks` / `chunk_events`, `block_columns`, `block_records`,
    `spawn_edges` / `spawn_edge_columns`, `summaries`) reads the same blocks, chunks, texts and
    spawn links as the record queries, at the newest and an older version."""
    seen_kinds: set[str] = set()
    seen_summaries = seen_signatures = 0
    for conv in [*_conversations_for_bulk_readers(), *_plain_conversations()]:
        active = default_active(conv)
        blocks, summaries = _reference_shown(conv, active, nested)
        seen_kinds.update(b.kind for b in blocks)
        seen_summaries += len(summaries)
        shown = q.shown_paths(conv, active, nested=nested)
        assert len(shown) == len(blocks)
        assert [(r.seq, r.message_id, r.thread_id, r.text) for r in shown.summaries] == [
            (seq, m.id, thread, m.summary.text) for seq, (m, thread) in summaries
        ]
        columns = shown.block_columns(2)
        assert columns.ids == [b.id for b in blocks]
        assert columns.kinds == [b.kind for b in blocks]
        assert columns.run_ids == [b.run_id for b in blocks]
        assert columns.first_seqs == [b.first_seq for b in blocks]
        assert all(
            e is q.get_chunk(conv, b.chunk_ids[0]).event
            for e, b in zip(columns.first_events, blocks, strict=True)
        )
        table = shown.block_table()  # from the store's columns
        assert table.ids == columns.ids
        assert table.kinds == columns.kinds
        assert table.run_ids == columns.run_ids
        assert [i + 1 for i in table.first_chunks] == columns.first_seqs
        if len(blocks) == conv.block_count:  # every block shown: the run predecessors too
            last: dict[str, int] = {}
            expected_previous = []
            for i, run in enumerate(columns.run_ids):
                expected_previous.append(last.get(run, -1))
                last[run] = i
            assert table.run_previous == expected_previous
        else:
            assert table.run_previous is None
        records, events = shown.block_records()
        assert [(r.id, r.kind, r.run) for r in records] == [(b.id, b.kind, b.run_id) for b in blocks]
        assert [r.chunks[0] + 1 for r in records] == [b.first_seq for b in blocks]
        assert all(  # the version's chunks of each block, and their events
            [events[i] for i in r.chunks if i < conv.chunk_count]
            == [c.event for c in q.chunks_of(conv, b.id)]
            for r, b in zip(records, blocks, strict=True)
        )
        whole = [b for b in blocks if b.kind in ("text", "reasoning")]
        assert columns.texts == {
            b.id: "".join(_content(c) for c in q.chunks_of(conv, b.id)[:2]) for b in whole
        }
        # feed: a text / reasoning block once (first chunk), every other block chunk by chunk
        fed = sorted(
            (chunk.seq, chunk.event, block.id)
            for block in blocks
            for chunk in (q.chunks_of(conv, block.id)[:1] if block in whole else q.chunks_of(conv, block.id))
        )
        feed = shown.feed()
        assert len(feed.events) == len(fed)
        assert all(a is b for a, (_, b, _) in zip(feed.events, fed, strict=True))
        assert [b.id for b in feed.blocks] == [block_id for _, _, block_id in fed]
        assert feed.seqs == ([seq for seq, _, _ in fed] if summaries else None)
        assert feed.texts == {b.id: q.block_text(conv, b.id) for b in whole}
        signatures = {}
        for b in whole:
            sent = [
                signature
                for c in q.chunks_of(conv, b.id)
                if (signature := getattr(c.event, "signature", None)) is not None
            ]
            if b.kind == "reasoning" and sent:
                signatures[b.id] = sent[-1]
        assert feed.signatures == signatures
        seen_signatures += len(signatures)
        # blocks / chunk_events (the one-shot block walk): the records and the events
        assert [r.id for r in shown.blocks()] == [r.id for r in records]
        assert shown.chunk_events == tuple(events)
        position = {b.id: i for i, b in enumerate(blocks)}
        expected_edges = [
            (position[b.id], position[q.get_chunk(conv, spawn.invocation_chunk_id).block_id])
            for b in blocks
            for spawn in q.spawns_from(conv, b.id)
            if q.get_chunk(conv, spawn.invocation_chunk_id).block_id in position
        ]
        assert shown.spawn_edges() == expected_edges
        triggers, targets = shown.spawn_edge_columns()
        assert list(zip(triggers, targets, strict=True)) == expected_edges
    half, full, special, _ = _conversations_for_bulk_readers()
    with pytest.raises(KeyError, match="no message"):  # a path of a later version
        q.shown_paths(half, default_active(full), nested=nested)
    # a thread whose parent has not arrived ("O") is shown unless orphans=False
    for orphans in (True, False):
        shown = q.shown_paths(special, default_active(special), nested=nested, orphans=orphans)
        assert ("O" in shown.block_columns().run_ids) is orphans
    assert {"tool_progress", "reasoning", "tool_error"} <= seen_kinds
    assert seen_summaries
    assert seen_signatures


def test_run_thread_and_spawn_row_match_the_records() -> None:
    for conv in [*_conversations_for_bulk_readers(), *_plain_conversations()]:
        only = q.runs_of_only_thread(conv, MAIN_THREAD)
        if q.thread_ids(conv) == (MAIN_THREAD,):
            assert only is not None
            assert set(q.run_ids(conv)) <= set(only)
            assert {q.run_thread(conv, r)[0] for r in q.run_ids(conv)} == {MAIN_THREAD}
        else:
            assert only is None
        for run_id in q.run_ids(conv):
            info = q.run_info(conv, run_id)
            assert q.run_thread(conv, run_id) == (info.thread_id, info.parent_run_id)
            spawn = q.spawn_of(conv, run_id)
            expected = None if spawn is None else (spawn.kind, spawn.trigger_block_id)
            assert q.spawn_row(conv, run_id) == expected
        assert q.run_threads(conv) == {r: q.run_info(conv, r).thread_id for r in q.run_ids(conv)}
        own = {r: step[0] for r in q.run_ids(conv) if (step := q.run_status_step(conv, r))[0] is not None}
        assert q.own_run_statuses(conv) == own
        parents = {r: step[1] for r in q.run_ids(conv) if (step := q.run_status_step(conv, r))[1] is not None}
        assert {r: p for r, p in q.run_parents(conv).items() if r not in own} == parents
        assert all(q.run_thread(conv, r)[1] == p for r, p in q.run_parents(conv).items())
        with pytest.raises(KeyError):
            q.run_thread(conv, "no-such-run")
