"""Data layer 1 exactly as seed 004: Sessions, ToolCalls and triple-labelled Events.

This module is pure: it turns `EventFacts` (one accepted hook event with its final node id and
its blob-offloaded payload) into a `GraphBatch` of rows; `convograph.intelligence.writer` turns
rows into ``UNWIND`` statements. A *handler* is ``(facts, batch) -> None``; `LAYER1_HANDLERS` is
the tuple the pipeline runs; later layers (kernel, foundation) add handlers of the same shape.

Every row merge is commutative and idempotent, so the final graph does not depend on arrival
order, redelivery or replays:

- Session: ``parent_id`` = the ``session:fork`` parent, else the ``session:start`` one;
  ``started_at`` = earliest ``session:start``/``session:fork``; ``last_updated`` =
  latest event; ``ended_at`` = latest ``session:end``; ``status`` moves up the lattice
  running < completed < cancelled < failed; ``:ForkedSession`` (any ``session:fork``) beats
  ``:RootSession`` (a ``session:start`` without parent).
- ToolCall (``{session_id}__tool_call__{tool_call_id}``): ``started_at`` from ``tool:pre``,
  ``ended_at`` = latest of ``tool:post``/``tool:error``; ``result_success`` is the AND of all
  outcomes, read from the *original* payload before blob offload (fixes upstream §10 B1).
- ``HAS_FORK`` parent→child on ``session:fork``; ``HAS_TOOL_CALL`` Session→ToolCall and
  ``HAS_EVENT`` ToolCall→Event for every tool lifecycle event; ``HAS_EVENT`` Session→Event always.

Complexity: O(size of the lifted fields) per event; batch rows are grouped by label set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import msgspec

from convograph.intelligence.keys import graph_key
from convograph.intelligence.labels import derive_labels
from convograph.intelligence.lifters import lift_fields

__all__ = [
    "LAYER1_HANDLERS",
    "STATUS_RANK",
    "EventFacts",
    "EventRow",
    "GraphBatch",
    "Handler",
    "SessionRow",
    "ToolCallRow",
    "WorkspaceBatch",
    "conversation_model",
    "iso_ms",
    "model_response_row",
    "model_row",
    "plan_batch",
    "tool_call_node_id",
]

STATUS_RANK = {"running": 0, "completed": 1, "cancelled": 2, "failed": 3}
_STATUS_ALIASES = {
    "completed": "completed",
    "complete": "completed",
    "success": "completed",
    "succeeded": "completed",
    "ok": "completed",
    "cancelled": "cancelled",
    "canceled": "cancelled",
    "failed": "failed",
    "failure": "failed",
    "error": "failed",
}
_ERROR_PREVIEW = 1000
_json = msgspec.json.Encoder(order="sorted")  # canonical: live payloads and journal replays encode alike


_SECONDS_CACHE = 65536
_iso_seconds: dict[int, str] = {}
_MILLIS = tuple(f".{millis:03d}+00:00" for millis in range(1000))
"""``.mmm+00:00`` for every millisecond (no format spec parsed per call)."""


def iso_ms(epoch_ms: int) -> str:
    """``2026-03-02T09:00:00.002+00:00``: fixed width, UTC, so string order is time order.

    The ``YYYY-MM-DDTHH:MM:SS`` part is cached per whole second (events cluster in time), which
    makes this ~4x cheaper than formatting a datetime each time. Thread-safe (dict set/get)."""
    seconds = epoch_ms // 1000
    prefix = _iso_seconds.get(seconds)
    if prefix is None:
        if len(_iso_seconds) >= _SECONDS_CACHE:
            _iso_seconds.clear()
        prefix = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")[:-6]
        _iso_seconds[seconds] = prefix
    return prefix + _MILLIS[epoch_ms - seconds * 1000]


def tool_call_node_id(session_id: str, tool_call_id: str) -> str:
    """Seed-004 ToolCall id ``{session_id}__tool_call__{tool_call_id}`` (through `graph_key`: a
    ``tool_call_id`` the engine cannot key gets a stand-in)."""
    return graph_key(f"{session_id}__tool_call__{tool_call_id}")


# gc=False: never part of a reference cycle (it holds only decoded JSON values), so the cyclic
# GC need not track it; the ingest path makes one per event and GC passes were ~20 % of its CPU
class EventFacts(msgspec.Struct, frozen=True, gc=False):
    """One accepted event ready for the graph. ``data`` is the original payload; ``stored_data``
    is what the Event keeps (large fields replaced by blob references)."""

    workspace: str
    event: str
    session_id: str
    epoch_ms: int
    fingerprint: str
    node_id: str
    data: dict[str, Any]
    stored_data: dict[str, Any]
    created_by: str | None = None
    data_json: str = ""
    """The journal's JSON text of ``data`` (empty when unknown): reused as the Event's ``data``
    property when nothing was offloaded, instead of encoding ``stored_data`` again."""


class SessionRow(msgspec.Struct, gc=False):
    """Commutative summary of what one batch says about one session."""

    node_id: str
    started_ms: int | None = None
    last_ms: int | None = None
    ended_ms: int | None = None
    status_rank: int = 0
    root: bool = False
    forked: bool = False
    fork_parent: str | None = None
    start_parent: str | None = None
    agent_name: str | None = None

    def seen(self, epoch_ms: int) -> None:
        if self.last_ms is None or epoch_ms > self.last_ms:
            self.last_ms = epoch_ms

    def started(self, epoch_ms: int) -> None:
        if self.started_ms is None or epoch_ms < self.started_ms:
            self.started_ms = epoch_ms

    def to_row(self) -> dict[str, Any]:
        status = next(name for name, rank in STATUS_RANK.items() if rank == self.status_rank)
        return {
            "id": self.node_id,
            "start": self.started_ms,
            "start_iso": iso_ms(self.started_ms) if self.started_ms is not None else None,
            "last": self.last_ms,
            "last_iso": iso_ms(self.last_ms) if self.last_ms is not None else None,
            "end": self.ended_ms,
            "end_iso": iso_ms(self.ended_ms) if self.ended_ms is not None else None,
            "rank": self.status_rank,
            "status": status,
            "fork_parent": self.fork_parent,
            "start_parent": self.start_parent,
            "agent": self.agent_name,
        }


class ToolCallRow(msgspec.Struct, gc=False):
    """Commutative summary of one tool call's lifecycle events in a batch."""

    node_id: str
    session_id: str
    tool_call_id: str
    tool_name: str | None = None
    parallel_group_id: str | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    success: bool | None = None
    error: str | None = None
    output_bytes: int | None = None
    events: list[str] = msgspec.field(default_factory=list)

    def to_row(self) -> dict[str, Any]:
        return {
            "id": self.node_id,
            "sid": self.session_id,
            "tcid": self.tool_call_id,
            "name": self.tool_name,
            "group": self.parallel_group_id,
            "start": self.started_ms,
            "start_iso": iso_ms(self.started_ms) if self.started_ms is not None else None,
            "end": self.ended_ms,
            "end_iso": iso_ms(self.ended_ms) if self.ended_ms is not None else None,
            "success": self.success,
            "error": self.error,
            "out_bytes": self.output_bytes,
            "events": self.events,
        }


