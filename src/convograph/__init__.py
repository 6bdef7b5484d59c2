"""convograph: turn multi-agent LLM event streams into conversation graphs.

The public surface promised in the contract lives here: events (`parse_event`, `encode_event`,
`EventError`), the flat graph (`create_graph`, `reduce_event`, ...), and `to_jsonable`.
"""

from convograph.events import Event, EventError, encode_event, parse_event
from convograph.graph import (
    Graph,
    Node,
    create_graph,
    get_children,
    get_nodes_in_run,
    get_text,
    get_tool_calls,
    reduce_event,
    reduce_events,
    walk_dfs,
)
from convograph.jsonable import to_jsonable

__version__ = "0.1.0"

__all__ = [
    "Event",
    "EventError",
    "Graph",
    "Node",
    "__version__",
    "create_graph",
    "encode_event",
    "get_children",
    "get_nodes_in_run",
    "get_text",
    "get_tool_calls",
    "parse_event",
    "reduce_event",
    "reduce_events",
    "to_jsonable",
    "walk_dfs",
]
