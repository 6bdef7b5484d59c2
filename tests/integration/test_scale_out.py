"""Issue 29: several ``convograph serve`` processes on one PostgreSQL database, one FalkorDB server
(and Redis), behind a round-robin balancer, behave as one server."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from tests.integration.cluster import FalkorServer, Instance, RoundRobin

from convograph.intelligence.blobs import MemoryBlobStore
from convograph.intelligence.engine import connect_engine
from convograph.intelligence.journal import MemoryJournal
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import GraphNames

pytestmark = pytest.mark.falkordb

LAYERS = Path(__file__).resolve().parents[1] / "fixtures" / "ci_layers.ndjson"


@pytest.fixture
def falkor() -> Iterator[FalkorServer]:
    server = FalkorServer()
    yield server
    server.stop()


class Cluster:
    def __init__(self, tmp: Path, database_url: str, graph_url: str) -> None:
        self.tmp, self.database_url, self.graph_url = tmp, database_url, graph_url
        self.instances: list[Instance] = []
        self.balancer: RoundRobin | None = None

    def start(self, count: int) -> list[Instance]:
        started = [
            Instance(
                self.tmp / f"i{len(self.instances) + n}",
                "--database-url",
                self.database_url,
                "--graph-url",
                self.graph_url,
            )
            for n in range(count)
        ]
        self.instances.extend(started)
        for instance in started:
            instance.wait_ready()
        self.balancer = RoundRobin([i.port for i in self.instances])
        return started

    def applying(self) -> Instance:
        for _ in range(100):
            for instance in self.instances:
                if instance.proc.poll() is None:
                    status = httpx.get(f"{instance.url}/intelligence/status", timeout=10).json()
                    if status["applying"]:
                        return instance
            time.sleep(0.1)
        raise AssertionError("no instance applies the journal")

    def stop(self) -> None:
        if self.balancer is not None:
            self.balancer.close()
        for instance in self.instances:
            instance.stop()


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str, falkor: FalkorServer) -> Iterator[Cluster]:
    c = Cluster(tmp_path, postgres_url, falkor.url)
    yield c
    c.stop()


def fresh(base_url: str) -> httpx.Client:
    """A client that opens a connection per request, so a balancer spreads its requests."""
    return httpx.Client(
        base_url=base_url,
        timeout=30,
        headers={"Connection": "close"},
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def wait_applied(url: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status: dict[str, Any] = httpx.get(f"{url}/intelligence/status", timeout=10).json()
        if status["backlog"] == 0 and status["journal_seq"] > 0:
            return status
        time.sleep(0.1)
    raise AssertionError(f"not applied within {timeout} s: {status}")


def graph_snapshot(cypher: Any, workspace: str) -> dict[str, Any]:
    nodes = cypher("MATCH (n {workspace: $workspace}) RETURN labels(n) AS l, properties(n) AS p", workspace)
    edges = cypher(
        "MATCH (a {workspace: $workspace})-[r]->(b) RETURN a.node_id AS a, type(r) AS t, b.node_id AS b",
        workspace,
    )
    return {
        "nodes": sorted(
            msgspec.json.encode([sorted(n["l"]), n["p"]], order="sorted").decode() for n in nodes
        ),
        "edges": sorted((e["a"], e["t"], e["b"]) for e in edges),
    }


def http_cypher(url: str) -> Any:
    def run(query: str, workspace: str) -> list[dict[str, Any]]:
        reply = httpx.post(
            f"{url}/cypher", json={"query": query, "params": {"workspace": workspace}, "workspace": workspace},
            timeout=60,
        )  # fmt: skip
        assert reply.status_code == 200, reply.text
        assert not reply.json()["truncated"]
        rows: list[dict[str, Any]] = reply.json()["results"]
        return rows

    return run


def reference_snapshots(graph_url: str, envelopes: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    """The graph one process builds from ``envelopes`` (in order), on the same server."""
    service = IntelligenceService(
        MemoryJournal(), connect_engine(graph_url), MemoryBlobStore(), names=GraphNames(prefix),
        semantic_layers=True, owns_engine=True,
    )  # fmt: skip
    service.start()
    try:
        service.ingest_many(envelopes, created_by="local")  # what the server stamps without keys
        assert service.wait_applied(timeout=120)

        def run(query: str, workspace: str) -> list[dict[str, Any]]:
            return list(service.cypher(query, {"workspace": workspace}, workspace).results)

        return {ws: graph_snapshot(run, ws) for ws in sorted({e["workspace"] for e in envelopes})}
    finally:
        service.close()


def layer_envelopes() -> list[dict[str, Any]]:
    return [json.loads(line) for line in LAYERS.read_text().splitlines() if line.strip()]


def test_blobs_graph_and_semantic_layers_are_shared(cluster: Cluster, falkor: FalkorServer) -> None:
    """Sessions split over two instances, one envelope per request (as the hook client sends):
    blobs listed by both, and every node and edge equal to one process's graph (before: each
    instance folded its half of a session; blobs were listed only where they were written)."""
    first, second = cluster.start(2)
    envelopes = layer_envelopes()
    big = {"event": "tool:post", "workspace": "blobs", "data": {
        "session_id": "S-blob", "timestamp": "2026-03-02T09:00:00Z", "tool_name": "read",
        "result": {"text": "x" * 10_000}}}  # fmt: skip
    with fresh(first.url) as a, fresh(second.url) as b:
        assert a.post("/events", json=big).status_code == 202
        for n, envelope in enumerate(envelopes):
            reply = (a if n % 2 else b).post("/events", json=envelope)
            assert reply.status_code == 202, reply.text
    for instance in (first, second):
        wait_applied(instance.url)
        blobs = httpx.get(f"{instance.url}/blobs/S-blob", timeout=10).json()["blobs"]
        assert len(blobs) == 1, blobs
        assert httpx.get(f"{instance.url}/blobs/S-blob/{blobs[0].rsplit('/', 1)[1]}").json() == {
            "text": "x" * 10_000
        }
    expected = reference_snapshots(falkor.url, envelopes, "reference:")
    for instance in (first, second):
        for workspace, snapshot in expected.items():
            got = graph_snapshot(http_cypher(instance.url), workspace)
            assert got == snapshot, (
                workspace,
                sorted(set(got["nodes"]) ^ set(snapshot["nodes"]))[:6],
                sorted(set(got["edges"]) ^ set(snapshot["edges"]))[:6],
            )


def copies(envelopes: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    return [{**e, "workspace": e["workspace"] + suffix} for e in envelopes]


def post_until_acked(client: httpx.Client, path: str, body: Any, stop_at: float) -> httpx.Response:
    """POST through the balancer until an instance acknowledges it (a killed instance's
    connection fails; the retry is safe: ids and idempotency keys deduplicate)."""
    while True:
        try:
            reply = client.post(path, json=body)
            if reply.status_code < 500:
                return reply
        except httpx.TransportError:
            pass
        assert time.monotonic() < stop_at, f"{path} never acknowledged"
        time.sleep(0.05)


def test_kill_9_mid_ingest_and_mid_apply_loses_and_repeats_nothing(
    cluster: Cluster, falkor: FalkorServer
) -> None:
    """Three instances behind the balancer take both APIs one event per request; one instance is
    killed mid-ingest, then the applying one mid-apply (a 1,104-event batch in its backlog): every
    acknowledged event is in the log once and in the graph, which equals one process's graph."""
    cluster.start(3)
    assert cluster.balancer is not None
    url = cluster.balancer.url
    base = layer_envelopes()
    streams = [copies(base, f"-{n}") for n in range(3)]
    stop_at = time.monotonic() + 300
    conversation_acked: list[int] = []

    def send(envelopes: list[dict[str, Any]]) -> int:
        with fresh(url) as client:
            for envelope in envelopes:
                reply = post_until_acked(client, "/events", envelope, stop_at)
                assert reply.status_code == 202, reply.text
        return len(envelopes)

    def converse() -> int:
        with fresh(url) as client:
            for n in range(600):
                event = {"type": "text", "runId": "r", "id": f"t{n}", "content": f"{n} ", "eventId": f"e{n}"}
                reply = post_until_acked(client, "/v1/conversations/kill-9/events", event, stop_at)
                assert reply.status_code == 200, reply.text
                conversation_acked.append(n)
        return 600

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        sending = [pool.submit(send, stream) for stream in streams] + [pool.submit(converse)]
        time.sleep(3)
        leader = cluster.applying()
        bystander = next(i for i in cluster.instances if i is not leader)
        bystander.kill()  # mid-ingest
        time.sleep(2)
        batch = copies(base, "-batch")
        reply = httpx.post(f"{leader.url}/events", json=batch, timeout=60)
        assert reply.status_code == 202, reply.text
        assert reply.json()["accepted"] == len(batch)
        status = httpx.get(f"{leader.url}/intelligence/status", timeout=10).json()
        assert status["backlog"] > 0, status  # the batch is not applied yet
        leader.kill()  # mid-apply
        assert sum(f.result() for f in sending) == 3 * len(base) + 600
    survivors = [i for i in cluster.instances if i.proc.poll() is None]
    assert len(survivors) == 1
    survivor = survivors[0]
    status = wait_applied(survivor.url, timeout=120)
    assert status["applying"], status
    assert status["dead_letters"] == 0, status
    replay = httpx.get(f"{survivor.url}/v1/conversations/kill-9/events", timeout=30)
    stored = [json.loads(line) for line in replay.text.splitlines()]
    assert [e["seq"] for e in stored] == list(range(1, 601))  # each acknowledged event once, no gap
    assert sorted(int(e["eventId"][1:]) for e in stored) == list(range(600))
    everything = [e for stream in streams for e in stream] + batch
    expected = reference_snapshots(falkor.url, everything, "reference:")
    cypher = http_cypher(survivor.url)
    for workspace, snapshot in expected.items():
        got = graph_snapshot(cypher, workspace)
        assert got == snapshot, (workspace, sorted(set(got["nodes"]) ^ set(snapshot["nodes"]))[:4])


