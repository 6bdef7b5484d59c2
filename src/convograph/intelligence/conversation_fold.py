"""The fold step for conversation events: ``conversation:*`` journal events → the layers' entities.

`fold_conversation(state, fact, out)` is one step of the semantic layers' per-session fold (run in
event-time order, `layer_semantic.fold_key`); `convograph.intelligence.conversations` puts the
events in the journal, one session per conversation. docs/querying.md has the mapping table.

Runs, by the event's ``runId``:

- an **agent run** has a ``harness_start``: a root run is an ``:OrchestratorRun``
  ``{session}::run::{n}`` of the conversation's ``:Session``; a run whose ``parentId`` is a tool
  call id (a known one, or any id without ``:``) or another agent run is a **subagent**: a
  ``:Delegation`` ``{parent session}::delegation::{tool call id or run id}`` that ``ENCOMPASSES``
  the child ``:Session`` ``{sid}::agent::{runId}`` (typed ``forked``), whose run it is;
- any other run whose ``parentId`` is an agent run (or such a run) belongs to that agent: a
  **provider run** (one model call of the agent: the harness's providers, an OTLP ``chat`` span)
  or the run holding an OTLP agent's messages (``otel:<span>/m``). Events of runs that lead to
  no agent run are not folded (layer 1 keeps their Event nodes).

Model calls are ``:Iteration`` ``{run}::iteration::{k}``, k counting the agent run's model calls:

- a ``usage`` ends one. On the agent run itself (a producer that tags model events with the
  agent's run), the tool calls since the previous model call belong to it; from a provider run
  it is that run's call;
- an agent's tool calls on the agent run itself after a provider run's ``usage`` belong to that
  model call (the harness emits a model call's tool calls once it has ended); tool calls before
  any model call, or from another run of the agent (OTLP's messages), open an iteration the next
  model call ends;
- a provider run's ``error`` (a failed attempt) opens or joins the open iteration, which the
  retry's ``usage`` then ends: retries are one iteration.

Tool calls (``tool_call``, or a ``relay`` for a call not seen yet) are ``:ToolCall``
``{session}__tool_call__{id}``; calls of one model call that run at the same time (one starts
before an earlier one has its result) form a parallel group ``{iteration}::parallel::{g}``.
A ``harness_end`` with reason ``cancelled`` is a ``:Cancellation`` of its session and run. A
``user`` message is a ``:Prompt`` that ``TRIGGERED`` the root run whose ``parentId`` is
``{its runId}:user`` (the harness), else the agent run its own ``parentId`` names if that run
has no prompt yet (OTLP: an agent's first input), else the next root run.

Complexity: O(1) per event, O(group size) edges per member of a parallel group.
"""

from __future__ import annotations

from typing import Any

import msgspec

from convograph.intelligence.kernel import PSEUDO_AGENTS, Derived, Fact, SessionFold, stamp, usage_props
from convograph.intelligence.keys import graph_key
from convograph.intelligence.layer1 import STATUS_RANK, conversation_model, tool_call_node_id

__all__ = ["fold_conversation"]

_json = msgspec.json.Encoder(order="sorted")  # canonical: live payloads and journal replays encode alike
_COMPLETED = frozenset({"done", "complete", "completed", "stop", "end_turn", "final"})
"""``harness_end`` reasons that mean the run finished (the harness's ``final``, OTLP's ``stop``)."""


class _Run(msgspec.Struct):
    """An agent run and its model-call cursors."""

    session_id: str
    run_id: str
    started_ms: int
    delegation_id: str | None = None
    prompted: bool = False
    """A Prompt ``TRIGGERED`` this run (at most one does)."""
    iterations: int = 0
    iteration_id: str | None = None
    """The open iteration: tool calls, or a failed attempt, waiting for their model call's end."""
    model_call: tuple[str, str] | None = None
    """``(provider run, iteration)`` of the latest model call that ended in a provider run."""
    calls_of: str | None = None
    """The iteration `running` and the parallel group belong to."""
    running: list[str] = msgspec.field(default_factory=list)
    """Call ids of ``calls_of`` started and not yet answered."""
    groups: int = 0
    group: list[str] = msgspec.field(default_factory=list)
    """ToolCall node ids of the current parallel group (empty: none)."""


