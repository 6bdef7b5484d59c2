"""Live streams of a real ``convograph serve``: resume cursors, limits, slow subscribers, browsers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h11
import httpx
import pytest
from tests.support.server import ServerProcess, running_server

from convograph.client import ConvographClient, CursorPastHead
from convograph.client.sse import ServerSentEvent, SSEDecoder
from convograph.server.auth import add_key_to_file

NDJSON = {"Content-Type": "application/x-ndjson"}


RING_EVENTS = 16
"""How far (in events) a live subscriber of the module's server may fall behind."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("streams")
    env = {
        "CONVOGRAPH_SSE_HEARTBEAT_SECONDS": "0.3",
        "CONVOGRAPH_SSE_CLIENT_BUFFER": str(RING_EVENTS),
        "CONVOGRAPH_SSE_CLIENT_BUFFER_BYTES": "65536",
    }
    with running_server(base / "data", env=env) as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


def text(i: int, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "runId": "r", "id": f"t{i}", "content": f"c{i}", **extra}


def open_stream(http: httpx.Client, cid: str, **kwargs: Any) -> httpx.Response:
    """The answer to ``GET .../stream``, its body read only when it is not a stream (an error)."""
    with http.stream("GET", f"/v1/conversations/{cid}/stream", **kwargs) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.read()
        return response


