"""The protocols ``GET /v1/conversations/{cid}/stream?protocol=...`` serves besides convograph's
own frames: name -> encoder and response headers.

Each encoder is a `convograph.integrations.ui_stream.UIEventStream` made for one conversation; a
server feeds it the conversation's stored events in seq order (one per conversation for live
events, one per subscriber for what it reads from the log). Resume cursors of these streams are
``<seq>`` or ``<seq>:<chunk>`` (`convograph.integrations.ui_stream.parse_resume`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from convograph.integrations.ag_ui import AGUIEventStream
from convograph.integrations.ai_sdk import HEADERS as AI_SDK_HEADERS
from convograph.integrations.ai_sdk import AISDKStream
from convograph.integrations.ui_stream import UIEventStream

__all__ = ["PROTOCOLS", "StreamProtocol"]


@dataclass(frozen=True, slots=True)
class StreamProtocol:
    name: str
    encoder: Callable[[str], UIEventStream]
    """Conversation id -> a fresh encoder."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Response headers the protocol's clients expect (beside ``text/event-stream``)."""


PROTOCOLS: Final[dict[str, StreamProtocol]] = {
    "ag-ui": StreamProtocol("ag-ui", AGUIEventStream),
    "ai-sdk": StreamProtocol("ai-sdk", AISDKStream, AI_SDK_HEADERS),
}
