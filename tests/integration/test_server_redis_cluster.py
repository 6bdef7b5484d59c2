"""Two real ``convograph serve`` processes on one local 3-master Redis Cluster: what one stores the other
lists, replays and streams live (SSE resume across instances); a plain ``redis://`` URL pointed at a
cluster node is refused at startup in one line."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.server import free_port, running_server

from convograph.client.sse import SSEDecoder


def text(i: int) -> dict[str, Any]:
    return {"type": "text", "runId": "r", "id": f"t{i}", "content": f"c{i}", "eventId": f"e{i}"}


def stream_ids(url: str, headers: dict[str, str], count: int, timeout: float = 20) -> list[str]:
    ids: list[str] = []
    decoder = SSEDecoder()
    with httpx.Client(timeout=timeout) as client, client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            ids.extend(message.id for message in decoder.feed(chunk))
            if len(ids) >= count:
                break
    return ids


def test_two_servers_on_one_cluster_share_conversations_and_streams(
    redis_cluster: LocalRedisCluster, tmp_path: Path
) -> None:
    url = f"{redis_cluster.url}?prefix=cg{uuid.uuid4().hex[:12]}"
    args = ("--no-intelligence", "--database-url", url)
    with (
        running_server(tmp_path / "a", *args) as first,
        running_server(tmp_path / "b", *args) as second,
        httpx.Client(timeout=20) as http,
    ):
        conversations = [f"shared-{i}" for i in range(20)]  # spread over the three masters
        for cid in conversations:
            reply = http.post(f"{first.url}/v1/conversations/{cid}/events", json=[text(1), text(2)])
            assert reply.json() == {"accepted": 2, "duplicates": 0, "last_seq": 2}
        rows = http.get(f"{second.url}/v1/conversations").json()["conversations"]
        assert {row["id"] for row in rows} == set(conversations)
        again = http.post(f"{second.url}/v1/conversations/shared-0/events", json=[text(2), text(3)])
        assert again.json() == {"accepted": 1, "duplicates": 1, "last_seq": 3}  # dedup across servers
        seen: list[str] = []

        def reader() -> None:  # subscribe on the second, resume after seq 1
            stream = f"{second.url}/v1/conversations/shared-0/stream"
            seen.extend(stream_ids(stream, {"Last-Event-ID": "1"}, count=3))

        thread = threading.Thread(target=reader)
        thread.start()
        time.sleep(1.0)
        http.post(f"{first.url}/v1/conversations/shared-0/events", json=[text(4)])  # post to the first
        thread.join(30)
        assert seen == ["2", "3", "4"]


def test_a_plain_redis_url_at_a_cluster_node_is_one_line_and_exit_1(
    redis_cluster: LocalRedisCluster, tmp_path: Path
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "convograph",
            "serve",
            "--no-intelligence",
            "--port",
            str(free_port()),
            "--data-dir",
            str(tmp_path),
            "--database-url",
            f"redis://127.0.0.1:{redis_cluster.ports[0]}/0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "use redis+cluster://" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
