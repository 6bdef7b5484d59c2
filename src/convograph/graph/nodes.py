"""Flat-graph nodes: one frozen Struct per kind, tagged on ``kind`` (seed 000 "Nodes").

Text and reasoning nodes hold their streamed fragments in a `Fragments` chain, so appending a delta
is O(1) time and memory and every older version keeps its own (shorter) text. ``node.content`` joins
the chain; the joined string is memoised on the newest cell only.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from convograph.events.types import ContentPart

__all__ = [
    "KIND_OF_NODE_TYPE",
    "ErrorNode",
    "Fragments",
    "HarnessEndNode",
    "HarnessStartNode",
    "Node",
    "ReasoningNode",
    "RelayNode",
    "TextNode",
    "ToolCallNode",
    "ToolProgressNode",
    "ToolResultNode",
    "UsageNode",
    "UserNode",
]


class Fragments(msgspec.Struct, gc=False):
    """An immutable cons-list of text fragments, newest last. ``append`` is O(1).

    Not tracked by the cyclic GC (a chain never forms a cycle), so long streams do not slow
    collections down. ``memo`` caches the joined text on the newest cell that was read.
    """

    fragment: str
    prev: Fragments | None = None
    length: int = -1
    memo: str | None = None

    def __post_init__(self) -> None:
        if self.length < 0:
            self.length = len(self.fragment) + (self.prev.length if self.prev is not None else 0)

    def append(self, fragment: str) -> Fragments:
        return Fragments(fragment, self, self.length + len(fragment))

    def text(self) -> str:
        """The whole text. O(fragments since the last memoised cell + length)."""
        if self.memo is not None:
            return self.memo
        pieces: list[str] = []
        cell: Fragments | None = self
        while cell is not None and cell.memo is None:
            pieces.append(cell.fragment)
            cell = cell.prev
        if cell is not None:
            pieces.append(cell.memo)  # type: ignore[arg-type]
            cell.memo = None  # keep one memo per chain, so history costs no extra strings
        pieces.reverse()
        joined = "".join(pieces)
        self.memo = joined
        return joined

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fragments):
            return NotImplemented
        return self is other or (self.length == other.length and self.text() == other.text())

    def __hash__(self) -> int:
        return hash(self.text())

    def __repr__(self) -> str:
        return f"Fragments({self.text()!r})"


class _Node(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", rename="camel", omit_defaults=True, gc=False
):
    id: str
    run_id: str

    @property
    def kind(self) -> str:
        return self.__struct_config__.tag  # type: ignore[return-value]


class TextNode(_Node, frozen=True, tag="text"):
    fragments: Fragments = msgspec.field(name="content")

    @property
    def content(self) -> str:
        return self.fragments.text()


class ReasoningNode(_Node, frozen=True, tag="reasoning"):
    fragments: Fragments = msgspec.field(name="content")
    signature: str | None = None
    redacted_data: str | None = None
    """From the node's first event (`convograph.events.Reasoning.redacted_data`)."""

    @property
    def content(self) -> str:
        return self.fragments.text()


class ToolCallNode(_Node, frozen=True, tag="tool_call"):
    name: str
    input: Any = None


class ToolResultNode(_Node, frozen=True, tag="tool_result"):
    name: str
    output: Any = None


class ToolProgressNode(_Node, frozen=True, tag="tool_progress"):
    tool_call_id: str
    name: str
    content: Any = None


class UserNode(_Node, frozen=True, tag="user"):
    content: str | list[ContentPart]


class HarnessStartNode(_Node, frozen=True, tag="harness_start"):
    agent_id: str | None = None


class HarnessEndNode(_Node, frozen=True, tag="harness_end"):
    agent_id: str | None = None


class ErrorNode(_Node, frozen=True, tag="error"):
    message: str


class UsageNode(_Node, frozen=True, tag="usage"):
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None = None
    cache_creation_tokens: int | None = None


class RelayNode(_Node, frozen=True, tag="relay"):
    relay_kind: Literal["permission"]
    tool_call_id: str
    tool: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)


Node = (
    TextNode
    | ReasoningNode
    | ToolCallNode
    | ToolResultNode
    | ToolProgressNode
    | UserNode
    | HarnessStartNode
    | HarnessEndNode
    | ErrorNode
    | UsageNode
    | RelayNode
)

KIND_OF_NODE_TYPE: Final[dict[type[Any], str]] = {
    cls: str(cls.__struct_config__.tag)
    for cls in (
        TextNode,
        ReasoningNode,
        ToolCallNode,
        ToolResultNode,
        ToolProgressNode,
        UserNode,
        ErrorNode,
        RelayNode,
        HarnessStartNode,
        HarnessEndNode,
        UsageNode,
    )
}
"""Node class -> its ``kind`` tag (a dict lookup is cheaper than ``node.kind`` in hot loops)."""