class EventRow(msgspec.Struct, gc=False):
    """One ``:Event`` to write: its node id, its session's id and its properties (untracked by
    the cyclic GC, like `EventFacts`: a planned batch holds one per event)."""

    node_id: str
    session_id: str
    props: dict[str, Any]


class WorkspaceBatch:
    """Rows for one workspace graph. Mutable while planning, then read by the writer."""

    def __init__(self, workspace: str) -> None:
        self.workspace = workspace
        self.sessions: dict[str, SessionRow] = {}
        self.events: dict[tuple[str, ...], list[EventRow]] = {}
        self.tool_calls: dict[str, ToolCallRow] = {}
        self.forks: dict[tuple[str, str], dict[str, Any]] = {}
        self.model_responses: dict[str, list[Any]] = {}
        """Event node id -> ``[node id, model, input, output, cache read, cache creation tokens]``
        of each model call naming its model (the `Model` rollup's rows, `model_row`)."""
        self.count = 0

    def session(self, node_id: str) -> SessionRow:
        row = self.sessions.get(node_id)
        if row is None:
            row = self.sessions[node_id] = SessionRow(node_id)
        return row


class GraphBatch:
    """Rows per workspace, in first-seen order."""

    def __init__(self) -> None:
        self.workspaces: dict[str, WorkspaceBatch] = {}

    def for_workspace(self, workspace: str) -> WorkspaceBatch:
        batch = self.workspaces.get(workspace)
        if batch is None:
            batch = self.workspaces[workspace] = WorkspaceBatch(workspace)
        return batch


