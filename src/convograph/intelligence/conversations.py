"""Conversation events (`/v1/conversations/...`) into the same graph as the hook events.

Two halves, data flowing one way:

1. `conversation_envelopes(cid, stored)` turns events the conversation log stored into hook
   envelopes ``{"event": "conversation:<type>", "workspace", "idempotency_key", "data"}``, all
   in **one journal session per conversation** (its log is the ordered per-session log). The
   workspace is the ``<workspace>:`` prefix of the conversation id, else ``conversations``.
   The idempotency key is ``convograph-conversation:{cid}:{seq}`` (the conversation log's own
   seq), so re-feeding the same stored events never adds anything. Streaming fragments
   (``text``, ``reasoning``, ``tool_progress``, ``repl_progress``) are not forwarded: the
   conversation log keeps them; the graph gets the structural events.
   `feed_conversation(service, cid, stored)` appends them (never raises: the conversation log
   is the source of truth, and a re-feed is harmless).
2. `fold_conversation(state, fact, out)` is the fold step that builds kernel/foundation entities
   from ``conversation:*`` events (layer 1 gives them ordinary triple-labelled Event nodes).

Mapping (docs/querying.md has the table):

- the conversation → ``:Session`` ``{sid}`` (root); ``user`` → ``:Prompt``;
- a root ``harness_start``/``harness_end`` → ``:OrchestratorRun`` ``{session}::run::{n}``;
- an LLM call → ``:Iteration`` ``{run}::iteration::{k}``: opened by the first ``tool_call`` or
  ``usage`` after the run start or the previous ``usage``, closed (with its tokens) by ``usage``;
- ``tool_call``/``tool_result`` → ``:ToolCall`` ``{session}__tool_call__{id}`` with outcome;
- a ``harness_start`` whose ``parentId`` is a tool call id (a known one, or any id without
  ``:``) is a subagent run: ``:Delegation`` ``{parent session}::delegation::{tool call id}``
  (``TRIGGERED`` by that ToolCall, ``ENCOMPASSES`` the child ``:Session``
  ``{sid}::agent::{runId}`` typed ``forked``), ``HAS_AGENT`` to ``agent:{agentId}``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from convograph.events import event_to_wire
from convograph.intelligence.kernel import PSEUDO_AGENTS, Derived, Fact, SessionFold, stamp, usage_props
from convograph.intelligence.keys import graph_key
from convograph.intelligence.layer1 import STATUS_RANK, iso_ms, tool_call_node_id

__all__ = [
    "DEFAULT_WORKSPACE",
    "conversation_envelopes",
    "conversation_target",
    "feed_conversation",
    "feed_conversation_async",
    "fold_conversation",
]

log = logging.getLogger(__name__)

DEFAULT_WORKSPACE = "conversations"
FORWARDED = frozenset(
    {
        "harness_start",
        "harness_end",
        "tool_call",
        "tool_result",
        "usage",
        "error",
        "user",
        "relay",
        "relay_resolved",
    }
)
_json = msgspec.json.Encoder(order="sorted")  # canonical: live payloads and journal replays encode alike


def conversation_target(cid: str) -> tuple[str, str]:
    """``(workspace, session_id)`` for a conversation id: ``"ws:rest"`` → ``("ws", "rest")``."""
    workspace, sep, rest = cid.partition(":")
    if sep and workspace.strip() and rest.strip() and rest not in (".", ".."):  # "." names no blob dir
        return workspace, rest
    return DEFAULT_WORKSPACE, cid


_MIN_MS = -62_135_596_800_000
"""0001-01-01T00:00:00Z: the earliest instant `iso_ms` (a `datetime`) can write."""
_MAX_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: the latest."""


def _epoch_ms(timestamp: Any, received_at: float) -> int:
    """The event's own time in UTC ms when it names one a `datetime` can hold, else the receipt
    time: the conversation log accepts any number or string, and one event the graph cannot date
    must not stop its conversation from being fed."""
    if isinstance(timestamp, bool):
        timestamp = None
    epoch_ms: int | None = None
    try:
        if isinstance(timestamp, int | float):
            epoch_ms = int(timestamp if timestamp > 1e11 else timestamp * 1000)
        elif isinstance(timestamp, str):
            parsed = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            epoch_ms = int(parsed.timestamp() * 1000)
    except (ValueError, OverflowError):  # not ISO 8601; inf; beyond what a datetime holds
        epoch_ms = None
    if epoch_ms is None or not _MIN_MS <= epoch_ms <= _MAX_MS:
        return int(received_at * 1000)
    return epoch_ms


