"""Request bodies and resume positions the decoder cannot take are 400s naming the problem.

Found by the CLI/parser audit and by hand against a real server: JSON nested deeper than the
decoder's stack (``RecursionError``) or holding invalid UTF-8 inside a string
(``UnicodeDecodeError``) was a 500 on every body-reading route, and ``Last-Event-ID`` past 64 bits
raised ``OverflowError`` out of SQLite after the SSE response had started.
"""

# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from convograph.intelligence.http import create_intelligence_router
from convograph.intelligence.service import IntelligenceService
from convograph.server import ServerConfig, create_app
from tests.test_intelligence_support import falkor, names, service  # noqa: F401

DEEP = b"[" * 100_000 + b"]" * 100_000
BAD_UTF8 = b'{"type":"text","runId":"r","id":"t","content":"\xff\xfe"}'
BODIES = [(DEEP, "nested too deeply"), (BAD_UTF8, "not UTF-8")]
JSON = "application/json"
NDJSON = "application/x-ndjson"


@pytest.fixture
def conversations(tmp_path: Path) -> Iterator[TestClient[Litestar]]:
    with TestClient(create_app(ServerConfig(data_dir=tmp_path, database_url="memory://"))) as client:
        yield client


@pytest.fixture
def intelligence(service: IntelligenceService) -> Iterator[TestClient[Litestar]]:
    with TestClient(Litestar(route_handlers=[create_intelligence_router(service)])) as client:
        yield client


@pytest.mark.parametrize(("body", "reason"), BODIES, ids=["deep", "bad-utf8"])
def test_conversation_event_bodies(conversations: TestClient[Litestar], body: bytes, reason: str) -> None:
    response = conversations.post("/v1/conversations/c1/events", content=body, headers={"content-type": JSON})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"
    assert reason in response.json()["error"]["message"]
    lines = conversations.post("/v1/conversations/c1/events", content=body, headers={"content-type": NDJSON})
    assert lines.status_code == 422  # NDJSON reports each bad line, as for any invalid line
    assert reason in str(lines.json()["error"]["details"])
    good = b'[{"type":"harness_start","runId":"r"}]'
    assert conversations.post("/v1/conversations/c1/events", content=good).json()["accepted"] == 1


@pytest.mark.parametrize(("body", "reason"), BODIES, ids=["deep", "bad-utf8"])
@pytest.mark.parametrize("path", ["/events", "/cypher"])
def test_intelligence_bodies(intelligence: TestClient[Litestar], path: str, body: bytes, reason: str) -> None:
    for content_type in (JSON, NDJSON):
        response = intelligence.post(path, content=body, headers={"content-type": content_type})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_json"
        assert reason in response.json()["error"]["message"]


@pytest.mark.parametrize("value", ["99999999999999999999999", str(2**63)])
def test_resume_positions_past_64_bits(conversations: TestClient[Litestar], value: str) -> None:
    conversations.post("/v1/conversations/c1/events", json=[{"type": "harness_start", "runId": "r"}])
    stream = conversations.get("/v1/conversations/c1/stream", headers={"Last-Event-ID": value})
    assert stream.status_code == 400
    assert "Last-Event-ID" in stream.json()["error"]["message"]
    replay = conversations.get(f"/v1/conversations/c1/events?after={value}")
    assert replay.status_code == 400
    last = conversations.get(f"/v1/conversations/c1/events?after={2**63 - 1}")
    assert last.status_code == 409  # a seq, but past this conversation's last one
    assert last.json()["error"]["code"] == "cursor_past_head"
