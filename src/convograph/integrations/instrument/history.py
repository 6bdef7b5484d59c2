"""What an instrumented call adds to its conversation: the shadow fold of what was recorded, the
diff of a request against it, and the events of request-side messages.

A chat app re-sends its whole history with every call. The instrumentation records only what is
new since the conversation's last recorded call, so the conversation graph holds each turn once:

- `Shadow` folds the conversation's recorded events (streamed text compacted to one event per
  block) into a `ConversationState`; `Shadow.messages` is the conversation's messages projection
  (`project_messages`) as the app would send it back next: without the placeholder results the
  projection gives tool calls not answered yet, and without the synthetic opening user message when
  the app's history opens with an assistant message.
- Each SDK adapter turns a request and what it is compared with (that projection on a
  conversation's first call in this process; after that, the previous request of the same API
  and the answer it got, which is what the app sends next, without rendering the conversation)
  into comparable keys (`Entry`), one per
  message (per content block for Anthropic, per input item for Responses). Keys apply the
  normalisations docs/integrations.md lists (tool arguments as parsed JSON, system prompts left out,
  consecutive tool-call-only turns merged (`merge_call_turns`), ...), the same way on both sides,
  so a lossy detail never reads as a change.
- `new_start` finds where the new entries of a request begin: after the recorded history when the
  request extends it (the usual case), after the overlap when the app dropped its oldest messages
  (a sliding window), else at the first difference.
- `branch_command` turns such a difference into the conversation's own steering commands, as a
  chat product's edit and regenerate buttons do: a request whose user message differs from the
  recorded one is an ``edit`` of that message (a new branch from there), and a request that stops
  at a recorded user message asks for its answer again: a ``regenerate`` of that answer (the new
  answer a sibling of the old). Any other difference (the app rewrote an answer or a tool result)
  records the request's entries from the difference on, after what is recorded.

Costs, on the instrumentation's thread: keying a request is O(its messages) per call (about 10 us
per message), the diff O(history) key comparisons, the fold O(blocks) per call (not per streamed
chunk).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from convograph.events import (
    ContentPart,
    Edit,
    Event,
    HarnessEnd,
    HarnessStart,
    Reasoning,
    Regenerate,
    Text,
    ToolCall,
    ToolResult,
    User,
)
from convograph.harness.base import MessageFormat
from convograph.harness.ids import new_id
from convograph.harness.ports import ConversationState
from convograph.harness.providers.base import Translator, tool_input
from convograph.hypergraph.active import walk
from convograph.hypergraph.commands import check_command
from convograph.hypergraph.operations import OperationError
from convograph.projections.history import OPENING_USER_TEXT, PLACEHOLDER_OUTPUT

__all__ = [
    "BranchReader",
    "Entry",
    "RequestEvents",
    "Shadow",
    "arguments_key",
    "branch_command",
    "data_url",
    "deep_plain",
    "given",
    "joined_text",
    "merge_call_turns",
    "new_start",
    "output_messages",
    "plain",
    "stand_in",
    "strip_repairs",
]

log = logging.getLogger("convograph.instrument")


@dataclass(frozen=True, slots=True)
class Entry:
    """One comparable unit of a request (a message, a content block or an input item): its
    normalised ``key`` and the raw ``item`` the adapter turns into events when it is new."""

    key: Hashable
    item: Any = None


def new_start(expected: Sequence[Hashable], request: Sequence[Hashable]) -> tuple[int, bool]:
    """``(index of the first entry of request not recorded yet, whether the request left the
    recorded history there)`` (module docstring). O(n) for an extended history; O(n *
    candidates) to find a sliding window's overlap."""
    n = len(expected)
    if n == 0:
        return 0, False
    if len(request) >= n and all(a == b for a, b in zip(expected, request, strict=False)):
        return n, False
    overlap = _window_overlap(expected, request)
    if overlap:
        return overlap, False
    common = 0
    for a, b in zip(expected, request, strict=False):
        if a != b:
            break
        common += 1
    return common, True


def _window_overlap(expected: Sequence[Hashable], request: Sequence[Hashable]) -> int:
    """The longest ``k`` with ``request[:k] == expected[-k:]``: the app dropped the oldest
    messages and kept the rest (0 when there is no such overlap)."""
    if not request:
        return 0
    first = request[0]
    n = len(expected)
    for start in range(1, n):  # the longest overlap starts earliest
        k = n - start
        if (
            expected[start] == first
            and k <= len(request)
            and all(expected[start + i] == request[i] for i in range(k))
        ):
            return k
    return 0


def strip_repairs(messages: list[dict[str, Any]], format: MessageFormat) -> list[dict[str, Any]]:
    """``messages`` (a projection) without the repairs an app never sends: the placeholder results
    of the trailing, not yet answered tool calls, and the synthetic opening user message."""
    if format == "openai":
        while (
            messages
            and messages[-1].get("role") == "tool"
            and messages[-1].get("content") == PLACEHOLDER_OUTPUT
        ):
            messages.pop()
    elif messages and messages[-1].get("role") == "user":
        blocks = messages[-1].get("content")
        if isinstance(blocks, list) and blocks and all(_placeholder_result(b) for b in blocks):
            messages.pop()
    if messages and messages[0].get("role") == "user" and _opening(messages[0].get("content")):
        messages.pop(0)
    return messages


