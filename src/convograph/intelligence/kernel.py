"""Kernel layer: Sessions typed, OrchestratorRuns, Iterations, ContentBlocks, ToolCalls, Prompts.

A pure per-session fold. `SessionFold` is the state of one journal session after folding its
events **in journal (seq) order**; `fold_event(state, fact, out)` advances it by one event and
adds the entities and relationships that event implies to a `Derived` accumulator. The state is
a cache: `convograph.intelligence.layer_semantic` rebuilds it from the journal whenever it is
missing or a record is replayed (restart, retry, rewind), so ids never depend on what happened
to be in memory (upstream §10 B2/B3).

Entity ids (all derived from the ordered per-session log, never from processing order):

- OrchestratorRun ``{sid}::run::{n}``, n = ordinal of ``execution:start`` in the session.
- Iteration ``{run_id}::iteration::{k}``, k = ordinal of ``provider:request`` inside the run, so
  iterations of different runs never merge (upstream trap 9); outside a run
  ``{sid}::after_run::{n}::iteration::{k}``.
- ContentBlock ``{iteration_id}::block::{block_index}``.
- ToolCall: the layer-1 node ``{sid}__tool_call__{tool_call_id}`` (one node, both layers).
- Prompt ``{sid}::prompt::{n}``; Cancellation ``{sid}::cancellation::{n}``;
  ContextCompaction ``{sid}::compaction::{n}`` (``pre_compact`` opens, ``post_compact`` closes).

Cursors close when their span ends (a run on ``execution:end``, its iteration with it; a prompt
once it triggered a run): late events never hang off a stale parent (upstream B13).
Complexity: O(1) amortised per event (parallel groups: O(group size) edges per member).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgspec

from convograph.intelligence.keys import graph_key
from convograph.intelligence.layer1 import iso_ms, tool_call_node_id

__all__ = [
    "PSEUDO_AGENTS",
    "Derived",
    "Fact",
    "SessionFlags",
    "SessionFold",
    "fold_kernel",
    "stamp",
]

PSEUDO_AGENTS = frozenset({"", "self", "root", "forked", "unresolved", "none", "null"})
"""Agent names that are markers, never `Agent` nodes (upstream §10 B6)."""

_PREVIEW = 500
_json = msgspec.json.Encoder(order="sorted")  # canonical: live payloads and journal replays encode alike


class Fact(msgspec.Struct, frozen=True):
    """One journal event as the fold sees it: original payload and its final Event node id."""

    seq: int
    session_id: str
    event: str
    epoch_ms: int
    node_id: str
    data: dict[str, Any]


class SessionFlags(msgspec.Struct):
    """What one batch learnt about a Session's kind. Merged with OR in Cypher (commutative)."""

    node_id: str
    events: bool = False
    fork: bool = False
    sub: bool = False
    root: bool = False
    end: bool = False
    parent: str | None = None
    agent: str | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    status_rank: int = 0

    def span(self, started_ms: int | None = None, ended_ms: int | None = None) -> None:
        """Sessions without layer-1 lifecycle events (conversation sub-agents): min start, max end."""
        if started_ms is not None and (self.started_ms is None or started_ms < self.started_ms):
            self.started_ms = started_ms
        if ended_ms is not None and (self.ended_ms is None or ended_ms > self.ended_ms):
            self.ended_ms = ended_ms


def _property(value: Any) -> Any:
    """A value FalkorDB can store: scalars and lists of scalars as is, anything else as JSON text."""
    if isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list) and all(isinstance(v, str | int | float | bool) for v in value):
        return value
    return _json.encode(value).decode()


def stamp(props: dict[str, Any], name: str, epoch_ms: int) -> None:
    """``name`` as fixed-width UTC ISO text (orderable) and ``name_ms`` as epoch milliseconds."""
    props[name] = iso_ms(epoch_ms)
    props[f"{name}_ms"] = epoch_ms


