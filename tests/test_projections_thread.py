"""Thread projection over the flat graph: every rule of seed 001 and the upstream fixes."""

from __future__ import annotations

from typing import Any

import pytest

from convograph import create_graph, reduce_events, to_jsonable
from convograph.projections import (
    NO_BRANCHES,
    CollectAll,
    ProgressRegistry,
    ViewNode,
    ViewOptions,
    default_registry,
    project_thread,
)


def thread(events: list[dict[str, Any]], **kwargs: Any) -> list[ViewNode]:
    return project_thread(reduce_events(create_graph(), events), **kwargs)


def kinds(views: list[ViewNode]) -> list[str]:
    return [view.content.kind for view in views]


SEED_EXAMPLE = [
    {"type": "user", "runId": "user-1", "content": "List files"},
    {"type": "harness_start", "runId": "agent-1", "parentId": "user-1:user", "agentId": "x"},
    {"type": "text", "runId": "agent-1", "id": "text-1", "content": "I'll list the files..."},
    {"type": "tool_call", "runId": "agent-1", "id": "tc-1", "name": "bash", "input": {"command": "ls"}},
    {"type": "usage", "runId": "agent-1", "inputTokens": 50, "outputTokens": 20},
    {
        "type": "relay",
        "kind": "permission",
        "runId": "agent-1",
        "id": "relay-1",
        "toolCallId": "tc-1",
        "tool": "bash",
        "params": {"command": "ls"},
    },
    {
        "type": "tool_result",
        "runId": "agent-1",
        "id": "tc-1",
        "name": "bash",
        "output": {"context": "file1.txt\nfile2.txt"},
    },
    {"type": "text", "runId": "agent-1", "id": "text-2", "content": "The directory contains..."},
    {"type": "usage", "runId": "agent-1", "inputTokens": 70, "outputTokens": 15},
    {"type": "harness_end", "runId": "agent-1", "agentId": "x"},
]


def test_seed_example_thread() -> None:
    views = thread(SEED_EXAMPLE)
    assert [(v.id, v.role, v.content.kind, v.status) for v in views] == [
        ("user-1:user", "user", "user", "complete"),
        ("text-1", "assistant", "text", "complete"),
        ("tc-1", "assistant", "tool_call", "complete"),
        ("relay-1", "assistant", "relay", "complete"),
        ("text-2", "assistant", "text", "complete"),
    ]
    call = views[2].content
    assert call.kind == "tool_call"
    assert to_jsonable(call) == {
        "kind": "tool_call",
        "name": "bash",
        "input": {"command": "ls"},
        "output": {"context": "file1.txt\nfile2.txt"},
        "hasOutput": True,
        "progress": None,
    }
    relay = to_jsonable(views[3])
    assert relay["runId"] == "agent-1"
    assert relay["content"] == {
        "kind": "relay",
        "relayKind": "permission",
        "toolCallId": "tc-1",
        "tool": "bash",
        "params": {"command": "ls"},
    }


def test_views_without_branches_share_one_empty_list_that_refuses_to_grow() -> None:
    """Leaves share `NO_BRANCHES` (no tracked empty list per view): it reads and encodes as ``[]``,
    refuses in-place growth with an error that says what to do, and ``+=`` gives a list of its own,
    so one leaf can never change another's branches."""
    views = thread(SEED_EXAMPLE)
    first, second = views[0], views[1]
    assert first.branches is NO_BRANCHES
    assert second.branches is NO_BRANCHES
    assert first.branches == []
    assert to_jsonable(first)["branches"] == []
    with pytest.raises(TypeError, match="assign a new list"):
        first.branches.append([])
    with pytest.raises(TypeError, match="assign a new list"):
        first.branches.extend([[]])
    first.branches += [[second]]
    assert first.branches == [[second]]
    assert type(first.branches) is list
    assert second.branches is NO_BRANCHES
    assert NO_BRANCHES == []


def test_structural_nodes_are_filtered() -> None:
    views = thread(SEED_EXAMPLE)
    assert not {"harness_start", "harness_end", "usage", "tool_result", "tool_progress"} & set(kinds(views))


