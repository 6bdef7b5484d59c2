"""OpenAI Chat Completions adapter: a `History` as ``messages`` for ``chat.completions.create``.

Shapes (``openai.types.chat.ChatCompletionMessageParam``):

- user: ``{"role": "user", "content": str | [parts]}``; text parts as ``text``, images as
  ``image_url`` data URLs, documents as ``file`` with ``file_data`` (a data URL);
- assistant: ``{"role": "assistant", "content": str | None, "tool_calls": [...]}`` with
  ``{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}``; ``tool_calls``
  only when there are calls, ``content`` ``None`` only then;
- tool: ``{"role": "tool", "tool_call_id", "content": str}``, right after its assistant message.

An assistant message's text streams are one string, paragraphs apart (`PARAGRAPH_BREAK`).
Reasoning has no place in a Chat Completions request and is left out. Tool call ids longer than the
API's 40 characters are replaced by a stable stand-in (`safe_tool_id`), call and result alike.
"""

from __future__ import annotations

from typing import Any

from convograph.events.types import ContentPart, DocumentPart, ImagePart, TextPart
from convograph.projections.history import (
    EMPTY_RESULT_TEXT,
    PARAGRAPH_BREAK,
    AssistantTurn,
    History,
    TextBlock,
    compact_json_encoder,
    model_text,
    stand_in_tool_id,
)

__all__ = ["render_openai", "user_content_openai"]


def user_content_openai(content: str | list[ContentPart]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            url = f"data:{part.media_type};base64,{part.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(part, DocumentPart):
            data = f"data:{part.media_type};base64,{part.data}"
            parts.append({"type": "file", "file": {"file_data": data, "filename": "document"}})
    return parts if parts else ""


def render_openai(history: History) -> list[dict[str, Any]]:
    """Chat Completions messages for ``history``. O(turns + blocks)."""
    messages: list[dict[str, Any]] = []
    encode = compact_json_encoder()
    append = messages.append
    for turn in history:
        if type(turn) is not AssistantTurn:
            content = turn.content  # type: ignore[union-attr]
            append(
                {"role": "user", "content": content if type(content) is str else user_content_openai(content)}
            )
            continue
        texts = [block.text for block in turn.blocks if type(block) is TextBlock]  # `turn.text`
        text = PARAGRAPH_BREAK.join(texts) if texts else None
        calls = turn.calls
        if not calls:
            if text is not None:  # else reasoning only
                append({"role": "assistant", "content": text})
            continue
        tool_calls: list[dict[str, Any]] = []
        tool_messages: list[dict[str, Any]] = []
        for call in calls:  # the calls and their tool messages in one pass
            call_id = call.id
            if not 0 < len(call_id) <= 40:  # `safe_tool_id`'s check, inline
                call_id = stand_in_tool_id(call_id)
            tool_input = call.input
            tool_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": "{}" if tool_input is None else encode(tool_input),
                    },
                }
            )
            output = call.output
            tool_messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": model_text(output, encode) or EMPTY_RESULT_TEXT,
                }
            )
        append({"role": "assistant", "content": text, "tool_calls": tool_calls})
        messages.extend(tool_messages)
    return messages
