"""The flat graph: every rule of seeds 000, 001 and 003, plus the documented fixes over upstream."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convograph import (
    EventError,
    create_graph,
    get_children,
    get_nodes_in_run,
    get_text,
    get_tool_calls,
    parse_event,
    reduce_event,
    reduce_events,
    to_jsonable,
    walk_dfs,
)
from convograph.graph import Graph, TextNode, ToolCallNode, UsageNode, iter_dfs, roots

# Seed 000 "Example graph": an agent with one tool call.
SEED_EXAMPLE: list[dict[str, Any]] = [
    {"type": "user", "runId": "user-1", "content": "List files"},
    {"type": "harness_start", "runId": "agent-1", "parentId": "user-1:user", "agentId": "main"},
    {"type": "text", "id": "text-1", "runId": "agent-1", "content": "I'll list the files..."},
    {"type": "tool_call", "id": "tc-1", "runId": "agent-1", "name": "bash", "input": {"command": "ls"}},
    {"type": "usage", "runId": "agent-1", "inputTokens": 50, "outputTokens": 20},
    {
        "type": "relay",
        "kind": "permission",
        "id": "relay-1",
        "runId": "agent-1",
        "toolCallId": "tc-1",
        "tool": "bash",
        "params": {"command": "ls"},
    },
    {
        "type": "tool_result",
        "id": "tc-1",
        "runId": "agent-1",
        "name": "bash",
        "output": {"context": "file1.txt\nfile2.txt"},
    },
    {"type": "text", "id": "text-2", "runId": "agent-1", "content": "The directory contains..."},
    {"type": "usage", "runId": "agent-1", "inputTokens": 70, "outputTokens": 15},
    {"type": "harness_end", "runId": "agent-1", "agentId": "main"},
]


def build(events: list[dict[str, Any]]) -> Graph:
    return reduce_events(create_graph(), events)


def edge_pairs(graph: Graph) -> list[tuple[str, str]]:
    return [(source, target) for source, targets in graph.edges.items() for target in targets]


def test_seed_example_nodes_and_edges() -> None:
    graph = build(SEED_EXAMPLE)
    assert list(graph.nodes) == [
        "user-1:user",
        "agent-1:harness_start",
        "text-1",
        "tc-1",
        "agent-1:usage:0",
        "relay-1",
        "tc-1:result",
        "text-2",
        "agent-1:usage:1",
        "agent-1:harness_end",
    ]
    assert edge_pairs(graph) == [
        ("user-1:user", "agent-1:harness_start"),
        ("agent-1:harness_start", "text-1"),
        ("text-1", "tc-1"),
        ("tc-1", "agent-1:usage:0"),
        ("agent-1:usage:0", "relay-1"),
        ("relay-1", "tc-1:result"),
        ("tc-1:result", "text-2"),
        ("text-2", "agent-1:usage:1"),
        ("agent-1:usage:1", "agent-1:harness_end"),
    ]
    assert dict(graph.last_node_by_run_id) == {
        "user-1": "user-1:user",
        "agent-1": "agent-1:harness_end",
    }
    usage = graph.nodes["agent-1:usage:0"]
    assert isinstance(usage, UsageNode)
    assert (usage.input_tokens, usage.output_tokens) == (50, 20)
    relay = graph.nodes["relay-1"]
    assert relay.kind == "relay"
    assert to_jsonable(relay) == {
        "kind": "relay",
        "id": "relay-1",
        "runId": "agent-1",
        "relayKind": "permission",
        "toolCallId": "tc-1",
        "tool": "bash",
        "params": {"command": "ls"},
    }


def test_seed_subagent_example_cross_run_edge() -> None:
    graph = build(
        [
            {"type": "text", "id": "t0", "runId": "a1", "content": "I'll search..."},
            {"type": "tool_call", "id": "tc-1", "runId": "a1", "name": "agent", "input": {"task": "X"}},
            {"type": "harness_start", "runId": "a2", "parentId": "tc-1"},
            {"type": "text", "id": "t1", "runId": "a2", "content": "Searching..."},
            {"type": "tool_call", "id": "tc-2", "runId": "a2", "name": "bash", "input": {}},
            {"type": "tool_result", "id": "tc-2", "runId": "a2", "name": "bash", "output": {}},
            {"type": "text", "id": "t2", "runId": "a2", "content": "Found results"},
            {"type": "harness_end", "runId": "a2", "parentId": "tc-1"},
            {"type": "tool_result", "id": "tc-1", "runId": "a1", "name": "agent", "output": "X"},
            {"type": "text", "id": "t3", "runId": "a1", "content": "Based on the search..."},
        ]
    )
    assert graph.edges["tc-1"] == ("a2:harness_start", "tc-1:result")
    assert [node.id for node in get_nodes_in_run(graph, "a2")] == [
        "a2:harness_start",
        "t1",
        "tc-2",
        "tc-2:result",
        "t2",
        "a2:harness_end",
    ]
    assert [node.id for node in get_children(graph, "tc-1")] == ["a2:harness_start", "tc-1:result"]
    visited: list[str] = []
    walk_dfs(graph, "t0", lambda node: visited.append(node.id))
    assert visited == [
        "t0",
        "tc-1",
        "a2:harness_start",
        "t1",
        "tc-2",
        "tc-2:result",
        "t2",
        "a2:harness_end",
        "tc-1:result",
        "t3",
    ]


@pytest.mark.parametrize(
    ("event", "node_id"),
    [
        ({"type": "text", "id": "x", "runId": "r", "content": "a"}, "x"),
        ({"type": "reasoning", "id": "x", "runId": "r", "content": "a"}, "x"),
        ({"type": "tool_call", "id": "x", "runId": "r", "name": "n"}, "x"),
        ({"type": "tool_result", "id": "x", "runId": "r", "name": "n"}, "x:result"),
        ({"type": "tool_progress", "id": "p", "runId": "r", "toolCallId": "x", "name": "n"}, "p"),
        (
            {"type": "relay", "kind": "permission", "id": "x", "runId": "r", "toolCallId": "t", "tool": "n"},
            "x",
        ),
        ({"type": "harness_start", "runId": "r"}, "r:harness_start"),
        ({"type": "harness_end", "runId": "r"}, "r:harness_end"),
        ({"type": "error", "runId": "r", "message": "m"}, "r:error"),
        ({"type": "user", "runId": "r", "content": "c"}, "r:user"),
        ({"type": "usage", "runId": "r", "inputTokens": 1, "outputTokens": 1}, "r:usage:0"),
        ({"type": "error", "message": "server down"}, "_stream:error"),
    ],
)
def test_node_id_table(event: dict[str, Any], node_id: str) -> None:
    assert list(build([event]).nodes) == [node_id]


@pytest.mark.parametrize(
    "event",
    [
        {"type": "connected", "sessionId": "s"},
        {"type": "repl_input", "runId": "r", "id": "c", "code": "x"},
        {"type": "repl_progress", "runId": "r", "id": "c", "chunk": "x"},
        {"type": "repl_output", "runId": "r", "id": "c"},
        {"type": "relay_resolved", "relayId": "x", "approved": True},
    ],
)
def test_events_without_a_node_return_the_same_graph(event: dict[str, Any]) -> None:
    graph = build(SEED_EXAMPLE)
    assert reduce_event(graph, event) is graph


def test_streaming_append_accumulates_without_edges() -> None:
    events = [
        {"type": "harness_start", "runId": "r"},
        {"type": "text", "id": "t", "runId": "r", "content": "The weather"},
        {"type": "reasoning", "id": "th", "runId": "r", "content": "think"},
        {"type": "text", "id": "t", "runId": "r", "content": " is sunny."},
        {"type": "reasoning", "id": "th", "runId": "r", "content": "ing", "signature": "s1"},
    ]
    graph = build(events)
    text = graph.nodes["t"]
    assert isinstance(text, TextNode)
    assert text.content == "The weather is sunny."
    assert graph.nodes["th"].content == "thinking"  # type: ignore[union-attr]
    assert graph.nodes["th"].signature == "s1"  # type: ignore[union-attr]
    assert edge_pairs(graph) == [("r:harness_start", "t"), ("t", "th")]
    assert graph.last_node_by_run_id["r"] == "th"
    assert get_text(graph, "r") == "The weather is sunny."


def test_reduce_never_changes_its_input() -> None:
    versions = [create_graph()]
    for event in SEED_EXAMPLE:
        versions.append(reduce_event(versions[-1], event))
    snapshots = [to_jsonable(version) for version in versions]
    # Extend an old version: the lineage forks, and neither line sees the other.
    branch = reduce_event(versions[3], {"type": "text", "id": "text-1", "runId": "agent-1", "content": "!"})
    branch = reduce_event(branch, {"type": "text", "id": "other", "runId": "agent-1", "content": "b"})
    assert [to_jsonable(version) for version in versions] == snapshots
    assert branch.nodes["text-1"].content == "I'll list the files...!"  # type: ignore[union-attr]
    assert list(branch.nodes) == ["user-1:user", "agent-1:harness_start", "text-1", "other"]
    assert versions[0].nodes == {}
    assert len(versions[1].nodes) == 1


def test_event_id_duplicates_are_no_ops() -> None:
    first = {"type": "text", "id": "t", "runId": "r", "content": "Hi", "eventId": "e1"}
    graph = build([first])
    assert reduce_event(graph, first) is graph
    assert graph.nodes["t"].content == "Hi"  # type: ignore[union-attr]
    assert graph.has_seen_event("e1")


def test_repeated_non_text_event_adds_no_self_loop_or_edge() -> None:
    call = {"type": "tool_call", "id": "c", "runId": "r", "name": "bash", "input": {"a": 1}}
    graph = build([{"type": "harness_start", "runId": "r"}, call, call])
    assert edge_pairs(graph) == [("r:harness_start", "c")]
    later = build(
        [
            {"type": "harness_start", "runId": "r"},
            call,
            {"type": "text", "id": "t", "runId": "r", "content": "x"},
            call,
        ]
    )
    assert edge_pairs(later) == [("r:harness_start", "c"), ("c", "t")]
    assert later.last_node_by_run_id["r"] == "t"
    updated = reduce_event(later, {**call, "input": {"a": 2}})
    node = updated.nodes["c"]
    assert isinstance(node, ToolCallNode)
    assert node.input == {"a": 2}
    assert later.nodes["c"].input == {"a": 1}  # type: ignore[union-attr]


def test_id_taken_by_another_kind_is_reported_not_overwritten() -> None:
    graph = build(
        [
            {"type": "text", "id": "x", "runId": "r", "content": "a"},
            {"type": "tool_call", "id": "x", "runId": "r", "name": "n"},
        ]
    )
    assert graph.nodes["x"].kind == "text"
    assert [(d.code, d.node_id, d.event_type) for d in graph.diagnostics] == [
        ("id_conflict", "x", "tool_call")
    ]


def test_parent_naming_a_run_resolves_to_its_last_node() -> None:
    graph = build(
        [
            {"type": "harness_start", "runId": "agent"},
            {"type": "text", "id": "t1", "runId": "agent", "content": "a"},
            {"type": "text", "id": "p1", "runId": "provider-1", "parentId": "agent", "content": "b"},
        ]
    )
    assert graph.edges["t1"] == ("p1",)


def test_child_before_parent_is_linked_when_the_parent_arrives() -> None:
    graph = build([{"type": "harness_start", "runId": "sub", "parentId": "tc"}])
    assert dict(graph.pending_parents) == {"tc": ("sub:harness_start",)}
    assert [node.id for node in roots(graph)] == ["sub:harness_start"]
    graph = reduce_events(
        graph,
        [
            {"type": "harness_start", "runId": "main"},
            {"type": "tool_call", "id": "tc", "runId": "main", "name": "agent"},
        ],
    )
    assert dict(graph.pending_parents) == {}
    assert graph.edges["tc"] == ("sub:harness_start",)
    assert [node.id for node in roots(graph)] == ["main:harness_start"]


def test_child_waiting_for_a_run_is_linked_to_its_first_node() -> None:
    graph = build(
        [
            {"type": "text", "id": "p", "runId": "provider", "parentId": "agent", "content": "x"},
            {"type": "harness_start", "runId": "agent"},
        ]
    )
    assert graph.edges["agent:harness_start"] == ("p",)


def test_usage_counter_is_per_run_and_deterministic() -> None:
    usage = {"type": "usage", "inputTokens": 1, "outputTokens": 1}
    events = [{**usage, "runId": "a"}, {**usage, "runId": "b"}, {**usage, "runId": "a"}]
    assert list(build(events).nodes) == ["a:usage:0", "b:usage:0", "a:usage:1"]
    assert list(build(events).nodes) == list(build(events).nodes)


def test_queries() -> None:
    graph = build(SEED_EXAMPLE)
    assert get_text(graph, "agent-1") == "I'll list the files...The directory contains..."
    assert [node.id for node in get_tool_calls(graph, "agent-1")] == ["tc-1"]
    assert get_nodes_in_run(graph, "missing") == []
    assert get_children(graph, "missing") == []
    assert [node.id for node in get_children(graph, "tc-1")] == ["agent-1:usage:0"]


def test_walk_is_cycle_safe() -> None:
    # Two runs naming each other's first node as parent before either exists form a cycle.
    graph = build(
        [
            {"type": "text", "id": "a", "runId": "ra", "parentId": "b", "content": "x"},
            {"type": "text", "id": "b", "runId": "rb", "parentId": "a", "content": "y"},
        ]
    )
    assert set(edge_pairs(graph)) == {("a", "b"), ("b", "a")}
    assert [node.id for node in iter_dfs(graph, "a")] == ["a", "b"]


def test_reduce_events_validates_the_whole_batch_first() -> None:
    graph = build(SEED_EXAMPLE)
    with pytest.raises(EventError) as info:
        reduce_events(graph, [{"type": "text", "id": "z", "runId": "r", "content": "ok"}, {"type": "bogus"}])
    assert info.value.field == "type"
    assert "z" not in graph.nodes
    # The lineage was not advanced, so extending `graph` needs no fork.
    assert (
        reduce_event(graph, {"type": "text", "id": "z", "runId": "r", "content": "ok"}).version
        == graph.version + 1
    )


def test_accepts_wire_forms() -> None:
    wire = {"type": "text", "id": "t", "runId": "r", "content": "x"}
    assert build([wire]) == reduce_event(create_graph(), parse_event(wire))


# --- properties ------------------------------------------------------------------------------------


@st.composite
def streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Several runs, some spawned from an earlier run's tool call; every event has an eventId."""
    run_count = draw(st.integers(1, 4))
    events: list[dict[str, Any]] = []
    calls: list[str] = []
    for r in range(run_count):
        run = f"run{r}"
        start: dict[str, Any] = {"type": "harness_start", "runId": run}
        if calls and draw(st.booleans()):
            start["parentId"] = draw(st.sampled_from(calls))
        run_events = [start]
        for step in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["text", "tool", "usage", "reasoning"]))
            if kind in ("text", "reasoning"):
                for chunk in range(draw(st.integers(1, 3))):
                    run_events.append(
                        {"type": kind, "runId": run, "id": f"{run}-{kind}{step}", "content": f"c{chunk}"}
                    )
            elif kind == "tool":
                call_id = f"{run}/call{step}"
                calls.append(call_id)
                run_events.append(
                    {"type": "tool_call", "runId": run, "id": call_id, "name": "bash", "input": {"s": step}}
                )
                run_events.append(
                    {"type": "tool_result", "runId": run, "id": call_id, "name": "bash", "output": step}
                )
            else:
                run_events.append({"type": "usage", "runId": run, "inputTokens": step, "outputTokens": 1})
        run_events.append({"type": "harness_end", "runId": run})
        events.extend(run_events)
    for index, event in enumerate(events):
        event["eventId"] = f"e{index}"
    return events