class Derived:
    """Accumulated nodes (label → id → merged props), session flags and edges of one batch."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, dict[str, Any]]] = {}
        self.sessions: dict[str, SessionFlags] = {}
        self.edges: dict[tuple[str, str, str], dict[tuple[str, str], None]] = {}
        self.sources: dict[str, dict[str, dict[str, None]]] = {}
        self.tool_calls: dict[str, None] = {}
        """ToolCalls a fold defined or changed the name, duration or parallel group of (the
        conversation fold: no layer-1 row writes them), whose workspace rollups (`Tool`,
        `ParallelGroup`) are written after them."""

    def node(self, label: str, node_id: str, props: dict[str, Any] | None = None) -> str:
        """Merge ``props`` (``None`` values dropped) into the node's row; later values win.
        Returns the node's id (through `graph_key`, as every id this class emits)."""
        node_id = graph_key(node_id)
        row = self.nodes.setdefault(label, {}).setdefault(node_id, {})
        if props:
            row.update({k: _property(v) for k, v in props.items() if v is not None})
        return node_id

    def session(self, node_id: str) -> SessionFlags:
        node_id = graph_key(node_id)
        flags = self.sessions.get(node_id)
        if flags is None:
            flags = self.sessions[node_id] = SessionFlags(node_id)
        return flags

    def edge(self, kind: str, src_label: str, src: str, dst_label: str, dst: str) -> None:
        """``(src)-[:kind]->(dst)``; self-loops are never written (upstream B2)."""
        src = graph_key(src)
        dst = graph_key(dst)
        if src != dst:
            self.edges.setdefault((kind, src_label, dst_label), {})[(src, dst)] = None

    def tool_call(self, node_id: str) -> None:
        """Roll up this ToolCall after writing it (see ``tool_calls``)."""
        self.tool_calls[graph_key(node_id)] = None

    def sourced(self, label: str, node_id: str, fact: Fact) -> None:
        """``(entity)-[:SOURCED_FROM]->(:Event)`` to the event's real node id (upstream B5).
        Written with the entity's own row (one MERGE less per edge than a separate edge row)."""
        node_id = self.node(label, node_id)
        self.sources.setdefault(label, {}).setdefault(node_id, {})[fact.node_id] = None

    def count(self) -> int:
        return (
            sum(len(rows) for rows in self.nodes.values())
            + len(self.sessions)
            + sum(len(pairs) for pairs in self.edges.values())
            + sum(len(events) for rows in self.sources.values() for events in rows.values())
        )


class RunCursor(msgspec.Struct):
    """An open OrchestratorRun (or the implicit span after one) and its iteration counter."""

    run_id: str | None
    prefix: str
    started_ms: int | None = None
    iterations: int = 0
    iteration_id: str | None = None


class SessionFold:
    """State of one journal session after folding a prefix of its log. Mutable; rebuildable."""

    def __init__(self, workspace: str, session_id: str) -> None:
        self.workspace = workspace
        self.session_id = session_id
        self.last_seq = 0
        self.agent_name: str | None = None
        self.forked = False
        self.runs = 0
        self.run = RunCursor(None, f"{session_id}::after_run::0")
        self.last_run_id: str | None = None
        self.prompts = 0
        self.pending_prompt: str | None = None
        self.blocks_by_call: dict[str, str] = {}
        self.groups: dict[str, list[str]] = {}
        self.tool_started: dict[str, int] = {}
        self.cancellations = 0
        self.compactions = 0
        self.open_compaction: tuple[str, int] | None = None
        # foundation
        self.skill_loads = 0
        self.active_skills: dict[str, tuple[str, int]] = {}
        self.delegation_started: dict[str, int] = {}
        self.delegation_groups: dict[str, list[str]] = {}
        self.recipe_runs = 0
        self.recipe_stack: list[tuple[str, int]] = []
        self.recipe_steps: dict[str, int] = {}
        self.step: tuple[str, int] | None = None
        # conversation vocabulary (see `convograph.intelligence.conversations`)
        self.conversation: Any = None

    @property
    def iteration_id(self) -> str | None:
        return self.run.iteration_id


