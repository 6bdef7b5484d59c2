"""The runs routes (`convograph.server.runs`) against the real application: the pending turn, a new
message through ``POST .../runs``, refusals (a run answering, nothing to answer, bad input), cancel
with nobody attached and with ``force``. (Attached agents over the control stream need a real HTTP
server: tests/integration/test_harness_serving.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from convograph.server import create_app
from convograph.server.config import ServerConfig
from convograph.server.presence import LEASE_SECONDS, REFRESH_SECONDS, AgentInfo, Presence, remote_view
from convograph.server.presence_share import MemoryPresenceShare, PresenceRoom


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[AsyncTestClient[Any]]:
    config = ServerConfig(data_dir=tmp_path, database_url="memory://", intelligence=False)
    async with AsyncTestClient(create_app(config)) as test_client:
        yield test_client


async def post_events(client: AsyncTestClient[Any], cid: str, events: list[dict[str, Any]]) -> None:
    response = await client.post(f"/v1/conversations/{cid}/events", json=events)
    assert response.status_code == 200, response.text


async def test_a_message_through_runs_awaits_a_reply(client: AsyncTestClient[Any]) -> None:
    started = await client.post("/v1/conversations/c1/runs", json={"input": "hello"})
    assert started.status_code == 202, started.text
    body = started.json()
    assert body["pending"]["kind"] == "message"
    assert body["pending"]["claim"].startswith("turn:user-")
    assert body["agents"] == []  # nobody serves it yet: the turn waits in the log
    listed = (await client.get("/v1/conversations/c1/runs")).json()
    assert listed == {"runs": [], "pending": body["pending"], "agents": []}
    events = (await client.get("/v1/conversations/c1/events")).text.splitlines()
    assert len(events) == 1
    assert '"type":"user"' in events[0]
    # Asking again without input is the same request (idempotent), not a second message.
    again = await client.post("/v1/conversations/c1/runs")
    assert again.status_code == 202
    assert again.json()["pending"] == body["pending"]


async def test_runs_lists_top_level_runs_with_their_end(client: AsyncTestClient[Any]) -> None:
    await post_events(
        client,
        "c2",
        [
            {"type": "user", "runId": "u1", "content": "hi"},
            {"type": "harness_start", "runId": "a1", "parentId": "u1:user", "agentId": "lead"},
            {"type": "tool_call", "runId": "a1", "id": "a1/c1", "name": "agent", "input": {}},
            {"type": "harness_start", "runId": "sub", "parentId": "a1/c1", "agentId": "helper"},
            {"type": "harness_end", "runId": "sub", "parentId": "a1/c1", "reason": "final"},
            {"type": "tool_result", "runId": "a1", "id": "a1/c1", "name": "agent", "output": {"result": "x"}},
            {"type": "text", "runId": "p1", "parentId": "a1", "id": "t", "content": "done"},
            {"type": "harness_end", "runId": "a1", "parentId": "u1:user", "reason": "final"},
        ],
    )
    listed = (await client.get("/v1/conversations/c2/runs")).json()
    assert [(r["runId"], r["agentId"], r["status"], r["reason"]) for r in listed["runs"]] == [
        ("a1", "lead", "complete", "final")
    ]
    assert listed["pending"] is None
    refused = await client.post("/v1/conversations/c2/runs")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "nothing_to_answer"


async def test_new_input_is_refused_while_a_run_answers(client: AsyncTestClient[Any]) -> None:
    await post_events(
        client,
        "c3",
        [
            {"type": "user", "runId": "u1", "content": "hi"},
            {"type": "harness_start", "runId": "a1", "parentId": "u1:user", "agentId": "lead"},
        ],
    )
    refused = await client.post("/v1/conversations/c3/runs", json={"input": "and another thing"})
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "run_in_progress"
    assert error["details"] == {"runIds": ["a1"]}
    assert "/v1/conversations/c3/runs/a1/cancel" in error["message"]


async def test_cancel_with_nobody_attached_needs_force(client: AsyncTestClient[Any]) -> None:
    await post_events(
        client,
        "c4",
        [
            {"type": "user", "runId": "u1", "content": "hi"},
            {"type": "harness_start", "runId": "a1", "parentId": "u1:user", "agentId": "lead"},
        ],
    )
    refused = await client.post("/v1/conversations/c4/runs/a1/cancel")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "no_agent_attached"
    forced = await client.post("/v1/conversations/c4/runs/a1/cancel", json={"force": True})
    assert forced.status_code == 202
    assert forced.json() == {"runId": "a1", "delivered": 0, "ended": True}
    run = (await client.get("/v1/conversations/c4/runs")).json()["runs"][0]
    assert (run["status"], run["reason"]) == ("complete", "cancelled")
    ended = await client.post("/v1/conversations/c4/runs/a1/cancel", json={"force": True})
    assert ended.status_code == 409
    assert ended.json()["error"]["code"] == "run_ended"
    unknown = await client.post("/v1/conversations/c4/runs/nope/cancel")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "unknown_run"


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"input": "   "}, 400, "input is empty"),
        ({"input": 3}, 400, "invalid body"),
        ({"message": "hi"}, 400, "invalid body"),
    ],
)
async def test_bad_run_requests_are_refused_by_name(
    client: AsyncTestClient[Any], body: dict[str, Any], status: int, fragment: str
) -> None:
    refused = await client.post("/v1/conversations/c5/runs", json=body)
    assert refused.status_code == status
    assert fragment in refused.json()["error"]["message"]


async def test_unknown_conversations_and_bad_agent_ids(client: AsyncTestClient[Any]) -> None:
    nothing = await client.get("/v1/conversations/none/runs")
    assert nothing.json() == {"runs": [], "pending": None, "agents": []}  # an agent may serve it first
    assert (await client.post("/v1/conversations/none/runs")).status_code == 404
    assert (await client.get("/v1/conversations/none/agents")).json() == {"agents": []}
    bad = await client.get("/v1/conversations/c6/agents/-bad id/control")
    assert bad.status_code == 400


def test_presence_keeps_a_lease_after_the_stream_closes() -> None:
    presence = Presence(lease=60)
    entry = presence.attach("c", AgentInfo(id="x1", name="lead"))
    assert [(a.name, a.connected) for a in presence.agents("c")] == [("lead", True)]
    assert presence.broadcast("c", b"frame") == 1
    assert list(entry.outbox) == [b"frame"]
    presence.leave("c", entry)
    assert [(a.name, a.connected) for a in presence.agents("c")] == [("lead", False)]
    assert presence.broadcast("c", b"frame") == 0
    again = presence.attach("c", AgentInfo(id="x1", name="lead"))
    assert again is entry
    assert again.info.connected
    presence.leave("c", again)
    expired = Presence(lease=-1)
    gone = expired.attach("c", AgentInfo(id="x2", name="lead"))
    expired.leave("c", gone)
    assert expired.agents("c") == []


async def test_presence_shared_between_instances_lists_and_delivers() -> None:
    """Two instances on one share: each lists the other's agents; a control frame sent through one
    reaches the agent attached to the other, counted once; a stopped share forgets its rows."""
    room = PresenceRoom()
    here, there = Presence(), Presence()
    await here.start_sharing(MemoryPresenceShare(room, instance="here"))
    await there.start_sharing(MemoryPresenceShare(room, instance="there"))
    try:
        entry = there.attach("c", AgentInfo(id="a1", name="worker"))
        for _ in range(100):  # written by the share's writer task, at once on a change
            if room.rows:
                break
            await asyncio.sleep(0.01)
        assert [(a.id, a.connected) for a in await here.listed("c")] == [("a1", True)]
        assert await here.send("c", b"event: cancel\ndata: {}\n\n") == 1
        assert list(entry.outbox) == [b"event: cancel\ndata: {}\n\n"]
        assert await there.send("c", b"x") == 1  # its own agent, not counted twice
    finally:
        await there.stop_sharing()
        await here.stop_sharing()
    assert room.rows == {}


def test_remote_rows_fade_from_connected_to_listed_to_gone() -> None:
    now = 1_000.0
    connected = AgentInfo(id="a", name="a", connected=True, since=1.0)
    left = AgentInfo(id="b", name="b", connected=False, since=1.0, last_seen=now - 3)
    assert [(a.id, a.connected) for a in remote_view([(connected, now - 1), (left, now - 1)], now)] == [
        ("a", True),
        ("b", False),
    ]
    stale = remote_view([(connected, now - 2 * REFRESH_SECONDS - 1)], now)  # its instance died
    assert [(a.id, a.connected) for a in stale] == [("a", False)]
    assert remote_view([(connected, now - LEASE_SECONDS - 1)], now) == []
    assert remote_view([(left, now)], now + LEASE_SECONDS) == []


async def test_always_is_stored_with_an_approval_and_refused_with_a_denial(
    client: AsyncTestClient[Any],
) -> None:
    relay = {"type": "relay", "kind": "permission", "runId": "a", "id": "r1", "toolCallId": "a/c1",
             "tool": "exec", "params": {"cmd": "ls -la"}}  # fmt: skip
    await post_events(client, "c9", [{"type": "harness_start", "runId": "a"}, relay, {**relay, "id": "r2"}])
    refused = await client.post("/v1/conversations/c9/relays/r1", json={"approved": False, "always": True})
    assert refused.status_code == 400
    assert "always applies to an approval" in refused.json()["error"]["message"]
    decided = await client.post("/v1/conversations/c9/relays/r1", json={"approved": True, "always": True})
    assert decided.status_code == 200
    plain = await client.post("/v1/conversations/c9/relays/r2", json={"approved": True})
    assert plain.status_code == 200
    listed = (await client.get("/v1/conversations/c9/relays")).json()["relays"]
    assert [(r["id"], r["decision"].get("always", False)) for r in listed] == [("r1", True), ("r2", False)]
