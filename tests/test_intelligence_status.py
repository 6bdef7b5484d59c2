"""``GET /status`` in the Amplifier context-intelligence server's shape (issue 26 item 7; it
answered 404 before), on the real application with API keys and with none."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from convograph import __version__
from convograph.server.app import create_app
from convograph.server.auth import add_key_to_file
from convograph.server.config import ServerConfig

UPSTREAM_KEYS = {
    "status",
    "uptime_seconds",
    "active_sessions",
    "sessions",
    "recent_events",
    "completed_sessions",
    "error_count_last_hour",
    "server_version",
    "orphaned_sessions",
    "neo4j_connected",
    "neo4j_query_connected",
    "neo4j_url",
    "neo4j_browser_url",
    "metrics",
    "auth",
}
SESSION_KEYS = {
    "session_id",
    "workspace",
    "last_event",
    "last_event_time",
    "events_processed",
    "orphaned",
    "last_successful_flush",
}
METRIC_KEYS = {
    "accepted_total",
    "written_total",
    "replayed_total",
    "write_retries_total",
    "in_queue_total",
    "dead_letter_total",
    "residual",
    "degraded",
}


def envelope(event: str, workspace: str, session: str, second: int) -> dict[str, Any]:
    return {
        "event": event,
        "workspace": workspace,
        "data": {"session_id": session, "timestamp": f"2026-03-01T00:00:{second:02d}Z"},
    }


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[tuple[TestClient[Litestar], dict[str, str]]]:
    file = tmp_path / "keys.json"
    keys = {
        "writer": add_key_to_file(file, key_id="writer", scopes=["write"]),
        "acme": add_key_to_file(file, key_id="acme-reader", scopes=["read"], workspaces=["acme"]),
        "admin": add_key_to_file(file, key_id="admin", scopes=["admin"]),
    }
    config = ServerConfig(data_dir=tmp_path / "data", database_url="memory://", api_key_file=file)
    with TestClient(create_app(config), timeout=60) as client:
        yield client, keys


def ingest(client: TestClient[Litestar], key: str | None, reader: str | None = None) -> None:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    read_headers = {"authorization": f"Bearer {reader}"} if reader else {}
    batch = [
        envelope("session:start", "acme", "a1", 1),
        envelope("prompt:submit", "acme", "a1", 2),
        envelope("session:end", "acme", "a1", 3),
        envelope("session:start", "other", "o1", 4),
    ]
    assert client.post("/events", json=batch, headers=headers).status_code == 202
    deadline = time.monotonic() + 30
    while (
        client.get("/intelligence/status", headers=read_headers).json()["backlog"]
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)


def test_status_needs_no_key_and_shows_no_sessions_without_one(
    keyed: tuple[TestClient[Litestar], dict[str, str]],
) -> None:
    client, keys = keyed
    ingest(client, keys["writer"], keys["admin"])
    anonymous = client.get("/status")
    assert anonymous.status_code == 200
    body = anonymous.json()
    assert set(body) >= UPSTREAM_KEYS
    assert set(body["metrics"]) == METRIC_KEYS
    assert body["status"] == "ok"
    assert body["server_version"] == __version__
    assert body["active_sessions"] == 2
    assert body["sessions"] == []
    assert body["recent_events"] == []
    assert body["completed_sessions"] == []
    assert body["neo4j_connected"] is True
    assert body["neo4j_query_connected"] is True
    assert body["neo4j_url"] == "embedded"
    assert body["metrics"]["accepted_total"] == 4
    assert body["metrics"]["in_queue_total"] == 0
    assert body["metrics"]["residual"] == 0
    assert body["metrics"]["degraded"] is False
    assert body["auth"] == {"mode": "static", "admin_api_enabled": True}
    unknown = client.get("/status", headers={"authorization": "Bearer nope"})
    assert unknown.status_code == 200
    assert unknown.json()["sessions"] == []


def test_a_reader_sees_the_sessions_of_its_workspaces(
    keyed: tuple[TestClient[Litestar], dict[str, str]],
) -> None:
    client, keys = keyed
    ingest(client, keys["writer"], keys["admin"])
    acme = client.get("/status", headers={"authorization": f"Bearer {keys['acme']}"}).json()
    assert [s["session_id"] for s in acme["sessions"]] == ["a1"]
    (session,) = acme["sessions"]
    assert set(session) == SESSION_KEYS
    assert session["last_event"] == "session:end"
    assert session["events_processed"] == 3
    assert session["orphaned"] is False
    assert session["last_successful_flush"] == session["last_event_time"]
    assert [e["event"] for e in acme["recent_events"]] == ["session:end", "prompt:submit", "session:start"]
    assert {e["result"] for e in acme["recent_events"]} == {"ok"}
    (done,) = acme["completed_sessions"]
    assert (done["session_id"], done["workspace"], done["events_processed"]) == ("a1", "acme", 3)
    admin = client.get("/status", headers={"authorization": f"Bearer {keys['admin']}"}).json()
    assert {s["session_id"] for s in admin["sessions"]} == {"a1", "o1"}


def test_status_without_keys_shows_everything(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, database_url="memory://")
    with TestClient(create_app(config), timeout=60) as client:
        ingest(client, None)
        body = client.get("/status").json()
    assert {s["session_id"] for s in body["sessions"]} == {"a1", "o1"}
    assert body["auth"] == {"mode": "none", "admin_api_enabled": False}


def test_status_without_the_intelligence_service(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, database_url="memory://", intelligence=False)
    with TestClient(create_app(config), timeout=60) as client:
        body = client.get("/status").json()
    assert body["status"] == "ok"
    assert body["neo4j_connected"] is False
    assert body["metrics"]["accepted_total"] == 0
