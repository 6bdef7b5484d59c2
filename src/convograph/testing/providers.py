"""`ScriptedProvider`: an in-process `Provider` that plays scripted model turns (a test double, like
httpx's ``MockTransport``: no network, no SDK, deterministic).

Each ``invoke`` plays the next item of the script: a `ScriptedTurn`, or a function of the
`ModelRequest` returning one (to answer from the history the harness sent). The events follow the
provider rules of `convograph.harness.base`: one fresh ``runId`` per call, ``parentId =
request.parent_id``; ``reasoning`` then ``text`` chunks (one ``id`` per block, stable across its
chunks); the raw ``tool_call`` events after the stream; one ``usage``; ``error`` on failure (then
nothing more). No lifecycle events: providers never emit them.

Like a real API, it checks every request first (`check_request`: the structural rules of the
request's message format) and answers an invalid one with an ``error`` event naming the rule, as
the API's 400 would. ``requests`` keeps every request received, for assertions.

A script that runs out answers with an ``error`` event (the harness must end the run on it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from convograph.events import Error, Event, Reasoning, Text, ToolCall, Usage
from convograph.harness.base import MessageFormat, ModelRequest
from convograph.harness.ids import new_id

__all__ = [
    "ScriptItem",
    "ScriptedCall",
    "ScriptedProvider",
    "ScriptedTurn",
    "check_request",
    "parse_arguments",
]


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One tool call of a scripted turn. ``arguments`` as a mapping is sent as its JSON; as a
    string it is the raw argument text the model produced (so it may be malformed JSON)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None
    """The provider's raw call id; default ``call_<n>``, unique per provider."""


@dataclass(frozen=True, slots=True)
class ScriptedTurn:
    """One model call's answer.

    - ``text`` / ``reasoning``: a string (sent in chunks of the provider's ``chunk_size``) or a
      sequence of chunks sent as given; ``signature`` rides on the last reasoning chunk.
    - ``tool_calls``: raw calls, yielded after the stream.
    - ``usage``: ``(input_tokens, output_tokens)``; ``"auto"`` estimates both (4 characters a
      token, over the request's messages and the answer); ``None`` sends no usage event.
    - ``error``: after the text, yield this error and stop (no tool calls, no usage).
    - ``delay``: seconds before each chunk; ``hang``: after the text, never answer (until the
      consumer stops iterating), to test time limits and cancellation.
    """

    text: str | Sequence[str] = ""
    reasoning: str | Sequence[str] = ""
    signature: str | None = None
    tool_calls: Sequence[ScriptedCall] = ()
    usage: tuple[int, int] | Literal["auto"] | None = "auto"
    error: str | None = None
    delay: float = 0.0
    hang: bool = False


ScriptItem = ScriptedTurn | Callable[[ModelRequest], ScriptedTurn]