def _placeholder_result(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "tool_result"
        and block.get("content") == PLACEHOLDER_OUTPUT
        and bool(block.get("is_error"))
    )


def _opening(content: Any) -> bool:
    return bool(content == OPENING_USER_TEXT or content == [{"type": "text", "text": OPENING_USER_TEXT}])


class BranchReader(Protocol):
    """What `branch_command` needs to know about an API's entries."""

    def is_user(self, key: Hashable) -> bool:
        """The entry is (part of) a user message: not a tool result, not the assistant's."""
        ...

    def user_content(self, entry: Entry) -> str | list[ContentPart] | None:
        """The whole user message of ``entry`` as event content, or None when the entry is
        only a part of its message."""
        ...


def branch_command(
    shadow: Shadow, expected: Sequence[Hashable], request: Sequence[Entry], common: int, api: BranchReader
) -> Edit | Regenerate | None:
    """The command that puts a request leaving the recorded history at ``common`` on a branch of
    its own (module docstring), or None. Only a command that applies to the recorded
    conversation is returned, and only when its user messages are the expected ones (so a user
    entry's position names the right message). O(path)."""
    conversation = shadow.state.projector.conversation
    path = list(walk(conversation))
    users = [message for message in path if message.role == "user"]
    if len(users) != sum(1 for key in expected if api.is_user(key)):
        return None
    before = sum(1 for key in expected[:common] if api.is_user(key))
    command: Edit | Regenerate | None = None
    if common == len(request) and common > 0 and api.is_user(request[common - 1].key):
        asked = users[before - 1]
        answer = next((m for m in path[path.index(asked) + 1 :] if m.role == "assistant"), None)
        if answer is not None:
            command = Regenerate(message_id=answer.id, event_id=new_id())
    elif common < min(len(expected), len(request)) and api.is_user(expected[common]):
        content = api.user_content(request[common]) if api.is_user(request[common].key) else None
        if content is not None:
            command = Edit(message_id=users[before].id, content=content, run_id=new_id(), event_id=new_id())
    if command is None:
        return None
    try:
        check_command(conversation, command)
    except OperationError:
        log.debug("the recorded conversation cannot take %s", command, exc_info=True)
        return None
    return command


class Shadow:
    """A conversation's recorded events folded locally (module docstring). Not thread-safe: the
    instrumentation's worker owns it."""

    def __init__(self) -> None:
        self.state = ConversationState()
        self.call_names: dict[str, str] = {}
        """Tool call id -> tool name, for every call recorded (a result names its call's tool)."""
        self.opened = False
        """The conversation's history already stored in the sink was folded in."""

    def apply(self, events: Sequence[Event]) -> None:
        """Fold events (stored, or recorded by a request): O(1) amortised each."""
        state = self.state
        for event in events:
            if isinstance(event, ToolCall):
                self.call_names[event.id] = event.name
            state.apply(event)

    def apply_output(self, events: Sequence[Event]) -> list[Event]:
        """Fold a call's output with its text and reasoning deltas merged into one event per block
        (the projection reads only the whole block); returns the merged events. O(events)."""
        compacted = compact_blocks(events)
        self.apply(compacted)
        return compacted

    def messages(self, format: MessageFormat) -> list[dict[str, Any]]:
        """The recorded conversation as the app would send it next (module docstring)."""
        return strip_repairs(self.state.messages(format), format)


def output_messages(output: Sequence[Event], format: MessageFormat) -> list[dict[str, Any]]:
    """One call's output (its run's events) as the messages the projection renders for it, as
    the app sends them back. O(output)."""
    state = ConversationState()
    for event in output:
        state.apply(event)
    return strip_repairs(state.messages(format), format)


def compact_blocks(events: Sequence[Event]) -> list[Event]:
    """``events`` with the deltas of each text / reasoning block merged into its first event
    (content joined; a reasoning block's signature or redacted data kept). O(events)."""
    out: list[Event] = []
    blocks: dict[str, int] = {}
    joined: dict[int, list[str]] = {}
    for event in events:
        if not isinstance(event, Text | Reasoning):
            out.append(event)
            continue
        index = blocks.get(event.id)
        if index is None:
            blocks[event.id] = len(out)
            out.append(event)
            continue
        first = out[index]
        assert isinstance(first, Text | Reasoning)
        joined.setdefault(index, [first.content]).append(event.content)
        if isinstance(event, Reasoning) and isinstance(first, Reasoning):
            out[index] = msgspec.structs.replace(
                first,
                signature=event.signature or first.signature,
                redacted_data=event.redacted_data or first.redacted_data,
            )
    for index, parts in joined.items():
        out[index] = msgspec.structs.replace(out[index], content="".join(parts))
    return out


