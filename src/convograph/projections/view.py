"""View types of the thread projection (seed 001 "ViewNode", "ViewContent").

`ViewNode` and the `ViewContent` variants are msgspec Structs tagged on ``kind``; attributes are
snake_case, `convograph.to_jsonable` gives camelCase keys (``runId``, ``toolCallId``, ...).

They are mutable on purpose: the incremental projector (`convograph.projections.incremental`)
updates a view in place in O(1) when a delta, a result or a status change arrives. A one-shot
projection returns fresh objects that nothing else holds.

Views and contents are not tracked by the cyclic garbage collector (``gc=False``): a view tree is
acyclic (every view sits in exactly one list, and a branch list belongs to one view), and a 100k-view
projection would otherwise trigger full collections that cost more than building it. Reference
counting frees them as usual; the one thing not to do is put a view into its own subtree (that
cycle would never be collected).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Literal

import msgspec

from convograph.events.types import ContentPart

__all__ = [
    "ErrorContent",
    "PendingContent",
    "ReasoningContent",
    "RelayContent",
    "ReplContent",
    "ReplResult",
    "Role",
    "Status",
    "TextContent",
    "ToolCallContent",
    "UserContent",
    "ViewContent",
    "ViewNode",
    "ViewOptions",
]

Role = Literal["user", "assistant"]
Status = Literal["streaming", "complete", "error"]


class _Content(msgspec.Struct, kw_only=True, tag_field="kind", rename="camel", gc=False):
    @property
    def kind(self) -> str:
        return self.__struct_config__.tag  # type: ignore[return-value]


class TextContent(_Content, tag="text"):
    text: str


class ReasoningContent(_Content, tag="reasoning"):
    text: str
    signature: str | None = None
    """A provider's thinking-block signature, kept so the block survives a round trip."""
    redacted_data: str | None = None
    """A redacted thinking block's opaque payload (JSON ``redactedData``), sent back as is."""


class ToolCallContent(_Content, tag="tool_call"):
    """A tool call with its result merged in: ``has_output`` is False and ``output`` None until the
    result arrives (a result may itself be ``null``: ``has_output`` tells them apart).

    ``input`` is ``None`` for a call known only from its result (an orphan result, or a denied call
    whose relay is unknown); a denied call takes its input from the relay's ``params``.
    """

    name: str
    input: Any = None
    output: Any = None
    has_output: bool = False
    progress: Any = None


class UserContent(_Content, tag="user"):
    content: str | list[ContentPart]


class ErrorContent(_Content, tag="error"):
    message: str


class PendingContent(_Content, tag="pending"):
    """A run that has started and produced nothing yet."""


class RelayContent(_Content, tag="relay"):
    relay_kind: Literal["permission"]
    tool_call_id: str
    tool: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)


class ReplResult(msgspec.Struct, kw_only=True, rename="camel", gc=False):
    """What a REPL turn's ``repl_output`` reported."""

    stdout: str = ""
    error: str | None = None
    done: bool = False
    """True when the turn called FINAL / FINAL_VAR."""
    duration_ms: int | float | None = None
    truncated: bool = False


class ReplContent(_Content, tag="repl"):
    """One REPL turn (``repl_input``), with the stdout / stderr streamed so far (``repl_progress``)
    and its ``result`` once ``repl_output`` arrives. Beyond the seed (whose thread drops
    ``repl_*`` events, as upstream's does): only the hypergraph thread with
    ``ViewOptions(repl_cells=True)`` makes these; runs the turn spawned nest in its ``branches``."""

    code: str
    iteration: int | None = None
    stdout: str = ""
    stderr: str = ""
    result: ReplResult | None = None


ViewContent = (
    TextContent
    | ReasoningContent
    | ToolCallContent
    | UserContent
    | ErrorContent
    | PendingContent
    | RelayContent
    | ReplContent
)


class NoBranches(list[list["ViewNode"]]):
    """The ``branches`` of a projected view that has none: one empty list shared by every such view
    (`NO_BRANCHES`), so a 100k-node thread leaves no tracked empty list per view for the cyclic
    garbage collector (~41k fewer objects, and the full collections they set off). Read it as any
    empty list (it equals ``[]``, encodes as ``[]``); it refuses to grow, since every leaf shares it:
    give a view branches by assigning a list (``view.branches = [...]``; ``+=`` does that)."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "this view has no branches and shares its empty list with every view that has none: "
            "assign a new list (view.branches = [...]) instead of changing it in place"
        )

    append = extend = insert = __setitem__ = __delitem__ = __imul__ = _refuse  # type: ignore[assignment]

    def __iadd__(self, other: Iterable[list[ViewNode]]) -> list[list[ViewNode]]:  # type: ignore[override,misc]
        return [*other]


NO_BRANCHES: Final = NoBranches()
"""The shared empty ``branches`` of projected views without branches (see `NoBranches`)."""


def add_branch(view: ViewNode, branch: list[ViewNode]) -> None:
    """Append ``branch`` to ``view``'s branches (a new list in place of the shared `NO_BRANCHES`)."""
    if view.branches is NO_BRANCHES:
        view.branches = [branch]
    else:
        view.branches.append(branch)


class ViewNode(msgspec.Struct, kw_only=True, rename="camel", gc=False):
    """One renderable block of a conversation thread.

    ``branches`` holds one list per child run spawned from this block (subagents), nested to any
    depth; a projected view without branches holds `NO_BRANCHES`, a shared empty list that refuses
    to grow (assign a new list to add branches). ``status`` is the status of ``run_id`` (see
    `convograph.projections.thread`).
    """

    id: str
    run_id: str
    role: Role
    content: ViewContent
    status: Status
    branches: list[list[ViewNode]] = msgspec.field(default_factory=list)


class ViewOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Selective projection (seed 000 "Hypergraph model": hide reasoning, collapse tool calls).

    - ``hide_reasoning``: reasoning blocks produce no view (their child runs still show).
    - ``collapse_tools``: tool calls keep their name and whether they finished; ``input``,
      ``output`` and ``progress`` payloads are dropped (``output`` becomes ``True`` once a result
      has arrived).
    - ``hide_subagents``: runs spawned by a tool call are left out (no ``branches`` on tool calls).
    - ``repl_cells``: REPL turns show as `ReplContent` views (hypergraph only: the flat graph keeps
      no ``repl_*`` nodes). Off by default, as the seed's thread has no such kind; a run's text
      is then merged across its REPL turns, as seed and upstream do.
    """

    hide_reasoning: bool = False
    collapse_tools: bool = False
    hide_subagents: bool = False
    repl_cells: bool = False
