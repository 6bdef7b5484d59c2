"""Anthropic Messages adapter: a `History` as the ``messages`` of ``messages.create``.

Shapes (``anthropic.types.MessageParam``): assistant content blocks ``thinking`` (with
``signature``) or ``redacted_thinking`` (its ``data``, as the provider sent it), ``text``, then
``tool_use`` (always last in their message); the next user message
starts with the matching ``tool_result`` blocks (``is_error`` for a denial or a placeholder),
followed by any user text. Consecutive messages of one role are merged, so roles alternate. An
assistant message's text streams are one ``text`` block, paragraphs apart (`PARAGRAPH_BREAK`).

Rules the API enforces that this adapter keeps: the first message is a user message (the
history opens with one: `convograph.projections.history`); every ``tool_use`` has a
``tool_result`` in the very next message and vice versa; ``tool_use.id`` matches ``^[a-zA-Z0-9_-]+$`` (other ids get a
stable stand-in from `safe_tool_id`); ``tool_use.input`` is an object (a non-object input is
wrapped as ``{"input": value}``); no empty text blocks, tool results or messages. Thinking without a
signature cannot be sent back (the API verifies signatures), so it is left out.
"""

from __future__ import annotations

from typing import Any

from convograph.events.types import ContentPart, DocumentPart, ImagePart, TextPart
from convograph.projections.history import (
    EMPTY_RESULT_TEXT,
    PARAGRAPH_BREAK,
    AssistantTurn,
    History,
    ThinkingBlock,
    compact_json_encoder,
    is_anthropic_tool_id,
    is_error_output,
    model_text,
    stand_in_tool_id,
)

__all__ = ["render_anthropic", "user_blocks_anthropic"]


def user_blocks_anthropic(content: str | list[ContentPart]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            source = {"type": "base64", "media_type": part.media_type, "data": part.data}
            blocks.append({"type": "image", "source": source})
        elif isinstance(part, DocumentPart):
            if part.media_type == "text/plain":
                source = {"type": "text", "media_type": "text/plain", "data": part.data}
            else:
                source = {"type": "base64", "media_type": part.media_type, "data": part.data}
            blocks.append({"type": "document", "source": source})
    return blocks


def _tool_input(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if value is None:
        return {}
    return {"input": value}


def render_anthropic(history: History) -> list[dict[str, Any]]:
    """Messages-API messages for ``history``. O(turns + blocks)."""
    messages: list[dict[str, Any]] = []
    encode = compact_json_encoder()

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            merged = messages[-1]["content"] + blocks
            first = "tool_result" if role == "user" else None
            if first is not None:  # tool results lead a user message
                merged = [b for b in merged if b["type"] == first] + [b for b in merged if b["type"] != first]
            else:  # tool_use blocks close an assistant message
                merged = [b for b in merged if b["type"] != "tool_use"] + [
                    b for b in merged if b["type"] == "tool_use"
                ]
            messages[-1]["content"] = merged
        else:
            messages.append({"role": role, "content": blocks})

    for turn in history:
        if type(turn) is not AssistantTurn:
            push("user", user_blocks_anthropic(turn.content))  # type: ignore[union-attr]
            continue
        blocks: list[dict[str, Any]] = []
        for block in turn.blocks:
            if type(block) is ThinkingBlock:
                if block.redacted_data:
                    blocks.append({"type": "redacted_thinking", "data": block.redacted_data})
                elif block.signature:
                    blocks.append({"type": "thinking", "thinking": block.text, "signature": block.signature})
            elif not block.text:  # a TextBlock
                continue
            elif blocks and blocks[-1]["type"] == "text":  # (unsigned thinking left out between)
                blocks[-1] = {"type": "text", "text": blocks[-1]["text"] + PARAGRAPH_BREAK + block.text}
            else:
                blocks.append({"type": "text", "text": block.text})
        calls = turn.calls
        results: list[dict[str, Any]] = []
        for call in calls:  # tool_use blocks and their results in one pass
            call_id = call.id
            if not is_anthropic_tool_id(call_id):  # `safe_tool_id`, inline
                call_id = stand_in_tool_id(call_id)
            tool_input = call.input
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call_id,
                    "name": call.name,
                    "input": tool_input if isinstance(tool_input, dict) else _tool_input(tool_input),
                }
            )
            output = call.output
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": model_text(output, encode) or EMPTY_RESULT_TEXT,
            }
            if call.missing or is_error_output(output):  # a placeholder, a denial or a failure
                result["is_error"] = True
            results.append(result)
        if not blocks:
            continue
        if messages and messages[-1]["role"] == "assistant":
            push("assistant", blocks)
        else:
            messages.append({"role": "assistant", "content": blocks})
        if results:
            push("user", results)
    return messages