Handler = Callable[[EventFacts, WorkspaceBatch], None]


def event_node(facts: EventFacts, batch: WorkspaceBatch) -> None:
    """``:Event`` with the triple labels, lifted fields, ``data`` and ``HAS_EVENT`` from its Session."""
    props = lift_fields(facts.event, facts.data)
    props["event_name"] = facts.event
    props["occurred_at"] = iso_ms(facts.epoch_ms)
    props["occurred_at_ms"] = facts.epoch_ms
    props["fingerprint"] = facts.fingerprint
    if facts.data_json and facts.stored_data is facts.data:
        props["data"] = facts.data_json  # nothing offloaded: the journal's JSON text is the same
    else:
        props["data"] = _json.encode(facts.stored_data).decode()
    if facts.created_by is not None:
        props["created_by"] = facts.created_by
    row = EventRow(facts.node_id, facts.session_id, props)
    labels = derive_labels(facts.event)
    rows = batch.events.get(labels)
    if rows is None:  # not setdefault: no throwaway list (a GC-tracked allocation) per event
        rows = batch.events[labels] = []
    rows.append(row)
    batch.count += 1


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    elif isinstance(value, dict):
        inner = value.get("message") or value.get("msg") or value.get("error")
        text = inner if isinstance(inner, str) else _json.encode(value).decode()
    else:
        text = _json.encode(value).decode()
    return text[:_ERROR_PREVIEW]


def _parent_of(data: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return graph_key(value.strip())
    return None


def session_node(facts: EventFacts, batch: WorkspaceBatch) -> None:
    """The owning ``:Session`` (always), its sub-label, lifecycle timestamps and ``HAS_FORK``."""
    row = batch.session(facts.session_id)
    row.seen(facts.epoch_ms)
    event, data = facts.event, facts.data
    if event == "session:start":
        row.started(facts.epoch_ms)
        parent = _parent_of(data, "parent_id", "parent")
        if parent is None:
            row.root = True
        else:
            row.start_parent = parent if row.start_parent is None else min(row.start_parent, parent)
    elif event == "session:fork":
        row.started(facts.epoch_ms)
        row.forked = True
        parent = _parent_of(data, "parent", "parent_id")
        if parent is not None:
            row.fork_parent = parent if row.fork_parent is None else min(row.fork_parent, parent)
            batch.session(parent)  # the parent exists as a node even before its own events arrive
            batch.forks[(parent, facts.session_id)] = {
                "parent": parent,
                "child": facts.session_id,
                "at": iso_ms(facts.epoch_ms),
            }
        metadata = data.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("agent_name"), str):
            row.agent_name = metadata["agent_name"]
    elif event == "session:end":
        if row.ended_ms is None or facts.epoch_ms > row.ended_ms:
            row.ended_ms = facts.epoch_ms
        raw_status = data.get("status")
        status = (
            _STATUS_ALIASES.get(raw_status.lower(), "completed")
            if isinstance(raw_status, str)
            else "completed"
        )
        row.status_rank = max(row.status_rank, STATUS_RANK[status])


