"""OpenAI Chat Completions, streaming, against any OpenAI-compatible base URL (OpenAI, vLLM,
Ollama, llama.cpp server, LM Studio, ...).

Request: ``request.system`` becomes a leading ``system`` message; tools become ``function`` tools;
``stream_options.include_usage`` asks for the usage chunk; ``max_tokens`` is sent as
``max_completion_tokens`` to OpenAI itself and as ``max_tokens`` to other base URLs (what local
servers read; ``max_tokens_field`` overrides); ``request.options`` are passed to
``chat.completions.create`` as they are (``extra_body`` for server-specific fields).

Stream: ``delta.content`` -> ``text``; ``delta.reasoning_content`` or ``delta.reasoning`` (vLLM,
DeepSeek, Ollama, OpenRouter) -> ``reasoning``; a block id lasts while deltas of one kind follow each
other; ``delta.tool_calls`` accumulate by ``index`` (the id is replaced when present, name and
argument pieces are concatenated); usage from the usage chunk (``prompt_tokens_details.cached_tokens``
as cache reads). A stream without a ``finish_reason`` ended early and is a failure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import openai

from convograph.events import Event
from convograph.harness.base import MessageFormat, ModelRequest
from convograph.harness.ids import new_id
from convograph.harness.providers.base import Failure, StreamingProvider, Translator
from convograph.harness.providers.openai_common import OPENAI_KEY_ENV, classify_openai, make_openai_client
from convograph.harness.retry import RetryPolicy, Timeouts

__all__ = ["ChatTranslator", "OpenAIChatProvider"]


class ChatTranslator(Translator):
    """Chat Completions items as events (module docstring): streamed chunks through `feed`, or
    a whole non-streaming ``ChatCompletion`` through `feed_completion` (the same rules: its
    message is one delta carrying everything)."""

    def __init__(self, parent_id: str | None) -> None:
        super().__init__(parent_id)
        self.block_kind = ""
        self.block_id = ""
        self.finish_reason: str | None = None

    def _block(self, kind: str) -> str:
        if self.block_kind != kind:
            self.block_kind = kind
            self.block_id = new_id()
        return self.block_id

    def feed(self, item: Any, out: list[Event]) -> None:
        if item.usage is not None:
            self._usage(item.usage)
        for choice in item.choices:
            if choice.index != 0:
                continue  # n > 1 is not supported: the first choice is the answer
            delta = choice.delta
            if delta is not None:
                self._delta(delta, delta.tool_calls, out)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason

    def feed_completion(self, completion: Any, out: list[Event]) -> None:
        """A non-streaming ``ChatCompletion``: its first choice's message (reasoning, text, tool
        calls in the model's order) and usage; `finish` follows as for a stream."""
        if completion.usage is not None:
            self._usage(completion.usage)
        for choice in completion.choices:
            if choice.index != 0:
                continue
            message = choice.message
            calls = [(index, call) for index, call in enumerate(message.tool_calls or ())]
            self._delta(message, calls, out)
            self.finish_reason = choice.finish_reason or "stop"

    def _delta(self, delta: Any, tool_calls: Any, out: list[Event]) -> None:
        """One delta (or a whole message): reasoning, then text, then tool call pieces."""
        extra = delta.model_extra
        if extra:
            thought = extra.get("reasoning_content") or extra.get("reasoning")
            if thought and isinstance(thought, str):
                out.append(self.reasoning(self._block("reasoning"), thought))
        if delta.content:
            out.append(self.text(self._block("text"), delta.content))
        if tool_calls:
            self._tool_deltas(tool_calls)

    def _tool_deltas(self, deltas: Any) -> None:
        """Tool call pieces: deltas with an ``index``, or ``(index, call)`` pairs of a message."""
        for delta in deltas:
            if type(delta) is tuple:
                index, delta = delta
            else:
                index = delta.index
            entry = self.calls.get(index)
            function = getattr(delta, "function", None)  # None for a message's custom tool call
            if entry is None:
                entry = self.calls[index] = [delta.id or "", ""]
            elif delta.id:
                entry[0] = delta.id
            if function is not None:
                if function.name and function.name != entry[1]:
                    entry[1] += function.name
                if function.arguments:
                    entry.append(function.arguments)

    def _usage(self, usage: Any) -> None:
        details = usage.prompt_tokens_details
        extra = usage.model_extra or {}
        cached = details.cached_tokens if details is not None else None
        written = getattr(details, "cache_write_tokens", None) if details is not None else None
        self.set_usage(
            usage.prompt_tokens or 0,
            usage.completion_tokens or 0,
            cached if cached is not None else extra.get("cache_read_input_tokens"),
            written if written is not None else extra.get("cache_creation_input_tokens"),
        )

    def finish(self, out: list[Event]) -> None:
        if self.finish_reason is None:
            raise Failure("the stream ended before the model finished (no finish_reason)", retryable=True)
        self.closing_events(out)


class OpenAIChatProvider(StreamingProvider):
    """Chat Completions provider (module docstring). Keys: ``api_key`` or ``OPENAI_API_KEY``; base
    URL: ``base_url`` or ``OPENAI_BASE_URL``."""

    api_name = "OpenAI"
    key_env = OPENAI_KEY_ENV

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens_field: Literal["max_completion_tokens", "max_tokens"] | None = None,
        retry: RetryPolicy | None = None,
        timeouts: Timeouts | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        super().__init__(retry=retry, timeouts=timeouts)
        self._api_key = api_key
        self._base_url = base_url
        self._client = client
        self.max_tokens_field = max_tokens_field or ("max_tokens" if base_url else "max_completion_tokens")

    @property
    def message_format(self) -> MessageFormat:
        return "openai"

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client (made on first use; raises `Failure` when no key is set)."""
        if self._client is None:
            self._client = make_openai_client(self._api_key, self._base_url, self.timeouts)
        return self._client

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        if self._client is not None:
            await self._client.close()

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        messages: list[Any] = list(request.messages)
        if request.system:
            messages.insert(0, {"role": "system", "content": request.system})
        params: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in request.tools
            ]
        if request.max_tokens is not None:
            params[self.max_tokens_field] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        params.update(request.options)
        return params

    async def _open(self, request: ModelRequest) -> AsyncIterator[Any]:
        stream: AsyncIterator[Any] = await self.client.chat.completions.create(**self.request_params(request))
        return stream

    def _translator(self, request: ModelRequest) -> Translator:
        return ChatTranslator(request.parent_id)

    def _classify(self, exc: Exception) -> Failure:
        return classify_openai(exc, self._base_url or "https://api.openai.com/v1")