class _Call(msgspec.Struct, array_like=True):
    session_id: str
    run_key: str
    started_ms: int | None = None


class _Conversation(msgspec.Struct):
    runs: dict[str, _Run] = msgspec.field(default_factory=dict)
    owners: dict[str, str] = msgspec.field(default_factory=dict)
    """Run id → the agent run it belongs to (provider runs, message runs)."""
    run_counts: dict[str, int] = msgspec.field(default_factory=dict)
    cancellations: dict[str, int] = msgspec.field(default_factory=dict)
    tools: dict[str, _Call] = msgspec.field(default_factory=dict)
    prompts_by_node: dict[str, str] = msgspec.field(default_factory=dict)
    pending_prompt: str | None = None


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _tool_name(value: Any) -> str | None:
    """A call's tool name as the ToolCall keeps it: keyed like an id (`graph_key`), since the Tool
    rollup's id is built from it (`writer.rollup_statements`)."""
    name = _text(value)
    return None if name is None else graph_key(name)


def _owner(conv: _Conversation, run_key: str | None, data: dict[str, Any]) -> tuple[_Run, str | None] | None:
    """The agent run an event belongs to and, when it came from another run of that agent (a
    provider run, a message run), that run's id. None: no agent run (not folded)."""
    if run_key is None:
        return None
    run = conv.runs.get(run_key)
    if run is not None:
        return run, None
    owner = conv.owners.get(run_key)
    if owner is None:
        parent = _text(data.get("parent_id"))
        if parent is None:
            return None
        owner = parent if parent in conv.runs else conv.owners.get(parent)
        if owner is None:
            return None
        conv.owners[run_key] = owner
    return conv.runs[owner], run_key


def fold_conversation(state: SessionFold, fact: Fact, out: Derived) -> None:
    """Fold step for ``conversation:*`` events (see the module docstring)."""
    if not fact.event.startswith("conversation:"):
        return
    conv: _Conversation = state.conversation if state.conversation is not None else _Conversation()
    state.conversation = conv
    kind = fact.event[len("conversation:") :]
    data = fact.data
    run_key = _text(data.get("run_id"))
    out.session(state.session_id).events = True
    if kind == "user":
        _prompt(state, conv, run_key, fact, out)
        return
    if kind == "harness_start":
        if run_key is not None and run_key not in conv.runs:
            _start_run(state, conv, run_key, fact, out)
        return
    owned = _owner(conv, run_key, data)
    if owned is None:
        return
    run, other = owned
    if kind == "harness_end" and other is None:
        _end_run(conv, run, fact, out)
    elif kind == "usage":
        _model_call(run, other, fact, out, ended=True)
    elif kind == "error":
        if other is None:
            out.node("OrchestratorRun", run.run_id, {"status": "failed", "error": _error(data)})
            out.sourced("OrchestratorRun", run.run_id, fact)
        else:
            _model_call(run, other, fact, out, ended=False)
    elif kind in ("tool_call", "relay"):
        call_id = _text(data.get("id") if kind == "tool_call" else data.get("tool_call_id"))
        if call_id is not None:
            _tool_call(conv, run, run_key or "", other, call_id, fact, out, started=kind == "tool_call")
    elif kind == "tool_result":
        call_id = _text(data.get("id"))
        if call_id is not None:
            _tool_result(conv, run, call_id, fact, out)


def _error(data: dict[str, Any]) -> str:
    return str(data.get("message"))[:1000]


def _prompt(state: SessionFold, conv: _Conversation, run_key: str | None, fact: Fact, out: Derived) -> None:
    sid = state.session_id
    state.prompts += 1
    prompt_id = f"{sid}::prompt::{state.prompts}"
    content = fact.data.get("content")
    text = content if isinstance(content, str) else _json.encode(content).decode()
    props: dict[str, Any] = {"session_id": sid, "prompt_number": state.prompts, "prompt": text[:500]}
    props["prompt_chars"] = len(text)
    stamp(props, "occurred_at", fact.epoch_ms)
    out.node("Prompt", prompt_id, props)
    out.edge("HAS_PART", "Session", sid, "Prompt", prompt_id)
    out.sourced("Prompt", prompt_id, fact)
    parent = conv.runs.get(_text(fact.data.get("parent_id")) or "")
    if parent is not None:  # the task of a run that started already (OTLP: an agent's first input)
        if not parent.prompted:
            parent.prompted = True
            out.edge("TRIGGERED", "Prompt", prompt_id, "OrchestratorRun", parent.run_id)
        return
    if run_key is not None:
        conv.prompts_by_node[f"{run_key}:user"] = prompt_id
    conv.pending_prompt = prompt_id