@settings(max_examples=150, deadline=None)
@given(stream=streams(), data=st.data())
def test_replay_with_duplicates_inserted_converges(stream: list[dict[str, Any]], data: st.DataObject) -> None:
    redelivered = list(stream)
    for _ in range(data.draw(st.integers(0, 10))):
        original = data.draw(st.integers(0, len(stream) - 1))
        position = data.draw(st.integers(redelivered.index(stream[original]) + 1, len(redelivered)))
        redelivered.insert(position, stream[original])
    assert build(redelivered) == build(stream)


@settings(max_examples=100, deadline=None)
@given(stream=streams(), seed=st.integers(0, 2**16))
def test_interleaving_independent_runs_gives_the_same_graph(stream: list[dict[str, Any]], seed: int) -> None:
    # Keep each run's own order; shuffle which run goes next. Parents may then arrive late.
    by_run: dict[str, list[dict[str, Any]]] = {}
    for event in stream:
        by_run.setdefault(event["runId"], []).append(event)
    rng = random.Random(seed)
    queues = [list(events) for events in by_run.values()]
    shuffled = []
    while queues:
        queue = rng.choice(queues)
        shuffled.append(queue.pop(0))
        if not queue:
            queues.remove(queue)
    original, interleaved = build(stream), build(shuffled)
    assert dict(original.nodes) == dict(interleaved.nodes)
    assert {k: set(v) for k, v in original.edges.items()} == {k: set(v) for k, v in interleaved.edges.items()}
    assert dict(original.pending_parents) == dict(interleaved.pending_parents) == {}


