"""REPL view (spec §4.5): RLM agents, their turns (reasoning, code, output) and child agents.

Built on the hypergraph (the ``repl_*`` events are not nodes of the flat graph). Each run's events
come from the hypergraph's per-run index, read for every run at once (`queries.run_event_table`: no
record per chunk, no full scan per run), so the view costs O(N) in total, not upstream's
O(runs x N). Children are linked through the spawn index of
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

from collections.abc import Callable
from typing import Any, Literal

import msgspec

from convograph.events.types import ReplProgress

__all__ = [
    "ReplAgent",
    "ReplOutputInfo",
    "ReplProjector",
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


class _RunFold:
    """One run's REPL fold so far (spec §4.5): `add` one event in O(1) (plus the text appended),
    `read` gives it as a `ReplAgent` in O(turns). The one-shot `project_repl` and the
    incremental `ReplProjector` both fold through this, so they agree by construction.

    ``repl_progress`` chunks wait in ``stdout`` / ``stderr`` lists until the next other event or
    `read`, then join the turn's text at once: appending chunk by chunk to a string would copy the
    turn's output so far per chunk (quadratic in a turn's output, as upstream's ``+=``)."""

    __slots__ = (
        "agent",
        "collecting",
        "done_turns",
        "ended",
        "errored",
        "started",
        "status",
        "stderr",
        "stdout",
        "turn",
        "turn_started",
    )

    def __init__(self, run_id: str) -> None:
        self.agent = ReplAgent(run_id=run_id)
        self.started = False
        self.turn = ReplTurn()
        self.turn_started = False
        self.collecting = False
        self.errored = False
        self.ended = False
        self.status: AgentStatus = "running"
        self.done_turns: list[ReplTurn] = []
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        """``repl_progress`` chunks of ``turn`` not yet joined into it."""

    def _join_progress(self) -> None:
        """Apply the waiting ``repl_progress`` chunks to ``turn`` (what adding them one by one would
        do: the phase, then the texts)."""
        turn = self.turn
        turn.phase = "executing"
        if self.stdout:
            turn.stdout += "".join(self.stdout)
            self.stdout.clear()
        if self.stderr:
            turn.stderr += "".join(self.stderr)
            self.stderr.clear()

    def add(self, event: Any) -> None:
        if type(event) is ReplProgress:
            (self.stderr if event.stream == "stderr" else self.stdout).append(event.chunk)
            return
        if self.stdout or self.stderr:
            self._join_progress()
        kind = event.type
        agent = self.agent
        turn = self.turn
        if kind == "harness_start":
            self.started = True
            agent.agent_id = event.agent_id
            agent.parent_id = event.parent_id
            agent.depth = event.depth or 0
            agent.max_iterations = event.max_iterations
        elif kind == "harness_end":
            self.ended = True
            if event.reason == "max_iterations":
                self.status = "max_iterations"
            elif self.errored and event.reason != "final":
                self.status = "error"
            else:
                self.status = "done"
            if event.total_usage is not None:
                agent.total_usage = msgspec.to_builtins(event.total_usage)
        elif kind in ("text", "reasoning"):
            if self.collecting:
                agent.final_answer += event.content
            elif turn.output is not None or turn.error_message is not None:
                self.done_turns.append(turn)
                self.turn = ReplTurn(reasoning=event.content, phase="reasoning")
            else:
                turn.reasoning += event.content
                turn.phase = "reasoning"
        elif kind == "repl_input":
            if self.turn_started and turn.code:
                self.done_turns.append(turn)
                self.turn = turn = ReplTurn()
            self.turn_started = True
            self.collecting = False
            turn.code = event.code
            turn.phase = "code"
            if event.iteration is not None:
                turn.iteration = event.iteration
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
                self.collecting = True
        elif kind == "error":
            self.errored = True
            self.status = "error"
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

    def read(self, closed: bool) -> ReplAgent | None:
        """The agent as of now (the same object every time; ``turns`` a fresh list), ``None``
        for a run without ``harness_start``. A run still open in a closed stream is ``error``."""
        if not self.started:
            return None
        if self.stdout or self.stderr:
            self._join_progress()
        agent = self.agent
        turn = self.turn
        open_turn = self.turn_started or turn.reasoning or turn.error_message is not None
        agent.turns = [*self.done_turns, turn] if open_turn else list(self.done_turns)
        agent.status = "error" if closed and not self.ended else self.status
        return agent


def _fold(run_id: str, events: list[Any], closed: bool) -> ReplAgent | None:
    """One run's events as a `ReplAgent`; ``None`` for a run without ``harness_start``."""
    fold = _RunFold(run_id)
    add = fold.add
    stdout, stderr = fold.stdout, fold.stderr  # (`add` of a progress chunk, inline)
    for event in events:
        if type(event) is ReplProgress:
            (stderr if event.stream == "stderr" else stdout).append(event.chunk)
        else:
            add(event)
    return fold.read(closed)


