"""Check a model-API request body the way the API would: against the official SDK's request types
and the API's structural rules. The scripted model server answers a failed check with a 400 in the
API's error format; tests call `check_request` on recorded bodies.

Type check: the body must be an instance of the SDK's ``*CreateParams*`` TypedDict — required keys
present, no unknown keys (the APIs reject unrecognised arguments), every value of its declared type
(literals, unions, lists, nested TypedDicts). Resolution uses ``typing.get_type_hints`` once per
TypedDict (cached); a check is O(size of the body x union width).

Structural rules (what each API rejects with a 400 although the types allow it):

- Chat Completions: at least one message; a ``tool`` message answers a ``tool_calls`` id of the
  assistant message before it (only tool messages in between); every ``tool_calls`` id is answered
  before the next non-tool message; tool call ids at most 40 characters; an assistant message has
  content or tool calls.
- Messages: at least one message, the first a ``user`` turn; consecutive turns of one role are
  merged (as the API does) before the pairing rules: every ``tool_use`` of an assistant turn has a
  ``tool_result`` in the next user turn and every ``tool_result`` a ``tool_use`` in the turn before;
  tool results lead their user turn; ``tool_use.id`` matches ``^[a-zA-Z0-9_-]+$``; no empty text
  blocks or empty turns (except a final assistant turn); with ``thinking`` enabled the budget is
  >= 1024 and < ``max_tokens``, and an assistant turn that a tool result answers starts with a
  (redacted) thinking block.
- Responses: every ``function_call_output`` answers an earlier ``function_call`` ``call_id``.
"""

from __future__ import annotations

import collections.abc
import re
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, Final, Literal

import typing_extensions

__all__ = ["RequestApi", "check_request", "check_typed"]

RequestApi = Literal["chat", "responses", "messages"]

_TOOL_ID: Final = re.compile(r"^[a-zA-Z0-9_-]+$")
_WRAPPERS: Final = {
    typing.Required,
    typing.NotRequired,
    typing_extensions.Required,
    typing_extensions.NotRequired,
    typing_extensions.ReadOnly,
    typing.Annotated,
    typing_extensions.Annotated,
}


def _params_type(api: RequestApi, streaming: bool) -> Any:
    """The SDK's TypedDict for a create call (imported lazily: the SDKs are big)."""
    if api == "chat":
        from openai.types.chat import completion_create_params as chat

        return chat.CompletionCreateParamsStreaming if streaming else chat.CompletionCreateParamsNonStreaming
    if api == "responses":
        from openai.types.responses import response_create_params as responses

        return (
            responses.ResponseCreateParamsStreaming
            if streaming
            else responses.ResponseCreateParamsNonStreaming
        )
    from anthropic.types import message_create_params as messages

    return messages.MessageCreateParamsStreaming if streaming else messages.MessageCreateParamsNonStreaming


# --- the type check ----------------------------------------------------------------------------------


def _unwrap(tp: Any) -> tuple[Any, bool | None]:
    """``tp`` without Required / NotRequired / ReadOnly / Annotated, and what the wrapper said about
    being required (None: nothing)."""
    required: bool | None = None
    while True:
        origin = typing.get_origin(tp)
        if origin in (typing.Required, typing_extensions.Required):
            required = True
        elif origin in (typing.NotRequired, typing_extensions.NotRequired):
            required = False
        elif origin not in _WRAPPERS:
            return tp, required
        tp = typing.get_args(tp)[0]


@cache
def _fields(td: Any) -> tuple[dict[str, Any], frozenset[str]]:
    """A TypedDict's field types and required keys, resolved once. Required-ness follows each key's
    own class (``total``) unless a Required / NotRequired wrapper says otherwise; the runtime's
    ``__required_keys__`` is not used because string annotations hide the wrappers from it."""
    hints = typing.get_type_hints(td, include_extras=True)
    owner_total: dict[str, bool] = {}
    stack = [td]
    while stack:
        cls = stack.pop()
        own = set(getattr(cls, "__annotations__", {}))
        bases = [b for b in getattr(cls, "__orig_bases__", ()) if typing_extensions.is_typeddict(b)]
        for base in bases:
            own -= set(getattr(base, "__annotations__", {}))
        for key in own:
            owner_total.setdefault(key, bool(getattr(cls, "__total__", True)))
        stack.extend(bases)
    fields: dict[str, Any] = {}
    required: set[str] = set()
    for key, hint in hints.items():
        tp, wrapped = _unwrap(hint)
        fields[key] = tp
        if wrapped if wrapped is not None else owner_total.get(key, True):
            required.add(key)
    return fields, frozenset(required)


