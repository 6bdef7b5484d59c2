"""A Python port of the AG-UI reference client's message reducer (``@ag-ui/client`` 1.0.0,
``defaultApplyEvents``), for tests: applies AG-UI events (wire dicts) to a message list the way a
client does, so a test can compare what a client would hold with a ``MESSAGES_SNAPSHOT``. The node
test runs the real reducer; this port lets the Python tests check every chunk without node."""

from __future__ import annotations

import copy
from typing import Any


class MessageList:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def _find(self, message_id: str) -> dict[str, Any] | None:
        for message in self.messages:
            if message["id"] == message_id:
                return message
        return None

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        messages = self.messages
        sub = event.get("subagentRunId")
        if kind == "TEXT_MESSAGE_START":
            if self._find(event["messageId"]) is None:
                message = {"id": event["messageId"], "role": event.get("role", "assistant"), "content": ""}
                if sub is not None:
                    message["subagentRunId"] = sub
                messages.append(message)
        elif kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"):
            message = self._find(event["messageId"])
            assert message is not None, f"{kind} for unknown message {event['messageId']!r}"
            message["content"] = (message.get("content") or "") + event["delta"]
        elif kind in ("TEXT_MESSAGE_END", "REASONING_MESSAGE_END"):
            message = self._find(event["messageId"])
            assert message is not None, f"{kind} for unknown message {event['messageId']!r}"
            if "metadata" in event:
                message["metadata"] = {**message.get("metadata", {}), **copy.deepcopy(event["metadata"])}
        elif kind == "REASONING_MESSAGE_START":
            if self._find(event["messageId"]) is None:
                message = {"id": event["messageId"], "role": "reasoning", "content": ""}
                if sub is not None:
                    message["subagentRunId"] = sub
                messages.append(message)
        elif kind == "REASONING_ENCRYPTED_VALUE":
            if event["subtype"] == "message":
                message = self._find(event["entityId"])
                if message is not None:
                    message["encryptedValue"] = event["encryptedValue"]
        elif kind == "TOOL_CALL_START":
            self._tool_call_start(event, sub)
        elif kind == "TOOL_CALL_ARGS":
            for message in messages:
                for call in message.get("toolCalls") or ():
                    if call["id"] == event["toolCallId"]:
                        call["function"]["arguments"] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            message = {
                "id": event["messageId"],
                "toolCallId": event["toolCallId"],
                "role": event.get("role") or "tool",
                "content": event["content"],
            }
            if sub is not None:
                message["subagentRunId"] = sub
            holder = next(
                (
                    index
                    for index, found in enumerate(messages)
                    if found["role"] == "assistant"
                    and any(call["id"] == event["toolCallId"] for call in found.get("toolCalls") or ())
                ),
                -1,
            )
            if holder == -1:
                messages.append(message)
            else:
                at = holder + 1
                while at < len(messages) and messages[at]["role"] == "tool":
                    at += 1
                messages.insert(at, message)
        elif kind == "MESSAGES_SNAPSHOT":
            self._snapshot(event["messages"])

    def _tool_call_start(self, event: dict[str, Any], sub: str | None) -> None:
        call_id, parent_id = event["toolCallId"], event.get("parentMessageId")
        for message in self.messages:
            for call in message.get("toolCalls") or ():
                if call["id"] == call_id:
                    call["function"]["name"] = event["toolCallName"]
                    return
        known = {message["id"] for message in self.messages}
        holder = None
        if parent_id is not None:
            found = self._find(parent_id)
            if found is not None and found["role"] == "assistant":
                holder = found
            else:
                holder = {
                    "id": call_id if found is not None else parent_id,
                    "role": "assistant",
                    "toolCalls": [],
                }
                self.messages.append(holder)
        else:
            holder = {"id": call_id, "role": "assistant", "toolCalls": []}
            self.messages.append(holder)
        if holder["id"] not in known and sub is not None and "subagentRunId" not in holder:
            holder["subagentRunId"] = sub
        holder.setdefault("toolCalls", []).append(
            {"id": call_id, "type": "function", "function": {"name": event["toolCallName"], "arguments": ""}}
        )

    def _snapshot(self, snapshot: list[dict[str, Any]]) -> None:
        by_id = {message["id"]: copy.deepcopy(message) for message in snapshot}
        has_activity = any(message["role"] == "activity" for message in snapshot)
        has_reasoning = any(message["role"] == "reasoning" for message in snapshot)

        def kept(message: dict[str, Any]) -> bool:
            return (message["role"] == "activity" and not has_activity) or (
                message["role"] == "reasoning" and not has_reasoning
            )

        merged = [
            by_id.get(message["id"], message)
            for message in self.messages
            if message["id"] in by_id or kept(message)
        ]
        present = {message["id"] for message in merged}
        merged.extend(copy.deepcopy(message) for message in snapshot if message["id"] not in present)
        self.messages = merged


class SequenceError(AssertionError):
    """An AG-UI stream broke a sequencing rule of the reference client's ``verifyEvents``."""