@settings(max_examples=60, deadline=None)
@given(stream=streams())
def test_every_older_version_stays_identical(stream: list[dict[str, Any]]) -> None:
    versions = [create_graph()]
    snapshots: list[Any] = [to_jsonable(versions[0])]
    for event in stream:
        versions.append(reduce_event(versions[-1], event))
        snapshots.append(to_jsonable(versions[-1]))
    assert [to_jsonable(version) for version in versions] == snapshots


@settings(max_examples=40, deadline=None)
@given(stream=streams())
def test_bulk_reads_equal_per_key_reads_at_every_version(stream: list[dict[str, Any]]) -> None:
    """``iter_nodes()`` and ``edges.items()`` (bulk reads) agree with key-by-key reads, for the
    newest version and for every older one kept while the lineage grew."""
    versions = [create_graph()]
    for event in stream:
        versions.append(reduce_event(versions[-1], event))
    for graph in versions:
        nodes = graph.nodes
        assert list(graph.iter_nodes()) == [nodes[node_id] for node_id in nodes]
        assert list(nodes.values()) == [nodes[node_id] for node_id in nodes]
        assert list(nodes.items()) == [(node_id, nodes[node_id]) for node_id in nodes]
        edges = graph.edges
        assert list(edges.items()) == [(source, edges[source]) for source in edges]
        assert all(graph.children_ids(source) == targets for source, targets in edges.items())


