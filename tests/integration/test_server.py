"""The HTTP API against a real ``convograph serve`` process (uvicorn), driven with httpx."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.server import ServerProcess, running_server, start_server

from convograph.client import ApiError, ConvographClient
from convograph.examples import example_ndjson
from convograph.server.auth import add_key_to_file

NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("server")
    with running_server(base / "data", env={"CONVOGRAPH_SSE_HEARTBEAT_SECONDS": "0.3"}) as proc:
        yield proc


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


def text(i: int, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "runId": "r", "id": f"t{i}", "content": f"c{i}", **extra}


def post(http: httpx.Client, cid: str, body: Any, *, ndjson: bool = False) -> httpx.Response:
    if ndjson:
        return http.post(
            f"/v1/conversations/{cid}/events",
            content="".join(json.dumps(item) + "\n" for item in body),
            headers=NDJSON,
        )
    return http.post(f"/v1/conversations/{cid}/events", json=body)


def test_ingest_single_array_and_ndjson(http: httpx.Client) -> None:
    assert post(http, "ingest-1", text(1)).json() == {"accepted": 1, "duplicates": 0, "last_seq": 1}
    assert post(http, "ingest-1", [text(2), text(3)]).json() == {
        "accepted": 2,
        "duplicates": 0,
        "last_seq": 3,
    }
    assert post(http, "ingest-1", [text(4), text(5)], ndjson=True).json()["last_seq"] == 5


def test_event_id_is_stored_once(http: httpx.Client) -> None:
    batch = [text(1, eventId="a"), text(2, eventId="b")]
    assert post(http, "dedup-1", batch).json() == {"accepted": 2, "duplicates": 0, "last_seq": 2}
    assert post(http, "dedup-1", [*batch, text(3, eventId="c")]).json() == {
        "accepted": 1,
        "duplicates": 2,
        "last_seq": 3,
    }


def test_invalid_batch_lists_every_bad_item_and_stores_nothing(http: httpx.Client) -> None:
    response = post(http, "invalid-1", [text(1), {"type": "text", "runId": "r", "id": "x"}, {"type": "nope"}])
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_events"
    assert [(item["index"], item["field"]) for item in error["details"]] == [(1, "content"), (2, "type")]
    assert http.get("/v1/conversations/invalid-1/thread").status_code == 404


def test_invalid_ndjson_lines_are_located(http: httpx.Client) -> None:
    body = json.dumps(text(1)) + "\n{oops\n" + json.dumps({"type": "usage", "runId": "r"}) + "\n"
    response = http.post("/v1/conversations/invalid-2/events", content=body, headers=NDJSON)
    assert response.status_code == 422
    details = response.json()["error"]["details"]
    assert [(item["line"], item["field"]) for item in details] == [(2, None), (3, "inputTokens")]


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (b"{nope", {"Content-Type": "application/json"}, 400, "malformed_json"),
        (b"", {"Content-Type": "application/json"}, 400, "bad_request"),
        (b"42", {"Content-Type": "application/json"}, 400, "bad_request"),
        (b"type=text", {"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"),
        (b"<xml/>", {"Content-Type": "text/xml"}, 415, "unsupported_media_type"),
    ],
)
def test_body_errors(
    http: httpx.Client, body: bytes, headers: dict[str, str], status: int, code: str
) -> None:
    response = http.post("/v1/conversations/errors-1/events", content=body, headers=headers)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]


def test_bad_conversation_id(http: httpx.Client) -> None:
    response = post(http, "-bad", text(1))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_conversation_id"


@pytest.mark.parametrize("path", ["thread", "messages", "dag", "events", "relays", ""])
def test_unknown_conversation_is_404(http: httpx.Client, path: str) -> None:
    response = http.get(f"/v1/conversations/never-seen/{path}".rstrip("/"))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_conversation"


def test_unknown_route_is_json_404(http: httpx.Client) -> None:
    response = http.get("/v1/nothing-here")
    assert response.status_code == 404
    assert "error" in response.json()


def test_list_replay_and_projections(http: httpx.Client) -> None:
    assert (
        http.post("/v1/conversations/example-1/events", content=example_ndjson(), headers=NDJSON).json()[
            "accepted"
        ]
        == 57
    )
    listed = {item["id"]: item for item in http.get("/v1/conversations").json()["conversations"]}
    assert listed["example-1"]["eventCount"] == 57
    assert listed["example-1"]["lastSeq"] == 57
    assert listed["example-1"]["status"] == "complete"
    assert {"lastActivity", "status", "eventCount", "id"} <= set(listed["example-1"])

    replay = http.get("/v1/conversations/example-1/events", params={"after": 50})
    assert replay.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in replay.text.splitlines()]
    assert [line["seq"] for line in lines] == list(range(51, 58))

    thread = http.get("/v1/conversations/example-1/thread").json()
    assert thread[0]["role"] == "user"
    kinds = {node["content"]["kind"] for node in thread}
    assert {"user", "text", "tool_call", "reasoning"} <= kinds
    openai = http.get("/v1/conversations/example-1/messages", params={"format": "openai"}).json()
    assert openai[0]["role"] == "user"
    anthropic = http.get("/v1/conversations/example-1/messages", params={"format": "anthropic"}).json()
    assert anthropic[0]["role"] == "user"
    assert http.get("/v1/conversations/example-1/messages", params={"format": "xml"}).status_code == 400
    dag = http.get("/v1/conversations/example-1/dag").json()
    assert dag["nodes"]
    assert dag["edges"]
    svg = http.get("/v1/conversations/example-1/dag", params={"format": "svg"})
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert svg.text.lstrip().startswith("<svg")


def test_thread_with_repl_cells_follows_new_events_and_commands(http: httpx.Client) -> None:
    """``/thread?repl=1``: REPL turns as views (beyond the seed), kept current as events arrive
    and after a command; ``repl`` with the flat model is refused by name."""
    from convograph.demo.conversations import rlm_script

    events = rlm_script().events()
    cut = next(i for i, e in enumerate(events) if e["type"] == "repl_input" and e["id"] == "repl-3")
    assert post(http, "repl-1", events[:cut]).status_code == 200

    def cells() -> list[str]:
        reply = http.get("/v1/conversations/repl-1/thread", params={"repl": "true"})
        assert reply.status_code == 200, reply.text
        return [v["id"] for v in reply.json() if v["content"]["kind"] == "repl"]

    assert cells() == ["repl-1", "repl-2"]
    assert not [
        v for v in http.get("/v1/conversations/repl-1/thread").json() if v["content"]["kind"] == "repl"
    ]
    assert post(http, "repl-1", events[cut:]).status_code == 200
    assert cells() == [f"repl-{n}" for n in range(1, 6)]  # the REPL projector followed the events
    user_id = http.get("/v1/conversations/repl-1/path").json()["path"][0]["id"]
    edited = http.post(f"/v1/conversations/repl-1/messages/{user_id}/edit", json={"content": "Refunds?"})
    assert edited.status_code == 200
    assert cells() == []  # the new branch has no reply yet
    assert http.post(f"/v1/conversations/repl-1/messages/{user_id}/select").status_code == 200
    assert cells() == [f"repl-{n}" for n in range(1, 6)]
    view = http.get("/v1/conversations/repl-1/repl")
    assert view.status_code == 200
    (agent,) = view.json()["agents"]
    assert agent["runId"] == "run-rlm"
    assert len(agent["turns"]) == 5
    assert [c["runId"] for c in agent["turns"][2]["childAgents"]] == ["run-rlm-child-1"]
    assert http.get("/v1/conversations/no-such/repl").status_code == 404
    refused = http.get("/v1/conversations/repl-1/thread", params={"repl": "true", "model": "flat"})
    assert refused.status_code == 400
    assert "model=hypergraph" in refused.json()["error"]["message"]


def sse_messages(url: str, headers: dict[str, str], until: Any, timeout: float = 10) -> list[Any]:
    """Decoded messages of the SSE stream at ``url`` until ``until(messages)`` is true."""
    from convograph.client.sse import SSEDecoder

    out: list[Any] = []
    decoder = SSEDecoder()
    with httpx.Client(timeout=timeout) as client, client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for chunk in response.iter_raw():
            out.extend(decoder.feed(chunk))
            if until(out):
                break
    return out


def read_sse(
    server: ServerProcess, cid: str, headers: dict[str, str], count: int, timeout: float = 10
) -> list[dict[str, Any]]:
    """Read ``count`` SSE events (id, event, data) from a fresh connection."""
    url = f"{server.url}/v1/conversations/{cid}/stream"
    messages = sse_messages(url, headers, lambda out: len(out) >= count, timeout)
    return [{"id": m.id, "event": m.event, "data": json.loads(m.data)} for m in messages[:count]]


def test_sse_resume_gives_exactly_the_missing_events_then_live(
    http: httpx.Client, server: ServerProcess
) -> None:
    post(http, "sse-1", [text(i) for i in range(1, 6)])
    collected: list[dict[str, Any]] = []

    def reader() -> None:
        collected.extend(read_sse(server, "sse-1", {"Last-Event-ID": "3"}, count=4))

    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(0.5)
    post(http, "sse-1", [text(6), text(7)])
    thread.join(10)
    assert [item["id"] for item in collected] == ["4", "5", "6", "7"]
    assert [item["event"] for item in collected] == ["text"] * 4
    assert collected[0]["data"]["seq"] == 4
    assert collected[0]["data"]["content"] == "c4"
    via_query = []
    with (
        httpx.Client(timeout=10) as client,
        client.stream("GET", f"{server.url}/v1/conversations/sse-1/stream?after=6") as response,
    ):
        from convograph.client.sse import SSEDecoder

        decoder = SSEDecoder()
        for chunk in response.iter_raw():
            via_query.extend(decoder.feed(chunk))
            if via_query:
                break
    assert [message.id for message in via_query] == ["7"]


def test_sse_heartbeats_while_idle(server: ServerProcess) -> None:
    with (
        httpx.Client(timeout=5) as client,
        client.stream("GET", f"{server.url}/v1/conversations/idle-1/stream") as response,
    ):
        seen = b""
        for chunk in response.iter_raw():
            seen += chunk
            if b": heartbeat" in seen:
                break
    assert b"retry: " in seen
    assert b": heartbeat" in seen


def test_sse_bad_last_event_id(http: httpx.Client) -> None:
    response = http.get("/v1/conversations/sse-1/stream", headers={"Last-Event-ID": "abc"})
    assert response.status_code == 400


def test_concurrent_appends_reach_subscribers_without_gaps_or_duplicates(server: ServerProcess) -> None:
    async def scenario() -> list[int]:
        async with ConvographClient(server.url) as client:
            await client.append("race-1", [text(0)])
            seen: list[int] = []

            async def consume() -> None:
                async for event in client.stream("race-1", after=0):
                    assert event.seq is not None
                    seen.append(event.seq)
                    if len(seen) == 1 + 4 * 50:
                        return

            async def produce(worker: int) -> None:
                for i in range(50):
                    await client.append("race-1", [text(1000 * worker + i)])

            consumer = asyncio.create_task(consume())
            await asyncio.sleep(0.2)
            await asyncio.gather(*(produce(w) for w in range(4)))
            await asyncio.wait_for(consumer, 20)
            return seen

    seen = asyncio.run(scenario())
    assert seen == list(range(1, 202))


def test_relay_decision_persists_and_is_decided_once(tmp_path: Path) -> None:
    relay = {
        "type": "relay",
        "kind": "permission",
        "runId": "agent",
        "id": "relay-1",
        "toolCallId": "agent/c1",
        "tool": "exec",
        "params": {"cmd": "ls"},
    }
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            post(http, "relay-1", [{"type": "harness_start", "runId": "agent"}, relay])
            pending = http.get("/v1/conversations/relay-1/relays").json()["relays"]
            assert pending[0]["id"] == "relay-1"
            assert pending[0]["decision"] is None
            assert http.get("/v1/conversations/relay-1").json()["pendingRelays"] == ["relay-1"]
            assert (
                http.post("/v1/conversations/relay-1/relays/nope", json={"approved": True}).status_code == 404
            )
            bad = http.post("/v1/conversations/relay-1/relays/relay-1", json={"approved": "yes"})
            assert bad.status_code == 400
            decided = http.post(
                "/v1/conversations/relay-1/relays/relay-1", json={"approved": True, "reason": "ok"}
            )
            assert decided.status_code == 200
            assert decided.json()["approved"] is True
    finally:
        server.stop()
    server = start_server(data_dir, port=server.port)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            relays = http.get("/v1/conversations/relay-1/relays").json()["relays"]
            assert relays[0]["decision"]["approved"] is True
            assert relays[0]["decision"]["reason"] == "ok"
            again = http.post("/v1/conversations/relay-1/relays/relay-1", json={"approved": False})
            assert again.status_code == 409
            assert again.json()["error"]["code"] == "relay_already_decided"
            replay = [
                json.loads(line) for line in http.get("/v1/conversations/relay-1/events").text.splitlines()
            ]
            assert replay[-1]["type"] == "relay_resolved"
            assert http.get("/v1/conversations/relay-1").json()["pendingRelays"] == []
    finally:
        server.stop()


def test_client_stream_survives_a_server_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    port = server.port
    box: dict[str, ServerProcess] = {"server": server}

    async def scenario() -> list[int]:
        async with ConvographClient(server.url) as client:
            await client.append("restart-1", [text(i) for i in range(10)])
            seen: list[int] = []
            async for event in client.stream("restart-1", initial_retry=0.2):
                assert event.seq is not None
                seen.append(event.seq)
                if event.seq == 10:
                    box["server"].stop()
                    box["server"] = await asyncio.to_thread(start_server, data_dir, port=port)
                    async with ConvographClient(box["server"].url) as writer:
                        await writer.append("restart-1", [text(i) for i in range(10, 15)])
                if len(seen) == 15:
                    return seen
            return seen

    try:
        assert asyncio.run(asyncio.wait_for(scenario(), 60)) == list(range(1, 16))
    finally:
        box["server"].stop()


def test_health_metrics_openapi(http: httpx.Client) -> None:
    assert http.get("/healthz").json()["status"] == "ok"
    metrics = http.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "convograph_events_accepted_total" in metrics.text
    spec = http.get("/openapi.json").json()
    assert "/v1/conversations/{cid}/events" in spec["paths"]
    assert "/v1/conversations/{cid}/stream" in spec["paths"]


def test_oversized_body_is_413(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", env={"CONVOGRAPH_MAX_BODY_BYTES": "2048"}) as server:
        big = [text(i, pad="x" * 100) for i in range(50)]
        response = httpx.post(f"{server.url}/v1/conversations/big-1/events", json=big, timeout=10)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"


def test_api_keys_scopes_and_workspaces(tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.json"
    admin = add_key_to_file(keyfile, key_id="admin", scopes=["admin"])
    reader = add_key_to_file(keyfile, key_id="reader", scopes=["read"])
    acme = add_key_to_file(keyfile, key_id="acme", scopes=["read", "write"], workspaces=["acme"])
    assert "sha256:" in keyfile.read_text()
    assert admin not in keyfile.read_text()

    def auth(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    with (
        running_server(tmp_path / "data", "--api-key-file", str(keyfile)) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        assert http.get("/v1/conversations").status_code == 401
        assert http.get("/v1/conversations", headers=auth("cg_wrong")).status_code == 401
        assert (
            http.post("/v1/conversations/acme:c1/events", json=text(1), headers=auth(acme)).status_code == 200
        )
        assert (
            http.post("/v1/conversations/other:c1/events", json=text(1), headers=auth(admin)).status_code
            == 200
        )
        denied = http.post("/v1/conversations/other:c2/events", json=text(1), headers=auth(acme))
        assert denied.status_code == 403
        assert denied.json()["error"]["code"] == "wrong_workspace"
        assert http.get("/v1/conversations/other:c1/thread", headers=auth(acme)).status_code == 403
        write_as_reader = http.post("/v1/conversations/acme:c1/events", json=text(2), headers=auth(reader))
        assert write_as_reader.status_code == 403
        ids = [c["id"] for c in http.get("/v1/conversations", headers=auth(acme)).json()["conversations"]]
        assert ids == ["acme:c1"]
        assert http.delete("/v1/conversations/acme:c1", headers=auth(acme)).status_code == 403
        assert http.delete("/v1/conversations/acme:c1", headers=auth(admin)).status_code == 204


def read_list_feed(url: str, headers: dict[str, str], until: Any, timeout: float = 10) -> list[Any]:
    """``(event, data)`` messages of ``GET /v1/live/conversations`` until ``until(messages)``."""

    def pairs(messages: list[Any]) -> list[Any]:
        return [(m.event, json.loads(m.data)) for m in messages]

    messages = sse_messages(f"{url}/v1/live/conversations", headers, lambda out: until(pairs(out)), timeout)
    return pairs(messages)


def test_live_conversation_list_pushes_rows_per_workspace_and_ends_on_shutdown(tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.json"
    admin = add_key_to_file(keyfile, key_id="admin", scopes=["admin"])
    acme = add_key_to_file(keyfile, key_id="acme", scopes=["read", "write"], workspaces=["acme"])
    acme_headers = {"Authorization": f"Bearer {acme}"}
    with running_server(tmp_path / "data", "--api-key-file", str(keyfile)) as server:
        assert httpx.get(f"{server.url}/v1/live/conversations").status_code == 401
        for cid, key in (("acme:c1", acme), ("other:c1", admin)):
            response = httpx.post(
                f"{server.url}/v1/conversations/{cid}/events",
                json=text(1),
                headers={"Authorization": f"Bearer {key}"},
            )
            assert response.status_code == 200
        seen: list[Any] = []

        def reader() -> None:
            seen.extend(
                read_list_feed(
                    server.url,
                    acme_headers,
                    lambda out: any(e == "conversation" and d["eventCount"] == 3 for e, d in out),
                )
            )

        thread = threading.Thread(target=reader)
        thread.start()
        time.sleep(0.5)
        for cid, key in (("other:c1", admin), ("acme:c1", acme)):
            response = httpx.post(
                f"{server.url}/v1/conversations/{cid}/events",
                json=[text(2), text(3)],
                headers={"Authorization": f"Bearer {key}"},
            )
            assert response.status_code == 200
        thread.join(15)
        assert seen[0][0] == "snapshot"
        assert [row["id"] for row in seen[0][1]["conversations"]] == ["acme:c1"]
        assert {data["id"] for _, data in seen[1:]} == {"acme:c1"}  # other workspaces stay invisible
        assert seen[-1][1]["eventCount"] == 3

        # Shutdown ends the open feed with a complete response (no cut-off chunk).
        ended: list[BaseException | None] = []

        def follower() -> None:
            try:
                read_list_feed(server.url, acme_headers, lambda out: False, timeout=30)
                ended.append(None)
            except BaseException as exc:
                ended.append(exc)

        thread = threading.Thread(target=follower)
        thread.start()
        time.sleep(0.5)
        server.stop()
        thread.join(15)
        assert ended == [None]


def test_public_bind_without_keys_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "convograph",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "1",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "without API keys" in done.stderr


def test_client_raises_api_errors(server: ServerProcess) -> None:
    async def scenario() -> None:
        async with ConvographClient(server.url) as client:
            with pytest.raises(ApiError) as info:
                await client.projection("never-seen-2", "thread")
            assert info.value.status == 404
            assert info.value.code == "unknown_conversation"

    asyncio.run(scenario())


def test_intelligence_routes_enforce_scopes_and_workspaces(tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.json"
    reader = add_key_to_file(keyfile, key_id="reader", scopes=["read"])
    acme = add_key_to_file(keyfile, key_id="acme", scopes=["read", "write"], workspaces=["acme"])
    admin = add_key_to_file(keyfile, key_id="admin", scopes=["admin"])
    envelope = {
        "event": "session:start",
        "workspace": "acme",
        "data": {"session_id": "s-1", "timestamp": "2026-11-22T00:00:00.000+00:00"},
        "idempotency_key": "k-1",
    }

    def auth(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    with (
        running_server(tmp_path / "data", "--api-key-file", str(keyfile)) as server,
        httpx.Client(base_url=server.url, timeout=20) as http,
    ):
        assert http.post("/events", json=envelope).status_code == 401
        assert http.post("/events", json=envelope, headers=auth(reader)).status_code == 403
        assert http.post("/events", json=envelope, headers=auth(acme)).json()["status"] == "queued"
        assert http.post("/events", json=envelope, headers=auth(acme)).json()["status"] == "duplicate"
        other = http.post(
            "/events", json={**envelope, "workspace": "globex", "idempotency_key": "k-2"}, headers=auth(acme)
        )
        assert other.status_code == 403
        query = {"query": "MATCH (s:Session) RETURN s.node_id AS id", "workspace": "globex"}
        assert http.post("/cypher", json=query, headers=auth(acme)).status_code == 403
        deadline = time.monotonic() + 20
        rows: list[Any] = []
        while time.monotonic() < deadline and not rows:
            answer = http.post("/cypher", json={**query, "workspace": "acme"}, headers=auth(acme))
            assert answer.status_code == 200
            rows = answer.json()["results"]
            time.sleep(0.2)
        assert rows == [{"id": "s-1"}]
        assert http.post("/queues/dead-letter/x/purge", headers=auth(acme)).status_code == 403
        # forgetting a session is an admin action: read and write keys are refused
        assert http.delete("/sessions/s-1?workspace=acme", headers=auth(acme)).status_code == 403
        assert http.delete("/sessions/s-1?workspace=acme", headers=auth(reader)).status_code == 403
        forgot = http.delete("/sessions/s-1?workspace=acme", headers=auth(admin))
        assert forgot.status_code == 202, forgot.text
        assert forgot.json()["events"] == 1
        assert http.delete("/sessions/s-1?workspace=acme", headers=auth(admin)).status_code == 404
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and rows:
            status = http.get("/intelligence/status", headers=auth(acme)).json()
            if not status["rebuilding"]:
                rows = http.post("/cypher", json={**query, "workspace": "acme"}, headers=auth(acme)).json()[
                    "results"
                ]
            time.sleep(0.2)
        assert rows == []
        # the hook client re-sending the event does not bring it back
        assert http.post("/events", json=envelope, headers=auth(acme)).json()["status"] == "duplicate"


def test_postgres_down_with_spool_accepts_and_answers_202(tmp_path: Path) -> None:
    from tests.support.server import free_port

    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/convograph?connect_timeout=1&spool={tmp_path / 'spool.db'}"
    with running_server(tmp_path / "data", "--database-url", dead, "--no-intelligence") as server:
        response = httpx.post(
            f"{server.url}/v1/conversations/outage-1/events", json=[text(1), text(2)], timeout=30
        )
        assert response.status_code == 202, response.text
        body = response.json()
        assert body["spooled"] is True
        assert body["last_seq"] is None
        assert (tmp_path / "spool.db").exists()


def test_branches_edit_select_regenerate_persist_across_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    conversation = [
        {"type": "user", "runId": "u1", "content": "Which retry policy is safer?"},
        {"type": "harness_start", "runId": "a1", "parentId": "u1:user"},
        {"type": "text", "runId": "a1", "id": "t1", "content": "Policy B."},
        {"type": "harness_end", "runId": "a1"},
    ]
    server = start_server(data_dir, "--no-intelligence")
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            post(http, "branch-1", conversation)
            path = http.get("/v1/conversations/branch-1/path").json()["path"]
            assert [m["role"] for m in path] == ["user", "assistant"]
            user_id, answer_id = path[0]["id"], path[1]["id"]
            assert path[0]["siblings"] == [user_id]
            assert "u1:user" in path[0]["viewIds"]

            edited = http.post(
                f"/v1/conversations/branch-1/messages/{user_id}/edit", json={"content": "Which is faster?"}
            )
            assert edited.status_code == 200, edited.text
            new_path = edited.json()["path"]
            assert [m["role"] for m in new_path] == ["user"]
            assert new_path[0]["siblings"] == [user_id, new_path[0]["id"]]
            assert new_path[0]["index"] == 1
            thread = http.get("/v1/conversations/branch-1/thread").json()
            assert [v["content"]["content"] for v in thread if v["content"]["kind"] == "user"] == [
                "Which is faster?"
            ]
            flat = http.get("/v1/conversations/branch-1/thread", params={"model": "flat"}).json()
            assert any(v["content"]["kind"] == "text" for v in flat)

            selected = http.post(f"/v1/conversations/branch-1/messages/{user_id}/select")
            assert [m["id"] for m in selected.json()["path"]] == [user_id, answer_id]
            regenerated = http.post(f"/v1/conversations/branch-1/messages/{answer_id}/regenerate")
            assert regenerated.status_code == 200
            assert len(regenerated.json()["path"][1]["siblings"]) == 2

            assert (
                http.post(
                    "/v1/conversations/branch-1/messages/msg:999/edit", json={"content": "x"}
                ).status_code
                == 404
            )
            refused = http.post(f"/v1/conversations/branch-1/messages/{user_id}/regenerate")
            assert refused.status_code == 409
            assert refused.json()["error"]["code"] == "not_applicable"
            assert (
                http.post(
                    f"/v1/conversations/branch-1/messages/{user_id}/edit", json={"text": "x"}
                ).status_code
                == 400
            )
            final = http.get("/v1/conversations/branch-1/path").json()["path"]
            commands = [
                json.loads(line)["type"]
                for line in http.get("/v1/conversations/branch-1/events").text.splitlines()
            ]
            assert commands[-3:] == ["edit", "switch_branch", "regenerate"]
    finally:
        server.stop()
    server = start_server(data_dir, "--no-intelligence", port=server.port)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.get("/v1/conversations/branch-1/path").json()["path"] == final
    finally:
        server.stop()


def _sessions(http: httpx.Client, workspace: str, timeout: float = 30) -> list[Any]:
    """Poll read-only Cypher until the workspace holds a Session (the graph is fed in the background)."""
    deadline = time.monotonic() + timeout
    rows: list[Any] = []
    while time.monotonic() < deadline:
        answer = http.post(
            "/cypher", json={"query": "MATCH (s:Session) RETURN s.node_id AS id", "workspace": workspace}
        )
        assert answer.status_code == 200, answer.text
        rows = answer.json()["results"]
        if rows:
            return rows
        time.sleep(0.2)
    return rows


def test_conversation_events_reach_the_graph_live_and_by_backfill(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    events = [
        {"type": "user", "runId": "u1", "content": "hi"},
        {"type": "harness_start", "runId": "a1", "parentId": "u1:user"},
        {"type": "tool_call", "runId": "a1", "id": "a1/c1", "name": "bash", "input": {"cmd": "ls"}},
        {"type": "tool_result", "runId": "a1", "id": "a1/c1", "name": "bash", "output": {"context": "ok"}},
        {"type": "harness_end", "runId": "a1"},
    ]
    with running_server(data_dir) as server, httpx.Client(base_url=server.url, timeout=20) as http:
        post(http, "live:c1", events)
        assert _sessions(http, "live") == [{"id": "c1"}]
    # Stored while the graph service is off: fed by the backfill at the next start.
    with (
        running_server(data_dir, "--no-intelligence") as server,
        httpx.Client(base_url=server.url, timeout=20) as http,
    ):
        post(http, "later:c2", events)
    with running_server(data_dir) as server, httpx.Client(base_url=server.url, timeout=20) as http:
        assert _sessions(http, "later") == [{"id": "c2"}]
        assert _sessions(http, "live") == [{"id": "c1"}]
