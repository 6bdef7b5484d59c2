"""``GET /v1/conversations/{cid}/stream?protocol=ag-ui|ai-sdk`` against a real ``convograph serve``:
the bytes equal the in-process encoding of the stored events, live (through the shared hub) and
replayed; a resume with ``Last-Event-ID`` (``<seq>`` or ``<seq>:<chunk>``) gives exactly the rest;
the AI SDK's and AG-UI's own clients read what the server sent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.conversations import recorded_conversations, sse_bytes
from tests.support.node_tools import run_node_reader
from tests.support.server import ServerProcess, running_server

from convograph.events import Event, event_to_wire
from convograph.integrations.ag_ui import AGUIEventStream
from convograph.integrations.ai_sdk import AISDKStream
from convograph.integrations.ui_stream import UIEventStream

ENCODERS: dict[str, type[UIEventStream]] = {"ag-ui": AGUIEventStream, "ai-sdk": AISDKStream}
CONVERSATION = recorded_conversations()["multi-agent"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("protocol-streams")
    with running_server(base / "data", env={"CONVOGRAPH_SSE_HEARTBEAT_SECONDS": "0.3"}) as proc:
        yield proc


def post(server: ServerProcess, cid: str, events: list[Event]) -> None:
    body = "".join(json.dumps(event_to_wire(event)) + "\n" for event in events)
    response = httpx.post(
        f"{server.url}/v1/conversations/{cid}/events",
        content=body,
        headers={"Content-Type": "application/x-ndjson"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def frames_of(data: bytes) -> list[bytes]:
    """Complete SSE messages with data (no retry line, no heartbeat comments)."""
    return [frame + b"\n\n" for frame in data.split(b"\n\n") if b"\ndata: " in b"\n" + frame]


def read_until(
    server: ServerProcess, cid: str, protocol: str, last_id: str, headers: dict[str, str] | None = None
) -> tuple[httpx.Headers, list[bytes]]:
    """The frames of a fresh connection, up to the one carrying ``id: <last_id>``."""
    url = f"{server.url}/v1/conversations/{cid}/stream?protocol={protocol}"
    data = b""
    marker = f"id: {last_id}\n".encode()
    with (
        httpx.Client(timeout=httpx.Timeout(10, read=10)) as client,
        client.stream("GET", url, headers=headers or {}) as response,
    ):
        assert response.status_code == 200, response.read()
        for chunk in response.iter_raw():
            data += chunk
            frames = frames_of(data[: data.rfind(b"\n\n") + 2])
            if frames and frames[-1].startswith(marker):
                return response.headers, frames
    raise AssertionError(f"the stream ended before id {last_id}: {data[-500:]!r}")


def expected_frames(protocol: str, cid: str, events: list[Event]) -> list[bytes]:
    return frames_of(sse_bytes(ENCODERS[protocol](cid), events))


@pytest.mark.parametrize("protocol", sorted(ENCODERS))
def test_a_stored_conversation_streams_as_encoded_in_process(server: ServerProcess, protocol: str) -> None:
    cid = f"stored-{protocol}"
    post(server, cid, CONVERSATION)
    headers, frames = read_until(server, cid, protocol, str(len(CONVERSATION)))
    assert frames == expected_frames(protocol, cid, CONVERSATION)
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache"
    if protocol == "ai-sdk":
        assert headers["x-vercel-ai-ui-message-stream"] == "v1"


@pytest.mark.parametrize("protocol", sorted(ENCODERS))
def test_live_events_reach_two_subscribers_as_encoded_in_process(
    server: ServerProcess, protocol: str
) -> None:
    cid = f"live-{protocol}"
    half = len(CONVERSATION) // 2
    post(server, cid, CONVERSATION[:half])  # the hub starts mid-conversation: it replays these first
    results: list[list[bytes]] = []

    def reader() -> None:
        results.append(read_until(server, cid, protocol, str(len(CONVERSATION)))[1])

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(0.6)
    for start in range(half, len(CONVERSATION), 7):
        post(server, cid, CONVERSATION[start : start + 7])
        time.sleep(0.05)
    for thread in threads:
        thread.join(20)
    want = expected_frames(protocol, cid, CONVERSATION)
    assert results == [want, want]


def resume_points(frames: list[bytes]) -> list[tuple[str, int]]:
    """(Last-Event-ID, index of the next frame) for every frame: ``<seq>`` or ``<seq>:<k>``."""
    points = []
    for index, frame in enumerate(frames):
        frame_id = frame.split(b"\n", 1)[0].removeprefix(b"id: ").decode()
        points.append((frame_id, index + 1))
    return points


@pytest.mark.parametrize("protocol", sorted(ENCODERS))
def test_a_resume_from_any_frame_gives_exactly_the_rest(server: ServerProcess, protocol: str) -> None:
    cid = f"resume-{protocol}"
    post(server, cid, CONVERSATION)
    want = expected_frames(protocol, cid, CONVERSATION)
    points = resume_points(want)
    assert any(":" in frame_id for frame_id, _ in points)  # some events give several frames
    last = str(len(CONVERSATION))
    for frame_id, next_index in points[::5] + [p for p in points if ":" in p[0]][::3]:
        if next_index == len(want):
            continue
        _, frames = read_until(server, cid, protocol, last, {"Last-Event-ID": frame_id})
        assert frames == want[next_index:], frame_id


def test_bad_requests_say_what_is_wrong(server: ServerProcess) -> None:
    url = f"{server.url}/v1/conversations/anything/stream"
    response = httpx.get(url, params={"protocol": "a2a"}, timeout=10)
    assert response.status_code == 400
    assert "protocol must be one of native, ag-ui, ai-sdk" in response.json()["error"]["message"]
    response = httpx.get(url, params={"protocol": "ag-ui"}, headers={"Last-Event-ID": "3:x"}, timeout=10)
    assert response.status_code == 400
    assert "<seq>:<chunk>" in response.json()["error"]["message"]


def test_the_clients_read_what_the_server_sent(server: ServerProcess, tmp_path: Path) -> None:
    events = recorded_conversations()["research-approved"]
    cid = "clients"
    post(server, cid, events)
    reports: dict[str, Any] = {}
    for protocol, script in (("ai-sdk", "ai-sdk-read.mjs"), ("ag-ui", "ag-ui-read.mjs")):
        _, frames = read_until(server, cid, protocol, str(len(events)))
        path = tmp_path / f"{protocol}.sse"
        path.write_bytes(b"".join(frames))
        (reports[protocol],) = run_node_reader(script, path)
    assert [message["id"] for message in reports["ai-sdk"]["messages"]] == ["run-lead"]
    assert reports["ag-ui"]["runs"] == ["run-user-1", "run-lead"]
