"""The scripted model server: real HTTP, each API's SSE framing, events valid for the official
SDKs' response types, failures as the APIs send them, request records and checks."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import anthropic
import httpx
import openai
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from convograph.testing import (
    Match,
    ModelServer,
    RedactedThinking,
    Reply,
    Say,
    Script,
    ScriptError,
    ScriptUsage,
    Think,
    ToolUse,
    load_script,
    parse_script,
)

STRICT = pydantic.ConfigDict(extra="forbid")
CHUNK = pydantic.TypeAdapter(ChatCompletionChunk)
RESPONSE_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
MESSAGE_EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)

RICH = Reply(
    content=[
        Think(text="Let me look at both files first.", signature="sig-abc"),
        RedactedThinking(data="opaque-payload"),
        Say(text="I will read them now."),
        ToolUse(name="read_file", arguments={"path": "a.py"}),
        ToolUse(name="read_file", arguments={"path": "b.py"}),
    ],
    usage=ScriptUsage(input_tokens=120, output_tokens=30, cache_read_tokens=64, cache_creation_tokens=8),
)

CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
CHAT_USAGE_BODY = {**CHAT_BODY, "stream_options": {"include_usage": True}}
RESPONSES_BODY = {"model": "m", "input": "hi", "stream": True}
MESSAGES_BODY = {
    "model": "m",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
}


def sse_events(raw: str) -> list[tuple[str | None, str]]:
    """(event name, data) of each SSE event, split on blank lines as the spec says."""
    out = []
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        out.append((name, "\n".join(data)))
    return out


async def post(server: ModelServer, path: str, body: Any, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url) as client:
        return await client.post(path, json=body, headers=headers)


async def test_chat_stream_framing_and_chunk_types() -> None:
    async with ModelServer([RICH]) as server:
        response = await post(server, "/v1/chat/completions", CHAT_USAGE_BODY)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["transfer-encoding"] == "chunked"
    events = sse_events(response.text)
    assert all(name is None for name, _ in events)  # chat sends no `event:` lines
    assert events[-1][1] == "[DONE]"
    chunks = [CHUNK.validate_python(json.loads(data)) for _, data in events[:-1]]
    assert chunks[0].choices[0].delta.role == "assistant"
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content", "") for c in chunks if c.choices
    )
    assert reasoning == "Let me look at both files first."
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert {tc.index for tc in calls} == {0, 1}  # parallel calls, by index
    first = [tc for tc in calls if tc.id is not None]
    assert [tc.function.name for tc in first if tc.function] == ["read_file", "read_file"]
    pieces = [
        tc.function.arguments for tc in calls if tc.index == 0 and tc.function and tc.function.arguments
    ]
    assert len(pieces) > 1
    assert "".join(pieces) == '{"path":"a.py"}'
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens_details is not None
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 64


async def test_chat_stream_without_usage_option_sends_no_usage_chunk() -> None:
    async with ModelServer([Reply(content=[Say(text="hello")])]) as server:
        response = await post(server, "/v1/chat/completions", CHAT_BODY)
    chunks = [json.loads(data) for _, data in sse_events(response.text)[:-1]]
    assert all("usage" not in chunk for chunk in chunks)


async def test_responses_stream_framing_and_event_types() -> None:
    async with ModelServer([RICH]) as server:
        response = await post(server, "/v1/responses", RESPONSES_BODY)
    events = sse_events(response.text)
    parsed = [RESPONSE_EVENT.validate_python(json.loads(data)) for _, data in events]
    assert [name for name, _ in events] == [event.type for event in parsed]
    assert [event.sequence_number for event in parsed] == list(range(len(parsed)))
    kinds = [event.type for event in parsed]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.reasoning_summary_text.delta" in kinds
    assert "response.output_text.delta" in kinds
    assert kinds.count("response.function_call_arguments.done") == 2
    completed = parsed[-1]
    assert completed.type == "response.completed"
    assert completed.response.usage is not None
    assert completed.response.usage.input_tokens_details.cached_tokens == 64


async def test_messages_stream_framing_and_event_types() -> None:
    async with ModelServer([RICH]) as server:
        response = await post(server, "/v1/messages", MESSAGES_BODY)
    events = sse_events(response.text)
    parsed = [MESSAGE_EVENT.validate_python(json.loads(data)) for name, data in events if name != "ping"]
    assert [name for name, _ in events if name != "ping"] == [event.type for event in parsed]
    assert ("ping", '{"type":"ping"}') in events
    starts = [e.content_block.type for e in parsed if e.type == "content_block_start"]
    assert starts == ["thinking", "redacted_thinking", "text", "tool_use", "tool_use"]
    deltas = [e.delta.type for e in parsed if e.type == "content_block_delta" and e.index == 0]
    assert deltas[-1] == "signature_delta"
    assert set(deltas[:-1]) == {"thinking_delta"}
    json_pieces = [e.delta.partial_json for e in parsed if e.type == "content_block_delta" and e.index == 3]
    assert json_pieces[0] == ""
    assert "".join(json_pieces) == '{"path":"a.py"}'
    start, end = parsed[0], parsed[-2]
    assert start.type == "message_start"
    assert start.message.usage.cache_read_input_tokens == 64
    assert start.message.usage.input_tokens == 120 - 64 - 8  # Anthropic counts uncached input apart
    assert end.type == "message_delta"
    assert end.delta.stop_reason == "tool_use"
    assert end.usage.output_tokens == 30
    assert parsed[-1].type == "message_stop"


async def test_non_streaming_answers_validate_as_the_sdk_types() -> None:
    async with ModelServer([RICH, RICH, RICH]) as server:
        chat = await post(server, "/v1/chat/completions", {**CHAT_BODY, "stream": False})
        responses = await post(server, "/v1/responses", {**RESPONSES_BODY, "stream": False})
        messages = await post(server, "/v1/messages", {**MESSAGES_BODY, "stream": False})
    completion = ChatCompletion.model_validate(chat.json())
    assert completion.choices[0].message.tool_calls is not None
    assert len(completion.choices[0].message.tool_calls) == 2
    assert Response.model_validate(responses.json()).output[-1].type == "function_call"
    message = Message.model_validate(messages.json())
    assert [block.type for block in message.content][:3] == ["thinking", "redacted_thinking", "text"]


async def test_error_statuses_carry_each_apis_body_and_retry_after() -> None:
    script = [
        Reply(status=429, retry_after=1.5),
        Reply(status=529),
        Reply(status=500, error="boom"),
    ]
    async with ModelServer(script) as server:
        limited = await post(server, "/v1/chat/completions", CHAT_BODY)
        overloaded = await post(server, "/v1/messages", MESSAGES_BODY)
        failed = await post(server, "/v1/responses", RESPONSES_BODY)
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "2"
    assert limited.headers["retry-after-ms"] == "1500"
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert overloaded.status_code == 529
    assert overloaded.json()["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert failed.status_code == 500
    assert failed.json()["error"]["message"] == "boom"


async def read_all(client: httpx.AsyncClient, path: str, body: Any) -> bytes:
    async with client.stream("POST", path, json=body) as response:
        return b"".join([chunk async for chunk in response.aiter_bytes()])


async def test_a_cut_stream_ends_without_the_terminating_chunk() -> None:
    async with ModelServer([Reply(content=[Say(text="a long answer " * 5)], cut_after=3)]) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await read_all(client, "/v1/chat/completions", CHAT_BODY)
        assert server.requests[0].status == 200


async def test_mid_stream_error_events() -> None:
    script = [Reply(content=[Say(text="hi")], stream_error="overloaded_error") for _ in range(3)]
    async with ModelServer(script) as server:
        chat = sse_events((await post(server, "/v1/chat/completions", CHAT_BODY)).text)
        responses = sse_events((await post(server, "/v1/responses", RESPONSES_BODY)).text)
        messages = sse_events((await post(server, "/v1/messages", MESSAGES_BODY)).text)
    assert json.loads(chat[-1][1])["error"]["type"] == "overloaded_error"  # no [DONE] after it
    assert responses[-1][0] == "error"
    assert json.loads(responses[-1][1])["code"] == "overloaded_error"
    assert messages[-1][0] == "error"
    assert json.loads(messages[-1][1])["error"]["type"] == "overloaded_error"


async def test_api_key_is_enforced_per_api() -> None:
    async with ModelServer([Reply(content=[Say(text="ok")])], api_key="sk-right") as server:
        wrong = await post(server, "/v1/chat/completions", CHAT_BODY, authorization="Bearer sk-wrong")
        wrong_anthropic = await post(server, "/v1/messages", MESSAGES_BODY, **{"x-api-key": "nope"})
        right = await post(server, "/v1/messages", MESSAGES_BODY, **{"x-api-key": "sk-right"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert wrong_anthropic.status_code == 401
    assert wrong_anthropic.json()["error"]["type"] == "authentication_error"
    assert right.status_code == 200
    assert [r.reply_index for r in server.requests] == [None, None, 0]


async def test_requests_are_checked_and_recorded() -> None:
    bad = {"model": "m", "messages": [{"role": "tool", "content": "x"}], "stream": True, "bogus": 1}
    async with ModelServer([Reply(content=[Say(text="ok")])]) as server:
        rejected = await post(server, "/v1/chat/completions", bad)
        accepted = await post(server, "/v1/chat/completions", CHAT_BODY)
    assert rejected.status_code == 400
    message = rejected.json()["error"]["message"]
    assert "unknown key 'bogus'" in message
    assert "missing required key 'tool_call_id'" in message
    first, second = server.requests
    assert first.problems
    assert first.reply_index is None
    assert first.body == bad
    assert second.problems == []
    assert second.status == 200
    assert accepted.status_code == 200
    assert first.received_at <= second.received_at
    assert second.headers["content-type"] == "application/json"


async def test_replies_match_first_unused_in_order_then_default_or_error() -> None:
    script = parse_script(
        {
            "replies": [
                {"match": {"contains": "beta"}, "content": [{"type": "text", "text": "for beta"}]},
                {"content": [{"type": "text", "text": "first"}]},
                {"content": [{"type": "text", "text": "second"}]},
            ]
        }
    )
    async with ModelServer(script) as server:
        texts = []
        for task in ("alpha", "beta", "gamma"):
            body = {**CHAT_BODY, "stream": False, "messages": [{"role": "user", "content": task}]}
            texts.append(
                (await post(server, "/v1/chat/completions", body)).json()["choices"][0]["message"]["content"]
            )
        exhausted = await post(server, "/v1/chat/completions", {**CHAT_BODY, "stream": False})
        assert server.unused == []
        server.default = Reply(content=[Say(text="default")])
        fallback = await post(server, "/v1/chat/completions", {**CHAT_BODY, "stream": False})
    assert texts == ["first", "for beta", "second"]
    assert exhausted.status_code == 400
    assert "no scripted reply left" in exhausted.json()["error"]["message"]
    assert fallback.json()["choices"][0]["message"]["content"] == "default"


def test_runs_in_a_thread_for_synchronous_clients() -> None:
    script = [Reply(content=[Say(text="sync hello")]), Reply(content=[Say(text="sync anthropic")])]
    with ModelServer(script) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="k", max_retries=0)
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        claude = anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="k", max_retries=0)
        message = claude.messages.create(
            model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert answer.choices[0].message.content == "sync hello"
    assert message.content[0].type == "text"
    assert message.content[0].text == "sync anthropic"
    assert [r.api for r in server.requests] == ["chat", "messages"]


async def test_unknown_routes_and_model_listing() -> None:
    async with ModelServer() as server, httpx.AsyncClient(base_url=server.url) as client:
        models = await client.get("/v1/models")
        missing = await client.post("/v1/embeddings", json={})
    assert models.json()["data"][0]["id"] == "scripted-model"
    assert missing.status_code == 404
    assert "no route" in missing.json()["error"]["message"]


async def test_paced_replies_wait_between_events() -> None:
    reply = Reply(content=[Say(text="abcdef", chunks=["ab", "cd", "ef"])], first_delay=0.05, chunk_delay=0.05)
    async with ModelServer([reply]) as server, httpx.AsyncClient(base_url=server.url) as client:
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with client.stream("POST", "/v1/chat/completions", json=CHAT_BODY) as response:
            body = b"".join([chunk async for chunk in response.aiter_raw()])
        elapsed = loop.time() - start
    # The server sleeps before the first event and between the 6 events: at least 0.05 + 5 x 0.05 s.
    assert elapsed >= 0.3
    assert body.endswith(b"data: [DONE]\n\n")


async def _stream_seconds(server: ModelServer) -> float:
    async with httpx.AsyncClient(base_url=server.url) as client:
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with client.stream("POST", "/v1/chat/completions", json=CHAT_BODY) as response:
            await response.aread()
        return loop.time() - start


async def test_a_scripts_pace_applies_to_replies_without_their_own_and_speed_divides_it() -> None:
    """Token-level pacing for demos: the script's pace (``pace``) paces every reply that sets no
    delay of its own; ``speed`` divides every delay (also a reply's own)."""
    said = Say(text="abcdef", chunks=["ab", "cd", "ef"])
    script = parse_script({"replies": [{"content": [{"type": "text", "text": "abcdef", "chunks": ["ab", "cd", "ef"]}]}],
                           "pace": {"chunk_delay": 0.06, "first_delay": 0.06}})  # fmt: skip
    async with ModelServer(script) as paced:
        assert await _stream_seconds(paced) >= 0.06 + 5 * 0.06  # 6 chat events
    async with ModelServer(script, speed=4) as fast:
        assert await _stream_seconds(fast) < 0.36
        assert fast.pace.chunk_delay == 0.06
    own = Reply(content=[said], chunk_delay=0.2)
    async with ModelServer(Script(replies=[own], pace=script.pace), speed=math.inf) as instant:
        assert await _stream_seconds(instant) < 0.2  # a reply's own delay is divided too
    with pytest.raises(ValueError, match="speed must be positive"):
        ModelServer(script, speed=0)
    with pytest.raises(ScriptError, match="pace"):
        parse_script({"replies": [], "pace": {"chunk_delay": -1}})


def test_script_errors_name_the_problem(tmp_path: Any) -> None:
    with pytest.raises(ScriptError, match="unknown field"):
        parse_script([{"content": [{"type": "text", "text": "x"}], "colour": "red"}])
    with pytest.raises(ScriptError, match="status"):
        parse_script([{"status": 99}])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ScriptError, match=r"bad\.json is not JSON"):
        load_script(bad)
    with pytest.raises(ScriptError, match="cannot read"):
        load_script(tmp_path / "missing.json")
    good = tmp_path / "good.json"
    good.write_text(
        json.dumps([{"match": {"api": "messages"}, "content": [{"type": "tool_call", "name": "f"}]}])
    )
    script = load_script(good)
    assert script.replies[0].match == Match(api="messages")
    assert isinstance(script.replies[0].content[0], ToolUse)