class Verifier:
    """A port of the reference client's ``verifyEvents`` rules (``@ag-ui/client`` 1.0.0): a run
    opens first, nothing but a new run follows its end, every message, reasoning span, tool call,
    step and subagent is opened before it continues and closed before the run finishes, and
    continuations keep their opener's ``subagentRunId``."""

    def __init__(self) -> None:
        self.first = True
        self.active = False
        self.finished = False
        self.errored = False
        self._reset()

    def _reset(self) -> None:
        self.messages: dict[str, str | None] = {}
        self.tool_calls: dict[str, str | None] = {}
        self.reasoning: dict[str, str | None] = {}
        self.spans: dict[str, str | None] = {}
        self.steps: set[tuple[str | None, str]] = set()
        self.subagents: set[str] = set()
        self.subagents_done: set[str] = set()
        self.owners: dict[str, str | None] = {}

    def _fail(self, message: str, event: dict[str, Any]) -> None:
        raise SequenceError(f"{message}: {event}")

    def _same_owner(self, event: dict[str, Any], key: str) -> None:
        sub = event.get("subagentRunId")
        if key in self.owners and sub is not None and self.owners[key] != sub:
            self._fail("subagentRunId differs from the opener's", event)

    def check(self, event: dict[str, Any]) -> None:
        """Raise `SequenceError` if ``event`` may not come next."""
        self._lifecycle(event)
        self._items(event)

    def _lifecycle(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if "subagentRunId" in event and event["subagentRunId"] is None:
            self._fail("subagentRunId must be omitted, not null", event)
        if self.errored and kind != "RUN_STARTED":
            self._fail("event after RUN_ERROR", event)
        if self.finished and kind not in ("RUN_STARTED", "RUN_ERROR"):
            self._fail("event after RUN_FINISHED", event)
        if self.first:
            self.first = False
            if kind not in ("RUN_STARTED", "RUN_ERROR"):
                self._fail("the first event must be RUN_STARTED", event)
        elif kind == "RUN_STARTED" and self.active and not self.finished and not self.errored:
            self._fail("RUN_STARTED while a run is active", event)
        if kind == "RUN_STARTED":
            self._reset()
            self.active, self.finished, self.errored = True, False, False
        elif kind == "RUN_ERROR":
            self.errored = True
        elif kind == "RUN_FINISHED":
            for name, open_items in (
                ("steps", self.steps),
                ("text messages", self.messages),
                ("reasoning messages", self.reasoning),
                ("reasoning spans", self.spans),
                ("tool calls", self.tool_calls),
                ("subagents", self.subagents),
            ):
                if open_items:
                    self._fail(f"RUN_FINISHED while {name} are active: {sorted(map(str, open_items))}", event)
            self.finished = True

    def _items(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        sub = event.get("subagentRunId")
        if kind == "TEXT_MESSAGE_START":
            if event["messageId"] in self.messages:
                self._fail("text message already in progress", event)
            self._same_owner(event, event["messageId"])
            self.owners.setdefault(event["messageId"], sub)
            self.messages[event["messageId"]] = sub
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"):
            if event["messageId"] not in self.messages:
                self._fail("no active text message", event)
            self._same_owner(event, event["messageId"])
            if kind == "TEXT_MESSAGE_END":
                del self.messages[event["messageId"]]
        elif kind == "TOOL_CALL_START":
            if event["toolCallId"] in self.tool_calls:
                self._fail("tool call already in progress", event)
            self.tool_calls[event["toolCallId"]] = sub
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_END"):
            if event["toolCallId"] not in self.tool_calls:
                self._fail("no active tool call", event)
            if kind == "TOOL_CALL_END":
                del self.tool_calls[event["toolCallId"]]
        elif kind in ("REASONING_START", "REASONING_MESSAGE_START"):
            table = self.spans if kind == "REASONING_START" else self.reasoning
            if event["messageId"] in table:
                self._fail("reasoning already in progress", event)
            table[event["messageId"]] = sub
        elif kind in ("REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END", "REASONING_END"):
            table = self.spans if kind == "REASONING_END" else self.reasoning
            if event["messageId"] not in table:
                self._fail("no active reasoning", event)
            if kind != "REASONING_MESSAGE_CONTENT":
                del table[event["messageId"]]
        elif kind == "STEP_STARTED":
            key = (sub, event["stepName"])
            if key in self.steps:
                self._fail("step already active", event)
            self.steps.add(key)
        elif kind == "STEP_FINISHED":
            key = (sub, event["stepName"])
            if key not in self.steps:
                self._fail("step not started", event)
            self.steps.remove(key)
        elif kind == "SUBAGENT_STARTED":
            run = event["subagentRunId"]
            if run in self.subagents or run in self.subagents_done:
                self._fail("subagent already started in this run", event)
            parent = event.get("parentSubagentRunId")
            if parent is not None and parent not in self.subagents and parent not in self.subagents_done:
                self._fail("parentSubagentRunId not started in this run", event)
            self.subagents.add(run)
        elif kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            run = event["subagentRunId"]
            if run not in self.subagents:
                self._fail("no active subagent", event)
            self.subagents.remove(run)
            self.subagents_done.add(run)