def test_result_before_call_still_merges() -> None:
    events = [
        {"type": "harness_start", "runId": "a"},
        {"type": "tool_result", "runId": "a", "id": "c1", "name": "f", "output": 42},
        {"type": "tool_call", "runId": "a", "id": "c1", "name": "f", "input": {"x": 1}},
    ]
    views = thread(events)
    assert len(views) == 1
    assert views[0].id == "c1"
    assert views[0].content.input == {"x": 1}  # type: ignore[union-attr]
    assert views[0].content.output == 42  # type: ignore[union-attr]


def test_output_is_absent_until_the_result_arrives() -> None:
    """Absent is None with ``hasOutput`` false (a result may itself be null)."""
    views = thread(SEED_EXAMPLE[:4])
    content = to_jsonable(views[-1].content)
    assert (content["output"], content["hasOutput"]) == (None, False)
    result = {**SEED_EXAMPLE[6], "output": None}  # a tool that returned null
    assert result["type"] == "tool_result"
    done = to_jsonable(thread([*SEED_EXAMPLE[:4], result])[-1].content)
    assert (done["output"], done["hasOutput"]) == (None, True)


def test_result_merges_across_levels() -> None:
    """Upstream loses a result that lands in another list; the index by call id does not."""
    events = [
        {"type": "harness_start", "runId": "a"},
        {"type": "tool_call", "runId": "a", "id": "c1", "name": "agent", "input": {}},
        {"type": "harness_start", "runId": "s", "parentId": "c1"},
        {"type": "tool_result", "runId": "s", "id": "c1", "name": "agent", "output": "from child"},
    ]
    views = thread(events)
    assert views[0].content.output == "from child"  # type: ignore[union-attr]


def test_denied_and_orphan_results_are_visible() -> None:
    events = [
        {"type": "harness_start", "runId": "a"},
        {
            "type": "relay",
            "kind": "permission",
            "runId": "a",
            "id": "r1",
            "toolCallId": "a/x",
            "tool": "rm",
            "params": {"path": "/"},
        },
        {
            "type": "tool_result",
            "runId": "a",
            "id": "a/x",
            "name": "rm",
            "output": {"status": "denied", "reason": "no"},
        },
        {"type": "tool_result", "runId": "a", "id": "ghost", "name": "cat", "output": "?"},
    ]
    views = thread(events)
    assert kinds(views) == ["relay", "tool_call", "tool_call"]
    denied, orphan = views[1], views[2]
    assert denied.id == "a/x"
    assert to_jsonable(denied.content) == {
        "kind": "tool_call",
        "name": "rm",
        "input": {"path": "/"},
        "output": {"status": "denied", "reason": "no"},
        "hasOutput": True,
        "progress": None,
    }
    assert orphan.id == "ghost"
    assert orphan.content.input is None  # type: ignore[union-attr]
    assert orphan.content.output == "?"  # type: ignore[union-attr]


def test_progress_uses_the_exec_accumulator_by_default() -> None:
    events = [
        {"type": "harness_start", "runId": "a"},
        {"type": "tool_call", "runId": "a", "id": "c1", "name": "exec", "input": {}},
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p1",
            "toolCallId": "c1",
            "name": "exec",
            "content": {"channel": "stdout", "data": "he"},
        },
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p2",
            "toolCallId": "c1",
            "name": "exec",
            "content": {"pid": 1, "cpuPercent": 5, "rssKb": 10, "wallMs": 3},
        },
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p3",
            "toolCallId": "c1",
            "name": "exec",
            "content": {"channel": "stdout", "data": "llo"},
        },
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p4",
            "toolCallId": "c1",
            "name": "exec",
            "content": {"channel": "stderr", "data": "warn"},
        },
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p5",
            "toolCallId": "c1",
            "name": "exec",
            "content": {"pid": 1, "cpuPercent": 9, "rssKb": 12, "wallMs": 8},
        },
    ]
    views = thread(events)
    assert views[0].content.progress == {  # type: ignore[union-attr]
        "stdout": "hello",
        "stderr": "warn",
        "metrics": {"pid": 1, "cpuPercent": 9, "rssKb": 12, "wallMs": 8},
    }


