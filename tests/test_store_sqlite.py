"""SQLite specifics: torn WAL tail detection, schema version, group commit under concurrency."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest

from convograph.events import Text
from convograph.store.sqlite import SQLiteEventLog
from convograph.store.wal import inspect_wal


def texts(n: int, tag: str = "x") -> list[Text]:
    return [Text(run_id="r", id="t", content=f"{tag}{i}", event_id=f"{tag}{i}") for i in range(n)]


async def crashed_copy(tmp_path: Path, batches: int = 5) -> tuple[Path, int]:
    """A copy of a log's files taken while it is open: what a crash leaves behind."""
    live = tmp_path / "live.db"
    log = await SQLiteEventLog.open(live)
    for b in range(batches):
        await log.append("c", texts(100, f"b{b}-"))
    crashed = tmp_path / "crashed.db"
    shutil.copy(live, crashed)
    shutil.copy(f"{live}-wal", f"{crashed}-wal")
    await log.close()
    return crashed, batches * 100


async def test_clean_close_leaves_no_wal_and_no_report(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    log = await SQLiteEventLog.open(path)
    await log.append("c", texts(3))
    await log.close()
    assert inspect_wal(path) is None
    reopened = await SQLiteEventLog.open(path)
    assert reopened.recovery is None
    assert len(await reopened.read("c")) == 3
    await reopened.close()


async def test_crash_with_intact_wal_recovers_everything_without_a_torn_report(tmp_path: Path) -> None:
    crashed, count = await crashed_copy(tmp_path)
    report = inspect_wal(crashed)
    assert report is not None
    assert report.committed_frames > 0
    assert not report.torn
    log = await SQLiteEventLog.open(crashed)
    assert log.recovery is None
    assert [s.seq for s in await log.read("c")] == list(range(1, count + 1))
    await log.close()


@pytest.mark.parametrize("damage", ["partial_frame", "bad_checksum_frame"])
async def test_torn_tail_is_detected_reported_and_committed_events_survive(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    crashed, count = await crashed_copy(tmp_path)
    wal = Path(f"{crashed}-wal")
    raw = wal.read_bytes()
    page_size = struct.unpack(">I", raw[8:12])[0]
    salts = raw[16:24]
    if damage == "partial_frame":
        torn = struct.pack(">II", 2, 0) + salts + b"\x00" * 8 + b"\xab" * (page_size // 3)
    else:  # a whole frame of this WAL generation whose checksum does not match: a torn page write
        torn = struct.pack(">II", 2, 3) + salts + b"\x01" * 8 + b"\xcd" * page_size
    wal.write_bytes(raw + torn)
    log = await SQLiteEventLog.open(crashed)
    try:
        assert log.recovery is not None
        assert log.recovery.torn
        assert log.recovery.torn_bytes == len(torn)
        assert "torn WAL tail" in caplog.text
        assert [s.seq for s in await log.read("c")] == list(range(1, count + 1))
        result = await log.append("c", texts(1, "after"))
        assert result.first_seq == count + 1
    finally:
        await log.close()


async def test_schema_version_is_recorded(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    log = await SQLiteEventLog.open(path)
    await log.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(Exception, match="newer than this convograph"):
        await SQLiteEventLog.open(path)


async def test_group_commit_keeps_each_conversation_contiguous(tmp_path: Path) -> None:
    log = await SQLiteEventLog.open(tmp_path / "e.db")
    try:
        results = await asyncio.gather(*(log.append(f"c{i % 3}", texts(10, f"{i}-")) for i in range(60)))
        for conv in ("c0", "c1", "c2"):
            seqs = sorted(
                s
                for r in results
                for s in range(r.first_seq or 0, (r.last_seq or -1) + 1)
                if r.stored and r.stored[0].conversation_id == conv
            )
            assert seqs == list(range(1, 201))
            assert [s.seq for s in await log.read(conv)] == list(range(1, 201))
    finally:
        await log.close()


async def test_a_failing_request_fails_alone_in_its_group(tmp_path: Path) -> None:
    log = await SQLiteEventLog.open(tmp_path / "e.db")

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO events (conversation_id) VALUES ('x')")  # violates NOT NULL

    try:
        outcomes = await asyncio.gather(
            log.append("a", texts(5)), log._submit(broken), log.append("b", texts(5)), return_exceptions=True
        )
        assert not isinstance(outcomes[0], BaseException)
        assert isinstance(outcomes[1], BaseException)
        assert "sqlite" in str(outcomes[1])
        assert not isinstance(outcomes[2], BaseException)
        assert len(await log.read("a")) == 5
        assert len(await log.read("b")) == 5
    finally:
        await log.close()