def conversation_envelopes(cid: str, stored: Sequence[Any]) -> list[dict[str, Any]]:
    """Hook envelopes for the structural events of ``stored`` (`convograph.store` StoredEvents:
    ``.seq``, ``.event``, ``.received_at``). Pure; O(len(stored))."""
    workspace, session_id = conversation_target(cid)
    envelopes: list[dict[str, Any]] = []
    for item in stored:
        event = item.event
        kind = event.type
        if kind not in FORWARDED:
            continue
        wire = event_to_wire(event)
        data: dict[str, Any] = {
            "session_id": session_id,
            "timestamp": iso_ms(_epoch_ms(wire.get("timestamp"), item.received_at)),
            "conversation_seq": item.seq,
        }
        for key, value in wire.items():
            if key in ("type", "timestamp", "seq"):
                continue
            if key == "output":  # offloadable name for large tool outputs
                data["result"] = value
            elif key == "input":
                data["tool_input"] = value
            else:
                data[_snake(key)] = value
        call_id = wire.get("id")
        if kind in ("tool_call", "tool_result") and isinstance(call_id, str):
            data["tool_call_id"] = call_id  # layer-1 disambiguator for same-millisecond calls
        envelopes.append(
            {
                "event": f"conversation:{kind}",
                "workspace": workspace,
                "idempotency_key": f"convograph-conversation:{cid}:{item.seq}",
                "data": data,
            }
        )
    return envelopes


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def feed_conversation(service: Any, cid: str, stored: Sequence[Any]) -> int:
    """Append ``stored`` to ``service`` (an `IntelligenceService`, a late-bound proxy of one, or
    ``None`` = off). Returns the number of envelopes accepted; logs and returns 0 on any failure,
    including a service that is not running (the conversation log stays the truth)."""
    if service is None or not stored:
        return 0
    try:
        envelopes = conversation_envelopes(cid, stored)
        if not envelopes:
            return 0
        accepted: int = service.ingest_many(envelopes).accepted
        return accepted
    except Exception as exc:  # the graph is derived data; never fail the conversation append
        log.warning("conversation %s: not fed to the intelligence graph: %s", cid, exc)
        return 0


async def feed_conversation_async(service: Any, cid: str, stored: Sequence[Any]) -> int:
    """`feed_conversation` off the event loop (the journal append is a blocking SQLite commit)."""
    if service is None or not stored:
        return 0
    return await asyncio.to_thread(feed_conversation, service, cid, stored)


class _Run(msgspec.Struct):
    session_id: str
    run_id: str
    started_ms: int
    delegation_id: str | None = None
    iterations: int = 0
    iteration_id: str | None = None


class _Conversation(msgspec.Struct):
    runs: dict[str, _Run] = msgspec.field(default_factory=dict)
    run_counts: dict[str, int] = msgspec.field(default_factory=dict)
    tools: dict[str, tuple[str, int]] = msgspec.field(default_factory=dict)
    prompts_by_node: dict[str, str] = msgspec.field(default_factory=dict)
    pending_prompt: str | None = None


def _tool_name(data: dict[str, Any]) -> str | None:
    """A call's tool name as the ToolCall keeps it: keyed like an id (`graph_key`), since a Tool
    rollup's id is built from it (`writer._TOOLS`, also run by `backfill_rollups`)."""
    name = _text(data.get("name"))
    return None if name is None else graph_key(name)


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _iteration(run: _Run, fact: Fact, out: Derived) -> str:
    if run.iteration_id is None:
        run.iterations += 1
        run.iteration_id = f"{run.run_id}::iteration::{run.iterations}"
        props: dict[str, Any] = {
            "session_id": run.session_id,
            "run_id": run.run_id,
            "iteration_number": run.iterations,
        }
        stamp(props, "started_at", fact.epoch_ms)
        out.node("Iteration", run.iteration_id, props)
        out.edge("HAS_PART", "OrchestratorRun", run.run_id, "Iteration", run.iteration_id)
    return run.iteration_id


