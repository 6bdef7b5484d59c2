"""DAG layout, phase 3: coordinates. Lanes and layers become boxes.

Lane x from the widest item in each lane, layer y from a fixed row height. A cell (lane, layer)
holds at most one item (`dag_lanes`), so **nodes never overlap**; gaps between rows and lanes
exceed twice the group padding, so padded boxes of different chains do not overlap either. Sizes
come from compact one-line labels (at most `MAX_LABEL` characters, `dag_labels`).

Per item only C-level passes over lookup tables (lane per chain, width per label length), y from
the layer and one `DAGNode` each; the widths per lane and the run boxes are folded per chain
(measured: a per-node loop did ~60 of a ~170 ms 100k-node layout, this ~45). O(V + C).

Runs compiled (mypyc, see `convograph._native`): strictly typed, no msgspec Struct here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import add, sub
from typing import TYPE_CHECKING, Final

from convograph.projections.dag_labels import MAX_LABEL
from convograph.projections.dag_model import DAGEdge, DAGGroup, DAGLayout, DAGNode

if TYPE_CHECKING:
    from convograph.projections.dag_input import LayoutInput
    from convograph.projections.dag_layering import Chains, Edges

__all__ = [
    "CHAR_WIDTH",
    "GROUP_PAD",
    "LANE_GAP",
    "LAYOUT_PAD",
    "MAX_WIDTH",
    "MIN_WIDTH",
    "NODE_GAP",
    "NODE_HEIGHT",
    "check_no_overlap",
    "place",
]

CHAR_WIDTH: Final = 7
MIN_WIDTH: Final = 80
MAX_WIDTH: Final = MAX_LABEL * CHAR_WIDTH + 16
NODE_HEIGHT: Final = 36
GROUP_PAD: Final = 12
NODE_GAP: Final = 2 * GROUP_PAD + 4
LANE_GAP: Final = 2 * GROUP_PAD + 16
LAYOUT_PAD: Final = GROUP_PAD + 16

_WIDEST_LABEL: Final = (MAX_WIDTH - 16) // CHAR_WIDTH
"""Label length from which a node is `MAX_WIDTH` wide."""
_WIDTH_TABLE_LIMIT: Final = 4096
"""Widths are looked up in a table per label length up to this length, clamping beyond."""


class _Boxes:
    """One padded box per run, as parallel int lists (no list per run), runs in first-item order:
    each box's left, top and right edges and its height, without the padding."""

    __slots__ = ("bottom", "height", "left", "right", "runs", "top")

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.left: list[int] = []
        self.top: list[int] = []
        self.right: list[int] = []
        self.height: list[int] = []
        self.bottom = 0
        """The lowest box's bottom edge."""


def place(data: LayoutInput, edges: Edges, chains: Chains, chain_lane: list[int], n_lanes: int) -> DAGLayout:
    """The layout of ``data``: its items placed by lane and layer, one group per run, its kept
    edges typed ``"sequence"`` (within a run) or ``"spawn"``. O(V + E + C)."""
    node_lane = list(map(chain_lane.__getitem__, chains.of))
    widths = _widths(data.labels)
    chain_width = [MIN_WIDTH] * len(chain_lane)
    for c, w in zip(chains.of, widths, strict=True):  # the widest node of each chain
        if w > chain_width[c]:
            chain_width[c] = w
    lane_x = _lane_positions(chain_lane, chain_width, n_lanes)
    row = NODE_HEIGHT + NODE_GAP
    xs = list(map(lane_x.__getitem__, node_lane))
    ys = [LAYOUT_PAD + k * row for k in chains.layer]
    nodes = list(
        map(
            DAGNode,
            data.ids,
            data.kinds,
            data.labels,
            xs,
            ys,
            widths,
            repeat(NODE_HEIGHT),
            data.runs,
            chains.layer,
            node_lane,
        )
    )
    if not edges.backward and len(set(chains.run)) == len(chain_lane):
        boxes = _chain_boxes(chains, chain_lane, chain_width, lane_x, ys)
    else:
        boxes = _run_boxes(edges.backward, data.runs, xs, ys, widths, chains, chain_lane, chain_width, lane_x)
    ids = data.ids
    rid = chains.rid
    edges_out = [  # (run numbers: an int comparison where equal run ids may be distinct strings)
        DAGEdge(source=ids[s], target=ids[t], type="sequence" if rid[s] == rid[t] else "spawn")
        for s, t in zip(edges.sources, edges.targets, strict=True)
    ]
    return DAGLayout(
        nodes=nodes,
        edges=edges_out,
        groups=_groups(boxes, data.group_labels),
        width=max(boxes.right) + LAYOUT_PAD,
        height=boxes.bottom + LAYOUT_PAD,
    )


def _widths(labels: list[str]) -> list[int]:
    """Each item's width from its label's length, through a table per length. O(V)."""
    lengths = list(map(len, labels))
    longest = max(lengths)
    if longest > _WIDTH_TABLE_LIMIT:  # (a huge usage count): clamp, every longer label is as wide
        longest = _WIDEST_LABEL
        lengths = list(map(min, lengths, repeat(longest)))
    width_of_length = [min(max(k * CHAR_WIDTH + 16, MIN_WIDTH), MAX_WIDTH) for k in range(longest + 1)]
    return list(map(width_of_length.__getitem__, lengths))