def test_progress_before_call_and_custom_accumulators() -> None:
    events = [
        {"type": "harness_start", "runId": "a"},
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p1",
            "toolCallId": "c1",
            "name": "search",
            "content": 1,
        },
        {"type": "tool_call", "runId": "a", "id": "c1", "name": "search", "input": {}},
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p2",
            "toolCallId": "c1",
            "name": "search",
            "content": 2,
        },
    ]
    assert thread(events)[0].content.progress is None  # type: ignore[union-attr]  # unregistered
    registry = ProgressRegistry({"search": CollectAll()})
    assert thread(events, registry=registry)[0].content.progress == (1, 2)  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="init"):
        registry.register("bad", object())  # type: ignore[arg-type]
    assert "search" not in default_registry


def test_status_derivation() -> None:
    streaming = thread(SEED_EXAMPLE[:4])
    assert [v.status for v in streaming] == ["complete", "streaming", "streaming"]
    errored = thread([*SEED_EXAMPLE[:4], {"type": "error", "runId": "agent-1", "message": "boom"}])
    assert [v.status for v in errored] == ["complete", "error", "error", "error"]
    assert errored[-1].content.kind == "error"
    assert errored[-1].id == "agent-1:error"
    no_lifecycle = thread([{"type": "text", "runId": "r", "id": "t", "content": "x"}])
    assert no_lifecycle[0].status == "complete"


def test_provider_runs_inherit_their_agent_status() -> None:
    events = [
        {"type": "harness_start", "runId": "A"},
        {"type": "text", "runId": "P1", "parentId": "A", "id": "t", "content": "hi"},
    ]
    assert thread(events)[0].status == "streaming"
    assert thread([*events, {"type": "harness_end", "runId": "A"}])[0].status == "complete"


def test_content_keeps_arrival_order_for_the_real_agent_shape() -> None:
    """Spec §9 #1: upstream puts every provider text before the agent's first tool call."""
    events = [
        {"type": "harness_start", "runId": "A"},
        {"type": "text", "runId": "P1", "parentId": "A", "id": "x1", "content": "Let me check"},
        {"type": "tool_call", "runId": "A", "id": "A/x", "name": "ls", "input": {}},
        {"type": "tool_result", "runId": "A", "id": "A/x", "name": "ls", "output": "ok"},
        {"type": "text", "runId": "P2", "parentId": "A", "id": "x2", "content": "Done"},
        {"type": "harness_end", "runId": "A"},
    ]
    views = thread(events)
    assert [(v.content.kind, getattr(v.content, "text", None)) for v in views] == [
        ("text", "Let me check"),
        ("tool_call", None),
        ("text", "Done"),
    ]


def test_subagent_is_a_nested_branch_of_its_tool_call() -> None:
    events = [
        {"type": "harness_start", "runId": "a1"},
        {"type": "text", "runId": "a1", "id": "t0", "content": "I'll search..."},
        {"type": "tool_call", "runId": "a1", "id": "tc-1", "name": "agent", "input": {"task": "X"}},
        {"type": "harness_start", "runId": "a2", "parentId": "tc-1"},
        {"type": "text", "runId": "a2", "id": "t1", "content": "Searching..."},
        {"type": "tool_call", "runId": "a2", "id": "tc-2", "name": "bash", "input": {}},
        {"type": "tool_result", "runId": "a2", "id": "tc-2", "name": "bash", "output": {}},
        {"type": "text", "runId": "a2", "id": "t2", "content": "Found results"},
        {"type": "harness_end", "runId": "a2"},
        {"type": "tool_result", "runId": "a1", "id": "tc-1", "name": "agent", "output": "X found"},
        {"type": "text", "runId": "a1", "id": "t3", "content": "Based on the search..."},
    ]
    views = thread(events)
    assert kinds(views) == ["text", "tool_call", "text"]
    (branch,) = views[1].branches
    assert kinds(branch) == ["text", "tool_call", "text"]
    assert branch[1].content.output == {}  # type: ignore[union-attr]
    assert {v.status for v in branch} == {"complete"}
    assert views[0].status == "streaming"


