"""Postgres specifics: migrations, messages with branches (recursive CTE), LISTEN/NOTIFY tail."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from convograph.events import HarnessEnd, HarnessStart, Text, User
from convograph.store.postgres import PostgresEventLog
from convograph.testing import collect, sample_run


async def test_migrations_are_versioned_and_idempotent(postgres_url: str) -> None:
    first = await PostgresEventLog.open(postgres_url)
    second = await PostgresEventLog.open(postgres_url)  # re-running applies nothing
    try:
        assert await first.schema_version() == 1
        assert await second.schema_version() == 1
    finally:
        await first.close()
        await second.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO convograph_schema (version) VALUES (99)")
    with pytest.raises(RuntimeError, match="newer than this convograph"):
        await PostgresEventLog.open(postgres_url)


def turn(run_id: str, text: str, *, user_id: str, parent: str | None = None) -> list:
    return [
        User(run_id=f"{run_id}-u", id=user_id, content=f"ask {text}", parent_id=parent),
        HarnessStart(run_id=run_id),
        Text(run_id=run_id, id=f"{run_id}:t", content=text),
        HarnessEnd(run_id=run_id),
    ]


async def test_messages_form_a_tree_with_an_active_leaf(postgres_url: str) -> None:
    log = await PostgresEventLog.open(postgres_url)
    try:
        await log.append("c", turn("r1", "one", user_id="u1"))
        await log.append("c", turn("r2", "two", user_id="u2"))
        path = await log.message_path("c")
        assert [(m.id, m.role, m.parent_message_id) for m in path] == [
            ("u1", "user", None),
            ("r1", "assistant", "u1"),
            ("u2", "user", "r1"),
            ("r2", "assistant", "u2"),
        ]
        assert path[-1].text == "two"
        # Edit the second question: a sibling of u2 under r1, answered by r3.
        await log.append("c", turn("r3", "three", user_id="u2-edit", parent="r1"))
        assert [m.id for m in await log.message_path("c")] == ["u1", "r1", "u2-edit", "r3"]
        assert [m.id for m in await log.message_children("c", "r1")] == ["u2", "u2-edit"]
        assert [m.id for m in await log.message_children("c", None)] == ["u1"]
        # Switch back to the first branch.
        await log.set_active_leaf("c", "r2")
        assert [m.id for m in await log.message_path("c")] == ["u1", "r1", "u2", "r2"]
        assert [m.id for m in await log.message_path("c", "r3")] == ["u1", "r1", "u2-edit", "r3"]
        with pytest.raises(KeyError, match="no message 'nope'"):
            await log.set_active_leaf("c", "nope")
        assert len(await log.list_messages("c")) == 6
    finally:
        await log.close()


async def test_subagent_runs_are_not_messages(postgres_url: str) -> None:
    log = await PostgresEventLog.open(postgres_url)
    try:
        await log.append(
            "c",
            [
                User(run_id="u", content="go"),
                HarnessStart(run_id="root"),
                HarnessStart(run_id="child", parent_id="root:call", depth=1),
                Text(run_id="child", id="child:t", content="sub"),
                HarnessEnd(run_id="child"),
                HarnessEnd(run_id="root"),
            ],
        )
        assert [m.id for m in await log.message_path("c")] == ["u:user", "root"]
    finally:
        await log.close()


async def test_live_tail_crosses_processes_via_listen_notify(postgres_url: str) -> None:
    reader = await PostgresEventLog.open(postgres_url)
    writer = await PostgresEventLog.open(postgres_url)  # another "process": no shared in-memory signal
    try:
        stream = reader.subscribe("c")
        task = asyncio.create_task(collect(stream, 14, timeout=20))
        await asyncio.sleep(0.2)
        for r in range(2):
            await writer.append("c", sample_run(f"run-{r}"))
        got = await task
        assert [s.seq for s in got] == list(range(1, 15))
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await reader.close()
        await writer.close()
