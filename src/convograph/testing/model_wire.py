"""A scripted `Reply` in each API's wire format, framed exactly as the APIs send it.

- **Chat Completions** (``POST /v1/chat/completions``): SSE ``data: {chunk}`` lines, no ``event:``
  names, ``data: [DONE]`` last; a first chunk with ``role``, reasoning as ``delta.reasoning_content``
  (or ``reasoning``, `Reply.reasoning_field`), tool calls by ``index`` (id, type and name in the
  first delta, then argument pieces), a ``finish_reason`` chunk, then the usage chunk
  (``choices: []``) when ``stream_options.include_usage`` is set.
- **Responses** (``POST /v1/responses``): ``event: <type>`` + ``data: {..., "sequence_number": n}``;
  ``response.created`` / ``in_progress``, one output item per part (reasoning summary, message with
  ``output_text``, ``function_call``), each with its added / delta / done events, then
  ``response.completed`` (or ``response.incomplete``) carrying the usage.
- **Messages** (``POST /v1/messages``): ``event: <type>`` + ``data``; ``message_start`` (input usage),
  a ``ping``, per block ``content_block_start`` / ``_delta`` / ``_stop`` (``thinking_delta`` then
  ``signature_delta``; ``redacted_thinking`` arrives whole; ``input_json_delta`` starting with an
  empty piece), ``message_delta`` (stop reason, usage), ``message_stop``.

Shapes follow the official SDKs' response types (``openai.types.chat.ChatCompletionChunk``,
``openai.types.responses.ResponseStreamEvent``, ``anthropic.types.RawMessageStreamEvent``) and
recorded API traffic; the tests validate every rendered event against those types.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from convograph.testing.model_script import (
    Api,
    RedactedThinking,
    Reply,
    Say,
    ScriptUsage,
    Think,
    ToolUse,
    argument_chunks,
    text_chunks,
)

__all__ = ["error_body", "error_headers", "render_response", "render_stream", "reply_usage"]

Json = dict[str, Any]

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_OPENAI_ERROR_TYPES: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
_DEFAULT_MESSAGES = {
    400: "Invalid request.",
    401: "Incorrect API key provided.",
    429: "Rate limit reached. Please try again later.",
    500: "The server had an error while processing your request.",
    503: "The service is temporarily unavailable.",
    529: "Overloaded",
}


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {_dumps(data)}\n\n".encode()


# --- errors ------------------------------------------------------------------------------------------


def error_body(api: Api, status: int, message: str | None = None) -> Json:
    """The error body the API sends with HTTP ``status``."""
    text = message or _DEFAULT_MESSAGES.get(status) or f"HTTP {status}"
    if api == "messages":
        fallback = "api_error" if status >= 500 else "invalid_request_error"
        kind = _ANTHROPIC_ERROR_TYPES.get(status, fallback)
        return {"type": "error", "error": {"type": kind, "message": text}, "request_id": None}
    default: tuple[str, str | None] = (
        ("server_error", None) if status >= 500 else ("invalid_request_error", None)
    )
    kind, code = _OPENAI_ERROR_TYPES.get(status, default)
    return {"error": {"message": text, "type": kind, "param": None, "code": code}}


def error_headers(reply: Reply) -> list[tuple[str, str]]:
    """``Retry-After`` (whole seconds, rounded up) and ``retry-after-ms`` for a scripted wait."""
    if reply.retry_after is None:
        return []
    seconds = max(0, math.ceil(reply.retry_after))
    return [("retry-after", str(seconds)), ("retry-after-ms", str(round(reply.retry_after * 1000)))]


def _stream_error(api: Api, reply: Reply, sequence: int) -> bytes:
    kind = reply.stream_error or "api_error"
    message = reply.error or f"{kind} during streaming"
    if api == "messages":
        return _sse({"type": "error", "error": {"type": kind, "message": message}}, "error")
    if api == "responses":
        data = {"type": "error", "code": kind, "message": message, "param": None, "sequence_number": sequence}
        return _sse(data, "error")
    return _sse({"error": {"message": message, "type": kind, "param": None, "code": kind}})


# --- usage and ids -----------------------------------------------------------------------------------


def reply_usage(reply: Reply, request_text: str) -> ScriptUsage:
    """The reply's usage, or an estimate: 4 characters a token, at least 1 each way."""
    if reply.usage is not None:
        return reply.usage
    produced = 0
    for part in reply.content:
        if isinstance(part, Say | Think):
            produced += len(part.text)
        elif isinstance(part, ToolUse):
            produced += len(part.raw_arguments()) + len(part.name)
    return ScriptUsage(input_tokens=max(1, len(request_text) // 4), output_tokens=max(1, produced // 4))


class _Ids:
    """Deterministic ids for one response; ``tag`` is the request's number on the server."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def call(self, api: Api, index: int, part: ToolUse) -> str:
        if part.id is not None:
            return part.id
        prefix = "toolu" if api == "messages" else "call"
        return f"{prefix}_{self.tag}_{index:02d}"

    def item(self, prefix: str, index: int) -> str:
        return f"{prefix}_{self.tag}_{index:02d}"


def _stop_reason(api: Api, reply: Reply) -> str:
    reason = reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")
    if api == "messages":
        return {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}[reason]
    return reason


# --- Chat Completions --------------------------------------------------------------------------------


def _chat_usage(usage: ScriptUsage) -> Json:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_base(reply: Reply, request: Json, ids: _Ids, kind: str) -> Json:
    return {
        "id": f"chatcmpl-{ids.tag}",
        "object": kind,
        "created": int(time.time()),
        "model": reply.model or request.get("model") or "model",
        "system_fingerprint": "fp_convograph",
    }


def _chat_stream(reply: Reply, request: Json, usage: ScriptUsage, ids: _Ids) -> list[bytes]:
    include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
    base = _chat_base(reply, request, ids, "chat.completion.chunk")
    if include_usage:
        base["usage"] = None

    def chunk(delta: Json, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _sse({**base, "choices": [choice]})

    out = [chunk({"role": "assistant", "content": ""})]
    calls = 0
    for part in reply.content:
        if isinstance(part, Think):
            pieces = text_chunks(part, reply.chunk_size)
            out.extend(chunk({reply.reasoning_field: piece}) for piece in pieces if piece)
        elif isinstance(part, Say):
            out.extend(chunk({"content": piece}) for piece in text_chunks(part, reply.chunk_size) if piece)
        elif isinstance(part, ToolUse):
            head = {"index": calls, "id": ids.call("chat", calls, part), "type": "function"}
            out.append(chunk({"tool_calls": [{**head, "function": {"name": part.name, "arguments": ""}}]}))
            for piece in argument_chunks(part):
                out.append(chunk({"tool_calls": [{"index": calls, "function": {"arguments": piece}}]}))
            calls += 1
    if reply.stream_error is not None:
        return [*out, _stream_error("chat", reply, 0)]
    out.append(chunk({}, _stop_reason("chat", reply)))
    if include_usage:
        out.append(_sse({**base, "choices": [], "usage": _chat_usage(usage)}))
    out.append(b"data: [DONE]\n\n")
    return out


def _chat_response(reply: Reply, request: Json, usage: ScriptUsage, ids: _Ids) -> Json:
    text = "".join(part.text for part in reply.content if isinstance(part, Say))
    thinking = "".join(part.text for part in reply.content if isinstance(part, Think))
    message: Json = {"role": "assistant", "content": text or None, "refusal": None, "annotations": []}
    if thinking:
        message[reply.reasoning_field] = thinking
    calls = [
        {
            "id": ids.call("chat", i, part),
            "type": "function",
            "function": {"name": part.name, "arguments": part.raw_arguments()},
        }
        for i, part in enumerate(reply.tool_calls)
    ]
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": _stop_reason("chat", reply)}
    return {
        **_chat_base(reply, request, ids, "chat.completion"),
        "choices": [choice],
        "usage": _chat_usage(usage),
    }


# --- Responses ---------------------------------------------------------------------------------------


def _responses_usage(usage: ScriptUsage) -> Json:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_creation_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def _response_object(reply: Reply, request: Json, ids: _Ids, status: str) -> Json:
    tools = [tool for tool in request.get("tools") or [] if isinstance(tool, dict)]
    return {
        "id": f"resp_{ids.tag}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": reply.model or request.get("model") or "model",
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "temperature": request.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": [{"strict": False, **tool} for tool in tools],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": None,
        "user": None,
        "metadata": {},
    }


Streamed = list[tuple[str, Json]]
"""The events that stream one output item, without item id, output index and sequence number."""


def _reasoning_item(part: Think, item_id: str, size: int) -> tuple[Json, Streamed]:
    summary = {"type": "summary_text", "text": part.text}
    events: Streamed = [("response.reasoning_summary_part.added", {"part": {**summary, "text": ""}})]
    pieces = text_chunks(part, size)
    events += [("response.reasoning_summary_text.delta", {"delta": piece}) for piece in pieces if piece]
    events.append(("response.reasoning_summary_text.done", {"text": part.text}))
    events.append(("response.reasoning_summary_part.done", {"part": summary}))
    for _, data in events:
        data["summary_index"] = 0
    return {"id": item_id, "type": "reasoning", "summary": [summary]}, events


def _message_item(part: Say, item_id: str, size: int) -> tuple[Json, Streamed]:
    text_part = {"type": "output_text", "annotations": [], "logprobs": [], "text": part.text}
    events: Streamed = [("response.content_part.added", {"part": {**text_part, "text": ""}})]
    pieces = text_chunks(part, size)
    events += [("response.output_text.delta", {"delta": piece, "logprobs": []}) for piece in pieces if piece]
    events.append(("response.output_text.done", {"text": part.text, "logprobs": []}))
    events.append(("response.content_part.done", {"part": text_part}))
    for _, data in events:
        data["content_index"] = 0
    item = {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "content": [text_part],
        "role": "assistant",
    }
    return item, events


def _call_item(part: ToolUse, item_id: str, call_id: str) -> tuple[Json, Streamed]:
    arguments = part.raw_arguments()
    events: Streamed = [
        ("response.function_call_arguments.delta", {"delta": p}) for p in argument_chunks(part)
    ]
    events.append(("response.function_call_arguments.done", {"arguments": arguments}))
    item = {
        "id": item_id,
        "type": "function_call",
        "status": "completed",
        "arguments": arguments,
        "call_id": call_id,
        "name": part.name,
    }
    return item, events


def _response_items(reply: Reply, ids: _Ids) -> list[tuple[Json, Streamed]]:
    items: list[tuple[Json, Streamed]] = []
    calls = 0
    for index, part in enumerate(reply.content):
        if isinstance(part, Think):
            items.append(_reasoning_item(part, ids.item("rs", index), reply.chunk_size))
        elif isinstance(part, Say):
            items.append(_message_item(part, ids.item("msg", index), reply.chunk_size))
        elif isinstance(part, ToolUse):
            items.append(_call_item(part, ids.item("fc", index), ids.call("responses", calls, part)))
            calls += 1
    return items


def _in_progress(item: Json) -> Json:
    if item["type"] == "message":
        return {**item, "status": "in_progress", "content": []}
    if item["type"] == "function_call":
        return {**item, "status": "in_progress", "arguments": ""}
    return {**item, "summary": []}


def _responses_stream(reply: Reply, request: Json, usage: ScriptUsage, ids: _Ids) -> list[bytes]:
    out: list[bytes] = []

    def emit(kind: str, data: Json) -> None:
        out.append(_sse({"type": kind, **data, "sequence_number": len(out)}, kind))

    emit("response.created", {"response": _response_object(reply, request, ids, "in_progress")})
    emit("response.in_progress", {"response": _response_object(reply, request, ids, "in_progress")})
    done: list[Json] = []
    for output_index, (item, events) in enumerate(_response_items(reply, ids)):
        emit("response.output_item.added", {"output_index": output_index, "item": _in_progress(item)})
        for kind, data in events:
            emit(kind, {**data, "item_id": item["id"], "output_index": output_index})
        emit("response.output_item.done", {"output_index": output_index, "item": item})
        done.append(item)
    if reply.stream_error is not None:
        return [*out, _stream_error("responses", reply, len(out))]
    final = _response_object(reply, request, ids, "completed")
    final.update(output=done, usage=_responses_usage(usage), completed_at=int(time.time()))
    if _stop_reason("responses", reply) == "length":
        final.update(
            status="incomplete", incomplete_details={"reason": "max_output_tokens"}, completed_at=None
        )
        emit("response.incomplete", {"response": final})
    else:
        emit("response.completed", {"response": final})
    return out


def _responses_response(reply: Reply, request: Json, usage: ScriptUsage, ids: _Ids) -> Json:
    final = _response_object(reply, request, ids, "completed")
    final.update(output=[item for item, _ in _response_items(reply, ids)], usage=_responses_usage(usage))
    return final


# --- Anthropic Messages ------------------------------------------------------------------------------


def _messages_usage(usage: ScriptUsage) -> Json:
    uncached = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_creation_tokens)
    return {
        "input_tokens": uncached,
        "cache_creation_input_tokens": usage.cache_creation_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "output_tokens": usage.output_tokens,
        "service_tier": "standard",
    }


Block = tuple[Json, Json, list[Json]]
"""A content block as (its final form, its ``content_block_start`` form, its deltas)."""


def _tool_block(part: ToolUse, call_id: str) -> Block:
    head = {"type": "tool_use", "id": call_id, "name": part.name}
    deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *argument_chunks(part)]]
    try:
        final_input = json.loads(part.raw_arguments() or "{}")
    except json.JSONDecodeError:
        final_input = {}
    return {**head, "input": final_input}, {**head, "input": {}}, deltas


def _messages_blocks(reply: Reply, ids: _Ids) -> list[Block]:
    blocks: list[Block] = []
    calls = 0
    for part in reply.content:
        if isinstance(part, Think):
            pieces = text_chunks(part, reply.chunk_size)
            deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces if p]
            if part.signature:
                deltas.append({"type": "signature_delta", "signature": part.signature})
            final = {"type": "thinking", "thinking": part.text, "signature": part.signature or ""}
            blocks.append((final, {"type": "thinking", "thinking": "", "signature": ""}, deltas))
        elif isinstance(part, RedactedThinking):
            block = {"type": "redacted_thinking", "data": part.data}
            blocks.append((block, block, []))
        elif isinstance(part, Say):
            deltas = [{"type": "text_delta", "text": p} for p in text_chunks(part, reply.chunk_size) if p]
            blocks.append(({"type": "text", "text": part.text}, {"type": "text", "text": ""}, deltas))
        elif isinstance(part, ToolUse):
            blocks.append(_tool_block(part, ids.call("messages", calls, part)))
            calls += 1
    return blocks


def _message_object(reply: Reply, request: Json, ids: _Ids, usage: Json, content: list[Json]) -> Json:
    return {
        "id": f"msg_{ids.tag}",
        "type": "message",
        "role": "assistant",
        "model": reply.model or request.get("model") or "model",
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }


def _messages_stream(reply: Reply, request: Json, usage: ScriptUsage, ids: _Ids) -> list[bytes]:
    start_usage = {**_messages_usage(usage), "output_tokens": 1}
    message = _message_object(reply, request, ids, start_usage, [])
    out = [
        _sse({"type": "message_start", "message": message}, "message_start"),
        _sse({"type": "ping"}, "ping"),
    ]
    for index, (_, start, deltas) in enumerate(_messages_blocks(reply, ids)):
        out.append(
            _sse(
                {"type": "content_block_start", "index": index, "content_block": start}, "content_block_start"
            )
        )
        for delta in deltas:
            out.append(
                _sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
            )
        out.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    if reply.stream_error is not None:
        return [*out, _stream_error("messages", reply, 0)]
    delta = {"stop_reason": _stop_reason("messages", reply), "stop_sequence": None}
    end_usage = _messages_usage(usage)
    del end_usage["service_tier"]
    out.append(_sse({"type": "message_delta", "delta": delta, "usage": end_usage}, "message_delta"))
    out.append(_sse({"type": "message_stop"}, "message_stop"))
    return out


def _messages_response(reply: Reply, request: Json, usage: ScriptUsage, ids: _Ids) -> Json:
    content = [final for final, _, _ in _messages_blocks(reply, ids)]
    message = _message_object(reply, request, ids, _messages_usage(usage), content)
    message["stop_reason"] = _stop_reason("messages", reply)
    return message


# --- entry points ------------------------------------------------------------------------------------


def render_stream(api: Api, reply: Reply, request: Json, request_text: str, tag: str) -> list[bytes]:
    """The SSE events (framed bytes, one per event) answering a streaming ``request``."""
    usage = reply_usage(reply, request_text)
    ids = _Ids(tag)
    if api == "chat":
        return _chat_stream(reply, request, usage, ids)
    if api == "responses":
        return _responses_stream(reply, request, usage, ids)
    return _messages_stream(reply, request, usage, ids)


def render_response(api: Api, reply: Reply, request: Json, request_text: str, tag: str) -> Json:
    """The JSON body answering a non-streaming ``request``."""
    usage = reply_usage(reply, request_text)
    ids = _Ids(tag)
    if api == "chat":
        return _chat_response(reply, request, usage, ids)
    if api == "responses":
        return _responses_response(reply, request, usage, ids)
    return _messages_response(reply, request, usage, ids)
