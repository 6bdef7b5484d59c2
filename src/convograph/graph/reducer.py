"""The flat-graph reducer: seed semantics (seeds 000, 001, 003) plus the fixes in docs/graph.md.

Seed rules: node ids as in seed 000's table; a sequential edge from the run's previous node; a
cross-run edge from ``parentId`` for the first node of a run; text / reasoning deltas with a known id
append to that node and add no edge.

Beyond upstream (each one documented in docs/graph.md):
- an event whose ``eventId`` was already applied is a no-op;
- a repeated non-streaming event updates its node in place: no self-loop, no duplicate edge, the run
  cursor does not move; an id taken by a node of another kind is reported in ``graph.diagnostics``;
- a ``parentId`` naming a run (not a node) resolves to that run's newest node;
- a child whose parent has not arrived is kept in ``graph.pending_parents`` and linked on arrival;
- the usage counter is per run and per graph (``<runId>:usage:0``, ``:1``, ...), so ids depend only
  on the events;
- an ``error`` without ``runId`` (a server-level failure) lands in the run ``"_stream"``.

Cost: O(1) amortised per event at the head of a lineage (a few dict operations); O(n) once when
extending an older version. ``reduce_events`` validates the whole batch before applying any of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from convograph.events import codec
from convograph.events.types import (
    Error,
    Event,
    HarnessEnd,
    HarnessStart,
    Reasoning,
    Relay,
    Text,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
    User,
    _Event,
)
from convograph.graph.model import Diagnostic, Graph, _Lineage
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

__all__ = ["STREAM_RUN_ID", "reduce_event", "reduce_events"]

STREAM_RUN_ID: Final = "_stream"
"""Run id given to run-less ``error`` events (server-level failures)."""

EventLike = Event | Mapping[str, Any] | str | bytes


def _as_event(event: EventLike) -> Event:
    if isinstance(event, _Event):
        return event
    return codec.parse_event(event)


def reduce_event(graph: Graph, event: EventLike) -> Graph:
    """Apply one event; return the new graph (or ``graph`` itself when nothing changes).

    ``event`` may be an `Event` or its wire form (mapping, str, bytes); invalid input raises
    `convograph.EventError` and changes nothing. The input graph is never changed.
    """
    return _reduce(graph, _as_event(event))


def reduce_events(graph: Graph, events: Iterable[EventLike]) -> Graph:
    """Apply events in order. The batch is validated first: one bad event applies none."""
    parsed = [_as_event(event) for event in events]
    for event in parsed:
        graph = _reduce(graph, event)
    return graph


def _reduce(graph: Graph, event: Event) -> Graph:
    lineage = graph._lineage
    version = graph._version
    event_id = event.event_id
    if event_id is not None and lineage.seen_event_ids.get_at(event_id, version) is not None:
        return graph
    builder = _BUILDERS.get(type(event))
    if builder is None:  # connected, relay_resolved, repl_*: no flat-graph node
        return graph
    clock = lineage.clock
    with clock.lock:
        if not clock.can_extend(version):
            lineage = lineage.fork_at(version)
            version = 0
            clock = lineage.clock
        stamp = version + 1
        try:
            changed = _apply(lineage, version, stamp, event, builder)
            if not changed:
                return graph
            if event_id is not None:
                lineage.seen_event_ids.set(event_id, True, stamp)
        except BaseException:
            clock.broken = True
            raise
        clock.version = stamp
    return Graph(lineage, stamp)


# --- node construction -----------------------------------------------------------------------------


def _run_of(event: Any) -> str:
    run_id: str | None = event.run_id
    return run_id if run_id is not None else STREAM_RUN_ID


def _text(event: Text, node_id: str, run_id: str) -> Node:
    return TextNode(id=node_id, run_id=run_id, fragments=Fragments(event.content))


def _reasoning(event: Reasoning, node_id: str, run_id: str) -> Node:
    return ReasoningNode(
        id=node_id,
        run_id=run_id,
        fragments=Fragments(event.content),
        signature=event.signature,
        redacted_data=event.redacted_data,
    )


def _tool_call(event: ToolCall, node_id: str, run_id: str) -> Node:
    return ToolCallNode(id=node_id, run_id=run_id, name=event.name, input=event.input)


def _tool_result(event: ToolResult, node_id: str, run_id: str) -> Node:
    return ToolResultNode(id=node_id, run_id=run_id, name=event.name, output=event.output)


def _tool_progress(event: ToolProgress, node_id: str, run_id: str) -> Node:
    return ToolProgressNode(
        id=node_id, run_id=run_id, tool_call_id=event.tool_call_id, name=event.name, content=event.content
    )


def _user(event: User, node_id: str, run_id: str) -> Node:
    return UserNode(id=node_id, run_id=run_id, content=event.content)


def _harness_start(event: HarnessStart, node_id: str, run_id: str) -> Node:
    return HarnessStartNode(id=node_id, run_id=run_id, agent_id=event.agent_id)


def _harness_end(event: HarnessEnd, node_id: str, run_id: str) -> Node:
    return HarnessEndNode(id=node_id, run_id=run_id, agent_id=event.agent_id)


def _error(event: Error, node_id: str, run_id: str) -> Node:
    return ErrorNode(id=node_id, run_id=run_id, message=event.message)


def _usage(event: Usage, node_id: str, run_id: str) -> Node:
    return UsageNode(
        id=node_id,
        run_id=run_id,
        input_tokens=event.input_tokens,
        output_tokens=event.output_tokens,
        cache_read_tokens=event.cache_read_tokens,
        cache_creation_tokens=event.cache_creation_tokens,
    )


def _relay(event: Relay, node_id: str, run_id: str) -> Node:
    return RelayNode(
        id=node_id,
        run_id=run_id,
        relay_kind=event.kind,
        tool_call_id=event.tool_call_id,
        tool=event.tool,
        params=event.params,
    )


_BUILDERS: Final[dict[type[Any], Any]] = {
    Text: _text,
    Reasoning: _reasoning,
    ToolCall: _tool_call,
    ToolResult: _tool_result,
    ToolProgress: _tool_progress,
    User: _user,
    HarnessStart: _harness_start,
    HarnessEnd: _harness_end,
    Error: _error,
    Usage: _usage,
    Relay: _relay,
}

_SUFFIX: Final[dict[type[Any], str]] = {
    HarnessStart: ":harness_start",
    HarnessEnd: ":harness_end",
    Error: ":error",
    User: ":user",
}


def _node_id(lineage: _Lineage, version: int, stamp: int, event: Any, run_id: str) -> str:
    kind = type(event)
    suffix = _SUFFIX.get(kind)
    if suffix is not None:
        return run_id + suffix
    if kind is ToolResult:
        return f"{event.id}:result"
    if kind is Usage:
        count = lineage.usage_counts.get_at(run_id, version, 0)
        lineage.usage_counts.set(run_id, count + 1, stamp)  # type: ignore[operator]
        return f"{run_id}:usage:{count}"
    node_id: str = event.id
    return node_id


# --- application -----------------------------------------------------------------------------------


def _apply(lineage: _Lineage, version: int, stamp: int, event: Any, builder: Any) -> bool:
    """Write one event's changes stamped ``stamp``. Returns False when nothing changes."""
    run_id = _run_of(event)
    node_id = _node_id(lineage, version, stamp, event, run_id)
    nodes = lineage.nodes
    existing = nodes.get_at(node_id, version)
    if existing is not None:
        return _update(lineage, stamp, existing, event, builder)

    nodes.set(node_id, builder(event, node_id, run_id), stamp)
    last = lineage.last_node_by_run_id
    prev = last.get_at(run_id, version)
    # A new node is nobody's target yet, so the edge added here is its only incoming one (no
    # self-loop or duplicate is possible): it goes to the parent index as is.
    if prev is not None:
        lineage.edges.append(prev, node_id, stamp)
        lineage.parents.append(prev)
    else:
        lineage.first_node_by_run_id.set(run_id, node_id, stamp)
        parent_id = event.parent_id
        source = None
        if parent_id is not None and parent_id != node_id:
            source = (
                parent_id if nodes.get_at(parent_id, version) is not None else last.get_at(parent_id, version)
            )
            if source is not None:
                lineage.edges.append(source, node_id, stamp)
            else:
                waiting = lineage.pending_children.get_at(parent_id, version, ())
                lineage.pending_children.set(parent_id, (*waiting, node_id), stamp)  # type: ignore[misc]
        lineage.parents.append(source)
        # Runs that named this run as their parent before it had any node.
        if lineage.pending_children.get_at(run_id, version) is not None:
            _adopt_waiting(lineage, version, stamp, run_id, node_id)
    if lineage.pending_children.get_at(node_id, version) is not None:
        _adopt_waiting(lineage, version, stamp, node_id, node_id)
    last.set(run_id, node_id, stamp)
    return True


