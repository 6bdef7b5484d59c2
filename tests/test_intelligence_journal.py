from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convograph.intelligence.envelope import parse_envelope
from convograph.intelligence.journal import Journal, MemoryJournal, SqliteJournal
from convograph.intelligence.journal_pg import PostgresJournal


def env(ms: int, *, key: str | None = None, session: str = "S", ws: str = "W", **data: Any):  # type: ignore[no-untyped-def]
    body: dict[str, Any] = {
        "event": "tool:pre",
        "workspace": ws,
        "data": {"session_id": session, "timestamp": f"2026-01-01T00:00:00.{ms:03d}+00:00", **data},
    }
    if key is not None:
        body["idempotency_key"] = key
    return parse_envelope(body)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Journal]]:
    if request.param == "memory":
        journal = MemoryJournal()
        yield lambda: journal
        return
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        opened: list[PostgresJournal] = []

        def make() -> Journal:
            opened.append(PostgresJournal(url))
            return opened[-1]

        yield make
        for pg in opened:
            pg.close()
        return
    yield lambda: SqliteJournal(tmp_path / "j.sqlite3")


def test_append_assigns_increasing_seqs_and_reads_in_order(make_journal: Callable[[], Journal]) -> None:
    journal = make_journal()
    results = journal.append([env(1), env(2), env(3)])
    assert [r.status for r in results] == ["queued"] * 3
    seqs = [r.seq for r in results]
    assert seqs == sorted(seqs)
    records = journal.read_after(0, 10)
    assert [r.seq for r in records] == seqs
    assert journal.read_after(seqs[0], 1)[0].seq == seqs[1]
    assert journal.last_seq() == seqs[-1]


def test_duplicates_by_key_and_by_content(make_journal: Callable[[], Journal]) -> None:
    journal = make_journal()
    assert journal.append([env(1, key="k1")])[0].status == "queued"
    assert journal.append([env(2, key="k1")])[0].status == "duplicate"  # same key, other content
    assert journal.append([env(1, key="k2")])[0].status == "duplicate"  # same content, other key
    assert journal.append([env(1, ws="other", key="k1")])[0].status == "queued"  # keys are per workspace
    assert journal.append([env(3), env(3)])[1].status == "duplicate"  # within one batch


