"""What the server holds while it runs, and the guards that check who may touch it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from convograph.server.auth import LOCAL_PRINCIPAL, KeyRing, Principal, Scope
from convograph.server.config import ServerConfig
from convograph.server.digests import DigestIndex
from convograph.server.errors import ApiError
from convograph.server.feeder import IntelligenceFeeder
from convograph.server.live import HubRegistry, LiveConversations, LiveState
from convograph.server.memory import MemoryTrimmer
from convograph.server.observability import Metrics
from convograph.server.presence import Presence
from convograph.server.streaming import StreamLimits
from convograph.server.summaries import ConversationListFeed
from convograph.store import AppendResult, EventLog

if TYPE_CHECKING:
    from convograph.integrations.otlp.forward import OtlpForwarder
    from convograph.integrations.otlp.http import OtlpReceiver

__all__ = [
    "ServerState",
    "admit_stream",
    "existing_conversation",
    "principal_of",
    "require",
    "server_state",
    "unknown_conversation",
]


class ServerState:
    """The running server's parts; created at startup, closed at shutdown."""

    def __init__(self, config: ServerConfig, keys: KeyRing, log: EventLog) -> None:
        self.config = config
        self.keys = keys
        self.log = log
        self.metrics = Metrics()
        self.hubs = HubRegistry(
            log, max_frames=config.sse_client_buffer, max_bytes=config.sse_client_buffer_bytes
        )
        self.presence = Presence()
        """Agents attached to conversations (`convograph.server.runs`)."""
        self.memory = MemoryTrimmer()
        self.streams = StreamLimits(
            total=config.max_streams,
            per_key=config.max_streams_per_key,
            per_client=config.max_streams_per_client,
            on_close=self.memory.request,
        )
        self.conversations = LiveConversations(log, capacity=config.conversation_cache_size)
        self.digests = DigestIndex(log)
        self.conversation_list = ConversationListFeed(log, digests=self.digests)
        self.intelligence: Any = None
        self.feeder: IntelligenceFeeder | None = None
        self.retention: asyncio.Task[None] | None = None
        self.key_refresh: asyncio.Task[None] | None = None
        """Reads the API keys of a shared database again (`convograph.server.keystore`)."""
        self.otlp: OtlpReceiver | None = None
        """``POST /v1/traces`` (`convograph.integrations.otlp`); set up by the app's lifespan."""
        self.metrics.gauges["convograph_sse_subscribers"] = lambda: self.hubs.subscriber_count
        self.metrics.gauges["convograph_sse_buffered_bytes"] = lambda: self.hubs.buffered_bytes
        self.metrics.gauges["convograph_streams_open"] = lambda: self.streams.open
        self.metrics.counters["convograph_streams_refused_total"] = lambda: self.streams.refused
        self.metrics.counters["convograph_memory_trims_total"] = lambda: self.memory.trims
        self.forwarder: OtlpForwarder | None = None
        """``--otlp-endpoint``: conversations forwarded as GenAI spans (marked on every append)."""
        self.metrics.gauges["convograph_cached_conversations"] = lambda: len(self.conversations)
        self.metrics.gauges["convograph_list_subscribers"] = lambda: self.conversation_list.listener_count
        self.metrics.gauges["convograph_conversation_digests"] = lambda: len(self.digests)
        self.fast_path_requests = 0
        """``POST /events`` requests answered by `convograph.server.fastpath` (the rest: the route)."""
        self.metrics.counters["convograph_fast_path_requests_total"] = lambda: self.fast_path_requests

    def appended(self, conversation_id: str, result: AppendResult) -> None:
        """Bring the caches and the live conversation list up to date after an append here."""
        self.conversations.stored(conversation_id, result.stored)
        if result.accepted:
            self.conversation_list.mark(conversation_id)
            if self.forwarder is not None:
                self.forwarder.mark(conversation_id)

    async def end_streams(self) -> None:
        """End every live stream (conversation SSE and the live list) cleanly. Idempotent."""
        await self.conversation_list.close()
        await self.hubs.close()
        self.presence.close()

    async def close(self) -> None:
        await self.end_streams()
        await self.presence.stop_sharing()
        await self.memory.close()
        for task in (self.retention, self.key_refresh):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self.feeder is not None:
            await self.feeder.close()
        if self.intelligence is not None:
            await self.intelligence.close()
        await self.log.close()


def server_state(connection: ASGIConnection[Any, Any, Any, Any]) -> ServerState:
    state: ServerState = connection.app.state["convograph"]
    return state


def principal_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    """Authenticate the caller (cached on the connection). Raises `ApiError` 401."""
    cached = connection.scope.get("convograph_principal")
    if isinstance(cached, Principal):
        return cached
    keys = server_state(connection).keys
    principal: Principal
    if not keys.enabled:
        principal = LOCAL_PRINCIPAL
    else:
        header = connection.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "missing API key: send `Authorization: Bearer <key>`")
        found = keys.authenticate(token.strip())
        if found is None:
            raise ApiError(401, "unknown API key")
        principal = found
    connection.scope["convograph_principal"] = principal  # type: ignore[typeddict-unknown-key]
    return principal


def require(scope: Scope) -> Callable[[ASGIConnection[Any, Any, Any, Any], BaseRouteHandler], None]:
    """A guard: the caller's key has ``scope``, and may reach the ``cid`` in the path (if any)."""

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        principal = principal_of(connection)
        if not principal.allows(scope):
            raise ApiError(403, f"this API key lacks the {scope!r} scope")
        cid = connection.path_params.get("cid")
        if cid is not None and not principal.can_reach_conversation(cid):
            raise ApiError(
                403,
                f"this API key is restricted to workspaces {sorted(principal.workspaces or ())}; "
                f"conversation {cid!r} is not named <workspace>:<id> in one of them",
                code="wrong_workspace",
            )

    return guard


def admit_stream(request: Request[Any, Any, Any]) -> Callable[[], None]:
    """Count a new live stream of ``request`` against the stream limits (per API key when the
    server has keys, else per client address; and in total): its release, or `ApiError` 429."""
    state = server_state(request)
    key_id = principal_of(request).key_id if state.keys.enabled else None
    client = request.client.host if request.client is not None else "unknown"
    return state.streams.admit(key_id=key_id, client=client)


def unknown_conversation(cid: str) -> ApiError:
    return ApiError(404, f"conversation {cid!r} has no events", code="unknown_conversation")


async def existing_conversation(state: ServerState, cid: str) -> LiveState:
    """The cached state of ``cid`` caught up with its log; 404 when it has no events."""
    live = await state.conversations.get(cid)
    if live.last_seq == 0:
        raise unknown_conversation(cid)
    return live