def tool_call(facts: EventFacts, batch: WorkspaceBatch) -> None:
    """``:ToolCall`` per ``tool:pre``/``tool:post``/``tool:error`` with a ``tool_call_id``."""
    if facts.event not in ("tool:pre", "tool:post", "tool:error"):
        return
    data = facts.data
    tool_call_id = data.get("tool_call_id")
    if not isinstance(tool_call_id, str) or not tool_call_id:
        return
    node_id = tool_call_node_id(facts.session_id, tool_call_id)
    row = batch.tool_calls.get(node_id)
    if row is None:
        row = batch.tool_calls[node_id] = ToolCallRow(node_id, facts.session_id, tool_call_id)
    row.events.append(facts.node_id)
    # the Tool / ParallelGroup rollup ids are built from these (`writer._TOOLS`): keyed like ids
    name = data.get("tool_name")
    if isinstance(name, str) and name:
        row.tool_name = graph_key(name)
    group = data.get("parallel_group_id")
    if isinstance(group, str) and group:
        row.parallel_group_id = graph_key(group)
    if facts.event == "tool:pre":
        if row.started_ms is None or facts.epoch_ms < row.started_ms:
            row.started_ms = facts.epoch_ms
        return
    if row.ended_ms is None or facts.epoch_ms > row.ended_ms:
        row.ended_ms = facts.epoch_ms
    error: str | None
    if facts.event == "tool:error":
        success = False
        error = _text(data.get("error") or data.get("error_message") or data.get("message")) or "tool:error"
        output = None
    else:
        result = data.get("result")
        if isinstance(result, dict):
            flag = result.get("success")
            error = _text(result.get("error"))
            success = flag if isinstance(flag, bool) else error is None
            if not success and error is None:
                error = "tool reported failure"
            output = result.get("output")
        else:
            success, error, output = True, None, result
    row.success = success if row.success is None else (row.success and success)
    if error is not None:
        row.error = error if row.error is None else min(row.error, error)  # commutative choice
    if output is not None:
        size = len(_json.encode(output)) if not isinstance(output, str) else len(output.encode())
        row.output_bytes = max(size, row.output_bytes or 0)


_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def model_response_row(node_id: str, data: dict[str, Any]) -> list[Any] | None:
    """The ``Model`` rollup row of one ``llm:response`` payload: ``[node id, model, input, output,
    cache read, cache creation tokens]`` (a count missing or not an integer is 0); None when the
    payload names no model."""
    model = data.get("model")
    if not isinstance(model, str) or not model:
        return None
    model = graph_key(model)  # the Model rollup's id is ``model:`` + this
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    counts = [value if type(value := usage.get(key)) is int else 0 for key in _USAGE_KEYS]
    return [node_id, model, *counts]


_CONVERSATION_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")


def conversation_model(data: dict[str, Any]) -> str | None:
    """The model a conversation event (``usage``, ``error``) names: its own ``model`` field (an
    extra field: the event types have none), else an OTLP span's ``gen_ai.response.model`` /
    ``gen_ai.request.model`` (kept in the event's ``otel`` extra). None when it names none, as
    the harness's events do."""
    model = data.get("model")
    if isinstance(model, str) and model.strip():
        return model.strip()
    otel = data.get("otel")
    attributes = otel.get("attributes") if isinstance(otel, dict) else None
    if isinstance(attributes, dict):
        for key in ("gen_ai.response.model", "gen_ai.request.model"):
            value = attributes.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def model_row(node_id: str, event: str, data: dict[str, Any]) -> list[Any] | None:
    """The ``Model`` rollup row of an ``llm:response`` (`model_response_row`) or of a
    ``conversation:usage`` naming its model (`conversation_model`); None for any other event."""
    if event == "llm:response":
        return model_response_row(node_id, data)
    if event != "conversation:usage":
        return None
    model = conversation_model(data)
    if model is None:
        return None
    counts = [value if type(value := data.get(key)) is int else 0 for key in _CONVERSATION_USAGE_KEYS]
    return [node_id, graph_key(model), *counts]


def model_response(facts: EventFacts, batch: WorkspaceBatch) -> None:
    """A row for the ``Model`` workspace rollup per model call that names its model (`model_row`),
    read from the original payload."""
    if facts.event != "llm:response" and facts.event != "conversation:usage":
        return
    row = model_row(facts.node_id, facts.event, facts.data)
    if row is not None:
        batch.model_responses[facts.node_id] = row


LAYER1_HANDLERS: tuple[Handler, ...] = (session_node, event_node, tool_call, model_response)


def plan_batch(facts: Iterable[EventFacts], handlers: tuple[Handler, ...] = LAYER1_HANDLERS) -> GraphBatch:
    """Run every handler over every event, in order, one event at a time as ``facts`` yields it
    (the applier streams them so a payload can die once planned). O(events x handlers)."""
    batch = GraphBatch()
    for item in facts:
        target = batch.for_workspace(item.workspace)
        for handler in handlers:
            handler(item, target)
    return batch
