"""The Redis Streams log on a local 3-master Redis Cluster: where the keys live, the per-slot
conversation list, and the errors for pointing the wrong URL at the wrong server. (The whole
EventLog contract runs on the cluster in tests/test_store_contract.py.)"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
import redis
from redis.crc import key_slot

from convograph.events import Text
from convograph.store import Snapshot, open_event_log
from convograph.store.redis_cluster import RedisClusterEventLog, parse_cluster_url, slot_tags
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.server import free_port


def texts(n: int) -> list[Text]:
    return [Text(run_id="r", id="t", content=f"{i} ", event_id=f"e{i}") for i in range(n)]


async def open_cluster(url: str) -> RedisClusterEventLog:
    log = await open_event_log(f"{url}?prefix=cg{uuid.uuid4().hex[:12]}")
    assert isinstance(log, RedisClusterEventLog)
    return log


def keys_by_master(cluster: LocalRedisCluster, prefix: str) -> dict[int, list[bytes]]:
    """Every key under ``prefix``, by the port of the master that holds it (read from each node)."""
    out: dict[int, list[bytes]] = {}
    for port in cluster.ports:
        client = redis.Redis(port=port)
        try:
            out[port] = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        finally:
            client.close()
    return out


def test_slot_tags_hash_to_their_slot() -> None:
    tags = slot_tags()
    assert len(tags) == 16384
    assert all(key_slot(f"p:{{{tag}}}:conversations".encode()) == slot for slot, tag in enumerate(tags))
    assert all(tag.startswith("#") for tag in tags)  # no conversation id starts with '#'


def test_cluster_urls_parse() -> None:
    settings = parse_cluster_url("rediss+cluster://me:p%40ss@10.0.0.1:7000,[::1]:7001,host")
    assert settings.nodes == (("10.0.0.1", 7000), ("::1", 7001), ("host", 6379))
    assert (settings.username, settings.password, settings.ssl) == ("me", "p@ss", True)


async def test_a_conversations_keys_and_its_list_entry_share_one_slot(
    redis_cluster: LocalRedisCluster,
) -> None:
    log = await open_cluster(redis_cluster.url)
    try:
        conversations = [f"conv-{i}" for i in range(12)]
        for cid in conversations:
            await log.append(cid, texts(3))
            await log.save_snapshot(cid, Snapshot(name="s", seq=3, data=b""))
        held = keys_by_master(redis_cluster, log.prefix)
        masters = redis_cluster.masters()
        slots_of: dict[str, set[int]] = {}
        for port, keys in held.items():
            ranges = masters[f"127.0.0.1:{port}"]
            for key in keys:
                slot = key_slot(key)
                assert any(first <= slot <= last for first, last in ranges), (key, port)
                if key == f"{log.prefix}:slots".encode():  # the one key outside any conversation's slot
                    continue
                tag = key.decode().split("{", 1)[1].split("}", 1)[0]
                if not tag.startswith("#"):
                    slots_of.setdefault(tag, set()).add(slot)
        assert set(slots_of) == set(conversations)
        for cid, slots in slots_of.items():
            assert slots == {key_slot(f"{{{cid}}}".encode())}
            index = log._index_key(cid)
            assert key_slot(index.encode()) in slots
            assert await log._client.zscore(index, cid) is not None
    finally:
        await log.close()


async def test_conversations_spread_over_all_masters_and_are_all_listed(
    redis_cluster: LocalRedisCluster,
) -> None:
    log = await open_cluster(redis_cluster.url)
    try:
        conversations = [f"c-{uuid.uuid4().hex[:8]}" for _ in range(300)]
        for cid in conversations:
            await log.append(cid, texts(1))
        held = keys_by_master(redis_cluster, log.prefix)
        streams_per_master = Counter(
            {port: sum(k.endswith(b":stream") for k in keys) for port, keys in held.items()}
        )
        assert sum(streams_per_master.values()) == 300
        assert len(streams_per_master) == 3
        assert min(streams_per_master.values()) >= 50  # ~100 each; < 50 has probability ~1e-10
        noted = {int(raw) for raw in await log._client.smembers(f"{log.prefix}:slots")}
        assert noted == {key_slot(f"{{{cid}}}".encode()) for cid in conversations}
        listed = await log.list_conversations()
        assert sorted(i.id for i in listed) == sorted(conversations)
        other_process = await open_event_log(f"{redis_cluster.url}?prefix={log.prefix}")
        assert sorted(i.id for i in await other_process.list_conversations()) == sorted(conversations)
        await other_process.close()
        assert [i.last_activity for i in listed] == sorted((i.last_activity for i in listed), reverse=True)
        assert {(i.event_count, i.last_seq, i.status) for i in listed} == {(1, 1, "idle")}
        # Deleted: gone from the list. Expired (its keys vanish): dropped from its slot's list too.
        assert await log.delete(conversations[0])
        stream, meta, ids = log._keys(conversations[1])
        await log._client.delete(stream, meta, ids)
        listed_after = {i.id for i in await log.list_conversations()}
        assert listed_after == set(conversations[2:])
        assert await log._client.zscore(log._index_key(conversations[1]), conversations[1]) is None
    finally:
        await log.close()


async def test_any_reachable_seed_node_finds_the_cluster(redis_cluster: LocalRedisCluster) -> None:
    dead = free_port()  # nothing listens on it
    log = await open_cluster(f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{redis_cluster.ports[2]}")
    try:
        result = await log.append("seeded", texts(2))
        assert (result.first_seq, result.last_seq) == (1, 2)
        assert [s.seq for s in await log.read("seeded")] == [1, 2]
    finally:
        await log.close()


async def test_a_plain_redis_url_on_a_cluster_node_is_refused(redis_cluster: LocalRedisCluster) -> None:
    with pytest.raises(ValueError, match=r"Redis Cluster node: use redis\+cluster://"):
        await open_event_log(f"redis://127.0.0.1:{redis_cluster.ports[0]}/0")


async def test_a_cluster_url_on_a_single_redis_is_refused(redis_url: str) -> None:
    address = redis_url.removeprefix("redis://").split("/", 1)[0]
    with pytest.raises(ValueError, match=r"not a Redis Cluster .*use redis://"):
        await open_event_log(f"redis+cluster://{address}")


async def test_after_slots_move_to_another_master_everything_is_still_found(
    redis_cluster: LocalRedisCluster,
) -> None:
    """A client whose slot map is stale (slots resharded under it): appends follow MOVED, the
    listing reloads the map and asks the new owners."""
    log = await open_cluster(redis_cluster.url)
    try:
        conversations = [f"moving-{i}" for i in range(60)]
        for cid in conversations:
            await log.append(cid, texts(1))
        await log.list_conversations()  # the map is loaded
        owners = redis_cluster.masters()
        slot = key_slot(b"{moving-0}")
        source = next(a for a, held in owners.items() if any(lo <= slot <= hi for lo, hi in held))
        target = next(a for a in owners if a != source)
        ids = redis_cluster.node_ids()
        redis_cluster.cli(
            "--cluster",
            "reshard",
            f"127.0.0.1:{redis_cluster.ports[0]}",
            "--cluster-from",
            ids[source],
            "--cluster-to",
            ids[target],
            "--cluster-slots",
            "2000",
            "--cluster-yes",
        )
        assert sorted(i.id for i in await log.list_conversations()) == sorted(conversations)
        for cid in conversations:
            assert (await log.append(cid, texts(2))).conversation_last_seq == 2  # e0 is a duplicate
    finally:
        await log.close()
