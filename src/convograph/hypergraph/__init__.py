"""The hypergraph conversation model (seed 000 "Hypergraph model", issue 3).

Chunks (events) -> blocks -> messages, typed hyperedges (``sequence``, ``block``, ``message``,
``summary``, ``spawn``), persistent versions, an incremental active path and chat operations. See
docs/hypergraph.md for the model, invariants and deviations from upstream.

Modules, in dependency order: `store` (storage, `ViewOptions`), `records` (the query records and
their builders), `active` (active path, walk), `tiers`, `runs`, `tools`, `views` and `shown` (typed
reads by concern, all in the `queries` namespace), `model` (the `Conversation` value), `writer`
(the reducer's writes into the store), `reducer` (events), `operations` (edit, regenerate, switch,
summarize, close), `edges` (hyperedges derived from the tier indexes).
"""

from convograph.hypergraph.active import Active, default_active, walk
from convograph.hypergraph.edges import HyperEdge, edges_of, find_edges, iter_edges
from convograph.hypergraph.model import (
    MAIN_THREAD,
    STREAM_RUN_ID,
    Conversation,
    Diagnostic,
    RelayDecision,
    RunStatus,
    SpawnKind,
    SummaryInfo,
    UsageTotals,
    ViewOptions,
    create_conversation,
)
from convograph.hypergraph.operations import (
    OperationError,
    append_user_message,
    close_stream,
    edit_message,
    fork_point,
    list_siblings,
    regenerate,
    summarize_range,
    switch_branch,
)
from convograph.hypergraph.reducer import reduce_conversation, reduce_conversation_events

__all__ = [
    "MAIN_THREAD",
    "STREAM_RUN_ID",
    "Active",
    "Conversation",
    "Diagnostic",
    "HyperEdge",
    "OperationError",
    "RelayDecision",
    "RunStatus",
    "SpawnKind",
    "SummaryInfo",
    "UsageTotals",
    "ViewOptions",
    "append_user_message",
    "close_stream",
    "create_conversation",
    "default_active",
    "edges_of",
    "edit_message",
    "find_edges",
    "fork_point",
    "iter_edges",
    "list_siblings",
    "reduce_conversation",
    "reduce_conversation_events",
    "regenerate",
    "summarize_range",
    "switch_branch",
    "walk",
]