def _update(lineage: _Lineage, stamp: int, existing: Node, event: Any, builder: Any) -> bool:
    kind = existing.kind
    if kind != event.type:
        lineage.diagnostics.append(
            Diagnostic(
                code="id_conflict",
                node_id=existing.id,
                event_type=event.type,
                message=(
                    f"node id {existing.id!r} is already a {kind} node; "
                    f"the {event.type} event was not applied"
                ),
            ),
            stamp,
        )
        return True
    if isinstance(existing, TextNode):
        updated: Node = msgspec.structs.replace(existing, fragments=existing.fragments.append(event.content))
    elif isinstance(existing, ReasoningNode):
        updated = msgspec.structs.replace(
            existing,
            fragments=existing.fragments.append(event.content),
            signature=event.signature if event.signature is not None else existing.signature,
        )
    else:
        updated = builder(event, existing.id, existing.run_id)
        if updated == existing:
            return False
    lineage.nodes.set(existing.id, updated, stamp)
    return True


def _add_edge(lineage: _Lineage, source: str, target: str, stamp: int) -> None:
    if source == target or target in lineage.edges.head_list(source):
        return
    lineage.edges.append(source, target, stamp)


def _adopt_waiting(lineage: _Lineage, version: int, stamp: int, key: str, source: str) -> None:
    """Link the children waiting for ``key`` from ``source``: edges to nodes that already exist,
    which the parent index does not hold, so it is marked stale from ``stamp`` on."""
    pending = lineage.pending_children
    waiting = pending.get_at(key, version)
    if waiting is None:
        return
    for child in waiting:
        _add_edge(lineage, source, child, stamp)
    if stamp < lineage.adopted_at:
        lineage.adopted_at = stamp
    pending.delete(key, stamp)
