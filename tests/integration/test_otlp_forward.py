"""``convograph serve --otlp-endpoint``: one real server forwards its conversations as GenAI spans to
another real server's ``POST /v1/traces`` (a real OTLP/HTTP receiver), through an outage of the
receiver, and a run's spans go out as it ends."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.server import ServerProcess, free_port, running_server, start_server

from convograph.examples import example_ndjson

NDJSON = {"Content-Type": "application/x-ndjson"}


def wait_for(check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not true within {timeout} s: {check}")


def messages(url: str, cid: str) -> list[dict[str, Any]] | None:
    response = httpx.get(f"{url}/v1/conversations/{cid}/messages?format=anthropic", timeout=10)
    return response.json() if response.status_code == 200 else None


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    receiver_port = free_port()
    receiver = start_server(tmp_path / "receiver", "--no-intelligence", port=receiver_port)
    try:
        with running_server(
            tmp_path / "sender", "--no-intelligence", "--otlp-endpoint", f"http://127.0.0.1:{receiver_port}"
        ) as sender:
            yield sender, receiver
    finally:
        receiver.stop()


def test_a_conversation_is_forwarded_and_arrives_whole(pair: tuple[ServerProcess, ServerProcess]) -> None:
    sender, receiver = pair
    body = example_ndjson("multi-agent")
    assert (
        httpx.post(f"{sender.url}/v1/conversations/fwd-1/events", content=body, headers=NDJSON).status_code
        == 200
    )
    expected = messages(sender.url, "fwd-1")
    assert wait_for(lambda: messages(receiver.url, "fwd-1") == expected)
    metrics = httpx.get(f"{sender.url}/metrics").text
    assert "convograph_otlp_spans_forwarded 14" in metrics


def test_a_run_goes_out_when_it_ends_and_survives_an_outage(
    pair: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    sender, receiver = pair

    def post(*events: dict[str, Any]) -> None:
        body = "".join(json.dumps(event) + "\n" for event in events)
        response = httpx.post(f"{sender.url}/v1/conversations/live-1/events", content=body, headers=NDJSON)
        assert response.status_code == 200

    def received() -> list[dict[str, Any]]:
        response = httpx.get(f"{receiver.url}/v1/conversations/live-1/events", timeout=10)
        return (
            [json.loads(line) for line in response.text.splitlines()] if response.status_code == 200 else []
        )

    post(
        {"type": "user", "runId": "u1", "content": "list the files"},
        {"type": "harness_start", "runId": "a1", "parentId": "u1:user", "agentId": "main"},
        {"type": "text", "runId": "a1", "id": "t1", "content": "Listing."},
        {"type": "tool_call", "runId": "a1", "id": "c1", "name": "ls", "input": {}},
        {"type": "tool_result", "runId": "a1", "id": "c1", "name": "ls", "output": "a.txt"},
        {"type": "text", "runId": "a1", "id": "t2", "content": "There is a.txt"},
    )
    # the first turn and its tool are over: they go out; the run streams: its agent does not
    events = wait_for(
        lambda: [event for event in received() if event["type"] == "tool_result"] and received()
    )
    assert not any(event["type"] == "harness_start" for event in events)
    receiver.stop()  # an outage: the sender keeps retrying, ingest on the sender never waits
    started = time.monotonic()
    post({"type": "harness_end", "runId": "a1", "reason": "stop"})
    assert time.monotonic() - started < 2
    restarted = start_server(receiver.data_dir, "--no-intelligence", port=receiver.port)
    try:
        events = wait_for(
            lambda: [event for event in received() if event["type"] == "harness_end"] and received()
        )
        assert [event["agentId"] for event in events if event["type"] == "harness_start"] == ["main"]
        assert messages(restarted.url, "live-1") == messages(sender.url, "live-1")
    finally:
        restarted.stop(signal.SIGTERM)
