"""Workspaces spread over several FalkorDB servers (``--graph-url a,b,c``).

Each workspace graph lives on exactly one server, chosen by **rendezvous hashing** of the workspace
name over the servers' addresses (`place`): every process computes the same placement from the same
list, with no table to keep, and adding a server moves only the workspaces that now score highest
on it (~1/N of them), removing one moves only its own. The first server listed is the **home**:
it holds what is not one workspace's — the all-workspaces graph (every write is copied there,
`convograph.intelligence.union`), the empty graph, and the applier's metadata — except the
applied-journal cursor, which is written to every server and read as the lowest of them, so a
server that restarted empty makes the applier replay the journal, exactly as one server does.

`ShardedEngine` is a `GraphEngine` over one `FalkorEngine` per server that routes each call by
graph name. Which servers hold what, and what happens when the list changes, is
`convograph.intelligence.placement`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from convograph.intelligence.engine import FalkorEngine, QueryRows, check_graph_url
from convograph.intelligence.ingest import CURSOR_MARK
from convograph.intelligence.reads import ReadLimits
from convograph.intelligence.writer import GraphNames

__all__ = ["ShardedEngine", "parse_graph_urls", "place", "server_address"]


def parse_graph_urls(text: str | Sequence[str]) -> list[str]:
    """The graph server URLs of ``--graph-url`` (repeated, or commas inside one value), in order.
    Raises ValueError naming a bad URL or a server listed twice. No I/O."""
    items = [text] if isinstance(text, str) else list(text)
    urls = [part.strip() for item in items for part in item.split(",") if part.strip()]
    if not urls:
        raise ValueError("--graph-url names no server")
    seen: dict[str, str] = {}
    for url in urls:
        check_graph_url(url)
        address = server_address(url)
        if address in seen:
            raise ValueError(f"graph server {address} is listed twice ({seen[address]!r} and {url!r})")
        seen[address] = url
    return urls


def server_address(url: str) -> str:
    """What identifies a server in the placement: ``host:port`` (host lower-cased, default port
    6379) or ``unix:<path>``; never the password. Every process must name the servers alike."""
    parsed = urlparse(url)
    if parsed.scheme == "unix":
        return f"unix:{parsed.path}"
    return f"{(parsed.hostname or '127.0.0.1').lower()}:{parsed.port or 6379}"


def _score(address: str, workspace: str) -> int:
    digest = hashlib.blake2b(f"{address}\n{workspace}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def place(workspace: str, addresses: Sequence[str]) -> int:
    """Index of the server (in ``addresses``) that holds ``workspace``: the highest rendezvous score
    (BLAKE2b of address and workspace). Stable across processes and releases; O(servers)."""
    return max(range(len(addresses)), key=lambda index: _score(addresses[index], workspace))


class ShardedEngine:
    """`GraphEngine` over several FalkorDB servers; see the module docstring. Thread-safe (each
    shard is). ``shards[i]`` is the server at ``addresses[i]``; ``shards[0]`` is the home."""

    def __init__(self, shards: Sequence[FalkorEngine], addresses: Sequence[str], names: GraphNames) -> None:
        if len(shards) != len(addresses) or not shards:
            raise ValueError("one address per shard, at least one shard")
        self.shards = list(shards)
        self.addresses = list(addresses)
        self.names = names
        self.limits: ReadLimits = self.shards[0].limits
        self._placed: dict[str, int] = {}

    @property
    def home(self) -> FalkorEngine:
        return self.shards[0]

    @property
    def memory_limit_bytes(self) -> int:
        """The smallest per-query memory limit any server reported (0: none seen yet)."""
        seen = [shard.memory_limit_bytes for shard in self.shards if shard.memory_limit_bytes]
        return min(seen, default=0)

    def shard_index(self, graph: str) -> int:
        """The server holding ``graph``: its workspace's placement; the home for other graphs."""
        workspace = self.names.workspace(graph)
        if workspace is None:
            return 0
        index = self._placed.get(workspace)
        if index is None:
            index = self._placed[workspace] = place(workspace, self.addresses)
        return index

    def engine_for(self, graph: str) -> FalkorEngine:
        return self.shards[self.shard_index(graph)]

    # -- GraphEngine -----------------------------------------------------------------------------
    def execute(
        self,
        graph: str,
        cypher: str,
        params: Mapping[str, Any] | None = None,
        *,
        read_only: bool = False,
        timeout_ms: int | None = None,
    ) -> QueryRows:
        return self.engine_for(graph).execute(
            graph, cypher, params, read_only=read_only, timeout_ms=timeout_ms
        )

    def execute_many(self, graph: str, statements: Sequence[tuple[str, Mapping[str, Any] | None]]) -> None:
        self.engine_for(graph).execute_many(graph, statements)

    def read(
        self,
        graph: str,
        cypher: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout_ms: int,
        row_cap: int,
        key: str | None = None,
    ) -> tuple[QueryRows, bool]:
        return self.engine_for(graph).read(
            graph, cypher, params, timeout_ms=timeout_ms, row_cap=row_cap, key=key
        )

    def graphs(self) -> list[str]:
        """Every server's graphs (one ``GRAPH.LIST`` each)."""
        return sorted({graph for shard in self.shards for graph in shard.graphs()})

    def get_meta(self, key: str) -> str | None:
        """The home's value; for the applied cursor, the lowest of every server's (None when one has
        none: it restarted empty, and everything is applied again)."""
        if not key.startswith(CURSOR_MARK):
            return self.home.get_meta(key)
        values = [shard.get_meta(key) for shard in self.shards]
        if any(value is None for value in values):
            return None
        return str(min(int(value) for value in values if value is not None))

    def set_meta(self, key: str, value: str) -> None:
        for shard in self.shards if key.startswith(CURSOR_MARK) else [self.home]:
            shard.set_meta(key, value)

    def delete_graph(self, graph: str) -> None:
        self.engine_for(graph).delete_graph(graph)

    def command(self, *args: Any) -> Any:
        """A raw command: ``GRAPH.<verb> <graph> ...`` (and ``GRAPH.CONSTRAINT <op> <graph>``) on the
        graph's server, anything else on the home."""
        verb = str(args[0]).upper() if args else ""
        position = 2 if verb == "GRAPH.CONSTRAINT" else 1
        if verb.startswith("GRAPH.") and verb not in ("GRAPH.LIST", "GRAPH.CONFIG") and len(args) > position:
            return self.engine_for(str(args[position])).command(*args)
        return self.home.command(*args)

    def reachable(self) -> bool:
        return all(shard.reachable() for shard in self.shards)

    def close(self) -> None:
        for shard in self.shards:
            shard.close()
