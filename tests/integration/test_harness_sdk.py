"""The agent and REPL harnesses on the real providers, driven through the official SDKs against the
scripted model server (real HTTP, SSE framed as each API sends it): every request the harness sends
must pass the server's checks (the SDK request types and the API's structural rules)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from convograph.events import Error, Event, HarnessEnd, Relay, ToolCall, ToolResult, Usage
from convograph.harness import Agent, Budget, LogPort, ReplHarness, SandboxLimits, ToolContext, tool
from convograph.harness.providers import OpenAIChatProvider
from convograph.harness.retry import RetryPolicy
from convograph.hypergraph import create_conversation, default_active
from convograph.hypergraph.commands import reduce_with_commands_events
from convograph.projections import project_thread
from convograph.testing import Match, MemoryEventLog, ModelServer, Reply, Say, ScriptUsage, Think, ToolUse

FAST = RetryPolicy(base_delay=0.01, max_delay=0.05)


@tool
def weather(city: str) -> str:
    """Current weather of a city."""
    return {"Paris": "sunny, 21 C", "Rome": "cloudy, 18 C"}.get(city, "unknown")


@tool
def fail(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


@tool(policy="ask")
def book(city: str) -> str:
    """Book a trip."""
    return f"booked {city}"


def openai(server: ModelServer) -> OpenAIChatProvider:
    return OpenAIChatProvider(base_url=server.openai_base_url, api_key="sk-test", retry=FAST)


@pytest.fixture
async def port() -> AsyncIterator[LogPort]:
    async with LogPort(MemoryEventLog(), "sdk") as port:
        yield port


async def events_of(port: LogPort) -> list[Event]:
    return [stored.event for stored in await port._log.read(port.conversation_id)]  # type: ignore[attr-defined]


def assert_every_request_valid(server: ModelServer) -> None:
    for recorded in server.requests:
        assert recorded.problems == [], (recorded.index, recorded.problems, json.dumps(recorded.body)[:2000])
        assert recorded.status != 400, recorded.status  # 400 is the answer to an invalid request


async def test_a_tool_loop_through_the_openai_sdk(port: LogPort) -> None:
    script = [
        Reply(
            content=[
                Think(text="Two cities: two calls."),
                Say(text="Checking both."),
                ToolUse(name="weather", arguments={"city": "Paris"}),
                ToolUse(name="weather", arguments={"city": "Rome"}),
                ToolUse(name="weather", arguments='{"city": "Ber'),  # malformed, split mid-JSON
                ToolUse(name="fail", arguments={"reason": "disk full"}),
                ToolUse(name="nowhere", arguments={}),
            ],
            usage=ScriptUsage(input_tokens=300, output_tokens=60, cache_read_tokens=128),
        ),
        Reply(
            content=[Say(text="Paris is sunny, Rome cloudy.")],
            usage=ScriptUsage(input_tokens=500, output_tokens=12),
        ),
    ]
    async with ModelServer(script) as server:
        provider = openai(server)
        result = await Agent(provider, model="gpt-test", tools=[weather, fail], system="Be brief.").run(
            port, "Weather in Paris and Rome?"
        )
        await provider.aclose()
    assert (result.reason, result.text) == ("final", "Paris is sunny, Rome cloudy.")
    assert_every_request_valid(server)
    second = server.requests[1].body["messages"]
    assert [m["role"] for m in second] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "tool",
        "tool",
    ]
    events = await events_of(port)
    outputs = [r.output for r in events if isinstance(r, ToolResult)]
    assert {"context": "sunny, 21 C", "result": "sunny, 21 C"} in outputs
    assert {"error": "RuntimeError: disk full"} in outputs
    assert any("malformed arguments" in str(o) for o in outputs)
    assert any("unknown tool 'nowhere'" in str(o) for o in outputs)
    end = next(e for e in events if isinstance(e, HarnessEnd))
    assert end.total_usage is not None
    assert (end.total_usage.input_tokens, end.total_usage.cache_read_tokens) == (800, 128)
    # The live fold equals a replay of what was stored.
    await port.sync()
    live = port.state.projector.conversation
    replayed = reduce_with_commands_events(create_conversation(), events)
    assert replayed == live
    assert project_thread(replayed, default_active(replayed)) == project_thread(live, default_active(live))


async def test_a_429_is_retried_by_the_provider_and_the_run_goes_on(port: LogPort) -> None:
    script = [Reply(status=429, retry_after=0.05, error="slow down"), Reply(content=[Say(text="Done.")])]
    async with ModelServer(script) as server:
        result = await Agent(openai(server), model="gpt-test").run(port, "hi")
    assert (result.reason, result.text) == ("final", "Done.")
    errors = [e for e in await events_of(port) if isinstance(e, Error)]
    assert len(errors) == 1
    assert "rate limited" in errors[0].message
    assert_every_request_valid(server)


async def test_a_401_ends_the_run_with_an_error_naming_the_variable(port: LogPort) -> None:
    async with ModelServer([Reply(content=[Say(text="never")])], api_key="sk-right") as server:
        result = await Agent(openai(server), model="gpt-test").run(port, "hi")
    assert result.reason == "error"
    assert "OPENAI_API_KEY" in (result.error or "")
    events = await events_of(port)
    assert events[-1].type == "harness_end"


async def test_a_stream_dropped_mid_answer_ends_the_run_with_error(port: LogPort) -> None:
    script = [
        Reply(
            content=[Say(text="The answer is forty", chunks=["The ", "answer ", "is ", "forty"])], cut_after=3
        )
    ]
    async with ModelServer(script) as server:
        result = await Agent(openai(server), model="gpt-test").run(port, "hi")
    assert result.reason == "error"
    assert "dropped" in (result.error or "")
    assert (await events_of(port))[-1].type == "harness_end"


async def test_relays_and_subagents_over_the_sdk(port: LogPort) -> None:
    scout = Agent(OpenAIChatProvider(api_key="x"), model="scout-model", tools=[weather], name="scout")

    @tool
    async def ask_scout(city: str, ctx: ToolContext) -> str:
        """Send the scout."""
        return (await ctx.spawn(scout, f"Scout {city}")).text

    script = [
        Reply(
            match=Match(model="lead-model", contains="Plan a trip"),
            content=[
                ToolUse(name="ask_scout", arguments={"city": "Paris"}),
                ToolUse(name="book", arguments={"city": "Paris"}),
            ],
        ),
        Reply(
            match=Match(model="scout-model"), content=[ToolUse(name="weather", arguments={"city": "Paris"})]
        ),
        Reply(match=Match(model="scout-model"), content=[Say(text="Paris: sunny.")]),
        Reply(match=Match(model="lead-model"), content=[Say(text="Booked Paris; it is sunny.")]),
    ]
    async with ModelServer(script) as server:
        scout.provider = openai(server)
        lead = Agent(openai(server), model="lead-model", tools=[ask_scout, book], name="lead")
        run = lead.start(port, "Plan a trip")
        for _ in range(400):
            relays = [e for e in await events_of(port) if isinstance(e, Relay)]
            if relays:
                break
            await asyncio.sleep(0.025)
        from convograph.events import RelayResolved

        await port.emit(
            [RelayResolved(relay_id=relays[0].id, approved=True, event_id=f"relay-decision:{relays[0].id}")]
        )
        result = await asyncio.wait_for(run.wait(), 30)
    assert (result.reason, result.text) == ("final", "Booked Paris; it is sunny.")
    assert_every_request_valid(server)
    scout_first = next(r for r in server.requests if r.body["model"] == "scout-model")
    assert [m["role"] for m in scout_first.body["messages"]] == ["user"]  # its own history
    events = await events_of(port)
    ends = {e.agent_id: e.total_usage for e in events if isinstance(e, HarnessEnd)}
    assert ends["lead"].input_tokens > ends["scout"].input_tokens > 0  # type: ignore[union-attr]
    assert sum(isinstance(e, Usage) for e in events) == 4


async def test_budgets_over_the_sdk(port: LogPort) -> None:
    looping = Reply(content=[ToolUse(name="weather", arguments={"city": "Paris"})])
    async with ModelServer([looping, looping]) as server:
        result = await Agent(openai(server), model="m", tools=[weather], budget=Budget(max_turns=2)).run(
            port, "loop"
        )
    assert result.reason == "max_turns"
    assert_every_request_valid(server)
    assert "turn limit" in server.requests[1].body["messages"][0]["content"]


async def test_cancel_during_a_slow_stream(port: LogPort) -> None:
    slow = Reply(content=[Say(text="a b c d e f", chunks=["a ", "b ", "c ", "d "])], chunk_delay=2)
    async with ModelServer([slow]) as server:
        run = Agent(openai(server), model="m").start(port, "hi")
        for _ in range(400):
            if any(e.type == "text" for e in await events_of(port)):
                break
            await asyncio.sleep(0.025)
        run.cancel()
        result = await asyncio.wait_for(run.wait(), 20)
    assert result.reason == "cancelled"
    events = await events_of(port)
    assert events[-1].type == "harness_end"
    provider_errors = [e for e in events if isinstance(e, Error) and e.run_id != result.run_id]
    assert provider_errors
    assert provider_errors[-1].message.startswith("cancelled")  # the provider's call ends with an event too


async def test_the_repl_harness_over_the_sdk(port: LogPort) -> None:
    script = [
        Reply(content=[Say(text="```python\nn = len(context.split())\nprint(n)\n```")]),
        Reply(match=Match(model="sub"), content=[Say(text="FOUR")]),
        Reply(content=[Say(text="```python\nFINAL(llm_query(f'say {n} in capitals'))\n```")]),
    ]
    async with ModelServer(script) as server:
        harness = ReplHarness(
            openai(server),
            "root",
            sub_provider=openai(server),
            sub_model="sub",
            limits=SandboxLimits(timeout=10),
        )
        result = await harness.run(port, "count the words", context="one two three four")
    assert (result.reason, result.answer) == ("final", "FOUR")
    assert_every_request_valid(server)
    feedback = server.requests[1 if server.requests[1].body["model"] == "root" else 2].body["messages"][-1]
    assert "4" in feedback["content"]


def test_convograph_run_through_the_openai_sdk(tmp_path: Any) -> None:
    script = [
        Reply(content=[Say(text="Let me add."), ToolUse(name="add", arguments={"a": 2, "b": 40})]),
        Reply(content=[Say(text="The sum is 42.")]),
    ]
    module = tmp_path / "sdk_tools.py"
    module.write_text(
        'from convograph.harness import tool\n\n@tool\ndef add(a: int, b: int) -> int:\n    """Add."""\n    return a + b\n'
    )
    with ModelServer(script) as server:
        env = {
            **os.environ,
            "PYTHONPATH": str(tmp_path),
            "CONVOGRAPH_DATABASE_URL": f"sqlite:///{tmp_path / 'events.db'}",
            "OPENAI_API_KEY": "sk-test",
        }
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "convograph",
                "run",
                "2 + 40?",
                "--model",
                "openai:gpt-test",
                "--base-url",
                server.openai_base_url,
                "--tools",
                "sdk_tools:add",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    assert done.returncode == 0, done.stderr
    assert "The sum is 42." in done.stdout
    assert '⚙ add {"a": 2, "b": 40}' in done.stdout
    assert_every_request_valid(server)


def test_convograph_run_without_a_key_names_the_variable(tmp_path: Any) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["CONVOGRAPH_DATABASE_URL"] = f"sqlite:///{tmp_path / 'events.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "convograph", "run", "hi", "--model", "openai:gpt-test"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 1
    assert "set OPENAI_API_KEY" in done.stdout + done.stderr


# --- the same loop over the other APIs ---------------------------------------------------------------


def provider_for(api: str, server: ModelServer) -> Any:
    from convograph.harness.providers import AnthropicProvider, OpenAIResponsesProvider

    if api == "anthropic":
        return AnthropicProvider(base_url=server.anthropic_base_url, api_key="sk-ant-test", retry=FAST)
    if api == "responses":
        return OpenAIResponsesProvider(base_url=server.openai_base_url, api_key="sk-test", retry=FAST)
    return openai(server)


@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
async def test_a_multi_turn_tool_loop_is_valid_on_every_api(api: str, port: LogPort) -> None:
    script = [
        Reply(
            content=[
                Think(text="Two cities.", signature="sig-1"),
                Say(text="Checking."),
                ToolUse(name="weather", arguments={"city": "Paris"}),
                ToolUse(name="weather", arguments={"city": "Rome"}),
                ToolUse(name="weather", arguments='{"city": '),
            ]
        ),
        Reply(
            content=[
                Think(text="Now book.", signature="sig-2"),
                ToolUse(name="book", arguments={"city": "Rome"}),
            ]
        ),
        Reply(content=[ToolUse(name="fail", arguments={"reason": "x"})]),
        Reply(content=[Say(text="Rome is booked.")]),
    ]

    async def allow(relay: Relay) -> bool:
        return relay.tool == "book"

    async with ModelServer(script) as server:
        provider = provider_for(api, server)
        agent = Agent(provider, model="m", tools=[weather, book, fail], ask=allow, system="Be brief.")
        result = await agent.run(port, "Weather in Paris and Rome, then book the better one.")
        await provider.aclose()
    assert (result.reason, result.text) == ("final", "Rome is booked."), result.error
    assert len(server.requests) == 4
    assert_every_request_valid(server)
    events = await events_of(port)
    calls = [e.id for e in events if isinstance(e, ToolCall)]
    results = [e.id for e in events if isinstance(e, ToolResult)]
    assert sorted(calls) == sorted(results)
    if api == "anthropic":  # signed thinking goes back to the API verbatim
        last = server.requests[-1].body["messages"]
        thinking = [
            b for m in last if m["role"] == "assistant" for b in m["content"] if b["type"] == "thinking"
        ]
        assert [(b["thinking"], b["signature"]) for b in thinking] == [
            ("Two cities.", "sig-1"),
            ("Now book.", "sig-2"),
        ]


async def test_the_repl_harness_over_the_anthropic_sdk(port: LogPort) -> None:
    script = [
        Reply(
            content=[Think(text="Count.", signature="s1"), Say(text="```python\nprint(len(context))\n```")]
        ),
        Reply(content=[Say(text="```python\nFINAL('seven')\n```")]),
    ]
    async with ModelServer(script) as server:
        provider = provider_for("anthropic", server)
        result = await ReplHarness(provider, "claude-test", limits=SandboxLimits(timeout=10)).run(
            port, "How long is the context?", context="abcdefg"
        )
        await provider.aclose()
    assert (result.reason, result.answer) == ("final", "seven")
    assert_every_request_valid(server)
    assert (
        server.requests[1].body["messages"][-1]["content"] == '<repl_output iteration="0">\n7\n</repl_output>'
    )
