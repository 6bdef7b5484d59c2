"""AG-UI out: a conversation's stored events as AG-UI 1.0 events (``ag-ui-protocol`` 1.0.0 models).

`AGUIEventStream` is the `UIEventStream` subclass behind
``GET /v1/conversations/{cid}/stream?protocol=ag-ui``. Mapping (``threadId`` is the conversation id):

| convograph | AG-UI |
|---|---|
| top-level ``harness_start`` .. last ``harness_end`` of its turn | ``RUN_STARTED`` (``runId`` = run id, ``protocolVersion``) + ``STATE_SNAPSHOT`` .. ``MESSAGES_SNAPSHOT`` + ``RUN_FINISHED`` (``usage``; ``outcome`` cancelled) or ``RUN_ERROR`` (error reasons) |
| events outside every open harness run (user, decisions, commands, late events) | a run of their own (``runId`` = their run id, ``seq-<n>`` without one), closed by the next event that belongs elsewhere |
| subagent ``harness_start`` / ``harness_end`` | ``SUBAGENT_STARTED`` (``parentToolCallId``, ``parentMessageId``, ``parentSubagentRunId``; a spawner that is no tool call, e.g. a REPL turn, in ``metadata.convograph.parentId``) / ``SUBAGENT_FINISHED`` or ``SUBAGENT_ERROR``; everything inside carries ``subagentRunId`` |
| a provider run (no ``harness_start``, ``parentId`` = a harness run) | ``STEP_STARTED`` / ``STEP_FINISHED`` (``stepName`` = its run id) |
| ``text`` deltas | ``TEXT_MESSAGE_START`` / ``CONTENT`` / ``END``; ``messageId`` = the turn's assistant message (its first text block's id), so later text of the turn reopens it |
| ``reasoning`` deltas | ``REASONING_START`` + ``REASONING_MESSAGE_START`` / ``CONTENT`` / ``END`` (signature in ``metadata.convograph``) + ``REASONING_ENCRYPTED_VALUE`` (redacted data) + ``REASONING_END`` |
| ``tool_call`` (or the relay / result that names a call first) | ``TOOL_CALL_START`` (``parentMessageId``) + ``TOOL_CALL_ARGS`` (compact JSON) + ``TOOL_CALL_END`` |
| ``tool_result`` | ``TOOL_CALL_RESULT`` (``messageId`` ``<call id>:result``, content: strings as is, else compact JSON) |
| ``user`` | ``TEXT_MESSAGE_*`` with ``role: user`` (``messageId`` ``<runId>:user``); content with parts: ``MESSAGES_SNAPSHOT`` |
| ``relay`` / ``relay_resolved`` | ``CUSTOM`` ``convograph.relay`` / ``convograph.relay_resolved`` + ``STATE_DELTA`` on ``/pendingRelays`` |
| ``usage`` | ``STATE_DELTA`` on ``/usage`` (conversation totals); the run's sum in ``RUN_FINISHED.usage`` |
| ``error``, ``tool_progress``, ``repl_*`` | ``CUSTOM`` ``convograph.<type>`` (value: the wire event) |
| ``edit`` / ``regenerate`` / ``switch_branch`` / ``summarize`` | ``MESSAGES_SNAPSHOT`` of the new active path + ``CUSTOM`` ``convograph.<type>`` |

State (``STATE_SNAPSHOT``): ``{"pendingRelays": {relayId: relay}, "usage": {inputTokens, ...}}``.

``MESSAGES_SNAPSHOT``: the one ending a run is the list every client that followed the stream holds
(`convograph.integrations.ag_ui_messages`: the stream folds its own events as the reference client
does), so it changes nothing for them and resynchronises anyone else. The one sent for a command
(or a user message with parts) is built from the thread projection of the hypergraph's active
path (reduced from the events then: commands are rare), with the same ids and message rules.
Cost: O(1) per event, O(messages) per run end, O(conversation) per command.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from convograph.events import (
    ContentPart,
    DocumentPart,
    Edit,
    Error,
    Event,
    HarnessEnd,
    ImagePart,
    Regenerate,
    Relay,
    RelayResolved,
    ReplInput,
    ReplOutput,
    ReplProgress,
    Summarize,
    SwitchBranch,
    TextPart,
    ToolProgress,
    ToolResult,
    Usage,
    User,
    event_to_wire,
)
from convograph.hypergraph import create_conversation
from convograph.hypergraph.commands import reduce_with_commands_events
from convograph.integrations.ag_ui_messages import ClientMessages, copy_messages
from convograph.integrations.ui_stream import (
    Chunk,
    Part,
    Run,
    ToolCallState,
    Turn,
    UIEventStream,
    outcome_of,
)
from convograph.projections import ConversationProjector
from convograph.projections.history import COMPACT_JSON, SUMMARY_RUN_PREFIX, model_text
from convograph.projections.view import (
    ReasoningContent,
    TextContent,
    ToolCallContent,
    UserContent,
    ViewNode,
)

__all__ = ["PROTOCOL_VERSION", "AGUIEventStream", "tool_arguments", "user_content"]

PROTOCOL_VERSION: Final = "1.0"
"""The AG-UI version these events follow (``ag-ui-protocol`` / ``@ag-ui/core`` 1.0.0)."""

CUSTOM_PREFIX: Final = "convograph."

log = logging.getLogger("convograph.integrations")


def tool_arguments(tool_input: Any) -> str:
    """A call's input as the arguments text (as the OpenAI projection writes it)."""
    return "{}" if tool_input is None else COMPACT_JSON.encode(tool_input)


