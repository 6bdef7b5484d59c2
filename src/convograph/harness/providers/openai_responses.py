"""OpenAI Responses API, streaming.

Request: ``request.messages`` are Chat Completions messages (``message_format`` ``"openai"``, the
same history `OpenAIChatProvider` takes), converted to Responses input items: user / system /
assistant text as messages (user parts as ``input_text`` / ``input_image`` / ``input_file``),
assistant ``tool_calls`` as ``function_call`` items and tool messages as ``function_call_output``
items. ``request.system`` is ``instructions``; tools are ``function`` tools with ``strict: false``
(any JSON schema); ``max_tokens`` is ``max_output_tokens``; ``request.options`` are passed to
``responses.create`` as they are (``reasoning={"summary": "auto"}`` asks for reasoning summaries).

Stream: ``response.output_text.delta`` -> ``text`` (a block per output item and content part);
``response.reasoning_summary_text.delta`` and ``response.reasoning_text.delta`` -> ``reasoning``
(a block per summary part / content part); ``function_call`` items accumulate their argument
deltas (the ``.done`` events' full arguments win) and become ``tool_call`` events after the stream,
with the item's ``call_id`` as id; usage from ``response.completed`` (or ``response.incomplete``),
``input_tokens_details.cached_tokens`` as cache reads. ``response.failed`` and ``error`` events fail
the attempt.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import openai

from convograph.events import Event
from convograph.harness.base import MessageFormat, ModelRequest
from convograph.harness.ids import new_id
from convograph.harness.providers.base import Failure, StreamingProvider, Translator, retryable_kind
from convograph.harness.providers.openai_common import OPENAI_KEY_ENV, classify_openai, make_openai_client
from convograph.harness.retry import RetryPolicy, Timeouts

__all__ = ["OpenAIResponsesProvider", "ResponsesTranslator", "responses_input"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _user_part(part: Mapping[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "image_url":
        return {"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"}
    if kind == "file":
        file = part["file"]
        return {
            "type": "input_file",
            "file_data": file.get("file_data", ""),
            "filename": file.get("filename", "file"),
        }
    return {"type": "input_text", "text": str(part.get("text", ""))}


def responses_input(messages: Any) -> list[dict[str, Any]]:
    """Chat Completions messages as Responses input items. O(messages)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": message["tool_call_id"], "output": _text(content)}
            )
        elif role == "user":
            parts = content if isinstance(content, str) else [_user_part(p) for p in content or []]
            items.append({"role": "user", "content": parts})
        elif role == "assistant":
            if _text(content):
                items.append({"role": "assistant", "content": _text(content)})
            for call in message.get("tool_calls") or []:
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function.get("arguments") or "{}",
                    }
                )
        elif role in ("system", "developer"):
            items.append({"role": role, "content": _text(content)})
    return items


