"""The ``anthropic`` SDK: Messages, as an `SdkApi` adapter, and what to patch.

Patched (sync and async resource classes): ``messages.create`` (``stream=True`` too) and ``parse``,
and ``messages.stream()``, whose stream manager sends the request itself when entered: its request
is wrapped so the raw stream it opens is observed (the ``MessageStream`` helper reads that raw
stream, so ``text_stream``, ``until_done`` and ``get_final_message`` are all seen). Output goes
through the provider harness's `MessagesTranslator`.

Entry keys, one per content block with its role (so how the app splits or merges messages does not
matter; compared with the conversation's ``anthropic`` messages projection, docs/integrations.md):
a string content is one text block; ``text`` blocks by their text (adjacent text blocks of one
assistant message joined as the projection joins them, paragraphs apart); ``thinking`` with its
signature (unsigned thinking is left out, as the API cannot take it back); ``redacted_thinking``
by its data; ``tool_use`` by id, name and input; ``tool_result`` by id and text; base64 (and plain
text) images and documents by media type and data; other sources as a stand-in text; server-tool
blocks are left out; ``cache_control``, ``citations`` and ``is_error`` are not compared.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

import anthropic
from anthropic.types import Message

from convograph.events import ContentPart, DocumentPart, Event, ImagePart, TextPart
from convograph.harness.base import MessageFormat
from convograph.harness.ids import new_id
from convograph.harness.providers.anthropic_messages import MessagesTranslator, classify_anthropic
from convograph.harness.providers.base import Translator
from convograph.integrations.instrument.history import (
    Entry,
    RequestEvents,
    joined_text,
    merge_call_turns,
    plain,
    stand_in,
)
from convograph.projections.history import (
    EMPTY_RESULT_TEXT,
    PARAGRAPH_BREAK,
    is_anthropic_tool_id,
    stand_in_tool_id,
)

__all__ = ["MESSAGES", "PATCHES", "STREAM_MANAGERS", "MessagesApi"]


def _call_id(raw: Any) -> str:
    """A tool use id as the projection renders it (ids the API rejects get a stand-in)."""
    call_id = raw if isinstance(raw, str) else ""
    return call_id if is_anthropic_tool_id(call_id) else stand_in_tool_id(call_id)


def _media(block: dict[str, Any]) -> ContentPart:
    """An image or document block as a content part (base64 or plain-text sources), else a
    stand-in text part."""
    kind = str(block.get("type"))
    source = plain(block.get("source") or {})
    if (
        isinstance(source, dict)
        and source.get("type") in ("base64", "text")
        and isinstance(source.get("data"), str)
    ):
        media_type = str(source.get("media_type", "text/plain" if source.get("type") == "text" else ""))
        if kind == "image":
            return ImagePart(media_type=media_type, data=source["data"])
        return DocumentPart(media_type=media_type, data=source["data"])
    detail = source.get("url") or source.get("file_id") if isinstance(source, dict) else None
    return TextPart(text=stand_in(kind, detail))


def _result_text(content: Any) -> str:
    """A ``tool_result``'s content as one text: text blocks paragraphs apart, other blocks as
    stand-ins."""
    if not isinstance(content, list):
        return content if isinstance(content, str) else ""
    texts = []
    for block in map(plain, content):
        if isinstance(block, dict) and block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif isinstance(block, dict):
            texts.append(stand_in(str(block.get("type", "block"))))
    return PARAGRAPH_BREAK.join(texts)


def _input_key(value: Any) -> str:
    if not isinstance(value, dict):
        value = {} if value is None else {"input": value}
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _block_key(block: dict[str, Any]) -> Hashable | None:
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return ("text", text) if isinstance(text, str) and text else None
    if kind == "thinking":
        signature = block.get("signature")
        return ("thinking", str(block.get("thinking", "")), signature) if signature else None
    if kind == "redacted_thinking":
        return ("redacted", str(block.get("data", "")))
    if kind == "tool_use":
        return (
            "tool_use",
            _call_id(block.get("id")),
            str(block.get("name", "")),
            _input_key(block.get("input")),
        )
    if kind == "tool_result":
        return (
            "tool_result",
            _call_id(block.get("tool_use_id")),
            _result_text(block.get("content")) or EMPTY_RESULT_TEXT,
        )
    if kind in ("image", "document"):
        part = _media(block)
        if isinstance(part, TextPart):
            return ("text", part.text)
        return (str(kind), part.media_type, part.data)
    return None  # server-tool blocks, search results, container uploads, ...


def _kind(key: Hashable) -> str:
    """`merge_call_turns`'s reading of a ``(role, block key)``: ``call``, ``result`` or other."""
    block = key[1] if isinstance(key, tuple) else ()
    return {"tool_use": "call", "tool_result": "result"}.get(block[0], "") if block else ""


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list | tuple):
        return []
    return [block for block in map(plain, content) if isinstance(block, dict)]