def fold_conversation(state: SessionFold, fact: Fact, out: Derived) -> None:
    """Fold step for ``conversation:*`` events (see the module docstring)."""
    if not fact.event.startswith("conversation:"):
        return
    conv: _Conversation = state.conversation if state.conversation is not None else _Conversation()
    state.conversation = conv
    kind = fact.event[len("conversation:") :]
    data = fact.data
    sid = state.session_id
    run_key = _text(data.get("run_id"))
    run = conv.runs.get(run_key) if run_key is not None else None
    if kind == "user":
        state.prompts += 1
        prompt_id = f"{sid}::prompt::{state.prompts}"
        content = data.get("content")
        text = content if isinstance(content, str) else _json.encode(content).decode()
        props: dict[str, Any] = {"session_id": sid, "prompt_number": state.prompts, "prompt": text[:500]}
        props["prompt_chars"] = len(text)
        stamp(props, "occurred_at", fact.epoch_ms)
        out.node("Prompt", prompt_id, props)
        out.edge("HAS_PART", "Session", sid, "Prompt", prompt_id)
        out.sourced("Prompt", prompt_id, fact)
        if run_key is not None:
            conv.prompts_by_node[f"{run_key}:user"] = prompt_id
        conv.pending_prompt = prompt_id
    elif kind == "harness_start" and run_key is not None and run is None:
        parent = _text(data.get("parent_id"))
        agent = _text(data.get("agent_id"))
        is_sub = parent is not None and (
            parent in conv.tools or (":" not in parent and parent not in conv.prompts_by_node)
        )
        delegation_id = None
        if is_sub and parent is not None:
            parent_session = conv.tools[parent][0] if parent in conv.tools else sid
            session_id = f"{sid}::agent::{run_key}"
            flags = out.session(session_id)
            flags.events = flags.fork = True
            flags.parent = parent_session
            flags.agent = agent
            out.session(parent_session)
            delegation_id = f"{parent_session}::delegation::{parent}"
            dprops: dict[str, Any] = {
                "agent": agent,
                "resolved_agent": agent,
                "sub_session_id": session_id,
                "parent_session_id": parent_session,
                "tool_call_id": parent,
                "status": "running",
            }
            stamp(dprops, "started_at", fact.epoch_ms)
            out.node("Delegation", delegation_id, dprops)
            out.edge("HAS_DELEGATION", "Session", parent_session, "Delegation", delegation_id)
            out.edge(
                "TRIGGERED",
                "ToolCall",
                tool_call_node_id(parent_session, parent),
                "Delegation",
                delegation_id,
            )
            out.edge("ENCOMPASSES", "Delegation", delegation_id, "Session", session_id)
            out.sourced("Delegation", delegation_id, fact)
            if agent is not None and agent not in PSEUDO_AGENTS:
                out.node("Agent", f"agent:{agent}", {"name": agent})
                out.edge("HAS_AGENT", "Session", session_id, "Agent", f"agent:{agent}")
            flags.span(started_ms=fact.epoch_ms)
        else:
            session_id = sid
            flags = out.session(sid)
            flags.events = flags.root = True
            flags.agent = agent
            flags.span(started_ms=fact.epoch_ms)
        count = conv.run_counts.get(session_id, 0) + 1
        conv.run_counts[session_id] = count
        run_id = f"{session_id}::run::{count}"
        run = conv.runs[run_key] = _Run(session_id, run_id, fact.epoch_ms, delegation_id)
        props = {
            "session_id": session_id,
            "run_number": count,
            "status": "running",
            "conversation_run_id": run_key,
        }
        props["agent_id"] = agent
        stamp(props, "started_at", fact.epoch_ms)
        out.node("OrchestratorRun", run_id, props)
        out.edge("HAS_EXECUTION", "Session", session_id, "OrchestratorRun", run_id)
        out.sourced("OrchestratorRun", run_id, fact)
        prompt = conv.prompts_by_node.get(parent) if parent is not None else None
        if prompt is None and not is_sub:
            prompt = conv.pending_prompt
        if prompt is not None:
            out.edge("TRIGGERED", "Prompt", prompt, "OrchestratorRun", run_id)
            if prompt == conv.pending_prompt:
                conv.pending_prompt = None
    elif run is None:
        out.session(sid).events = True
        return
    elif kind == "harness_end":
        reason = _text(data.get("reason"))
        status = (
            "completed" if reason in (None, "done", "complete", "completed", "stop", "end_turn") else reason
        )
        props = {
            "status": status,
            "iteration_count": run.iterations,
            "duration_ms": fact.epoch_ms - run.started_ms,
        }
        total = data.get("total_usage")
        if isinstance(total, dict):
            props.update(
                {
                    "input_tokens": total.get("inputTokens"),
                    "output_tokens": total.get("outputTokens"),
                    "cache_read_input_tokens": total.get("cacheReadTokens"),
                    "cache_creation_input_tokens": total.get("cacheCreationTokens"),
                }
            )
        stamp(props, "ended_at", fact.epoch_ms)
        out.node("OrchestratorRun", run.run_id, props)
        out.sourced("OrchestratorRun", run.run_id, fact)
        if run.iteration_id is not None:
            ended: dict[str, Any] = {}
            stamp(ended, "ended_at", fact.epoch_ms)
            out.node("Iteration", run.iteration_id, ended)
            run.iteration_id = None
        if run.delegation_id is not None:
            dprops = {
                "status": "completed" if status == "completed" else status,
                "success": status == "completed",
                "duration_ms": fact.epoch_ms - run.started_ms,
            }
            stamp(dprops, "ended_at", fact.epoch_ms)
            out.node("Delegation", run.delegation_id, dprops)
            flags = out.session(run.session_id)
            flags.end = True
            flags.span(ended_ms=fact.epoch_ms)
            flags.status_rank = STATUS_RANK.get(status, STATUS_RANK["failed"])
    elif kind == "usage":
        iteration_id = _iteration(run, fact, out)
        usage = {
            "input_tokens": data.get("input_tokens"),
            "output_tokens": data.get("output_tokens"),
            "cache_read_input_tokens": data.get("cache_read_tokens"),
            "cache_creation_input_tokens": data.get("cache_creation_tokens"),
        }
        props = usage_props(usage)
        stamp(props, "ended_at", fact.epoch_ms)
        out.node("Iteration", iteration_id, props)
        out.sourced("Iteration", iteration_id, fact)
        run.iteration_id = None
    elif kind == "tool_call":
        call_id = _text(data.get("id"))
        if call_id is None:
            return
        iteration_id = _iteration(run, fact, out)
        node_id = tool_call_node_id(run.session_id, call_id)
        tool_input = data.get("tool_input")
        props = {
            "tool_name": _tool_name(data),
            "tool_call_id": call_id,
            "session_id": run.session_id,
            "tool_input": tool_input if isinstance(tool_input, str) else _json.encode(tool_input).decode(),
            "iteration_id": iteration_id,
            "run_id": run.run_id,
        }
        stamp(props, "started_at", fact.epoch_ms)
        out.node("ToolCall", node_id, props)
        out.session(run.session_id)
        out.edge("HAS_TOOL_CALL", "Session", run.session_id, "ToolCall", node_id)
        out.edge("HAS_TOOL_CALL", "Iteration", iteration_id, "ToolCall", node_id)
        out.sourced("ToolCall", node_id, fact)
        conv.tools[call_id] = (run.session_id, fact.epoch_ms)
    elif kind == "tool_result":
        call_id = _text(data.get("id"))
        if call_id is None:
            return
        session_id, started = conv.tools.get(call_id, (run.session_id, None))
        node_id = tool_call_node_id(session_id, call_id)
        output = data.get("result")
        error: str | None = None
        if isinstance(output, dict):
            if output.get("error") is not None:
                error = str(output["error"])[:1000]
            elif output.get("status") == "denied":
                error = f"denied: {output.get('reason') or ''}".strip()
        props = {"result_success": error is None, "result_error": error, "tool_name": _tool_name(data)}
        stamp(props, "ended_at", fact.epoch_ms)
        if started is not None:
            props["duration_ms"] = fact.epoch_ms - started
        out.node("ToolCall", node_id, props)
        out.edge("HAS_TOOL_CALL", "Session", session_id, "ToolCall", node_id)
        out.sourced("ToolCall", node_id, fact)
    elif kind == "error":
        props = {"status": "failed", "error": str(data.get("message"))[:1000]}
        out.node("OrchestratorRun", run.run_id, props)
        out.sourced("OrchestratorRun", run.run_id, fact)
    out.session(sid).events = True
