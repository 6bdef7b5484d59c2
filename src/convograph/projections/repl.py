"""REPL view (spec §4.5): RLM agents, their turns (reasoning, code, output) and child agents.

Built on the hypergraph (the ``repl_*`` events are not nodes of the flat graph). Each run's events
come from the hypergraph's per-run index (`queries.run_chunks`): no full scan per run, so the view
costs O(N) in total, not upstream's O(runs x N). Children are linked through the spawn index of
every block of the agent (any block, not only those whose block key is the event id, spec §9 #16).

Folding per run, in arrival order (spec §4.5): ``harness_start`` sets identity, depth and
``max_iterations``; text / reasoning go to the open turn's ``reasoning`` (or, after a
``repl_output`` with ``done``, to ``final_answer``); ``repl_input`` opens a turn (reusing one that
only had reasoning); ``repl_progress`` appends to ``stdout`` / ``stderr``; ``repl_output`` closes the
execution; ``error``, ``usage`` and ``relay`` set the turn's error, usage and permission phase.

Deviations from upstream (docs/projections.md): an ``error`` followed by a normal end
(``reason: "final"``) ends as ``done``, not a sticky ``error`` (§9 #7); a run still open when the
stream was closed is ``error``, not forever ``running`` (§9 #16); a child whose parent is not an
agent is listed as a root instead of disappearing. ``iteration`` is the producer's value as sent
(0-based from the harness, 1-based from upstream's generators); ``turns`` are in order either way.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = [
    "ReplAgent",
    "ReplOutputInfo",
    "ReplTurn",
    "ReplUsage",
    "ReplView",
    "SidebarItem",
    "flatten_agents",
    "project_repl",
]

AgentStatus = Literal["running", "done", "error", "max_iterations"]
TurnPhase = Literal["idle", "reasoning", "code", "executing", "done", "error", "permission"]


class ReplOutputInfo(msgspec.Struct, kw_only=True, rename="camel"):
    stdout: str
    done: bool
    error: str | None = None
    duration_ms: float | None = None
    truncated: bool | None = None


class ReplUsage(msgspec.Struct, kw_only=True, rename="camel"):
    input_tokens: int
    output_tokens: int
    cache_read: int | None = None
    cache_creation: int | None = None


class ReplTurn(msgspec.Struct, kw_only=True, rename="camel"):
    iteration: int | None = None
    phase: TurnPhase = "idle"
    reasoning: str = ""
    code: str = ""
    stdout: str = ""
    stderr: str = ""
    output: ReplOutputInfo | None = None
    error_message: str | None = None
    child_agents: list[ReplAgent] = msgspec.field(default_factory=list)
    usage: ReplUsage | None = None


class ReplAgent(msgspec.Struct, kw_only=True, rename="camel"):
    run_id: str
    agent_id: str | None = None
    parent_id: str | None = None
    status: AgentStatus = "running"
    max_iterations: int | None = None
    depth: int = 0
    turns: list[ReplTurn] = msgspec.field(default_factory=list)
    final_answer: str = ""
    total_usage: dict[str, int] | None = None


class ReplView(msgspec.Struct, kw_only=True, rename="camel"):
    agents: list[ReplAgent]
    """Root agents (not spawned by another agent), in order of first arrival."""
    all_agents: dict[str, ReplAgent]
    """Every agent by run id."""


class SidebarItem(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    type: Literal["agent", "turn"]
    run_id: str
    turn_index: int
    depth: int


def _fold(run_id: str, events: list[Any], closed: bool) -> ReplAgent | None:
    """One run's events as a `ReplAgent`; ``None`` for a run without ``harness_start``."""
    agent = ReplAgent(run_id=run_id)
    started = False
    turn = ReplTurn()
    turn_started = False
    collecting = False
    errored = False
    ended = False
    for event in events:
        kind = event.type
        if kind == "harness_start":
            started = True
            agent.agent_id = event.agent_id
            agent.parent_id = event.parent_id
            agent.depth = event.depth or 0
            agent.max_iterations = event.max_iterations
        elif kind == "harness_end":
            ended = True
            if event.reason == "max_iterations":
                agent.status = "max_iterations"
            elif errored and event.reason != "final":
                agent.status = "error"
            else:
                agent.status = "done"
            if event.total_usage is not None:
                agent.total_usage = msgspec.to_builtins(event.total_usage)
        elif kind in ("text", "reasoning"):
            if collecting:
                agent.final_answer += event.content
            elif turn.output is not None or turn.error_message is not None:
                agent.turns.append(turn)
                turn = ReplTurn(reasoning=event.content, phase="reasoning")
            else:
                turn.reasoning += event.content
                turn.phase = "reasoning"
        elif kind == "repl_input":
            if turn_started and turn.code:
                agent.turns.append(turn)
                turn = ReplTurn()
            turn_started = True
            collecting = False
            turn.code = event.code
            turn.phase = "code"
            if event.iteration is not None:
                turn.iteration = event.iteration
        elif kind == "repl_progress":
            turn.phase = "executing"
            if event.stream == "stderr":
                turn.stderr += event.chunk
            else:
                turn.stdout += event.chunk
        elif kind == "repl_output":
            turn.output = ReplOutputInfo(
                stdout=event.stdout,
                done=event.done,
                error=event.error,
                duration_ms=event.duration_ms,
                truncated=event.truncated,
            )
            turn.phase = "error" if event.error else "done"
            if event.iteration is not None and turn.iteration is None:
                turn.iteration = event.iteration
            if event.done:
                collecting = True
        elif kind == "error":
            errored = True
            agent.status = "error"
            turn.phase = "error"
            turn.error_message = event.message
        elif kind == "usage":
            turn.usage = ReplUsage(
                input_tokens=event.input_tokens,
                output_tokens=event.output_tokens,
                cache_read=event.cache_read_tokens,
                cache_creation=event.cache_creation_tokens,
            )
        elif kind == "relay":
            turn.phase = "permission"
    if not started:
        return None
    if turn_started or turn.reasoning or turn.error_message is not None:
        agent.turns.append(turn)
    if not ended and closed:
        agent.status = "error"
    return agent


