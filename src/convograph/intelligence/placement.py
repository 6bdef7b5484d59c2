"""Which graph server holds which workspace, and what happens when the list of servers changes.

The placement is a pure function of the list (`convograph.intelligence.shards.place`), so a
changed list moves workspaces. Nothing is moved or stranded silently:

- **The record.** Every server of a deployment with several keeps, beside the graphs, the list it
  was placed with: meta key ``{prefix}graph_servers`` (JSON list of `server_address`, in order).
- **At start** (`check_placement`, before the applier runs) the service refuses (`PlacementError`,
  naming what differs and the command that fixes it) when a server's record differs from the list
  it was given (a server added, removed, renamed or moved in the list), when a workspace graph is
  on a server other than the one the list places it on, or when a single server's record names
  others (their workspaces would be stranded). Otherwise it records the list on every server.
- **`rebalance`** (`convograph rebalance --graph-url a,b,c`), run while every instance is stopped
  (it refuses while a server has convograph connections), moves each workspace graph to its server
  under the new list (``DUMP`` from the old server, ``RESTORE`` on the new one, node and edge counts
  compared, then deleted from the old one), moves the all-workspaces graph and the applier's
  metadata when the first server (the home) changes, copies the applied cursor to every server,
  clears what this deployment kept on servers that left the list, and records the new list. A move
  cut short is redone by running it again (the source is deleted only after the copy is checked).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import redis

from convograph.intelligence.engine import CLIENT_NAME, FalkorEngine, connect_engine, engine_client
from convograph.intelligence.ingest import CURSOR_MARK
from convograph.intelligence.reads import ReadLimits
from convograph.intelligence.shards import ShardedEngine, parse_graph_urls, place, server_address
from convograph.intelligence.writer import GraphNames

__all__ = [
    "Move",
    "PlacementError",
    "RebalanceReport",
    "check_placement",
    "connect_graph",
    "rebalance",
    "record_key",
]

log = logging.getLogger(__name__)

_HOW = "docs/intelligence.md, 'Several graph servers'"


class PlacementError(Exception):
    """The graph servers do not hold the workspaces where the given list places them."""


class Move(msgspec.Struct, frozen=True):
    """One graph to move: from the server at ``source`` to the one at ``target`` (addresses)."""

    graph: str
    source: str
    target: str


class RebalanceReport(msgspec.Struct):
    """What `rebalance` did (or, with ``dry_run``, would do)."""

    servers: list[str]
    previous: list[str] | None
    moves: list[Move]
    left: list[str]
    """Servers that left the list (this deployment's keys removed from them)."""


def record_key(names: GraphNames) -> str:
    """The meta key holding the list of servers the workspaces were placed with."""
    return f"{names.prefix}graph_servers"


def _decode_record(value: str | bytes | None) -> list[str] | None:
    return None if value is None else list(msgspec.json.decode(value, type=list[str]))


def _target(graph: str, names: GraphNames, addresses: Sequence[str]) -> int | None:
    """Index of the server ``graph`` belongs on (None: not this deployment's graph)."""
    if graph in (names.all_graph, names.empty_graph):
        return 0
    workspace = names.workspace(graph)
    return None if workspace is None else place(workspace, addresses)


def check_placement(
    engines: Sequence[FalkorEngine], addresses: Sequence[str], names: GraphNames, *, record: bool = True
) -> None:
    """Refuse (`PlacementError`) to serve with graph servers that do not match ``addresses``; see
    the module docstring. With several servers and ``record``, record the list on each that has
    none. One ``GET`` and one ``GRAPH.LIST`` per server."""
    key = record_key(names)
    records = [_decode_record(engine.get_meta(key)) for engine in engines]
    wanted = list(addresses)
    for address, placed in zip(addresses, records, strict=True):
        if placed is not None and placed != wanted:
            raise PlacementError(
                f"the graph servers changed: the workspaces were placed on {', '.join(placed)} "
                f"(recorded on {address}), and the list given is {', '.join(wanted)}. Stop every "
                f"convograph instance, run `convograph rebalance --graph-url <the new list>` to move "
                f"them, then start with the new list ({_HOW})"
            )
    wrong = [
        Move(graph, addresses[index], addresses[target])
        for index, engine in enumerate(engines)
        for graph in engine.graphs()
        if (target := _target(graph, names, addresses)) is not None and target != index
    ]
    if wrong:
        shown = "; ".join(f"{m.graph} is on {m.source}, placed on {m.target}" for m in wrong[:5])
        raise PlacementError(
            f"{len(wrong)} graph(s) are not on the server the list places them on ({shown}"
            f"{'; ...' if len(wrong) > 5 else ''}). Stop every convograph instance and run "
            f"`convograph rebalance --graph-url {','.join(wanted)}` ({_HOW})"
        )
    if record and len(wanted) > 1:
        for engine, found in zip(engines, records, strict=True):
            if found is None:
                engine.set_meta(key, msgspec.json.encode(wanted).decode())


# -- rebalancing ---------------------------------------------------------------------------------------


def _raw(url: str) -> redis.Redis:
    """A binary-safe client (``DUMP`` payloads are bytes) that does not count as an instance."""
    return engine_client(url, decode_responses=False, client_name="convograph-rebalance")


def _graphs(client: redis.Redis) -> list[str]:
    names: Any = client.execute_command("GRAPH.LIST")  # type: ignore[no-untyped-call]
    return sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names or [])