def _parents_from_edges(graph: Graph) -> list[str | None]:
    incoming: dict[str, list[str]] = {}
    for source, targets in graph.edges.items():
        for target in targets:
            incoming.setdefault(target, []).append(source)
    assert all(len(sources) == 1 for sources in incoming.values())  # at most one incoming edge
    return [incoming[node_id][0] if node_id in incoming else None for node_id in graph.nodes]


@settings(max_examples=80, deadline=None)
@given(stream=streams(), seed=st.integers(0, 2**16))
def test_parent_index_equals_the_edges_at_every_version(stream: list[dict[str, Any]], seed: int) -> None:
    """``parent_ids()`` (the reducer's parent index) is each node's one incoming edge at every
    version, parents before children; it declines (``None``) exactly from the first late-parent
    adoption on, and for forks taken after one."""
    rng = random.Random(seed)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for event in stream:
        by_run.setdefault(event["runId"], []).append(event)
    queues = [list(events) for events in by_run.values()]
    shuffled = []
    while queues:  # each run in order, runs interleaved: parents may arrive after children
        queue = rng.choice(queues)
        shuffled.append(queue.pop(0))
        if not queue:
            queues.remove(queue)
    versions = [create_graph()]
    for event in shuffled:
        versions.append(reduce_event(versions[-1], event))
    adopted = False
    for graph in versions:
        expected = _parents_from_edges(graph)
        ids = list(graph.nodes)
        late = any(p is not None and ids.index(p) > i for i, p in enumerate(expected))
        parents = graph.parent_ids()
        adopted = adopted or parents is None
        if parents is None:
            continue
        assert not adopted or parents is None
        assert parents == expected
        assert not late
    # Extending an older version forks the lineage; the fork's index answers for its versions too.
    middle = versions[len(versions) // 2]
    fork = reduce_event(middle, {"type": "text", "runId": "forked", "id": "fork-text", "content": "x"})
    if middle.parent_ids() is not None:
        assert fork.parent_ids() == [*_parents_from_edges(middle), None]
    else:
        assert fork.parent_ids() is None


def test_parent_index_declines_after_a_late_parent() -> None:
    graph = build(
        [
            {"type": "text", "runId": "child", "parentId": "call-1", "id": "t1", "content": "hi"},
            {"type": "tool_call", "runId": "lead", "id": "call-1", "name": "agent", "input": {}},
        ]
    )
    assert graph.parent_ids() is None
    assert dict(graph.edges) == {"call-1": ("t1",)}
    before = build([{"type": "text", "runId": "child", "parentId": "call-1", "id": "t1", "content": "hi"}])
    assert before.parent_ids() == [None]


def test_parent_index_declines_for_a_graph_loaded_from_a_snapshot() -> None:
    from convograph.store.snapshots import dump_graph, load_graph

    events = [
        {"type": "harness_start", "runId": "a"},
        {"type": "text", "runId": "a", "id": "t1", "content": "hi"},
        {"type": "tool_call", "runId": "a", "id": "c1", "name": "agent", "input": {}},
        {"type": "text", "runId": "b", "parentId": "c1", "id": "t2", "content": "sub"},
    ]
    graph = build(events)
    assert graph.parent_ids() == [None, "a:harness_start", "t1", "c1"]
    loaded = load_graph(dump_graph(graph))
    assert loaded.parent_ids() is None
    assert (
        reduce_event(loaded, {"type": "text", "runId": "a", "id": "t3", "content": "x"}).parent_ids() is None
    )
