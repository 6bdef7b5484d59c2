"""Which agents are attached to which conversation, and the control messages sent to them.

An agent **attaches** to a conversation by holding its control stream open
(``GET /v1/conversations/{cid}/agents/{agentId}/control``, `convograph.server.runs`): while the
stream is open the agent is listed as connected; when it closes, the agent stays listed (not
connected) for a **lease** of `LEASE_SECONDS`, so a reconnect (a network blip, a server restart)
does not make it flicker away, and then it is forgotten. There is no other heartbeat: the stream's
own heartbeats keep the connection alive, and a dead agent's connection closes.

Control messages (today: ``cancel``) are queued on every connected stream of the conversation; an
agent acts on those about its own runs. Presence is not in the event log (it is not history), so a
restart starts empty and agents reconnect within a second or two. Instances sharing an event log in
PostgreSQL or Redis share presence too (`share`, `convograph.server.presence_share`): `listed` and
`send` cover the agents attached to any instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

import msgspec

from convograph.server.live import Wakeable

__all__ = [
    "LEASE_SECONDS",
    "REFRESH_SECONDS",
    "AgentInfo",
    "Attachment",
    "Presence",
    "PresenceShare",
    "remote_view",
]

log = logging.getLogger("convograph.server")

LEASE_SECONDS: Final = 10.0
MAX_QUEUED: Final = 256
"""Control messages kept for one stream that is not reading (older ones are dropped)."""


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """An attached agent as the API lists it."""

    id: str
    """The agent process's own id (one per attachment; a reconnect keeps it)."""
    name: str
    """The agent's name, as its runs' ``agentId``."""
    model: str | None = None
    kind: str = "agent"
    """``agent`` (tool loop) or ``repl`` (the REPL harness)."""
    serving: bool = True
    """True: it answers the conversation's messages; False: it only runs what it was started with."""
    connected: bool = True
    since: float = 0.0
    """When it attached (Unix seconds)."""
    last_seen: float = 0.0
    """When its stream was last open (now while connected)."""


REFRESH_SECONDS: Final = 2.0
Deliver = Callable[[str, bytes], int]
"""Queue a control frame on this instance's connected streams of a conversation; how many got it."""


class PresenceShare(Protocol):
    """What an instance tells the others and hears from them (module docstring)."""

    instance: str

    async def start(self, deliver: Deliver) -> None:
        """Begin hearing the other instances' control messages (``deliver`` queues them here)."""

    async def write(self, conversation_id: str, agents: list[AgentInfo]) -> None:
        """Replace this instance's rows of a conversation by ``agents`` (none: delete them)."""

    async def others(self, conversation_id: str) -> list[tuple[AgentInfo, float]]:
        """Every other instance's rows of a conversation, with when each was written."""

    async def publish(self, conversation_id: str, frame: bytes) -> None:
        """Send a control frame to every other instance."""

    async def close(self) -> None: ...


def remote_view(rows: list[tuple[AgentInfo, float]], now: float) -> list[AgentInfo]:
    """The other instances' agents as this instance lists them: connected while their instance
    refreshes, then listed (not connected) until their lease ends. O(rows)."""
    listed = []
    for info, written in rows:
        alive = now - written <= 2 * REFRESH_SECONDS
        if info.connected and alive:
            listed.append(msgspec.structs.replace(info, last_seen=now))
            continue
        last_seen = info.last_seen if not info.connected else written
        if now - last_seen <= LEASE_SECONDS:
            listed.append(msgspec.structs.replace(info, connected=False, last_seen=last_seen))
    return listed


@dataclass(slots=True, eq=False)
class Attachment:
    """One attached agent's server side: its info and the control frames waiting for its stream."""

    info: AgentInfo
    outbox: deque[bytes] = field(default_factory=lambda: deque(maxlen=MAX_QUEUED))
    wakeup: Wakeable = field(default_factory=Wakeable)
    streams: int = 0
    """Open control streams (a reconnect may open the new one before the old one closed)."""
    left_at: float | None = None

    def send(self, frame: bytes) -> None:
        self.outbox.append(frame)
        self.wakeup.wake()


