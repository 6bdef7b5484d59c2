"""SDK instrumentation, end to end: the real ``openai`` / ``anthropic`` SDKs, sync and async,
streaming, not streaming and through their stream helpers, against the scripted model server,
recorded into an in-process event log. The recorded events project back to exactly the history
the SDK sent on its last call (modulo the normalisations docs/integrations.md lists)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import openai
import pytest

from convograph.events import (
    Error,
    Event,
    HarnessEnd,
    HarnessStart,
    Reasoning,
    ToolCall,
    ToolResult,
    Usage,
    User,
)
from convograph.harness.ports import ConversationState
from convograph.harness.providers.openai_responses import responses_input
from convograph.instrument import instrument
from convograph.store import MemoryEventLog
from convograph.testing import ModelServer
from tests.support.instrument_apps import ANSWERS, QUESTION, THANKS, WEATHER, run_app, run_app_async, script

APIS = ["chat", "responses", "messages"]
MODES = ["plain", "stream", "helper"]
FORMAT = {"chat": "openai", "responses": "openai", "messages": "anthropic"}


def make_client(api: str, server: ModelServer, *, is_async: bool) -> Any:
    if api == "messages":
        kind = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
        return kind(base_url=server.anthropic_base_url, api_key="test", max_retries=0)
    kind_openai = openai.AsyncOpenAI if is_async else openai.OpenAI
    return kind_openai(base_url=server.openai_base_url, api_key="test", max_retries=0)


# -- the documented normalisations (docs/integrations.md), applied to what the SDK sent and to the
# -- projection alike ------------------------------------------------------------------------------------


def normalise_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """System messages left out; only the fields a history carries; tool arguments as JSON data."""
    out = []
    for message in messages:
        if message["role"] in ("system", "developer"):
            continue
        kept = {k: v for k, v in message.items() if k in ("role", "content", "tool_call_id")}
        if message["role"] == "assistant":
            kept.setdefault("content", None)  # a missing content is a null one
        if message.get("tool_calls"):
            kept["tool_calls"] = [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": json.loads(c["function"]["arguments"]),
                }
                for c in message["tool_calls"]
            ]
        out.append(kept)
    return out


def normalise_responses(items: list[dict[str, Any]] | str) -> list[dict[str, Any]]:
    """A string input is one user message; reasoning items and system messages left out; an
    assistant message as its text; tool arguments as JSON data."""
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "reasoning" or item.get("role") in ("system", "developer"):
            continue
        if kind == "function_call":
            out.append(
                {"call_id": item["call_id"], "name": item["name"], "arguments": json.loads(item["arguments"])}
            )
        elif kind == "function_call_output":
            out.append({"call_id": item["call_id"], "output": item["output"]})
        else:
            content = item["content"]
            if isinstance(content, list):
                content = "".join(part["text"] for part in content)
            out.append({"role": item["role"], "content": content})
    return out


def normalise_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A string content is one text block; fields the history does not carry (``citations``,
    ``cache_control``, ``caller``, nulls) left out."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks = [
            {
                k: v
                for k, v in block.items()
                if v is not None and k not in ("citations", "cache_control", "caller")
            }
            for block in content
        ]
        out.append({"role": message["role"], "content": blocks})
    return out


def sent_history(api: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    if api == "chat":
        return normalise_chat(body["messages"])
    if api == "responses":
        return normalise_responses(body["input"])
    return normalise_messages(body["messages"])


def projected_history(api: str, events: list[Event]) -> list[dict[str, Any]]:
    state = ConversationState()
    for event in events:
        state.apply(event)
    messages = state.messages(FORMAT[api])  # project_messages over the stored conversation
    if api == "chat":
        return normalise_chat(messages)
    if api == "responses":
        return normalise_responses(responses_input(messages))
    return normalise_messages(messages)


def last_answer(api: str) -> dict[str, Any]:
    if api == "messages":
        return {"role": "assistant", "content": [{"type": "text", "text": ANSWERS[2]}]}
    return {"role": "assistant", "content": ANSWERS[2]}


def check_recording(api: str, events: list[Event], server: ModelServer) -> None:
    """What every instrumented conversation must show (module docstring)."""
    assert all(not request.problems for request in server.requests), [r.problems for r in server.requests]
    assert [request.status for request in server.requests] == [200, 200, 200]
    # The conversation projects back to the history the SDK sent last, plus the answer it got.
    assert projected_history(api, events) == [*sent_history(api, server.requests[-1].body), last_answer(api)]
    # Each turn once: the history the app re-sent was not recorded again.
    assert [e.content for e in events if isinstance(e, User)] == [QUESTION, THANKS]
    calls = [e for e in events if isinstance(e, ToolCall)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(c.name, c.input) for c in calls] == [("weather", {"city": "Paris"})]
    assert [(r.id, r.name, r.output) for r in results] == [(calls[0].id, "weather", WEATHER)]
    usage = [(u.input_tokens, u.output_tokens, u.cache_read_tokens) for u in events if isinstance(u, Usage)]
    assert usage == [(120, 30, 64), (180, 12, None), (200, 5, None)]
    ends = [e for e in events if isinstance(e, HarnessEnd)]
    assert [(e.reason, e.total_usage.input_tokens if e.total_usage else None) for e in ends] == [
        ("final", 120),
        ("final", 180),
        ("final", 200),
    ]
    assert len([e for e in events if isinstance(e, HarnessStart)]) == 3
    assert not [e for e in events if isinstance(e, Error)]
    # Every event carries an eventId, so re-posting is idempotent.
    assert all(e.event_id for e in events)
    assert len({e.event_id for e in events}) == len(events)
    if api != "chat":  # Chat Completions has no reasoning in its wire format's history
        thinking = [e for e in events if isinstance(e, Reasoning)]
        assert "".join(e.content for e in thinking).startswith("The user wants the weather")
    if api == "messages":
        assert [e.signature for e in events if isinstance(e, Reasoning) and e.signature] == ["sig-weather-1"]
    # The thread shows the call with its result, everything complete.
    state = ConversationState()
    for event in events:
        state.apply(event)
    views = state.projector.views
    tool_views = [v for v in views if v.content.kind == "tool_call"]
    assert [(v.content.name, v.content.output) for v in tool_views] == [("weather", WEATHER)]
    assert {v.status for v in views} == {"complete"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_a_sync_client_is_recorded_into_a_log(api: str, mode: str) -> None:
    log = MemoryEventLog()
    cid = f"sync-{api}-{mode}"
    with ModelServer(script()) as server:
        client = make_client(api, server, is_async=False)
        with instrument(client, sink=log, conversation_id=cid) as recording:
            run_app(api, client, mode)
            assert recording.flush()
    events = [stored.event for stored in asyncio.run(log.read(cid))]
    check_recording(api, events, server)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
async def test_an_async_client_is_recorded_into_a_log(api: str, mode: str) -> None:
    log = MemoryEventLog()
    cid = f"async-{api}-{mode}"
    async with ModelServer(script()) as server:
        client = make_client(api, server, is_async=True)
        async with instrument(client, sink=log, conversation_id=cid) as recording:
            await run_app_async(api, client, mode)
            assert await recording.aflush()
    events = [stored.event for stored in await log.read(cid)]
    check_recording(api, events, server)