def _preview(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else _json.encode(value).decode()
    return text[:_PREVIEW]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def usage_props(usage: Any) -> dict[str, Any]:
    """Token usage of one LLM call (the one owner of these numbers: upstream trap 8)."""
    if not isinstance(usage, dict):
        return {}
    return {
        "input_tokens": _int(usage.get("input_tokens")),
        "output_tokens": _int(usage.get("output_tokens")),
        "cache_read_input_tokens": _int(usage.get("cache_read_input_tokens")),
        "cache_creation_input_tokens": _int(usage.get("cache_creation_input_tokens")),
        "cost_usd": _float(usage.get("cost_usd")),
    }


def _open_iteration(state: SessionFold, fact: Fact, out: Derived) -> str:
    run = state.run
    run.iterations += 1
    iteration_id = f"{run.prefix}::iteration::{run.iterations}"
    run.iteration_id = iteration_id
    props: dict[str, Any] = {
        "session_id": state.session_id,
        "run_id": run.run_id,
        "iteration_number": run.iterations,
    }
    stamp(props, "started_at", fact.epoch_ms)
    out.node("Iteration", iteration_id, props)
    if run.run_id is not None:
        out.edge("HAS_PART", "OrchestratorRun", run.run_id, "Iteration", iteration_id)
    return iteration_id


def _close_run(state: SessionFold, fact: Fact, out: Derived, status: str) -> None:
    run = state.run
    if run.run_id is None:
        return
    props: dict[str, Any] = {"status": status, "iteration_count": run.iterations}
    stamp(props, "ended_at", fact.epoch_ms)
    if run.started_ms is not None:
        props["duration_ms"] = fact.epoch_ms - run.started_ms
    out.node("OrchestratorRun", run.run_id, props)
    if run.iteration_id is not None:
        ended: dict[str, Any] = {}
        stamp(ended, "ended_at", fact.epoch_ms)
        out.node("Iteration", run.iteration_id, ended)
    state.last_run_id = run.run_id
    state.run = RunCursor(None, f"{state.session_id}::after_run::{state.runs}")


def _session_lifecycle(state: SessionFold, fact: Fact, out: Derived) -> None:
    data = fact.data
    flags = out.session(state.session_id)
    flags.events = True
    event = fact.event
    if event not in ("session:start", "session:fork", "session:end", "session:resume"):
        return
    out.sourced("Session", state.session_id, fact)
    parent = data.get("parent_id") or data.get("parent")
    parent = parent.strip() if isinstance(parent, str) and parent.strip() else None
    if event == "session:fork":
        flags.fork = True
        state.forked = True
        metadata = data.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("agent_name"), str):
            state.agent_name = metadata["agent_name"]
            agent = metadata["agent_name"]
            if agent.strip() not in PSEUDO_AGENTS:
                out.node("Agent", f"agent:{agent}", {"name": agent})
                out.edge("HAS_AGENT", "Session", state.session_id, "Agent", f"agent:{agent}")
    elif event == "session:start":
        if parent is None:
            flags.root = True
        else:
            flags.sub = True
    elif event == "session:end":
        flags.end = True
    if parent is not None and parent != state.session_id:
        flags.parent = parent
        out.session(parent)  # referenced: exists (typed `stub` until its own events arrive)


def fold_kernel(state: SessionFold, fact: Fact, out: Derived) -> None:
    """Advance ``state`` by one hook event and add its kernel entities to ``out``. O(1) per event
    besides what it adds (one lookup in `_FOLDS`)."""
    _session_lifecycle(state, fact, out)
    fold = _FOLDS.get(fact.event)
    if fold is not None:
        fold(state, fact, out)


def _prompt(state: SessionFold, fact: Fact, out: Derived) -> None:
    """A prompt: a ``Prompt`` node; the next run to start is ``TRIGGERED`` by it."""
    data = fact.data
    sid = state.session_id
    state.prompts += 1
    prompt_id = f"{sid}::prompt::{state.prompts}"
    text = data.get("prompt")
    props: dict[str, Any] = {
        "session_id": sid,
        "prompt_number": state.prompts,
        "prompt": _preview(text),
        "prompt_chars": len(text) if isinstance(text, str) else None,
    }
    stamp(props, "occurred_at", fact.epoch_ms)
    out.node("Prompt", prompt_id, props)
    out.edge("HAS_PART", "Session", sid, "Prompt", prompt_id)
    out.sourced("Prompt", prompt_id, fact)
    state.pending_prompt = prompt_id


