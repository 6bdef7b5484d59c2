"""A conversation recorded by the real agent harness (`convograph.harness.Agent`) through the
official OpenAI SDK against the scripted model server: what a `convograph run` user's graph is
built from. Each model call is a provider run of its own (``parentId`` = the agent's run).

Three runs of the agent ``lead`` on one conversation:

1. "Plan a trip to Paris": the first request is refused with a 429 (the provider's retry is an
   ``error`` on a run of its own); the answer asks for four calls at once: ``weather`` twice, the
   subagent ``scout`` (which calls ``weather`` and answers) and ``book``, which asks permission
   (a relay) and is denied; then ``fail`` (its tool raises), then the answer.
2. "Thanks": one answer.
3. "Wait for the parcel": ``wait`` never returns; the run is cancelled.
"""

from __future__ import annotations

import asyncio

from convograph.events import Relay, RelayResolved, ToolCall
from convograph.harness import Agent, LogPort, ToolContext, tool
from convograph.harness.providers import OpenAIChatProvider
from convograph.harness.retry import RetryPolicy
from convograph.store import EventLog, StoredEvent
from convograph.testing import Match, ModelServer, Reply, Say, ScriptUsage, Think, ToolUse

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


@tool
async def wait() -> str:
    """Waits for a parcel that never comes."""
    await asyncio.Event().wait()
    return "unreachable"


def _script() -> list[Reply]:
    lead, scout = Match(model="lead-model"), Match(model="scout-model")
    return [
        Reply(match=lead, status=429, retry_after=0.01, error="slow down"),
        Reply(
            match=lead,
            content=[
                Think(text="Weather first, the scout for details, then book."),
                ToolUse(name="weather", arguments={"city": "Paris"}),
                ToolUse(name="weather", arguments={"city": "Rome"}),
                ToolUse(name="ask_scout", arguments={"city": "Paris"}),
                ToolUse(name="book", arguments={"city": "Paris"}),
            ],
            usage=ScriptUsage(input_tokens=300, output_tokens=60, cache_read_tokens=128),
        ),
        Reply(
            match=scout,
            content=[ToolUse(name="weather", arguments={"city": "Paris"})],
            usage=ScriptUsage(input_tokens=50, output_tokens=10),
        ),
        Reply(
            match=scout,
            content=[Say(text="Paris: sunny.")],
            usage=ScriptUsage(input_tokens=70, output_tokens=8),
        ),
        Reply(
            match=lead,
            content=[ToolUse(name="fail", arguments={"reason": "disk full"})],
            usage=ScriptUsage(input_tokens=500, output_tokens=20, cache_read_tokens=256),
        ),
        Reply(
            match=lead,
            content=[Say(text="Sunny; not booked.")],
            usage=ScriptUsage(input_tokens=600, output_tokens=12),
        ),
        Reply(
            match=lead,
            content=[Say(text="You are welcome.")],
            usage=ScriptUsage(input_tokens=650, output_tokens=5),
        ),
        Reply(
            match=lead,
            content=[ToolUse(name="wait", arguments={})],
            usage=ScriptUsage(input_tokens=700, output_tokens=7),
        ),
    ]


async def _until[E](log: EventLog, cid: str, kind: type[E], count: int = 1) -> list[E]:
    for _ in range(2000):
        found = [item.event for item in await log.read(cid) if isinstance(item.event, kind)]
        if len(found) >= count:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind.__name__} in {cid}")


async def record_harness_conversation(log: EventLog, cid: str) -> list[StoredEvent]:
    """Run the three runs (module docstring) into ``log`` as conversation ``cid``; returns what
    the log stored."""
    async with ModelServer(_script()) as server:
        provider = OpenAIChatProvider(base_url=server.openai_base_url, api_key="sk-test", retry=FAST)
        scout = Agent(provider, model="scout-model", tools=[weather], name="scout")

        @tool
        async def ask_scout(city: str, ctx: ToolContext) -> str:
            """Send the scout."""
            return (await ctx.spawn(scout, f"Scout {city}")).text

        lead = Agent(provider, model="lead-model", tools=[weather, ask_scout, book, fail, wait], name="lead")
        async with LogPort(log, cid) as port:
            run = lead.start(port, "Plan a trip to Paris")
            (relay,) = await _until(log, cid, Relay)
            await port.emit(
                [
                    RelayResolved(
                        relay_id=relay.id,
                        approved=False,
                        reason="not today",
                        event_id=f"relay-decision:{relay.id}",
                    )
                ]
            )
            first = await asyncio.wait_for(run.wait(), 30)
            assert first.reason == "final", first
            second = await asyncio.wait_for(lead.run(port, "Thanks"), 30)
            assert second.reason == "final", second
            run = lead.start(port, "Wait for the parcel")
            calls = len(await _until(log, cid, ToolCall))
            await _until(log, cid, ToolCall, calls + 1)
            run.cancel()
            third = await asyncio.wait_for(run.wait(), 30)
            assert third.reason == "cancelled", third
        await provider.aclose()
    return list(await log.read(cid))
