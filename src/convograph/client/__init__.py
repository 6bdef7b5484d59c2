"""Python client for ``convograph serve`` (httpx), with a spec-compliant, resumable SSE reader."""

from convograph.client.client import ApiError, ConvographClient
from convograph.client.sse import ServerSentEvent, SSEDecoder

__all__ = ["ApiError", "ConvographClient", "SSEDecoder", "ServerSentEvent"]