# -- reading requests ------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A request value as JSON-like data: SDK models (a response's message or content blocks the
    app sends back) dumped as the SDK sends them, mappings as dicts, other values as they are."""
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump(mode="json", exclude_unset=True)
    if isinstance(value, Mapping) and not isinstance(value, dict):
        return dict(value)
    return value


def deep_plain(value: Any) -> Any:
    """`plain`, all the way down (an app's dict may hold the SDK's tool call objects)."""
    value = plain(value)
    if isinstance(value, dict):
        return {key: deep_plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [deep_plain(item) for item in value]
    return value


def merge_call_turns(entries: list[Entry], kind: Callable[[Hashable], str]) -> list[Entry]:
    """``entries`` with consecutive model turns that hold nothing but tool calls read as one turn
    (``kind(key)`` says ``"call"``, ``"result"`` or anything else): a call that follows the results
    of earlier calls, with nothing else between, moves up next to those calls, before their
    results. The messages projection merges such turns the same way when no text or reasoning
    separates them; normalising both sides of the diff makes it indifferent to whether it did.
    O(n + moved calls * n)."""
    out: list[Entry] = []
    state = ""  # "calls": a turn's calls are open; "results": their results follow
    insert_at = 0  # where the open turn's next call goes: after its last call
    for entry in entries:
        current = kind(entry.key)
        if current == "call":
            if state == "results":
                out.insert(insert_at, entry)
                insert_at += 1
            else:
                out.append(entry)
                state, insert_at = "calls", len(out)
            continue
        if current != "result":
            state = ""
        elif state:
            state = "results"
        out.append(entry)
    return out


def given(value: Any) -> bool:
    """Whether a keyword argument was really given (the SDKs' helpers pass ``omit`` / ``NOT_GIVEN``
    placeholders for the ones the caller left out)."""
    return value is not None and type(value).__name__ not in ("Omit", "NotGiven")


def arguments_key(arguments: Any) -> str:
    """Tool arguments compared as parsed JSON (key order and spacing do not matter); malformed
    JSON as its raw text, which is also what a recorded parse error renders back to."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments if arguments is not None else {})
    value = tool_input(raw)
    if isinstance(value, dict) and value.get("__toolParseError"):
        return "raw:" + str(value.get("rawArguments", ""))
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def data_url(url: Any) -> tuple[str, str] | None:
    """``(media type, base64 data)`` of a ``data:<type>;base64,<data>`` URL, else None."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head[: -len(";base64")], data


def stand_in(kind: str, detail: Any = None) -> str:
    """The text recorded for content convograph's events cannot hold (an image by URL, an
    uploaded file id, audio): compared and projected back as this text part."""
    return f"[{kind}: {detail}]" if isinstance(detail, str) and detail else f"[{kind}]"


def joined_text(content: Any, *, kinds: tuple[str, ...] = ("text",), separator: str = "") -> str:
    """The text of a string or a list of content parts (parts of ``kinds`` only)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        part = plain(part)
        if isinstance(part, dict) and part.get("type") in kinds and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return separator.join(texts)


# -- events of request-side messages ---------------------------------------------------------------


class RequestEvents:
    """Builds the events of one request's new entries, each with an ``eventId``: ``user`` events
    (one run each), ``tool_result`` events (one run for the request) and, for assistant messages
    never recorded, a run of ``text`` / ``reasoning`` / ``tool_call`` events between
    ``harness_start`` and ``harness_end``."""

    def __init__(self, parent_id: str | None, names: Mapping[str, str]) -> None:
        self.parent_id = parent_id
        self.names = names
        self.events: list[Event] = []
        self._results_run = ""
        self._results = 0

    def user(self, content: str | list[ContentPart]) -> None:
        run_id = new_id()
        self.events.append(
            User(run_id=run_id, parent_id=self.parent_id, content=content, event_id=f"{run_id}:0")
        )

    def result(self, call_id: str, output: str) -> None:
        if not self._results_run:
            self._results_run = new_id()
        self.events.append(
            ToolResult(
                run_id=self._results_run,
                parent_id=self.parent_id,
                id=call_id,
                name=self.names.get(call_id, "tool"),
                output=output,
                event_id=f"{self._results_run}:{self._results}",
            )
        )
        self._results += 1

    def assistant(self) -> Translator:
        """A fresh run for a recorded-from-history assistant message: add its blocks with the
        translator's `Translator.text` / `Translator.reasoning` into `events`, its tool calls
        into ``calls``, then call `end_assistant`."""
        run = Translator(self.parent_id)
        self.events.append(HarnessStart(run_id=run.run_id, parent_id=self.parent_id, event_id=run.event_id()))
        return run

    def end_assistant(self, run: Translator) -> None:
        run.closing_events(self.events)
        self.events.append(
            HarnessEnd(
                run_id=run.run_id,
                parent_id=self.parent_id,
                reason="final",
                iterations=0,
                event_id=run.event_id(),
            )
        )