def test_subagent_branch_shows_pending_before_it_produces_anything() -> None:
    events = [
        {"type": "harness_start", "runId": "a1"},
        {"type": "tool_call", "runId": "a1", "id": "tc", "name": "agent", "input": {}},
        {"type": "harness_start", "runId": "s", "parentId": "tc"},
    ]
    views = thread(events)
    (branch,) = views[0].branches
    assert [(v.id, v.content.kind, v.status) for v in branch] == [("s:harness_start", "pending", "streaming")]
    done = thread([*events, {"type": "harness_end", "runId": "s"}])
    assert done[0].branches == []


def test_pending_run_after_a_user_message() -> None:
    views = thread(SEED_EXAMPLE[:2])
    assert kinds(views) == ["user", "pending"]
    assert thread(SEED_EXAMPLE[:3])[-1].content.kind == "text"


def test_parallel_subagents_make_parallel_branches() -> None:
    events = [
        {"type": "harness_start", "runId": "a"},
        {"type": "tool_call", "runId": "a", "id": "c1", "name": "agent", "input": {}},
        {"type": "tool_call", "runId": "a", "id": "c2", "name": "agent", "input": {}},
        {"type": "text", "runId": "s1", "parentId": "c1", "id": "x1", "content": "one"},
        {"type": "text", "runId": "s2", "parentId": "c2", "id": "x2", "content": "two"},
        {"type": "text", "runId": "s1", "id": "x3", "content": " more"},
    ]
    views = thread(events)
    assert [[v.content.text for v in b] for b in views[0].branches] == [["one more"]]  # type: ignore[union-attr]
    assert [[v.content.text for v in b] for b in views[1].branches] == [["two"]]  # type: ignore[union-attr]


def test_nesting_to_any_depth_is_iterative() -> None:
    depth = 3000  # far beyond Python's recursion limit
    events: list[dict[str, Any]] = []
    parent = None
    for level in range(depth):
        run = f"r{level}"
        start: dict[str, Any] = {"type": "harness_start", "runId": run}
        if parent is not None:
            start["parentId"] = parent
        events.append(start)
        events.append({"type": "tool_call", "runId": run, "id": f"c{level}", "name": "agent", "input": {}})
        parent = f"c{level}"
    views = thread(events)
    level_count = 0
    current = views
    while current:
        level_count += 1
        assert current[0].content.kind == "tool_call"
        current = current[0].branches[0] if current[0].branches else []
    assert level_count == depth


def test_merged_text_keeps_branches_of_every_merged_node() -> None:
    """Spec §9 #18: a child spawned from the second of two merged text nodes is not lost."""
    events = [
        {"type": "harness_start", "runId": "a"},
        {"type": "text", "runId": "a", "id": "t1", "content": "one "},
        {"type": "text", "runId": "a", "id": "t2", "content": "two"},
        {"type": "text", "runId": "a", "id": "t3", "content": "!"},
        {"type": "text", "runId": "side", "parentId": "t2", "id": "s", "content": "aside"},
    ]
    views = thread(events)
    assert len(views) == 1
    assert views[0].content.text == "one two!"  # type: ignore[union-attr]
    assert [[v.content.text for v in b] for b in views[0].branches] == [["aside"]]  # type: ignore[union-attr]


def test_a_child_of_the_newest_node_continues_in_arrival_order() -> None:
    """A run spawned from a run's newest content node (not a tool call) flows on in the same list,
    as a reply flows on from its user message; what its parent run adds later follows it."""
    events = [
        {"type": "harness_start", "runId": "a"},
        {"type": "text", "runId": "a", "id": "t1", "content": "final answer"},
        {"type": "text", "runId": "p", "parentId": "a", "id": "x", "content": "next call"},
        {"type": "tool_call", "runId": "a", "id": "c", "name": "f", "input": {}},
    ]
    views = thread(events)
    assert [(v.content.kind, v.run_id) for v in views] == [("text", "a"), ("text", "p"), ("tool_call", "a")]


