"""The gateway's own message format (seed 001 "Message Format"), as ``harness.invoke`` takes it.

- ``{"role": "user", "content": str | ContentPart[]}`` (parts in wire form, camelCase);
- ``{"role": "assistant", "content": str | None, "tool_calls": [{"id", "name", "arguments"}]}``
  (``tool_calls`` only when there are calls; ``arguments`` is the parsed input, as upstream);
- ``{"role": "tool", "tool_call_id", "content": str}`` right after its assistant message.

Same repairs as every format (placeholder results, orphan results dropped); ids are kept as they
are, since the gateway itself produced them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from convograph.projections.history import AssistantTurn, History, serialize_output

__all__ = ["render_gateway"]


def render_gateway(history: History) -> list[dict[str, Any]]:
    """Gateway messages for ``history``. O(turns + blocks)."""
    messages: list[dict[str, Any]] = []
    for turn in history:
        if not isinstance(turn, AssistantTurn):
            content = turn.content if isinstance(turn.content, str) else msgspec.to_builtins(turn.content)
            messages.append({"role": "user", "content": content})
            continue
        text = turn.text
        if text is None and not turn.calls:
            continue
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if turn.calls:
            message["tool_calls"] = [
                {"id": call.id, "name": call.name, "arguments": call.input} for call in turn.calls
            ]
        messages.append(message)
        for call in turn.calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": serialize_output(call.output)}
            )
    return messages