class MessagesApi:
    """Anthropic Messages (module docstring)."""

    name = "anthropic.messages"
    format: MessageFormat = "anthropic"
    api_name = "Anthropic"
    response_type: type = Message
    stream_types: tuple[type, ...] = (anthropic.Stream, anthropic.AsyncStream)

    def translator(self, parent_id: str | None) -> Translator:
        return MessagesTranslator(parent_id)

    def entries(self, request: Mapping[str, Any]) -> list[Entry]:
        messages = request.get("messages")
        return self._entries([plain(m) for m in messages] if isinstance(messages, list | tuple) else [])

    def history_keys(self, messages: list[dict[str, Any]]) -> list[Hashable]:
        return [entry.key for entry in self._entries(messages)]

    def merge(self, keys: list[Hashable]) -> list[Hashable]:
        return [entry.key for entry in merge_call_turns([Entry(key) for key in keys], _kind)]

    @staticmethod
    def _entries(messages: list[Any]) -> list[Entry]:
        """``(role, block key)`` entries; an entry's item is ``(role, [blocks], message)``.
        Adjacent text blocks of one assistant message are one entry (the projection joins them)."""
        out: list[Entry] = []
        for message in messages:
            if not isinstance(message, dict):
                continue
            role = str(message.get("role"))
            joinable = False
            for block in _blocks(message.get("content")):
                key = _block_key(block)
                if key is None:
                    continue
                if role == "assistant" and key[0] == "text" and joinable:  # type: ignore[index]
                    last = out[-1]
                    text = last.key[1][1] + PARAGRAPH_BREAK + key[1]  # type: ignore[index]
                    out[-1] = Entry((role, ("text", text)), (role, [*last.item[1], block], message))
                    continue
                joinable = key[0] == "text"  # type: ignore[index]
                out.append(Entry((role, key), (role, [block], message)))
        return merge_call_turns(out, _kind)

    def continues_server_state(self, request: Mapping[str, Any]) -> bool:
        return False

    def is_user(self, key: Hashable) -> bool:
        return isinstance(key, tuple) and key[0] == "user" and key[1][0] != "tool_result"

    def user_content(self, entry: Entry) -> str | list[ContentPart] | None:
        """The message's content when this entry is all of it (one block)."""
        _, blocks, message = entry.item
        content = message.get("content")
        if isinstance(content, str):
            return content
        if len(_blocks(content)) != 1:
            return None
        block = blocks[0]
        return str(block.get("text", "")) if block.get("type") == "text" else [_media(block)]

    def request_events(
        self, new: Sequence[Entry], request: Sequence[Entry], names: Mapping[str, str], parent_id: str | None
    ) -> list[Event]:
        named = dict(names)
        for entry in request:
            for block in entry.item[1]:
                if block.get("type") == "tool_use":
                    named[str(block.get("id"))] = str(block.get("name", "tool"))
        events = RequestEvents(parent_id, named)
        group: list[Entry] = []
        for entry in new:
            if group and (entry.item[0] != group[0].item[0] or entry.item[2] is not group[0].item[2]):
                self._message_events(group, events)
                group = []
            group.append(entry)
        if group:
            self._message_events(group, events)
        return events.events

    @staticmethod
    def _message_events(group: list[Entry], events: RequestEvents) -> None:
        """The events of one message's new blocks."""
        role, _, message = group[0].item
        blocks = [block for entry in group for block in entry.item[1]]
        if role == "assistant":
            run = events.assistant()
            for block in blocks:
                kind = block.get("type")
                if kind == "text":
                    events.events.append(run.text(new_id(), str(block.get("text", ""))))
                elif kind == "thinking":
                    thinking, signature = str(block.get("thinking", "")), str(block.get("signature"))
                    events.events.append(run.reasoning(new_id(), thinking, signature=signature))
                elif kind == "redacted_thinking":
                    events.events.append(
                        run.reasoning(new_id(), "", redacted_data=str(block.get("data", "")))
                    )
                elif kind == "tool_use":
                    arguments = json.dumps(block.get("input") if block.get("input") is not None else {})
                    run.calls[len(run.calls)] = [
                        str(block.get("id", "")),
                        str(block.get("name", "")),
                        arguments,
                    ]
            events.end_assistant(run)
            return
        parts: list[ContentPart] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "tool_result":
                events.result(str(block.get("tool_use_id")), _result_text(block.get("content")))
            elif kind == "text":
                parts.append(TextPart(text=str(block.get("text", ""))))
            else:
                parts.append(_media(block))
        if parts:
            whole_string = isinstance(message.get("content"), str)
            if whole_string or (len(parts) == 1 and isinstance(parts[0], TextPart)):
                events.user(
                    joined_text([{"type": "text", "text": p.text} for p in parts if isinstance(p, TextPart)])
                )
            else:
                events.user(parts)

    def feed_result(self, translator: Translator, result: Any, out: list[Event]) -> None:
        assert isinstance(translator, MessagesTranslator)
        translator.feed_message(result, out)

    def failure(self, exc: BaseException, base_url: str) -> str:
        return classify_anthropic(exc, base_url).message if isinstance(exc, Exception) else type(exc).__name__


MESSAGES: Final = MessagesApi()

PATCHES: Final = (
    ("anthropic.resources.messages", "Messages", "create", MESSAGES, "sync"),
    ("anthropic.resources.messages", "Messages", "parse", MESSAGES, "sync"),
    ("anthropic.resources.messages", "AsyncMessages", "create", MESSAGES, "async"),
    ("anthropic.resources.messages", "AsyncMessages", "parse", MESSAGES, "async"),
    ("anthropic.resources.messages", "Messages", "stream", MESSAGES, "sync-manager"),
    ("anthropic.resources.messages", "AsyncMessages", "stream", MESSAGES, "async-manager"),
)
"""``(module, class, method, api, kind)`` of every method patched (`PATCHES` of the openai module)."""

STREAM_MANAGERS: Final = {
    "sync-manager": "_MessageStreamManager__api_request",
    "async-manager": "_AsyncMessageStreamManager__api_request",
}
"""The attribute of ``messages.stream()``'s manager holding its request (a callable for the sync
manager, an awaitable for the async one), wrapped to observe the stream it opens."""
