"""The shared call loop: time limits, retry limits, tool argument parsing and the ProviderCall
protocol (driven through the Chat Completions provider and the real SDK)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from convograph.events import Error, Text, Usage
from convograph.harness import ModelRequest, Provider
from convograph.harness.providers import AnthropicProvider, OpenAIChatProvider, OpenAIResponsesProvider
from convograph.harness.providers.base import tool_input
from convograph.harness.retry import RetryPolicy, Timeouts
from convograph.testing import ModelServer, Reply, Say
from tests.support.providers import errors, run_call

REQUEST = ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}], parent_id="agent-run")
OK = Reply(content=[Say(text="fine")])
MADE: list[OpenAIChatProvider] = []


def provider(server: ModelServer, **kwargs: Any) -> OpenAIChatProvider:
    kwargs.setdefault("retry", RetryPolicy(base_delay=0.01, max_delay=0.05))
    made = OpenAIChatProvider(base_url=server.openai_base_url, api_key="k", **kwargs)
    MADE.append(made)
    return made


@pytest.fixture(autouse=True)
async def _close_clients() -> Any:
    yield
    while MADE:
        await MADE.pop().aclose()


def test_every_provider_is_a_provider() -> None:
    for cls in (OpenAIChatProvider, OpenAIResponsesProvider, AnthropicProvider):
        assert isinstance(cls(api_key="k"), Provider)


def test_tool_input() -> None:
    assert tool_input("") == {}
    assert tool_input('{"a": [1]}') == {"a": [1]}
    broken = tool_input('{"a": ')
    assert broken["__toolParseError"] is True
    assert broken["rawArguments"] == '{"a": '
    assert broken["parseError"].startswith("Expecting value")


async def test_idle_limit_after_the_first_token() -> None:
    stalled = Reply(content=[Say(text="ab", chunks=["a", "b"])], stall_after=2, stall=3)
    async with ModelServer([stalled]) as server:
        events = await run_call(provider(server, timeouts=Timeouts(idle=0.3)), REQUEST)
    assert isinstance(events[0], Text)
    assert isinstance(events[-1], Error)
    assert "silent for 0.3 s (idle time limit)" in events[-1].message
    assert "not retried" in events[-1].message


async def test_a_slow_consumer_is_not_idle_time() -> None:
    """The idle limit measures the server's silence, not the time the caller holds an event."""
    async with ModelServer([Reply(content=[Say(text="abcdef", chunks=["ab", "cd", "ef"])])]) as server:
        events = []
        async for event in provider(server, timeouts=Timeouts(idle=0.2)).invoke(REQUEST):
            events.append(event)
            await asyncio.sleep(0.3)
    assert isinstance(events[-1], Usage)


async def test_total_limit_ends_the_call_without_retry() -> None:
    slow = Reply(content=[Say(text="abc", chunks=["a", "b", "c"])], chunk_delay=0.3)
    async with ModelServer([slow, OK]) as server:
        events = await run_call(provider(server, timeouts=Timeouts(total=0.5)), REQUEST)
    assert "total time limit of 0.5 s" in events[-1].message  # type: ignore[union-attr]
    assert len(server.requests) == 1


async def test_retry_after_beyond_the_limit_gives_up() -> None:
    policy = RetryPolicy(max_retry_after=5)
    async with ModelServer([Reply(status=429, retry_after=3600), OK]) as server:
        (error,) = await run_call(provider(server, retry=policy), REQUEST)
    assert "asks to wait 3600 s" in error.message  # type: ignore[union-attr]
    assert "giving up" in error.message  # type: ignore[union-attr]


async def test_no_retry_when_the_total_limit_leaves_no_time() -> None:
    async with ModelServer([Reply(status=503, retry_after=2), OK]) as server:
        (error,) = await run_call(provider(server, timeouts=Timeouts(total=1)), REQUEST)
    assert "no time left for a retry" in error.message  # type: ignore[union-attr]


async def test_bad_request_is_not_retried() -> None:
    async with ModelServer([Reply(status=400, error="messages: bad"), OK]) as server:
        events = await run_call(provider(server), REQUEST)
    (error,) = errors(events)
    assert "request rejected (HTTP 400: messages: bad)" in error.message
    assert len(server.requests) == 1


async def test_an_unreachable_server_is_retried_then_reported() -> None:
    async with ModelServer() as server:
        url = server.openai_base_url
    chat = OpenAIChatProvider(base_url=url, api_key="k", retry=RetryPolicy(max_attempts=2, base_delay=0.01))
    MADE.append(chat)
    first, second = await run_call(chat, REQUEST)
    assert "failed or was dropped" in first.message  # type: ignore[union-attr]
    assert "retrying" in first.message  # type: ignore[union-attr]
    assert "giving up" in second.message  # type: ignore[union-attr]
    assert first.run_id != second.run_id


async def test_bad_options_end_the_call_with_an_error() -> None:
    request = ModelRequest(
        model="m", messages=[{"role": "user", "content": "hi"}], options={"no_such_option": 1}
    )
    async with ModelServer([OK]) as server:
        (error,) = await run_call(provider(server), request)
    assert isinstance(error, Error)
    assert "no_such_option" in error.message