def _is_iterable_origin(origin: Any) -> bool:
    if origin in (list, tuple, set, frozenset):
        return True
    return (
        isinstance(origin, type)
        and issubclass(origin, collections.abc.Iterable)
        and origin not in (str, dict)
    )


def check_typed(value: Any, tp: Any, path: str = "body") -> list[str]:
    """Problems of ``value`` as an instance of type ``tp`` (empty when it conforms)."""
    tp, _ = _unwrap(tp)
    if tp is Any or tp is object:
        return []
    if tp is None or tp is type(None):
        return [] if value is None else [f"{path}: expected null, got {_kind(value)}"]
    if isinstance(tp, typing.TypeAliasType):
        return check_typed(value, tp.__value__, path)
    if typing_extensions.is_typeddict(tp):
        return _check_typed_dict(value, tp, path)
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)
        return (
            []
            if value in allowed and type(value) in {type(a) for a in allowed}
            else [f"{path}: expected one of {list(allowed)!r}, got {value!r}"]
        )
    if origin in (typing.Union, types.UnionType):
        return _check_union(value, typing.get_args(tp), path)
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        if not isinstance(value, dict):
            return [f"{path}: expected an object, got {_kind(value)}"]
        args = typing.get_args(tp)
        item_type = args[1] if len(args) == 2 else Any
        return [p for key, item in value.items() for p in check_typed(item, item_type, f"{path}.{key}")]
    if origin is not None and _is_iterable_origin(origin):
        if not isinstance(value, list):
            return [f"{path}: expected an array, got {_kind(value)}"]
        args = typing.get_args(tp)
        item_type = args[0] if args else Any
        return [p for i, item in enumerate(value) for p in check_typed(item, item_type, f"{path}[{i}]")]
    return _check_scalar(value, tp, path)


def _check_scalar(value: Any, tp: Any, path: str) -> list[str]:
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif tp is str:
        ok = isinstance(value, str)
    elif tp in (dict, list):
        ok = isinstance(value, tp)
    else:
        return []  # a type JSON cannot carry (files, callables): not checked
    return [] if ok else [f"{path}: expected {tp.__name__}, got {_kind(value)}"]


def _check_typed_dict(value: Any, td: Any, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object ({td.__name__}), got {_kind(value)}"]
    fields, required = _fields(td)
    problems = [f"{path}: missing required key {key!r}" for key in sorted(required - value.keys())]
    for key, item in value.items():
        if key not in fields:
            problems.append(f"{path}: unknown key {key!r} (not in {td.__name__})")
        else:
            problems.extend(check_typed(item, fields[key], f"{path}.{key}"))
    return problems


def _check_union(value: Any, members: tuple[Any, ...], path: str) -> list[str]:
    best: list[str] | None = None
    for member in members:
        problems = check_typed(value, member, path)
        if not problems:
            return []
        if best is None or _closeness(problems) < _closeness(best):
            best = problems
    return best or [f"{path}: matches no member of the union"]


def _closeness(problems: list[str]) -> tuple[int, int]:
    """Rank a union member's problems: a wrong discriminator (``type`` / ``role``) is far."""
    wrong_tag = sum(1 for p in problems if ".type: expected one of" in p or ".role: expected one of" in p)
    return wrong_tag, len(problems)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


# --- structural rules --------------------------------------------------------------------------------


def _chat_rules(body: Mapping[str, Any]) -> list[str]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["messages: at least one message is required"]
    problems: list[str] = []
    open_calls: dict[str, int] = {}  # tool_call id -> index of its assistant message
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                problems.append(
                    f"messages[{i}]: a 'tool' message must answer a 'tool_calls' id of the preceding "
                    f"assistant message; {call_id!r} is not one"
                )
            open_calls.pop(call_id, None)  # type: ignore[arg-type]
            continue
        if open_calls:
            problems.append(
                f"messages[{i}]: an assistant message with 'tool_calls' must be followed by tool messages "
                f"answering each id; unanswered: {sorted(open_calls)}"
            )
            open_calls.clear()
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if message.get("content") in (None, "", []) and not calls:
                problems.append(f"messages[{i}]: an assistant message needs content or tool_calls")
            for j, call in enumerate(calls):
                call_id = call.get("id") if isinstance(call, dict) else None
                if isinstance(call_id, str):
                    if len(call_id) > 40:
                        problems.append(f"messages[{i}].tool_calls[{j}].id: longer than 40 characters")
                    open_calls[call_id] = i
    if open_calls:
        problems.append(f"messages: tool calls without tool messages answering them: {sorted(open_calls)}")
    return problems


def _merged_turns(messages: list[Any]) -> list[tuple[str, list[Any], int]]:
    """Consecutive same-role messages merged (as the Messages API does): (role, blocks, first index)."""
    turns: list[tuple[str, list[Any], int]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        role = str(message.get("role"))
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks, i))
    return turns


