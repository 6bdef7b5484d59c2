"""Projections of the hypergraph ``(conversation, active)``: same rules as the flat graph, the
active path honoured (edits, regenerations, summaries), view options, incremental projector, REPL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convograph import create_graph, reduce_events, to_jsonable
from convograph.hypergraph import (
    ViewOptions,
    close_stream,
    create_conversation,
    default_active,
    edit_message,
    reduce_conversation_events,
    regenerate,
    summarize_range,
)
from convograph.projections import (
    ConversationProjector,
    flatten_agents,
    project_dag,
    project_messages,
    project_repl,
    project_thread,
)
from convograph.projections.dag import check_no_overlap
from tests.test_projections_messages import agent_streams, assert_valid_anthropic, assert_valid_openai

SUBAGENT: list[dict[str, Any]] = [
    {"type": "user", "runId": "u", "content": "Find the bug"},
    {"type": "harness_start", "runId": "a", "parentId": "u:user"},
    {"type": "text", "runId": "P1", "parentId": "a", "id": "t1", "content": "Delegating."},
    {"type": "tool_call", "runId": "a", "id": "c1", "name": "agent", "input": {"task": "grep"}},
    {"type": "harness_start", "runId": "s", "parentId": "c1"},
    {"type": "text", "runId": "s", "id": "st", "content": "inner"},
    {"type": "harness_end", "runId": "s"},
    {"type": "tool_result", "runId": "a", "id": "c1", "name": "agent", "output": "found"},
    {"type": "text", "runId": "P2", "parentId": "a", "id": "t2", "content": "Fixed it."},
    {"type": "harness_end", "runId": "a"},
]


def conversation(events: list[dict[str, Any]]) -> Any:
    return reduce_conversation_events(create_conversation(), events)


def texts(views: list[Any]) -> list[str]:
    return [getattr(v.content, "text", v.content.kind) for v in views]


def test_thread_matches_the_flat_graph_for_plain_streams() -> None:
    conv = conversation(SUBAGENT)
    views = project_thread(conv, default_active(conv))
    assert views == project_thread(reduce_events(create_graph(), SUBAGENT))
    assert texts(views) == ["user", "Delegating.", "tool_call", "Fixed it."]
    assert texts(views[2].branches[0]) == ["inner"]
    assert project_thread(conv) == views  # active defaults to default_active


OPERATIONS = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 50)), max_size=4)
"""Steps after the stream: an edit, a regeneration, a branch switch, a summary, a closed stream,
an appended user message, or more of the stream."""


def _operate(conv: Any, events: list[dict[str, Any]], step: tuple[int, int]) -> Any:
    """One of `OPERATIONS` on ``conv`` (an operation the conversation refuses changes nothing)."""
    from convograph.hypergraph import OperationError, append_user_message, list_siblings, switch_branch
    from convograph.hypergraph import queries as q

    choice, pick = step
    active = default_active(conv).message_ids
    try:
        if choice == 0 and active:
            return edit_message(conv, active[pick % len(active)], f"edited {pick}")
        if choice == 1 and active:
            assistants = [m for m in active if q.get_message(conv, m).role == "assistant"]
            if assistants:
                return regenerate(conv, assistants[pick % len(assistants)])
        if choice == 2 and active:
            siblings = list_siblings(conv, active[pick % len(active)])
            return switch_branch(conv, siblings[pick % len(siblings)].id)
        if choice == 3 and len(active) >= 2:
            first = pick % (len(active) - 1)
            return summarize_range(conv, active[first], active[first + 1], f"summary {pick}")
        if choice == 4:
            return close_stream(conv)
        if choice == 5:
            return append_user_message(conv, f"note {pick}")
    except OperationError:
        return conv
    return reduce_conversation_events(conv, events[pick % (len(events) + 1) :])  # some events again


@settings(max_examples=80, deadline=None)
@given(agent_streams(), OPERATIONS)
def test_histories_from_the_hypergraph_are_valid(
    events: list[dict[str, Any]], steps: list[tuple[int, int]]
) -> None:
    """Every version (after edits, regenerations, branch switches, summaries) projects to
    histories the SDK types and the APIs' structural rules accept."""
    conv = conversation(events)
    for step in [None, *steps]:
        if step is not None:
            conv = _operate(conv, events, step)
        assert_valid_openai(project_messages(conv, format="openai"))
        assert_valid_anthropic(project_messages(conv, format="anthropic"))
        gateway = project_messages(conv, format="gateway")
        assert not gateway or gateway[0]["role"] == "user"
        calls = [c["id"] for m in gateway for c in m.get("tool_calls", [])]
        assert calls == [m["tool_call_id"] for m in gateway if m["role"] == "tool"]
    assert not check_no_overlap(project_dag(conv).nodes)


