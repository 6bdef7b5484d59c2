"""Which agents are attached to which conversation, and the control messages sent to them.

An agent **attaches** to a conversation by holding its control stream open
(``GET /v1/conversations/{cid}/agents/{agentId}/control``, `convograph.server.runs`): while the
stream is open the agent is listed as connected; when it closes, the agent stays listed (not
connected) for a **lease** of `LEASE_SECONDS`, so a reconnect (a network blip, a server restart)
does not make it flicker away, and then it is forgotten. There is no other heartbeat: the stream's
own heartbeats keep the connection alive, and a dead agent's connection closes.

Control messages (today: ``cancel``) are queued on every connected stream of the conversation; an
agent acts on those about its own runs. Presence lives in this server process: it is not in the
event log (it is not history), so a restart starts empty and agents reconnect within a second or
two; agents attached to another server sharing the same event log are not listed here.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Final

import msgspec

from convograph.server.live import Wakeable

__all__ = ["LEASE_SECONDS", "AgentInfo", "Attachment", "Presence"]

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

    def close(self) -> None:
        """End every control stream (server shutdown). Idempotent."""
        self.closed = True
        for agents in self._by_conversation.values():
            for entry in agents.values():
                entry.wakeup.end("shutdown")

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
        return entry

    def leave(self, conversation_id: str, entry: Attachment) -> None:
        """One control stream of ``entry`` closed; the agent's lease starts when its last one did."""
        entry.streams = max(0, entry.streams - 1)
        if entry.streams == 0:
            entry.left_at = time.time()
            entry.info = msgspec.structs.replace(entry.info, connected=False, last_seen=entry.left_at)

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