class Presence:
    """Attached agents per conversation (module docstring). O(agents of a conversation) per call."""

    def __init__(self, *, lease: float = LEASE_SECONDS) -> None:
        self._lease = lease
        self._by_conversation: dict[str, dict[str, Attachment]] = {}
        self.closed = False
        """Set at shutdown: every control stream ends (its agent reconnects to the next server)."""
        self.share: PresenceShare | None = None
        """The other instances' presence (None: this process is the only one)."""
        self._changed: set[str] = set()
        self._write_soon = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    def close(self) -> None:
        """End every control stream (server shutdown). Idempotent."""
        self.closed = True
        for agents in self._by_conversation.values():
            for entry in agents.values():
                entry.wakeup.end("shutdown")

    async def start_sharing(self, share: PresenceShare) -> None:
        """Share this instance's agents through ``share`` and deliver the others' control messages
        here; this instance's rows are written at once on a change and every `REFRESH_SECONDS`."""
        self.share = share
        await share.start(self.broadcast)
        self._writer = asyncio.create_task(
            self._write_loop(share, REFRESH_SECONDS), name="convograph-presence"
        )

    async def stop_sharing(self) -> None:
        """Stop writing and hearing; this instance's rows are removed (its agents reconnect elsewhere)."""
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
        if self.share is not None:
            await self.share.close()
            self.share = None

    async def _write_loop(self, share: PresenceShare, every: float) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._write_soon.wait(), every)
            self._write_soon.clear()
            changed, self._changed = self._changed | set(self._by_conversation), set()
            for conversation_id in changed:
                try:
                    await share.write(conversation_id, self.agents(conversation_id))
                except Exception as exc:  # the database is away: written again at the next refresh
                    log.warning("could not share the agents of %s: %s", conversation_id, exc)
                    self._changed.add(conversation_id)

    def _mark(self, conversation_id: str) -> None:
        if self.share is not None:
            self._changed.add(conversation_id)
            self._write_soon.set()

    def attach(self, conversation_id: str, info: AgentInfo) -> Attachment:
        """Register (or re-register, keeping ``since``) the agent whose control stream just opened."""
        agents = self._by_conversation.setdefault(conversation_id, {})
        now = time.time()
        existing = agents.get(info.id)
        since = existing.info.since if existing is not None else now
        entry = existing or Attachment(info)
        entry.info = msgspec.structs.replace(info, connected=True, since=since, last_seen=now)
        entry.streams += 1
        entry.left_at = None
        agents[info.id] = entry
        self._mark(conversation_id)
        return entry

    def leave(self, conversation_id: str, entry: Attachment) -> None:
        """One control stream of ``entry`` closed; the agent's lease starts when its last one did."""
        entry.streams = max(0, entry.streams - 1)
        if entry.streams == 0:
            entry.left_at = time.time()
            entry.info = msgspec.structs.replace(entry.info, connected=False, last_seen=entry.left_at)
            self._mark(conversation_id)

    def agents(self, conversation_id: str) -> list[AgentInfo]:
        """The attached agents (connected, or within their lease), oldest first."""
        agents = self._by_conversation.get(conversation_id)
        if not agents:
            return []
        now = time.time()
        for agent_id, entry in list(agents.items()):
            if entry.left_at is not None and now - entry.left_at > self._lease:
                del agents[agent_id]
        if not agents:
            del self._by_conversation[conversation_id]
            return []
        return sorted(
            (
                msgspec.structs.replace(e.info, last_seen=now) if e.streams else e.info
                for e in agents.values()
            ),
            key=lambda info: info.since,
        )

    def broadcast(self, conversation_id: str, frame: bytes) -> int:
        """Queue ``frame`` on every connected agent of the conversation; how many got it."""
        delivered = 0
        for entry in self._by_conversation.get(conversation_id, {}).values():
            if entry.streams:
                entry.send(frame)
                delivered += 1
        return delivered

    async def listed(self, conversation_id: str) -> list[AgentInfo]:
        """`agents` of every instance sharing presence, oldest first (an agent attached here
        wins over another instance's row of it). The others' rows unreadable: this instance's."""
        local = self.agents(conversation_id)
        if self.share is None:
            return local
        try:
            rows = await self.share.others(conversation_id)
        except Exception as exc:
            log.warning("could not read the agents other instances hold: %s", exc)
            return local
        seen = {info.id for info in local}
        remote = [info for info in remote_view(rows, time.time()) if info.id not in seen]
        return sorted([*local, *remote], key=lambda info: info.since)

    async def send(self, conversation_id: str, frame: bytes) -> int:
        """`broadcast` here and to every other instance; how many connected agents it reaches."""
        delivered = self.broadcast(conversation_id, frame)
        if self.share is None:
            return delivered
        local = {info.id for info in self.agents(conversation_id)}
        remote = [a for a in await self.listed(conversation_id) if a.connected and a.id not in local]
        if remote:
            await self.share.publish(conversation_id, frame)
        return delivered + len(remote)
