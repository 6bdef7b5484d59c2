"""Placement of workspaces over several graph servers (`convograph.intelligence.shards`): the
rendezvous hash is stable, balanced, and moves few workspaces when the list changes; the URL list
is parsed with clear errors. (Against real servers: tests/integration/test_intelligence_shards.py.)"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convograph.intelligence.shards import parse_graph_urls, place, server_address

SERVERS = ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]
WORKSPACES = [f"ws-{n}" for n in range(6000)]


def test_placement_is_balanced_and_the_same_in_every_process() -> None:
    counts = Counter(place(ws, SERVERS) for ws in WORKSPACES)
    assert sorted(counts) == [0, 1, 2]
    assert all(1800 < count < 2200 for count in counts.values()), counts  # 2000 each, +-10%
    assert place("acme", SERVERS) == place("acme", list(SERVERS))  # a pure function of names
    assert place("acme", ["only:1"]) == 0


def test_adding_a_server_moves_only_the_workspaces_it_takes() -> None:
    before = {ws: place(ws, SERVERS) for ws in WORKSPACES}
    grown = [*SERVERS, "10.0.0.4:6379"]
    after = {ws: place(ws, grown) for ws in WORKSPACES}
    moved = [ws for ws in WORKSPACES if grown[after[ws]] != SERVERS[before[ws]]]
    assert all(after[ws] == 3 for ws in moved)  # every move goes to the new server
    assert 1300 < len(moved) < 1700  # ~1/4 of them


def test_removing_a_server_moves_only_its_own_workspaces() -> None:
    before = {ws: SERVERS[place(ws, SERVERS)] for ws in WORKSPACES}
    shrunk = [SERVERS[0], SERVERS[2]]
    after = {ws: shrunk[place(ws, shrunk)] for ws in WORKSPACES}
    assert {ws for ws in WORKSPACES if after[ws] != before[ws]} == {
        ws for ws in WORKSPACES if before[ws] == SERVERS[1]
    }


@given(st.text(min_size=1, max_size=40), st.permutations(SERVERS))
def test_the_order_of_the_list_does_not_change_where_a_workspace_lives(
    workspace: str, order: list[str]
) -> None:
    assert order[place(workspace, order)] == SERVERS[place(workspace, SERVERS)]


def test_graph_url_lists() -> None:
    assert parse_graph_urls("falkordb://a:1, falkordb://b:2") == ["falkordb://a:1", "falkordb://b:2"]
    assert parse_graph_urls(["falkordb://a:1", "falkordb://b:2,falkordb://c"]) == [
        "falkordb://a:1",
        "falkordb://b:2",
        "falkordb://c",
    ]
    assert server_address("falkordb://user:secret@Graph.Internal:7000") == "graph.internal:7000"
    assert server_address("redis://h") == "h:6379"
    assert server_address("unix:///run/f.sock") == "unix:/run/f.sock"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "names no server"),
        (" , ", "names no server"),
        ("falkordb://a:1,http://b:2", "graph URL must be falkordb://"),
        ("falkordb://a:1,falkordb://a:1", "graph server a:1 is listed twice"),
        ("falkordb://A:6379,redis://a", "graph server a:6379 is listed twice"),
        ("falkordb://a:port", "graph URL 'falkordb://a:port'"),
    ],
)
def test_bad_graph_url_lists_name_the_problem(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_graph_urls(value)
