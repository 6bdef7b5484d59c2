"""Vercel AI SDK UI message stream out (``ai`` 7.x, ``x-vercel-ai-ui-message-stream: v1``).

`AISDKStream` is the `UIEventStream` subclass behind
``GET /v1/conversations/{cid}/stream?protocol=ai-sdk``: the stream ``useChat`` (its
``resumeStream``) and ``readUIMessageStream`` read. Mapping:

| convograph | UI message chunks |
|---|---|
| top-level ``harness_start`` .. last ``harness_end`` of its turn | one assistant message: ``start`` (``messageId`` = run id, ``messageMetadata.convograph``) .. ``finish`` (``finishReason``: ``stop``, ``error``, ``length``, ``interrupted``) |
| a provider run (steps) | ``start-step`` / ``finish-step`` |
| ``text`` / ``reasoning`` deltas | ``text-start`` / ``-delta`` / ``-end``, ``reasoning-start`` / ``-delta`` / ``-end`` (``id`` = the block id; a signature or redacted data in ``providerMetadata.convograph``) |
| ``tool_call`` (or the relay / result naming a call first) | ``tool-input-start`` + ``tool-input-available`` (``dynamic: true``: the app does not define convograph's tools) |
| ``tool_result`` | ``tool-output-available``; ``tool-output-error`` when the output has an ``error``; ``tool-output-denied`` after a denied relay |
| ``relay`` / ``relay_resolved`` | ``tool-approval-request`` / ``tool-approval-response`` (``approvalId`` = relay id) |
| a subagent run | a ``data-subagent`` part (``id`` = its run id) holding its transcript as a UI message, replaced in place as it grows (at part boundaries, and every 32 deltas) |
| ``usage`` | ``message-metadata`` (``convograph.usage``: the message's totals) |
| ``error`` | a ``data-error`` part |
| ``tool_progress`` / ``repl_*`` | ``data-tool-progress`` (``id`` ``<call id>:progress``) / ``data-repl`` (``id`` = REPL turn) parts, replaced in place |
| ``user``, commands, late events of an earlier message | transient ``data-user`` / ``data-command`` / ``data-event`` chunks (``onData``; not part of any message) |

Events outside every harness run that need a message (a producer without ``harness_start``) get one
of their own (``messageId`` = their run id). The stream never ends by itself (it follows the
conversation); it carries no ``[DONE]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import msgspec

from convograph.events import (
    Edit,
    Error,
    HarnessEnd,
    Regenerate,
    Relay,
    RelayResolved,
    ReplInput,
    ReplOutput,
    ReplProgress,
    Summarize,
    SwitchBranch,
    ToolProgress,
    ToolResult,
    Usage,
    User,
    event_to_wire,
)
from convograph.integrations.ui_stream import (
    Chunk,
    Part,
    Run,
    ToolCallState,
    Turn,
    UIEventStream,
    outcome_of,
)

__all__ = ["HEADERS", "SUBAGENT_FLUSH_DELTAS", "AISDKStream", "UIMessageBuilder"]

HEADERS: Final = {"x-vercel-ai-ui-message-stream": "v1"}
"""The header a UI message stream response carries (besides ``text/event-stream``)."""

SUBAGENT_FLUSH_DELTAS: Final = 32
"""A growing subagent transcript is sent again at most every this many deltas (and at every part
boundary): each send carries the whole transcript, so sending it per delta would cost O(n²)."""

_FINISH: Final = {"success": "stop", "error": "error", "cancelled": "interrupted", "length": "length"}


class UIMessageBuilder:
    """A UI message folded from the chunks this module emits, as ``processUIMessageStream`` folds
    them (the subset used here): the transcript of a subagent. O(1) per chunk."""

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        self.parts: list[dict[str, Any]] = []
        self._open: dict[tuple[str, str], dict[str, Any]] = {}
        self._tools: dict[str, dict[str, Any]] = {}
        self._approvals: dict[str, dict[str, Any]] = {}
        self._data: dict[tuple[str, str], dict[str, Any]] = {}

    def to_wire(self) -> dict[str, Any]:
        """The message as a fresh value (later chunks do not change it). O(size)."""
        parts = msgspec.json.decode(msgspec.json.encode(self.parts))  # a deep copy, in C
        return {"id": self.message_id, "role": "assistant", "parts": parts}

    def apply(self, chunk: Chunk) -> None:
        kind: str = chunk["type"]
        if kind in ("text-start", "reasoning-start"):
            part_type = kind[: -len("-start")]
            part: dict[str, Any] = {"type": part_type, "text": "", "state": "streaming"}
            self._open[(part_type, chunk["id"])] = part
            self.parts.append(part)
        elif kind in ("text-delta", "reasoning-delta"):
            self._open[(kind[: -len("-delta")], chunk["id"])]["text"] += chunk["delta"]
        elif kind in ("text-end", "reasoning-end"):
            part = self._open.pop((kind[: -len("-end")], chunk["id"]))
            part["state"] = "done"
            if "providerMetadata" in chunk:
                part["providerMetadata"] = chunk["providerMetadata"]
        elif kind == "start-step":
            self.parts.append({"type": "step-start"})
        elif kind.startswith("tool-"):
            self._tool(kind, chunk)
        elif kind.startswith("data-"):
            key = (kind, chunk.get("id") or "")
            existing = self._data.get(key) if "id" in chunk else None
            if existing is not None:
                existing["data"] = chunk["data"]
            else:
                part = {"type": kind, "data": chunk["data"]}
                if "id" in chunk:
                    part["id"] = chunk["id"]
                    self._data[key] = part
                self.parts.append(part)

    def _tool(self, kind: str, chunk: Chunk) -> None:
        if kind == "tool-approval-response":  # names its approval, not its call
            found = self._approvals.get(chunk["approvalId"])
            if found is not None:
                approval = {
                    **found.get("approval", {}),
                    "id": chunk["approvalId"],
                    "approved": chunk["approved"],
                }
                if "reason" in chunk:
                    approval["reason"] = chunk["reason"]
                found.update(state="approval-responded", approval=approval)
            return
        call_id = chunk["toolCallId"]
        part = self._tools.get(call_id)
        if part is None:
            part = {"type": "dynamic-tool", "toolName": chunk.get("toolName", ""), "toolCallId": call_id}
            self._tools[call_id] = part
            self.parts.append(part)
        if kind == "tool-input-start":
            part["state"] = "input-streaming"
        elif kind == "tool-input-available":
            part.update(state="input-available", input=chunk["input"])
        elif kind == "tool-approval-request":
            part.update(state="approval-requested", approval={"id": chunk["approvalId"]})
            self._approvals[chunk["approvalId"]] = part
        elif kind == "tool-output-available":
            part.update(state="output-available", output=chunk["output"])
        elif kind == "tool-output-error":
            part.update(state="output-error", errorText=chunk["errorText"])
        elif kind == "tool-output-denied":
            part["state"] = "output-denied"


@dataclass(eq=False, slots=True)
class _Subagent:
    run: Run
    message: UIMessageBuilder
    shown_in: str | None
    """The UI message of the stream its part is shown in (None: a parent subagent's transcript)."""
    status: str = "running"
    pending: int = 0


class AISDKStream(UIEventStream):
    """Stored events -> UI message stream chunks (see the module docstring for the mapping)."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(conversation_id)
        self.message_id: str | None = None
        """The message the stream is in: the last one started (chunks apply to it)."""
        self.message_open = False
        self.call_message: dict[str, str | None] = {}
        self.subagents: dict[Run, _Subagent] = {}
        """By run object: a run id started again is a new run (and must not find the old one)."""
        self.repl: dict[str, dict[str, Any]] = {}
        self.approvals: dict[str, bool | None] = {}
        """Relay id -> the approval shown on its call's part: None while requested, then the
        decision. A tool part's approval only ever moves forward (the AI SDK's part states)."""

    # -- messages ----------------------------------------------------------------------------------

    def _start(self, message_id: str) -> None:
        metadata = {"convograph": {"conversationId": self.conversation_id, "runId": message_id}}
        self.emit({"type": "start", "messageId": message_id, "messageMetadata": metadata})
        self.message_id = message_id
        self.message_open = True

    def _message(self) -> None:
        """Make sure a message is open (a loose turn's content starts one)."""
        if not self.message_open and self.turn is not None:
            self._start(self.turn.turn_id)

    def before_turn(self, turn: Turn) -> None:
        if not turn.loose:
            self._start(turn.turn_id)

    def after_turn(self, turn: Turn, end: HarnessEnd | None) -> None:
        if not self.message_open:
            return
        self.message_open = False
        reason = _FINISH[outcome_of(end)] if not turn.loose else "stop"
        self.emit({"type": "finish", "finishReason": reason})

    def _transient(self, name: str, data: Any, item_id: str | None = None) -> None:
        chunk: Chunk = {"type": f"data-{name}", "data": data, "transient": True}
        if item_id is not None:
            chunk["id"] = item_id
        self.emit(chunk)

    # -- routing: the stream, or a subagent's transcript -------------------------------------------

    def _put(self, owner: Run, chunk: Chunk, *, boundary: bool = True) -> None:
        if owner.kind != "subagent":
            self._message()
            self.emit(chunk)
            return
        sub = self.subagents.get(owner)
        if sub is None:
            return
        sub.message.apply(chunk)
        sub.pending += 1
        if boundary or sub.pending >= SUBAGENT_FLUSH_DELTAS:
            self._flush(sub)

    def _flush(self, sub: _Subagent) -> None:
        """Send the subagent's transcript (inside each enclosing subagent's, up to the stream)."""
        while True:
            sub.pending = 0
            run = sub.run
            data = {
                "runId": run.run_id,
                "agentId": run.agent_id,
                "toolCallId": run.parent_tool_call,
                "parentRunId": run.parent.run_id if run.parent is not None else None,
                "status": sub.status,
                "message": sub.message.to_wire(),
            }
            chunk: Chunk = {"type": "data-subagent", "id": run.run_id, "data": data}
            parent = self.subagents.get(run.parent) if run.parent is not None else None
            if parent is None:
                if sub.shown_in is not None and sub.shown_in == self.message_id:
                    self.emit(chunk)
                else:
                    self._transient("subagent", data, run.run_id)
                return
            parent.message.apply(chunk)
            sub = parent

    def _call_chunk(self, call: ToolCallState, chunk: Chunk) -> None:
        """A chunk about an existing call: to wherever the call is shown."""
        owner = call.owner
        if owner.kind == "subagent":
            self._put(owner, chunk)
        elif self.call_message.get(call.call_id) == self.message_id and self.message_id is not None:
            self.emit(chunk)
        else:
            self._transient("event", chunk)

    # -- runs and steps ----------------------------------------------------------------------------

    def handle_subagent_start(self, run: Run) -> None:
        shown_in = None if run.parent is not None and run.parent.kind == "subagent" else self.message_id
        if shown_in is not None:
            self._message()
            shown_in = self.message_id
        sub = self.subagents[run] = _Subagent(run, UIMessageBuilder(run.run_id), shown_in)
        self._flush(sub)

    def handle_subagent_end(self, run: Run, end: HarnessEnd | None) -> None:
        sub = self.subagents.get(run)
        if sub is None:
            return
        outcome = outcome_of(end)
        sub.status = "interrupted" if end is None else ("error" if outcome == "error" else "done")
        self._flush(sub)

    def handle_step_start(self, run: Run, step: str) -> None:
        self._put(run, {"type": "start-step"})

    def handle_step_end(self, run: Run, step: str) -> None:
        if run.kind != "subagent" and self.message_open:
            self.emit({"type": "finish-step"})

    # -- parts -------------------------------------------------------------------------------------

    def handle_text_start(self, part: Part) -> None:
        self._put(part.owner, {"type": "text-start", "id": part.block_id}, boundary=False)

    def handle_text_delta(self, part: Part, delta: str) -> None:
        self._put(part.owner, {"type": "text-delta", "id": part.block_id, "delta": delta}, boundary=False)

    def handle_text_end(self, part: Part) -> None:
        self._put(part.owner, {"type": "text-end", "id": part.block_id})

    def handle_reasoning_start(self, part: Part) -> None:
        self._put(part.owner, {"type": "reasoning-start", "id": part.block_id}, boundary=False)

    def handle_reasoning_delta(self, part: Part, delta: str) -> None:
        self._put(
            part.owner, {"type": "reasoning-delta", "id": part.block_id, "delta": delta}, boundary=False
        )

    def handle_reasoning_end(self, part: Part) -> None:
        chunk: Chunk = {"type": "reasoning-end", "id": part.block_id}
        metadata: dict[str, Any] = {}
        if part.signature is not None:
            metadata["signature"] = part.signature
        if part.redacted_data is not None:
            metadata["redactedData"] = part.redacted_data
        if metadata:
            chunk["providerMetadata"] = {"convograph": metadata}
        self._put(part.owner, chunk)

    # -- tools -------------------------------------------------------------------------------------

    def handle_tool_call(self, call: ToolCallState) -> None:
        if call.owner.kind != "subagent":
            self._message()
            self.call_message[call.call_id] = self.message_id
        tool_input = {} if call.input is None else call.input
        start = {
            "type": "tool-input-start",
            "toolCallId": call.call_id,
            "toolName": call.name,
            "dynamic": True,
        }
        self._put(call.owner, start, boundary=False)
        available = {
            "type": "tool-input-available",
            "toolCallId": call.call_id,
            "toolName": call.name,
            "input": tool_input,
            "dynamic": True,
        }
        self._put(call.owner, available)

    def handle_tool_call_input(self, call: ToolCallState, previous: Any) -> None:
        shown = call.relay is not None and call.relay.id in self.approvals
        if call.input != previous and not call.answered and not shown:
            tool_input = {} if call.input is None else call.input
            chunk = {
                "type": "tool-input-available",
                "toolCallId": call.call_id,
                "toolName": call.name,
                "input": tool_input,
                "dynamic": True,
            }
            self._call_chunk(call, chunk)

    def handle_tool_result(self, call: ToolCallState, result: ToolResult) -> None:
        output = result.output
        denied = isinstance(output, dict) and output.get("status") == "denied"
        relay = call.relay
        if relay is not None and relay.id in self.approvals and self.approvals[relay.id] is None:
            # Answered while its approval is still pending: the result settles it (an output
            # cannot follow an open approval request).
            self.approvals[relay.id] = not denied
            settle = {"type": "tool-approval-response", "approvalId": relay.id, "approved": not denied}
            self._call_chunk(call, settle)
        chunk: Chunk
        if relay is not None and self.approvals.get(relay.id) is False:
            chunk = {"type": "tool-output-denied", "toolCallId": call.call_id}
        elif isinstance(output, dict) and output.get("error") is not None:
            error = output["error"]
            chunk = {"type": "tool-output-error", "toolCallId": call.call_id, "errorText": str(error)}
        else:
            chunk = {"type": "tool-output-available", "toolCallId": call.call_id, "output": output}
        self._call_chunk(call, chunk)

    def handle_tool_progress(self, call: ToolCallState | None, progress: ToolProgress) -> None:
        data = {"toolCallId": progress.tool_call_id, "name": progress.name, "content": progress.content}
        chunk = {"type": "data-tool-progress", "id": f"{progress.tool_call_id}:progress", "data": data}
        if call is None:
            self._transient("event", chunk)
        else:
            self._call_chunk(call, chunk)

    def handle_relay(self, relay: Relay, call: ToolCallState) -> None:
        chunk = {"type": "tool-approval-request", "approvalId": relay.id, "toolCallId": call.call_id}
        if call.answered or call.relay is not relay or relay.id in self.approvals:
            self._transient("event", chunk)  # too late for the part (or a second relay)
            return
        self.approvals[relay.id] = None
        self._call_chunk(call, chunk)

    def handle_relay_resolved(self, decision: RelayResolved, call: ToolCallState | None) -> None:
        chunk: Chunk = {
            "type": "tool-approval-response",
            "approvalId": decision.relay_id,
            "approved": decision.approved,
        }
        if decision.reason is not None:
            chunk["reason"] = decision.reason
        if call is None or call.answered or self.approvals.get(decision.relay_id, False) is not None:
            self._transient("event", chunk)  # no open request on a part to answer
            return
        self.approvals[decision.relay_id] = decision.approved
        self._call_chunk(call, chunk)

    # -- the rest ----------------------------------------------------------------------------------

    def handle_user(self, user: User, message_id: str, owner: Run) -> None:
        self._transient("user", event_to_wire(user), message_id)

    def handle_usage(self, usage: Usage, owner: Run) -> None:
        if owner.kind == "subagent" or self.turn is None or not self.message_open:
            return
        totals = self.turn.usage.to_wire()
        self.emit({"type": "message-metadata", "messageMetadata": {"convograph": {"usage": totals}}})

    def handle_error(self, error: Error, owner: Run) -> None:
        data = {"message": error.message, "runId": error.run_id}
        self._put(owner, {"type": "data-error", "data": data})

    def handle_command(self, command: Edit | Regenerate | SwitchBranch | Summarize) -> None:
        self._transient("command", event_to_wire(command))

    def handle_repl(self, event: ReplInput | ReplProgress | ReplOutput, owner: Run) -> None:
        cell = self.repl.setdefault(
            event.id, {"id": event.id, "runId": event.run_id, "stdout": "", "stderr": ""}
        )
        if isinstance(event, ReplInput):
            cell.update(code=event.code, iteration=event.iteration)
        elif isinstance(event, ReplProgress):
            cell[event.stream] += event.chunk
        else:
            cell["result"] = event_to_wire(event)
        self._put(owner, {"type": "data-repl", "id": event.id, "data": dict(cell)})
