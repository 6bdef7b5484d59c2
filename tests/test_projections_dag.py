"""DAG projection: layout invariants as properties (no overlap, determinism, unique edges), SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convograph import create_graph, reduce_events, to_jsonable
from convograph.projections import project_dag
from convograph.projections.dag import MAX_LABEL, _check_parent_table, check_no_overlap, graph_layout_input
from tests.test_projections_messages import agent_streams


def layout_of(events: list[dict[str, Any]]) -> Any:
    return project_dag(reduce_events(create_graph(), events))


def boxes_overlap(a: Any, b: Any) -> bool:
    return a.x < b.x + b.width and b.x < a.x + a.width and a.y < b.y + b.height and b.y < a.y + a.height


def assert_groups_bound_their_runs(layout: Any) -> None:
    """Brute force: one group per run, in first-node order, each the padded bounding box of its
    run's nodes (the layout folds boxes per chain, or per run when a run is one chain)."""
    from convograph.projections.dag import GROUP_PAD

    runs = list(dict.fromkeys(node.run_id for node in layout.nodes))
    assert [group.id for group in layout.groups] == runs
    for group in layout.groups:
        members = [node for node in layout.nodes if node.run_id == group.id]
        left = min(node.x for node in members) - GROUP_PAD
        top = min(node.y for node in members) - GROUP_PAD
        right = max(node.x + node.width for node in members) + GROUP_PAD
        bottom = max(node.y + node.height for node in members) + GROUP_PAD
        assert (group.x, group.y, group.width, group.height) == (left, top, right - left, bottom - top)


SUBAGENT = [
    {"type": "user", "runId": "u", "content": "Hello " * 50},
    {"type": "harness_start", "runId": "r1", "parentId": "u:user"},
    {"type": "text", "runId": "r1", "id": "b", "content": "Before"},
    {"type": "tool_call", "runId": "r1", "id": "tc1", "name": "agent", "input": {}},
    {"type": "harness_start", "runId": "r2", "parentId": "tc1"},
    {"type": "text", "runId": "r2", "id": "s", "content": "Sub"},
    {"type": "harness_end", "runId": "r2"},
    {"type": "tool_result", "runId": "r1", "id": "tc1", "name": "agent", "output": "ok"},
    {"type": "text", "runId": "r1", "id": "a", "content": "After"},
    {"type": "harness_end", "runId": "r1"},
]


def test_subagent_sits_right_of_its_parent_and_the_parent_resumes_below_it() -> None:
    layout = layout_of(SUBAGENT)
    by_id = {node.id: node for node in layout.nodes}
    assert by_id["r2:harness_start"].x > by_id["tc1"].x
    assert by_id["r2:harness_start"].y > by_id["tc1"].y
    assert by_id["tc1:result"].y > by_id["r2:harness_end"].y
    assert by_id["u:user"].x == by_id["r1:harness_start"].x  # a reply continues in its lane
    assert len(by_id["u:user"].label) <= MAX_LABEL
    assert {e.type for e in layout.edges} == {"sequence", "spawn"}
    assert not check_no_overlap(layout.nodes)
    assert layout.width >= max(n.x + n.width for n in layout.nodes)
    assert layout.height >= max(g.y + g.height for g in layout.groups)


def test_empty_graph() -> None:
    layout = layout_of([])
    assert (layout.nodes, layout.edges, layout.width, layout.height) == ([], [], 0, 0)


def test_jsonable_and_svg() -> None:
    layout = layout_of(SUBAGENT)
    data = to_jsonable(layout)
    assert {"id", "kind", "label", "x", "y", "width", "height", "runId"} <= set(data["nodes"][0])
    assert set(data["edges"][0]) == {"source", "target", "type"}
    svg = layout.to_svg()
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    assert svg.count('class="node"') == len(layout.nodes)


def test_labels_are_escaped_in_svg() -> None:
    svg = layout_of([{"type": "user", "runId": "u", "content": "<script>&"}]).to_svg()
    assert "<script>" not in svg
    ET.fromstring(svg)