def _instances(client: redis.Redis) -> int:
    """Connections of running convograph instances (`CLIENT_NAME`) to this server."""
    clients: Any = client.client_list()
    return sum(1 for entry in clients if entry.get("name") == CLIENT_NAME)


def _counts(client: redis.Redis, graph: str) -> tuple[int, int]:
    reply: Any = client.execute_command(  # type: ignore[no-untyped-call]
        "GRAPH.RO_QUERY",
        graph,
        "MATCH (n) RETURN count(n) AS n UNION ALL MATCH ()-[r]->() RETURN count(r) AS n",
    )
    rows = reply[1]
    return int(rows[0][0]), int(rows[1][0])


def _move(clients: dict[str, redis.Redis], move: Move) -> None:
    """Copy ``move.graph`` to its target (replacing a copy a cut-short run left), check its node and
    edge counts, then delete it from its source."""
    source, target = clients[move.source], clients[move.target]
    payload: Any = source.dump(move.graph)
    if payload is None:
        return  # gone meanwhile (moved by a run that was cut short after deleting it)
    target.restore(move.graph, 0, payload, replace=True)
    if _counts(source, move.graph) != _counts(target, move.graph):
        raise PlacementError(
            f"the copy of {move.graph} on {move.target} differs from {move.source}: kept both"
        )
    source.execute_command("GRAPH.DELETE", move.graph)  # type: ignore[no-untyped-call]


def _meta_keys(client: redis.Redis, names: GraphNames) -> list[str]:
    """This deployment's meta keys on a server (string keys naming the graph prefix)."""
    found = client.scan_iter(match=f"*{names.prefix}*", _type="string", count=1000)
    return sorted(k.decode() if isinstance(k, bytes) else str(k) for k in found)


def _plan(clients: dict[str, redis.Redis], addresses: list[str], names: GraphNames) -> list[Move]:
    """Every graph of this deployment that is not on its server under ``addresses``."""
    return [
        Move(graph, address, addresses[target])
        for address, client in clients.items()
        for graph in _graphs(client)
        if (target := _target(graph, names, addresses)) is not None and addresses[target] != address
    ]


def _previous(clients: dict[str, redis.Redis], record: list[str] | None, names: GraphNames) -> list[str]:
    """The servers the workspaces were placed on: the record; without one (a single server
    before), the servers holding this deployment's metadata, the one with more than the cursor
    (the home) first; none at all: a fresh deployment, the new list."""
    if record is not None:
        return record
    holding = {address: _meta_keys(client, names) for address, client in clients.items()}
    found = [address for address, keys in holding.items() if keys]
    found.sort(key=lambda a: all(k.startswith(CURSOR_MARK) for k in holding[a]))
    return found or list(clients)