class ResponsesTranslator(Translator):
    """Responses API items as events (module docstring): stream events through `feed`, or a whole
    non-streaming ``Response`` through `feed_response` (its output items in order, then its usage,
    as the stream's ``response.completed`` would give them)."""

    def __init__(self, parent_id: str | None) -> None:
        super().__init__(parent_id)
        self.blocks: dict[tuple[str, str, int], str] = {}
        self.finished = False

    def _block(self, item_id: str, kind: str, index: int) -> str:
        key = (item_id, kind, index)
        block_id = self.blocks.get(key)
        if block_id is None:
            block_id = self.blocks[key] = new_id()
        return block_id

    def feed(self, item: Any, out: list[Event]) -> None:
        kind = item.type
        if kind == "response.output_text.delta":
            out.append(self.text(self._block(item.item_id, "text", item.content_index), item.delta))
        elif kind == "response.reasoning_summary_text.delta":
            out.append(self.reasoning(self._block(item.item_id, "summary", item.summary_index), item.delta))
        elif kind == "response.reasoning_text.delta":
            out.append(self.reasoning(self._block(item.item_id, "reasoning", item.content_index), item.delta))
        elif kind == "response.function_call_arguments.delta":
            entry = self.calls.get(item.item_id)
            if entry is not None:
                entry.append(item.delta)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self._item(item.item)
        elif kind == "response.function_call_arguments.done":
            entry = self.calls.get(item.item_id)
            if entry is not None:
                entry[2:] = [item.arguments]
        elif kind in ("response.completed", "response.incomplete"):
            self._usage(item.response.usage)
            self.finished = True
        elif kind == "response.failed":
            error = item.response.error
            code = str(getattr(error, "code", None) or "failed")
            raise Failure(
                f"the response failed ({code}: {getattr(error, 'message', '')})",
                retryable=retryable_kind(code),
            )
        elif kind == "error":
            code = str(item.code or "error")
            raise Failure(f"error in the stream ({code}: {item.message})", retryable=retryable_kind(code))

    def feed_response(self, response: Any, out: list[Event]) -> None:
        """A non-streaming ``Response``: message text, reasoning summaries and text, and function
        calls of its output, with the block ids the stream would give them; then its usage."""
        if response.status == "failed":
            error = response.error
            code = str(getattr(error, "code", None) or "failed")
            raise Failure(
                f"the response failed ({code}: {getattr(error, 'message', '')})",
                retryable=retryable_kind(code),
            )
        for item in response.output:
            kind = item.type
            if kind == "message":
                for index, part in enumerate(item.content):
                    if part.type == "output_text" and part.text:
                        out.append(self.text(self._block(item.id, "text", index), part.text))
            elif kind == "reasoning":
                for index, part in enumerate(item.summary or ()):
                    if part.text:
                        out.append(self.reasoning(self._block(item.id, "summary", index), part.text))
                for index, part in enumerate(item.content or ()):
                    if part.text:
                        out.append(self.reasoning(self._block(item.id, "reasoning", index), part.text))
            self._item(item)
        self._usage(response.usage)
        self.finished = True

    def _item(self, item: Any) -> None:
        if item.type != "function_call":
            return
        entry = self.calls.get(item.id)
        if entry is None:
            self.calls[item.id] = [item.call_id, item.name] + ([item.arguments] if item.arguments else [])
        elif item.status == "completed" or item.arguments:
            entry[:] = [item.call_id or entry[0], item.name or entry[1], item.arguments]

    def _usage(self, usage: Any) -> None:
        if usage is None:
            return
        details = usage.input_tokens_details
        cached = getattr(details, "cached_tokens", None)
        written = getattr(details, "cache_write_tokens", None)
        self.set_usage(usage.input_tokens, usage.output_tokens, cached, written)

    def finish(self, out: list[Event]) -> None:
        if not self.finished:
            raise Failure(
                "the stream ended before the model finished (no response.completed)", retryable=True
            )
        self.closing_events(out)


class OpenAIResponsesProvider(StreamingProvider):
    """Responses API provider (module docstring). Keys: ``api_key`` or ``OPENAI_API_KEY``; base
    URL: ``base_url`` or ``OPENAI_BASE_URL``."""

    api_name = "OpenAI"
    key_env = OPENAI_KEY_ENV

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        retry: RetryPolicy | None = None,
        timeouts: Timeouts | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        super().__init__(retry=retry, timeouts=timeouts)
        self._api_key = api_key
        self._base_url = base_url
        self._client = client

    @property
    def message_format(self) -> MessageFormat:
        return "openai"

    @property
    def client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = make_openai_client(self._api_key, self._base_url, self.timeouts)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``responses.create`` for ``request``."""
        params: dict[str, Any] = {
            "model": request.model,
            "input": responses_input(request.messages),
            "stream": True,
        }
        if request.system:
            params["instructions"] = request.system
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                    "strict": False,
                }
                for t in request.tools
            ]
        if request.max_tokens is not None:
            params["max_output_tokens"] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        params.update(request.options)
        return params

    async def _open(self, request: ModelRequest) -> AsyncIterator[Any]:
        stream: AsyncIterator[Any] = await self.client.responses.create(**self.request_params(request))
        return stream

    def _translator(self, request: ModelRequest) -> Translator:
        return ResponsesTranslator(request.parent_id)

    def _classify(self, exc: Exception) -> Failure:
        return classify_openai(exc, self._base_url or "https://api.openai.com/v1")
