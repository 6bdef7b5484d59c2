"""``convograph serve``: run the HTTP server (embedded defaults need no flags)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from convograph.cli.app import app, err_console
from convograph.server.auth import KeyRing
from convograph.server.config import ConfigError, ServerConfig, is_loopback, parse_headers

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def _check_settings(config: ServerConfig, log_level: str) -> None:
    """Refuse, before the server starts, what would otherwise fail inside its startup with a
    traceback: an unusable data directory, a malformed event log or graph URL, a bad log level."""
    from convograph.intelligence.shards import parse_graph_urls
    from convograph.store.url import check_event_log_url

    if log_level.lower() not in LOG_LEVELS:
        raise ValueError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    data_dir = config.data_dir
    if data_dir.exists() and not data_dir.is_dir():
        raise ValueError(f"data directory {data_dir} exists and is not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create data directory {data_dir}: {exc.strerror or exc}") from None
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise ValueError(f"data directory {data_dir} is not writable")
    if config.database_url:
        check_event_log_url(config.database_url)
    if config.graph_url and config.intelligence:
        parse_graph_urls(config.graph_url)


def _database_keys(config: ServerConfig, keys: KeyRing) -> KeyRing:
    """The key file's keys and those of a shared database (`convograph.server.keystore`), if any."""
    from convograph.server.keystore import PostgresKeyStore
    from convograph.store.url import shared_postgres

    conninfo = shared_postgres(config.database_url)
    if conninfo is None:
        return keys
    try:
        return KeyRing([*keys.keys(), *PostgresKeyStore(conninfo).load()])
    except Exception:  # unreachable now: the server's own start says why
        return keys


# The options of `serve`, one alias each (so the command reads as its list of flags).
_Host = Annotated[str | None, typer.Option(help="Address to bind \\[default: 127.0.0.1].")]
_Port = Annotated[int | None, typer.Option(help="Port \\[default: 8321].")]
_DataDir = Annotated[Path | None, typer.Option(help="Where embedded stores live \\[default: ./.convograph].")]
_DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        help="Event log URL: sqlite:///…, postgresql://…, redis://…?finalize=…, redis+cluster://h:p,h:p"
    ),
]
_GraphUrl = Annotated[
    list[str] | None,
    typer.Option(
        help="FalkorDB server, falkordb://host:port \\[default: embedded]; repeat it (or separate URLs"
        " by commas) to spread the workspaces over several servers (docs/intelligence.md)."
    ),
]
_ApiKeyFile = Annotated[Path | None, typer.Option(help="JSON key file (see `convograph keys create`).")]
_AllowPublicWithoutKeys = Annotated[
    bool, typer.Option(help="Allow binding a non-loopback address with no API keys.")
]
_Intelligence = Annotated[
    bool | None, typer.Option("--intelligence/--no-intelligence", help="Serve /events, /cypher, /blobs.")
]
_RetentionDays = Annotated[
    float | None,
    typer.Option(help="Forget context-intelligence sessions idle for longer than this many days."),
]
_QueryTimeoutMs = Annotated[
    int | None, typer.Option(help="Time limit of one /cypher query in ms \\[default: 10000].")
]
_QueryMemoryMb = Annotated[
    int | None, typer.Option(help="Memory limit of one /cypher query in MB \\[default: 512].")
]
_QuerySlots = Annotated[
    int | None, typer.Option(help="/cypher queries in the graph engine at once \\[default: 4].")
]
_QuerySlotsPerKey = Annotated[
    int | None, typer.Option(help="Of those, queries one API key may hold \\[default: 2].")
]
_MaxStreams = Annotated[
    int | None, typer.Option(help="Live streams (SSE) open at once; 429 beyond \\[default: 1024].")
]
_MaxStreamsPerKey = Annotated[
    int | None, typer.Option(help="Live streams open at once per API key \\[default: 256].")
]
_MaxStreamsPerClient = Annotated[
    int | None,
    typer.Option(help="Live streams open at once per client address, without API keys \\[default: 256]."),
]
_OtlpEndpoint = Annotated[
    str | None,
    typer.Option(help="Forward conversations as OpenTelemetry GenAI spans to this OTLP/HTTP endpoint."),
]
_OtlpHeader = Annotated[
    list[str] | None,
    typer.Option(help="KEY=VALUE header of each forwarding request (repeatable), e.g. an API key."),
]
_AllWorkspacesGraph = Annotated[
    bool | None,
    typer.Option(
        "--all-workspaces-graph/--no-all-workspaces-graph",
        help='Keep one graph of every workspace, so a "*" query answers as one database \\[default: on].',
    ),
]
_LogLevel = Annotated[
    str, typer.Option(help="uvicorn log level: critical, error, warning, info, debug or trace.")
]
_Workers = Annotated[
    int,
    typer.Option(
        min=1,
        help="Server processes sharing the port; above 1 the stores must be shared"
        " (--database-url postgresql://…, --graph-url falkordb://…; docs/deploy.md).",
    ),
]