@settings(max_examples=40, deadline=None)
@given(agent_streams(), st.integers(min_value=0))
def test_one_shot_of_an_older_version_equals_the_same_events_alone(
    events: list[dict[str, Any]], cut: int
) -> None:
    """One-shot projections of a version that is no longer its lineage's head (whose indexes then
    hold runs, threads and blocks of later versions) equal those of its events reduced alone."""
    cut %= len(events) + 1
    older = conversation(events[:cut])
    reduce_conversation_events(older, events[cut:])  # extends older's lineage in place
    alone = conversation(events[:cut])
    assert project_thread(older) == project_thread(alone)
    for format in ("openai", "anthropic"):
        assert project_messages(older, format=format) == project_messages(alone, format=format)


@settings(max_examples=80, deadline=None)
@given(agent_streams())
def test_conversation_projector_equals_one_shot_after_every_event(events: list[dict[str, Any]]) -> None:
    projector = ConversationProjector()
    for event in events:
        projector.apply(event)
        conv = projector.conversation
        assert projector.views == project_thread(conv, default_active(conv))
    assert projector.messages("openai") == project_messages(projector.conversation)
    assert to_jsonable(projector.dag()) == to_jsonable(project_dag(projector.conversation))
    assert to_jsonable(projector.repl()) == to_jsonable(project_repl(projector.conversation))
    assert projector.to_jsonable() == to_jsonable(projector.snapshot())


