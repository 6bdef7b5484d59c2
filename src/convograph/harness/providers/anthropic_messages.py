"""Anthropic Messages, streaming, with extended thinking and tool use.

Request: ``request.messages`` are Messages-API messages (``project_messages(..., format="anthropic")``);
``request.system`` is the ``system`` parameter; tools become ``{name, description, input_schema}``;
``max_tokens`` (required by the API) defaults to `AnthropicProvider.default_max_tokens`, raised
above the thinking budget when ``options["thinking"]`` sets one; ``request.options`` are passed to
``messages.create`` as they are (``thinking``, ``tool_choice``, ``metadata``, ...).

Stream, per content block (a block id per block index):

- ``text_delta`` -> ``text``; ``thinking_delta`` -> ``reasoning``;
- ``signature_delta`` -> a ``reasoning`` event of the same block with empty content and the
  ``signature`` (the projections send the block back verbatim under it);
- a ``redacted_thinking`` block -> one ``reasoning`` event with empty content and
  ``redactedData`` = its ``data``;
- ``tool_use`` blocks accumulate their ``input_json_delta`` pieces and become ``tool_call`` events
  after the stream;
- usage: ``message_start`` and ``message_delta`` usage; ``inputTokens`` is the whole prompt
  (``input_tokens`` + cache reads + cache writes), with ``cacheReadTokens`` /
  ``cacheCreationTokens`` from ``cache_read_input_tokens`` / ``cache_creation_input_tokens``.

An ``error`` event in the stream (``overloaded_error``, ``api_error``, ...) fails the attempt
(retried when nothing had streamed yet); a stream without ``message_stop`` ended early.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any, Final

import anthropic

from convograph.events import Event
from convograph.harness.base import MessageFormat, ModelRequest
from convograph.harness.ids import new_id
from convograph.harness.providers.base import (
    Failure,
    StreamingProvider,
    Translator,
    classify_status,
    classify_transport,
    detail_of,
    retryable_kind,
)
from convograph.harness.retry import RetryPolicy, Timeouts

__all__ = ["ANTHROPIC_KEY_ENV", "AnthropicProvider", "MessagesTranslator", "classify_anthropic"]

ANTHROPIC_KEY_ENV: Final = "ANTHROPIC_API_KEY"
_NO_KEY: Final = "no-key-set"


class MessagesTranslator(Translator):
    """Messages API items as events (module docstring): stream events through `feed`, or a whole
    non-streaming ``Message`` through `feed_message` (each content block as its
    ``content_block_start`` would give it, a thinking block's signature as its ``signature_delta``
    would, then the usage and the stop)."""

    def __init__(self, parent_id: str | None) -> None:
        super().__init__(parent_id)
        self.blocks: dict[int, str] = {}
        self.start_inputs: dict[int, str] = {}
        self.tokens = [0, 0, 0, 0]
        """input (uncached), output, cache read, cache creation: the latest reported values."""
        self.stopped = False

    def _block(self, index: int) -> str:
        block_id = self.blocks.get(index)
        if block_id is None:
            block_id = self.blocks[index] = new_id()
        return block_id

    def feed(self, item: Any, out: list[Event]) -> None:
        kind = item.type
        if kind == "content_block_delta":
            delta = item.delta
            delta_kind = delta.type
            if delta_kind == "text_delta":
                out.append(self.text(self._block(item.index), delta.text))
            elif delta_kind == "thinking_delta":
                out.append(self.reasoning(self._block(item.index), delta.thinking))
            elif delta_kind == "input_json_delta":
                entry = self.calls.get(item.index)
                if entry is not None:
                    entry.append(delta.partial_json)
            elif delta_kind == "signature_delta":
                out.append(self.reasoning(self._block(item.index), "", signature=delta.signature))
        elif kind == "content_block_start":
            self._start(item.index, item.content_block, out)
        elif kind == "message_start":
            self._usage(item.message.usage)
        elif kind == "message_delta":
            self._usage(item.usage)
        elif kind == "message_stop":
            self.stopped = True

    def feed_message(self, message: Any, out: list[Event]) -> None:
        """A non-streaming ``Message``; `finish` follows as for a stream."""
        for index, block in enumerate(message.content):
            self._start(index, block, out)
            if block.type == "thinking" and block.signature:
                out.append(self.reasoning(self._block(index), "", signature=block.signature))
        self._usage(message.usage)
        self.stopped = True

    def _start(self, index: int, block: Any, out: list[Event]) -> None:
        kind = block.type
        if kind == "text":
            block_id = self.blocks[index] = new_id()
            if block.text:
                out.append(self.text(block_id, block.text))
        elif kind == "thinking":
            block_id = self.blocks[index] = new_id()
            if block.thinking:
                out.append(self.reasoning(block_id, block.thinking))
        elif kind == "redacted_thinking":
            out.append(self.reasoning(new_id(), "", redacted_data=block.data))
        elif kind == "tool_use":
            self.calls[index] = [block.id, block.name]
            if block.input:
                self.start_inputs[index] = json.dumps(block.input)

    def _usage(self, usage: Any) -> None:
        for slot, name in enumerate(
            ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        ):
            value = getattr(usage, name, None)
            if value is not None:
                self.tokens[slot] = value

    def finish(self, out: list[Event]) -> None:
        if not self.stopped:
            raise Failure("the stream ended before the model finished (no message_stop)", retryable=True)
        for index, entry in self.calls.items():
            if len(entry) == 2 and index in self.start_inputs:
                entry.append(self.start_inputs[index])
        uncached, output, read, created = self.tokens
        self.set_usage(uncached + read + created, output, read, created)
        self.closing_events(out)


class AnthropicProvider(StreamingProvider):
    """Anthropic Messages provider (module docstring). Keys: ``api_key`` or ``ANTHROPIC_API_KEY``
    (``ANTHROPIC_AUTH_TOKEN`` works too); base URL: ``base_url`` or ``ANTHROPIC_BASE_URL``."""

    api_name = "Anthropic"
    key_env = ANTHROPIC_KEY_ENV

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        default_max_tokens: int = 8192,
        retry: RetryPolicy | None = None,
        timeouts: Timeouts | None = None,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        super().__init__(retry=retry, timeouts=timeouts)
        self._api_key = api_key
        self._base_url = base_url
        self._client = client
        self.default_max_tokens = default_max_tokens

    @property
    def message_format(self) -> MessageFormat:
        return "anthropic"

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client (made on first use), with the SDK's retries off and its connect limit."""
        if self._client is None:
            key = self._api_key or os.environ.get(ANTHROPIC_KEY_ENV)
            custom = self._base_url or os.environ.get("ANTHROPIC_BASE_URL")
            if not key and custom and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
                key = _NO_KEY  # a local proxy at a custom URL may need none; a 401 names the variable
            limits = self.timeouts
            timeout = anthropic.Timeout(
                connect=limits.connect, read=None, write=limits.connect, pool=limits.connect
            )
            self._client = anthropic.AsyncAnthropic(
                api_key=key or None, base_url=self._base_url, max_retries=0, timeout=timeout
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for ``request``."""
        params: dict[str, Any] = {"model": request.model, "messages": list(request.messages), "stream": True}
        params["max_tokens"] = (
            request.max_tokens if request.max_tokens is not None else self._max_tokens(request)
        )
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in request.tools
            ]
        if request.temperature is not None:
            params["temperature"] = request.temperature
        params.update(request.options)
        return params

    def _max_tokens(self, request: ModelRequest) -> int:
        thinking = request.options.get("thinking")
        budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
        if isinstance(budget, int) and budget >= self.default_max_tokens:
            return budget + 4096
        return self.default_max_tokens

    async def _open(self, request: ModelRequest) -> AsyncIterator[Any]:
        stream: AsyncIterator[Any] = await self.client.messages.create(**self.request_params(request))
        return stream

    def _translator(self, request: ModelRequest) -> Translator:
        return MessagesTranslator(request.parent_id)

    def _classify(self, exc: Exception) -> Failure:
        return classify_anthropic(exc, self._base_url or "https://api.anthropic.com")


def classify_anthropic(exc: Exception, base_url: str) -> Failure:
    """An exception of the Anthropic SDK (or of reading its stream) as a `Failure`."""
    if isinstance(exc, anthropic.APIStatusError):
        detail = detail_of(exc.body, exc.message)
        if exc.status_code == 200:  # an `error` event inside a successful stream
            kind = _error_type(exc.body)
            return Failure(f"error in the stream ({kind}: {detail})", retryable=retryable_kind(kind))
        return classify_status(exc.status_code, detail, exc.response.headers, ANTHROPIC_KEY_ENV)
    transport = classify_transport(exc, anthropic, base_url)
    if transport is not None:
        return transport
    if isinstance(exc, TypeError) and "authentication" in str(exc):
        return Failure(f"no API key: set {ANTHROPIC_KEY_ENV} (or pass api_key=...)", retryable=False)
    if isinstance(exc, anthropic.AnthropicError):
        return Failure(str(exc), retryable=False)
    return Failure(f"unexpected {type(exc).__name__}: {exc}", retryable=False)


def _error_type(body: object) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("type"), str):
            return str(inner["type"])
    return "error"
