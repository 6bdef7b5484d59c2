"""The wire event vocabulary as frozen msgspec Structs, one tagged union on ``type``.

Wire names are camelCase exactly as in the seed documents (``runId``, ``toolCallId``, ...); Python
attributes are their snake_case twins. Every event may carry the envelope fields ``eventId``
(identity for idempotency), ``seq`` (assigned by an event log) and ``timestamp``.

Invariants:
- Events are immutable values; ``==`` compares every field, extras included.
- ``extra`` holds wire fields this version does not know, so nothing a producer sent is lost. It is
  ``None`` (not an empty dict) when there are none.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

__all__ = [
    "EVENT_TYPES",
    "Command",
    "Connected",
    "ContentPart",
    "DocumentPart",
    "Edit",
    "Error",
    "Event",
    "HarnessEnd",
    "HarnessStart",
    "ImagePart",
    "Reasoning",
    "Regenerate",
    "Relay",
    "RelayResolved",
    "ReplInput",
    "ReplOutput",
    "ReplProgress",
    "Summarize",
    "SwitchBranch",
    "Text",
    "TextPart",
    "ToolCall",
    "ToolProgress",
    "ToolResult",
    "TotalUsage",
    "Usage",
    "User",
]

EXTRA_FIELD: Final = "__extra__"
"""Wire name of the slot that keeps unknown fields; never sent: `encode_event` flattens it."""


# --- user content parts ---------------------------------------------------------------------------


class _Part(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", rename="camel"):
    pass


class TextPart(_Part, frozen=True, tag="text"):
    text: str


class ImagePart(_Part, frozen=True, tag="image"):
    media_type: str
    data: str
    """Base64 payload."""


class DocumentPart(_Part, frozen=True, tag="document"):
    media_type: str
    data: str


ContentPart = TextPart | ImagePart | DocumentPart


# --- events ---------------------------------------------------------------------------------------


class _Event(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="type",
    rename="camel",
    omit_defaults=True,
    gc=False,
):
    """Fields every event may carry. Not tracked by the cyclic GC (events never form cycles)."""

    parent_id: str | None = None
    agent_id: str | None = None
    event_id: str | None = None
    seq: int | None = None
    timestamp: str | int | float | None = None
    extra: dict[str, Any] | None = msgspec.field(default=None, name=EXTRA_FIELD)

    @property
    def type(self) -> str:
        """The wire ``type`` tag."""
        return self.__struct_config__.tag  # type: ignore[return-value]


class _RunEvent(_Event, frozen=True, kw_only=True):
    run_id: str


class Connected(_Event, frozen=True, tag="connected"):
    """First event of a server stream; creates no node."""

    run_id: str | None = None
    session_id: str | None = None
    source_ids: list[str] | None = None


class HarnessStart(_RunEvent, frozen=True, tag="harness_start"):
    depth: int | None = None
    max_iterations: int | None = None


class TotalUsage(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None = None
    cache_creation_tokens: int | None = None


class HarnessEnd(_RunEvent, frozen=True, tag="harness_end"):
    reason: str | None = None
    iterations: int | None = None
    total_usage: TotalUsage | None = None


class Text(_RunEvent, frozen=True, tag="text"):
    """A streamed text delta; every delta of one stream shares ``id``."""

    id: str
    content: str


class Reasoning(_RunEvent, frozen=True, tag="reasoning"):
    """A streamed reasoning delta; ``signature`` carries a provider's thinking-block signature.

    ``redacted_data`` (wire ``redactedData``): the opaque payload of a thinking block the provider
    redacted (Anthropic's ``redacted_thinking``), to be sent back as is; its ``content`` is
    usually empty. A block's redacted data is the one its first event carries (a redacted block
    arrives whole)."""

    id: str
    content: str
    signature: str | None = None
    redacted_data: str | None = None


class ToolCall(_RunEvent, frozen=True, tag="tool_call"):
    id: str
    name: str
    input: Any = None


class ToolResult(_RunEvent, frozen=True, tag="tool_result"):
    """Result of a tool call; ``id`` equals the call's id."""

    id: str
    name: str
    output: Any = None