@settings(max_examples=60, deadline=None)
@given(agent_streams(), st.randoms(use_true_random=False))
def test_conversation_projector_equals_one_shot_for_reordered_streams(
    events: list[dict[str, Any]], rnd: Any
) -> None:
    shuffled = list(events)
    rnd.shuffle(shuffled)
    shuffled += shuffled[: len(shuffled) // 3]
    projector = ConversationProjector()
    for event in shuffled:
        projector.apply(event)
        conv = projector.conversation
        assert projector.views == project_thread(conv, default_active(conv))


@settings(max_examples=60, deadline=None)
@given(agent_streams(), st.randoms(use_true_random=False))
def test_block_layout_input_edges_are_unique_as_declared(events: list[dict[str, Any]], rnd: Any) -> None:
    """`conversation_layout_input` declares its edges unique (`LayoutInput.edges_unique`), so the
    layout skips its dedupe: no repeat, no self-loop, no index out of range, in every arrival order
    (and the layout equals the deduplicating one)."""
    from convograph.projections.dag import _check_parent_table, layout
    from convograph.projections.sources import conversation_layout_input

    shuffled = list(events)
    rnd.shuffle(shuffled)
    for stream in (events, shuffled + shuffled[: len(shuffled) // 3]):
        conv = conversation(stream)
        data = conversation_layout_input(conv)
        _check_parent_table(data)  # project_dag skips the check: valid by construction
        n = len(data.ids)
        assert data.edges_unique
        edges = data.edges + list(zip(data.edge_sources, data.edge_targets, strict=True))
        assert len(set(edges)) == len(edges)
        assert all(s != t and 0 <= s < n and 0 <= t < n for s, t in edges)
        declared = to_jsonable(layout(data))
        data.edges_unique = False
        assert to_jsonable(layout(data)) == declared


def test_text_labels_read_the_whole_text_of_the_version_projected() -> None:
    """A text or reasoning block's DAG label is `compact` of its whole text in the version
    projected, however finely it was chunked: the newest version reads the head the block's record
    keeps (`_Block.head`, past its `BLOCK_HEAD` characters here), an older one its own chunks."""
    from convograph.hypergraph import queries as q
    from convograph.hypergraph import reduce_conversation
    from convograph.hypergraph.model import BLOCK_HEAD
    from convograph.projections.dag import compact

    words = [f"w{i} " for i in range(90)]  # ~350 characters in 90 chunks
    events: list[dict[str, Any]] = [{"type": "harness_start", "runId": "a"}]
    events += [{"type": "reasoning", "runId": "a", "id": "r", "content": w} for w in words[:40]]
    events += [{"type": "text", "runId": "a", "id": "t", "content": w} for w in words]
    versions = [create_conversation()]
    for event in events:
        versions.append(reduce_conversation(versions[-1], event))
    head = versions[-1]._store.blocks[2].head
    assert head is not None
    assert len(head) == BLOCK_HEAD  # (the text is longer)
    checked = 0
    for conv in versions[2:]:
        for node in project_dag(conv).nodes:
            if node.kind in ("text", "reasoning"):
                text = q.block_text(conv, node.id)
                expected = compact(text) or "text" if node.kind == "text" else compact("thinking: " + text)
                assert node.label == expected
                checked += 1
    assert checked > 100
    assert project_dag(versions[-1]).nodes[2].label == compact("".join(words))


def test_block_labels_by_kind() -> None:
    """Every hypergraph block kind's DAG label (`dag.block_labels`), memoised ones twice."""
    events: list[dict[str, Any]] = [
        {"type": "user", "runId": "u", "content": "  Find   the\nbug  "},
        {"type": "harness_start", "runId": "a", "parentId": "u:user"},
        {"type": "reasoning", "runId": "a", "id": "r", "content": "hm"},
        {"type": "reasoning", "runId": "a", "id": "r0", "content": ""},
        {"type": "text", "runId": "a", "id": "t", "content": ""},
        {"type": "tool_call", "runId": "a", "id": "c1", "name": "bash", "input": {}},
        {"type": "relay", "runId": "a", "id": "p1", "kind": "permission", "toolCallId": "c1", "tool": "bash"},
        {"type": "tool_result", "runId": "a", "id": "c1", "name": "bash", "output": "ok"},
        {"type": "tool_call", "runId": "a", "id": "c2", "name": "bash", "input": {}},
        {"type": "tool_result", "runId": "a", "id": "c2", "name": "bash", "output": "ok"},
        {"type": "usage", "runId": "a", "inputTokens": 12, "outputTokens": 3},
        {"type": "repl_input", "runId": "a", "id": "x", "code": "print(1)"},
        {"type": "repl_progress", "runId": "a", "id": "x", "chunk": "1"},
        {"type": "repl_output", "runId": "a", "id": "x", "stdout": "1"},
        {"type": "repl_input", "runId": "a", "id": "y", "code": "pass"},
        {"type": "repl_output", "runId": "a", "id": "y"},
        {"type": "error", "runId": "a", "message": "boom"},
        {"type": "usage", "runId": "a", "inputTokens": 12, "outputTokens": 4},
        {"type": "harness_end", "runId": "a"},
    ]
    conv = conversation(events)
    labels = [(n.kind, n.label) for n in project_dag(conv).nodes]
    assert labels == [
        ("user", "Find the bug"),
        ("harness_start", "run start"),
        ("reasoning", "thinking: hm"),
        ("reasoning", "thinking..."),
        ("text", "text"),
        ("tool_call", "bash"),
        ("relay", "permission: bash"),
        ("tool_result", "bash result"),
        ("tool_call", "bash"),
        ("tool_result", "bash result"),
        ("usage", "usage 12/3"),
        ("repl_input", "repl: print(1)"),
        ("repl_progress", "repl progress"),
        ("repl_output", "output: 1"),
        ("repl_input", "repl: pass"),
        ("repl_output", "output"),
        ("error", "error: boom"),
        ("usage", "usage 12/4"),
        ("harness_end", "run end"),
    ]


def test_edit_shows_only_the_active_branch() -> None:
    conv = conversation(SUBAGENT)
    edited = edit_message(conv, "msg:1", "Find the other bug")
    views = project_thread(edited, default_active(edited))
    assert [v.content.kind for v in views] == ["user"]
    assert views[0].content.content == "Find the other bug"  # type: ignore[union-attr]
    reply = reduce_conversation_events(
        edited,
        [
            {"type": "text", "runId": "a2", "parentId": views[0].id, "id": "n", "content": "On it."},
        ],
    )
    assert texts(project_thread(reply))[-1] == "On it."
    # the original branch is still there for whoever selects it
    assert texts(project_thread(conv))[-1] == "Fixed it."


def test_projector_follows_operations_with_replace() -> None:
    projector = ConversationProjector(conversation(SUBAGENT))
    regenerated = regenerate(projector.conversation, default_active(projector.conversation).message_ids[-1])
    projector.replace(regenerated)
    assert projector.views == project_thread(regenerated)
    projector.apply({"type": "text", "runId": "P3", "parentId": "a", "id": "t3", "content": "Again."})
    assert projector.views == project_thread(projector.conversation)
    assert projector.rebuilds >= 1


def test_summary_replaces_its_sources() -> None:
    conv = conversation(SUBAGENT)
    ids = default_active(conv).message_ids
    summarized = summarize_range(conv, ids[0], ids[1], "User asked; agent delegated.")
    views = project_thread(summarized)
    assert "User asked; agent delegated." in texts(views)
    assert "Find the bug" not in str(to_jsonable(views))
    messages = project_messages(summarized)
    assert any(m.get("content") == "User asked; agent delegated." for m in messages)
    assert_valid_openai(messages)


def test_view_options_come_from_the_conversation() -> None:
    events = [*SUBAGENT[:3], {"type": "reasoning", "runId": "a", "id": "r", "content": "hmm"}, *SUBAGENT[3:]]
    conv = conversation(events)
    assert "hmm" in texts(project_thread(conv))
    hidden = conv.with_view(ViewOptions(hide_reasoning=True, subagents="hide"))
    views = project_thread(hidden)
    assert "hmm" not in texts(views)
    assert all(not v.branches for v in views)
    collapsed = project_thread(conv.with_view(ViewOptions(collapse_tools=True)))
    call = next(v for v in collapsed if v.content.kind == "tool_call")
    assert to_jsonable(call.content)["output"] is True


def test_closed_stream_marks_open_runs() -> None:
    conv = close_stream(conversation(SUBAGENT[:6]))
    views = project_thread(conv)
    assert views[-1].branches[0][0].status == "error"  # subagent s never ended: aborted
    statuses = {v.run_id: v.status for v in views}
    assert statuses["a"] == "error"
    assert statuses["u"] == "complete"


def test_dag_of_blocks() -> None:
    layout = project_dag(conversation(SUBAGENT))
    ids = {n.id for n in layout.nodes}
    assert "block:c1" in ids
    assert any(e.type == "spawn" and e.source == "block:c1" for e in layout.edges)
    assert not check_no_overlap(layout.nodes)


def test_active_must_be_an_active() -> None:
    with pytest.raises(TypeError, match="Active"):
        project_thread(conversation(SUBAGENT), "main")


# --- REPL view -----------------------------------------------------------------------------------

RLM: list[dict[str, Any]] = [
    {"type": "harness_start", "runId": "R", "agentId": "rlm", "maxIterations": 5},
    {"type": "reasoning", "runId": "R", "id": "th", "content": "plan"},
    {"type": "repl_input", "runId": "R", "id": "k1", "code": "print(1)", "iteration": 0},
    {"type": "repl_progress", "runId": "R", "id": "k1", "chunk": "1\n", "stream": "stdout"},
    {"type": "repl_progress", "runId": "R", "id": "k1", "chunk": "warn\n", "stream": "stderr"},
    {"type": "harness_start", "runId": "C", "parentId": "k1", "depth": 1, "maxIterations": 3},
    {"type": "repl_input", "runId": "C", "id": "k9", "code": "sub()"},
    {"type": "repl_output", "runId": "C", "id": "k9", "stdout": "", "done": True},
    {"type": "text", "runId": "C", "id": "ca", "content": "child answer"},
    {"type": "harness_end", "runId": "C", "reason": "final"},
    {"type": "repl_output", "runId": "R", "id": "k1", "stdout": "1\n", "done": False, "durationMs": 12},
    {"type": "text", "runId": "R", "id": "x", "content": "oops"},
    {"type": "error", "runId": "R", "message": "Response contained no code block."},
    {"type": "repl_input", "runId": "R", "id": "k2", "code": "FINAL(2)", "iteration": 1},
    {"type": "usage", "runId": "R", "inputTokens": 10, "outputTokens": 5},
    {"type": "repl_output", "runId": "R", "id": "k2", "stdout": "", "done": True},
    {"type": "text", "runId": "R", "id": "fa", "content": "The answer is 2"},
    {
        "type": "harness_end",
        "runId": "R",
        "reason": "final",
        "iterations": 2,
        "totalUsage": {"inputTokens": 10, "outputTokens": 5},
    },
]


def test_repl_view_turns_children_and_final_answer() -> None:
    view = project_repl(conversation(RLM))
    (root,) = view.agents
    assert set(view.all_agents) == {"R", "C"}
    assert root.status == "done"  # recovered after the extraction error
    assert root.max_iterations == 5
    assert root.final_answer == "The answer is 2"
    assert root.total_usage == {"inputTokens": 10, "outputTokens": 5}
    first, second = root.turns
    assert (first.reasoning, first.code, first.stdout, first.stderr) == ("plan", "print(1)", "1\n", "warn\n")
    assert first.output is not None
    assert first.output.duration_ms == 12
    assert [c.run_id for c in first.child_agents] == ["C"]
    assert first.child_agents[0].depth == 1
    assert first.child_agents[0].final_answer == "child answer"
    assert second.error_message == "Response contained no code block."
    assert second.code == "FINAL(2)"
    assert second.usage is not None
    assert second.usage.input_tokens == 10
    assert second.phase == "done"
    assert [(i.type, i.run_id, i.turn_index, i.depth) for i in flatten_agents(view.agents)] == [
        ("agent", "R", -1, 0),
        ("turn", "R", 0, 1),
        ("agent", "C", -1, 2),
        ("turn", "C", 0, 3),
        ("turn", "R", 1, 1),
    ]
    data = to_jsonable(view)
    assert data["agents"][0]["turns"][0]["childAgents"][0]["runId"] == "C"


def test_repl_statuses() -> None:
    running = project_repl(conversation(RLM[:4])).agents[0]
    assert running.status == "running"
    assert running.turns[0].phase == "executing"
    maxed = project_repl(
        conversation([*RLM[:3], {"type": "harness_end", "runId": "R", "reason": "max_iterations"}])
    )
    assert maxed.agents[0].status == "max_iterations"
    failed = project_repl(
        conversation(
            [*RLM[:3], {"type": "error", "runId": "R", "message": "x"}, {"type": "harness_end", "runId": "R"}]
        )
    )
    assert failed.agents[0].status == "error"
    aborted = project_repl(close_stream(conversation(RLM[:4])))
    assert aborted.agents[0].status == "error"


def test_repl_needs_the_hypergraph() -> None:
    with pytest.raises(TypeError, match="hypergraph"):
        project_repl(reduce_events(create_graph(), RLM))


def test_reasoning_signature_sent_in_a_later_chunk_is_kept() -> None:
    """Providers often send the thinking signature last, in an empty chunk of its own: the
    hypergraph thread keeps it, as the flat one does (an unsigned thinking block cannot be sent
    back to Anthropic)."""
    from convograph import create_graph, project_messages, project_thread, reduce_events, to_jsonable
    from convograph.examples import multi_agent_events
    from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events

    events = multi_agent_events()
    graph = reduce_events(create_graph(), events)
    conversation = reduce_conversation_events(create_conversation(), events)
    flat = to_jsonable(project_thread(graph))
    hyper = to_jsonable(project_thread(conversation, default_active(conversation)))
    assert hyper == flat
    assert any(view["content"].get("signature") == "sig-demo-p1" for view in hyper)
    thinking = [
        block
        for message in project_messages(conversation, default_active(conversation), format="anthropic")
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "thinking"
    ]
    assert thinking
    assert thinking[0]["signature"] == "sig-demo-p1"


@settings(max_examples=25, deadline=None)
@given(agent_streams())
def test_top_level_only_builds_the_same_history(events: list[dict[str, Any]]) -> None:
    """A builder that keeps the top-level views only gives the same request histories."""
    from convograph.projections.messages import render_views
    from convograph.projections.sources import fill_from_conversation

    conv = conversation(events)
    for fmt in ("openai", "anthropic", "gateway"):
        full = render_views(fill_from_conversation(conv), fmt)
        assert render_views(fill_from_conversation(conv, top_level_only=True), fmt) == full


# --- REPL cells (ViewOptions(repl_cells=True), beyond the seed) ---------------------------------


def rlm_events() -> list[dict[str, Any]]:
    from convograph.demo.conversations import DEMO_CONVERSATIONS

    script = next(s for s in (f() for f in DEMO_CONVERSATIONS) if s.conversation_id == "demo-rlm")
    return [{**event, "seq": n} for n, event in enumerate(script.events(), start=1)]


def with_cells(conv: Any) -> list[Any]:
    from convograph.projections import ViewOptions as ThreadOptions

    return project_thread(conv, default_active(conv), options=ThreadOptions(repl_cells=True))


def test_repl_cells_show_each_turn_with_its_output_and_the_runs_it_spawned() -> None:
    events = rlm_events()
    conv = conversation(events)
    views = with_cells(conv)
    kinds = [(v.id, v.content.kind) for v in views]
    assert [i for i, kind in kinds if kind == "repl"] == [f"repl-{n}" for n in range(1, 6)]
    # a run's text is no longer merged across its turns: each think text stands before its turn
    assert kinds[1:5] == [
        ("rlm-text-1", "text"),
        ("repl-1", "repl"),
        ("rlm-text-2", "text"),
        ("repl-2", "repl"),
    ]
    cells = {v.id: v for v in views if v.content.kind == "repl"}
    first = cells["repl-1"].content
    progress = [e for e in events if e["type"] == "repl_progress" and e["id"] == "repl-1"]
    assert first.stdout == "".join(e["chunk"] for e in progress if e.get("stream", "stdout") == "stdout")
    output = next(e for e in events if e["type"] == "repl_output" and e["id"] == "repl-1")
    assert first.result is not None
    assert first.result.stdout == output["stdout"]
    assert not first.result.done
    assert cells["repl-5"].content.result.done  # type: ignore[union-attr]
    # the child RLM run spawned inside turn 3 nests under that turn's cell
    (child,) = cells["repl-3"].branches
    assert [v.id for v in child] == ["child-text-1"]
    # the option off: the seed's thread (no cells, text merged across turns) is unchanged
    plain = project_thread(conv, default_active(conv))
    assert not [v for v in plain if v.content.kind == "repl"]
    assert [v.id for v in plain] == ["run-user-rlm:user", "rlm-text-1", "child-text-1", "rlm-text-4"]
    assert to_jsonable(cells["repl-5"])["content"]["result"]["done"] is True


def test_repl_turns_reach_the_history_as_code_and_feedback() -> None:
    """A recursive-LM run's history, in every format: each turn's think text with its code as a
    fenced ```python block (assistant), then what the REPL reported (user: ``stdout:`` /
    ``error:``), as the RLM harness feeds it back; the child run spawned inside turn 3 stays
    out (its answer reaches the model through the turn's output); the final answer closes it.
    The projectors agree (one without REPL cells builds the history one-shot)."""
    from convograph.projections.history import fenced_code

    events = rlm_events()
    conv = conversation(events)
    inputs = [e for e in events if e["type"] == "repl_input"]
    outputs = {e["id"]: e for e in events if e["type"] == "repl_output"}
    expected: list[tuple[str, str]] = [("user", events[0]["content"])]
    for turn in inputs:
        think = "".join(e["content"] for e in events if e.get("id") == f"rlm-text-{turn['iteration']}")
        expected.append(("assistant", f"{think}\n\n{fenced_code(turn['code'])}"))
        output = outputs[turn["id"]]
        lines = [f"stdout:\n{output['stdout'].rstrip()}"] if output["stdout"] else []
        lines += [f"error: {output['error']}"] if output.get("error") else []
        expected.append(("user", "\n".join(lines)))
    final = "".join(e["content"] for e in events if e.get("id") == "rlm-final")
    expected.append(("assistant", final))
    assert fenced_code(inputs[0]["code"]).startswith("```python\nconsole.log(context.length)\n")
    assert expected[8] == ("user", "error: " + outputs["repl-4"]["error"])
    for fmt in ("openai", "gateway", "anthropic"):
        messages = project_messages(conv, format=fmt)
        if fmt == "anthropic":
            assert_valid_anthropic(messages)
            got = [(m["role"], "".join(b["text"] for b in m["content"])) for m in messages]
        else:
            got = [(m["role"], m["content"]) for m in messages]
        assert got == expected, fmt
        assert "Classifying 40 billing tickets" not in str(messages)
        for projector in (ConversationProjector(), ConversationProjector(repl_cells=True)):
            for event in events:
                projector.apply(event)
            assert projector.messages(fmt) == messages
    assert_valid_openai(project_messages(conv, format="openai"))


def test_repl_feedback_and_fences_in_the_edge_cases() -> None:
    """Code the model already wrote in its text is not repeated; a turn still running shows what
    it printed so far and says its output is unavailable; a turn that printed nothing says so; a
    truncated stdout says so; a fence outgrows the backticks inside the code."""
    from convograph.projections.history import (
        REPL_NO_OUTPUT,
        REPL_PENDING_OUTPUT,
        fenced_code,
        repl_feedback,
    )
    from convograph.projections.view import ReplContent, ReplResult

    code = "print(1)"
    events = [
        {"type": "user", "runId": "u", "content": "count"},
        {"type": "harness_start", "runId": "r", "parentId": "u:user"},
        {"type": "text", "runId": "r", "id": "t1", "content": f"Counting:\n```python\n{code}\n```"},
        {"type": "repl_input", "runId": "r", "id": "i1", "code": code, "iteration": 0},
        {"type": "repl_output", "runId": "r", "id": "i1", "stdout": "", "done": False},
        {"type": "repl_input", "runId": "r", "id": "i2", "code": "print(2)", "iteration": 1},
        {"type": "repl_progress", "runId": "r", "id": "i2", "chunk": "2\n"},
    ]
    messages = project_messages(conversation(events), format="openai")
    assert [m["content"] for m in messages] == [
        "count",
        f"Counting:\n```python\n{code}\n```",
        REPL_NO_OUTPUT,
        fenced_code("print(2)"),
        f"stdout:\n2\n{REPL_PENDING_OUTPUT}",
    ]
    assert_valid_anthropic(project_messages(conversation(events), format="anthropic"))
    truncated = ReplContent(code="x", result=ReplResult(stdout="abc\n", truncated=True))
    assert repl_feedback(truncated) == "stdout:\nabc\n(stdout truncated)"
    assert fenced_code("s = '```'\n") == "````python\ns = '```'\n````"


def test_repl_progress_with_a_fresh_id_goes_to_the_runs_latest_turn() -> None:
    """Upstream's harness gives every repl_progress a new uuid; its output names the turn."""
    events = [
        {"type": "user", "runId": "u", "content": "count"},
        {"type": "harness_start", "runId": "r", "parentId": "u:user"},
        {"type": "repl_input", "runId": "r", "id": "k1", "code": "1+1"},
        {"type": "repl_progress", "runId": "r", "id": "p-9f2", "chunk": "2\n"},
        {"type": "repl_progress", "runId": "r", "id": "p-77a", "chunk": "warn\n", "stream": "stderr"},
        {"type": "repl_output", "runId": "r", "id": "k1", "stdout": "2\n", "durationMs": 4},
        {"type": "harness_end", "runId": "r"},
    ]
    (cell,) = [v for v in with_cells(conversation(events)) if v.content.kind == "repl"]
    assert (cell.content.stdout, cell.content.stderr) == ("2\n", "warn\n")
    assert cell.content.result is not None
    assert cell.content.result.duration_ms == 4
    assert cell.status == "complete"


def test_projector_with_repl_cells_equals_one_shot_after_every_event() -> None:
    events = rlm_events()
    projector = ConversationProjector(repl_cells=True)
    follower = ConversationProjector(repl_cells=True)  # follows another projector's conversation
    plain = ConversationProjector()
    for event in events:
        plain.apply(event)
        changed = projector.apply(event)
        follower.advance(plain.conversation)
        expected = with_cells(projector.conversation)
        assert projector.views == expected
        assert follower.views == expected
        if event["type"].startswith("repl_"):
            assert changed  # a cell was created or grew
    assert plain.views == project_thread(plain.conversation, default_active(plain.conversation))


# --- the REPL view kept current (ReplProjector) --------------------------------------------------


WORKLOADS = Path(__file__).resolve().parents[2] / "shared" / "workloads"


def assert_repl_follows(events: list[dict[str, Any]], every: int = 1) -> None:
    """`ReplProjector` (by `apply`, and inside `ConversationProjector.repl`) equals the one-shot
    `project_repl` after every ``every``-th event and at the end."""
    from convograph.projections import ReplProjector

    repl = ReplProjector()
    projector = ConversationProjector()
    for n, event in enumerate(events, start=1):
        repl.apply(event)
        projector.apply(event)
        if n % every == 0 or n == len(events):
            expected = to_jsonable(project_repl(repl.conversation))
            assert to_jsonable(repl.view()) == expected, n
            assert to_jsonable(projector.repl()) == expected, n


def test_repl_projector_equals_one_shot_after_every_event() -> None:
    assert_repl_follows(RLM)
    assert_repl_follows(rlm_events())


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False))
def test_repl_projector_equals_one_shot_in_any_arrival_order(rnd: Any) -> None:
    """Children before their parents, outputs before inputs: whatever order, the same view."""
    events = [*RLM, *rlm_events()]
    rnd.shuffle(events)
    assert_repl_follows(events)


@st.composite
def repl_streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """REPL runs with long stretches of stdout / stderr progress, text between them, turns cut
    short (progress before any input, after an output, at the very end)."""
    events: list[dict[str, Any]] = []
    for run in draw(st.lists(st.sampled_from(["R", "S"]), min_size=1, max_size=2, unique=True)):
        if draw(st.booleans()) or run == "R":
            events.append({"type": "harness_start", "runId": run, "agentId": run})
        for k in range(draw(st.integers(0, 4))):
            step = draw(st.sampled_from(["input", "progress", "output", "text", "error", "usage"]))
            turn = f"{run}{k}"
            if step == "input":
                events.append({"type": "repl_input", "runId": run, "id": turn, "code": f"c{k}"})
            if step in ("input", "progress"):
                for chunk in draw(st.lists(st.sampled_from(["o", "e", "x\n"]), max_size=6)):
                    stream = "stderr" if chunk == "e" else "stdout"
                    events.append(
                        {"type": "repl_progress", "runId": run, "id": turn, "chunk": chunk, "stream": stream}
                    )
            if step == "output":
                done = draw(st.booleans())
                events.append({"type": "repl_output", "runId": run, "id": turn, "stdout": "o", "done": done})
            if step == "text":
                events.append({"type": "text", "runId": run, "id": f"t{turn}", "content": "t"})
            if step == "error":
                events.append({"type": "error", "runId": run, "message": "boom"})
            if step == "usage":
                events.append({"type": "usage", "runId": run, "inputTokens": 1, "outputTokens": 1})
        if draw(st.booleans()):
            events.append({"type": "harness_end", "runId": run, "reason": "final"})
    return events


@settings(max_examples=60, deadline=None)
@given(repl_streams())
def test_repl_one_shot_joins_progress_as_the_projector_appends_it(events: list[dict[str, Any]]) -> None:
    """`project_repl` joins a stretch of progress chunks at once; the projector appends them one by
    one: the same stdout, stderr and phases after every event."""
    assert_repl_follows(events)


def test_repl_one_shot_keeps_stdout_and_stderr_apart() -> None:
    events = [
        {"type": "harness_start", "runId": "R", "agentId": "rlm"},
        {"type": "repl_progress", "runId": "R", "id": "k0", "chunk": "early ", "stream": "stdout"},
        {"type": "repl_input", "runId": "R", "id": "k1", "code": "run()"},
        *(
            {"type": "repl_progress", "runId": "R", "id": "k1", "chunk": chunk, "stream": stream}
            for chunk, stream in [("a", "stdout"), ("!", "stderr"), ("b", "stdout"), ("?", "stderr")]
        ),
        {"type": "usage", "runId": "R", "inputTokens": 1, "outputTokens": 1},
        {"type": "repl_progress", "runId": "R", "id": "k1", "chunk": "#", "stream": "stderr"},
        {"type": "repl_output", "runId": "R", "id": "k1", "stdout": "ab", "done": False},
        {"type": "repl_progress", "runId": "R", "id": "k1", "chunk": "late", "stream": "stdout"},
    ]
    (turn,) = project_repl(conversation(events)).all_agents["R"].turns
    assert (turn.stdout, turn.stderr, turn.phase) == ("early ablate", "!?#", "executing")
    assert_repl_follows(events)


def test_repl_projector_on_a_shared_workload_and_after_an_operation() -> None:
    from convograph.events import read_ndjson_file

    batch = read_ndjson_file(WORKLOADS / "w2-hg-50x200x3.ndjson")
    assert not batch.errors
    assert_repl_follows(batch.events, every=997)
    projector = ConversationProjector()
    for event in RLM:
        projector.apply(event)
    before = to_jsonable(projector.repl())
    regenerated = regenerate(projector.conversation, default_active(projector.conversation).message_ids[-1])
    projector.replace(regenerated)
    assert to_jsonable(projector.repl()) == to_jsonable(project_repl(regenerated))
    assert before == to_jsonable(project_repl(conversation(RLM)))


def test_repl_children_of_one_turn_come_in_block_order() -> None:
    """A turn's children are ordered by the block that spawned them (the REPL input, then a
    tool call of the same turn), not by which child arrived first."""
    events = [
        {"type": "harness_start", "runId": "R", "agentId": "rlm"},
        {"type": "repl_input", "runId": "R", "id": "k1", "code": "spawn()"},
        {"type": "tool_call", "runId": "R", "id": "t1", "name": "agent", "input": {}},
        {"type": "harness_start", "runId": "A", "parentId": "t1", "agentId": "by-tool"},
        {"type": "harness_start", "runId": "B", "parentId": "k1", "agentId": "by-repl"},
    ]
    expected = ["B", "A"]
    for view in (project_repl(conversation(events)),):
        (turn,) = view.all_agents["R"].turns
        assert [child.run_id for child in turn.child_agents] == expected
    from convograph.projections import ReplProjector

    repl = ReplProjector()
    for event in events:
        repl.apply(event)
    (turn,) = repl.view().all_agents["R"].turns
    assert [child.run_id for child in turn.child_agents] == expected


# --- the one-shot block walk (`sources._fill_blocks`) against chunk-order placement --------------


def _interleaved(events: list[dict[str, Any]], rnd: Any) -> list[dict[str, Any]]:
    """``events`` with progress and usage chunks added, some events sent twice in a row (blocks of
    several chunks of every kind), and the runs' events merged in a random order that keeps each
    run's own order (concurrent runs: other runs' chunks come between a block's chunks)."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        run = by_run.setdefault(event.get("runId", ""), [])
        if event["type"] == "tool_call" and rnd.random() < 0.5:  # progress before or after its call
            chunks = [
                {
                    "type": "tool_progress",
                    "runId": event["runId"],
                    "id": f"pg{rnd.randrange(4)}",
                    "toolCallId": event["id"],
                    "name": "exec",
                    "content": content,
                }
                for content in rnd.choice(
                    [[{"channel": "stdout", "data": "x"}], [{"channel": "stderr", "data": "y"}, {"pid": 1}]]
                )
            ]
            run.extend([event, *chunks] if rnd.random() < 0.8 else [*chunks, event])
        else:
            run.append(event)
        if rnd.random() < 0.15:
            run.append(
                {"type": "usage", "runId": event.get("runId", "u"), "inputTokens": 1, "outputTokens": 2}
            )
        if rnd.random() < 0.15:
            run.append(dict(event))  # the same key again: the block's next chunk
    queues = [list(reversed(run)) for run in by_run.values()]
    out: list[dict[str, Any]] = []
    while queues:
        queue = rnd.choice(queues)
        out.append(queue.pop())
        if not queue:
            queues.remove(queue)
    return out


@settings(max_examples=120, deadline=None)
@given(agent_streams(), st.randoms(use_true_random=False), st.booleans())
def test_one_shot_block_walk_equals_chunk_order_placement(
    events: list[dict[str, Any]], rnd: Any, summarized: bool
) -> None:
    """The one-shot build walks blocks and places a block's chunks at once unless other chunks come
    between them (then chunk by chunk from there); the incremental build (`track_changes`) places
    chunk by chunk in arrival order. Both give the same views, statuses and histories, for every
    view option, with blocks of several chunks interleaved with other runs' and a summary on the
    path."""
    from convograph.projections import ViewOptions as ThreadOptions
    from convograph.projections.messages import render_views
    from convograph.projections.sources import build_from_conversation

    conv = conversation(_interleaved(events, rnd))
    ids = default_active(conv).message_ids
    if summarized and len(ids) >= 2:
        first = rnd.randrange(len(ids) - 1)
        conv = summarize_range(conv, ids[first], ids[rnd.randrange(first, len(ids))], "summary")
    active = default_active(conv)
    for options in (
        ThreadOptions(),
        ThreadOptions(hide_reasoning=True),
        ThreadOptions(collapse_tools=True),
        ThreadOptions(hide_subagents=True),
    ):
        walked = build_from_conversation(conv, active, options=options)[0]
        placed = build_from_conversation(conv, active, options=options, track_changes=True)[0]
        assert walked.views == placed.views
    top = build_from_conversation(conv, active, top_level_only=True)[0]
    placed = build_from_conversation(conv, active, track_changes=True)[0]
    for fmt in ("openai", "anthropic"):
        assert render_views(top, fmt) == render_views(placed, fmt)


def test_chunks_waiting_for_a_late_spawner_keep_their_arrival_order() -> None:
    """A subagent's user message arrives before the subagent run starts (its parent unknown yet),
    its text after; the whole agent run is linked last. Waiting chunks are placed in arrival order:
    the user message before the text (a later chunk used to overtake an earlier one whose spawner
    was placed in the same retry pass)."""
    events = [
        {"type": "tool_call", "runId": "content", "parentId": "agent", "id": "call_0", "name": "research"},
        {"type": "user", "runId": "task", "parentId": "sub", "content": "dig"},
        {"type": "harness_start", "runId": "sub", "parentId": "call_0", "agentId": "researcher"},
        {"type": "text", "runId": "sub-content", "parentId": "sub", "id": "t", "content": "found"},
        {"type": "harness_end", "runId": "agent"},
    ]
    conv = conversation(events)
    (call,) = project_thread(conv, default_active(conv))
    assert [view.content.kind for view in call.branches[0]] == ["user", "text"]
    projector = ConversationProjector()
    for event in events:
        projector.apply(event)
    assert projector.views == project_thread(conv, default_active(conv))
