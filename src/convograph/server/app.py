"""`create_app(config)`: the Litestar application behind ``convograph serve``; `serve_app` runs it.

Startup opens the event log (and the context-intelligence service when enabled); shutdown ends
every live stream, then closes the log, which finishes pending writes first (graceful drain).
Under `serve_app` the live streams (SSE) end cleanly as soon as shutdown begins, before uvicorn
waits for open connections: clients see a finished response and reconnect, instead of waiting out
the grace period and getting a cut-off one.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from litestar import Litestar, MediaType, Request, Response, Router, get
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.routes import HTTPRoute

from convograph import __version__
from convograph.server.auth import KeyRing, Scope
from convograph.server.banner import startup_banner
from convograph.server.branches import BranchController
from convograph.server.config import ServerConfig
from convograph.server.conversations import ConversationController, live_conversation_list
from convograph.server.errors import ApiError, exception_handlers
from convograph.server.fastpath import EventsFastPath
from convograph.server.feeder import IntelligenceFeeder
from convograph.server.keystore import PostgresKeyStore, start_key_refresh
from convograph.server.openapi import WireStructSchemaPlugin
from convograph.server.otlp import export_logs, export_traces, open_forwarder, open_receiver
from convograph.server.presence_share import open_presence_share
from convograph.server.protocols import ingest_ag_ui
from convograph.server.runs import RunController
from convograph.server.search import search_conversations
from convograph.server.state import ServerState, principal_of, server_state
from convograph.store import open_event_log
from convograph.store.url import shared_postgres

__all__ = ["StartupFailed", "check_backends", "create_app", "serve_app"]

log = logging.getLogger("convograph.server")

SERVE_GC_THRESHOLDS: Final = (100_000, 50, 50)
"""`gc.set_threshold` of a ``convograph serve`` process (see `serve_app`)."""


@get("/healthz", summary="Liveness and readiness", include_in_schema=True, tags=["operations"])
async def healthz(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    state = server_state(request)
    return Response({"status": "ok", "version": __version__, "eventLog": type(state.log).__name__})


@get(
    "/status",
    summary="Status in the shape of Amplifier's context-intelligence server (no key needed)",
    tags=["operations"],
)
async def status(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    """Sessions and events only for a caller whose key may read (docs/intelligence.md, "GET /status")."""
    from convograph.intelligence.status import StatusContext, build_status

    state = server_state(request)
    try:
        caller = principal_of(request)
    except ApiError:
        caller = None  # no key, or an unknown one: the aggregate figures only
    detail = caller is not None and caller.allows("read")
    context = StatusContext(
        started_at=request.app.state.get("convograph_started_at", time.time()),
        version=__version__,
        auth_mode="static" if state.keys.enabled else "none",
        admin_api_enabled=state.keys.enabled,
        detail=detail,
        allowed_workspaces=caller.workspaces if caller is not None else None,
        graph_url=state.config.graph_url,
    )
    body = await asyncio.to_thread(
        build_status, state.intelligence if state.config.intelligence else None, context
    )
    return Response(body, media_type=MediaType.JSON)


@get("/metrics", summary="Prometheus metrics", media_type=MediaType.TEXT, tags=["operations"])
async def metrics(request: Request[Any, Any, Any]) -> str:
    return server_state(request).metrics.render()


@get("/openapi.json", summary="OpenAPI document", include_in_schema=False)
async def openapi_json(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    return Response(request.app.openapi_schema.to_schema(), media_type=MediaType.JSON)


def create_app(config: ServerConfig | None = None) -> Litestar:
    """A ready-to-serve application. Raises `ValueError` for a bad key file."""
    config = config or ServerConfig.from_env()
    keys = KeyRing.load(config.api_key_file)
    holder: dict[str, ServerState] = {}

    intelligence = _LateService()

    lifespan = _lifespan(config, keys, intelligence, holder)

    allow_by_path: dict[str, bytes] = {}  # filled once the app's routes exist, below

    async def count_request(message: Any, scope: Any) -> None:
        if message.get("type") == "http.response.start" and "state" in holder:
            holder["state"].metrics.observe_request(scope.get("method", "?"), message["status"])

    async def allow_every_method(message: Any, scope: Any) -> None:
        """Litestar 2 answers OPTIONS with the methods of the first handler registered on a path
        (litestar#4169, fixed only in v3): ``Allow`` is set here from the finished route table."""
        if message.get("type") == "http.response.start" and scope.get("method") == "OPTIONS":
            allow = allow_by_path.get(scope.get("path_template", ""))
            if allow is not None:
                message["headers"] = [
                    (name, allow if name.lower() == b"allow" else value) for name, value in message["headers"]
                ]

    committer: Any = None
    if config.intelligence:
        from convograph.intelligence.http import GroupCommit

        committer = GroupCommit(intelligence)  # type: ignore[arg-type]  # bound at startup
    app = Litestar(
        route_handlers=_route_handlers(config, intelligence, committer),
        lifespan=[lifespan],
        exception_handlers=exception_handlers,
        request_max_body_size=config.max_body_bytes,
        before_send=[count_request, allow_every_method],
        plugins=[WireStructSchemaPlugin()],
        openapi_config=OpenAPIConfig(
            title="convograph",
            version=__version__,
            description="Conversation graphs from multi-agent LLM event streams.",
            path="/schema",
            components=Components(security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer")}),
        ),
        debug=False,
    )
    app.state["convograph_committer"] = committer  # shared with `EventsFastPath`
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            allow_by_path[route.path_format] = ", ".join(sorted(route.methods)).encode()
    return app


def _lifespan(
    config: ServerConfig, keys: KeyRing, intelligence: _LateService, holder: dict[str, ServerState]
) -> Callable[[Litestar], AbstractAsyncContextManager[None]]:
    """The app's lifespan: open the event log and the server's parts (the API keys of a shared
    database, context intelligence, the OTLP receiver and forwarder) at startup, close them at
    shutdown. The running `ServerState` goes into ``app.state`` and ``holder``."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        event_log = await open_event_log(config.database_url, data_dir=config.data_dir)
        state = ServerState(config, keys, event_log)
        app.state["convograph_started_at"] = time.time()
        app.state["convograph"] = state
        holder["state"] = state
        try:
            shared = shared_postgres(config.database_url)
            if shared is not None:  # keys created on any machine count on every instance
                state.key_refresh = await start_key_refresh(PostgresKeyStore(shared), keys)
            if (share := open_presence_share(config.database_url)) is not None:
                await state.presence.start_sharing(share)  # agents attached to any instance
            if config.intelligence:
                state.intelligence = intelligence.bind(await _open_intelligence(config))
                state.feeder = IntelligenceFeeder(
                    event_log, state.intelligence, config.data_dir / "intelligence-feed.json"
                )
                state.feeder.start()
                if config.retention_days is not None:
                    state.retention = asyncio.create_task(
                        _retention_loop(state.intelligence, config), name="convograph-retention"
                    )
            state.otlp = open_receiver(state)
            if config.otlp_endpoint is not None:
                state.forwarder = open_forwarder(state)
            yield
        finally:
            if state.otlp is not None:
                await state.otlp.close()  # writes held spans before the log closes
            if state.forwarder is not None:
                await state.forwarder.close()
            await state.close()

    return lifespan


def _route_handlers(config: ServerConfig, intelligence: Any, committer: Any) -> list[Any]:
    """Every route of the app: the conversation API, the context-intelligence API when enabled
    (``committer``: its group commit of ``POST /events``), the viewer when its assets ship."""
    route_handlers: list[Any] = [
        ConversationController,
        BranchController,
        RunController,
        live_conversation_list,
        search_conversations,
        export_traces,
        export_logs,
        ingest_ag_ui,
        healthz,
        status,
        metrics,
        openapi_json,
    ]
    if config.intelligence:
        route_handlers.append(_intelligence_router(intelligence, config.max_batch_events, committer))
    route_handlers.extend(_optional_routes(config))
    return route_handlers


class StartupFailed(Exception):
    """`serve_app` could not start serving; the message says why in one line."""


async def check_backends(config: ServerConfig) -> None:
    """Reach the network backends ``config`` names (a Postgres or Redis event log, a FalkorDB server)
    and let go of them again, so an unreachable one is refused in one line before the server starts
    instead of as a traceback from inside its startup. Embedded backends need no check (the data
    directory is checked by the CLI), nor does an event log with a spool (it starts without its backend
    on purpose). Raises `StartupFailed`. One connection per backend."""
    from convograph.intelligence.engine import EngineUnavailable
    from convograph.intelligence.placement import PlacementError, connect_graph
    from convograph.intelligence.writer import GraphNames
    from convograph.store import BackendUnavailable

    url = config.database_url or ""
    networked = url.split(":", 1)[0].lower().startswith(("postgres", "redis"))
    spooled = "spool" in parse_qs(urlsplit(url).query)  # starts without its backend, by design
    if networked and not spooled:
        try:
            event_log = await open_event_log(url, data_dir=config.data_dir)
        except (BackendUnavailable, ValueError) as exc:  # ValueError: e.g. redis:// at a cluster node
            raise StartupFailed(str(exc)) from None
        await event_log.close()
    if config.intelligence and config.graph_url:
        try:  # every server answers, and holds the workspaces where the list places them
            engine = await asyncio.to_thread(connect_graph, config.graph_url, GraphNames())
        except (EngineUnavailable, PlacementError) as exc:
            raise StartupFailed(str(exc)) from None
        engine.close()


def serve_app(
    config: ServerConfig,
    *,
    log_level: str = "info",
    sockets: list[Any] | None = None,
    announce: bool = True,
    check: bool = True,
) -> None:
    """Serve ``create_app(config)`` with uvicorn until SIGINT / SIGTERM (graceful: see above).

    The serving process is an application, so it tunes the cyclic GC for its workload (the library
    never touches process-wide GC settings): young collections every 100,000 allocations instead of
    700, which saves ~5 µs of CPU per ingested event (docs/server.md).

    Raises `StartupFailed` when a backend is unreachable (`check_backends`) or the application's
    startup failed (uvicorn has logged why), so the caller can exit non-zero. ``sockets``: serve
    on these already bound sockets (a worker of `convograph.server.workers`), ``announce``: print
    the banner, ``check``: run `check_backends` first."""
    import gc

    import uvicorn

    if check:
        asyncio.run(check_backends(config))
    keys = KeyRing.load(config.api_key_file)
    gc.set_threshold(SERVE_GC_THRESHOLDS[0], SERVE_GC_THRESHOLDS[1], SERVE_GC_THRESHOLDS[2])

    class GracefulServer(uvicorn.Server):
        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets)
            if announce and self.started and self.servers and self.servers[0].sockets:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                shown = config.host if config.host not in ("0.0.0.0", "::") else host
                base_url = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}"
                print(startup_banner(config, base_url, key_count=len(keys)), file=sys.stderr, flush=True)

        async def shutdown(self, sockets: list[Any] | None = None) -> None:
            state = app.state.get("convograph")
            if isinstance(state, ServerState):
                await state.end_streams()
            await super().shutdown(sockets)

    app = create_app(config)
    uv_config = uvicorn.Config(
        EventsFastPath(app),
        host=config.host,
        port=config.port,
        log_level=log_level,
        timeout_graceful_shutdown=5,
        access_log=False,
    )
    server = GracefulServer(uv_config)
    server.run(sockets)
    if not server.started:
        raise StartupFailed("the server did not start (the log above says why)")


class _LateService:
    """Stands in for the `IntelligenceService` until the lifespan has started it."""

    def __init__(self) -> None:
        self._service: Any = None

    def bind(self, service: Any) -> Any:
        self._service = service
        return self

    def close_sync(self) -> None:
        if self._service is not None:
            self._service.close()
            self._service = None

    async def close(self) -> None:
        await asyncio.to_thread(self.close_sync)

    def __getattr__(self, name: str) -> Any:
        if self._service is None:
            raise ApiError(503, "the context-intelligence service is not running", code="unavailable")
        return getattr(self._service, name)


async def _retention_loop(service: Any, config: ServerConfig) -> None:
    """Forget sessions idle for ``config.retention_days``, now and every interval. A failed sweep
    is logged and retried at the next interval."""
    while True:
        try:
            result = await asyncio.to_thread(service.forget_idle_sessions, config.retention_days)
            if result.sessions:
                log.info(
                    "retention: forgot %d idle sessions (%d events, %d blobs); rebuilding %s",
                    result.sessions,
                    result.events,
                    result.blobs,
                    ", ".join(result.rebuilding),
                )
        except Exception as exc:
            log.warning("retention sweep failed: %s", exc)
        await asyncio.sleep(config.retention_interval_seconds)


async def _open_intelligence(config: ServerConfig) -> Any:
    from convograph.intelligence.reads import ReadLimits
    from convograph.intelligence.service import IntelligenceService

    def start() -> Any:
        limits = ReadLimits(
            memory_mb=config.query_memory_mb, slots=config.query_slots, per_key=config.query_slots_per_key
        )
        service = IntelligenceService.open(
            config.data_dir,
            graph_url=config.graph_url,
            database_url=config.database_url,
            read_limits=limits,
            query_timeout_ms=config.query_timeout_ms,
            all_workspaces_graph=config.all_workspaces_graph,
        )
        service.start()
        return service

    return await asyncio.to_thread(start)


_INTELLIGENCE_ADMIN_SUFFIXES = ("/replay", "/purge")


def _intelligence_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """``POST /events`` needs write, dead-letter replay/purge and forgetting a session admin,
    everything else read."""
    path = connection.scope["path"]
    method = connection.scope.get("method", "GET")
    if method == "DELETE" or (method == "POST" and path.endswith(_INTELLIGENCE_ADMIN_SUFFIXES)):
        scope: Scope = "admin"
    elif method == "POST" and path == "/events":
        scope = "write"
    else:
        scope = "read"
    if not principal_of(connection).allows(scope):
        raise ApiError(403, f"this API key lacks the {scope!r} scope")


def _intelligence_router(service: Any, max_batch_events: int, committer: Any) -> Any:
    from convograph.intelligence.http import Principal as CallerPrincipal
    from convograph.intelligence.http import create_intelligence_router

    def caller(request: Request[Any, Any, Any]) -> CallerPrincipal:
        principal = principal_of(request)
        return CallerPrincipal(created_by=principal.key_id, allowed_workspaces=principal.workspaces)

    return Router(
        path="/",
        route_handlers=[
            create_intelligence_router(
                service, principal=caller, max_batch_events=max_batch_events, committer=committer
            )
        ],
        guards=[_intelligence_guard],
    )


def _optional_routes(config: ServerConfig) -> list[Any]:
    """The web viewer: ``/`` (and client-side routes under ``/c/``) answer its page; assets under
    ``/static``. Absent when the package ships without its assets."""
    from litestar.static_files import create_static_files_router

    from convograph.web import STATIC_DIR, index_html

    if not (STATIC_DIR / "index.html").is_file():
        return []

    @get(["/", "/c/{path:path}", "/explore"], include_in_schema=False, media_type=MediaType.HTML)
    async def page() -> Response[bytes]:
        return Response(index_html(), media_type=MediaType.HTML, headers={"Cache-Control": "no-cache"})

    return [
        page,
        create_static_files_router(path="/static", directories=[STATIC_DIR], include_in_schema=False),
    ]
