"""Live streams of a real ``convograph serve``: resume cursors, limits, slow subscribers, browsers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.support.server import ServerProcess, running_server

from convograph.client import ConvographClient, CursorPastHead

NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("streams")
    with running_server(base / "data", env={"CONVOGRAPH_SSE_HEARTBEAT_SECONDS": "0.3"}) as proc:
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