@settings(max_examples=120, deadline=None)
@given(agent_streams())
def test_layout_properties(events: list[dict[str, Any]]) -> None:
    graph = reduce_events(create_graph(), events)
    layout = project_dag(graph)
    _check_parent_table(graph_layout_input(graph))  # project_dag skips the check: valid by construction
    nodes = layout.nodes
    assert len(nodes) == len(graph)
    assert not check_no_overlap(nodes)
    for i, a in enumerate(nodes):  # brute force as an independent check
        for b in nodes[i + 1 :]:
            assert not boxes_overlap(a, b), (a.id, b.id)
    pairs = [(e.source, e.target) for e in layout.edges]
    assert len(pairs) == len(set(pairs))
    assert all(s != t for s, t in pairs)
    by_id = {n.id: n for n in nodes}
    for source, target in pairs:
        assert by_id[target].layer > by_id[source].layer or by_id[target].id == source
    assert to_jsonable(project_dag(graph)) == to_jsonable(layout)  # deterministic
    assert to_jsonable(layout_of(events)) == to_jsonable(layout)
    assert_groups_bound_their_runs(layout)
    groups = layout.groups
    for i, a in enumerate(groups):
        for b in groups[i + 1 :]:
            if {n.lane for n in nodes if n.run_id == a.id} == {n.lane for n in nodes if n.run_id == b.id}:
                assert not boxes_overlap(a, b), (a.id, b.id)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=30))
def test_arbitrary_parent_links_still_lay_out(links: list[tuple[int, int]]) -> None:
    """Runs naming arbitrary (even cyclic or missing) parents: no overlap, no crash."""
    events = []
    for i, (run, parent) in enumerate(links):
        events.append(
            {"type": "text", "runId": f"r{run}", "parentId": f"t{parent * 7}", "id": f"t{i}", "content": "x"}
        )
    layout = layout_of(events)
    assert not check_no_overlap(layout.nodes)
    assert_groups_bound_their_runs(layout)


@st.composite
def random_dags(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]], list[int]]:
    """An acyclic edge set over ``n`` items, and an arrival order that may put a successor first
    (backward edges: `layout` must then compute a topological order) or keep every edge forward
    (the identity order: `layout` takes arrival order as it is)."""
    n = draw(st.integers(1, 12))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = [(min(a, b), max(a, b)) for a, b in edges if a != b]  # acyclic in index order
    arrival = draw(st.one_of(st.just(list(range(n))), st.permutations(list(range(n)))))
    return n, edges, arrival


@settings(max_examples=150, deadline=None)
@given(random_dags(), st.integers(1, 3))
def test_layering_holds_whether_edges_point_forward_or_backward(
    dag: tuple[int, list[tuple[int, int]], list[int]], run_count: int
) -> None:
    from convograph.projections.dag import LayoutInput, layout

    n, edges, arrival = dag
    position = {item: slot for slot, item in enumerate(arrival)}
    data = LayoutInput()
    for item in arrival:
        data.ids.append(f"n{item}")
        data.kinds.append("text")
        data.labels.append(f"n{item}")
        data.runs.append(f"r{item % run_count}")
    data.edges = [(position[a], position[b]) for a, b in edges]
    result = layout(data)
    by_id = {node.id: node for node in result.nodes}
    assert len(by_id) == n
    for a, b in edges:  # every edge goes down at least one layer, in either arrival regime
        assert by_id[f"n{b}"].layer > by_id[f"n{a}"].layer, (a, b)
    assert not check_no_overlap(result.nodes)
    assert_groups_bound_their_runs(result)
    assert to_jsonable(layout(data)) == to_jsonable(result)


