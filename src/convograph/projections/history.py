"""The neutral LLM history behind the messages projection (seed 001 "Messages Projection").

Pipeline: thread views (top level only, so subagent internals stay out of the parent's context
except through the tool result) -> a neutral `History` of `UserTurn` / `AssistantTurn` -> one
adapter module per external format (`openai`, `anthropic`, `gateway`).

Repair, always at projection time (the log is never rewritten):

- a tool call without a result (in flight, interrupted) gets a neutral placeholder result
  `PLACEHOLDER_OUTPUT` marked ``missing=True``;
- a tool result without a call is dropped, unless a relay asked permission for that call id: then
  the call is rebuilt from the relay (name and params) so the denial reaches the model, as it does
  in the harness's own history (spec §9 #3);
- text or reasoning after tool calls starts a new assistant turn; results follow their turn;
- distinct text streams (text nodes of different ids, which the thread merges into one view, or
  consecutive text views) are paragraphs: joined with `PARAGRAPH_BREAK`, never run together;
- a REPL turn (a `ReplContent` view: hypergraph, ``ViewOptions(repl_cells=True)``) is the
  assistant's code, as a fenced ```python block after the turn's text (unless that text already
  holds the code, as a model's own fenced block does), and its output as the next user message
  (`repl_feedback`), which is what the REPL harness feeds back (upstream's RLM pushes the
  feedback as a user message, spec §6.7);
- a history that does not open with a user turn gets `OPENING_USER_TEXT` as its first user turn
  (the Messages API requires a user message first; the same for every format), and a user
  message with no content (``""``, or only empty text parts) reads `EMPTY_USER_TEXT`: no API
  takes an empty message, and dropping it would merge the assistant turns around it.

Reasoning is kept as `ThinkingBlock` (with its signature when the provider sent one, or the
opaque payload of a redacted block); errors,
relays and pending markers are not model context and are left out.

Complexity: O(N) over the thread views.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, Final, Literal

import msgspec

from convograph.events.types import ContentPart, TextPart
from convograph.projections.view import (
    ReasoningContent,
    ReplContent,
    TextContent,
    ToolCallContent,
    UserContent,
    ViewNode,
)

__all__ = [
    "EMPTY_RESULT_TEXT",
    "EMPTY_USER_TEXT",
    "OPENING_USER_TEXT",
    "PARAGRAPH_BREAK",
    "PLACEHOLDER_OUTPUT",
    "REPL_FENCE_LANGUAGE",
    "REPL_NO_OUTPUT",
    "REPL_PENDING_OUTPUT",
    "SUMMARY_RUN_PREFIX",
    "AssistantTurn",
    "History",
    "TextBlock",
    "ThinkingBlock",
    "ToolExchange",
    "UserTurn",
    "build_history",
    "compact_json_encoder",
    "fenced_code",
    "is_anthropic_tool_id",
    "repl_feedback",
    "safe_tool_id",
    "serialize_output",
    "stand_in_tool_id",
]

SUMMARY_RUN_PREFIX: Final = "summary:"
"""Run id prefix of the text view that stands for a hypergraph summary message."""

PLACEHOLDER_OUTPUT: Final = "Tool result unavailable."
"""Result given to a call that has none: neutral, so the model neither retries blindly nor assumes
the user interrupted it."""

OPENING_USER_TEXT: Final = "User message unavailable."
"""The user turn put first when a history opens with assistant output (a run started without a
recorded user message, a REPL run's workload): synthesised at projection time, never logged."""

EMPTY_USER_TEXT: Final = "(empty message)"
"""Stands for a user message with no content."""

EMPTY_RESULT_TEXT: Final = "(empty)"
"""Stands for a tool result whose text is empty (the APIs take no empty tool content)."""

PARAGRAPH_BREAK: Final = "\n\n"
"""Between two text streams of one assistant message (a blank line: a paragraph break)."""

REPL_FENCE_LANGUAGE: Final = "python"
"""The info string of a REPL turn's code fence: the REPL harness runs Python and the model writes
its code in a ```python block (``repl_input`` events name no language)."""

REPL_NO_OUTPUT: Final = "(no output)"
"""The feedback of a REPL turn that printed nothing and raised nothing (upstream's words)."""

REPL_PENDING_OUTPUT: Final = "REPL output unavailable."
"""Ends the feedback of a REPL turn with no ``repl_output`` yet (running, or interrupted)."""


# The history types are msgspec Structs untracked by the cyclic GC (``gc=False``): a history is an
# acyclic tree built and rendered within one call, and 100k-node conversations would otherwise
# trigger full collections that cost more than building it.


class TextBlock(msgspec.Struct, gc=False):
    text: str


class ThinkingBlock(msgspec.Struct, gc=False):
    text: str
    signature: str | None = None
    redacted_data: str | None = None
    """A redacted thinking block's opaque payload (no text, no signature)."""


class ToolExchange(msgspec.Struct, gc=False):
    """One tool call and its result (``missing``: the placeholder stands in for it)."""

    id: str
    name: str
    input: Any
    output: Any
    missing: bool = False

    @property
    def denied(self) -> bool:
        output = self.output
        return isinstance(output, dict) and output.get("status") == "denied"


class AssistantTurn(msgspec.Struct, gc=False):
    """One assistant message: its text / thinking blocks, then its tool calls. Tuples (untracked by
    the cyclic GC once it has seen them), built when the turn closes: two lists per turn were ~27k
    long-lived GC-tracked objects in a 100k-node conversation's history."""

    blocks: tuple[TextBlock | ThinkingBlock, ...] = ()
    calls: tuple[ToolExchange, ...] = ()

    @property
    def text(self) -> str | None:
        """The text blocks as one string, paragraphs apart (formats with one string per message)."""
        texts = [block.text for block in self.blocks if isinstance(block, TextBlock)]
        return PARAGRAPH_BREAK.join(texts) if texts else None


class UserTurn(msgspec.Struct, gc=False):
    content: str | list[ContentPart]


History = list[UserTurn | AssistantTurn]

Format = Literal["openai", "anthropic", "gateway"]


def build_history(
    views: list[ViewNode],
    *,
    include_call: Any = None,
    text_parts: Callable[[ViewNode], list[str] | None] | None = None,
    starts_turn: Callable[[str], bool] | None = None,
) -> History:
    """The neutral history of a top-level thread.

    ``include_call(call_id) -> bool`` decides whether a tool_call view known only from its result
    is a real call (denied, with a relay) or an orphan to drop; ``None`` keeps every call.
    ``text_parts(view)``: the texts of the nodes merged into a text view
    (`ThreadBuilder.text_parts`), kept apart as paragraphs; ``None``: each view one paragraph.
    An assistant turn's consecutive paragraphs make one `TextBlock`.
    ``starts_turn(call_id)``: a tool call that opened a new model call's calls
    (`ThreadBuilder.model_call_starts`) starts a new assistant turn when the open one has calls
    already (two model calls answering with tool calls only stay two turns); ``None``: none does.
    """
    turns = _Turns()
    calls = turns.calls
    for view in views:
        content = view.content
        kind = type(content)  # the content types are final: dispatch on the exact type
        if kind is ToolCallContent:  # the most frequent
            call_id = view.id
            if include_call is not None and not include_call(call_id):
                continue
            if calls and starts_turn is not None and starts_turn(call_id):
                turns.close()
                calls = turns.calls
            turns.is_open = True
            if content.has_output:  # type: ignore[union-attr]
                calls.append(ToolExchange(call_id, content.name, content.input, content.output))  # type: ignore[union-attr]
            else:
                calls.append(
                    ToolExchange(call_id, content.name, content.input, PLACEHOLDER_OUTPUT, missing=True)  # type: ignore[union-attr]
                )
        elif kind is TextContent:
            turns.add_text(view, content.text, text_parts)  # type: ignore[union-attr]
        elif kind is ReasoningContent:
            turns.open_after_calls()
            turns.flush_text()
            turns.blocks.append(ThinkingBlock(content.text, content.signature, content.redacted_data))  # type: ignore[union-attr]
        elif kind is UserContent:
            turns.close()
            turns.history.append(UserTurn(_user_content(content.content)))  # type: ignore[union-attr]
        elif kind is ReplContent:
            turns.add_repl(content)  # type: ignore[arg-type]
        # error, relay, pending: not model context
        calls = turns.calls  # (a closed turn starts a new list)
    turns.close()
    history = turns.history
    if history and type(history[0]) is not UserTurn:
        history.insert(0, UserTurn(OPENING_USER_TEXT))
    return history


class _Turns:
    """The history being built (`build_history`): the open assistant turn's blocks, paragraphs
    (its text since its last thinking block) and calls, collected until the turn closes."""

    def __init__(self) -> None:
        self.history: History = []
        self.blocks: list[TextBlock | ThinkingBlock] = []
        self.paragraphs: list[str] = []
        self.calls: list[ToolExchange] = []
        self.is_open = False
        """A turn is open (its blocks and calls are collected in the lists)."""

    def flush_text(self) -> None:
        if self.paragraphs:
            self.blocks.append(TextBlock(PARAGRAPH_BREAK.join(self.paragraphs)))
            self.paragraphs.clear()

    def close(self) -> None:
        self.flush_text()
        if self.is_open and (self.blocks or self.calls):
            self.history.append(AssistantTurn(tuple(self.blocks), tuple(self.calls)))
            self.blocks = []
            self.calls = []
        self.is_open = False

    def open_after_calls(self) -> None:
        """Open a turn for text or reasoning: a new one when the open turn has calls already."""
        if self.is_open and self.calls:
            self.close()
        self.is_open = True

    def add_text(
        self, view: ViewNode, text: str, text_parts: Callable[[ViewNode], list[str] | None] | None
    ) -> None:
        if view.run_id.startswith(SUMMARY_RUN_PREFIX):
            self.close()  # a summary stands alone: it replaces whole turns
            if text:
                self.history.append(AssistantTurn(blocks=(TextBlock(text),)))
            return
        self.open_after_calls()
        parts = text_parts(view) if text_parts is not None else None
        if parts is not None:
            self.paragraphs.extend(part for part in parts if part)
        elif text:
            self.paragraphs.append(text)

    def add_repl(self, content: ReplContent) -> None:
        """A REPL turn: its code after the turn's text (unless written there), its output as the
        next user message."""
        self.open_after_calls()
        code = content.code
        written = any(code in text for text in self.paragraphs) or any(
            type(block) is TextBlock and code in block.text for block in self.blocks
        )
        if code and not written:  # (a model's own fenced block already shows it)
            self.paragraphs.append(fenced_code(code))
        self.close()
        self.history.append(UserTurn(repl_feedback(content)))


def fenced_code(code: str, language: str = REPL_FENCE_LANGUAGE) -> str:
    """``code`` as a Markdown fenced block, the fence longer than any backtick run inside."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{code.rstrip(chr(10))}\n{fence}"


def repl_feedback(content: ReplContent) -> str:
    """What a REPL turn gives back to the model, as upstream's RLM harness words it (spec §6.7):
    ``stdout:\n<stdout>`` and ``error: <message>`` lines, or `REPL_NO_OUTPUT`; a truncated stdout
    says so. Without a ``repl_output`` yet, the stdout streamed so far, then `REPL_PENDING_OUTPUT`.
    """
    result = content.result
    stdout = (content.stdout if result is None else result.stdout).rstrip("\n")
    lines = [f"stdout:\n{stdout}"] if stdout else []
    if result is None:
        lines.append(REPL_PENDING_OUTPUT)
        return "\n".join(lines)
    if result.truncated:
        lines.append("(stdout truncated)")
    if result.error:
        lines.append(f"error: {result.error}")
    return "\n".join(lines) if lines else REPL_NO_OUTPUT


def _user_content(content: str | list[ContentPart]) -> str | list[ContentPart]:
    """``content`` without empty text parts; `EMPTY_USER_TEXT` when nothing is left."""
    if isinstance(content, str):
        return content or EMPTY_USER_TEXT
    parts = [part for part in content if not (isinstance(part, TextPart) and not part.text)]
    return parts or EMPTY_USER_TEXT


COMPACT_JSON: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)
"""The encoder `json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)` builds
on every call, built once (its ``encode`` keeps no state between calls)."""


def compact_json_encoder() -> Callable[[Any], str]:
    """A function giving exactly ``COMPACT_JSON.encode(value)``, for encoding many values in one
    projection. ``JSONEncoder.encode`` builds a C encoder object on every call (~1.2 µs of a
    ~1.4 µs encode of a small dict); this builds it once. It keeps no circular-reference markers
    (a dict insert and delete per container: ~190 of ~730 ns for a one-key dict): a cycle then
    recurses until `RecursionError`, and the value is encoded again by ``COMPACT_JSON``, which
    raises the ``ValueError`` ("Circular reference detected") `json.dumps` raises (a value too deep
    for the recursion limit raises `RecursionError` from both, as before). Output is the same for
    every value: markers only detect cycles. A flat dict of plain values (str keys; str, int, bool
    or None values: `_PLAIN_JSON_TYPES`, exact types), the usual tool input or output, is written
    by msgspec instead (~0.15 against ~0.55 µs), which gives the same text. Falls back to
    ``COMPACT_JSON.encode`` where the C accelerator is missing."""
    if c_make_encoder is None:  # pragma: no cover - CPython always has the accelerator
        return COMPACT_JSON.encode
    iterencode = c_make_encoder(
        None,  # no markers: see above
        COMPACT_JSON.default,
        encode_basestring,
        COMPACT_JSON.indent,
        COMPACT_JSON.key_separator,
        COMPACT_JSON.item_separator,
        COMPACT_JSON.sort_keys,
        COMPACT_JSON.skipkeys,
        COMPACT_JSON.allow_nan,
    )
    join = "".join
    checked = COMPACT_JSON.encode
    flat_encode = msgspec.json.Encoder().encode
    plain = _PLAIN_JSON_TYPES

    def encode(value: Any) -> str:
        if type(value) is dict:
            for key, item in value.items():
                if type(key) is not str or type(item) not in plain:
                    break
            else:  # a flat dict of plain values: msgspec writes the same text, ~4x faster
                try:
                    return flat_encode(value).decode()
                except ValueError:  # a lone surrogate, an int past the digit limit: as below
                    pass
        elif isinstance(value, str):  # as `JSONEncoder.encode`
            return encode_basestring(value)
        try:
            return join(iterencode(value, 0))
        except RecursionError:  # a cycle (or a value too deep): as `json.dumps` fails on it
            return checked(value)

    return encode


_PLAIN_JSON_TYPES: Final[frozenset[type[Any]]] = frozenset({str, int, bool, type(None)})
"""Exact types `msgspec.json` writes exactly as `json.dumps(..., ensure_ascii=False)` does: the
same escapes for every code point, the same integer digits (floats differ: ``1e16`` against
``1e+16``; other types differ or take ``default``). Property-tested."""


def model_text(output: Any, encode: Callable[[Any], str]) -> str:
    """What a model reads of a tool's output (the OpenAI and Anthropic histories): the output's
    ``context`` when it has a string one (the seed's success shape ``{context, result}``:
    ``context`` is written for the model, ``result`` is the structured value for programs and the
    viewer; upstream sends ``context ?? JSON(output)`` too), a string as is, anything else (a
    denial ``{status, reason}``, an ``{error}``) as compact JSON. Sending the whole object sent a
    string result twice and spent tokens on data meant for programs."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        context = output.get("context")
        if isinstance(context, str):
            return context
    return encode(output)


def is_error_output(output: Any) -> bool:
    """A denial (``{status: "denied", ...}``) or a failure (``{error: ...}`` with a message): what
    Anthropic's ``tool_result.is_error`` marks."""
    if not isinstance(output, dict):
        return False
    return output.get("status") == "denied" or output.get("error") is not None


def serialize_output(output: Any, encode: Callable[[Any], str] | None = None) -> str:
    """A tool output as message text: strings as is, anything else as compact JSON (``encode``:
    a `compact_json_encoder` to reuse, else `COMPACT_JSON`)."""
    if isinstance(output, str):
        return output
    return COMPACT_JSON.encode(output) if encode is None else encode(output)


_ANTHROPIC_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")  # used with fullmatch: `$` would let "id\n" through
_UNSAFE_ID_CHAR: Final = re.compile(r"[^A-Za-z0-9_-]")
_SAFE_ID_BYTES: Final = bytes(
    c if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_-") else ord("_") for c in range(256)
)
"""`bytes.translate` table: ``_UNSAFE_ID_CHAR``'s replacement for ASCII text."""


def safe_tool_id(call_id: str, *, api: Literal["openai", "anthropic"]) -> str:
    """``call_id`` if the API accepts it as a tool call id, else a stable, collision-safe stand-in.

    OpenAI allows at most 40 characters; Anthropic requires ``^[a-zA-Z0-9_-]+$``. Namespaced ids
    such as ``run/call-1`` are rewritten to ``<sanitised prefix>_<12 hex of sha256>``. Pure function:
    a call and its result always map to the same id.
    """
    if api == "openai":
        if 0 < len(call_id) <= 40:
            return call_id
    elif _ANTHROPIC_ID.fullmatch(call_id):
        return call_id
    return stand_in_tool_id(call_id)


is_anthropic_tool_id: Final = _ANTHROPIC_ID.fullmatch
"""A match (truthy) when Anthropic accepts ``call_id`` as a tool id as it is (`safe_tool_id`)."""


def stand_in_tool_id(call_id: str) -> str:
    """`safe_tool_id`'s stand-in for an id the API rejects: ``<sanitised prefix>_<12 hex of
    sha256>`` (renderers check the id inline and call this only for a rejected one)."""
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:12]
    head = call_id[:27]  # one character for one: cut first
    if head.isascii():  # (a byte table: a third of the regular expression's time)
        prefix = head.encode().translate(_SAFE_ID_BYTES).decode()
    else:
        prefix = _UNSAFE_ID_CHAR.sub("_", head)
    return f"{prefix}_{digest}" if prefix else f"call_{digest}"
