"""``POST /events`` with one envelope is answered by `convograph.server.fastpath` on a real
``convograph serve``; everything else it sees is answered by the route, exactly as before."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from tests.integration.cluster import Instance

from convograph.server.auth import add_key_to_file

pytestmark = pytest.mark.falkordb

GOOD = {
    "event": "session:start",
    "workspace": "acme",
    "data": {"session_id": "s1", "timestamp": "2026-03-02T09:00:00Z"},
}


def fast_count(client: httpx.Client) -> int:
    found = re.search(r"^convograph_fast_path_requests_total (\d+)$", client.get("/metrics").text, re.M)
    assert found is not None
    return int(found.group(1))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Instance, dict[str, str]]]:
    root = tmp_path_factory.mktemp("fast")
    keys = root / "keys.json"
    tokens = {
        "writer": add_key_to_file(keys, key_id="writer", scopes=["write", "read"]),
        "reader": add_key_to_file(keys, key_id="reader", scopes=["read"]),
        "other": add_key_to_file(keys, key_id="other", scopes=["write"], workspaces=["elsewhere"]),
    }
    instance = Instance(root / "data", "--api-key-file", str(keys))
    try:
        instance.wait_ready_path("/healthz")
        yield instance, tokens
    finally:
        instance.stop()


def test_one_envelope_takes_the_fast_path_and_errors_the_route(
    server: tuple[Instance, dict[str, str]],
) -> None:
    instance, tokens = server
    with httpx.Client(base_url=instance.url, timeout=30) as client:
        auth = {"Authorization": f"Bearer {tokens['writer']}"}
        before = fast_count(client)
        first = client.post("/events", json=GOOD, headers=auth)
        assert (first.status_code, first.json()) == (202, {"status": "queued", "session_id": "s1"})
        again = client.post("/events?replay=true", json=GOOD, headers=auth)
        assert (again.status_code, again.json()) == (202, {"status": "duplicate", "session_id": "s1"})
        assert fast_count(client) == before + 2
        # the route's answers, unchanged: no key, a read-only key, another workspace, a bad envelope,
        # bad JSON, a batch, NDJSON, a body over 64 KiB
        assert client.post("/events", json=GOOD).status_code == 401
        reader = {"Authorization": f"Bearer {tokens['reader']}"}
        assert client.post("/events", json=GOOD, headers=reader).status_code == 403
        other = client.post("/events", json=GOOD, headers={"Authorization": f"Bearer {tokens['other']}"})
        assert (other.status_code, other.json()["error"]["code"]) == (403, "forbidden_workspace")
        bad = client.post("/events", json={**GOOD, "workspace": " "}, headers=auth)
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_workspace")
        broken = client.post("/events", content=b'{"event": ', headers=auth)
        assert (broken.status_code, broken.json()["error"]["code"]) == (400, "invalid_json")
        second = {**GOOD, "data": {**GOOD["data"], "session_id": "s2"}}
        batch = client.post("/events", json=[second], headers=auth)
        assert (batch.status_code, batch.json()["accepted"]) == (202, 1)
        ndjson = client.post(
            "/events",
            content=b'{"event": "x", "workspace": "acme", "data": {"session_id": "s3", "timestamp": "2026-03-02T09:00:01Z"}}\n',
            headers={**auth, "content-type": "application/x-ndjson"},
        )
        assert (ndjson.status_code, ndjson.json()["accepted"]) == (202, 1)
        large = {**GOOD, "data": {**GOOD["data"], "session_id": "s4", "result": "x" * 100_000}}
        big = client.post("/events", json=large, headers=auth)
        assert (big.status_code, big.json()) == (202, {"status": "queued", "session_id": "s4"})
        assert fast_count(client) == before + 2  # none of these took the fast path
        recent = client.get("/status", headers=auth).json()["recent_events"]
        assert sorted(r["session_id"] for r in recent) == ["s1", "s2", "s3", "s4"]  # each stored once