class ScriptedProvider:
    """A `Provider` answering each call with the next scripted turn (see the module docstring)."""

    def __init__(
        self,
        script: Iterable[ScriptItem],
        *,
        message_format: MessageFormat = "openai",
        chunk_size: int = 8,
        check: bool = True,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        self._script = list(script)
        self._format: MessageFormat = message_format
        self._chunk_size = chunk_size
        self._check = check
        self._next = 0
        self._call_number = 0
        self.requests: list[ModelRequest] = []
        """Every request received, in order."""

    @property
    def message_format(self) -> MessageFormat:
        return self._format

    @property
    def remaining(self) -> int:
        """Script items not played yet."""
        return len(self._script) - self._next

    def add(self, *items: ScriptItem) -> None:
        """Append turns to the script (e.g. between two runs of one test)."""
        self._script.extend(items)

    async def invoke(self, request: ModelRequest) -> AsyncIterator[Event]:
        """The events of one call (module docstring)."""
        self.requests.append(request)
        run_id = new_id()
        parent = request.parent_id
        problem = check_request(request, self._format) if self._check else None
        if problem is not None:
            yield Error(run_id=run_id, parent_id=parent, message=f"invalid request: {problem}")
            return
        if self._next >= len(self._script):
            message = f"scripted provider: the script has no turn left ({len(self._script)} played)"
            yield Error(run_id=run_id, parent_id=parent, message=message)
            return
        item = self._script[self._next]
        self._next += 1
        turn = item if isinstance(item, ScriptedTurn) else item(request)
        reasoning_id, text_id = new_id(), new_id()
        reasoning = self._chunks(turn.reasoning)
        for index, chunk in enumerate(reasoning):
            await self._pause(turn.delay)
            signature = turn.signature if index == len(reasoning) - 1 else None
            yield Reasoning(
                run_id=run_id, parent_id=parent, id=reasoning_id, content=chunk, signature=signature
            )
        for chunk in self._chunks(turn.text):
            await self._pause(turn.delay)
            yield Text(run_id=run_id, parent_id=parent, id=text_id, content=chunk)
        if turn.hang:
            await asyncio.Event().wait()
        if turn.error is not None:
            yield Error(run_id=run_id, parent_id=parent, message=turn.error)
            return
        for call in turn.tool_calls:
            yield ToolCall(
                run_id=run_id,
                parent_id=parent,
                id=call.id or self._call_id(),
                name=call.name,
                input=parse_arguments(call.arguments),
            )
        usage = _usage(turn, request)
        if usage is not None:
            yield Usage(run_id=run_id, parent_id=parent, input_tokens=usage[0], output_tokens=usage[1])

    def _call_id(self) -> str:
        self._call_number += 1
        return f"call_{self._call_number}"

    def _chunks(self, content: str | Sequence[str]) -> list[str]:
        if not isinstance(content, str):
            return [chunk for chunk in content if chunk]
        size = self._chunk_size
        return [content[i : i + size] for i in range(0, len(content), size)]

    @staticmethod
    async def _pause(delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)


def parse_arguments(arguments: Mapping[str, Any] | str) -> Any:
    """A tool call's ``input`` as providers give it: the parsed arguments, or, for text that is not
    a JSON object, ``{"__toolParseError": True, "parseError", "rawArguments"}`` (seed 003)."""
    if not isinstance(arguments, str):
        return dict(arguments)
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return {"__toolParseError": True, "parseError": str(exc), "rawArguments": arguments}
    if not isinstance(value, dict):
        problem = f"expected a JSON object, got {type(value).__name__}"
        return {"__toolParseError": True, "parseError": problem, "rawArguments": arguments}
    return value


def _usage(turn: ScriptedTurn, request: ModelRequest) -> tuple[int, int] | None:
    if turn.usage != "auto":
        return turn.usage
    sent = len(json.dumps(list(request.messages), default=str)) + len(request.system or "")
    answer = sum(map(len, turn.text)) + sum(map(len, turn.reasoning))
    answer += sum(len(json.dumps(call.arguments)) for call in turn.tool_calls)
    return max(1, sent // 4), max(1, answer // 4)


# --- request checks: the structural rules the real APIs enforce ------------------------------------


def check_request(request: ModelRequest, message_format: MessageFormat) -> str | None:
    """The first structural rule ``request`` breaks for its API, or None. O(messages).

    Both: at least one message; tool names unique. OpenAI Chat Completions: roles ``system``,
    ``developer``, ``user``, ``assistant``, ``tool``; every assistant ``tool_calls`` entry is
    answered by a ``tool`` message right after it (and each ``tool`` message answers one).
    Anthropic Messages: roles ``user`` / ``assistant`` alternating, starting with ``user``; every
    ``tool_use`` is answered at the start of the next user message by a ``tool_result`` with its
    id, and every ``tool_result`` answers the ``tool_use`` right before it; tool use ids match
    ``[A-Za-z0-9_-]+``; no empty content.
    """
    if not request.messages:
        return "messages must not be empty"
    names = [tool.name for tool in request.tools]
    if len(names) != len(set(names)):
        return f"tool names must be unique, got {names}"
    if message_format == "openai":
        return _check_openai(request.messages)
    return _check_anthropic(request.messages)


def _check_openai(messages: Sequence[Mapping[str, Any]]) -> str | None:
    waiting: list[str] = []  # call ids of the last assistant message not answered yet
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{index}]: unknown role {role!r}"
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in waiting:
                return f"messages[{index}]: tool message {call_id!r} answers no preceding tool call"
            waiting.remove(call_id)
            continue
        if waiting:
            return f"messages[{index}]: tool calls {waiting} have no tool message"
        if role == "assistant":
            calls = message.get("tool_calls") or []
            waiting = [call["id"] for call in calls]
            if message.get("content") is None and not calls:
                return f"messages[{index}]: an assistant message needs content or tool_calls"
            for call in calls:
                try:
                    json.loads(call["function"]["arguments"])
                except (KeyError, TypeError, json.JSONDecodeError):
                    return f"messages[{index}]: tool call {call.get('id')!r} has no JSON arguments"
    if waiting:
        return f"tool calls {waiting} have no tool message"
    return None


def _check_anthropic(messages: Sequence[Mapping[str, Any]]) -> str | None:
    expected = "user"
    open_uses: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role != expected:
            return (
                f"messages[{index}]: expected role {expected!r}, got {role!r} (roles alternate, user first)"
            )
        expected = "assistant" if role == "user" else "user"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if not blocks:
            return f"messages[{index}]: content must not be empty"
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        lead = [b.get("tool_use_id") for b in blocks[: len(results)]]
        if role == "user" and (sorted(results) != sorted(open_uses) or lead != results):
            return (
                f"messages[{index}]: tool results {results} must answer the previous tool uses "
                f"{open_uses}, first in the message"
            )
        open_uses = []
        for block in blocks:
            kind = block.get("type")
            if kind == "text" and not block.get("text"):
                return f"messages[{index}]: text blocks must not be empty"
            if kind == "tool_use":
                if role != "assistant":
                    return f"messages[{index}]: tool_use in a user message"
                use_id = str(block.get("id", ""))
                if not use_id or not all(c.isascii() and (c.isalnum() or c in "_-") for c in use_id):
                    return f"messages[{index}]: tool_use id {use_id!r} does not match [A-Za-z0-9_-]+"
                open_uses.append(use_id)
    if open_uses:
        return f"tool uses {open_uses} have no tool_result"
    return None