def test_cycles_terminate() -> None:
    events = [
        {"type": "text", "runId": "a", "parentId": "b1", "id": "a1", "content": "x"},
        {"type": "text", "runId": "b", "parentId": "a1", "id": "b1", "content": "y"},
    ]
    views = thread(events)
    texts = [v.content.text for v in views] + [  # type: ignore[union-attr]
        c.content.text
        for v in views
        for b in v.branches
        for c in b  # type: ignore[union-attr]
    ]
    assert sorted(texts) == ["x", "y"]


def test_late_parent_adopts_its_child_run() -> None:
    events = [
        {"type": "harness_start", "runId": "s", "parentId": "tc"},
        {"type": "text", "runId": "s", "id": "st", "content": "early"},
        {"type": "harness_start", "runId": "a"},
        {"type": "tool_call", "runId": "a", "id": "tc", "name": "agent", "input": {}},
    ]
    views = thread(events)
    assert kinds(views) == ["tool_call"]
    assert [v.content.text for v in views[0].branches[0]] == ["early"]  # type: ignore[union-attr]


def test_view_options() -> None:
    events = [
        {"type": "harness_start", "runId": "a"},
        {"type": "reasoning", "runId": "a", "id": "r", "content": "think"},
        {"type": "tool_call", "runId": "a", "id": "c", "name": "agent", "input": {"big": "x" * 100}},
        {"type": "harness_start", "runId": "s", "parentId": "c"},
        {"type": "text", "runId": "s", "id": "st", "content": "inner"},
        {"type": "tool_result", "runId": "a", "id": "c", "name": "agent", "output": "long output"},
    ]
    assert kinds(thread(events)) == ["reasoning", "tool_call"]
    assert kinds(thread(events, options=ViewOptions(hide_reasoning=True))) == ["tool_call"]
    collapsed = thread(events, options=ViewOptions(collapse_tools=True))[1].content
    assert to_jsonable(collapsed) == {
        "kind": "tool_call",
        "name": "agent",
        "input": None,
        "output": True,
        "hasOutput": True,
        "progress": None,
    }
    assert thread(events, options=ViewOptions(hide_subagents=True))[1].branches == []
    assert len(thread(events)[1].branches) == 1


def test_to_jsonable_uses_camel_case_everywhere() -> None:
    data = to_jsonable(thread(SEED_EXAMPLE))
    assert set(data[0]) == {"id", "runId", "role", "content", "status", "branches"}
    assert data[3]["content"]["toolCallId"] == "tc-1"


def test_project_thread_rejects_what_it_cannot_project() -> None:
    graph = reduce_events(create_graph(), SEED_EXAMPLE)
    with pytest.raises(TypeError, match="no active set"):
        project_thread(graph, object())
    with pytest.raises(TypeError, match="cannot project a dict"):
        project_thread({})


def test_one_shot_loop_equals_node_by_node_placement() -> None:
    """`add_all` (the one-shot loop) and `add` per node build the same views; the one-shot entry
    point refuses a change-tracking builder."""
    from convograph.projections.thread import ThreadBuilder, graph_arrival_order

    events: list[dict[str, Any]] = [
        {"type": "user", "runId": "u", "content": "go"},
        {"type": "harness_start", "runId": "a", "parentId": "u:user"},
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p0",
            "toolCallId": "c",
            "name": "exec",
            "content": {"channel": "stdout", "data": "early\n"},
        },
        {"type": "reasoning", "runId": "P", "parentId": "a", "id": "r", "content": "th", "signature": "s"},
        {"type": "text", "runId": "P", "parentId": "a", "id": "t", "content": "hi"},
        {"type": "tool_call", "runId": "a", "id": "c", "name": "exec", "input": {"cmd": "ls"}},
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p1",
            "toolCallId": "c",
            "name": "exec",
            "content": {"channel": "stdout", "data": "late\n"},
        },
        {"type": "tool_result", "runId": "a", "id": "c", "name": "exec", "output": "ok"},
        {"type": "tool_result", "runId": "a", "id": "ghost", "name": "x", "output": 1},
        {"type": "harness_end", "runId": "a"},
    ]
    pairs = graph_arrival_order(reduce_events(create_graph(), events))
    one_shot, per_node = ThreadBuilder(), ThreadBuilder()
    one_shot.add_all(pairs)
    for node, parent_id in pairs:
        per_node.add(node, parent_id)
    assert to_jsonable(one_shot.views) == to_jsonable(per_node.views)
    (call,) = [view for view in one_shot.views if view.id == "c"]
    assert call.content.progress["stdout"] == "early\nlate\n"  # type: ignore[union-attr]
    with pytest.raises(RuntimeError, match="one-shot"):
        ThreadBuilder(track_changes=True).add_placed([])


