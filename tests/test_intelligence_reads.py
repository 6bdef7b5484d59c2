"""Bounded user reads (issue 26 item 1) on a real embedded FalkorDB: time, memory, rows, slots.

The engine here is started with small limits (64 MB per statement, 3 read slots, 2 per key) so
the runaways of the outside trial can be reproduced quickly; `QUERY_RUNAWAY` is an expression
FalkorDB cannot interrupt (a ``reduce`` building a long string: seconds of engine time inside one
record), so it shows that the caller is answered at its deadline while the engine still runs it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from convograph.intelligence.embedded import EmbeddedFalkorDB
from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.query import QueryError
from convograph.intelligence.reads import ReadLimits, RespReader, TooManyQueries, pack_command
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import GraphNames
from tests.test_intelligence_support import WS, ev, make_service

LIMITS = ReadLimits(memory_mb=64, slots=3, per_key=2)
QUERY_RUNAWAY = "RETURN size(reduce(s = '', x IN range(1, 100000) | s + 'aaaaaaaaaa')) AS n"
CARTESIAN = "MATCH (a),(b),(c),(d),(e),(f),(g),(h) RETURN count(*) AS n"


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFalkorDB]:
    embedded = EmbeddedFalkorDB(tmp_path_factory.mktemp("limited"), limits=LIMITS)
    embedded.start()
    yield embedded
    embedded.close()


@pytest.fixture
def svc(limited: EmbeddedFalkorDB, tmp_path: Path) -> Iterator[IntelligenceService]:
    engine = limited.start()
    names = GraphNames(f"r{tmp_path.name[-8:]}:")
    service = make_service(engine, names, query_timeout_ms=300)
    for ms in range(11):  # a 12-node workspace, as in the trial: a session and 11 of its events
        service.ingest(ev("prompt:submit", ms, prompt=f"p{ms}"))
    assert service.wait_applied(timeout=30)
    yield service
    pool = engine._read_pool()
    deadline = time.monotonic() + 120
    while pool.in_flight() and time.monotonic() < deadline:  # runaways end before the next test
        time.sleep(0.1)
    service.close()
    for graph in engine.graphs():
        if graph.startswith(names.prefix):
            engine.delete_graph(graph)


def running_queries(engine: FalkorEngine) -> list[Any]:
    """FalkorDB's own list of statements it is executing now (``GRAPH.INFO RunningQueries``)."""
    reply = engine.command("GRAPH.INFO", "RunningQueries")
    return list(reply[1]) if isinstance(reply, list) and len(reply) > 1 else []


def test_the_engine_starts_with_the_memory_cap_and_a_thread_for_the_writer(limited: EmbeddedFalkorDB) -> None:
    engine = limited.start()
    assert engine.command("GRAPH.CONFIG", "GET", "QUERY_MEM_CAPACITY")[1] == 64 * 1024 * 1024
    assert engine.command("GRAPH.CONFIG", "GET", "THREAD_COUNT")[1] == 5


def test_a_runaway_is_answered_at_its_deadline_while_the_engine_still_runs_it(
    svc: IntelligenceService,
) -> None:
    """Before: the caller waited for the engine (6.7 s for this statement with a 1 s limit, and a
    10 s limit ended in a 503 after 60 s: redis-py re-sent the statement after each 5 s socket
    timeout). Now the answer comes at the limit, and other keys' reads and ingest go on (ingest
    into another workspace: the statement holds its own graph's read lock, which a write to that
    graph waits for)."""
    engine = svc.engine
    assert isinstance(engine, FalkorEngine)
    with pytest.raises(QueryError) as info:
        svc.cypher(QUERY_RUNAWAY, workspace=WS, key="mallory")
    assert info.value.code == "query_timeout"
    assert "300 ms" in info.value.message
    assert "query_timeout_ms" in info.value.message
    # answered while the engine is still busy with it, which still holds one of mallory's slots
    assert running_queries(engine), "the caller was only answered once the engine had finished"
    assert engine._read_pool().in_flight("mallory") == 1
    # other readers and the writer are not held up meanwhile
    assert svc.cypher("RETURN 1 AS one", workspace=WS, key="alice").results == [{"one": 1}]
    svc.ingest({**ev("prompt:submit", 50, prompt="elsewhere"), "workspace": "W2"})
    assert svc.wait_applied(timeout=30)
    assert running_queries(engine), "the runaway ended before the checks above: make it longer"
    count = "MATCH (e:Event {workspace: $workspace}) RETURN count(e) AS n"
    assert svc.cypher(count, workspace="W2", key="alice").results == [{"n": 1}]