def read_frames(lines: Iterator[str], count: int, kind: str = "id") -> list[dict[str, Any]]:
    """The next ``count`` SSE messages of ``lines`` (a response's `iter_lines`) that carry
    ``kind`` (``id`` or ``event``), as dicts."""
    frames: list[dict[str, Any]] = []
    frame: dict[str, Any] = {}
    for line in lines:
        if not line:
            if kind in frame:
                frames.append(frame)
                if len(frames) == count:
                    return frames
            frame = {}
            continue
        name, _, value = line.partition(": ")
        frame[name] = value
    return frames


def test_any_instance_serves_streams_relays_and_the_live_list(cluster: Cluster) -> None:
    """SSE from one instance of events posted to another, an exact resume on a third; 20
    concurrent decisions of one relay spread over the instances: one 200, 19 409; the live list
    on one instance shows a conversation started on another."""
    first, second, third = cluster.start(3)
    with (
        httpx.Client(timeout=30) as http,
        http.stream("GET", f"{first.url}/v1/live/conversations") as list_response,
        http.stream("GET", f"{first.url}/v1/conversations/multi/stream") as stream_response,
    ):
        listing, stream = list_response.iter_lines(), stream_response.iter_lines()
        assert read_frames(listing, 1, "event")[0]["event"] == "snapshot"
        events = [{"type": "harness_start", "runId": "a"}] + [
            {"type": "text", "runId": "a", "id": "t", "content": f"{n} "} for n in range(10)
        ]
        for n, event in enumerate(events):
            target = (second, third)[n % 2]
            assert http.post(f"{target.url}/v1/conversations/multi/events", json=event).status_code == 200
        received = read_frames(stream, len(events))
        assert [int(f["id"]) for f in received] == list(range(1, 12))
        changed = read_frames(listing, 1, "event")[0]
        assert changed["event"] == "conversation"
        assert json.loads(changed["data"])["id"] == "multi"
    more = [{"type": "text", "runId": "a", "id": "t", "content": "late "}]
    assert httpx.post(f"{first.url}/v1/conversations/multi/events", json=more).status_code == 200
    with httpx.stream(
        "GET", f"{third.url}/v1/conversations/multi/stream", headers={"Last-Event-ID": "7"}, timeout=30
    ) as resumed:
        assert [int(f["id"]) for f in read_frames(resumed.iter_lines(), 5)] == [8, 9, 10, 11, 12]
    relay = {"type": "relay", "kind": "permission", "runId": "a", "id": "r1", "toolCallId": "a/c",
             "tool": "exec", "params": {"cmd": "ls"}}  # fmt: skip
    assert httpx.post(f"{second.url}/v1/conversations/multi/events", json=relay).status_code == 200

    def decide(n: int) -> int:
        target = cluster.instances[n % 3]
        reply = httpx.post(
            f"{target.url}/v1/conversations/multi/relays/r1", json={"approved": n % 2 == 0}, timeout=30
        )
        return reply.status_code

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        statuses = sorted(pool.map(decide, range(20)))
    assert statuses == [200] + [409] * 19
    for instance in cluster.instances:
        relays = httpx.get(f"{instance.url}/v1/conversations/multi/relays", timeout=10).json()["relays"]
        assert relays[0]["decision"] is not None


