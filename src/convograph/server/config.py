"""Server configuration: flags, then ``CONVOGRAPH_*`` environment variables, then defaults.

Embedded defaults need no flags: the event log is SQLite under ``./.convograph``.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any, Final

import msgspec

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "ConfigError", "ServerConfig", "is_loopback", "parse_headers"]

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8321
ENV_PREFIX: Final = "CONVOGRAPH_"


class ConfigError(ValueError):
    """A configuration that cannot be served; the message says which setting and why."""


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything `create_app` needs. Build with `ServerConfig.from_env(**overrides)`."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    data_dir: Path = Path(".convograph")
    database_url: str | None = None
    """Event log URL (``sqlite:///``, ``postgresql://``, ``redis://``, ``redis+cluster://``,
    ``memory://``); default SQLite at ``<data_dir>/events.db``."""
    graph_url: str | None = None
    """Context-intelligence graph: ``falkordb://host:port``; default embedded FalkorDB."""
    api_key_file: Path | None = None
    allow_public_without_keys: bool = False
    max_body_bytes: int = 32 * 1024 * 1024
    max_batch_events: int = 100_000
    conversation_cache_size: int = 256
    """Conversations whose graphs are kept in memory (least recently used are evicted)."""
    sse_heartbeat_seconds: float = 15.0
    sse_client_buffer: int = 4096
    """How many events a live SSE subscriber may fall behind its conversation's newest event
    before it is ended (``stream_end``; it resumes from the log): the frames each conversation
    with subscribers keeps in memory, shared by all of them."""
    sse_client_buffer_bytes: int = 8 * 1024 * 1024
    """The same bound in bytes of frames (whichever is reached first; the newest frame is kept)."""
    max_streams: int = 1024
    """Live streams (conversation SSE and the live list) open at once; 429 beyond."""
    max_streams_per_key: int = 256
    """Live streams open at once per API key (servers with keys); 429 beyond."""
    max_streams_per_client: int = 256
    """Live streams open at once per client address (servers without keys); 429 beyond."""
    intelligence: bool = True
    """Serve the context-intelligence endpoints (`POST /events`, `/cypher`, `/blobs`)."""
    retention_days: float | None = None
    """Forget context-intelligence sessions idle for longer than this many days (a sweep at start
    and every ``retention_interval_seconds``); ``None`` keeps everything."""
    retention_interval_seconds: float = 3600.0
    query_timeout_ms: int = 10_000
    """Time limit of one ``POST /cypher`` query (a ``"*"`` query shares it across workspaces)."""
    query_memory_mb: int = 512
    """Memory limit of one query statement (FalkorDB ``QUERY_MEM_CAPACITY``; on a FalkorDB server
    a server-wide setting, lowered to this when larger); 0 leaves the engine's setting."""
    query_slots: int = 4
    """Queries in the graph engine at once (the embedded engine gets two worker threads more, the
    writer's; on a server, at most its ``THREAD_COUNT`` - 2)."""
    query_slots_per_key: int = 2
    """Of those, queries one API key may hold (429 beyond it)."""
    otlp_endpoint: str | None = None
    """Forward stored conversations as OpenTelemetry GenAI spans to this OTLP/HTTP endpoint
    (`convograph.integrations.otlp.forward`); ``None``: no forwarding."""
    otlp_headers: dict[str, str] = msgspec.field(default_factory=dict)
    """Headers of every forwarding request (an API key): ``CONVOGRAPH_OTLP_HEADERS=k=v,k2=v2``."""
    all_workspaces_graph: bool = True
    """Keep the all-workspaces graph, so a ``"*"`` query answers as one database (every write to
    the graph is made twice); without it a ``"*"`` query runs per workspace."""

    @classmethod
    def from_env(cls, **overrides: object) -> ServerConfig:
        """Defaults, overridden by ``CONVOGRAPH_*`` variables, overridden by non-None ``overrides``."""
        values: dict[str, object] = {}
        env = os.environ
        kinds: tuple[tuple[str, type[Any]], ...] = (
            ("host", str),
            ("port", int),
            ("data_dir", Path),
            ("database_url", str),
            ("graph_url", str),
            ("api_key_file", Path),
            ("max_body_bytes", int),
            ("sse_heartbeat_seconds", float),
            ("sse_client_buffer", int),
            ("sse_client_buffer_bytes", int),
            ("max_streams", int),
            ("max_streams_per_key", int),
            ("max_streams_per_client", int),
            ("retention_days", float),
            ("query_timeout_ms", int),
            ("query_memory_mb", int),
            ("query_slots", int),
            ("query_slots_per_key", int),
            ("otlp_endpoint", str),
        )
        for name, kind in kinds:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw:
                try:
                    values[name] = kind(raw)
                except ValueError:
                    raise ConfigError(
                        f"{ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind.__name__}"
                    ) from None
        if env.get(ENV_PREFIX + "ALLOW_PUBLIC_WITHOUT_KEYS", "").lower() in ("1", "true", "yes"):
            values["allow_public_without_keys"] = True
        if env.get(ENV_PREFIX + "INTELLIGENCE", "").lower() in ("0", "false", "no"):
            values["intelligence"] = False
        headers = env.get(ENV_PREFIX + "OTLP_HEADERS")
        if headers:
            values["otlp_headers"] = parse_headers(headers.split(","), ENV_PREFIX + "OTLP_HEADERS")
        if env.get(ENV_PREFIX + "ALL_WORKSPACES_GRAPH", "").lower() in ("0", "false", "no"):
            values["all_workspaces_graph"] = False
        values.update({key: value for key, value in overrides.items() if value is not None})
        try:
            config = msgspec.convert(values, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"invalid server configuration: {exc}") from None
        config.validate()
        return config

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port {self.port} is outside 0-65535")
        if self.max_body_bytes < 1024:
            raise ConfigError("max_body_bytes must be at least 1024")
        if self.retention_days is not None and not self.retention_days > 0:
            raise ConfigError(f"retention_days must be a positive number of days, got {self.retention_days}")
        if not self.retention_interval_seconds > 0:
            raise ConfigError("retention_interval_seconds must be positive")
        if not 1 <= self.query_timeout_ms <= 600_000:
            raise ConfigError(f"query_timeout_ms must be 1-600000 ms, got {self.query_timeout_ms}")
        if self.query_memory_mb < 0:
            raise ConfigError(
                f"query_memory_mb must be 0 (the engine's setting) or more, got {self.query_memory_mb}"
            )
        if self.query_slots < 1 or self.query_slots_per_key < 1:
            raise ConfigError("query_slots and query_slots_per_key must be at least 1")
        for name in ("sse_client_buffer", "max_streams", "max_streams_per_key", "max_streams_per_client"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.sse_client_buffer_bytes < 65536:
            raise ConfigError(
                f"sse_client_buffer_bytes must be at least 65536, got {self.sse_client_buffer_bytes}"
            )
        if self.otlp_endpoint is not None:
            from convograph.integrations.otlp.forward import traces_url

            try:
                traces_url(self.otlp_endpoint)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None


def parse_headers(items: list[str], where: str) -> dict[str, str]:
    """``["k=v", ...]`` as a header mapping; `ConfigError` naming ``where`` for an item without ``=``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{where}: expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