def _execution_start(state: SessionFold, fact: Fact, out: Derived) -> None:
    """A run starts (closing one that never ended)."""
    sid = state.session_id
    if state.run.run_id is not None:  # a run that never ended: closed by its successor
        _close_run(state, fact, out, "interrupted")
    state.runs += 1
    run_id = f"{sid}::run::{state.runs}"
    state.run = RunCursor(run_id, run_id, started_ms=fact.epoch_ms)
    props = {"session_id": sid, "run_number": state.runs, "status": "running"}
    stamp(props, "started_at", fact.epoch_ms)
    out.node("OrchestratorRun", run_id, props)
    out.edge("HAS_EXECUTION", "Session", sid, "OrchestratorRun", run_id)
    out.sourced("OrchestratorRun", run_id, fact)
    if state.pending_prompt is not None:
        out.edge("TRIGGERED", "Prompt", state.pending_prompt, "OrchestratorRun", run_id)
        state.pending_prompt = None


def _execution_end(state: SessionFold, fact: Fact, out: Derived) -> None:
    """The open run ends with its status and response."""
    data = fact.data
    open_run = state.run.run_id
    if open_run is not None:
        raw = data.get("status")
        status = raw if isinstance(raw, str) and raw else "completed"
        out.node("OrchestratorRun", open_run, {"response": _preview(data.get("response"))})
        out.sourced("OrchestratorRun", open_run, fact)
        _close_run(state, fact, out, status)


def _orchestrator_complete(state: SessionFold, fact: Fact, out: Derived) -> None:
    """The orchestrator's summary of the open (or last) run."""
    data = fact.data
    target_run = state.run.run_id or state.last_run_id
    if target_run is not None:
        props = {
            "orchestrator_name": data.get("orchestrator")
            if isinstance(data.get("orchestrator"), str)
            else None,
            "turn_count": _int(data.get("turn_count")),
        }
        stamp(props, "completed_at", fact.epoch_ms)
        out.node("OrchestratorRun", target_run, props)
        out.sourced("OrchestratorRun", target_run, fact)


def _provider_request(state: SessionFold, fact: Fact, out: Derived) -> None:
    """A provider call opens an iteration."""
    iteration_id = _open_iteration(state, fact, out)
    out.sourced("Iteration", iteration_id, fact)


def _llm(state: SessionFold, fact: Fact, out: Derived) -> None:
    """A model request or response on the open iteration."""
    data = fact.data
    event = fact.event
    active = state.iteration_id
    if active is None:
        return
    props = {
        "model": data.get("model") if isinstance(data.get("model"), str) else None,
        "provider": data.get("provider") if isinstance(data.get("provider"), str) else None,
    }
    if event == "llm:request":
        props["message_count"] = _int(data.get("message_count"))
        props["has_system"] = data.get("has_system") if isinstance(data.get("has_system"), bool) else None
    else:
        usage = data.get("usage")
        raw = data.get("raw")
        if not isinstance(usage, dict) and isinstance(raw, dict):
            usage = raw.get("usage")
        props.update(usage_props(usage))
        props["llm_duration_ms"] = _int(data.get("duration_ms"))
        props["stop_reason"] = data.get("stop_reason") if isinstance(data.get("stop_reason"), str) else None
        stamp(props, "responded_at", fact.epoch_ms)
    out.node("Iteration", active, props)
    out.sourced("Iteration", active, fact)


def _content_block(state: SessionFold, fact: Fact, out: Derived) -> None:
    """A content block of the open iteration."""
    data = fact.data
    event = fact.event
    sid = state.session_id
    index = _int(data.get("block_index"))
    if index is None:
        return
    parent = state.iteration_id or f"{state.run.prefix}::iteration::0"
    block_id = f"{parent}::block::{index}"
    block = data.get("block")
    block_type = data.get("block_type")
    if isinstance(block, dict) and isinstance(block.get("type"), str):
        block_type = block["type"]
    props = {"session_id": sid, "block_index": index, "block_type": block_type}
    stamp(props, "started_at" if event.endswith("start") else "ended_at", fact.epoch_ms)
    out.node("ContentBlock", block_id, props)
    if state.iteration_id is not None:
        out.edge("HAS_PART", "Iteration", state.iteration_id, "ContentBlock", block_id)
    out.sourced("ContentBlock", block_id, fact)
    if isinstance(block, dict) and block_type == "tool_call" and isinstance(block.get("id"), str):
        state.blocks_by_call[block["id"]] = block_id