@st.composite
def forests(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """A parent table (each item -1 or an earlier item's index) and a run per item."""
    n = draw(st.integers(1, 15))
    parents = [-1 if i == 0 else draw(st.integers(-1, i - 1)) for i in range(n)]
    runs = [draw(st.integers(0, 3)) for _ in range(n)]
    return parents, runs


@st.composite
def run_shaped_forests(draw: st.DrawFn) -> tuple[list[int], list[int], list[str]]:
    """A parent table shaped like a conversation's: mostly streaks of items that each follow the
    item before them in the same run, broken by jumps to other runs and parents; random ends."""
    n = draw(st.integers(1, 40))
    parents: list[int] = []
    runs: list[int] = []
    for i in range(n):
        if i > 0 and draw(st.integers(0, 3)) > 0:  # continue the streak
            parents.append(i - 1)
            runs.append(runs[-1])
        else:
            parents.append(draw(st.integers(-1, i - 1)))
            runs.append(draw(st.integers(0, 5)))
    kinds = [draw(st.sampled_from(["text", "text", "harness_end", "tool_call"])) for _ in range(n)]
    return parents, runs, kinds


@settings(max_examples=300, deadline=None)
@given(run_shaped_forests())
def test_streaks_of_a_parent_table_lay_out_as_the_general_loop_does(
    forest: tuple[list[int], list[int], list[str]],
) -> None:
    """With conversation-shaped tables (long same-run streaks, random run ends) `_layer_forest`'s
    deferred walks give the layout of the same edges without the table (the general loop)."""
    from convograph.projections.dag import layout

    parents, runs, kinds = forest
    with_table = _forest_input(parents, runs, as_table=True)
    with_table.kinds = kinds
    as_edges = _forest_input(parents, runs, as_table=False)
    as_edges.kinds = kinds
    result = layout(with_table)
    assert_groups_bound_their_runs(result)
    assert check_no_overlap(result.nodes) == []
    assert to_jsonable(result) == to_jsonable(layout(as_edges))


def _forest_input(parents: list[int], runs: list[int], *, as_table: bool) -> Any:
    from convograph.projections.dag import LayoutInput

    data = LayoutInput()
    data.ids = [f"n{i}" for i in range(len(parents))]
    data.kinds = ["harness_end" if i % 5 == 4 else "text" for i in range(len(parents))]
    data.labels = [f"label {i}" * (i % 3) for i in range(len(parents))]
    data.runs = [f"r{run}" for run in runs]
    data.edges_unique = True
    data.edge_sources = [p for p in parents if p >= 0]
    data.edge_targets = [i for i, p in enumerate(parents) if p >= 0]
    if as_table:
        data.parents = parents
    return data


@settings(max_examples=150, deadline=None)
@given(forests())
def test_a_parent_table_lays_out_as_the_same_edges_do(forest: tuple[list[int], list[int]]) -> None:
    """`LayoutInput.parents` (the flat graph's fast path) only skips the edge pass: same layout."""
    from convograph.projections.dag import layout

    parents, runs = forest
    with_table = layout(_forest_input(parents, runs, as_table=True))
    assert_groups_bound_their_runs(with_table)
    assert to_jsonable(with_table) == to_jsonable(layout(_forest_input(parents, runs, as_table=False)))
    not_declared_unique = _forest_input(parents, runs, as_table=True)
    not_declared_unique.edges_unique = False
    assert to_jsonable(layout(not_declared_unique)) == to_jsonable(with_table)


def test_a_parent_table_that_is_not_forward_is_refused() -> None:
    from convograph.projections.dag import layout

    for parents in ([-1, 1], [-1, 0, 5], [-1, 0, 2]):
        data = _forest_input([-1, 0, 1][: len(parents)], [0] * len(parents), as_table=True)
        data.parents = parents
        with pytest.raises(ValueError, match=r"LayoutInput\.parents"):
            layout(data)
    data = _forest_input([-1, 0], [0, 0], as_table=True)
    data.parents = [-1]  # one entry short
    with pytest.raises(ValueError, match=r"LayoutInput\.parents"):
        layout(data)
    data = _forest_input([-1, 0, 0], [0, 0, 0], as_table=True)
    data.edge_sources, data.edge_targets = [0, 1], [1, 2]  # not the table's edges
    with pytest.raises(ValueError, match=r"LayoutInput\.parents"):
        layout(data)
    data = _forest_input([-1, 0, 0], [0, 0, 0], as_table=True)
    data.edge_sources, data.edge_targets = [0], [1]  # one edge missing
    with pytest.raises(ValueError, match=r"LayoutInput\.parents"):
        layout(data)
    for sources, targets in (([0, 0], [1, 1]), ([0, 0], [-2, 1]), ([0], [1, 2]), ([0, 0, 0], [1, 2])):
        data = _forest_input([-1, 0, 0], [0, 0, 0], as_table=True)  # a repeat, a wrapped index,
        data.edge_sources, data.edge_targets = sources, targets  # columns of unequal lengths
        with pytest.raises(ValueError, match=r"LayoutInput\.parents"):
            layout(data)
    data = _forest_input([-1, 0], [0, 0], as_table=True)
    data.parents = [-1, -3]  # below -1: a wrapped index, not "no parent"
    data.edge_sources, data.edge_targets = [-3], [1]
    with pytest.raises(ValueError, match=r"LayoutInput\.parents"):
        layout(data)


def test_flat_edges_are_listed_by_target_on_both_read_paths() -> None:
    """The parent-index read and the edge-list fallback (after a late parent adopted a child, the
    index declines) list the edges alike: in their targets' arrival order."""
    late_parent = [
        {"type": "text", "runId": "r2", "parentId": "tc1", "id": "s", "content": "child first"},
        *SUBAGENT,
    ]
    for events in (SUBAGENT, late_parent):
        graph = reduce_events(create_graph(), events)
        layout = project_dag(graph)
        position = {node.id: i for i, node in enumerate(layout.nodes)}
        targets = [position[edge.target] for edge in layout.edges]
        assert targets == sorted(targets)
        assert {(e.source, e.target) for e in layout.edges} == {
            (source, target) for source, children in graph.edges.items() for target in children
        }
    assert reduce_events(create_graph(), late_parent).parent_ids() is None  # the fallback ran


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2, 40), max_size=40), st.booleans())
def test_parent_positions_are_the_index_lookups(picks: list[int], copy_ids: bool) -> None:
    """`_parent_positions` (C-level passes, a search of the ids just before, a dict of the rest)
    equals a lookup of every parent in a dict of every id: -1 for a root or an unknown id. With
    ``copy_ids`` the parent strings are equal but not identical objects (as after a snapshot)."""
    from convograph.projections.dag import _parent_positions

    ids = [f"node-{i}" for i in range(len(picks))]
    parent_ids: list[str | None] = []
    for i, pick in enumerate(picks):
        if pick == -2:
            parent_ids.append("not-a-node")
        elif pick == -1 or i == 0:
            parent_ids.append(None)
        else:
            parent = ids[min(pick, i - 1)]  # earlier nodes only, most often the one just before
            parent_ids.append("".join(parent) if copy_ids else parent)
    index = {node_id: i for i, node_id in enumerate(ids)}
    expected = [-1 if parent is None else index.get(parent, -1) for parent in parent_ids]
    assert _parent_positions(ids, parent_ids) == expected


