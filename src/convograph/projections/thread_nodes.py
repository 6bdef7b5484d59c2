"""Node types the thread placement takes beyond the flat graph's (`convograph.graph.nodes`).

REPL chunks become thread nodes only for a hypergraph with ``ViewOptions(repl_cells=True)``: the
flat graph keeps no ``repl_*`` nodes. These are msgspec Structs, so they live apart from the
compiled placement module (`convograph.projections.placement`: mypyc drops Struct options).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from convograph.projections.view import ReplResult

__all__ = [
    "RESULT_SUFFIX",
    "ReplInputNode",
    "ReplOutputNode",
    "ReplProgressNode",
    "Run",
    "call_id_of_result",
]

RESULT_SUFFIX: Final = ":result"
"""A tool_result node's id is its call's id with this suffix."""


class Run(msgspec.Struct, gc=False):
    """Lifecycle flags, spawner and views of one run of a thread build. Untracked by the cyclic GC
    (it holds strings and lists of views, never itself): a build has one per run, ~18k for a
    100k-node conversation. ``children`` and ``views`` (incremental builds only) are made with
    their first entry."""

    started: bool = False
    ended: bool = False
    errored: bool = False
    parent: str | None = None
    children: list[str] | None = None
    views: list[Any] | None = None


def call_id_of_result(node_id: str) -> str:
    """The tool call id of a tool_result node id (``<id>:result``)."""
    return node_id[: -len(RESULT_SUFFIX)] if node_id.endswith(RESULT_SUFFIX) else node_id


class _ReplNode(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", gc=False):
    """A REPL chunk made a thread node."""

    id: str
    run_id: str

    @property
    def kind(self) -> str:
        return self.__struct_config__.tag  # type: ignore[return-value]


class ReplInputNode(_ReplNode, frozen=True, tag="repl_input"):
    code: str
    iteration: int | None = None


class ReplProgressNode(_ReplNode, frozen=True, tag="repl_progress"):
    repl_id: str
    """The event's ``id``: its turn's ``repl_input`` id (or a fresh id: then the run's latest turn)."""
    chunk: str
    stream: str = "stdout"


class ReplOutputNode(_ReplNode, frozen=True, tag="repl_output"):
    repl_id: str
    result: ReplResult
