"""open_event_log: URL schemes, options, environment variables and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from convograph.store import DATABASE_URL_ENV, MemoryEventLog, default_url, open_event_log
from convograph.store.sqlite import SQLiteEventLog
from convograph.store.url import check_event_log_url


async def test_memory_and_sqlite_urls(tmp_path: Path) -> None:
    assert isinstance(await open_event_log("memory://"), MemoryEventLog)
    log = await open_event_log(f"sqlite:///{tmp_path / 'sub' / 'e.db'}?synchronous=normal")
    assert isinstance(log, SQLiteEventLog)
    assert log.synchronous == "NORMAL"
    assert (tmp_path / "sub" / "e.db").exists()
    await log.close()


async def test_environment_variable_and_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    assert default_url(tmp_path) == f"sqlite:///{tmp_path.resolve() / 'events.db'}"
    log = await open_event_log(data_dir=tmp_path)
    assert isinstance(log, SQLiteEventLog)
    await log.close()
    monkeypatch.setenv(DATABASE_URL_ENV, "memory://")
    assert isinstance(await open_event_log(), MemoryEventLog)


BAD_URLS = [
    ("mysql://x", "unsupported event log URL scheme 'mysql'"),
    ("memory://?bogus=1", "unknown memory event log URL option"),
    ("sqlite:///x.db?synchronous=sometimes", "synchronous must be"),
    ("sqlite:///x.db?typo=1", "unknown sqlite event log URL option"),
    ("sqlite://", "sqlite URL needs a path"),
    ("redis://127.0.0.1:1/0?maxlen=many", "maxlen='many' is not a valid int"),
    ("redis://127.0.0.1:1/0?finalize=sqlite:///x.db", "finalize= must be a postgresql"),
    ("redis://127.0.0.1:1/0?nope=1", "unknown redis event log URL option"),
    ("sqlite:///x.db?spool=/tmp/s.db", "spool= only applies"),
    ("redis+cluster://", "needs at least one host:port"),
    ("redis+cluster://h:port", "'h:port' is not host:port"),
    ("redis+cluster://h:1,h:99999", "'h:99999' is not host:port"),
    ("redis+cluster://h:1/2", "a Redis Cluster has only database 0"),
    ("redis+cluster://h:1?prefix=a{b}", "prefix must not contain"),
    ("redis+cluster://h:1?maxlen=x", "maxlen='x' is not a valid int"),
    ("redis+cluster://h:1?nope=1", "unknown redis event log URL option"),
]


@pytest.mark.parametrize(("url", "message"), BAD_URLS)
async def test_bad_urls_name_the_problem(
    url: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("?", r"\?")):
        await open_event_log(url)


@pytest.mark.parametrize(("url", "message"), BAD_URLS)
def test_check_event_log_url_refuses_what_open_refuses_without_connecting(url: str, message: str) -> None:
    """`convograph serve` checks its --database-url up front with this (a bad one used to fail
    inside the server's startup, as a traceback)."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("?", r"\?")):
        check_event_log_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "memory://",
        "sqlite:///x.db?synchronous=normal",
        "postgresql://u@h/db?pool_max=3",
        "redis://h:1/0?maxlen=5",
        "redis+cluster://h:1,h:2?maxlen=5&prefix=p",
        "rediss+cluster://u:p@[::1]:7000/0",
    ],
)
def test_check_event_log_url_accepts_good_urls(url: str) -> None:
    check_event_log_url(url)
