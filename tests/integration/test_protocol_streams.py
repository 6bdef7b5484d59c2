"""``GET /v1/conversations/{cid}/stream?protocol=ag-ui|ai-sdk`` against a real ``convograph serve``:
the bytes equal the in-process encoding of the stored events, live (through the shared hub) and
replayed; a resume with ``Last-Event-ID`` (``<seq>`` or ``<seq>:<chunk>``) gives exactly the rest;
the AI SDK's and AG-UI's own clients read what the server sent."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.conversations import recorded_conversations, sse_bytes
from tests.support.node_tools import require_node_tools, run_node_reader
from tests.support.server import ServerProcess, running_server
from tests.test_integrations_ag_ui_ingest import producer_stream

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


# --- AG-UI in -------------------------------------------------------------------------------------


class Upstream:
    """A real HTTP server sending an AG-UI SSE stream (GET, or POST with a RunAgentInput)."""

    def __init__(self, body: bytes, *, status: int = 200, media: str = "text/event-stream") -> None:
        owner = self
        self.requests: list[tuple[str, bytes]] = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                owner.requests.append((self.command, self.rfile.read(length)))
                self.send_response(status)
                self.send_header("content-type", media)
                self.end_headers()
                for start in range(0, len(body), 97):  # in pieces, as a live agent sends
                    self.wfile.write(body[start : start + 97])
                    self.wfile.flush()

            do_GET = _answer
            do_POST = _answer

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/agent"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def post_ag_ui(server: ServerProcess, cid: str, body: bytes, media: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/conversations/{cid}/ag-ui",
        content=body,
        headers={"Content-Type": media},
        timeout=30,
    )


def messages(server: ServerProcess, cid: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{server.url}/v1/conversations/{cid}/messages", timeout=10)
    assert response.status_code == 200, response.text
    result: list[dict[str, Any]] = response.json()
    return result


def test_an_ag_ui_stream_posted_is_stored_once(server: ServerProcess) -> None:
    body = producer_stream()
    first = post_ag_ui(server, "agui-in", body, "text/event-stream")
    assert first.status_code == 200, first.text
    reply = first.json()
    assert reply["accepted"] > 10
    assert reply["skipped"] == {"STATE_SNAPSHOT": 1, "STEP_STARTED": 1, "STEP_FINISHED": 1}
    assert messages(server, "agui-in")[-1] == {"role": "assistant", "content": "The cheapest is 120 EUR."}
    again = post_ag_ui(server, "agui-in", body, "text/event-stream").json()
    assert (again["accepted"], again["duplicates"]) == (0, reply["accepted"])


def test_an_upstream_ag_ui_endpoint_is_read_to_its_end(server: ServerProcess) -> None:
    upstream = Upstream(producer_stream())
    try:
        source = {"url": upstream.url, "input": {"threadId": "t", "runId": "run-1", "messages": []}}
        response = httpx.post(f"{server.url}/v1/conversations/agui-url/ag-ui", json=source, timeout=30)
        assert response.status_code == 200, response.text
        assert upstream.requests[0][0] == "POST"
        assert json.loads(upstream.requests[0][1])["runId"] == "run-1"
        got = httpx.post(
            f"{server.url}/v1/conversations/agui-url-get/ag-ui", json={"url": upstream.url}, timeout=30
        )
        assert got.status_code == 200, got.text
        assert upstream.requests[1][0] == "GET"
        assert messages(server, "agui-url") == messages(server, "agui-url-get")
    finally:
        upstream.close()
    for bad in (Upstream(b"oops", status=500), Upstream(b"{}", media="application/json")):
        try:
            response = httpx.post(
                f"{server.url}/v1/conversations/agui-bad/ag-ui", json={"url": bad.url}, timeout=30
            )
            assert response.status_code == 502
            assert response.json()["error"]["code"] == "upstream"
        finally:
            bad.close()


def test_a_bad_ag_ui_event_is_named_and_nothing_is_stored(server: ServerProcess) -> None:
    body = b'[{"type":"RUN_STARTED","threadId":"t","runId":"r"},{"type":"TOOL_CALL_ARGS","toolCallId":"c"}]'
    response = post_ag_ui(server, "agui-422", body, "application/json")
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_ag_ui"
    assert error["details"] == [
        {"index": 1, "type": "TOOL_CALL_ARGS", "field": "delta", "message": "Field required"}
    ]
    assert httpx.get(f"{server.url}/v1/conversations/agui-422", timeout=10).status_code == 404
    unordered = (
        b'[{"type":"RUN_STARTED","threadId":"t","runId":"r"},{"type":"TOOL_CALL_END","toolCallId":"c"}]'
    )
    response = post_ag_ui(server, "agui-422", unordered, "application/json")
    assert response.status_code == 422
    assert "event 1 (TOOL_CALL_END)" in response.json()["error"]["message"]
    assert post_ag_ui(server, "agui-422", b"x", "text/plain").status_code == 415


def test_a_conversation_streamed_out_and_posted_back_has_the_same_messages(server: ServerProcess) -> None:
    post(server, "round-a", CONVERSATION)
    _, frames = read_until(server, "round-a", "ag-ui", str(len(CONVERSATION)))
    response = post_ag_ui(server, "round-b", b"".join(frames), "text/event-stream")
    assert response.status_code == 200, response.text
    assert messages(server, "round-b") == messages(server, "round-a")


# --- the runnable examples ------------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_examples_run_against_a_server(server: ServerProcess) -> None:
    producer = [
        sys.executable,
        str(EXAMPLES / "ag_ui_producer.py"),
        "--server",
        server.url,
        "--conversation",
        "ex",
    ]
    first = subprocess.run(producer, capture_output=True, text=True, timeout=60, check=True)
    assert '"accepted": 10' in first.stdout
    assert "FR 8354 at 95 EUR is the cheapest." in first.stdout
    again = subprocess.run(producer, capture_output=True, text=True, timeout=60, check=True)
    assert '"accepted": 0, "duplicates": 10' in again.stdout
    require_node_tools()
    follow = [
        (["node", str(EXAMPLES / "ai-sdk-follow.mjs"), server.url, "ex", "--once"], "run-1:"),
        (["node", str(EXAMPLES / "ag-ui-follow.mjs"), server.url, "ex", "2"], "-- RUN_FINISHED run-1"),
    ]
    for command, expected in follow:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert expected in done.stdout
        assert "FR 8354 at 95 EUR is the cheapest." in done.stdout
