"""The HTTP server (Litestar): conversation ingest, replay, SSE with resume, projections, relays,
API keys, health and metrics. ``convograph serve`` runs `create_app` under uvicorn."""

from convograph.server.app import create_app
from convograph.server.config import ConfigError, ServerConfig

__all__ = ["ConfigError", "ServerConfig", "create_app"]