def _settle_meta(
    clients: dict[str, redis.Redis], previous: list[str], addresses: list[str], names: GraphNames
) -> None:
    """Move the home's metadata when the home changes; give every server the applied cursor (the
    lowest any previous server had; none if one had none: everything is applied again)."""
    old_home, new_home = clients[previous[0]], clients[addresses[0]]
    home_keys = [k for k in _meta_keys(old_home, names) if not k.startswith(CURSOR_MARK)]
    if previous[0] != addresses[0]:
        for key in home_keys:
            value = old_home.get(key)
            if value is not None:
                new_home.set(key, value)
    cursors = {k for a in previous for k in _meta_keys(clients[a], names) if k.startswith(CURSOR_MARK)}
    for key in cursors:
        values = [clients[a].get(key) for a in previous]
        if any(value is None for value in values):
            for address in addresses:
                clients[address].delete(key)
        else:
            lowest = min(int(value) for value in values if value is not None)
            for address in addresses:
                clients[address].set(key, str(lowest))


def rebalance(
    urls: Sequence[str],
    names: GraphNames,
    *,
    previous_urls: Sequence[str] = (),
    dry_run: bool = False,
    force: bool = False,
    connect: Callable[[str], redis.Redis] = _raw,
) -> RebalanceReport:
    """Place every workspace graph of the deployment on its server under ``urls``; see the module
    docstring. ``previous_urls`` give credentials for servers that leave the list (otherwise they
    are reached at their recorded address). Raises `PlacementError` when an instance is still
    connected (unless ``force``), a server of the previous list does not answer, or a copy differs."""
    addresses = [server_address(url) for url in urls]
    clients = {address: connect(url) for address, url in zip(addresses, urls, strict=True)}
    try:
        key = record_key(names)
        records = [_decode_record(client.get(key)) for client in clients.values()]
        previous = next((r for r in records if r is not None), None)
        by_address = {server_address(url): url for url in previous_urls}
        for address in previous or []:
            if address not in clients:
                url = by_address.get(address) or (
                    f"unix://{address[5:]}" if address.startswith("unix:") else f"falkordb://{address}"
                )
                clients[address] = connect(url)
        for address, client in clients.items():
            try:
                busy = _instances(client)
            except redis.RedisError as exc:
                raise PlacementError(f"graph server {address} does not answer: {exc}") from None
            if busy and not force:
                raise PlacementError(
                    f"{busy} connection(s) of running convograph instances on {address}: stop every "
                    "instance before rebalancing (--force to move anyway)"
                )
        moves = _plan(clients, addresses, names)
        left = [address for address in clients if address not in addresses]
        report = RebalanceReport(servers=addresses, previous=previous, moves=moves, left=left)
        if dry_run:
            return report
        for move in moves:
            log.info("moving %s from %s to %s", move.graph, move.source, move.target)
            _move(clients, move)
        _settle_meta(clients, _previous(clients, previous, names), addresses, names)
        for address in left:
            for meta in _meta_keys(clients[address], names):
                clients[address].delete(meta)
        for address in addresses:
            clients[address].set(key, msgspec.json.encode(addresses))
        return report
    finally:
        for client in clients.values():
            client.close()


def connect_graph(
    url: str, names: GraphNames, *, limits: ReadLimits | None = None, record: bool = True
) -> FalkorEngine | ShardedEngine:
    """The engine for ``--graph-url`` (one server, or several separated by commas), checked against
    the servers' records (`check_placement`; ``record``: write the list where none is). Raises
    `EngineUnavailable` (a server does not answer), `PlacementError`, or ValueError (a bad URL)."""
    urls = parse_graph_urls(url)
    engines: list[FalkorEngine] = []
    try:
        for each in urls:
            engines.append(connect_engine(each, limits=limits))
        addresses = [server_address(each) for each in urls]
        check_placement(engines, addresses, names, record=record)
    except BaseException:
        for engine in engines:
            engine.close()
        raise
    return engines[0] if len(engines) == 1 else ShardedEngine(engines, addresses, names)