def user_content(content: str | list[ContentPart]) -> str | list[dict[str, Any]]:
    """A user message's content as AG-UI content (text, or text / image / document parts)."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, (ImagePart, DocumentPart)):
            kind = "image" if isinstance(part, ImagePart) else "document"
            source = {"type": "data", "value": part.data, "mimeType": part.media_type}
            parts.append({"type": kind, "source": source})
    return parts


def _pointer(key: str) -> str:
    return "/pendingRelays/" + key.replace("~", "~0").replace("/", "~1")


def _attributed(chunk: Chunk, run: Run) -> Chunk:
    sub = run.subagent_run_id
    if sub is not None:
        chunk["subagentRunId"] = sub
    return chunk


class AGUIEventStream(UIEventStream):
    """Stored events -> AG-UI events (see the module docstring for the mapping)."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(conversation_id)
        self.events: list[Event] = []
        """Every event fed: the hypergraph is reduced from them when a command needs its thread."""
        self.client = ClientMessages()
        """What a client that followed the stream holds (every emitted event is folded in)."""
        self.pending_relays: dict[str, Any] = {}
        self.created: dict[str, int] = {}
        """Message id -> rank of its creation on a client (first start, call or snapshot)."""

    def chunks(self, event: Event, seq: int = 0) -> list[Chunk]:
        self.events.append(event)
        return super().chunks(event, seq)

    def emit(self, chunk: Chunk) -> None:
        super().emit(chunk)
        self.client.apply(chunk)

    # -- turns -------------------------------------------------------------------------------------

    def before_turn(self, turn: Turn) -> None:
        self.emit(
            {
                "type": "RUN_STARTED",
                "threadId": self.conversation_id,
                "runId": turn.turn_id,
                "protocolVersion": PROTOCOL_VERSION,
            }
        )
        self.emit({"type": "STATE_SNAPSHOT", "snapshot": self._state()})

    def after_turn(self, turn: Turn, end: HarnessEnd | None) -> None:
        if not turn.loose:
            self._run_end_snapshot()
        outcome = outcome_of(end) if not turn.loose else "success"
        if outcome == "error":
            run = self.runs.get(end.run_id) if end is not None else None
            message = (
                run.last_error if run is not None else None
            ) or f"run ended: {end.reason if end else ''}"
            self.emit(
                {"type": "RUN_ERROR", "message": message, "code": (end.reason if end else None) or "error"}
            )
            return
        finished: Chunk = {"type": "RUN_FINISHED", "threadId": self.conversation_id, "runId": turn.turn_id}
        if outcome == "cancelled":
            finished["outcome"] = {"type": "cancelled"}
        usage = turn.usage
        if usage.calls:
            finished["usage"] = [
                {
                    "inputTokens": usage.input_tokens,
                    "outputTokens": usage.output_tokens,
                    "totalTokens": usage.input_tokens + usage.output_tokens,
                }
            ]
        self.emit(finished)

    def _state(self) -> dict[str, Any]:
        return {"pendingRelays": dict(self.pending_relays), "usage": self.usage.to_wire()}

    def _messages_snapshot(self) -> None:
        """The active path's messages, built from the thread (after a command, or user parts)."""
        try:
            conversation = reduce_with_commands_events(create_conversation(), self.events)
            views = ConversationProjector(conversation).views
        except Exception:
            log.warning(
                "%s: the thread projection failed; no MESSAGES_SNAPSHOT", self.conversation_id, exc_info=True
            )
            return
        messages = _SnapshotBuilder(self).build(views)
        for message in messages:
            if message["role"] != "tool":
                self._created(message["id"])
        self.emit({"type": "MESSAGES_SNAPSHOT", "messages": messages})

    def _run_end_snapshot(self) -> None:
        """What every client that followed the stream holds: O(messages) to copy."""
        super().emit({"type": "MESSAGES_SNAPSHOT", "messages": copy_messages(self.client.messages)})

    def _created(self, message_id: str) -> None:
        """Note where a client creates ``message_id`` (snapshots keep that order)."""
        self.created.setdefault(message_id, len(self.created))

    # -- runs --------------------------------------------------------------------------------------

    def handle_subagent_start(self, run: Run) -> None:
        chunk: Chunk = {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": run.invocation or run.run_id,
            "name": run.agent_id or "agent",
        }
        parent = run.parent
        turn = self.turn
        if (
            parent is not None
            and parent.kind == "subagent"
            and turn is not None
            and parent.invocation in turn.subagents
            and parent.invocation is not None
        ):
            chunk["parentSubagentRunId"] = parent.invocation
        if run.parent_tool_call is not None:
            chunk["parentToolCallId"] = run.parent_tool_call
            call = self.calls.get(run.parent_tool_call)
            message = call.parent_message or call.call_id if call is not None else None
            if message is not None:
                chunk["parentMessageId"] = message
        elif run.spawned_by is not None:  # not a tool call (a REPL turn's llm_query): keep who spawned it
            chunk["metadata"] = {"convograph": {"parentId": run.spawned_by}}
        self.emit(chunk)

    def handle_subagent_end(self, run: Run, end: HarnessEnd | None) -> None:
        turn = self.turn
        invocation = run.invocation or run.run_id
        if turn is None or invocation not in turn.subagents:
            return
        outcome = outcome_of(end)
        if outcome == "success" or outcome == "length":
            self.emit({"type": "SUBAGENT_FINISHED", "subagentRunId": invocation})
            return
        if end is None:
            message, code = "interrupted: its parent run ended first", "interrupted"
        else:
            message, code = run.last_error or f"subagent ended: {end.reason}", end.reason or outcome
        self.emit({"type": "SUBAGENT_ERROR", "subagentRunId": invocation, "message": message, "code": code})

    def handle_step_start(self, run: Run, step: str) -> None:
        self.emit(_attributed({"type": "STEP_STARTED", "stepName": step}, run))

    def handle_step_end(self, run: Run, step: str) -> None:
        self.emit(_attributed({"type": "STEP_FINISHED", "stepName": step}, run))

    # -- parts -------------------------------------------------------------------------------------

    def handle_text_start(self, part: Part) -> None:
        self._created(part.message_id)
        chunk = {"type": "TEXT_MESSAGE_START", "messageId": part.message_id, "role": "assistant"}
        self.emit(_attributed(chunk, part.owner))

    def handle_text_delta(self, part: Part, delta: str) -> None:
        chunk = {"type": "TEXT_MESSAGE_CONTENT", "messageId": part.message_id, "delta": delta}
        self.emit(_attributed(chunk, part.owner))

    def handle_text_end(self, part: Part) -> None:
        self.emit(_attributed({"type": "TEXT_MESSAGE_END", "messageId": part.message_id}, part.owner))

    def handle_reasoning_start(self, part: Part) -> None:
        self._created(part.message_id)
        self.emit(_attributed({"type": "REASONING_START", "messageId": part.message_id}, part.owner))
        chunk = {"type": "REASONING_MESSAGE_START", "messageId": part.message_id, "role": "reasoning"}
        self.emit(_attributed(chunk, part.owner))

    def handle_reasoning_delta(self, part: Part, delta: str) -> None:
        chunk = {"type": "REASONING_MESSAGE_CONTENT", "messageId": part.message_id, "delta": delta}
        self.emit(_attributed(chunk, part.owner))

    def handle_reasoning_end(self, part: Part) -> None:
        end: Chunk = {"type": "REASONING_MESSAGE_END", "messageId": part.message_id}
        if part.signature is not None:
            end["metadata"] = {"convograph": {"signature": part.signature}}
        self.emit(_attributed(end, part.owner))
        if part.redacted_data is not None:
            value = {
                "type": "REASONING_ENCRYPTED_VALUE",
                "subtype": "message",
                "entityId": part.message_id,
                "encryptedValue": part.redacted_data,
            }
            self.emit(_attributed(value, part.owner))
        self.emit(_attributed({"type": "REASONING_END", "messageId": part.message_id}, part.owner))

    # -- tools -------------------------------------------------------------------------------------

    def handle_tool_call(self, call: ToolCallState) -> None:
        self._created(call.parent_message or call.call_id)
        start: Chunk = {"type": "TOOL_CALL_START", "toolCallId": call.call_id, "toolCallName": call.name}
        if call.parent_message is not None:
            start["parentMessageId"] = call.parent_message
        self.emit(_attributed(start, call.owner))
        args = {"type": "TOOL_CALL_ARGS", "toolCallId": call.call_id, "delta": tool_arguments(call.input)}
        self.emit(_attributed(args, call.owner))
        self.emit(_attributed({"type": "TOOL_CALL_END", "toolCallId": call.call_id}, call.owner))

    def handle_tool_result(self, call: ToolCallState, result: ToolResult) -> None:
        chunk = {
            "type": "TOOL_CALL_RESULT",
            "messageId": f"{call.call_id}:result",
            "toolCallId": call.call_id,
            "content": model_text(result.output, COMPACT_JSON.encode),
            "role": "tool",
        }
        self.emit(_attributed(chunk, call.owner))

    def handle_tool_progress(self, call: ToolCallState | None, progress: ToolProgress) -> None:
        self._custom(progress, call.owner if call is not None else None)

    def handle_relay(self, relay: Relay, call: ToolCallState) -> None:
        self._custom(relay, call.owner)
        wire = event_to_wire(relay)
        self.pending_relays[relay.id] = wire
        self.emit(
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": _pointer(relay.id), "value": wire}]}
        )

    def handle_relay_resolved(self, decision: RelayResolved, call: ToolCallState | None) -> None:
        self._custom(decision, call.owner if call is not None else None)
        if self.pending_relays.pop(decision.relay_id, None) is not None:
            self.emit(
                {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": _pointer(decision.relay_id)}]}
            )

    # -- the rest ----------------------------------------------------------------------------------

    def handle_user(self, user: User, message_id: str, owner: Run) -> None:
        if not isinstance(user.content, str):
            self._messages_snapshot()
            return
        self._created(message_id)
        self.emit({"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "user"})
        if user.content:
            self.emit({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": user.content})
        self.emit({"type": "TEXT_MESSAGE_END", "messageId": message_id})

    def handle_usage(self, usage: Usage, owner: Run) -> None:
        self.emit(
            {
                "type": "STATE_DELTA",
                "delta": [{"op": "replace", "path": "/usage", "value": self.usage.to_wire()}],
            }
        )

    def handle_error(self, error: Error, owner: Run) -> None:
        self._custom(error, owner)

    def handle_command(self, command: Edit | Regenerate | SwitchBranch | Summarize) -> None:
        self._messages_snapshot()
        self._custom(command, None)

    def handle_repl(self, event: ReplInput | ReplProgress | ReplOutput, owner: Run) -> None:
        self._custom(event, owner)

    def _custom(self, event: Event, owner: Run | None) -> None:
        chunk: Chunk = {"type": "CUSTOM", "name": CUSTOM_PREFIX + event.type, "value": event_to_wire(event)}
        self.emit(_attributed(chunk, owner) if owner is not None else chunk)


class _SnapshotBuilder:
    """AG-UI messages of thread views, in the order a client that applied the stream holds them:
    assistant messages per turn, text joining its turn's message; every message where the stream
    created it (`AGUIEventStream.created`; one the stream never sent goes last, as a client
    appends a snapshot's new messages); each result right after the assistant message holding its
    call, after the results that arrived before it. O(views log views)."""

    def __init__(self, stream: AGUIEventStream) -> None:
        self.stream = stream
        self.messages: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.results: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        """Holder message id -> (arrival seq, tool message) of the results of its calls."""
        self.turns: dict[Any, list[Any]] = {}
        """Per run (as the stream keeps it): [the turn's assistant message id, it has calls]."""

    def _owner(self, run_id: str) -> Run | None:
        stream = self.stream
        return stream.runs.get(run_id) or stream.step_owner.get(run_id) or stream.loose_runs.get(run_id)

    def _id(self, view_id: str, owner: Run | None, *, new: bool = False) -> str:
        """The message id the stream used for ``view_id`` (see `UIEventStream._message_id`)."""
        sub = owner.subagent_run_id if owner is not None else None
        return self.stream.aliases.get((view_id, sub, new), view_id)

    def _push(self, message: dict[str, Any], owner: Run | None) -> dict[str, Any]:
        sub = owner.subagent_run_id if owner is not None else None
        if sub is not None:
            message["subagentRunId"] = sub
        self.messages.append(message)
        self.by_id[message["id"]] = message
        return message

    def build(self, views: list[ViewNode]) -> list[dict[str, Any]]:
        self._add(views)
        created = self.stream.created
        late = len(created)
        order = sorted(
            range(len(self.messages)),
            key=lambda index: (created.get(self.messages[index]["id"], late), index),
        )
        out: list[dict[str, Any]] = []
        for index in order:
            message = self.messages[index]
            out.append(message)
            answers = self.results.get(message["id"])
            if answers:
                out.extend(answer for _, answer in sorted(answers, key=lambda item: item[0]))
        return out

    def _add(self, views: list[ViewNode]) -> None:
        turns = self.turns
        for view in views:
            content = view.content
            owner = self._owner(view.run_id)
            if isinstance(content, UserContent):
                message_id = self._id(view.id, None)
                self._push({"id": message_id, "role": "user", "content": user_content(content.content)}, None)
                turns.clear()  # a user message ends every assistant turn
                continue
            key: Any = owner if owner is not None else view.run_id
            state = turns.setdefault(key, [None, False])  # [turn message id, turn has calls]
            if isinstance(content, ReasoningContent):
                if state[1]:
                    state[:] = [None, False]
                message: dict[str, Any] = {
                    "id": self._id(view.id, owner),
                    "role": "reasoning",
                    "content": content.text,
                }
                if content.redacted_data is not None:
                    message["encryptedValue"] = content.redacted_data
                if content.signature is not None:
                    message["metadata"] = {"convograph": {"signature": content.signature}}
                self._push(message, owner)
            elif isinstance(content, TextContent):
                if view.run_id.startswith(SUMMARY_RUN_PREFIX):
                    self._push({"id": view.id, "role": "assistant", "content": content.text}, None)
                    turns.clear()
                    continue
                if state[0] is None or state[1]:
                    state[:] = [self._id(view.id, owner), False]
                found = self.by_id.get(state[0])
                if found is None:
                    self._push({"id": state[0], "role": "assistant", "content": content.text}, owner)
                else:
                    found["content"] = found.get("content", "") + content.text
            elif isinstance(content, ToolCallContent):
                self._call(view, content, owner, state)

    def _call(self, view: ViewNode, content: ToolCallContent, owner: Run | None, state: list[Any]) -> None:
        holder = self.by_id.get(state[0]) if state[0] is not None else None
        if holder is None or holder.get("role") != "assistant":
            state[0] = self._id(view.id, owner, new=True)
            holder = self._push({"id": state[0], "role": "assistant"}, owner)
        state[1] = True
        call = {
            "id": view.id,
            "type": "function",
            "function": {"name": content.name, "arguments": tool_arguments(content.input)},
        }
        holder.setdefault("toolCalls", []).append(call)
        for branch in view.branches:
            self._add(branch)
        if content.has_output:
            self._result(holder, view.id, content.output, owner)

    def _result(self, holder: dict[str, Any], call_id: str, output: Any, owner: Run | None) -> None:
        message: dict[str, Any] = {
            "id": f"{call_id}:result",
            "role": "tool",
            "content": model_text(output, COMPACT_JSON.encode),
            "toolCallId": call_id,
        }
        sub = owner.subagent_run_id if owner is not None else None
        if sub is not None:
            message["subagentRunId"] = sub
        call = self.stream.calls.get(call_id)
        arrived = call.result_seq if call is not None else 0
        self.results.setdefault(holder["id"], []).append((arrived, message))
