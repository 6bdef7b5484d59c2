"""What the scripted model server answers: a `Script` of `Reply` values, API-neutral.

A reply says what the model "says" (text, thinking with a signature, redacted thinking, tool calls)
or how the call fails (an HTTP status with ``Retry-After``, a stream cut after N events, an error
event mid-stream). `convograph.testing.model_wire` renders one reply in the wire format of the API
that was called (Chat Completions, Responses or Messages), so one script serves every provider.

Scripts are plain data: build them in Python (``Reply(content=[Say("hi")])``) or load them from JSON
(`load_script`), the form ``convograph model-server SCRIPT.json`` reads::

    {"replies": [
      {"match": {"contains": "weather"},
       "content": [{"type": "thinking", "text": "Look it up.", "signature": "sig-1"},
                   {"type": "tool_call", "name": "weather", "arguments": {"city": "Paris"}}]},
      {"status": 429, "retry_after": 1},
      {"content": [{"type": "text", "text": "It is sunny."}],
       "usage": {"input_tokens": 120, "output_tokens": 9, "cache_read_tokens": 64}}
    ],
     "pace": {"chunk_delay": 0.067, "first_delay": 0.4}}

Each request takes the first unused reply whose ``match`` accepts it (FIFO among the matching ones),
so concurrent agents can be scripted deterministically by matching on their task text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

__all__ = [
    "Api",
    "Match",
    "Pace",
    "RedactedThinking",
    "Reply",
    "Say",
    "Script",
    "ScriptError",
    "ScriptUsage",
    "Think",
    "ToolUse",
    "load_script",
    "parse_script",
]

Api = Literal["chat", "responses", "messages"]
"""The three wire formats: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages."""


class ScriptError(ValueError):
    """A script that cannot be read; the message names the place and the problem."""


class _Part(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", forbid_unknown_fields=True):
    pass


class Say(_Part, frozen=True, tag="text"):
    """Answer text, streamed in ``chunks`` (default: pieces of the reply's ``chunk_size``)."""

    text: str
    chunks: list[str] | None = None


class Think(_Part, frozen=True, tag="thinking"):
    """A reasoning block: Anthropic ``thinking`` (+ ``signature_delta``), Chat ``reasoning_content``,
    Responses reasoning summary."""

    text: str
    signature: str | None = None
    chunks: list[str] | None = None


class RedactedThinking(_Part, frozen=True, tag="redacted_thinking"):
    """An Anthropic ``redacted_thinking`` block (opaque ``data``); other APIs have no equivalent and
    leave it out."""

    data: str


class ToolUse(_Part, frozen=True, tag="tool_call"):
    """A tool call. ``arguments`` is an object, or a raw JSON string (which may be malformed on
    purpose); it streams in ``chunks`` (default: pieces of 7 characters, so deltas split mid-JSON)."""

    name: str
    arguments: dict[str, Any] | str = msgspec.field(default_factory=dict)
    id: str | None = None
    chunks: list[str] | None = None

    def raw_arguments(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"))


Part = Say | Think | RedactedThinking | ToolUse


class ScriptUsage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Token counts reported for a reply. ``input_tokens`` is the whole prompt, cached tokens
    included (OpenAI's ``prompt_tokens``); Anthropic's ``input_tokens`` is sent as the uncached rest."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


class Match(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which requests a reply may answer; every given condition must hold."""

    api: Api | None = None
    model: str | None = None
    contains: str | None = None
    """A substring of the request's conversation (messages / input / system, as JSON text)."""

    def accepts(self, api: str, model: str | None, conversation_text: str) -> bool:
        if self.api is not None and self.api != api:
            return False
        if self.model is not None and self.model != model:
            return False
        return self.contains is None or self.contains in conversation_text


class Reply(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One scripted answer (or failure) to one request."""

    content: list[Part] = msgspec.field(default_factory=list)
    usage: ScriptUsage | None = None
    """Default: estimated from the sizes of the request and the content (4 characters a token)."""
    stop_reason: Literal["stop", "tool_calls", "length"] | None = None
    """Default: ``tool_calls`` when the content has tool calls, else ``stop``; each API gets its own
    word (Anthropic ``end_turn`` / ``tool_use`` / ``max_tokens``; Responses ``incomplete`` for length)."""
    status: int = 200
    """Not 200: answer with this HTTP status and the API's error body instead of content."""
    error: str | None = None
    """Message of the error body (status != 200) or of the mid-stream error (``stream_error``)."""
    retry_after: float | None = None
    """Seconds, sent as ``Retry-After`` (whole seconds, rounded up) and ``retry-after-ms``."""
    stream_error: str | None = None
    """After the content, end the stream with an error event of this type (e.g.
    ``"overloaded_error"``, ``"server_error"``) instead of finishing normally."""
    cut_after: int | None = None
    """Close the connection abruptly after this many SSE events (no terminating chunk)."""
    end_after: int | None = None
    """End the response cleanly after this many SSE events (a server that stops early without
    saying why: the body is complete, the answer is not)."""
    chunk_size: int = 12
    chunk_delay: float = 0.0
    """Seconds between two streamed events (pacing for demos)."""
    first_delay: float = 0.0
    """Seconds before the first streamed event (time to first token)."""
    stall_after: int | None = None
    stall: float = 0.0
    """Pause ``stall`` seconds after ``stall_after`` streamed events (a stream that stalls mid-answer)."""
    reasoning_field: Literal["reasoning_content", "reasoning"] = "reasoning_content"
    """Chat Completions delta field carrying thinking (vLLM / DeepSeek use ``reasoning_content``;
    newer vLLM, Ollama and OpenRouter ``reasoning``)."""
    match: Match | None = None
    model: str | None = None
    """Model name the response reports (default: the requested one)."""

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ScriptError(f"chunk_size must be at least 1, got {self.chunk_size}")
        if self.status != 200 and not 400 <= self.status <= 599:
            raise ScriptError(f"status must be 200 or an HTTP error status (400-599), got {self.status}")
        for name in ("cut_after", "end_after", "stall_after"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ScriptError(f"{name} must be >= 0, got {value}")

    @property
    def tool_calls(self) -> list[ToolUse]:
        return [part for part in self.content if isinstance(part, ToolUse)]


class Pace(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Pacing of every reply of a script that sets none of its own (token-level pacing for demos:
    ``chunk_delay`` 0.067 s with the default 12-character chunks is ~45 tokens/s)."""

    chunk_delay: float = 0.0
    first_delay: float = 0.0

    def __post_init__(self) -> None:
        if self.chunk_delay < 0 or self.first_delay < 0:
            raise ScriptError("pace: chunk_delay and first_delay must be >= 0")


class Script(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Replies in order, plus what to answer when none is left (``default``; else an error), and
    the pacing of replies that set none (``pace``)."""

    replies: list[Reply] = msgspec.field(default_factory=list)
    default: Reply | None = None
    pace: Pace | None = None


def parse_script(data: Any) -> Script:
    """A `Script` from JSON data: ``{"replies": [...], "default": {...}}`` or a bare list of
    replies. Raises `ScriptError` naming the offending place."""
    if isinstance(data, list):
        data = {"replies": data}
    try:
        return msgspec.convert(data, Script)
    except (msgspec.ValidationError, ScriptError) as exc:
        raise ScriptError(f"invalid model-server script: {exc}") from None


def load_script(path: str | Path) -> Script:
    """`parse_script` of a JSON file; errors name the file."""
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScriptError(f"cannot read model-server script {file}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ScriptError(f"{file} is not JSON: {exc}") from None
    try:
        return parse_script(data)
    except ScriptError as exc:
        raise ScriptError(f"{file}: {exc}") from None


def split_text(text: str, size: int) -> list[str]:
    """``text`` in pieces of ``size`` characters (at least one piece, possibly empty)."""
    if not text:
        return [""]
    return [text[i : i + size] for i in range(0, len(text), size)]


def text_chunks(part: Say | Think, size: int) -> Sequence[str]:
    return part.chunks if part.chunks is not None else split_text(part.text, size)


def argument_chunks(part: ToolUse) -> Sequence[str]:
    return part.chunks if part.chunks is not None else split_text(part.raw_arguments(), 7)