@app.command()
def serve(
    host: _Host = None,
    port: _Port = None,
    data_dir: _DataDir = None,
    database_url: _DatabaseUrl = None,
    graph_url: _GraphUrl = None,
    api_key_file: _ApiKeyFile = None,
    allow_public_without_keys: _AllowPublicWithoutKeys = False,
    intelligence: _Intelligence = None,
    retention_days: _RetentionDays = None,
    query_timeout_ms: _QueryTimeoutMs = None,
    query_memory_mb: _QueryMemoryMb = None,
    query_slots: _QuerySlots = None,
    query_slots_per_key: _QuerySlotsPerKey = None,
    max_streams: _MaxStreams = None,
    max_streams_per_key: _MaxStreamsPerKey = None,
    max_streams_per_client: _MaxStreamsPerClient = None,
    otlp_endpoint: _OtlpEndpoint = None,
    otlp_header: _OtlpHeader = None,
    all_workspaces_graph: _AllWorkspacesGraph = None,
    log_level: _LogLevel = "info",
    workers: _Workers = 1,
) -> None:
    """Serve the HTTP API (and the web viewer) until interrupted."""
    from convograph.server.app import StartupFailed, serve_app
    from convograph.server.workers import serve_workers

    try:
        config = ServerConfig.from_env(
            host=host,
            port=port,
            data_dir=data_dir,
            database_url=database_url,
            graph_url=",".join(graph_url) if graph_url else None,
            api_key_file=api_key_file,
            allow_public_without_keys=allow_public_without_keys or None,
            intelligence=intelligence,
            retention_days=retention_days,
            query_timeout_ms=query_timeout_ms,
            query_memory_mb=query_memory_mb,
            query_slots=query_slots,
            query_slots_per_key=query_slots_per_key,
            max_streams=max_streams,
            max_streams_per_key=max_streams_per_key,
            max_streams_per_client=max_streams_per_client,
            otlp_endpoint=otlp_endpoint,
            otlp_headers=parse_headers(otlp_header, "--otlp-header") if otlp_header else None,
            all_workspaces_graph=all_workspaces_graph,
        )
        keys = KeyRing.load(config.api_key_file)
        _check_settings(config, log_level)
    except (ConfigError, ValueError) as exc:
        err_console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    if not keys.enabled and not is_loopback(config.host) and not config.allow_public_without_keys:
        keys = _database_keys(config, keys)
    if not keys.enabled and not is_loopback(config.host) and not config.allow_public_without_keys:
        err_console.print(
            f"[red]error:[/] refusing to serve {config.host} without API keys: anyone on the network could "
            "read and write conversations. Create keys (`convograph keys create`) and pass --api-key-file, "
            "or pass --allow-public-without-keys."
        )
        raise typer.Exit(2)
    try:
        if workers > 1:
            serve_workers(config, workers, log_level=log_level)
        else:
            serve_app(config, log_level=log_level)
    except StartupFailed as exc:
        err_console.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None
