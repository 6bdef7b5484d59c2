"""Projections: the conversation graph as views for chat UIs, LLM APIs and visualisations.

- `project_thread` -> nested `ViewNode`s (`thread`);
- `project_messages` -> request histories for OpenAI Chat Completions, Anthropic Messages or the
  gateway's own format (`messages`, one adapter module per format);
- `project_dag` -> a layered `DAGLayout` with ``to_svg()`` (`dag`);
- `project_repl` -> RLM agents, turns and child agents of a hypergraph conversation (`repl`);
- `ThreadProjector` / `ConversationProjector` -> the thread kept current in O(delta) per event
  (`incremental`).

Each takes a flat `convograph.Graph`, or a hypergraph ``(conversation, active)``.
"""

# ruff: noqa: E402 (the package path is set before its modules are imported)
from convograph._native import compiled_path

__path__[:0] = compiled_path(__name__)  # the layout engine's compiled build, when fresh (`_native`)

from convograph.projections.dag import DAGEdge, DAGGroup, DAGLayout, DAGNode, project_dag
from convograph.projections.incremental import ConversationProjector, ThreadProjector
from convograph.projections.messages import FORMATS, project_messages
from convograph.projections.progress import (
    Accumulator,
    CollectAll,
    ExecAccumulator,
    KeepLatest,
    ProgressRegistry,
    default_registry,
    register_accumulator,
)
from convograph.projections.repl import (
    ReplAgent,
    ReplOutputInfo,
    ReplProjector,
    ReplTurn,
    ReplUsage,
    ReplView,
    flatten_agents,
    project_repl,
)
from convograph.projections.thread import ThreadBuilder, project_thread
from convograph.projections.view import (
    NO_BRANCHES,
    ErrorContent,
    NoBranches,
    PendingContent,
    ReasoningContent,
    RelayContent,
    ReplContent,
    ReplResult,
    TextContent,
    ToolCallContent,
    UserContent,
    ViewContent,
    ViewNode,
    ViewOptions,
)

__all__ = [
    "FORMATS",
    "NO_BRANCHES",
    "Accumulator",
    "CollectAll",
    "ConversationProjector",
    "DAGEdge",
    "DAGGroup",
    "DAGLayout",
    "DAGNode",
    "ErrorContent",
    "ExecAccumulator",
    "KeepLatest",
    "NoBranches",
    "PendingContent",
    "ProgressRegistry",
    "ReasoningContent",
    "RelayContent",
    "ReplAgent",
    "ReplContent",
    "ReplOutputInfo",
    "ReplProjector",
    "ReplResult",
    "ReplTurn",
    "ReplUsage",
    "ReplView",
    "TextContent",
    "ThreadBuilder",
    "ThreadProjector",
    "ToolCallContent",
    "UserContent",
    "ViewContent",
    "ViewNode",
    "ViewOptions",
    "default_registry",
    "flatten_agents",
    "project_dag",
    "project_messages",
    "project_repl",
    "project_thread",
    "register_accumulator",
]