class ToolProgress(_RunEvent, frozen=True, tag="tool_progress"):
    id: str
    tool_call_id: str
    name: str
    content: Any = None


class User(_RunEvent, frozen=True, tag="user"):
    content: str | list[ContentPart]
    id: str | None = None


class Error(_Event, frozen=True, tag="error"):
    """A failure. Server-level errors carry no ``runId``."""

    message: str
    run_id: str | None = None


class Usage(_RunEvent, frozen=True, tag="usage"):
    """Token usage of one provider call."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None = None
    cache_creation_tokens: int | None = None


class Relay(_RunEvent, frozen=True, tag="relay"):
    """A human-in-the-loop permission request; ``id`` is the relay id."""

    id: str
    kind: Literal["permission"]
    tool_call_id: str
    tool: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)


class RelayResolved(_Event, frozen=True, tag="relay_resolved"):
    """The decision on a relay (client side, or recorded by the server)."""

    relay_id: str
    approved: bool
    tool: str | None = None
    reason: str | None = None
    run_id: str | None = None
    always: bool = False
    """An approval that also stands for later calls of ``tool`` whose parameters match the rule
    derived from this relay's (`convograph.harness.permissions.derive_rule`): "always allow"."""


class ReplInput(_RunEvent, frozen=True, tag="repl_input"):
    id: str
    code: str
    iteration: int | None = None


class ReplProgress(_RunEvent, frozen=True, tag="repl_progress"):
    id: str
    chunk: str
    stream: Literal["stdout", "stderr"] = "stdout"


class ReplOutput(_RunEvent, frozen=True, tag="repl_output"):
    id: str
    stdout: str = ""
    error: str | None = None
    done: bool = False
    iteration: int | None = None
    duration_ms: int | float | None = None
    truncated: bool | None = None


# --- user commands (convograph additions: steering a conversation through its log) ------------------


class Edit(_Event, frozen=True, tag="edit"):
    """Replace ``messageId`` by a new sibling branch holding ``content`` (the original is kept)."""

    message_id: str
    content: str | list[ContentPart]
    run_id: str | None = None


class Regenerate(_Event, frozen=True, tag="regenerate"):
    """Open an empty sibling of assistant message ``messageId``; the next run's output fills it."""

    message_id: str
    run_id: str | None = None


class SwitchBranch(_Event, frozen=True, tag="switch_branch"):
    """Make the branch through ``messageId`` the active one."""

    message_id: str


class Summarize(_Event, frozen=True, tag="summarize"):
    """Replace the active messages ``firstId``..``lastId`` by a summary holding ``text``."""

    first_id: str
    last_id: str
    text: str
    model: str | None = None
    thread_id: str | None = None
    run_id: str | None = None


Command = Edit | Regenerate | SwitchBranch | Summarize
"""User commands: recorded in the log like any event, applied by `convograph.hypergraph.commands`."""

Event = (
    Connected
    | HarnessStart
    | HarnessEnd
    | Text
    | Reasoning
    | ToolCall
    | ToolResult
    | ToolProgress
    | User
    | Error
    | Usage
    | Relay
    | RelayResolved
    | ReplInput
    | ReplProgress
    | ReplOutput
    | Edit
    | Regenerate
    | SwitchBranch
    | Summarize
)
"""Every event the library understands."""

EVENT_CLASSES: Final[tuple[type[_Event], ...]] = (
    Connected,
    HarnessStart,
    HarnessEnd,
    Text,
    Reasoning,
    ToolCall,
    ToolResult,
    ToolProgress,
    User,
    Error,
    Usage,
    Relay,
    RelayResolved,
    ReplInput,
    ReplProgress,
    ReplOutput,
    Edit,
    Regenerate,
    SwitchBranch,
    Summarize,
)

EVENT_TYPES: Final[frozenset[str]] = frozenset(str(cls.__struct_config__.tag) for cls in EVENT_CLASSES)
"""The wire ``type`` values."""
