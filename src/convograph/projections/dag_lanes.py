"""DAG layout, phase 2: ordering. Each chain (a maximal same-run path, `dag_layering.Chains`) gets
a lane, its column.

Chains are visited depth first in spawn order and take the leftmost free lane at or right of their
parent's (one lane right when they overlap it in time), so a spawn tree is drawn without tree-edge
crossings and lanes are reused once a run ends. Chains sharing a lane have disjoint layer intervals,
so a cell (lane, layer) holds at most one item. O(C log C + C·K) for C chains, K lanes probed.

Runs compiled (mypyc, see `convograph._native`): strictly typed, no msgspec Struct here.
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["assign_lanes"]


def assign_lanes(
    chain_parent: list[int], chain_start: list[int], chain_end: list[int]
) -> tuple[list[int], int]:
    """Each chain's lane, given per chain its parent chain (-1: a root; chains in creation order,
    a parent before its children) and its first and last layer; and the number of lanes."""
    first_child, next_sibling, roots = _chain_tree(chain_parent)
    lane_starts: list[list[int]] = []  # per lane its chains' first layers, sorted
    lane_ends: list[list[int]] = []  # and their last layers, in the same order
    chain_lane = [0] * len(chain_parent)
    stack = list(reversed(roots))
    while stack:
        c = stack.pop()
        start = chain_start[c]
        end = chain_end[c]
        parent = chain_parent[c]
        lane = 0
        if parent >= 0:
            lane = chain_lane[parent]
            if chain_end[parent] >= start:  # overlaps its parent in time: go right
                lane += 1
        lane, k = _free_lane(lane_starts, lane_ends, lane, start, end)
        if lane == len(lane_starts):
            lane_starts.append([start])
            lane_ends.append([end])
        else:
            lane_starts[lane].insert(k, start)
            lane_ends[lane].insert(k, end)
        chain_lane[c] = lane
        child = first_child[c]
        if child >= 0:  # children go on the stack last first, so the first is visited next
            children: list[int] = []
            while child >= 0:
                children.append(child)
                child = next_sibling[child]
            children.reverse()
            stack.extend(children)
    return chain_lane, len(lane_starts)


def _free_lane(
    lane_starts: list[list[int]], lane_ends: list[list[int]], lane: int, start: int, end: int
) -> tuple[int, int]:
    """The leftmost lane from ``lane`` on where [start, end] overlaps no chain (``len(lane_starts)``
    for a new lane), and where ``start`` goes in that lane's sorted starts. A lane's chains do not
    overlap, so its last chain by start also ends last: a chain that starts after that end goes at
    the end of the lane (the usual case: no search). O(lanes probed · log chains per lane)."""
    while lane < len(lane_starts):
        starts = lane_starts[lane]
        ends = lane_ends[lane]
        if ends[-1] < start:  # (a lane is never empty)
            return lane, len(starts)
        k = bisect_left(starts, start)
        if not ((k < len(starts) and starts[k] <= end) or (k > 0 and ends[k - 1] >= start)):
            return lane, k
        lane += 1
    return lane, 0


def _chain_tree(chain_parent: list[int]) -> tuple[list[int], list[int], list[int]]:
    """The chain tree as linked lists over int arrays (no list per chain), children in creation
    order: per chain its first child and next sibling (-1: none), and the roots. O(C)."""
    n = len(chain_parent)
    first_child = [-1] * n
    last_child = [-1] * n
    next_sibling = [-1] * n
    roots: list[int] = []
    for c in range(n):
        parent = chain_parent[c]
        if parent < 0:
            roots.append(c)
        elif first_child[parent] < 0:
            first_child[parent] = last_child[parent] = c
        else:
            next_sibling[last_child[parent]] = c
            last_child[parent] = c
    return first_child, next_sibling, roots