def test_workers_share_one_port_and_a_killed_worker_is_replaced(
    tmp_path: Path, postgres_url: str, falkor: FalkorServer
) -> None:
    """``--workers 2``: two processes answer on one port (one of them applies the journal); a
    worker killed with -9 is restarted by the parent and nothing acknowledged is lost."""
    server = Instance(
        tmp_path / "w", "--workers", "2", "--database-url", postgres_url, "--graph-url", falkor.url
    )
    try:
        server.wait_ready()
        with fresh(server.url) as client:
            seen: dict[bool, int] = {}
            for _ in range(200):
                status = client.get("/intelligence/status").json()
                seen[status["applying"]] = seen.get(status["applying"], 0) + 1
                if len(seen) == 2:
                    break
                time.sleep(0.02)
            assert set(seen) == {True, False}, seen  # two processes behind one port
            workers = [
                int(pid)
                for pid in Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children")
                .read_text()
                .split()
            ]
            assert len(workers) >= 2
            envelopes = copies(layer_envelopes()[:300], "-workers")
            for n, envelope in enumerate(envelopes):
                if n == 100:
                    os.kill(workers[0], signal.SIGKILL)
                reply = post_until_acked(client, "/events", envelope, time.monotonic() + 120)
                assert reply.status_code == 202, reply.text
        status = wait_applied(server.url)
        assert status["journal_seq"] == len(envelopes)
        count = httpx.post(
            f"{server.url}/cypher",
            json={"query": "MATCH (e:Event) RETURN count(e) AS n", "workspace": envelopes[0]["workspace"]},
        ).json()["results"][0]["n"]
        assert count == len(envelopes)
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.output()


