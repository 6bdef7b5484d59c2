"""The Redis Streams event log on a Redis Cluster (``redis+cluster://host:port[,host:port...]``).

Every key of a conversation carries the hash tag ``{C}`` (`convograph.store.redis`), so a
conversation lives in one slot: its append script, its MULTI blocks and its XREADs each go to the one
master that owns the slot. Two things span conversations and are laid out differently here:

- **The conversation list.** One sorted set per slot, ``P:{#<n>}:conversations``, where ``#<n>`` is
  a tag chosen to hash to that slot (`slot_tags`; ``#`` cannot start a conversation id, so no
  conversation key can collide with it). A conversation's entry therefore sits in its own slot and the
  append script updates it atomically with the events, exactly as on one node. ``P:slots`` (its own
  slot) names the slots that have held a conversation: a process adds a slot there *before* its first
  append into that slot, so the set always covers every non-empty list (it only grows; an extra slot
  costs one empty read). Listing reads ``P:slots``, then runs one Lua script per master over the
  noted slots that master owns (Redis 7's ``allow-cross-slot-keys``: keys of several slots of one
  node): it reads each slot's set and the listed conversations' ``meta`` and drops entries whose keys
  expired. The answer is the union of one atomic snapshot per master.
- **Pending finalisations** (``P:finalize``): one plain set, in whatever slot its name hashes to. It
  is written before a conversation's keys are made persistent and cleared after they get their short
  TTL (`RedisEventLog._finalize`), so it always holds every conversation still to finalise; a
  finalisation is idempotent, so an extra entry costs one retry.

Limits: a slot being migrated (resharding) may answer a listing or an append with an error until the
migration ends (the client follows MOVED / ASK for single-key commands and scripts). Only database 0
exists on a cluster.
"""

from __future__ import annotations

import asyncio
import binascii
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import redis.exceptions
from redis.asyncio.cluster import ClusterNode, RedisCluster

from convograph.events import Event
from convograph.store.base import (
    AppendResult,
    BackendUnavailable,
    ConversationInfo,
    validate_conversation_id,
)
from convograph.store.postgres import PostgresEventLog
from convograph.store.redis import RedisEventLog
from convograph.store.redis_layout import INFO_FIELDS, UNAVAILABLE, info_from

__all__ = ["CLUSTER_SCHEMES", "ClusterSettings", "RedisClusterEventLog", "parse_cluster_url", "slot_tags"]

CLUSTER_SCHEMES: Final = ("redis+cluster", "rediss+cluster")
SLOTS: Final = 16384

# One master's share of the listing: ARGV[1] = prefix, ARGV[2] = the slot tags it owns, space-separated
# (one argument: 5k separate ones cost more to pack than the script takes to run).
_LIST: Final = f"""#!lua flags=allow-cross-slot-keys
local prefix = ARGV[1]
local out = {{}}
for tag in string.gmatch(ARGV[2], '%S+') do
  local index = prefix .. ':{{' .. tag .. '}}:conversations'
  for _, cid in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    local row = redis.call('HMGET', prefix .. ':{{' .. cid .. '}}:meta', {", ".join(f"'{f}'" for f in INFO_FIELDS)})
    if row[1] then
      out[#out + 1] = cid
      for j = 1, #row do out[#out + 1] = row[j] end
    else
      redis.call('ZREM', index, cid)
    end
  end
end
return out
"""


@functools.cache
def slot_tags() -> tuple[str, ...]:
    """``tags[s]`` is a short string whose Redis Cluster hash slot is ``s`` (``#`` + hex digits).

    Found by hashing ``#0``, ``#1``, ... until every slot has one (about 118k CRC16s, ~0.1 s once per
    process); deterministic, so every process picks the same tag for a slot."""
    tags: list[str | None] = [None] * SLOTS
    missing = SLOTS
    n = 0
    while missing:
        tag = f"#{n:x}"
        slot = binascii.crc_hqx(tag.encode(), 0) % SLOTS
        if tags[slot] is None:
            tags[slot] = tag
            missing -= 1
        n += 1
    return tuple(t for t in tags if t is not None)


def key_slot_of_conversation(cid: str) -> int:
    """The slot of every key of conversation ``cid`` (its ids hold no braces, so the tag is the id)."""
    return binascii.crc_hqx(cid.encode(), 0) % SLOTS


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """What a ``redis+cluster://`` URL names: seed nodes (any reachable one finds the others)."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    ssl: bool


def _node(text: str, url: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        host, port = text, "6379"
    host = host.strip("[]")  # [::1]:7000
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"redis+cluster URL: {text!r} is not host:port in {url!r}")
    return host, int(port)


def parse_cluster_url(url: str) -> ClusterSettings:
    """Parse ``redis+cluster://[user:password@]host:port[,host:port...][/0]`` (options removed
    beforehand). Raises ValueError naming what is wrong. No I/O."""
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes = tuple(_node(item.strip(), url) for item in hosts.split(",") if item.strip())
    if not nodes:
        raise ValueError(f"redis+cluster URL needs at least one host:port, got {url!r}")
    database = parts.path.strip("/")
    if database not in ("", "0"):
        raise ValueError(f"a Redis Cluster has only database 0, got /{database} in {url!r}")
    username, _, password = userinfo.partition(":")
    return ClusterSettings(
        nodes=nodes,
        username=unquote(username) or None,
        password=unquote(password) or None,
        ssl=parts.scheme.lower().startswith("rediss"),
    )


def check_cluster_prefix(prefix: str) -> None:
    """A prefix holding a brace would change every key's hash tag (and split conversations)."""
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"redis+cluster prefix must not contain '{{' or '}}', got {prefix!r}")