def reference_compact(text: str, limit: int = MAX_LABEL) -> str:
    """`compact` as first written: split and join every time."""
    head = text[: limit * 4]
    line = " ".join(head.split())
    if len(line) > limit or len(text) > len(head):
        return line[: limit - 1] + "…" if len(line) >= limit else line + "…"
    return line


@settings(max_examples=400, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from([" ", "a", "é", "\n", "\t", "\xa0", "\u2003", "\x1f", "\u200b", "·"]),
        max_size=200,
    )
    | st.text(max_size=200),
    st.integers(min_value=2, max_value=60),
)
def test_compact_collapses_whitespace_as_split_and_join_would(text: str, limit: int) -> None:
    """`compact`'s stripping shortcut (single ASCII spaces only) gives the split-and-join result."""
    from convograph.projections.dag import compact

    assert compact(text, limit) == reference_compact(text, limit)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_add_spawn_edges_keeps_first_occurrences_and_the_table_only_while_it_holds(data: Any) -> None:
    """Against a brute-force reference: the kept spawn edges are the spawn edges in order without
    self-loops and repeats; the parent table survives exactly when no two kept spawn edges enter
    the same item and each comes from an item before it (and then holds their sources)."""
    from convograph.projections.dag import add_spawn_edges, run_sequence_edges

    n = data.draw(st.integers(min_value=1, max_value=12))
    runs = data.draw(st.lists(st.sampled_from("abcd"), min_size=n, max_size=n))
    sources, targets, parents = run_sequence_edges(runs)
    before_parents = list(parents)
    n_sequence = len(sources)
    index = st.integers(min_value=0, max_value=n - 1)
    firsts = [i for i in range(n) if parents[i] < 0]  # a spawn edge enters a run's first item
    spawns = data.draw(st.lists(st.tuples(index, st.sampled_from(firsts)), max_size=8))

    table = add_spawn_edges(parents, sources, targets, [s for s, _ in spawns], [t for _, t in spawns])

    kept: list[tuple[int, int]] = []
    for edge in spawns:
        if edge[0] != edge[1] and edge not in kept:
            kept.append(edge)
    assert list(zip(sources[n_sequence:], targets[n_sequence:], strict=True)) == kept
    entered = [t for _, t in kept]
    holds = len(set(entered)) == len(entered) and all(s < t for s, t in kept)
    if holds:
        expected = list(before_parents)
        for s, t in kept:
            expected[t] = s
        assert table == expected
    else:
        assert table is None


def test_run_sequence_edges_link_consecutive_items_of_each_run() -> None:
    from convograph.projections.dag import run_sequence_edges

    assert run_sequence_edges(["a", "b", "a", "a", "c", "b"]) == ([0, 2, 1], [2, 3, 5], [-1, -1, 0, 2, -1, 1])
    assert run_sequence_edges([]) == ([], [], [])
