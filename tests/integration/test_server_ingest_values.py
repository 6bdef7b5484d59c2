"""Conversation ingest refuses counts and timestamps no event may hold, in every body form (issue
26, item 10), and names undecodable text precisely; against a real ``convograph serve``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.support.server import ServerProcess, running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("values") / "data") as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


HUGE_TOKENS = b'{"type":"usage","runId":"r","inputTokens":1' + b"0" * 400 + b',"outputTokens":1}'
BAD_EVENTS: list[tuple[bytes, str]] = [
    (HUGE_TOKENS, "inputTokens"),
    (
        b'{"type":"harness_end","runId":"r","totalUsage":{"inputTokens":1,"outputTokens":-5}}',
        "totalUsage.outputTokens",
    ),
    (b'{"type":"text","runId":"r","id":"t","content":"x","timestamp":"not a date"}', "timestamp"),
    (b'{"type":"text","runId":"r","id":"t","content":"x","timestamp":1e300}', "timestamp"),
]
GOOD = b'{"type":"text","runId":"r","id":"t","content":"fine"}'


def bodies(bad: bytes) -> list[tuple[str, bytes, str]]:
    """The bad event as a single JSON object, inside a JSON array, and as an NDJSON line."""
    return [
        ("single", bad, "application/json"),
        ("array", b"[" + GOOD + b"," + bad + b"]", "application/json"),
        ("ndjson", GOOD + b"\n" + bad + b"\n", "application/x-ndjson"),
    ]


@pytest.mark.parametrize(("bad", "field"), BAD_EVENTS)
def test_bad_counts_and_timestamps_are_422_naming_the_field(
    http: httpx.Client, bad: bytes, field: str
) -> None:
    for form, body, media in bodies(bad):
        cid = f"values-{field.replace('.', '-')}-{form}"
        response = http.post(f"/v1/conversations/{cid}/events", content=body, headers={"Content-Type": media})
        assert response.status_code == 422, (form, response.text)
        error = response.json()["error"]
        assert error["code"] == "invalid_events"
        assert [item["field"] for item in error["details"]] == [field], form
        assert len(response.text) < 1000  # the 401-digit number is not echoed back
        assert http.get(f"/v1/conversations/{cid}/events").status_code == 404  # nothing stored


def test_valid_timestamps_and_counts_are_stored(http: httpx.Client) -> None:
    events: list[dict[str, Any]] = [
        {
            "type": "text",
            "runId": "r",
            "id": "t",
            "content": "a",
            "timestamp": "2026-11-28T10:00:00.123456789+05:30",
        },
        {"type": "text", "runId": "r", "id": "t", "content": "b", "timestamp": 1_764_324_000_000},
        {"type": "usage", "runId": "r", "inputTokens": 0, "outputTokens": 2**53 - 1},
    ]
    response = http.post("/v1/conversations/values-ok/events", json=events)
    assert response.json() == {"accepted": 3, "duplicates": 0, "last_seq": 3}
    replayed = [json.loads(line) for line in http.get("/v1/conversations/values-ok/events").text.splitlines()]
    assert replayed[0]["timestamp"] == events[0]["timestamp"]
    assert replayed[2]["outputTokens"] == 2**53 - 1


LONE_SURROGATE = b'{"type":"text","runId":"r","id":"t","content":"\\ud800"}'
BAD_UTF8 = b'{"type":"text","runId":"r","id":"t","content":"abc\xffdef"}'


@pytest.mark.parametrize(
    ("raw", "problem", "at"),
    [
        (LONE_SURROGATE, "surrogate", LONE_SURROGATE.index(b"\\ud800")),
        (BAD_UTF8, "not UTF-8", BAD_UTF8.index(b"\xff")),
    ],
)
def test_undecodable_text_is_named_at_its_byte(http: httpx.Client, raw: bytes, problem: str, at: int) -> None:
    response = http.post(
        "/v1/conversations/text-1/events", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert problem in message
    assert "truncated" not in message
    assert f"at byte {at}" in message
    lines = b"\n" + raw + b"\n"  # NDJSON: the line, and the byte within it
    ndjson = http.post(
        "/v1/conversations/text-1/events", content=lines, headers={"Content-Type": "application/x-ndjson"}
    )
    assert ndjson.status_code == 422
    detail = ndjson.json()["error"]["details"][0]
    assert detail["line"] == 2
    assert problem in detail["message"]
    assert f"at byte {at}" in detail["message"]