class RedisClusterEventLog(RedisEventLog):
    """`RedisEventLog` on a Redis Cluster: the same keys and scripts, the conversation list per slot."""

    _slots_noted: set[int]  # slots this process has added to ``P:slots``

    @classmethod
    async def open_cluster(
        cls,
        url: str,
        *,
        archive: PostgresEventLog | None = None,
        maxlen: int = 100_000,
        ttl: float = 86_400.0,
        finalized_ttl: float = 600.0,
        prefix: str = "convograph",
        connect_timeout: float = 5.0,
        lazy: bool = False,
    ) -> RedisClusterEventLog:
        """Connect to the cluster ``url`` names. Raises `BackendUnavailable` when no seed node answers
        (unless ``lazy``), ValueError when the server is not a cluster or the URL is wrong."""
        settings = parse_cluster_url(url)
        check_cluster_prefix(prefix)
        client = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in settings.nodes],
            username=settings.username,
            password=settings.password,
            ssl=settings.ssl,
            socket_connect_timeout=connect_timeout,
            socket_timeout=30.0,
            health_check_interval=10,
            max_connections=2**31,  # per node, as the single-node pool: a live tail holds one
        )
        self = cls(
            client, archive=archive, maxlen=maxlen, ttl=ttl, finalized_ttl=finalized_ttl, prefix=prefix
        )
        self._slots_noted = set()
        await asyncio.to_thread(slot_tags)  # build the table once, off the event loop
        await self._start(lazy)
        return self

    async def _check_server(self) -> None:
        try:
            await self._client.initialize()
        except redis.exceptions.RedisClusterException as exc:
            if "cluster mode is not enabled" in str(exc).lower():
                raise ValueError(
                    "this Redis is not a Redis Cluster (cluster_enabled:0): use redis://host:port/db"
                ) from None
            raise redis.exceptions.ConnectionError(str(exc)) from exc

    def _index_key(self, cid: str) -> str:
        return f"{self.prefix}:{{{slot_tags()[key_slot_of_conversation(cid)]}}}:conversations"

    @property
    def _slots_key(self) -> str:
        """Set of the slots that have held a conversation (written before their first append)."""
        return f"{self.prefix}:slots"

    async def append(self, conversation_id: str, events: Sequence[Event]) -> AppendResult:
        """As `RedisEventLog.append`; the first append into a slot by this process first adds the
        slot to ``P:slots`` (one SADD per slot per process), so that set always covers every slot
        whose conversation list is not empty and a listing reads only those."""
        validate_conversation_id(conversation_id)
        slot = key_slot_of_conversation(conversation_id)
        if slot not in self._slots_noted:
            try:
                await self._client.sadd(self._slots_key, slot)
            except UNAVAILABLE as exc:
                raise BackendUnavailable("redis", str(exc)) from exc
            self._slots_noted.add(slot)
        return await super().append(conversation_id, events)

    async def _listed(self) -> dict[str, ConversationInfo]:
        try:
            return await self._list_per_master()
        except redis.exceptions.ResponseError as exc:  # a slot moved since the map was read
            if "non local key" not in str(exc) and "MOVED" not in str(exc):
                raise
            await self._client.nodes_manager.initialize()
            return await self._list_per_master()

    async def _list_per_master(self) -> dict[str, ConversationInfo]:
        """One script per master over the noted slots it owns: O(noted slots + conversations)."""
        noted = sorted(int(raw) for raw in await self._client.smembers(self._slots_key))
        tags = slot_tags()
        owned: dict[str, tuple[Any, list[str]]] = {}
        for slot in noted:
            node = self._client.nodes_manager.get_node_from_slot(slot)
            owned.setdefault(node.name, (node, []))[1].append(tags[slot])
        replies = await asyncio.gather(
            *(
                self._client.execute_command("EVAL", _LIST, 0, self.prefix, " ".join(held), target_nodes=node)
                for node, held in owned.values()
            )
        )
        width = 1 + len(INFO_FIELDS)
        infos: dict[str, ConversationInfo] = {}
        for reply in replies:
            for at in range(0, len(reply), width):
                cid = reply[at].decode()
                info = info_from(cid, reply[at + 1 : at + width])
                if info is not None:
                    infos[cid] = info
        return infos