def _start_run(state: SessionFold, conv: _Conversation, run_key: str, fact: Fact, out: Derived) -> None:
    """A ``harness_start``: a root run of the conversation's session, or a subagent's run."""
    sid = state.session_id
    data = fact.data
    parent = _text(data.get("parent_id"))
    agent = _text(data.get("agent_id"))
    parent_run = conv.runs.get(parent) if parent is not None else None
    is_sub = parent is not None and (
        parent in conv.tools
        or parent_run is not None
        or (":" not in parent and parent not in conv.prompts_by_node)
    )
    delegation_id = None
    if is_sub and parent is not None:
        if parent in conv.tools:
            parent_session = conv.tools[parent].session_id
        else:
            parent_session = parent_run.session_id if parent_run is not None else sid
        session_id = f"{sid}::agent::{run_key}"
        delegation_id = _delegate(parent_session, session_id, parent, parent_run is None, agent, fact, out)
    else:
        session_id = sid
        flags = out.session(sid)
        flags.root = True
        flags.agent = agent
        flags.span(started_ms=fact.epoch_ms)
    count = conv.run_counts.get(session_id, 0) + 1
    conv.run_counts[session_id] = count
    run_id = f"{session_id}::run::{count}"
    conv.runs[run_key] = _Run(session_id, run_id, fact.epoch_ms, delegation_id)
    props: dict[str, Any] = {
        "session_id": session_id,
        "run_number": count,
        "status": "running",
        "conversation_run_id": run_key,
        "agent_id": agent,
    }
    stamp(props, "started_at", fact.epoch_ms)
    out.node("OrchestratorRun", run_id, props)
    out.edge("HAS_EXECUTION", "Session", session_id, "OrchestratorRun", run_id)
    out.sourced("OrchestratorRun", run_id, fact)
    prompt = conv.prompts_by_node.get(parent) if parent is not None else None
    if prompt is None and not is_sub:
        prompt = conv.pending_prompt
    if prompt is not None:
        conv.runs[run_key].prompted = True
        out.edge("TRIGGERED", "Prompt", prompt, "OrchestratorRun", run_id)
        if prompt == conv.pending_prompt:
            conv.pending_prompt = None


def _delegate(
    parent_session: str,
    session_id: str,
    parent: str,
    by_tool_call: bool,
    agent: str | None,
    fact: Fact,
    out: Derived,
) -> str:
    """The subagent's child Session and its Delegation (``TRIGGERED`` by the tool call that ran it,
    when one did); returns the Delegation's id."""
    flags = out.session(session_id)
    flags.events = flags.fork = True
    flags.parent = parent_session
    flags.agent = agent
    flags.span(started_ms=fact.epoch_ms)
    out.session(parent_session)
    delegation_id = f"{parent_session}::delegation::{parent if by_tool_call else session_id}"
    props: dict[str, Any] = {
        "agent": agent,
        "resolved_agent": agent,
        "sub_session_id": session_id,
        "parent_session_id": parent_session,
        "tool_call_id": parent if by_tool_call else None,
        "status": "running",
    }
    stamp(props, "started_at", fact.epoch_ms)
    out.node("Delegation", delegation_id, props)
    out.edge("HAS_DELEGATION", "Session", parent_session, "Delegation", delegation_id)
    if by_tool_call:
        call = tool_call_node_id(parent_session, parent)
        out.edge("TRIGGERED", "ToolCall", call, "Delegation", delegation_id)
    out.edge("ENCOMPASSES", "Delegation", delegation_id, "Session", session_id)
    out.sourced("Delegation", delegation_id, fact)
    if agent is not None and agent not in PSEUDO_AGENTS:
        out.node("Agent", f"agent:{agent}", {"name": agent})
        out.edge("HAS_AGENT", "Session", session_id, "Agent", f"agent:{agent}")
    return delegation_id