def test_one_key_holds_at_most_its_share_of_the_read_slots(svc: IntelligenceService) -> None:
    errors: list[BaseException] = []

    def runaway() -> None:
        try:
            svc.cypher(QUERY_RUNAWAY, workspace=WS, key="mallory")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=runaway) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [type(e) for e in errors] == [QueryError, QueryError]
    with pytest.raises(TooManyQueries, match=r"already has 2 queries running"):
        svc.cypher("RETURN 1", workspace=WS, key="mallory")
    assert svc.cypher("RETURN 2 AS two", workspace=WS, key="bob").results == [{"two": 2}]


def test_the_trial_cartesian_product_is_stopped_by_the_engine_timeout(svc: IntelligenceService) -> None:
    with pytest.raises(QueryError) as info:
        svc.cypher(CARTESIAN, workspace=WS, key="carol")
    assert info.value.code == "query_timeout"


@pytest.mark.parametrize(
    "query",
    ["RETURN size(range(1, 200000000)) AS n", "UNWIND range(1, 100000000) AS x RETURN count(x) AS n"],
)
def test_ranges_past_the_memory_limit_are_refused_before_they_run(
    svc: IntelligenceService, query: str
) -> None:
    """FalkorDB builds a range whole before it checks memory (measured: 1.6 GB, 52 s)."""
    with pytest.raises(QueryError) as info:
        svc.cypher(query, workspace=WS)
    assert info.value.code == "query_memory"
    assert "64 MB" in info.value.message
    assert "query_memory_mb" in info.value.message
    with pytest.raises(QueryError, match="query_memory_mb"):
        svc.cypher("RETURN size(range(1, $n)) AS n", {"n": 10**9}, workspace=WS)
    assert svc.cypher("RETURN size(range(1, 1000)) AS n", workspace=WS).results == [{"n": 1000}]


def test_a_statement_past_the_memory_limit_is_stopped_by_the_engine(svc: IntelligenceService) -> None:
    query = (
        "UNWIND range(1, 3000) AS a UNWIND range(1, 3000) AS b WITH collect(a + b) AS l RETURN size(l) AS n"
    )
    svc.query_timeout_ms = 20_000
    with pytest.raises(QueryError) as info:
        svc.cypher(query, workspace=WS)
    assert info.value.code == "query_memory"
    assert "64 MB" in info.value.message


def test_rows_past_the_cap_are_skipped_as_they_arrive(svc: IntelligenceService) -> None:
    svc.query_timeout_ms = 20_000
    svc.row_cap = 7
    got = svc.cypher("MATCH (a),(b),(c),(d) RETURN a.node_id AS a, b.node_id AS b", workspace=WS)
    assert len(got.results) == 7
    assert got.truncated is True
    assert svc.cypher("UNWIND range(1, 7) AS x RETURN x", workspace=WS).truncated is False


def resp(value: Any) -> bytes:
    if isinstance(value, list):
        return b"*%d\r\n" % len(value) + b"".join(resp(v) for v in value)
    if isinstance(value, int):
        return b":%d\r\n" % value
    if value is None:
        return b"$-1\r\n"
    data = str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def test_resp_reader_decodes_the_kept_rows_and_stays_in_step() -> None:
    rows = [[[3, n], [2, "x" * (n % 50)], [6, [[3, 1], [2, "\r\n"]]]] for n in range(20_000)]
    reply = resp([[[1, "n"], [1, "s"], [1, "l"]], rows, ["Cached execution: 0"]])
    left, right = socket.socketpair()
    try:
        sender = threading.Thread(
            target=lambda: left.sendall(reply + resp([["stats only"]]) + b"-ERR boom\r\n")
        )
        sender.start()
        reader = RespReader(right)
        (header, kept, stats), total = reader.query_reply(keep_rows=3)
        assert total == 20_000
        assert kept == rows[:3]
        assert header[0] == [1, "n"]
        assert stats == ["Cached execution: 0"]
        assert reader.query_reply(keep_rows=3) == ([["stats only"]], 0)
        with pytest.raises(redis.ResponseError, match="boom"):
            reader.query_reply(keep_rows=3)
        sender.join()
    finally:
        left.close()
        right.close()


def test_pack_command_is_resp() -> None:
    assert pack_command("GRAPH.RO_QUERY", "g", "RETURN 'é'", 5) == (
        b"*4\r\n$14\r\nGRAPH.RO_QUERY\r\n$1\r\ng\r\n$11\r\nRETURN '\xc3\xa9'\r\n$1\r\n5\r\n"
    )