def project_repl(conversation: Any) -> ReplView:
    """The REPL view of a hypergraph conversation. O(N) over all chunks, O(run) per run."""
    from convograph.hypergraph import Conversation
    from convograph.hypergraph import queries as q

    if not isinstance(conversation, Conversation):
        raise TypeError(
            f"project_repl needs a hypergraph Conversation (repl events are not flat-graph nodes), "
            f"not {type(conversation).__name__}"
        )
    closed = q.is_stream_closed(conversation)
    all_agents: dict[str, ReplAgent] = {}
    order: list[str] = []
    for run_id in q.run_ids(conversation):
        events = [chunk.event for chunk in q.run_chunks(conversation, run_id)]
        agent = _fold(run_id, events, closed)
        if agent is not None:
            all_agents[run_id] = agent
            order.append(run_id)
    attached: set[str] = set()
    for run_id in order:
        agent = all_agents[run_id]
        turn_index = -1
        for block in q.run_blocks(conversation, run_id):
            if block.kind == "repl_input":
                turn_index += 1
            for spawn in q.spawns_from(conversation, block.id):
                child = all_agents.get(spawn.run_id)
                if child is None or spawn.run_id in attached or spawn.run_id == run_id or not agent.turns:
                    continue
                index = min(max(0, turn_index), len(agent.turns) - 1)
                agent.turns[index].child_agents.append(child)
                attached.add(spawn.run_id)
    roots = [all_agents[run_id] for run_id in order if run_id not in attached]
    return ReplView(agents=roots, all_agents=all_agents)


def flatten_agents(agents: list[ReplAgent], depth: int = 0) -> list[SidebarItem]:
    """Sidebar rows (spec §4.5): an agent, then each turn followed by that turn's child agents
    (recursively, two levels deeper). Iterative; an agent linked twice is listed once."""
    out: list[SidebarItem] = []
    seen: set[str] = set()
    work: list[ReplAgent | SidebarItem | tuple[ReplAgent, int]] = [(a, depth) for a in reversed(agents)]
    while work:
        item = work.pop()
        if isinstance(item, SidebarItem):
            out.append(item)
            continue
        if isinstance(item, ReplAgent):  # pragma: no cover - agents are always queued with a depth
            continue
        agent, level = item
        if agent.run_id in seen:
            continue
        seen.add(agent.run_id)
        out.append(SidebarItem(type="agent", run_id=agent.run_id, turn_index=-1, depth=level))
        for index in range(len(agent.turns) - 1, -1, -1):
            turn = agent.turns[index]
            work.extend((child, level + 2) for child in reversed(turn.child_agents))
            work.append(SidebarItem(type="turn", run_id=agent.run_id, turn_index=index, depth=level + 1))
    return out
