"""The SQLite journal's schema (`convograph.intelligence.journal_sqlite`) and the migrations
that bring an older journal file to `SCHEMA_VERSION`."""

from __future__ import annotations

__all__ = ["INDEXES", "MIGRATIONS", "SCHEMA", "SCHEMA_VERSION"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace TEXT NOT NULL,
    session_id TEXT NOT NULL,
    event TEXT NOT NULL,
    epoch_ms INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    base_id TEXT NOT NULL,
    created_by TEXT,
    received_ms INTEGER NOT NULL,
    data BLOB NOT NULL,
    content_key BLOB NOT NULL,
    idem_key BLOB,
    base_key INTEGER NOT NULL,
    session_key INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS dead_letters (
    seq INTEGER PRIMARY KEY, error TEXT NOT NULL, ts REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tombstones (content_key BLOB PRIMARY KEY, idem_key BLOB) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tombstones_idem ON tombstones (idem_key) WHERE idem_key IS NOT NULL;
"""
# One unique index on (base_key, content_key) does the work of a unique index on content_key
# and a plain one on base_key: the base id is a function of the content (session id, event
# name, timestamp, tool_call_id all come from {event, data}), so equal (workspace, content)
# implies equal base_key, and collision groups are read by its base_key prefix. One B-tree
# less per append (measured ~1.5 us of SQLite CPU per event).
# base_key starts with the event's millisecond (`journal_base.event_base_key`), so this index grows at its end
# like the table: a random 64-bit hash put every append on a random leaf page, and each commit
# wrote every page it touched to the WAL (schema 4).
# A session's rows are found through a 64-bit key of (workspace, session_id) (`session_index_key`;
# queries compare the exact columns too): a ~20-byte index entry instead of both texts and the
# seq (schema 5; the rowid the entry carries gives seq order).
# Idempotency digests are unique per session and indexed after the session key, so a batch's
# digests land on its sessions' few pages of the index instead of one random page each (schema
# 5; schema 4's index on the digest alone wrote about one page per event to the WAL once the log
# held a few hundred thousand events). Tombstones keep the digest alone: a forgotten key stays
# refused in every session of its workspace.
# Schema 6: one index on (session_key, idem_key) for every row does both jobs (schema 5 had a
# partial unique one and a plain one on session_key): SQLite's unique indexes hold any number of
# NULLs, so a row without a key conflicts with none, and a session's rows are its key prefix
# (read in seq order with a sort, O(k log k) per session read). One B-tree less per append:
# ci-large appended alone, 8.9-9.2 -> 7.9-8.1 us of CPU per event.
INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS events_base_content ON events (base_key, content_key);
CREATE UNIQUE INDEX IF NOT EXISTS events_session_keys ON events (session_key, idem_key);
"""
SCHEMA_VERSION = "6"
_REKEY = (
    "DROP INDEX IF EXISTS events_base_content;"
    " UPDATE events SET base_key = convograph_base_key(workspace, base_id, epoch_ms);"
)
_TO_5 = (
    " ALTER TABLE events ADD COLUMN session_key INTEGER NOT NULL DEFAULT 0;"
    " UPDATE events SET session_key = convograph_session_key(workspace, session_id);"
    " DROP INDEX IF EXISTS events_session; DROP INDEX IF EXISTS events_idem_key;"
    " DROP INDEX IF EXISTS tombstones_idem_key;"  # unique: two sessions may now share a key
)
_TO_6 = " DROP INDEX IF EXISTS events_session_idem; DROP INDEX IF EXISTS events_session_key;"
MIGRATIONS = {
    "2": "DROP INDEX IF EXISTS events_content_key; DROP INDEX IF EXISTS events_base_key;"
    + _REKEY
    + _TO_5
    + _TO_6,
    "3": _REKEY
    + _TO_5
    + _TO_6,  # schema 3 keyed base ids by a random 64-bit hash (`journal_base.event_base_key`)
    "4": _TO_5 + _TO_6,  # schema 4 indexed sessions on (workspace, session_id, seq), digests alone
    "5": _TO_6,  # schema 5 had a partial unique (session_key, idem_key) index and one on session_key
}
"""Older schema version -> SQL that, followed by `INDEXES`, makes it the current one (with
``convograph_base_key`` / ``convograph_session_key`` registered as `event_base_key` /
`session_index_key`)."""