def post(http: httpx.Client, cid: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    response = http.post(f"/v1/conversations/{cid}/events", json=events)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


# --- resume cursors (issue 26, item 11) -------------------------------------------------------------


@pytest.mark.parametrize("raw", ["abc", "+1", "1_0", "1e3", "0x1", "-1", "1.0", "\u0663", "\uff11"])
def test_a_resume_cursor_that_is_not_a_number_is_400(http: httpx.Client, raw: str) -> None:
    post(http, "cursor-1", [text(1)])
    header = {"Last-Event-ID": raw.encode()}  # bytes: httpx sends non-ASCII as UTF-8
    for headers, params in ((header, {}), ({}, {"after": raw})):
        response = open_stream(http, "cursor-1", headers=headers, params=params)
        assert response.status_code == 400, (raw, headers, params)
        assert response.json()["error"]["code"] == "bad_request"
    replay = http.get("/v1/conversations/cursor-1/events", params={"after": raw})
    assert replay.status_code == 400


def test_a_resume_cursor_past_the_head_is_409_carrying_the_last_seq(http: httpx.Client) -> None:
    post(http, "cursor-2", [text(1), text(2), text(3)])
    for headers, params in (({"Last-Event-ID": "4"}, {}), ({}, {"after": "9"})):
        response = open_stream(http, "cursor-2", headers=headers, params=params)
        assert response.status_code == 409
        error = response.json()["error"]
        assert error["code"] == "cursor_past_head"
        assert error["details"]["lastSeq"] == 3
        assert "3" in error["message"]
        assert response.headers["X-Convograph-Seq"] == "3"
    replay = http.get("/v1/conversations/cursor-2/events", params={"after": "4"})
    assert replay.status_code == 409
    assert replay.json()["error"]["details"]["lastSeq"] == 3
    # at the head is fine: nothing yet, then live events
    assert http.get("/v1/conversations/cursor-2/events", params={"after": "3"}).text == ""


def test_a_deleted_and_recreated_conversation_answers_its_new_head(
    http: httpx.Client, server: ServerProcess
) -> None:
    post(http, "cursor-3", [text(i) for i in range(1, 6)])
    assert http.delete("/v1/conversations/cursor-3").status_code == 204
    post(http, "cursor-3", [text(1)])
    response = open_stream(http, "cursor-3", headers={"Last-Event-ID": "5"})
    assert response.status_code == 409
    assert response.json()["error"]["details"]["lastSeq"] == 1
    # never stored at all: the head is 0 (a stream may still be opened before the first event)
    missing = open_stream(http, "cursor-never", headers={"Last-Event-ID": "2"})
    assert missing.status_code == 409
    assert missing.json()["error"]["details"]["lastSeq"] == 0


def test_the_client_raises_cursor_past_head_instead_of_waiting(
    http: httpx.Client, server: ServerProcess
) -> None:
    post(http, "cursor-4", [text(1), text(2)])

    async def scenario() -> CursorPastHead:
        async with ConvographClient(server.url) as client:
            with pytest.raises(CursorPastHead) as caught:
                await _first(client.stream("cursor-4", after=7))
            with pytest.raises(CursorPastHead):
                await client.replay("cursor-4", after=3)
            events = [event.seq async for event in _take(client.stream("cursor-4", after=0), 2)]
            assert events == [1, 2]
            return caught.value

    error = asyncio.run(scenario())
    assert error.status == 409
    assert error.last_seq == 2


async def _first(stream: Any) -> Any:
    async with asyncio.timeout(10):
        async for event in stream:
            return event
    return None


async def _take(stream: Any, count: int) -> Any:
    async with asyncio.timeout(10):
        seen = 0
        async for event in stream:
            yield event
            seen += 1
            if seen == count:
                return


# --- slow subscribers, stream limits, released resources (issue 26, item 2) ----------------------


def metric(http: httpx.Client, name: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def wait_metric(http: httpx.Client, name: str, want: float, timeout: float = 15) -> float:
    deadline = time.monotonic() + timeout
    while (value := metric(http, name)) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


class RawStream:
    """``GET .../stream`` on a plain socket with a 4 KiB receive buffer, read only when asked:
    a client that stops reading, as the server sees it."""

    def __init__(self, server: ServerProcess, cid: str, last_event_id: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", server.port))
        self.sock.settimeout(30)
        self.http = h11.Connection(h11.CLIENT)
        self.decoder = SSEDecoder()
        self.messages: list[ServerSentEvent] = []
        self.ended = False
        request = h11.Request(
            method="GET",
            target=f"/v1/conversations/{cid}/stream",
            headers=[("Host", "127.0.0.1"), ("Last-Event-ID", str(last_event_id))],
        )
        self.sock.sendall(self.http.send(request) + self.http.send(h11.EndOfMessage()))

    def read_until(self, done: Any, timeout: float = 60) -> list[ServerSentEvent]:
        """Read (and decode) until ``done(messages)`` or the response ends."""
        deadline = time.monotonic() + timeout
        while not done(self.messages) and not self.ended:
            assert time.monotonic() < deadline, f"not done after {timeout} s: {self.messages[-3:]}"
            event = self.http.next_event()
            if event is h11.NEED_DATA:
                self.http.receive_data(self.sock.recv(65536))
            elif isinstance(event, h11.Response):
                assert event.status_code == 200
            elif isinstance(event, h11.Data):
                self.messages.extend(self.decoder.feed(bytes(event.data)))
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                self.ended = True
        return self.messages

    def close(self) -> None:
        self.sock.close()


def big_events(start: int, count: int) -> list[dict[str, Any]]:
    return [text(i, content="x" * 16_000) for i in range(start, start + count)]


def test_a_subscriber_too_far_behind_is_ended_with_a_final_frame_and_resumes(
    http: httpx.Client, server: ServerProcess
) -> None:
    post(http, "slow-1", [text(1)])
    stream = RawStream(server, "slow-1", last_event_id=1)  # live from the start
    assert wait_metric(http, "convograph_sse_subscribers", 1) == 1
    # ~10 MB, one event per append (so the subscriber stays live, sending each as it comes):
    # more than the kernel's socket buffers and the transport's, so the ring moves on without it
    for i in range(2, 642):
        post(http, "slow-1", big_events(i, 1))
    messages = stream.read_until(lambda out: any(m.event == "stream_end" for m in out))
    stream.close()
    events = [m for m in messages if m.event == "text"]
    end = messages[-1]
    assert end.event == "stream_end"
    assert stream.read_until(lambda out: False, 5)[-1] is end  # nothing after it: the response ended
    payload = json.loads(end.data)
    assert payload["reason"] == "too_far_behind"
    assert "Last-Event-ID" in payload["message"]
    seqs = [int(m.id or 0) for m in events]
    assert seqs == list(range(2, 2 + len(seqs)))  # no gap, no duplicate up to the end
    assert payload["lastEventId"] == seqs[-1] < 641
    # resuming from where it ended gives exactly the rest
    rest = RawStream(server, "slow-1", last_event_id=payload["lastEventId"])
    resumed = rest.read_until(lambda out: any(m.id == "641" and m.event == "text" for m in out))
    rest.close()
    assert [int(m.id or 0) for m in resumed if m.event == "text"] == list(range(seqs[-1] + 1, 642))
    assert wait_metric(http, "convograph_sse_subscribers", 0) == 0
    assert wait_metric(http, "convograph_sse_buffered_bytes", 0) == 0


def test_a_burst_larger_than_the_buffer_does_not_end_an_idle_subscriber(
    http: httpx.Client, server: ServerProcess
) -> None:
    post(http, "burst-1", [text(1)])
    stream = RawStream(server, "burst-1", last_event_id=1)
    assert wait_metric(http, "convograph_sse_subscribers", 1) == 1
    time.sleep(0.2)  # it is idle, waiting for the next event
    post(http, "burst-1", [text(i) for i in range(2, 2 + 20 * RING_EVENTS)])
    last = str(1 + 20 * RING_EVENTS)
    messages = stream.read_until(lambda out: any(m.id == last or m.event == "stream_end" for m in out))
    stream.close()
    assert [m.event for m in messages] == ["text"] * 20 * RING_EVENTS
    assert [int(m.id or 0) for m in messages] == list(range(2, 2 + 20 * RING_EVENTS))


def test_closed_streams_release_their_slots_subscribers_and_buffers(
    http: httpx.Client, server: ServerProcess
) -> None:
    post(http, "release-1", big_events(1, 200))  # 3 MB to catch up on
    streams = [RawStream(server, "release-1", last_event_id=0) for _ in range(5)]
    streams += [RawStream(server, "release-1", last_event_id=200) for _ in range(5)]
    assert wait_metric(http, "convograph_streams_open", 10) == 10
    post(http, "release-1", big_events(201, 20))
    for stream in streams:
        stream.close()
    assert wait_metric(http, "convograph_streams_open", 0) == 0
    assert wait_metric(http, "convograph_sse_subscribers", 0) == 0
    assert wait_metric(http, "convograph_sse_buffered_bytes", 0) == 0


def _status(http: httpx.Client, path: str, **kwargs: Any) -> httpx.Response:
    with http.stream("GET", path, **kwargs) as response:
        if response.status_code != 200:
            response.read()
        return response


def test_streams_beyond_the_limits_are_429(tmp_path: Path) -> None:
    env = {"CONVOGRAPH_MAX_STREAMS_PER_CLIENT": "2", "CONVOGRAPH_MAX_STREAMS": "3"}
    other_address = httpx.HTTPTransport(local_address="127.0.0.2")
    with (
        running_server(tmp_path / "data", env=env) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
        httpx.Client(base_url=server.url, timeout=10, transport=other_address) as other,
        contextlib.ExitStack() as streams,
    ):
        first = RawStream(server, "limit-1", last_event_id=0)
        second = streams.enter_context(http.stream("GET", "/v1/live/conversations"))  # counts too
        assert wait_metric(http, "convograph_streams_open", 2) == 2
        refused = _status(http, "/v1/conversations/limit-1/stream")
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "5"
        error = refused.json()["error"]
        assert error["code"] == "too_many_streams"
        assert error["details"] == {"limit": 2, "scope": "client"}
        assert "--max-streams-per-client" in error["message"]
        assert _status(http, "/v1/live/conversations").status_code == 429
        # another client address has its own allowance, up to the server's total
        third = streams.enter_context(other.stream("GET", "/v1/conversations/limit-1/stream"))
        assert third.status_code == 200
        over_total = _status(other, "/v1/conversations/limit-1/stream")
        assert over_total.status_code == 429
        assert over_total.json()["error"]["details"] == {"limit": 3, "scope": "server"}
        # a closed stream gives its slot back
        first.close()
        assert wait_metric(http, "convograph_streams_open", 2) == 2
        again = streams.enter_context(http.stream("GET", "/v1/conversations/limit-1/stream"))
        assert again.status_code == 200
        assert second.status_code == 200
        assert metric(http, "convograph_streams_refused_total") == 3
        streams.close()
        assert wait_metric(http, "convograph_streams_open", 0) == 0


def test_streams_per_api_key(tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.json"
    one = add_key_to_file(keyfile, key_id="one", scopes=["read"])
    two = add_key_to_file(keyfile, key_id="two", scopes=["read"])
    env = {"CONVOGRAPH_MAX_STREAMS_PER_KEY": "1"}
    with (
        running_server(tmp_path / "data", "--api-key-file", str(keyfile), env=env) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
        contextlib.ExitStack() as streams,
    ):
        opened = streams.enter_context(
            http.stream("GET", "/v1/conversations/k-1/stream", headers={"Authorization": f"Bearer {one}"})
        )
        assert opened.status_code == 200
        refused = _status(http, "/v1/conversations/k-1/stream", headers={"Authorization": f"Bearer {one}"})
        assert refused.status_code == 429
        assert refused.json()["error"]["details"] == {"limit": 1, "scope": "key"}
        assert "'one'" in refused.json()["error"]["message"]
        other = _status(http, "/v1/live/conversations", headers={"Authorization": f"Bearer {two}"})
        assert other.status_code == 200


# --- named frames: error events vs connection errors (issue 26, item 12) -----------------------------


def test_the_client_yields_error_events_and_skips_stream_end(
    http: httpx.Client, server: ServerProcess
) -> None:
    post(
        http,
        "named-1",
        [text(1), {"type": "error", "runId": "r", "message": "the model timed out"}, text(3)],
    )

    seen: list[tuple[int | None, str]] = []

    async def consume(client: ConvographClient) -> None:
        async with asyncio.timeout(20):
            async for event in client.stream("named-1", initial_retry=0.05):
                seen.append((event.seq, event.type))
                if len(seen) == 3:  # the conversation is deleted and re-created meanwhile
                    assert http.delete("/v1/conversations/named-1").status_code == 204
                    post(http, "named-1", [text(1)])

    async def scenario() -> tuple[list[tuple[int | None, str]], CursorPastHead]:
        async with ConvographClient(server.url) as client:
            with pytest.raises(CursorPastHead) as caught:
                await consume(client)
            return seen, caught.value

    seen, error = asyncio.run(scenario())
    # an `error` event is an event; stream_end ("deleted") is not one, and the reconnect after it
    # (Last-Event-ID: 3) is refused with the new head
    assert seen == [(1, "text"), (2, "error"), (3, "text")]
    assert error.last_seq == 1


def test_deleting_a_conversation_ends_its_open_streams(http: httpx.Client, server: ServerProcess) -> None:
    post(http, "deleted-1", [text(1), text(2)])
    stream = RawStream(server, "deleted-1", last_event_id=0)
    stream.read_until(lambda out: len(out) == 2)
    assert http.delete("/v1/conversations/deleted-1").status_code == 204
    messages = stream.read_until(lambda out: False, timeout=10)  # until the response ends
    stream.close()
    assert stream.ended
    assert messages[-1].event == "stream_end"
    assert json.loads(messages[-1].data) == {
        "reason": "deleted",
        "message": json.loads(messages[-1].data)["message"],
        "lastEventId": 2,
    }