def _thinking_rules(body: Mapping[str, Any], turns: list[tuple[str, list[Any], int]]) -> list[str]:
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return []
    problems: list[str] = []
    budget, max_tokens = thinking.get("budget_tokens"), body.get("max_tokens")
    if isinstance(budget, int) and budget < 1024:
        problems.append("thinking.budget_tokens: must be >= 1024")
    if isinstance(budget, int) and isinstance(max_tokens, int) and budget >= max_tokens:
        problems.append("thinking.budget_tokens: must be less than max_tokens")
    if len(turns) >= 2 and turns[-1][0] == "user" and turns[-2][0] == "assistant":
        answered = any(isinstance(b, dict) and b.get("type") == "tool_result" for b in turns[-1][1])
        first = turns[-2][1][0] if turns[-2][1] else {}
        if answered and (
            not isinstance(first, dict) or first.get("type") not in ("thinking", "redacted_thinking")
        ):
            problems.append(
                f"messages[{turns[-2][2]}]: with thinking enabled, an assistant turn that tool results "
                "answer must start with a thinking or redacted_thinking block"
            )
    return problems


def _messages_rules(body: Mapping[str, Any]) -> list[str]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["messages: at least one message is required"]
    turns = _merged_turns(messages)
    problems: list[str] = []
    if turns and turns[0][0] != "user":
        problems.append("messages[0]: the first message must use the 'user' role")
    previous_uses: set[str] = set()
    for t, (role, blocks, index) in enumerate(turns):
        if not blocks and not (role == "assistant" and t == len(turns) - 1):
            problems.append(f"messages[{index}]: content must not be empty")
        uses = {b.get("id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"}
        results = [
            b.get("tool_use_id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "text" and b.get("text") == "":
                problems.append(f"messages[{index}]: text content blocks must be non-empty")
            if isinstance(b, dict) and b.get("type") == "tool_use" and not _TOOL_ID.match(str(b.get("id"))):
                problems.append(f"messages[{index}]: tool_use id {b.get('id')!r} must match ^[a-zA-Z0-9_-]+$")
        if role == "user":
            if previous_uses - set(results):
                problems.append(
                    f"messages[{index}]: tool_use ids were found without tool_result blocks immediately "
                    f"after: {sorted(map(str, previous_uses - set(results)))}"
                )
            if set(results) - previous_uses:
                problems.append(
                    f"messages[{index}]: unexpected tool_use_id in tool_result blocks: "
                    f"{sorted(map(str, set(results) - previous_uses))} (no tool_use in the previous turn)"
                )
            kinds = [b.get("type") for b in blocks if isinstance(b, dict)]
            first_other = next((k for k, kind in enumerate(kinds) if kind != "tool_result"), len(kinds))
            if "tool_result" in kinds[first_other:]:
                problems.append(f"messages[{index}]: tool_result blocks must come first in the user turn")
            previous_uses = set()
        else:  # merged turns alternate, so the turn before an assistant turn is a user turn
            previous_uses = {str(u) for u in uses}
    return problems + _thinking_rules(body, turns)


def _responses_rules(body: Mapping[str, Any]) -> list[str]:
    items = body.get("input")
    if not isinstance(items, list):
        return []
    seen_calls: set[str] = set()
    problems: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            seen_calls.add(str(item.get("call_id")))
        elif item.get("type") == "function_call_output" and str(item.get("call_id")) not in seen_calls:
            problems.append(
                f"input[{i}]: no tool call found for function call output with call_id {item.get('call_id')!r}"
            )
    return problems


_RULES: Final = {"chat": _chat_rules, "messages": _messages_rules, "responses": _responses_rules}


def check_request(api: RequestApi, body: Any) -> list[str]:
    """Every problem the API would reject ``body`` for (empty when it would accept it)."""
    if not isinstance(body, dict):
        return [f"body: expected a JSON object, got {_kind(body)}"]
    problems = check_typed(body, _params_type(api, bool(body.get("stream"))))
    return problems + _RULES[api](body)
