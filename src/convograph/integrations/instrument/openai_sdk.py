"""The ``openai`` SDK: Chat Completions and Responses, as `SdkApi` adapters, and what to patch.

Patched (sync and async resource classes): ``chat.completions.create`` (``stream=True`` too, and so
the ``chat.completions.stream()`` helper, which calls it) and ``parse``; ``responses.create``
(and so ``responses.stream()``) and ``parse``. Output goes through the provider harnesses'
`ChatTranslator` / `ResponsesTranslator`.

Entry keys (compared with the conversation's ``openai`` messages projection, docs/integrations.md),
one per Responses input item; Chat Completions messages are first converted to the items they stand
for (`responses_input`, the Responses provider's own conversion), so both APIs share one rule:

- a user message by its content as given (a string, or its parts: text, ``data:`` image URLs,
  ``file_data`` files; other parts as a stand-in text);
- an assistant message by its text (parts joined, refusals left out); each tool call
  (``function_call`` item, or an assistant message's ``tool_calls``) by id, name and parsed
  arguments; each result (``function_call_output``, ``tool`` message) by call id and text;
- ``system`` / ``developer`` messages, reasoning and hosted-tool items are left out; consecutive
  tool-call-only turns read as one (`merge_call_turns`).

A string input is one user message. With ``previous_response_id`` or ``conversation`` the input
holds only new items: all are recorded.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

import openai
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from convograph.events import ContentPart, DocumentPart, Event, ImagePart, TextPart
from convograph.harness.base import MessageFormat
from convograph.harness.ids import new_id
from convograph.harness.providers.base import Translator
from convograph.harness.providers.openai_chat import ChatTranslator
from convograph.harness.providers.openai_common import classify_openai
from convograph.harness.providers.openai_responses import ResponsesTranslator, responses_input
from convograph.integrations.instrument.history import (
    Entry,
    RequestEvents,
    arguments_key,
    data_url,
    deep_plain,
    given,
    joined_text,
    merge_call_turns,
    plain,
    stand_in,
)
from convograph.projections.history import EMPTY_RESULT_TEXT, EMPTY_USER_TEXT, stand_in_tool_id

__all__ = ["CHAT", "PATCHES", "RESPONSES", "ChatApi", "ResponsesApi"]

STREAM_TYPES: Final = (openai.Stream, openai.AsyncStream)
_TEXT_KINDS: Final = ("output_text", "input_text", "text")
"""Text part types of Responses message content and function call output."""


def _call_id(raw: Any) -> str:
    """A tool call id as the projection renders it (ids over 40 characters get a stand-in)."""
    call_id = raw if isinstance(raw, str) else ""
    return call_id if 0 < len(call_id) <= 40 else stand_in_tool_id(call_id)


def _user_key(content: Any) -> Hashable:
    if isinstance(content, list):
        parts = tuple(_part_key(plain(part)) for part in content)
        if any(part != ("text", "") for part in parts):
            return parts
        return EMPTY_USER_TEXT
    return content if isinstance(content, str) and content else EMPTY_USER_TEXT


def _part_key(part: Any) -> Hashable:
    converted = _user_part(part)
    if isinstance(converted, TextPart):
        return ("text", converted.text)
    if isinstance(converted, ImagePart):
        return ("image", f"data:{converted.media_type};base64,{converted.data}")
    return ("file", f"data:{converted.media_type};base64,{converted.data}")


def _user_part(part: Any) -> ContentPart:
    """A Chat Completions or Responses user content part as a convograph content part."""
    if not isinstance(part, dict):
        return TextPart(text=stand_in("part"))
    kind = part.get("type")
    if kind in ("text", "input_text"):
        return TextPart(text=str(part.get("text", "")))
    if kind in ("image_url", "input_image"):
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        decoded = data_url(url)
        if decoded is not None:
            return ImagePart(media_type=decoded[0], data=decoded[1])
        return TextPart(text=stand_in("image", url or part.get("file_id")))
    if kind in ("file", "input_file"):
        file = part.get("file") if kind == "file" else part
        file = file if isinstance(file, dict) else {}
        decoded = data_url(file.get("file_data"))
        if decoded is not None:
            return DocumentPart(media_type=decoded[0], data=decoded[1])
        return TextPart(text=stand_in("file", file.get("file_id") or file.get("file_url")))
    return TextPart(text=stand_in(str(kind or "part")))


def _kind(key: Hashable) -> str:
    """`merge_call_turns`'s reading of a key: ``call``, ``result`` or anything else."""
    return key[0] if isinstance(key, tuple) and key[0] in ("call", "result") else ""


def _user_content(content: Any) -> str | list[ContentPart]:
    if isinstance(content, list):
        return [_user_part(plain(part)) for part in content]
    return content if isinstance(content, str) else ""


