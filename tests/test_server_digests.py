"""`fold_digest`, `search_digests` and `DigestIndex`: what the conversation list shows and searches."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convograph.demo.conversations import research_script
from convograph.events import parse_event
from convograph.server.digests import (
    SEARCH_TEXT_CHARS,
    TITLE_CHARS,
    Digest,
    DigestIndex,
    fold_digest,
    search_digests,
)
from convograph.store import EventLog, StoredEvent
from convograph.store.memory import MemoryEventLog


def stored(events: list[dict[str, Any]], start: int = 1) -> list[StoredEvent]:
    return [
        StoredEvent(seq=n, conversation_id="c", event=parse_event({**e, "seq": n}), received_at=0.0)
        for n, e in enumerate(events, start=start)
    ]


def test_the_research_demo_digest() -> None:
    digest = fold_digest(Digest(), stored(research_script().events(decisions={"relay-write-report": True})))
    assert digest.title is not None
    assert digest.title.startswith("We need a vector database for ~50M embeddings")
    assert len(digest.title) == TITLE_CHARS
    assert digest.title.endswith("…")
    assert list(digest.tools) == ["agent", "web_search", "fetch_url", "exec", "write_file"]
    assert digest.tools["fetch_url"] == 3
    assert list(digest.agents) == ["lead", "researcher-qdrant", "researcher-milvus", "code-reader"]
    assert digest.errors == 1
    assert "529 overloaded_error" in digest.error_messages[0]
    row = digest.row_fields()
    assert set(row) == {"title", "tools", "agents", "errors"}


def test_deltas_of_one_stream_join_and_other_text_starts_a_line() -> None:
    events = [
        {"type": "user", "runId": "u", "content": "  find\n the   refund policy "},
        {"type": "text", "runId": "a", "id": "t1", "content": "Refu"},
        {"type": "text", "runId": "a", "id": "t1", "content": "nds take 5 days."},
        {"type": "tool_call", "runId": "a", "id": "c1", "name": "search", "input": {"q": "refund window"}},
        {"type": "tool_result", "runId": "a", "id": "c1", "name": "search", "output": {"hits": 3}},
    ]
    digest = fold_digest(Digest(), stored(events))
    assert digest.title == "find the refund policy"
    text, lower = digest.text()
    assert text.split("\n") == [
        "  find",
        " the   refund policy ",
        "Refunds take 5 days.",
        'search {"q":"refund window"}',
        '{"hits":3}',
    ]
    assert lower == text.lower()
    hits = search_digests(digest, "refunds take")
    assert [(h.field, h.snippet) for h in hits] == [
        ("text", 'find the refund policy Refunds take 5 days. search {"q":"refund window"} {"hits":3}')
    ]
    far = fold_digest(
        Digest(), stored([{"type": "user", "runId": "u", "content": "a" * 200 + " needle " + "b" * 200}])
    )
    assert search_digests(far, "needle")[0].snippet == "…" + "a" * 59 + " needle " + "b" * 59 + "…"
    assert [h.field for h in search_digests(digest, "search")] == ["tool", "text"]
    assert search_digests(digest, "nowhere") == []


def test_the_search_text_is_capped_and_says_so() -> None:
    chunk = "x" * 1000
    events = [{"type": "text", "runId": "a", "id": f"t{i}", "content": chunk} for i in range(40)]
    digest = fold_digest(Digest(), stored(events))
    assert digest.length == SEARCH_TEXT_CHARS
    assert len(digest.text()[0]) == SEARCH_TEXT_CHARS
    assert digest.text_complete is False
    assert digest.seq == 40


@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=30), st.integers(1, 29))
def test_folding_in_pages_equals_folding_at_once(deltas: list[str], cut: int) -> None:
    """The index folds the log page by page: where the pages split never changes the digest."""
    events = [{"type": "text", "runId": "a", "id": f"t{i % 3}", "content": d} for i, d in enumerate(deltas)]
    whole = fold_digest(Digest(), stored(events))
    cut = min(cut, len(events))
    paged = fold_digest(fold_digest(Digest(), stored(events[:cut])), stored(events[cut:], start=cut + 1))
    assert paged.text() == whole.text()
    assert (paged.seq, paged.title, paged.length) == (whole.seq, whole.title, whole.length)


@pytest.fixture
async def log() -> AsyncIterator[EventLog]:
    store = MemoryEventLog()
    yield store
    await store.close()


class CountingLog:
    """Counts the reads that reach the log."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self.reads: list[int] = []

    async def read(
        self, conversation_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        self.reads.append(after_seq)
        return await self.inner.read(conversation_id, after_seq, limit)


async def test_the_index_reads_only_what_is_new(log: EventLog) -> None:
    counting = CountingLog(log)
    index = DigestIndex(counting)  # type: ignore[arg-type]
    user = parse_event({"type": "user", "runId": "u", "content": "hello"})
    await log.append("c", [user])
    digest = await index.catch_up("c", 1)
    assert digest.title == "hello"
    assert await index.catch_up("c", 1) is digest
    assert counting.reads == [0]  # current: no read
    await log.append("c", [parse_event({"type": "error", "message": "boom"})])
    await index.catch_up("c", 2)
    assert counting.reads == [0, 1]
    assert digest.errors == 1
    # Deleted and written again elsewhere: its seqs restart below the digest's, so it folds anew.
    assert await log.delete("c")
    await log.append("c", [parse_event({"type": "user", "runId": "u", "content": "again"})])
    again = await index.catch_up("c", 1)
    assert (again.title, again.errors) == ("again", 0)
    index.forget("c")
    assert index.get("c") is None