def _tool(state: SessionFold, fact: Fact, out: Derived) -> None:
    """A tool call: its node, its iteration, the block that caused it, its parallel group."""
    data = fact.data
    event = fact.event
    sid = state.session_id
    tool_call_id = data.get("tool_call_id")
    if not isinstance(tool_call_id, str) or not tool_call_id:
        return
    node_id = tool_call_node_id(sid, tool_call_id)
    out.sourced("ToolCall", node_id, fact)
    if event != "tool:pre":
        state.tool_started.pop(tool_call_id, None)
        return
    state.tool_started[tool_call_id] = fact.epoch_ms
    props = {"iteration_id": state.iteration_id, "run_id": state.run.run_id}
    out.node("ToolCall", node_id, props)
    if state.iteration_id is not None:
        out.edge("HAS_TOOL_CALL", "Iteration", state.iteration_id, "ToolCall", node_id)
    caused_by = state.blocks_by_call.pop(tool_call_id, None)
    if caused_by is not None:
        out.edge("CAUSED", "ContentBlock", caused_by, "ToolCall", node_id)
    group = data.get("parallel_group_id")
    if isinstance(group, str) and group:
        members = state.groups.setdefault(group, [])
        if node_id not in members:
            for earlier in members:
                out.edge("PARALLEL_EXECUTION", "ToolCall", node_id, "ToolCall", earlier)
            members.append(node_id)


def _cancellation(state: SessionFold, fact: Fact, out: Derived) -> None:
    """A completed cancellation, part of the session and of the open run (a request adds nothing)."""
    sid = state.session_id
    state.cancellations += 1
    cancel_id = f"{sid}::cancellation::{state.cancellations}"
    immediate = fact.data.get("immediate")
    props = {
        "session_id": sid,
        "run_id": state.run.run_id,
        "was_immediate": immediate if isinstance(immediate, bool) else None,
    }
    stamp(props, "occurred_at", fact.epoch_ms)
    out.node("Cancellation", cancel_id, props)
    out.edge("HAS_PART", "Session", sid, "Cancellation", cancel_id)
    out.sourced("Cancellation", cancel_id, fact)
    if state.run.run_id is not None:
        out.node("OrchestratorRun", state.run.run_id, {"cancelled": True})
        out.edge("HAS_PART", "OrchestratorRun", state.run.run_id, "Cancellation", cancel_id)


def _compaction(state: SessionFold, fact: Fact, out: Derived) -> None:
    """A context compaction: one node per compaction, opened by ``pre`` and closed by ``post``."""
    sid = state.session_id
    data = fact.data
    props: dict[str, Any] = {
        "tokens_before": _int(data.get("tokens_before")),
        "tokens_after": _int(data.get("tokens_after")),
        "messages_before": _int(data.get("messages_before")),
        "messages_after": _int(data.get("messages_after")),
    }
    if fact.event == "context:post_compact" and state.open_compaction is not None:
        compaction_id, started = state.open_compaction
        state.open_compaction = None
        stamp(props, "ended_at", fact.epoch_ms)
        props["duration_ms"] = fact.epoch_ms - started
    else:
        state.compactions += 1
        compaction_id = f"{sid}::compaction::{state.compactions}"
        props.update({"session_id": sid, "compaction_number": state.compactions, "run_id": state.run.run_id})
        stamp(props, "started_at", fact.epoch_ms)
        if fact.event == "context:pre_compact":
            state.open_compaction = (compaction_id, fact.epoch_ms)
        else:
            stamp(props, "ended_at", fact.epoch_ms)
            props["duration_ms"] = 0
        out.edge("HAS_COMPACTION", "Session", sid, "ContextCompaction", compaction_id)
    out.node("ContextCompaction", compaction_id, props)
    out.sourced("ContextCompaction", compaction_id, fact)


_FOLDS: Final[dict[str, Callable[[SessionFold, Fact, Derived], None]]] = {
    "prompt:submit": _prompt,
    "execution:start": _execution_start,
    "execution:end": _execution_end,
    "orchestrator:complete": _orchestrator_complete,
    "provider:request": _provider_request,
    "llm:request": _llm,
    "llm:response": _llm,
    "content_block:start": _content_block,
    "content_block:end": _content_block,
    "tool:pre": _tool,
    "tool:post": _tool,
    "tool:error": _tool,
    "cancel:completed": _cancellation,
    "context:pre_compact": _compaction,
    "context:post_compact": _compaction,
    "context:compaction": _compaction,
}
"""What each hook event adds to the kernel, by event name (other events: only the session's lifecycle)."""