def test_top_level_only_builder_gives_the_same_top_level() -> None:
    """`build_thread(..., top_level_only=True)` (what `project_messages` reads) places every node
    by the same rules: its top-level views equal the full build's, except that no view carries
    branches (all share one list, which stays empty) and statuses are left unsettled."""
    import random

    import msgspec

    from convograph.projections.thread import build_thread
    from tests.test_projections_golden import random_stream

    nested = 0
    for seed in range(40):
        events = random_stream(random.Random(seed))
        rnd = random.Random(seed)
        shuffled = list(events)
        rnd.shuffle(shuffled)  # late parents, results before calls
        for stream in (events, shuffled):
            graph = reduce_events(create_graph(), stream)
            full = build_thread(graph).views
            top = build_thread(graph, top_level_only=True).views
            stripped = [msgspec.structs.replace(view, branches=[], status="complete") for view in full]
            unsettled = [msgspec.structs.replace(view, status="complete") for view in top]
            assert msgspec.to_builtins(unsettled) == msgspec.to_builtins(stripped)
            assert all(view.branches == [] for view in top)
            nested += any(view.branches for view in full)
    assert nested > 10  # the streams do nest runs under views


def test_pending_views_made_at_the_end_keep_their_place() -> None:
    """The one-shot loop makes a pending view only if nothing follows it by the end; its branch
    keeps the place it took when the run started (before a sibling branch that filled later), and
    until dropped it still ends its list (a later text of another run does not merge across it)."""
    from convograph.projections import ThreadProjector

    events: list[dict[str, Any]] = [
        {"type": "harness_start", "runId": "lead"},
        {"type": "tool_call", "runId": "lead", "id": "call", "name": "agent", "input": {}},
        {"type": "harness_start", "runId": "sub1", "parentId": "call"},
        {"type": "harness_start", "runId": "sub2", "parentId": "call"},
        {"type": "text", "runId": "sub2", "id": "s2-text", "content": "working"},
        {"type": "text", "runId": "lead", "id": "t1", "content": "a"},
        {"type": "harness_start", "runId": "side", "parentId": "lead"},
        {"type": "text", "runId": "lead", "id": "t2", "content": "b"},
    ]
    projector = ThreadProjector()
    for event in events:
        projector.apply(event)
        graph = reduce_events(create_graph(), events[: events.index(event) + 1])
        assert to_jsonable(project_thread(graph)) == to_jsonable(projector.views)
    views = project_thread(reduce_events(create_graph(), events))
    call = next(view for view in views if view.id == "call")
    assert [[item.content.kind for item in branch] for branch in call.branches] == [["pending"], ["text"]]
    assert [view.content.kind for view in views][-2:] == [
        "text",
        "text",
    ]  # "a", then "b" after the pending view was dropped