def _lane_positions(chain_lane: list[int], chain_width: list[int], n_lanes: int) -> list[int]:
    """Each lane's x: lanes left to right, each as wide as its widest chain. O(C)."""
    lane_width = [MIN_WIDTH] * n_lanes
    for lane, w in zip(chain_lane, chain_width, strict=True):
        if w > lane_width[lane]:
            lane_width[lane] = w
    lane_x = [0] * n_lanes
    x = LAYOUT_PAD
    for lane in range(n_lanes):
        lane_x[lane] = x
        x += lane_width[lane] + LANE_GAP
    return lane_x


def _groups(boxes: _Boxes, group_labels: dict[str, str]) -> list[DAGGroup]:
    """The padded run boxes as `DAGGroup`s, labelled by ``group_labels`` (default: the run id)."""
    labels: Iterable[str] = map(group_labels.get, boxes.runs, boxes.runs) if group_labels else boxes.runs
    return [
        DAGGroup(id=run, label=label, x=left - GROUP_PAD, y=top - GROUP_PAD, width=width, height=height)
        for run, label, left, top, width, height in zip(
            boxes.runs,
            labels,
            boxes.left,
            boxes.top,
            map(add, map(sub, boxes.right, boxes.left), repeat(2 * GROUP_PAD)),
            boxes.height,
            strict=True,
        )
    ]


def _chain_boxes(
    chains: Chains, chain_lane: list[int], chain_width: list[int], lane_x: list[int], ys: list[int]
) -> _Boxes:
    """The run boxes when every run is one chain and no edge points backward (the usual case): a
    run's box is its chain's, and chains were made in arrival order of their heads, i.e. runs in
    first-item order. C-level passes only. O(C)."""
    boxes = _Boxes()
    boxes.runs = chains.run
    boxes.left = list(map(lane_x.__getitem__, chain_lane))
    boxes.top = list(map(ys.__getitem__, chains.head))
    boxes.right = list(map(add, boxes.left, chain_width))
    tail_tops = list(map(ys.__getitem__, chains.tail))
    boxes.bottom = max(tail_tops) + NODE_HEIGHT
    boxes.height = list(map(add, map(sub, tail_tops, boxes.top), repeat(NODE_HEIGHT + 2 * GROUP_PAD)))
    return boxes


def _run_boxes(
    backward: bool,
    runs: list[str],
    xs: list[int],
    ys: list[int],
    widths: list[int],
    chains: Chains,
    chain_lane: list[int],
    chain_width: list[int],
    lane_x: list[int],
) -> _Boxes:
    """The run boxes when a run may span several chains: per run (in first-item order) the union
    of its chains' boxes (per item, in arrival order, when an edge points backward and layers need
    not grow along a chain). O(C) or O(V)."""
    slot_of: dict[str, int] = {}
    boxes = _Boxes()
    left, top, right = boxes.left, boxes.top, boxes.right
    bottom: list[int] = []
    if not backward:
        # Layers grow along a chain: per chain, the box is its lane's x, its head's y, its widest
        # node's right edge and its tail's bottom.
        chain_left = list(map(lane_x.__getitem__, chain_lane))
        parts: Iterable[tuple[str, int, int, int, int]] = zip(
            chains.run,
            chain_left,
            map(ys.__getitem__, chains.head),
            map(add, chain_left, chain_width),
            map(ys.__getitem__, chains.tail),
            strict=True,
        )
    else:  # Kahn order: item by item, in arrival order
        parts = zip(runs, xs, ys, map(add, xs, widths), ys, strict=True)
    for run, part_left, part_top, part_right, last_top in parts:
        part_bottom = last_top + NODE_HEIGHT
        slot = slot_of.get(run)
        if slot is None:
            slot_of[run] = len(left)
            left.append(part_left)
            top.append(part_top)
            right.append(part_right)
            bottom.append(part_bottom)
        else:  # (a later chain of the run may start higher: not a forest)
            left[slot] = min(left[slot], part_left)
            top[slot] = min(top[slot], part_top)
            right[slot] = max(right[slot], part_right)
            bottom[slot] = max(bottom[slot], part_bottom)
    boxes.runs = list(slot_of)
    boxes.bottom = max(bottom)
    boxes.height = list(map(add, map(sub, bottom, top), repeat(2 * GROUP_PAD)))
    return boxes


def check_no_overlap(nodes: Sequence[DAGNode]) -> list[tuple[str, str]]:
    """Pairs of overlapping nodes (empty for every layout this module makes). O(V log V)."""
    ordered = sorted(nodes, key=lambda node: (node.y, node.x))
    clashes: list[tuple[str, str]] = []
    active: list[DAGNode] = []
    for node in ordered:
        active = [other for other in active if other.y + other.height > node.y]
        for other in active:
            if other.x < node.x + node.width and node.x < other.x + other.width:
                clashes.append((other.id, node.id))
        active.append(node)
    return clashes
