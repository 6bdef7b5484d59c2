"""Attached agents behind a balancer (issue 29 item 3): an agent holds its control stream on one
``convograph serve`` instance; every other instance sharing the event log (PostgreSQL, or one
Redis) lists it, and a cancel sent to any instance reaches it."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.cluster import Instance


def _instances(tmp: Path, database_url: str, count: int) -> list[Instance]:
    started = [
        Instance(tmp / f"i{n}", "--database-url", database_url, "--no-intelligence") for n in range(count)
    ]
    for instance in started:
        instance.wait_ready_path("/healthz")
    return started


class ControlStream:
    """An agent's control stream read on a thread: its SSE events arrive on `events`."""

    def __init__(self, url: str) -> None:
        self.events: queue.Queue[tuple[str, str]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url,), daemon=True)
        self._thread.start()

    def _read(self, url: str) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(30, read=None)) as client,
                client.stream("GET", url) as reply,
            ):
                event = ""
                for line in reply.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        self.events.put((event, line[6:]))
        except httpx.HTTPError as exc:  # its instance was killed
            self.events.put(("closed", str(exc)))

    def next(self, name: str, timeout: float = 15) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event, data = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            if event == name:
                return data
        raise AssertionError(f"no {name!r} event within {timeout} s")

    def close(self) -> None:
        self._stop.set()


def _agents(url: str, cid: str) -> list[dict[str, Any]]:
    agents: list[dict[str, Any]] = httpx.get(f"{url}/v1/conversations/{cid}/agents", timeout=10).json()[
        "agents"
    ]
    return agents


def _until(predicate: Any, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    raise AssertionError(f"not true within {timeout} s")


@pytest.fixture(params=["postgresql", "redis"])
def shared_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "postgresql":
        yield request.getfixturevalue("postgres_url")
    else:
        prefix = request.getfixturevalue("redis_prefix")
        yield f"{request.getfixturevalue('redis_url')}?prefix={prefix}"


def test_an_agent_on_one_instance_is_listed_and_cancelled_through_another(
    tmp_path: Path, shared_url: str
) -> None:
    holder, other = _instances(tmp_path, shared_url, 2)
    try:
        cid = "shared-presence"
        start = {"type": "harness_start", "runId": "r1", "agentId": "helper"}
        assert httpx.post(f"{holder.url}/v1/conversations/{cid}/events", json=start).status_code == 200
        stream = ControlStream(f"{holder.url}/v1/conversations/{cid}/agents/agent-1/control?name=helper")
        try:
            stream.next("attached")
            listed = _until(lambda: _agents(other.url, cid))
            assert [(a["id"], a["name"], a["connected"]) for a in listed] == [("agent-1", "helper", True)]

            sent = httpx.post(f"{other.url}/v1/conversations/{cid}/runs/r1/cancel", json={}, timeout=10)
            assert sent.status_code == 202, sent.text
            assert sent.json()["delivered"] == 1
            assert '"runId":"r1"' in stream.next("cancel")
        finally:
            stream.close()
        # The stream is gone (the holder notices on its next heartbeat or write): listed as not
        # connected, then forgotten after its lease.
        _until(lambda: not _agents(other.url, cid)[0]["connected"], timeout=40)
        refused = httpx.post(f"{other.url}/v1/conversations/{cid}/runs/r1/cancel", json={}, timeout=10)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "no_agent_attached"
    finally:
        for instance in (holder, other):
            instance.stop()


def test_a_killed_instance_s_agents_stop_counting_as_connected(tmp_path: Path, postgres_url: str) -> None:
    """Its rows stop being refreshed: after two refreshes its agent is listed as not connected (it
    reconnects to another instance), and a cancel through another instance is not counted as sent."""
    holder, other = _instances(tmp_path, postgres_url, 2)
    try:
        cid = "killed-holder"
        stream = ControlStream(f"{holder.url}/v1/conversations/{cid}/agents/agent-2/control?name=w")
        stream.next("attached")
        _until(lambda: _agents(other.url, cid))
        holder.kill()
        stream.close()
        _until(lambda: not _agents(other.url, cid)[0]["connected"], timeout=20)
    finally:
        for instance in (holder, other):
            instance.stop()