def _end_run(conv: _Conversation, run: _Run, fact: Fact, out: Derived) -> None:
    data = fact.data
    reason = _text(data.get("reason"))
    status = "completed" if reason is None or reason in _COMPLETED else reason
    props: dict[str, Any] = {
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
    if status == "cancelled":
        _cancellation(conv, run, fact, out)
    flags = out.session(run.session_id)
    flags.span(ended_ms=fact.epoch_ms)  # a root session: the end of its latest run so far
    if run.delegation_id is not None:
        dprops: dict[str, Any] = {
            "status": status,
            "success": status == "completed",
            "duration_ms": fact.epoch_ms - run.started_ms,
        }
        stamp(dprops, "ended_at", fact.epoch_ms)
        out.node("Delegation", run.delegation_id, dprops)
        flags.end = True
        flags.status_rank = STATUS_RANK.get(status, STATUS_RANK["failed"])


def _cancellation(conv: _Conversation, run: _Run, fact: Fact, out: Derived) -> None:
    count = conv.cancellations.get(run.session_id, 0) + 1
    conv.cancellations[run.session_id] = count
    cancel_id = f"{run.session_id}::cancellation::{count}"
    props: dict[str, Any] = {"session_id": run.session_id, "run_id": run.run_id}
    stamp(props, "occurred_at", fact.epoch_ms)
    out.node("Cancellation", cancel_id, props)
    out.edge("HAS_PART", "Session", run.session_id, "Cancellation", cancel_id)
    out.edge("HAS_PART", "OrchestratorRun", run.run_id, "Cancellation", cancel_id)
    out.sourced("Cancellation", cancel_id, fact)
    out.node("OrchestratorRun", run.run_id, {"cancelled": True})


def _open_iteration(run: _Run, fact: Fact, out: Derived) -> str:
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


def _model_call(run: _Run, other: str | None, fact: Fact, out: Derived, *, ended: bool) -> None:
    """A ``usage`` (``ended``) or a failed attempt's ``error`` of a model call of ``run``, from the
    run itself (``other`` None) or from ``other`` (a provider run)."""
    if other is not None and run.model_call is not None and run.model_call[0] == other:
        iteration_id = run.model_call[1]  # the same provider run again (OTLP: usage, then error)
    else:
        iteration_id = run.iteration_id or _open_iteration(run, fact, out)
    data = fact.data
    props = _model_facts(data)
    if other is not None:
        props["conversation_run_id"] = other
    if ended:
        if _usage_reported(data):
            props.update(
                usage_props(
                    {
                        "input_tokens": data.get("input_tokens"),
                        "output_tokens": data.get("output_tokens"),
                        "cache_read_input_tokens": data.get("cache_read_tokens"),
                        "cache_creation_input_tokens": data.get("cache_creation_tokens"),
                    }
                )
            )
        stamp(props, "ended_at", fact.epoch_ms)
        run.iteration_id = None
        run.model_call = None if other is None else (other, iteration_id)
    else:
        props["error"] = _error(data)
        if run.model_call is None or run.model_call[1] != iteration_id:
            run.iteration_id = iteration_id  # a failed attempt: the retry ends this iteration
    out.node("Iteration", iteration_id, props)
    out.sourced("Iteration", iteration_id, fact)


def _otel_attributes(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    otel = data.get("otel")
    if not isinstance(otel, dict):
        return {}, {}
    attributes = otel.get("attributes")
    return otel, attributes if isinstance(attributes, dict) else {}


def _model_facts(data: dict[str, Any]) -> dict[str, Any]:
    """What a model call's event says besides tokens: the model (`layer1.conversation_model`), and
    from an OTLP span (its ``otel`` extra) the provider, the call's duration and its stop reason."""
    otel, attributes = _otel_attributes(data)
    props: dict[str, Any] = {"model": conversation_model(data)}
    provider = _text(data.get("provider"))
    for key in ("gen_ai.provider.name", "gen_ai.system"):
        provider = provider or _text(attributes.get(key))
    props["provider"] = provider
    start, end = otel.get("startTimeUnixNano"), otel.get("endTimeUnixNano")
    if isinstance(start, int) and isinstance(end, int) and 0 < start <= end:
        props["llm_duration_ms"] = (end - start) // 1_000_000
    reasons = attributes.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and reasons and isinstance(reasons[0], str):
        props["stop_reason"] = reasons[0]
    return props


def _usage_reported(data: dict[str, Any]) -> bool:
    """False for OTLP's stand-in ``usage`` of a span that reported none (``usageReported: false``)."""
    otel, _ = _otel_attributes(data)
    return otel.get("usageReported") is not False


def _tool_call(
    conv: _Conversation,
    run: _Run,
    run_key: str,
    other: str | None,
    call_id: str,
    fact: Fact,
    out: Derived,
    *,
    started: bool,
) -> None:
    """A ``tool_call`` (``started``) or the ``relay`` asking permission for one: the ToolCall, its
    iteration (module docstring) and, for a call that starts, its parallel group."""
    data = fact.data
    node_id = tool_call_node_id(run.session_id, call_id)
    call = conv.tools.get(call_id)
    props: dict[str, Any] = {
        "tool_call_id": call_id,
        "session_id": run.session_id,
        "run_id": run.run_id,
        "tool_name": _tool_name(data.get("name") if started else data.get("tool")),
    }
    tool_input = data.get("tool_input") if started else data.get("params")
    if tool_input is not None:
        props["tool_input"] = tool_input if isinstance(tool_input, str) else _json.encode(tool_input).decode()
    if call is None:
        if run.iteration_id is not None:
            iteration_id = run.iteration_id
        elif other is None and run.model_call is not None:
            iteration_id = run.model_call[1]
        else:
            iteration_id = _open_iteration(run, fact, out)
        props["iteration_id"] = iteration_id
        out.edge("HAS_TOOL_CALL", "Session", run.session_id, "ToolCall", node_id)
        out.edge("HAS_TOOL_CALL", "Iteration", iteration_id, "ToolCall", node_id)
        call = conv.tools[call_id] = _Call(run.session_id, run_key)
        if run.calls_of != iteration_id:
            run.calls_of, run.running, run.group = iteration_id, [], []
    if started and call.started_ms is None:
        call.started_ms = fact.epoch_ms
        stamp(props, "started_at", fact.epoch_ms)
        _parallel(run, call_id, node_id, out)
        run.running.append(call_id)
    out.node("ToolCall", node_id, props)
    out.tool_call(node_id)
    out.sourced("ToolCall", node_id, fact)


def _parallel(run: _Run, call_id: str, node_id: str, out: Derived) -> None:
    """Join (or open, with the calls still running) the parallel group of a call that starts while
    an earlier call of its model call has no result yet."""
    if not run.running:
        run.group = []
        return
    group_id = graph_key(f"{run.calls_of}::parallel::{run.groups + (0 if run.group else 1)}")
    if not run.group:  # opened now: the calls still running are its first members
        run.groups += 1
        run.group = [tool_call_node_id(run.session_id, running) for running in run.running]
        for earlier in run.group:
            out.node("ToolCall", earlier, {"parallel_group_id": group_id})
            out.tool_call(earlier)
    for earlier in run.group:
        out.edge("PARALLEL_EXECUTION", "ToolCall", node_id, "ToolCall", earlier)
    out.node("ToolCall", node_id, {"parallel_group_id": group_id})
    run.group.append(node_id)


def _tool_result(conv: _Conversation, run: _Run, call_id: str, fact: Fact, out: Derived) -> None:
    data = fact.data
    call = conv.tools.get(call_id)
    session_id = call.session_id if call is not None else run.session_id
    node_id = tool_call_node_id(session_id, call_id)
    output = data.get("result")
    error: str | None = None
    if isinstance(output, dict):
        if output.get("error") is not None:
            error = str(output["error"])[:1000]
        elif output.get("status") == "denied":
            error = f"denied: {output.get('reason') or ''}".strip()
    props: dict[str, Any] = {
        "result_success": error is None,
        "result_error": error,
        "tool_name": _tool_name(data.get("name")),
    }
    stamp(props, "ended_at", fact.epoch_ms)
    if call is not None:
        if call.started_ms is not None:
            props["duration_ms"] = fact.epoch_ms - call.started_ms
        owner = conv.runs.get(call.run_key) or conv.runs.get(conv.owners.get(call.run_key, ""))
        if owner is not None and call_id in owner.running:
            owner.running.remove(call_id)
    out.node("ToolCall", node_id, props)
    out.edge("HAS_TOOL_CALL", "Session", session_id, "ToolCall", node_id)
    out.tool_call(node_id)
    out.sourced("ToolCall", node_id, fact)
