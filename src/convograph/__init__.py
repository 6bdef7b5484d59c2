"""convograph: turn multi-agent LLM event streams into conversation graphs.

The public surface promised in the contract lives here: events (`parse_event`, `encode_event`,
`EventError`), the flat graph (`create_graph`, `reduce_event`, ...), projections (`project_thread`,
`project_messages`, `project_dag`), event logs (`open_event_log`) and `to_jsonable`. The hypergraph
lives in `convograph.hypergraph`, the server in `convograph.server`, the client in
`convograph.client`.
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
from convograph.projections import (
    ConversationProjector,
    DAGLayout,
    ThreadProjector,
    ViewContent,
    ViewNode,
    project_dag,
    project_messages,
    project_repl,
    project_thread,
)
from convograph.store import EventLog, MemoryEventLog, StoredEvent, open_event_log

__version__ = "0.1.0"

__all__ = [
    "ConversationProjector",
    "DAGLayout",
    "Event",
    "EventError",
    "EventLog",
    "Graph",
    "MemoryEventLog",
    "Node",
    "StoredEvent",
    "ThreadProjector",
    "ViewContent",
    "ViewNode",
    "__version__",
    "create_graph",
    "encode_event",
    "get_children",
    "get_nodes_in_run",
    "get_text",
    "get_tool_calls",
    "open_event_log",
    "parse_event",
    "project_dag",
    "project_messages",
    "project_repl",
    "project_thread",
    "reduce_event",
    "reduce_events",
    "to_jsonable",
    "walk_dfs",
]