class ResponsesApi:
    """The Responses API (module docstring)."""

    name = "openai.responses"
    format: MessageFormat = "openai"
    api_name = "OpenAI"
    response_type: type = Response
    stream_types: tuple[type, ...] = STREAM_TYPES

    def translator(self, parent_id: str | None) -> Translator:
        return ResponsesTranslator(parent_id)

    def entries(self, request: Mapping[str, Any]) -> list[Entry]:
        given_input = request.get("input")
        if isinstance(given_input, str):
            given_input = [{"role": "user", "content": given_input}]
        if not isinstance(given_input, list | tuple):
            return []
        return self._entries([item for item in map(deep_plain, given_input) if isinstance(item, dict)])

    def _entries(self, items: list[dict[str, Any]]) -> list[Entry]:
        keyed = [Entry(key, item) for item in items if (key := self.key(item)) is not None]
        return merge_call_turns(keyed, _kind)

    def history_keys(self, messages: list[dict[str, Any]]) -> list[Hashable]:
        return [entry.key for entry in self._entries(responses_input(messages))]

    def merge(self, keys: list[Hashable]) -> list[Hashable]:
        return [entry.key for entry in merge_call_turns([Entry(key) for key in keys], _kind)]

    @staticmethod
    def key(item: dict[str, Any]) -> Hashable | None:
        kind = item.get("type")
        if kind in (None, "message"):
            role = item.get("role")
            if role == "user":
                return ("user", _user_key(item.get("content")))
            if role == "assistant":
                text = joined_text(item.get("content"), kinds=_TEXT_KINDS)
                return ("assistant", text) if text else None
            return None  # system, developer
        if kind == "function_call":
            return (
                "call",
                _call_id(item.get("call_id")),
                str(item.get("name", "")),
                arguments_key(item.get("arguments")),
            )
        if kind == "function_call_output":
            output = joined_text(item.get("output"), kinds=_TEXT_KINDS)
            return ("result", _call_id(item.get("call_id")), output or EMPTY_RESULT_TEXT)
        return None  # reasoning and hosted-tool items

    def continues_server_state(self, request: Mapping[str, Any]) -> bool:
        return given(request.get("previous_response_id")) or given(request.get("conversation"))

    def is_user(self, key: Hashable) -> bool:
        return isinstance(key, tuple) and key[0] == "user"

    def user_content(self, entry: Entry) -> str | list[ContentPart] | None:
        return _user_content(entry.item.get("content"))

    def request_events(
        self, new: Sequence[Entry], request: Sequence[Entry], names: Mapping[str, str], parent_id: str | None
    ) -> list[Event]:
        named = dict(names)
        for entry in request:
            if entry.item.get("type") == "function_call":
                named[str(entry.item.get("call_id"))] = str(entry.item.get("name", "tool"))
        events = RequestEvents(parent_id, named)
        run: Translator | None = None  # the assistant message being recorded from the input
        for entry in new:
            item = entry.item
            kind = item.get("type")
            if kind == "function_call":
                run = run or events.assistant()
                arguments = str(item.get("arguments") or "")
                run.calls[len(run.calls)] = [
                    str(item.get("call_id", "")),
                    str(item.get("name", "")),
                    arguments,
                ]
                continue
            if item.get("role") == "assistant":
                if run is not None and run.calls:  # text after calls: the next assistant message
                    events.end_assistant(run)
                    run = None
                run = run or events.assistant()
                events.events.append(run.text(new_id(), joined_text(item.get("content"), kinds=_TEXT_KINDS)))
                continue
            if run is not None:
                events.end_assistant(run)
                run = None
            if kind == "function_call_output":
                events.result(str(item.get("call_id")), joined_text(item.get("output"), kinds=_TEXT_KINDS))
            else:
                events.user(_user_content(item.get("content")))
        if run is not None:
            events.end_assistant(run)
        return events.events

    def feed_result(self, translator: Translator, result: Any, out: list[Event]) -> None:
        assert isinstance(translator, ResponsesTranslator)
        translator.feed_response(result, out)

    def failure(self, exc: BaseException, base_url: str) -> str:
        return classify_openai(exc, base_url).message if isinstance(exc, Exception) else type(exc).__name__


class ChatApi(ResponsesApi):
    """Chat Completions (module docstring): its messages read as the Responses input items they
    convert to (`responses_input`, what the Responses provider sends), so both APIs share keys
    and event rules."""

    name = "openai.chat"
    response_type: type = ChatCompletion

    def translator(self, parent_id: str | None) -> Translator:
        return ChatTranslator(parent_id)

    def entries(self, request: Mapping[str, Any]) -> list[Entry]:
        messages = request.get("messages")
        if not isinstance(messages, list | tuple):
            return []
        plain_messages = [m for m in map(deep_plain, messages) if isinstance(m, dict)]
        return self._entries(responses_input(plain_messages))

    def continues_server_state(self, request: Mapping[str, Any]) -> bool:
        return False

    def feed_result(self, translator: Translator, result: Any, out: list[Event]) -> None:
        assert isinstance(translator, ChatTranslator)
        translator.feed_completion(result, out)


CHAT: Final = ChatApi()
RESPONSES: Final = ResponsesApi()

PATCHES: Final = (
    ("openai.resources.chat.completions", "Completions", "create", CHAT, "sync"),
    ("openai.resources.chat.completions", "Completions", "parse", CHAT, "sync"),
    ("openai.resources.chat.completions", "AsyncCompletions", "create", CHAT, "async"),
    ("openai.resources.chat.completions", "AsyncCompletions", "parse", CHAT, "async"),
    ("openai.resources.responses", "Responses", "create", RESPONSES, "sync"),
    ("openai.resources.responses", "Responses", "parse", RESPONSES, "sync"),
    ("openai.resources.responses", "AsyncResponses", "create", RESPONSES, "async"),
    ("openai.resources.responses", "AsyncResponses", "parse", RESPONSES, "async"),
)
"""``(module, class, method, api, kind)`` of every method patched; a module or class missing in
this SDK version is skipped."""
