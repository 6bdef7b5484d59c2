"""`ConversationListFeed`: snapshot, coalesced row changes, other writers, deletions, visibility."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from convograph.client.sse import SSEDecoder
from convograph.events import parse_event
from convograph.server.digests import DigestIndex
from convograph.server.summaries import ConversationListFeed
from convograph.store import EventLog
from convograph.store.memory import MemoryEventLog


def text(i: int, run: str = "r") -> Any:
    return parse_event({"type": "text", "runId": run, "id": f"t{i}", "content": f"c{i}"})


class Reader:
    """Decodes one subscriber's frames in a background task."""

    def __init__(self, stream: AsyncIterator[bytes]) -> None:
        self.messages: list[tuple[str, Any]] = []
        self.heartbeats = 0
        self._stream = stream
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        decoder = SSEDecoder()
        async for chunk in self._stream:
            if chunk.startswith(b": heartbeat"):
                self.heartbeats += 1
            for message in decoder.feed(chunk):
                self.messages.append((message.event, json.loads(message.data)))
            self._changed.set()

    async def until(self, predicate: Any, timeout: float = 5.0) -> None:
        async def wait() -> None:
            while not predicate(self):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)

    def rows(self) -> dict[str, dict[str, Any]]:
        """The list as a client following the documented rule would show it."""
        rows: dict[str, dict[str, Any]] = {}
        for event, data in self.messages:
            if event == "snapshot":
                rows = {row["id"]: row for row in data["conversations"]}
            elif event == "conversation":
                known = rows.get(data["id"])
                if known is None or data["lastSeq"] >= known["lastSeq"]:
                    rows[data["id"]] = data
            elif event == "deleted":
                rows.pop(data["id"], None)
        return rows


@pytest.fixture
async def log() -> AsyncIterator[EventLog]:
    store = MemoryEventLog()
    yield store
    await store.close()


async def test_snapshot_then_coalesced_changes(log: EventLog) -> None:
    await log.append("a", [text(1)])
    feed = ConversationListFeed(log, refresh_seconds=60, coalesce_seconds=0.05)
    reader = Reader(feed.frames(lambda cid: True, heartbeat=30))
    await reader.until(lambda r: r.messages)
    assert reader.messages[0][0] == "snapshot"
    assert [row["id"] for row in reader.messages[0][1]["conversations"]] == ["a"]

    for i in range(2, 52):  # a burst: 50 appends, each marked as the server does
        result = await log.append("a", [text(i)])
        assert result.accepted == 1
        feed.mark("a")
    await log.append("b", [text(1, run="other")])
    feed.mark("b")
    await reader.until(lambda r: r.rows().get("a", {}).get("eventCount") == 51 and "b" in r.rows())
    changes = [data for event, data in reader.messages if event == "conversation"]
    assert len(changes) < 10  # coalesced, not one frame per append
    assert reader.rows()["b"]["eventCount"] == 1
    await feed.close()
    await asyncio.wait_for(reader.task, 5)  # closing the feed ends every subscriber's stream


async def test_other_writers_are_picked_up_by_the_periodic_refresh(log: EventLog) -> None:
    feed = ConversationListFeed(log, refresh_seconds=0.1, coalesce_seconds=0.01)
    reader = Reader(feed.frames(lambda cid: True, heartbeat=30))
    await reader.until(lambda r: r.messages)
    assert reader.messages[0] == ("snapshot", {"conversations": []})
    await log.append("elsewhere", [text(1), text(2)])  # no mark: another process wrote it
    await reader.until(lambda r: r.rows().get("elsewhere", {}).get("eventCount") == 2)
    assert await log.delete("elsewhere")
    await reader.until(lambda r: "elsewhere" not in r.rows())
    assert reader.messages[-1] == ("deleted", {"id": "elsewhere"})
    await feed.close()


async def test_deletions_and_visibility(log: EventLog) -> None:
    await log.append("acme:1", [text(1)])
    await log.append("other:1", [text(1)])
    feed = ConversationListFeed(log, refresh_seconds=60, coalesce_seconds=0.01)
    acme = Reader(feed.frames(lambda cid: cid.startswith("acme:"), heartbeat=0.05))
    everyone = Reader(feed.frames(lambda cid: True, heartbeat=30))
    await acme.until(lambda r: r.messages)
    await everyone.until(lambda r: r.messages)
    assert list(acme.rows()) == ["acme:1"]
    assert sorted(everyone.rows()) == ["acme:1", "other:1"]

    await log.append("other:1", [text(2)])
    feed.mark("other:1")
    await log.append("acme:2", [text(1)])
    feed.mark("acme:2")
    await everyone.until(lambda r: "acme:2" in r.rows() and r.rows()["other:1"]["eventCount"] == 2)
    await acme.until(lambda r: "acme:2" in r.rows())
    assert await log.delete("acme:1")
    feed.deleted("acme:1")
    await acme.until(lambda r: "acme:1" not in r.rows())
    await everyone.until(lambda r: "acme:1" not in r.rows())
    await acme.until(lambda r: r.heartbeats > 0)
    assert all(data["id"].startswith("acme:") for event, data in acme.messages if event != "snapshot")
    await feed.close()


async def test_no_work_without_subscribers(log: EventLog) -> None:
    feed = ConversationListFeed(log, refresh_seconds=0.01, coalesce_seconds=0.01)
    feed.mark("a")
    feed.deleted("a")
    await asyncio.sleep(0.05)
    assert feed.listener_count == 0
    assert feed._task is None  # nothing was started for nobody
    await feed.close()


def user(content: str) -> Any:
    return parse_event({"type": "user", "runId": "u", "content": content})


async def test_rows_carry_their_digest(log: EventLog) -> None:
    await log.append("a", [user("Compare Qdrant and Milvus"), text(1)])
    feed = ConversationListFeed(log, digests=DigestIndex(log), refresh_seconds=60, coalesce_seconds=0.01)
    reader = Reader(feed.frames(lambda cid: True, heartbeat=30))
    await reader.until(lambda r: r.messages)
    row = reader.rows()["a"]
    assert (row["title"], row["tools"], row["agents"], row["errors"]) == (
        "Compare Qdrant and Milvus",
        [],
        [],
        0,
    )
    await log.append("a", [parse_event({"type": "tool_call", "runId": "r", "id": "c", "name": "exec"})])
    feed.mark("a")
    await reader.until(lambda r: r.rows()["a"]["tools"] == ["exec"])
    await feed.close()


class SlowReads:
    """An event log whose reads take 30 ms (a slow backend)."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner

    async def read(self, conversation_id: str, after_seq: int = 0, limit: int | None = None) -> Any:
        await asyncio.sleep(0.03)
        return await self.inner.read(conversation_id, after_seq, limit)


async def test_digests_that_miss_the_snapshot_follow_as_rows(log: EventLog) -> None:
    """With no time to fold before the snapshot, rows go out without their digest, then again
    with it, once it is folded."""
    for n in range(5):
        await log.append(f"c{n}", [user(f"question {n}")])
    feed = ConversationListFeed(
        log,
        digests=DigestIndex(SlowReads(log)),
        refresh_seconds=60,
        coalesce_seconds=0.01,
        digest_budget_seconds=0.05,
    )
    reader = Reader(feed.frames(lambda cid: True, heartbeat=30))
    await reader.until(lambda r: r.messages)
    snapshot = reader.messages[0][1]["conversations"]
    assert len(snapshot) == 5
    assert any("title" not in row for row in snapshot)
    await reader.until(
        lambda r: all(row.get("title") == f"question {cid[1]}" for cid, row in r.rows().items())
    )
    await feed.close()