def test_workers_refuse_the_embedded_stores(tmp_path: Path) -> None:
    """SQLite and the embedded FalkorDB in one data directory cannot take several writers: refused
    before anything starts, saying what to pass instead."""
    result = subprocess.run(
        [sys.executable, "-m", "convograph", "serve", "--workers", "2", "--port", "0", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "--workers 2 needs state that every process shares" in result.stderr
    assert "--database-url postgresql://" in result.stderr


def eventually(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the time limit"
        time.sleep(0.2)


def test_keys_in_the_database_count_on_every_instance(tmp_path: Path, postgres_url: str) -> None:
    """A key created with ``convograph keys create --database-url`` is required and honoured by
    every instance sharing the database, and refused everywhere once revoked, without restarts."""
    instances = [
        Instance(tmp_path / f"k{n}", "--database-url", postgres_url, "--no-intelligence") for n in range(2)
    ]
    try:
        for instance in instances:
            instance.wait_ready_path("/v1/conversations")
        cli = [sys.executable, "-m", "convograph", "keys"]
        created = subprocess.run(
            [*cli, "create", "uploader", "--scope", "read", "--scope", "write", "--database-url", postgres_url],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        key = created.stdout.strip()
        assert key.startswith("cg_")
        bearer = {"Authorization": f"Bearer {key}"}
        for instance in instances:
            eventually(lambda i=instance: httpx.get(f"{i.url}/v1/conversations").status_code == 401)
            assert httpx.get(f"{instance.url}/v1/conversations", headers=bearer).status_code == 200
        listed = subprocess.run(
            [*cli, "list", "--database-url", postgres_url], capture_output=True, text=True, timeout=60
        )
        assert listed.stdout.split() == ["uploader", "read,write", "*"]
        subprocess.run([*cli, "revoke", "uploader", "--database-url", postgres_url], check=True, timeout=60)
        for instance in instances:
            eventually(
                lambda i=instance: httpx.get(f"{i.url}/v1/conversations", headers=bearer).status_code != 200
            )
    finally:
        for instance in instances:
            instance.stop()