def _attach(
    conversation: Any, order: list[str], all_agents: dict[str, ReplAgent], turn_of_block: Callable[[str], int]
) -> list[ReplAgent]:
    """Hang each child agent under the turn of its parent agent whose block spawned it (the
    turn of the latest ``repl_input`` block up to the spawning block: ``turn_of_block``); the
    roots, in ``order``. Children of one turn come in block order, then link order. O(agents +
    their spawning blocks' spawns)."""
    from convograph.hypergraph import queries as q

    triggers: dict[str, list[str]] = {}
    for run_id in order:
        row = q.spawn_row(conversation, run_id)
        if row is None:
            continue
        trigger = row[1]
        parent = q.get_block(conversation, trigger).run_id
        if parent != run_id and parent in all_agents:
            found = triggers.setdefault(parent, [])
            if trigger not in found:
                found.append(trigger)
    attached: set[str] = set()
    for run_id in order:
        blocks = triggers.get(run_id)
        agent = all_agents[run_id]
        if blocks is None or not agent.turns:
            continue
        blocks.sort(key=lambda block_id: q.get_block(conversation, block_id).first_seq)
        for block_id in blocks:
            for spawn in q.spawns_from(conversation, block_id):
                child = all_agents.get(spawn.run_id)
                if child is None or spawn.run_id in attached or spawn.run_id == run_id:
                    continue
                index = min(max(0, turn_of_block(block_id)), len(agent.turns) - 1)
                agent.turns[index].child_agents.append(child)
                attached.add(spawn.run_id)
    return [all_agents[run_id] for run_id in order if run_id not in attached]


def project_repl(conversation: Any) -> ReplView:
    """The REPL view of a hypergraph conversation. O(N) over all chunks, O(run) per run (read in
    bulk: `queries.run_event_table`, no record per chunk or block)."""
    from convograph.hypergraph import Conversation
    from convograph.hypergraph import queries as q

    if not isinstance(conversation, Conversation):
        raise TypeError(
            f"project_repl needs a hypergraph Conversation (repl events are not flat-graph nodes), "
            f"not {type(conversation).__name__}"
        )
    closed = q.is_stream_closed(conversation)
    table = q.run_event_table(conversation)
    block_ids = table.block_ids
    block_kinds = table.block_kinds
    all_agents: dict[str, ReplAgent] = {}
    order: list[str] = []
    turn_of: dict[str, int] = {}
    for run_id, events, blocks in zip(table.run_ids, table.events, table.blocks, strict=True):
        agent = _fold(run_id, events, closed)
        if agent is not None:
            all_agents[run_id] = agent
            order.append(run_id)
            turn_index = -1
            for b in blocks:
                if block_kinds[b] == "repl_input":
                    turn_index += 1
                turn_of[block_ids[b]] = turn_index
    roots = _attach(conversation, order, all_agents, turn_of.__getitem__)
    return ReplView(agents=roots, all_agents=all_agents)


class ReplProjector:
    """The REPL view kept current chunk by chunk: O(1) per new chunk (plus its text), and
    `view` in O(agents + turns), instead of `project_repl`'s O(N) per call.

    `apply(event)` reduces the event into its own conversation; `advance(conversation)` follows
    a conversation reduced elsewhere (it must extend the current one; after an operation, use
    `replace`). The view's objects are live: a later `view` changes them.

    Invariant (tested after every event): ``view() == project_repl(conversation)``.
    """

    def __init__(self, conversation: Any = None) -> None:
        from convograph.hypergraph import create_conversation

        self.replace(conversation if conversation is not None else create_conversation())

    @property
    def conversation(self) -> Any:
        return self._conversation

    def replace(self, conversation: Any) -> None:
        """Start over from ``conversation`` (an operation changed it). O(N)."""
        self._conversation = conversation
        self._runs: dict[str, _RunFold] = {}
        self._repl_blocks: dict[str, int] = {}
        """Per run: its ``repl_input`` blocks so far."""
        self._turn_of: dict[str, int] = {}
        """Per block: the turn of the latest ``repl_input`` block of its run up to it."""
        self._seen = 0
        self._filled: list[ReplTurn] = []
        self._catch_up()

    def apply(self, event: Any) -> None:
        from convograph.hypergraph import reduce_conversation

        self.advance(reduce_conversation(self._conversation, event))

    def advance(self, conversation: Any) -> None:
        """Fold the chunks ``conversation`` has beyond the current one. O(new chunks)."""
        if conversation is not self._conversation:
            self._conversation = conversation
            self._catch_up()

    def _catch_up(self) -> None:
        from convograph.hypergraph import queries as q

        conversation = self._conversation
        runs = self._runs
        turn_of = self._turn_of
        repl_blocks = self._repl_blocks
        columns = q.chunk_columns(conversation, self._seen)
        block_ids, block_kinds, block_runs = columns.block_ids, columns.block_kinds, columns.block_runs
        for event, b in zip(columns.events, columns.blocks, strict=True):
            run_id = block_runs[b]
            fold = runs.get(run_id)
            if fold is None:
                fold = runs[run_id] = _RunFold(run_id)
            fold.add(event)
            block_id = block_ids[b]
            if block_id not in turn_of:
                count = repl_blocks.get(run_id, 0)
                if block_kinds[b] == "repl_input":
                    count += 1
                    repl_blocks[run_id] = count
                turn_of[block_id] = count - 1
        self._seen = conversation.chunk_count

    def view(self) -> ReplView:
        """The current view. O(agents + turns + the spawns of spawning blocks)."""
        from convograph.hypergraph import queries as q

        for turn in self._filled:
            turn.child_agents = []
        closed = q.is_stream_closed(self._conversation)
        all_agents: dict[str, ReplAgent] = {}
        order: list[str] = []
        for run_id, fold in self._runs.items():  # runs in order of first arrival, as `run_ids`
            agent = fold.read(closed)
            if agent is not None:
                all_agents[run_id] = agent
                order.append(run_id)
        roots = _attach(self._conversation, order, all_agents, self._turn_of.__getitem__)
        self._filled = [turn for agent in all_agents.values() for turn in agent.turns if turn.child_agents]
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