def test_one_shot_statuses_of_views_made_while_their_run_streamed() -> None:
    """A one-shot fill makes every view ``complete`` and settles statuses at the end, visiting no
    view when no run is left open or failed: a view made while its run was still streaming (an
    orphan result, through `ThreadBuilder._new_view`) ends with its run's final status, as with
    `add` per node; an open run's views stream, a failed run's show the error."""
    from convograph.projections.thread import ThreadBuilder, graph_arrival_order

    def statuses(events: list[dict[str, Any]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        graph = reduce_events(create_graph(), events)
        per_node = ThreadBuilder()
        for node, parent_id in graph_arrival_order(graph):
            per_node.add(node, parent_id)
        one_shot = [(view.id, view.status) for view in project_thread(graph)]
        return one_shot, [(view.id, view.status) for view in per_node.views]

    run = [
        {"type": "harness_start", "runId": "a"},
        {"type": "tool_result", "runId": "a", "id": "ghost", "name": "x", "output": 1},
        {"type": "text", "runId": "a", "id": "t", "content": "hi"},
    ]
    ended, ended_per_node = statuses([*run, {"type": "harness_end", "runId": "a"}])
    assert ended == ended_per_node == [("ghost", "complete"), ("t", "complete")]
    still_open, open_per_node = statuses(run)
    assert still_open == open_per_node == [("ghost", "streaming"), ("t", "streaming")]
    failed, failed_per_node = statuses([*run, {"type": "error", "runId": "a", "message": "boom"}])
    assert failed == failed_per_node
    assert {status for _, status in failed} == {"error"}


def test_flat_loop_equals_the_general_loop() -> None:
    """`build_thread` fills from a flat graph through `ThreadBuilder.add_placed` (the one placement,
    `ThreadBuilder.place`) fed by the graph's arrival order; it gives what `add_placed` over
    `graph_arrival_order` gives, for every option, full and top level only, over generated,
    shuffled (late parents, results before calls) and redelivered streams, and over an older
    version of a graph (`node_map` then copies). An input that is not run-shaped (a run's later
    node with a parent in another run, which the reducer never makes) is placed by the same
    rules."""
    import random

    import msgspec

    from convograph.projections import thread as thread_module
    from convograph.projections.thread import ThreadBuilder, build_thread, graph_arrival_order
    from tests.test_projections_golden import OPTIONS, random_stream

    def general(graph: Any, options: ViewOptions | None, top_level_only: bool) -> list[ViewNode]:
        builder = ThreadBuilder(options=options, top_level_only=top_level_only)
        builder.add_placed((node, parent, None) for node, parent in graph_arrival_order(graph))
        return builder.views

    graphs = []
    for seed in range(60):
        rnd = random.Random(seed)
        events = random_stream(rnd)
        shuffled = list(events)
        rnd.shuffle(shuffled)
        graphs.append(reduce_events(create_graph(), events))
        graphs.append(reduce_events(create_graph(), shuffled + shuffled[: len(shuffled) // 3]))
    old = reduce_events(create_graph(), random_stream(random.Random(7)))
    reduce_events(old, [{"type": "text", "runId": "later", "id": "x", "content": "newer"}])
    assert isinstance(old.node_map(), dict)  # an older version: a copy, without the newer node
    assert "x" not in old.node_map()
    graphs.append(old)
    for graph in graphs:
        assert dict(graph.node_map()) == dict(graph.nodes.items())
        assert graph.node_list() == list(graph.iter_nodes())
        assert graph.node_ids() == [node.id for node in graph.iter_nodes()]
        for options in OPTIONS.values():
            for top_level_only in (False, True):
                fast = build_thread(graph, options=options, top_level_only=top_level_only).views
                assert to_jsonable(fast) == to_jsonable(general(graph, options, top_level_only))

    graph = reduce_events(
        create_graph(),
        [
            {"type": "user", "runId": "u", "content": "q"},
            {"type": "text", "runId": "a", "parentId": "u:user", "id": "t1", "content": "x"},
            {"type": "text", "runId": "b", "id": "t2", "content": "y"},
        ],
    )
    nodes = list(graph.iter_nodes())
    not_run_shaped = [None, "u:user", "t1"]  # t2 then t1's run again, by a cross-run parent
    moved = [nodes[0], nodes[1], nodes[2], msgspec.structs.replace(nodes[1], id="t3")]
    original = thread_module._arrival_lists
    try:
        thread_module._arrival_lists = lambda _graph: (moved, [*not_run_shaped, "t2"])
        views = build_thread(graph).views
    finally:
        thread_module._arrival_lists = original
    builder = ThreadBuilder()
    builder.add_placed(zip(moved, [*not_run_shaped, "t2"], [None] * 4, strict=True))
    assert to_jsonable(views) == to_jsonable(builder.views)
