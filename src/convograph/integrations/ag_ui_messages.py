"""The message list an AG-UI client folds from the events `AGUIEventStream` sends.

`ClientMessages.apply` follows the reference client's reducer (``@ag-ui/client`` 1.0.0,
``defaultApplyEvents``) for the events the stream sends, so the stream knows what every client
that followed it holds: that list is the ``MESSAGES_SNAPSHOT`` ending a run, at O(messages) to
copy instead of rebuilding the thread. The node test checks it against the real reducer.

Rules kept: a text or reasoning start creates its message unless the id exists (a reopen appends);
a tool call joins the assistant message ``parentMessageId`` names (one is created under that id, or
the call's own, when there is none); a result becomes a tool message placed right after the
assistant message holding its call and the results already there; a snapshot replaces the list.
O(1) per event, but a result's placement, O(distance from the end).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ClientMessages", "copy_messages"]


def copy_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy that later folding cannot change (messages, their calls and functions)."""
    out = []
    for message in messages:
        copied = dict(message)
        calls = message.get("toolCalls")
        if calls is not None:
            copied["toolCalls"] = [{**call, "function": dict(call["function"])} for call in calls]
        if "metadata" in message:
            copied["metadata"] = dict(message["metadata"])
        out.append(copied)
    return out


class ClientMessages:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.calls: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        """Tool call id -> (the assistant message holding it, the call)."""

    def reset(self, messages: list[dict[str, Any]]) -> None:
        self.messages = copy_messages(messages)
        self.by_id = {message["id"]: message for message in self.messages}
        self.calls = {
            call["id"]: (message, call)
            for message in self.messages
            for call in message.get("toolCalls") or ()
        }

    def _new(self, message: dict[str, Any], sub: str | None) -> dict[str, Any]:
        if sub is not None:
            message["subagentRunId"] = sub
        self.messages.append(message)
        self.by_id.setdefault(message["id"], message)
        return message

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "TEXT_MESSAGE_START" or kind == "REASONING_MESSAGE_START":
            if event["messageId"] not in self.by_id:
                role = "reasoning" if kind == "REASONING_MESSAGE_START" else event.get("role", "assistant")
                self._new({"id": event["messageId"], "role": role, "content": ""}, event.get("subagentRunId"))
        elif kind == "TEXT_MESSAGE_CONTENT" or kind == "REASONING_MESSAGE_CONTENT":
            message = self.by_id[event["messageId"]]
            message["content"] = (message.get("content") or "") + event["delta"]
        elif kind == "REASONING_MESSAGE_END" and "metadata" in event:
            message = self.by_id[event["messageId"]]
            message["metadata"] = {**message.get("metadata", {}), **event["metadata"]}
        elif kind == "REASONING_ENCRYPTED_VALUE":
            found = self.by_id.get(event["entityId"])
            if found is not None and event["subtype"] == "message":
                found["encryptedValue"] = event["encryptedValue"]
        elif kind == "TOOL_CALL_START":
            self._call(event)
        elif kind == "TOOL_CALL_ARGS":
            self.calls[event["toolCallId"]][1]["function"]["arguments"] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            self._result(event)
        elif kind == "MESSAGES_SNAPSHOT":
            self.reset(event["messages"])

    def _call(self, event: dict[str, Any]) -> None:
        call_id = event["toolCallId"]
        if call_id in self.calls:
            return
        parent_id = event.get("parentMessageId")
        holder = self.by_id.get(parent_id) if parent_id is not None else None
        if holder is None or holder["role"] != "assistant":
            holder_id = parent_id if parent_id is not None and holder is None else call_id
            holder = self._new(
                {"id": holder_id, "role": "assistant", "toolCalls": []}, event.get("subagentRunId")
            )
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": event["toolCallName"], "arguments": ""},
        }
        holder.setdefault("toolCalls", []).append(call)
        self.calls[call_id] = (holder, call)

    def _result(self, event: dict[str, Any]) -> None:
        message: dict[str, Any] = {
            "id": event["messageId"],
            "toolCallId": event["toolCallId"],
            "role": event.get("role") or "tool",
            "content": event["content"],
        }
        if event.get("subagentRunId") is not None:
            message["subagentRunId"] = event["subagentRunId"]
        self.by_id.setdefault(message["id"], message)
        found = self.calls.get(event["toolCallId"])
        messages = self.messages
        if found is None:
            messages.append(message)
            return
        at = len(messages) - 1
        while messages[at] is not found[0]:  # from the end: the holder is usually recent
            at -= 1
        at += 1
        while at < len(messages) and messages[at]["role"] == "tool":
            at += 1
        messages.insert(at, message)
