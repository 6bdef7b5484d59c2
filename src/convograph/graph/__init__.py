"""The flat conversation graph (seeds 000, 001, 003): nodes, reducer and queries."""

from convograph.graph.model import Diagnostic, Graph, create_graph
from convograph.graph.nodes import (
    ErrorNode,
    Fragments,
    HarnessEndNode,
    HarnessStartNode,
    Node,
    ReasoningNode,
    RelayNode,
    TextNode,
    ToolCallNode,
    ToolProgressNode,
    ToolResultNode,
    UsageNode,
    UserNode,
)
from convograph.graph.queries import (
    get_children,
    get_nodes_in_run,
    get_text,
    get_tool_calls,
    iter_dfs,
    iter_run,
    roots,
    walk_dfs,
)
from convograph.graph.reducer import STREAM_RUN_ID, reduce_event, reduce_events

__all__ = [
    "STREAM_RUN_ID",
    "Diagnostic",
    "ErrorNode",
    "Fragments",
    "Graph",
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
    "create_graph",
    "get_children",
    "get_nodes_in_run",
    "get_text",
    "get_tool_calls",
    "iter_dfs",
    "iter_run",
    "reduce_event",
    "reduce_events",
    "roots",
    "walk_dfs",
]
