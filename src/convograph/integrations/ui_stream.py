"""The shared base of the UI stream adapters: stored convograph events in, protocol chunks out.

`UIEventStream.feed(stored)` folds one stored event into the state every UI protocol needs and
calls no-op ``handle_*`` hooks that a protocol subclass (`convograph.integrations.ag_ui`,
`convograph.integrations.ai_sdk`) overrides, as pydantic-ai's ``UIEventStream`` does. The base
owns all shared state; a subclass only maps hooks to its chunks and encodes them.

- **Turns** are the protocol's top unit (an AG-UI run, an AI SDK message). A top-level harness run
  (``harness_start`` not spawned by a tool call) opens one; top-level runs starting while it is
  open join it; it closes when its last top-level run ends. An event outside every open harness
  run (a user message, a decision, a command, a late result, a producer without
  ``harness_start``) opens a *loose* turn keyed by its run id, which closes when an event of
  another key (or a harness run) needs a turn.
- **Runs**: harness runs (top-level, or subagents: ``parentId`` names a tool call or a harness
  run), their **steps** (runs without ``harness_start`` whose ``parentId`` names a harness run: one
  provider call each), and loose runs.
- **Parts**: each run has at most one open text / reasoning block; any other event of the run
  closes it. Assistant messages follow the messages projection's turn rule
  (`convograph.projections.history`): text after tool calls starts a new message, further text
  of the same turn continues it.
- **Tool calls**: started by ``tool_call``, or by the first ``relay`` or ``tool_result`` naming
  them (a call known only from those is rebuilt from the relay's params, as the projections do);
  each is answered once.
- **Close-out**: ending a run closes its open part, step and subagents first (a subagent still
  open then ends as interrupted); ending a turn closes what its runs left open, so a client never
  shows a spinner forever.

Invariant: the chunks of an event depend only on the events before it, so two streams fed the same
events produce the same bytes. A server encodes a live event once for all its subscribers, and a
subscriber that resumes rebuilds the state by feeding the earlier events and dropping their output.

**Frame ids.** One event can give several chunks. Each chunk is one SSE message; the last one of an
event carries ``id: <seq>``, the ones before it ``id: <seq>:<k>`` (``k`` counts from 0). A client
that reconnects with ``Last-Event-ID: <seq>`` has every chunk of that event; with ``<seq>:<k>`` it
has chunks ``0..k`` and gets the rest of that event, then the events after it: nothing repeated,
nothing lost (`parse_resume`).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from convograph.events import (
    Connected,
    Edit,
    Error,
    Event,
    HarnessEnd,
    HarnessStart,
    Reasoning,
    Regenerate,
    Relay,
    RelayResolved,
    ReplInput,
    ReplOutput,
    ReplProgress,
    Summarize,
    SwitchBranch,
    Text,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
    User,
)
from convograph.integrations.ui_state import (
    Chunk,
    Outcome,
    Part,
    Run,
    ToolCallState,
    Turn,
    UsageTotals,
    outcome_of,
    parse_resume,
    sse_frames,
)
from convograph.store import StoredEvent

__all__ = [
    "Chunk",
    "Outcome",
    "Part",
    "Run",
    "ToolCallState",
    "Turn",
    "UIEventStream",
    "UsageTotals",
    "outcome_of",
    "parse_resume",
    "sse_frames",
]

_FREE: Final = object()


# --- the stream -----------------------------------------------------------------------------------


class UIEventStream:
    """Base of the protocol streams: `feed` one stored event, get its SSE frames.

    Subclasses override `encode_chunk` and the ``handle_*`` / ``before_turn`` / ``after_turn``
    hooks they need (every hook is a no-op here) and add chunks with `emit`. Every ``handle_*``
    hook runs with a turn open (`turn`). O(1) amortised per event here; a hook may cost more
    (e.g. a snapshot).
    """

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self.seq = 0
        self.turn: Turn | None = None
        self.runs: dict[str, Run] = {}
        """Harness runs by id."""
        self.loose_runs: dict[str, Run] = {}
        self.step_owner: dict[str, Run] = {}
        """Step (provider) run id -> the harness run it belongs to."""
        self.calls: dict[str, ToolCallState] = {}
        self.relays: dict[str, Relay] = {}
        self.relay_of_call: dict[str, Relay] = {}
        self.open_parts: dict[tuple[str, str], Part] = {}
        """(kind, block id) and (kind, message id) -> the open part: ids a protocol keys its open
        parts by, so one run's part closes before another run opens one under the same id."""
        self.message_owner: dict[str, str | None] = {}
        """Message id -> the subagent run that made it (None: a top-level or loose run)."""
        self.aliases: dict[tuple[str, str | None, bool], str] = {}
        """(id, subagent run, new) -> the message id used instead of a taken id."""
        self.repl_owner: dict[str, Run] = {}
        """REPL turn id -> the run whose REPL it is (the runs it spawns are its subagents)."""
        self.usage = UsageTotals()
        self._turn_ids: set[str] = set()
        self._out: list[Chunk] = []

    # -- output ------------------------------------------------------------------------------------

    def encode_chunk(self, chunk: Chunk) -> bytes:
        """The chunk's JSON (one line)."""
        return msgspec.json.encode(chunk)

    def emit(self, chunk: Chunk) -> None:
        self._out.append(chunk)

    def chunks(self, event: Event, seq: int = 0) -> list[Chunk]:
        """The chunks ``event`` (stored with ``seq``) adds to the stream."""
        self.seq = seq
        out: list[Chunk] = []
        self._out = out
        handler = _DISPATCH.get(type(event))
        if handler is not None:
            handler(self, event)
        self._out = []
        return out

    def feed(self, stored: StoredEvent) -> list[bytes]:
        """The SSE frames of one stored event (fed in seq order, from the conversation's first)."""
        payloads = [self.encode_chunk(chunk) for chunk in self.chunks(stored.event, stored.seq)]
        return sse_frames(stored.seq, payloads)

    # -- hooks (no-ops) ----------------------------------------------------------------------------

    def before_turn(self, turn: Turn) -> None:
        """A turn opens (before the first hook of its first event)."""

    def after_turn(self, turn: Turn, end: HarnessEnd | None) -> None:
        """A turn closed; ``end`` is its last run's ``harness_end`` (None for a loose turn)."""

    def handle_run_start(self, run: Run) -> None:
        """A top-level run starts (and joins `turn`)."""

    def handle_run_end(self, run: Run, end: HarnessEnd | None) -> None:
        """A top-level run ended (``end`` None: closed by the end of its turn)."""

    def handle_subagent_start(self, run: Run) -> None: ...

    def handle_subagent_end(self, run: Run, end: HarnessEnd | None) -> None:
        """A subagent ended (``end`` None: its parent or turn ended first: interrupted)."""

    def handle_step_start(self, run: Run, step: str) -> None: ...

    def handle_step_end(self, run: Run, step: str) -> None: ...

    def handle_text_start(self, part: Part) -> None: ...

    def handle_text_delta(self, part: Part, delta: str) -> None: ...

    def handle_text_end(self, part: Part) -> None: ...

    def handle_reasoning_start(self, part: Part) -> None: ...

    def handle_reasoning_delta(self, part: Part, delta: str) -> None: ...

    def handle_reasoning_end(self, part: Part) -> None:
        """``part.signature`` / ``part.redacted_data`` are final here."""

    def handle_tool_call(self, call: ToolCallState) -> None:
        """A tool call starts, its input complete (convograph calls arrive whole)."""

    def handle_tool_call_input(self, call: ToolCallState, previous: Any) -> None:
        """A call started earlier (from its relay) got its own ``tool_call`` event."""

    def handle_tool_result(self, call: ToolCallState, result: ToolResult) -> None: ...

    def handle_tool_progress(self, call: ToolCallState | None, progress: ToolProgress) -> None: ...

    def handle_relay(self, relay: Relay, call: ToolCallState) -> None: ...

    def handle_relay_resolved(self, decision: RelayResolved, call: ToolCallState | None) -> None: ...

    def handle_user(self, user: User, message_id: str, owner: Run) -> None: ...

    def handle_usage(self, usage: Usage, owner: Run) -> None: ...

    def handle_error(self, error: Error, owner: Run) -> None: ...

    def handle_command(self, command: Edit | Regenerate | SwitchBranch | Summarize) -> None: ...

    def handle_repl(self, event: ReplInput | ReplProgress | ReplOutput, owner: Run) -> None: ...

    # -- turns and runs ----------------------------------------------------------------------------

    def _open_turn(self, turn_id: str, loose_key: str | None) -> Turn:
        if turn_id in self._turn_ids:
            turn_id = f"{turn_id}#{self.seq}"
        self._turn_ids.add(turn_id)
        turn = self.turn = Turn(turn_id, loose_key)
        self.before_turn(turn)
        return turn

    def _close_turn(self, end: HarnessEnd | None) -> None:
        turn = self.turn
        if turn is None:
            return
        for run in list(turn.runs):  # only when a stream is finished early
            self._end_run(run, None, close_turn=False)
        for owner in list(turn.owners.values()):
            if owner.kind == "subagent" and owner.open:  # its parent had ended: interrupted here
                self._end_run(owner, None)
            self._close_step(owner)
        self.turn = None
        self.after_turn(turn, end)

    def _turn_for(self, owner: Run) -> Turn:
        """The turn ``owner``'s events go to, opening (or switching to) a loose one if needed."""
        top = owner.top
        key = None if top.kind != "loose" and top.open else top.run_id
        turn = self.turn
        if turn is not None and (turn.loose_key is None or turn.loose_key == key):
            return turn
        if key is None:  # an open harness run outside a harness turn: not reachable, but stay sane
            key = top.run_id
        self._close_turn(None)
        return self._open_turn(key or f"seq-{self.seq}", key)

    def _locate(self, run_id: str | None, parent_id: str | None) -> tuple[Run, str | None]:
        """The run an event belongs to (and its step), with its turn open."""
        owner, step = self._owner(run_id, parent_id)
        turn = self._turn_for(owner)
        turn.owners.setdefault(id(owner), owner)
        return owner, step

    def _owner(self, run_id: str | None, parent_id: str | None) -> tuple[Run, str | None]:
        if run_id is not None:
            run = self.runs.get(run_id)
            if run is not None:
                return run, None
            owner = self.step_owner.get(run_id)
            if owner is not None:
                return owner, run_id
            if parent_id is not None:
                parent = self.runs.get(parent_id)
                if parent is not None:
                    self.step_owner[run_id] = parent
                    return parent, run_id
        key = run_id or ""
        loose = self.loose_runs.get(key)
        if loose is None:
            loose = self.loose_runs[key] = Run(key, "loose")
        return loose, None

    def _end_run(self, run: Run, end: HarnessEnd | None, *, close_turn: bool = True) -> None:
        for child in list(run.children):
            self._end_run(child, None)
        self._close_step(run)
        run.open = False
        if run.kind == "subagent":
            self.handle_subagent_end(run, end)
            if run.parent is not None and run in run.parent.children:
                run.parent.children.remove(run)
            return
        self.handle_run_end(run, end)
        turn = self.turn
        if turn is not None and run in turn.runs:
            turn.runs.remove(run)
            if close_turn and not turn.runs:
                self._close_turn(end)

    # -- steps and parts ---------------------------------------------------------------------------

    def _enter_step(self, owner: Run, step: str | None) -> None:
        if step is None or owner.step == step:
            return
        self._close_step(owner)
        owner.step = step
        self.handle_step_start(owner, step)

    def _close_step(self, owner: Run) -> None:
        self._close_part(owner)
        step = owner.step
        if step is not None:
            owner.step = None
            self.handle_step_end(owner, step)

    def _open_part(self, part: Part) -> None:
        for key in ((part.kind, part.block_id), (part.kind + ":message", part.message_id)):
            other = self.open_parts.get(key)
            if other is not None:
                self._close_part(other.owner)
        part.owner.part = part
        self.open_parts[(part.kind, part.block_id)] = part
        self.open_parts[(part.kind + ":message", part.message_id)] = part

    def _close_part(self, owner: Run) -> None:
        part = owner.part
        if part is None:
            return
        owner.part = None
        self.open_parts.pop((part.kind, part.block_id), None)
        self.open_parts.pop((part.kind + ":message", part.message_id), None)
        if part.kind == "text":
            self.handle_text_end(part)
        else:
            self.handle_reasoning_end(part)

    def _message_id(self, candidate: str, owner: Run, *, new: bool = False) -> str:
        """A message id for ``candidate`` (a block, call or user id) made by ``owner``: the id
        itself, unless a message of another subagent (or of the parent) already took it, or
        ``new`` (a message that must not continue one) and any message took it; then
        ``<id>@<run id>`` (`aliases`), so a message is never shared by mistake."""
        sub = owner.subagent_run_id
        taken = self.message_owner.get(candidate, _FREE)
        if taken is _FREE:
            self.message_owner[candidate] = sub
            return candidate
        if taken == sub and not new:
            return candidate
        key = (candidate, sub, new)
        alias = self.aliases.get(key)
        if alias is None:
            alias = self.aliases[key] = f"{candidate}@{owner.run_id}"
            self.message_owner.setdefault(alias, sub)
        return alias

    def _new_turn_message(self, owner: Run) -> None:
        owner.turn_message = None
        owner.turn_has_calls = False

    # -- tool calls --------------------------------------------------------------------------------

    def _start_call(self, call_id: str, name: str, tool_input: Any, owner: Run) -> ToolCallState:
        parent = owner.turn_message
        owner.turn_has_calls = True
        if parent is None:  # the call's own message holds the turn's next calls
            owner.turn_message = holder = self._message_id(call_id, owner, new=True)
            if holder != call_id:
                parent = holder  # named, so a client makes it under this id
        call = self.calls[call_id] = ToolCallState(call_id, name, tool_input, owner, parent)
        call.relay = self.relay_of_call.get(call_id)
        self.handle_tool_call(call)
        return call

    # -- event handlers ----------------------------------------------------------------------------

    def _on_harness_start(self, event: HarnessStart) -> None:
        existing = self.runs.get(event.run_id)
        if existing is not None and existing.open:
            return  # a repeated start
        spawner = self.calls.get(event.parent_id) if event.parent_id is not None else None
        parent = spawner.owner if spawner is not None else None
        if parent is None and event.parent_id is not None:
            parent = self.repl_owner.get(event.parent_id) or self.runs.get(event.parent_id)
        if parent is not None and parent.kind != "loose":
            run = Run(
                event.run_id,
                "subagent",
                event.agent_id,
                parent,
                spawner.call_id if spawner else None,
                spawned_by=event.parent_id,
            )
            self.runs[event.run_id] = run
            turn = self._turn_for(run)
            turn.owners.setdefault(id(run), run)
            parent.children.append(run)
            run.invocation = run.run_id if run.run_id not in turn.subagents else f"{run.run_id}#{self.seq}"
            turn.subagents.add(run.invocation)
            self.handle_subagent_start(run)
            return
        run = Run(event.run_id, "top", event.agent_id)
        self.runs[event.run_id] = run
        if self.turn is not None and self.turn.loose:
            self._close_turn(None)
        turn = self.turn if self.turn is not None else self._open_turn(run.run_id, None)
        turn.runs.append(run)
        turn.owners.setdefault(id(run), run)
        self.handle_run_start(run)

    def _on_harness_end(self, event: HarnessEnd) -> None:
        run = self.runs.get(event.run_id)
        if run is None or not run.open:
            return  # no start seen, or ended already: nothing to close
        self._turn_for(run)
        self._end_run(run, event)

    def _on_text(self, event: Text) -> None:
        owner, step = self._locate(event.run_id, event.parent_id)
        self._enter_step(owner, step)
        part = owner.part
        if part is None or part.kind != "text" or part.block_id != event.id:
            self._close_part(owner)
            if owner.turn_message is None or owner.turn_has_calls:
                owner.turn_message = self._message_id(event.id, owner)
                owner.turn_has_calls = False
            part = Part("text", event.id, owner.turn_message, owner, step)
            self._open_part(part)
            self.handle_text_start(part)
        part.deltas += 1
        self.handle_text_delta(part, event.content)

    def _on_reasoning(self, event: Reasoning) -> None:
        owner, step = self._locate(event.run_id, event.parent_id)
        self._enter_step(owner, step)
        part = owner.part
        if part is None or part.kind != "reasoning" or part.block_id != event.id:
            self._close_part(owner)
            if owner.turn_has_calls:
                self._new_turn_message(owner)
            part = Part("reasoning", event.id, self._message_id(event.id, owner), owner, step)
            part.redacted_data = event.redacted_data
            self._open_part(part)
            self.handle_reasoning_start(part)
        if event.signature is not None:
            part.signature = event.signature
        part.deltas += 1
        self.handle_reasoning_delta(part, event.content)

    def _on_tool_call(self, event: ToolCall) -> None:
        owner, _ = self._locate(event.run_id, event.parent_id)
        self._close_part(owner)
        call = self.calls.get(event.id)
        if call is None:
            self._start_call(event.id, event.name, event.input, owner)
            return
        previous = call.input
        call.input = event.input
        call.name = event.name
        self.handle_tool_call_input(call, previous)

    def _on_tool_result(self, event: ToolResult) -> None:
        owner, _ = self._locate(event.run_id, event.parent_id)
        self._close_part(owner)
        call = self.calls.get(event.id)
        if call is None:
            relay = self.relay_of_call.get(event.id)
            name, tool_input = (relay.tool, relay.params) if relay is not None else (event.name, None)
            call = self._start_call(event.id, name, tool_input, owner)
        if call.answered:
            return  # a repeated result: the first one stands, as in the thread's message list
        call.answered = True
        call.result_seq = self.seq
        self.handle_tool_result(call, event)

    def _on_tool_progress(self, event: ToolProgress) -> None:
        owner, _ = self._locate(event.run_id, event.parent_id)
        self._close_part(owner)
        self.handle_tool_progress(self.calls.get(event.tool_call_id), event)

    def _on_relay(self, event: Relay) -> None:
        owner, _ = self._locate(event.run_id, event.parent_id)
        self._close_part(owner)
        self.relays.setdefault(event.id, event)
        self.relay_of_call.setdefault(event.tool_call_id, event)
        call = self.calls.get(event.tool_call_id)
        if call is None:
            call = self._start_call(event.tool_call_id, event.tool, event.params, owner)
        elif call.relay is None:
            call.relay = event
        self.handle_relay(event, call)

    def _on_relay_resolved(self, event: RelayResolved) -> None:
        relay = self.relays.get(event.relay_id)
        call = self.calls.get(relay.tool_call_id) if relay is not None else None
        if call is not None and call.owner.open:
            owner: Run = call.owner
            self._turn_for(owner).owners.setdefault(id(owner), owner)
        else:
            owner, _ = self._locate(event.run_id, event.parent_id)
        if call is not None and call.decision is None:
            call.decision = event
        self.handle_relay_resolved(event, call)

    def _on_user(self, event: User) -> None:
        owner, _ = self._locate(event.run_id, event.parent_id)
        self._close_part(owner)
        turn = self.turn
        if turn is not None:
            for run in turn.owners.values():
                self._close_part(run)
                self._new_turn_message(run)
        self.handle_user(event, self._message_id(f"{event.run_id}:user", owner), owner)

    def _on_usage(self, event: Usage) -> None:
        owner, step = self._locate(event.run_id, event.parent_id)
        self._enter_step(owner, step)
        self._close_part(owner)
        self.usage.add(event)
        if self.turn is not None:
            self.turn.usage.add(event)
        self.handle_usage(event, owner)

    def _on_error(self, event: Error) -> None:
        owner, _ = self._locate(event.run_id, event.parent_id)
        self._close_part(owner)
        owner.last_error = event.message
        self.handle_error(event, owner)

    def _on_command(self, event: Edit | Regenerate | SwitchBranch | Summarize) -> None:
        self._locate(getattr(event, "run_id", None), None)
        self.handle_command(event)

    def _on_repl(self, event: ReplInput | ReplProgress | ReplOutput) -> None:
        owner, _ = self._locate(event.run_id, event.parent_id)
        self._close_part(owner)
        if isinstance(event, ReplInput):
            self.repl_owner.setdefault(event.id, owner)
            owner.turn_has_calls = True  # code run ends the model's turn, as tool calls do
        self.handle_repl(event, owner)

    def _on_connected(self, event: Connected) -> None:
        return  # a transport marker: nothing to show


_DISPATCH: Final[dict[type[Any], Any]] = {
    HarnessStart: UIEventStream._on_harness_start,
    HarnessEnd: UIEventStream._on_harness_end,
    Text: UIEventStream._on_text,
    Reasoning: UIEventStream._on_reasoning,
    ToolCall: UIEventStream._on_tool_call,
    ToolResult: UIEventStream._on_tool_result,
    ToolProgress: UIEventStream._on_tool_progress,
    Relay: UIEventStream._on_relay,
    RelayResolved: UIEventStream._on_relay_resolved,
    User: UIEventStream._on_user,
    Usage: UIEventStream._on_usage,
    Error: UIEventStream._on_error,
    Edit: UIEventStream._on_command,
    Regenerate: UIEventStream._on_command,
    SwitchBranch: UIEventStream._on_command,
    Summarize: UIEventStream._on_command,
    ReplInput: UIEventStream._on_repl,
    ReplProgress: UIEventStream._on_repl,
    ReplOutput: UIEventStream._on_repl,
    Connected: UIEventStream._on_connected,
}
"""Event type -> the base handler (subclasses override hooks, never this table)."""
