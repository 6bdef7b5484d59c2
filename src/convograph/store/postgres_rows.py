"""The Postgres event log's schema (`MIGRATIONS`) and the conversions of its rows
(`convograph.store.postgres`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import psycopg

from convograph.store.base import ConversationInfo
from convograph.store.messages import Message
from convograph.store.status import RunTally

__all__ = [
    "MESSAGE_COLUMNS",
    "MIGRATIONS",
    "conversation_info",
    "jsonb_dumps",
    "message_from_row",
    "missing_database_hint",
    "text_without_nul",
]

MIGRATIONS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE conversations (
        id text PRIMARY KEY,
        event_count bigint NOT NULL DEFAULT 0,
        last_seq bigint NOT NULL DEFAULT 0,
        last_activity double precision NOT NULL DEFAULT 0,
        open_runs text[] NOT NULL DEFAULT '{}',
        last_outcome text NOT NULL DEFAULT 'idle',
        active_leaf_id text,
        created_at double precision NOT NULL
    );
    CREATE INDEX conversations_by_activity ON conversations (last_activity DESC);
    CREATE TABLE events (
        conversation_id text NOT NULL,
        seq bigint NOT NULL,
        event_id text,
        type text NOT NULL,
        run_id text,
        received_at double precision NOT NULL,
        data bytea NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    );
    CREATE UNIQUE INDEX events_by_event_id ON events (conversation_id, event_id) WHERE event_id IS NOT NULL;
    CREATE INDEX events_by_run ON events (conversation_id, run_id, seq) WHERE run_id IS NOT NULL;
    CREATE TABLE messages (
        conversation_id text NOT NULL,
        id text NOT NULL,
        parent_message_id text,
        role text NOT NULL,
        run_id text,
        agent_id text,
        parts jsonb NOT NULL,
        text text NOT NULL,
        first_seq bigint NOT NULL,
        last_seq bigint NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (conversation_id, id)
    );
    CREATE INDEX messages_by_parent ON messages (conversation_id, parent_message_id);
    CREATE TABLE snapshots (
        conversation_id text NOT NULL,
        name text NOT NULL,
        seq bigint NOT NULL,
        data bytea NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (conversation_id, name)
    );
    """,
)
"""The schema, one script per version: applied in order under an advisory lock, recorded in
``convograph_schema``."""

MESSAGE_COLUMNS: Final = (
    "id, role, parent_message_id, run_id, agent_id, parts, text, first_seq, last_seq, created_at"
)


_NUL: Final = "\x00"
_REPLACEMENT: Final = "\ufffd"


def text_without_nul(text: str) -> str:
    """``text`` with NUL (which ``text`` columns reject) replaced by U+FFFD."""
    return text.replace(_NUL, _REPLACEMENT)


def _without_nul(value: Any) -> Any:
    """``value`` (JSON data) with NUL replaced by U+FFFD in every string and key."""
    if isinstance(value, str):
        return value.replace(_NUL, _REPLACEMENT)
    if isinstance(value, dict):
        return {key.replace(_NUL, _REPLACEMENT): _without_nul(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_without_nul(item) for item in value]
    return value


def jsonb_dumps(value: Any) -> str:
    """`json.dumps` (psycopg's default) for a ``jsonb`` value, NUL (which jsonb rejects) replaced by
    U+FFFD. One dump when there is none; the escape ``\\u0000`` found only sends it through
    `_without_nul` (a false positive, an escaped backslash before ``u0000``, changes nothing)."""
    text = json.dumps(value)
    if "\\u0000" in text:
        text = json.dumps(_without_nul(value))
    return text


def message_from_row(row: Sequence[Any]) -> Message:
    return Message(
        id=row[0],
        role=row[1],
        parent_message_id=row[2],
        run_id=row[3],
        agent_id=row[4],
        parts=row[5],
        text=row[6],
        first_seq=row[7],
        last_seq=row[8],
        created_at=row[9],
    )


def conversation_info(row: Sequence[Any]) -> ConversationInfo:
    return ConversationInfo(
        id=row[0],
        event_count=int(row[1]),
        last_seq=int(row[2]),
        last_activity=float(row[3]),
        status=RunTally(tuple(row[4]), row[5]).status,
    )


def missing_database_hint(conninfo: str, message: str) -> str:
    """How to create the database when ``message`` says it does not exist, else ``""``."""
    if "does not exist" not in message or 'database "' not in message:
        return ""
    params = psycopg.conninfo.conninfo_to_dict(conninfo)
    name = str(params.get("dbname", ""))
    where = " ".join(
        f"-{flag} {params[key]}"
        for flag, key in (("h", "host"), ("p", "port"), ("U", "user"))
        if key in params
    )
    return f". Create it first: createdb {where} {name}".replace("  ", " ")
