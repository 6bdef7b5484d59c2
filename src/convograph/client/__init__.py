"""Python client for ``convograph serve`` (httpx), with a spec-compliant, resumable SSE reader."""

from convograph.client.client import ApiError, ConvographClient, CursorPastHead
from convograph.client.sse import ServerSentEvent, SSEDecoder

__all__ = ["ApiError", "ConvographClient", "CursorPastHead", "SSEDecoder", "ServerSentEvent"]
