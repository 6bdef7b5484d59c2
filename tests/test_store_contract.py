"""The EventLog contract, run against every backend (memory, SQLite, Postgres, Redis, Redis+Postgres)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from convograph.events import Error, EventError, HarnessEnd, HarnessStart, Text, encode_event, parse_event
from convograph.graph import create_graph, reduce_events
from convograph.store import EventLog, InvalidConversationId, Snapshot, open_event_log
from convograph.store.messages import Message
from convograph.store.postgres import PostgresEventLog
from convograph.store.redis import RedisEventLog
from convograph.store.snapshots import FLAT_GRAPH, rebuild
from convograph.store.spool import SpoolingEventLog
from convograph.testing import collect, sample_run

BACKENDS = [
    "memory",
    "sqlite",
    "postgres",
    "redis",
    "redis+postgres",
    "postgres+spool",
    "redis-cluster",
    "redis-cluster+postgres",
]


@pytest.fixture(params=BACKENDS)
async def event_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventLog]:
    kind: str = request.param
    if kind == "memory":
        url = "memory://"
    elif kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'events.db'}"
    elif kind == "postgres":
        url = request.getfixturevalue("postgres_url")
    elif kind == "postgres+spool":  # the spool wrapper must be transparent while the backend is up
        url = f"{request.getfixturevalue('postgres_url')}?spool={tmp_path / 'spool.db'}"
    elif kind.startswith("redis-cluster"):  # a fresh prefix on the session's 3-master cluster
        url = f"{request.getfixturevalue('redis_cluster_url')}?prefix=cg{uuid.uuid4().hex[:12]}&maxlen=1000"
        if kind == "redis-cluster+postgres":
            url += "&finalize=" + request.getfixturevalue("postgres_url")
    else:
        prefix = request.getfixturevalue("redis_prefix")
        url = f"{request.getfixturevalue('redis_url')}?prefix={prefix}&maxlen=1000"
        if kind == "redis+postgres":
            url += "&finalize=" + request.getfixturevalue("postgres_url")
    log = await open_event_log(url)
    try:
        yield log
    finally:
        await log.close()


def cid() -> str:
    return f"conv-{uuid.uuid4().hex[:10]}"


def texts(n: int, *, run_id: str = "r", ids: Callable[[int], str | None] = lambda i: None) -> list[Any]:
    return [Text(run_id=run_id, id="t", content=f"{i} ", event_id=ids(i)) for i in range(n)]


async def test_seqs_are_contiguous_from_one_and_set_on_events(event_log: EventLog) -> None:
    c = cid()
    first = await event_log.append(c, texts(3))
    second = await event_log.append(c, texts(2))
    assert (first.accepted, first.first_seq, first.last_seq) == (3, 1, 3)
    assert (second.first_seq, second.last_seq, second.conversation_last_seq) == (4, 5, 5)
    assert [s.seq for s in second.stored] == [4, 5]
    stored = await event_log.read(c)
    assert [s.seq for s in stored] == [1, 2, 3, 4, 5]
    assert all(s.event.seq == s.seq and s.conversation_id == c for s in stored)
    assert [s.event.content for s in stored] == ["0 ", "1 ", "2 ", "0 ", "1 "]  # type: ignore[union-attr]


async def test_seqs_are_per_conversation(event_log: EventLog) -> None:
    a, b = cid(), cid()
    await event_log.append(a, texts(4))
    result = await event_log.append(b, texts(2))
    assert (result.first_seq, result.last_seq) == (1, 2)


async def test_duplicates_by_event_id_are_stored_once_and_reported(event_log: EventLog) -> None:
    c = cid()
    first = await event_log.append(c, texts(3, ids=lambda i: f"e{i}"))
    again = await event_log.append(c, [*texts(3, ids=lambda i: f"e{i}"), *texts(1, ids=lambda i: "new")])
    within = await event_log.append(c, texts(2, ids=lambda i: "same"))
    assert (first.accepted, first.duplicates) == (3, 0)
    assert (again.accepted, again.duplicates, again.duplicate_indexes) == (1, 3, (0, 1, 2))
    assert (again.first_seq, again.last_seq) == (4, 4)
    assert (within.accepted, within.duplicates, within.duplicate_indexes) == (1, 1, (1,))
    all_dups = await event_log.append(c, texts(1, ids=lambda i: "e0"))
    assert (all_dups.accepted, all_dups.first_seq, all_dups.last_seq) == (0, None, None)
    assert all_dups.conversation_last_seq == 5
    stored = await event_log.read(c)
    assert [s.event.event_id for s in stored] == ["e0", "e1", "e2", "new", "same"]


async def test_events_without_event_id_are_never_deduplicated(event_log: EventLog) -> None:
    c = cid()
    await event_log.append(c, texts(2))
    result = await event_log.append(c, texts(2))
    assert result.accepted == 2


async def test_read_after_and_limit(event_log: EventLog) -> None:
    c = cid()
    await event_log.append(c, texts(10))
    assert [s.seq for s in await event_log.read(c, after_seq=7)] == [8, 9, 10]
    assert [s.seq for s in await event_log.read(c, after_seq=2, limit=3)] == [3, 4, 5]
    assert await event_log.read(c, after_seq=10) == []
    assert await event_log.read(cid()) == []


async def test_extras_and_fields_round_trip(event_log: EventLog) -> None:
    c = cid()
    event = HarnessStart(run_id="r", agent_id="a", depth=2, timestamp=12.5, extra={"custom": [1, {"x": 2}]})
    await event_log.append(c, [event])
    [stored] = await event_log.read(c)
    assert stored.event == msgspec.structs.replace(event, seq=1)


async def test_subscribe_replays_then_follows_without_gap_or_duplicate(event_log: EventLog) -> None:
    c = cid()
    await event_log.append(c, texts(5))
    stream = event_log.subscribe(c, after_seq=2)
    replayed = await collect(stream, 3)
    assert [s.seq for s in replayed] == [3, 4, 5]

    async def writer(w: int) -> None:
        for i in range(10):
            await event_log.append(c, texts(7, run_id=f"w{w}"))
            if i % 3 == 0:
                await asyncio.sleep(0)

    live_task = asyncio.create_task(collect(stream, 4 * 10 * 7, timeout=30))
    await asyncio.gather(*(writer(w) for w in range(4)))
    live = await live_task
    assert [s.seq for s in live] == list(range(6, 6 + 280))
    await stream.aclose()  # type: ignore[attr-defined]


async def test_subscribers_started_during_appends_see_every_event_once(event_log: EventLog) -> None:
    c = cid()
    done = asyncio.Event()

    async def writer() -> None:
        for _ in range(30):
            await event_log.append(c, texts(10))
            await asyncio.sleep(0)
        done.set()

    task = asyncio.create_task(writer())
    await asyncio.sleep(0.01)
    stream = event_log.subscribe(c, after_seq=0)
    got = await collect(stream, 300, timeout=30)
    await task
    assert [s.seq for s in got] == list(range(1, 301))
    await stream.aclose()  # type: ignore[attr-defined]


async def test_list_conversations_counts_and_status(event_log: EventLog) -> None:
    active, complete, failed = cid(), cid(), cid()
    await event_log.append(active, [HarnessStart(run_id="a"), *texts(2, run_id="a")])
    await event_log.append(complete, sample_run("run-1"))
    await event_log.append(failed, [HarnessStart(run_id="f"), Error(run_id="f", message="boom")])
    infos = {info.id: info for info in await event_log.list_conversations()}
    assert {active, complete, failed} <= infos.keys()
    assert (infos[active].status, infos[active].event_count, infos[active].last_seq) == ("active", 3, 3)
    assert infos[complete].status == "complete"
    assert infos[complete].event_count == len(sample_run("run-1"))
    assert infos[failed].status == "error"
    assert infos[failed].last_activity >= infos[active].last_activity
    info = await event_log.get_conversation(complete)
    assert info is not None
    assert info.status == "complete"
    assert await event_log.get_conversation(cid()) is None


async def test_status_error_on_harness_end_reason_error(event_log: EventLog) -> None:
    c = cid()
    await event_log.append(c, [HarnessStart(run_id="x"), HarnessEnd(run_id="x", reason="error")])
    info = await event_log.get_conversation(c)
    assert info is not None
    assert info.status == "error"


async def test_delete(event_log: EventLog) -> None:
    c, other = cid(), cid()
    await event_log.append(c, texts(3, ids=lambda i: f"e{i}"))
    await event_log.append(other, texts(1))
    assert await event_log.delete(c) is True
    assert await event_log.read(c) == []
    assert await event_log.get_conversation(c) is None
    assert await event_log.delete(c) is False
    assert [s.seq for s in await event_log.read(other)] == [1]
    again = await event_log.append(c, texts(1, ids=lambda i: "e0"))
    assert (again.accepted, again.first_seq) == (1, 1)


@pytest.mark.parametrize("bad", ["", "a" * 129, "has space", "-leading", "slash/inside", "ünïcode"])
async def test_invalid_conversation_ids_are_rejected(event_log: EventLog, bad: str) -> None:
    with pytest.raises(InvalidConversationId):
        await event_log.append(bad, texts(1))
    with pytest.raises(InvalidConversationId):
        await event_log.read(bad)


async def test_a_batch_with_a_non_event_stores_nothing(event_log: EventLog) -> None:
    c = cid()
    with pytest.raises(EventError, match="item 1"):
        await event_log.append(c, [*texts(1), {"type": "text"}])  # type: ignore[list-item]
    assert await event_log.read(c) == []


async def test_snapshots_and_rebuild_match_a_full_replay(event_log: EventLog) -> None:
    c = cid()
    events = [e for run in range(5) for e in sample_run(f"run-{run}")]
    await event_log.append(c, events)
    assert await event_log.load_snapshot(c, FLAT_GRAPH.name) is None
    first = await rebuild(event_log, c, FLAT_GRAPH, snapshot_every=10, page_size=7)
    expected = reduce_events(create_graph(), events)
    assert first.state == expected
    assert first.seq == len(events)
    assert first.snapshot_seq == 0
    snapshot = await event_log.load_snapshot(c, FLAT_GRAPH.name)
    assert snapshot is not None
    assert 0 < snapshot.seq <= len(events)
    more = sample_run("run-9")
    await event_log.append(c, more)
    second = await rebuild(event_log, c, FLAT_GRAPH, snapshot_every=None)
    assert second.snapshot_seq == snapshot.seq
    assert second.replayed == len(events) + len(more) - snapshot.seq
    assert second.state == reduce_events(expected, more)


async def test_older_snapshot_never_replaces_a_newer_one(event_log: EventLog) -> None:
    c = cid()
    await event_log.append(c, texts(3))
    await event_log.save_snapshot(c, Snapshot(name="s", seq=3, data=b"new"))
    await event_log.save_snapshot(c, Snapshot(name="s", seq=1, data=b"old"))
    loaded = await event_log.load_snapshot(c, "s")
    assert loaded is not None
    assert (loaded.seq, loaded.data) == (3, b"new")


# --- NUL (U+0000): content keeps it exactly; ids holding it are refused by every backend alike -------


async def messages_of(log: EventLog, conversation_id: str) -> list[Message] | None:
    """The Postgres messages rows behind ``log`` (after a Redis finalisation), None if it keeps none."""
    if isinstance(log, SpoolingEventLog):
        log = log.inner
    if isinstance(log, RedisEventLog):
        await log.drain()
        if log.archive is None:
            return None
        assert await log.finalize_pending() == 0  # the finalisation went through, nothing left to retry
        archive = log.archive
        assert isinstance(archive, PostgresEventLog)
        assert [s.event for s in await archive.read(conversation_id)] == [
            s.event for s in await log.read(conversation_id)
        ]
        log = archive
    if isinstance(log, PostgresEventLog):
        return await log.list_messages(conversation_id)
    return None


async def append_and_read_back(log: EventLog, conversation_id: str, wires: list[dict[str, Any]]) -> None:
    events = [parse_event(wire) for wire in wires]
    result = await log.append(conversation_id, events)
    assert result.accepted == len(events)
    stored = await log.read(conversation_id)
    assert [encode_event(msgspec.structs.replace(s.event, seq=None)) for s in stored] == [
        encode_event(e) for e in events
    ]


async def test_user_messages_holding_nul_are_stored_exactly(event_log: EventLog) -> None:
    c = cid()
    wires: list[dict[str, Any]] = [
        {"type": "user", "runId": "u1", "id": "m1", "content": "hi\x00there"},
        {"type": "user", "runId": "u2", "content": [{"type": "text", "text": "\x00"}]},
        {"type": "harness_start", "runId": "r"},  # a finished run: Redis finalises into Postgres
        {"type": "harness_end", "runId": "r"},
    ]
    await append_and_read_back(event_log, c, wires)
    messages = await messages_of(event_log, c)
    if messages is not None:  # Postgres text/jsonb cannot hold NUL: the rows carry U+FFFD instead
        assert [(m.id, m.text, m.parts) for m in messages] == [
            ("m1", "hi\ufffdthere", [{"type": "text", "text": "hi\ufffdthere"}]),
            ("u2:user", "\ufffd", [{"type": "text", "text": "\ufffd"}]),
            ("r", "", []),
        ]


async def test_a_run_whose_tool_result_holds_nul_is_stored_and_finished(event_log: EventLog) -> None:
    c = cid()
    wires: list[dict[str, Any]] = [
        {"type": "harness_start", "runId": "r"},
        {"type": "text", "runId": "r", "id": "t", "content": "a\x00b"},
        {"type": "tool_call", "runId": "r", "id": "c", "name": "cat", "input": {"path\x00": "\x00"}},
        {
            "type": "tool_result",
            "runId": "r",
            "id": "c",
            "name": "cat",
            "output": {"bytes": "\x7fELF\x00\x01"},
        },
        {"type": "harness_end", "runId": "r", "reason": "stop"},
    ]
    await append_and_read_back(event_log, c, wires)
    info = await event_log.get_conversation(c)
    assert info is not None
    assert info.status == "complete"
    messages = await messages_of(event_log, c)
    if messages is not None:
        [message] = messages
        assert (message.id, message.role, message.text) == ("r", "assistant", "a\ufffdb")
        assert message.parts[1:3] == [
            {"type": "tool_call", "id": "c", "name": "cat", "input": {"path\ufffd": "\ufffd"}},
            {"type": "tool_result", "id": "c", "name": "cat", "output": {"bytes": "\x7fELF\ufffd\x01"}},
        ]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (Text(run_id="r\x00", id="t", content="x"), "runId"),
        (Text(run_id="r", id="t", content="x", event_id="e\x00"), "eventId"),
        (HarnessStart(run_id="r", parent_id="\x00"), "parentId"),
    ],
)
async def test_an_event_built_with_a_nul_id_is_refused_and_nothing_is_stored(
    event_log: EventLog, bad: Any, field: str
) -> None:
    c = cid()
    with pytest.raises(EventError, match="NUL") as caught:
        await event_log.append(c, [*texts(1), bad])
    assert (caught.value.index, caught.value.field) == (1, field)
    assert await event_log.read(c) == []


async def test_reads_past_any_seq_or_with_huge_limits_are_empty_or_unbounded(event_log: EventLog) -> None:
    """Found by hand against ``Last-Event-ID: 99999999999999999999999``: SQLite raised
    ``OverflowError`` in the middle of the SSE response. Every backend answers the same."""
    c = cid()
    await event_log.append(c, texts(3))
    assert await event_log.read(c, after_seq=10**30) == []
    assert await event_log.read(c, after_seq=2**63 - 1) == []
    assert [s.seq for s in await event_log.read(c, after_seq=-5)] == [1, 2, 3]
    assert [s.seq for s in await event_log.read(c, limit=10**30)] == [1, 2, 3]
    assert [s.seq for s in await event_log.read(c, after_seq=1, limit=2**63)] == [2, 3]
    assert await event_log.read(c, limit=0) == []
    assert await event_log.read(c, limit=-1) == []
    follower = event_log.subscribe(c, after_seq=10**30)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(aiter(follower)), timeout=0.3)