def test_sqlite_dedupe_and_data_survive_restart(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    first = SqliteJournal(path)
    first.append([env(1, key="k1", extra={"a": [1, 2]})])
    journal_id = first.journal_id
    first.close()
    again = SqliteJournal(path)
    assert again.journal_id == journal_id
    assert again.append([env(1, key="k1", extra={"a": [1, 2]})])[0].status == "duplicate"
    (record,) = again.read_after(0, 10)
    assert b'"extra":{"a":[1,2]}' in record.data
    again.close()


def test_collision_groups_cover_same_millisecond_distinct_events(make_journal: Callable[[], Journal]) -> None:
    journal = make_journal()
    a, b, c = env(5, note="a"), env(5, note="b"), env(6)
    journal.append([a, c])
    assert journal.collision_groups("W", [(a.base_id, a.epoch_ms), (c.base_id, c.epoch_ms)]) == {}
    journal.append([b])
    groups = journal.collision_groups("W", [(a.base_id, a.epoch_ms)])
    assert groups == {a.base_id: sorted([a.fingerprint, b.fingerprint])}
    assert journal.collision_groups("other", [(a.base_id, a.epoch_ms)]) == {}


def test_base_keys_follow_time_and_equal_keys_of_other_ids_are_told_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from convograph.intelligence import journal_sqlite
    from convograph.intelligence.journal import event_base_key

    keys = [event_base_key("W", f"S__e__{ms}", ms) for ms in (-(2**60), -5, 0, 5, 6, 2**60)]
    assert keys == sorted(keys)  # millisecond first (clamped far out), so appends follow time
    assert all(-(2**63) <= key < 2**63 for key in keys)  # a SQLite integer
    # every base id on one key: the groups still come from the exact workspace and base id
    monkeypatch.setattr(journal_sqlite, "event_base_key", lambda workspace, base_id, epoch_ms: 7)
    journal = SqliteJournal(tmp_path / "j.sqlite3")
    a, b, c, d = env(5, note="a"), env(5, note="b"), env(6), env(6, ws="X")
    journal.append([a, b, c, d])
    assert journal.collision_groups("W", [(a.base_id, a.epoch_ms), (c.base_id, c.epoch_ms)]) == {
        a.base_id: sorted([a.fingerprint, b.fingerprint])
    }
    assert journal.collision_groups("X", [(d.base_id, d.epoch_ms)]) == {}
    assert [r.status for r in journal.append([env(6), env(5, note="b"), env(7)])] == [
        "duplicate",
        "duplicate",
        "queued",
    ]
    journal.close()


def test_dead_letters_list_replay_purge(make_journal: Callable[[], Journal]) -> None:
    journal = make_journal()
    results = journal.append([env(1, session="S1"), env(2, session="S1"), env(3, session="S2", ws="V")])
    s1a, s1b, s2 = (r.seq for r in results)
    assert s1a is not None
    assert s1b is not None
    assert s2 is not None
    journal.dead_letter(s1a, "boom 1")
    journal.dead_letter(s1b, "boom 2")
    journal.dead_letter(s2, "boom 3")
    groups = {g.key: g for g in journal.dead_letters()}
    assert groups["S1"].item_count == 2
    assert groups["S1"].last_error == "boom 2"
    assert [g.key for g in journal.dead_letters(frozenset({"V"}))] == ["S2"]
    assert journal.replay_dead("S2", frozenset({"W"})) == 0  # not visible to that key
    head = journal.last_seq()
    assert journal.replay_dead("S1") == 2
    moved = journal.read_after(head, 10)
    assert [r.session_id for r in moved] == ["S1", "S1"]
    assert [r.epoch_ms % 1000 for r in moved] == [1, 2]  # original order kept
    assert journal.purge_dead("S2") == 1
    assert journal.dead_letters() == []
    assert journal.append([env(3, session="S2", ws="V")])[0].status == "duplicate"  # still known


def test_the_in_memory_tail_serves_exactly_what_sqlite_holds(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    journal = SqliteJournal(path, tail_records=7)  # small: most reads mix tail, eviction and SQLite
    plain = SqliteJournal(path, tail_records=0)  # same file, SQLite reads only
    journal.append([env(i) for i in range(5)], created_by="alice")
    journal.append([env(1), env(5), env(6)])  # a duplicate in the batch: seqs read back
    journal.append([env(i) for i in range(7, 19)])
    seqs = [r.seq for r in plain.read_after(0, 100)]
    assert len(seqs) == 19
    for after in [0, *seqs]:
        for limit in (1, 3, 7, 100):
            assert journal.read_after(after, limit) == plain.read_after(after, limit)
    # a dead letter replayed moves its row to a new seq: the tail must not name the old one
    journal.dead_letter(seqs[-2], "boom")
    assert journal.replay_dead("S") == 1
    journal.append([env(i) for i in range(19, 23)])
    for after in [0, *seqs[-6:]]:
        assert journal.read_after(after, 100) == plain.read_after(after, 100)
    journal.close()
    plain.close()


# What schema 5 changed, undone: the session index on (workspace, session_id, seq), the
# idempotency digests unique alone (and in tombstones), no session_key column.
_AS_SCHEMA_4 = (
    "DROP INDEX events_session_keys;"
    "ALTER TABLE events DROP COLUMN session_key;"
    "CREATE INDEX events_session ON events (workspace, session_id, seq);"
    "CREATE UNIQUE INDEX events_idem_key ON events (idem_key) WHERE idem_key IS NOT NULL;"
    "DROP INDEX tombstones_idem;"
    "CREATE UNIQUE INDEX tombstones_idem_key ON tombstones (idem_key) WHERE idem_key IS NOT NULL;"
    "UPDATE meta SET v = '4' WHERE k = 'schema';"
)


def test_a_schema_4_journal_is_migrated_and_finds_sessions_through_their_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import sqlite3

    from convograph.intelligence.journal_base import session_index_key

    path = tmp_path / "j.sqlite3"
    journal = SqliteJournal(path)
    journal.append([env(1, key="k1", session="A"), env(2, key="k2", session="B"), env(3, session="A")])
    journal.append([env(4, session="A", ws="W2")])  # the same session id in another workspace
    journal.close()
    with sqlite3.connect(path, isolation_level=None) as db:
        db.executescript(_AS_SCHEMA_4)
        before = db.execute("SELECT * FROM events ORDER BY seq").fetchall()
    db.close()
    with caplog.at_level(logging.INFO, logger="convograph.intelligence.journal"):
        again = SqliteJournal(path)
    assert "from journal schema 4 to 6" in caplog.text  # a slow start (every row rewritten) says why
    assert again._write.execute("SELECT v FROM meta WHERE k = 'schema'").fetchone()[0] == "6"
    indexes = {row[0] for row in again._write.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"events_session_keys", "events_base_content", "tombstones_idem"} <= indexes
    assert not {"events_session", "events_idem_key", "tombstones_idem_key", "events_session_key"} & indexes
    rows = again._write.execute("SELECT * FROM events ORDER BY seq").fetchall()
    assert [row[:-1] for row in rows] == before  # the records themselves are untouched
    assert [row[-1] for row in rows] == [session_index_key(row[1], row[2]) for row in rows]
    # by key (other content, same session), by content; new ones go in
    statuses = [
        r.status for r in again.append([env(7, key="k2", session="B"), env(3, session="A"), env(8, key="k3")])
    ]
    assert statuses == ["duplicate", "duplicate", "queued"]
    assert again.session_count("W", "A") == 2
    assert [r.epoch_ms % 10 for r in again.read_session("W", "A", 10**9)] == [1, 3]
    assert again.forget_session("W", "A") == 2
    assert again.session_count("W2", "A") == 1
    plan = " ".join(
        str(row)
        for row in again._read.execute(
            "EXPLAIN QUERY PLAN SELECT seq FROM events WHERE session_key = ? AND workspace = ?"
            " AND session_id = ? ORDER BY seq",
            (session_index_key("W", "A"), "W", "A"),
        )
    )
    assert "events_session_keys" in plan  # (seq order by a sort of the session's rows)
    again.close()


def test_an_idempotency_key_is_one_per_session_and_a_forgotten_one_stays_refused(
    make_journal: Callable[[], Journal],
) -> None:
    journal = make_journal()
    first = journal.append(
        [env(1, key="k", session="A"), env(2, key="k", session="A"), env(3, key="k", session="B")]
    )
    assert [r.status for r in first] == ["queued", "duplicate", "queued"]  # one per session
    assert [r.status for r in journal.append([env(4, key="k", session="B")])] == ["duplicate"]
    assert journal.forget_session("W", "A") == 1
    assert journal.forget_session("W", "B") == 1  # two tombstones of one key: both contents kept
    again = journal.append(
        [env(1, key="other", session="A"), env(3, key="other", session="B"), env(5, key="k", session="C")]
    )
    assert [r.status for r in again] == ["duplicate", "duplicate", "duplicate"]
    assert [r.status for r in journal.append([env(5, key="k", session="C", ws="W2")])] == ["queued"]


def test_sessions_whose_keys_collide_stay_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from convograph.intelligence import journal_sqlite

    monkeypatch.setattr(journal_sqlite, "session_index_key", lambda workspace, session_id: 7)
    journal = SqliteJournal(tmp_path / "j.sqlite3")
    journal.append(
        [env(1, session="A"), env(2, session="B"), env(3, session="A", ws="W2"), env(4, session="A")]
    )
    assert journal.session_count("W", "A") == 2
    assert [r.epoch_ms % 10 for r in journal.read_session("W", "A", 10**9)] == [1, 4]
    assert journal.forget_session("W", "A") == 2
    assert [(r.workspace, r.session_id) for r in journal.read_after(0, 10)] == [("W", "B"), ("W2", "A")]
    journal.close()


def test_a_schema_5_journal_gets_one_session_index_and_keeps_deduplicating(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "j.sqlite3"
    journal = SqliteJournal(path)
    journal.append([env(1, key="k1", session="A"), env(2, session="A"), env(3, key="k3", session="B")])
    journal.close()
    with sqlite3.connect(path, isolation_level=None) as db:  # schema 5's two session indexes
        db.executescript(
            "DROP INDEX events_session_keys;"
            "CREATE UNIQUE INDEX events_session_idem ON events (session_key, idem_key) WHERE idem_key IS NOT NULL;"
            "CREATE INDEX events_session_key ON events (session_key);"
            "UPDATE meta SET v = '5' WHERE k = 'schema';"
        )
    db.close()
    again = SqliteJournal(path)
    assert again._write.execute("SELECT v FROM meta WHERE k = 'schema'").fetchone()[0] == "6"
    indexes = {row[0] for row in again._write.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "events_session_keys" in indexes
    assert not {"events_session_idem", "events_session_key"} & indexes
    statuses = [
        r.status
        for r in again.append([env(9, key="k1", session="A"), env(2, session="A"), env(4, session="A")])
    ]
    assert statuses == ["duplicate", "duplicate", "queued"]  # by key, by content; keyless rows never conflict
    assert [r.epoch_ms % 10 for r in again.read_session("W", "A", 10**9)] == [1, 2, 4]
    assert again.forget_session("W", "A") == 3
    assert again.session_count("W", "B") == 1
    again.close()


def test_a_schema_2_journal_is_migrated_and_keeps_deduplicating(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "j.sqlite3"
    journal = SqliteJournal(path)
    journal.append([env(1, key="k1"), env(2)])
    journal.close()
    with sqlite3.connect(path, isolation_level=None) as db:  # make it look like schema 2
        db.executescript(
            _AS_SCHEMA_4 + "DROP INDEX events_base_content;"
            "CREATE UNIQUE INDEX events_content_key ON events (content_key);"
            "CREATE INDEX events_base_key ON events (base_key);"
            "UPDATE meta SET v = '2' WHERE k = 'schema';"
        )
    db.close()
    again = SqliteJournal(path)
    indexes = {row[0] for row in again._write.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "events_base_content" in indexes
    assert "events_content_key" not in indexes
    assert again._write.execute("SELECT v FROM meta WHERE k = 'schema'").fetchone()[0] == "6"
    assert [r.status for r in again.append([env(1), env(3, key="k1"), env(2), env(4)])] == [
        "duplicate",
        "duplicate",
        "duplicate",
        "queued",
    ]
    plan = " ".join(
        str(row)
        for row in again._read.execute(
            "EXPLAIN QUERY PLAN SELECT base_key FROM events WHERE base_key IN (1, 2) GROUP BY base_key"
        )
    )
    assert "events_base_content" in plan
    again.close()


def _schema_3_base_key(workspace: str, base_id: str) -> int:
    """Schema 3's base-id key: a random 64-bit BLAKE2b hash (no time order)."""
    import hashlib

    digest = hashlib.blake2b(f"{workspace}\x00{base_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def test_a_schema_3_journal_is_rekeyed_and_keeps_deduplicating_and_grouping(tmp_path: Path) -> None:
    import sqlite3

    from convograph.intelligence.journal import event_base_key

    path = tmp_path / "j.sqlite3"
    a, b = env(5, key="k1", note="a"), env(5, note="b")  # one base id: a collision group
    others = [env(i, session=f"S{i % 3}", ws="W" if i % 2 else "X") for i in range(10, 40)]
    journal = SqliteJournal(path)
    journal.append([a, *others])
    journal.forget_session("X", "S1")  # tombstones survive the migration
    journal.close()
    with sqlite3.connect(path, isolation_level=None) as db:  # what schema 3 wrote
        db.create_function("old_key", 2, _schema_3_base_key)
        db.executescript(
            _AS_SCHEMA_4 + "DROP INDEX events_base_content;"
            "UPDATE events SET base_key = old_key(workspace, base_id);"
            "CREATE UNIQUE INDEX events_base_content ON events (base_key, content_key);"
            "UPDATE meta SET v = '3' WHERE k = 'schema';"
        )
        before = db.execute("SELECT seq, workspace, base_id, data FROM events ORDER BY seq").fetchall()
        assert before
    db.close()
    again = SqliteJournal(path)
    assert again._write.execute("SELECT v FROM meta WHERE k = 'schema'").fetchone()[0] == "6"
    rows = again._write.execute(
        "SELECT seq, workspace, base_id, data, base_key, epoch_ms FROM events ORDER BY seq"
    )
    rekeyed = rows.fetchall()
    assert [row[:4] for row in rekeyed] == before  # the records themselves are untouched
    assert all(key == event_base_key(ws, base_id, ms) for _, ws, base_id, _, key, ms in rekeyed)
    # duplicates by content and by key, forgotten ones included, stay duplicates; new ones go in
    forgotten = next(e for e in others if e.workspace == "X" and e.session_id == "S1")
    statuses = [r.status for r in again.append([a, env(6, key="k1"), others[3], forgotten, b])]
    assert statuses == ["duplicate", "duplicate", "duplicate", "duplicate", "queued"]
    assert again.collision_groups("W", [(a.base_id, a.epoch_ms)]) == {
        a.base_id: sorted([a.fingerprint, b.fingerprint])
    }
    again.close()


def test_a_new_journal_uses_larger_pages_and_an_existing_one_keeps_its_own(tmp_path: Path) -> None:
    import sqlite3

    fresh = SqliteJournal(tmp_path / "new.sqlite3")
    assert fresh._write.execute("PRAGMA page_size").fetchone()[0] == 8192
    fresh.close()
    old = tmp_path / "old.sqlite3"
    with sqlite3.connect(old) as db:
        db.execute("CREATE TABLE t (x)")  # a file written with SQLite's default page size
    db.close()
    reopened = SqliteJournal(old)
    assert reopened._write.execute("PRAGMA page_size").fetchone()[0] == 4096
    assert reopened.append([env(1)])[0].status == "queued"
    reopened.close()


def test_forgetting_a_session_deletes_its_records_and_tombstones_its_keys(
    make_journal: Callable[[], Journal],
) -> None:
    journal = make_journal()
    journal.append([env(1, key="a1", session="A"), env(2, key="b1", session="B"), env(3, session="A")])
    journal.append([env(4, session="A", ws="W2")])  # the same session id in another workspace
    (dead,) = [r.seq for r in journal.read_after(0, 10) if r.session_id == "A" and r.epoch_ms % 10 == 3]
    journal.dead_letter(dead, "boom")
    assert journal.session_count("W", "A") == 2
    assert journal.forget_session("W", "A") == 2
    assert journal.session_count("W", "A") == 0
    assert journal.forget_session("W", "A") == 0
    left = journal.read_after(0, 10)
    assert [(r.workspace, r.session_id) for r in left] == [("W", "B"), ("W2", "A")]
    assert journal.dead_letters() == []
    # a redelivered copy is a duplicate (by content, and by key with other content) ...
    assert journal.append([env(1, key="a1", session="A")])[0].status == "duplicate"
    assert journal.append([env(9, key="a1", session="A")])[0].status == "duplicate"
    assert journal.append([env(3, session="A")])[0].status == "duplicate"
    # ... mixed into a batch, the others still go in, in order
    mixed = journal.append([env(5, session="A"), env(3, session="A"), env(6, session="C")])
    assert [r.status for r in mixed] == ["queued", "duplicate", "queued"]
    assert mixed[0].seq is not None
    assert mixed[2].seq is not None
    assert mixed[0].seq < mixed[2].seq
    assert [r.epoch_ms % 10 for r in journal.read_after(left[-1].seq, 10)] == [5, 6]
    # new events of the forgotten session id are new data
    assert journal.session_count("W", "A") == 1


def test_read_workspace_pages_live_records_of_one_workspace(make_journal: Callable[[], Journal]) -> None:
    journal = make_journal()
    journal.append([env(i, session=f"S{i % 2}", ws="W" if i % 3 else "X") for i in range(1, 10)])
    everything = journal.read_after(0, 100)
    ws_seqs = [r.seq for r in everything if r.workspace == "W"]
    journal.dead_letter(ws_seqs[1], "boom")
    live = [s for s in ws_seqs if s != ws_seqs[1]]
    upto = ws_seqs[-2]
    pages, position = [], 0
    while page := journal.read_workspace("W", position, upto, 2):
        assert len(page) <= 2
        pages.extend(r.seq for r in page)
        position = page[-1].seq
    assert pages == [s for s in live if s <= upto]


def test_sqlite_tombstones_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    first = SqliteJournal(path)
    first.append([env(1, key="k", session="A")])
    assert first.forget_session("W", "A") == 1
    first.close()
    again = SqliteJournal(path)
    assert again.append([env(1, key="k", session="A")])[0].status == "duplicate"
    assert again.read_after(0, 10) == []
    again.close()


def test_forgetting_without_tombstones_lets_the_same_events_in_again(
    make_journal: Callable[[], Journal],
) -> None:
    journal = make_journal()
    journal.append([env(1, key="k1", session="A"), env(2, session="A")])
    assert journal.forget_session("W", "A", tombstone=False) == 2
    again = journal.append([env(1, key="k1", session="A"), env(2, session="A")])
    assert [r.status for r in again] == ["queued", "queued"]
    assert journal.append([env(1, key="k1", session="A")])[0].status == "duplicate"


def test_idle_sessions_and_the_idle_check_inside_forget(
    make_journal: Callable[[], Journal], monkeypatch: pytest.MonkeyPatch
) -> None:
    from convograph.intelligence import journal_base as journal_module

    journal = make_journal()
    clock = {"now": 1_000_000}
    monkeypatch.setattr(journal_module, "now_ms", lambda: clock["now"])
    journal.append([env(1, session="old"), env(2, session="both"), env(3, session="old", ws="W2")])
    clock["now"] = 2_000_000
    journal.append([env(4, session="new"), env(5, session="both")])
    assert journal.idle_sessions(1_500_000) == [("W", "old"), ("W2", "old")]
    assert journal.idle_sessions(1_500_000, "W2") == [("W2", "old")]
    assert journal.idle_sessions(2_000_001) == [("W", "both"), ("W", "new"), ("W", "old"), ("W2", "old")]
    assert journal.forget_session("W", "both", idle_before_ms=1_500_000) == 0  # active again: kept
    assert journal.session_count("W", "both") == 2
    assert journal.forget_session("W", "old", idle_before_ms=1_500_000) == 1
    assert journal.idle_sessions(1_500_000) == [("W2", "old")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 4), st.sampled_from("ab"), st.sampled_from(["W", "X"]), st.sampled_from("ST")
        ),
        max_size=25,
    ),
    st.integers(1, 6),
)
def test_collision_groups_are_every_shared_base_id(
    tmp_path_factory: pytest.TempPathFactory, picks: list[tuple[int, str, str, str]], batch: int
) -> None:
    """Over random appends in random batch sizes, the groups the SQLite journal and the in-memory
    one report are exactly the base ids of the workspace that two distinct appended events share."""
    envelopes = [env(ms, session=session, ws=ws, note=note) for ms, note, ws, session in picks]
    sqlite_journal = SqliteJournal(tmp_path_factory.mktemp("j") / "j.sqlite3")
    memory_journal = MemoryJournal()
    for start in range(0, len(envelopes), batch):
        sqlite_journal.append(envelopes[start : start + batch])
        memory_journal.append(envelopes[start : start + batch])
    asked = [(e.base_id, e.epoch_ms) for e in envelopes]
    for workspace in ("W", "X"):
        shared: dict[str, set[str]] = {}
        for envelope in envelopes:
            if envelope.workspace == workspace:
                shared.setdefault(envelope.base_id, set()).add(envelope.fingerprint)
        expected = {base_id: sorted(fps) for base_id, fps in shared.items() if len(fps) > 1}
        assert sqlite_journal.collision_groups(workspace, asked) == expected
        assert memory_journal.collision_groups(workspace, asked) == expected
    sqlite_journal.close()
