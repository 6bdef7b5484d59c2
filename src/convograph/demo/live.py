"""The live demo: the bundled scenarios run by the real agent harness into a running server.

One **round** is one scenario in one conversation (`start_round`):

1. a scripted model server for it (`convograph.testing.ModelServer`, the scenario's script, paced
   at ~45 tokens/s divided by the demo's speed), or a real model (``--model``);
2. its agents (`Agent`, or `ReplHarness` for the recursive-LM one) on the provider for the
   scenario's API (Anthropic Messages, OpenAI Chat Completions or Responses, all through the
   official SDKs), with the scenario's tools (`convograph.demo.tools`);
3. the serving agent attached to the conversation (`convograph.harness.serving`, through a
   `RemotePort`), then the task posted as a message (``POST .../runs``): the serving agent answers
   it, and every message, edit or regenerate made in the viewer afterwards.

Permission requests go to the scenario's reviewer (a teammate who answers after a while) or wait
for a person in the viewer; in rounds started by the rolling schedule an undecided request is
refused after `RELAY_TIMEOUT` seconds, so old rounds do not wait forever.

`LiveDemo` runs the first round of every scenario, then (unless told not to) a **rolling
schedule**: a new round every ``interval`` seconds, scenarios in turn, so a newcomer always finds
something streaming; at most ``keep`` rolling conversations are kept (the oldest is deleted, its
agent detached). It also feeds the graph explorer: the hook envelopes of each conversation's
events (`convograph.demo.intelligence`), posted once each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from convograph.demo.intelligence import hook_envelopes
from convograph.demo.scenario import Scenario, load_scenario
from convograph.demo.tickets import tickets
from convograph.demo.tools import build_tools
from convograph.events import Relay, encode_event, parse_event
from convograph.harness import Agent, Budget, Decision, ReplHarness, RunHandle, serve
from convograph.harness.providers import make_provider
from convograph.harness.remote import RemotePort
from convograph.testing import ModelServer

__all__ = ["LiveDemo", "ModelChoice", "Round"]

RELAY_TIMEOUT: Final = 90.0
"""Seconds (at speed 1) a rolling round's permission request waits for a person."""
CONTEXTS: Final[dict[str, Callable[[], Any]]] = {"tickets": tickets}


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """A real model for every agent (``--model``), instead of the scripted model server."""

    spec: str
    base_url: str | None = None


@dataclass(slots=True)
class Round:
    """One scenario running in one conversation."""

    conversation_id: str
    scenario: Scenario
    port: RemotePort
    model_server: ModelServer | None
    provider: Any
    serving: asyncio.Task[None] | None = None
    answered: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    """The result of the round's first run (its task's answer)."""
    rolling: bool = False

    async def close(self) -> None:
        """Detach the agent (its running run ends ``cancelled``) and stop the round's servers."""
        if self.serving is not None:
            self.serving.cancel()
            await asyncio.gather(self.serving, return_exceptions=True)
        await self.port.aclose()
        with contextlib.suppress(Exception):
            await self.provider.aclose()
        if self.model_server is not None:
            await self.model_server.aclose()


class LiveDemo:
    """Rounds of the bundled scenarios into the server at ``base_url`` (module docstring)."""

    def __init__(
        self,
        base_url: str,
        *,
        speed: float = 1.0,
        model: ModelChoice | None = None,
        api_key: str | None = None,
        on_relay: Callable[[str, str], None] | None = None,
        on_round: Callable[[Round], None] | None = None,
        interval: float = 30.0,
        keep: int = 6,
    ) -> None:
        self.base_url = base_url
        self.speed = speed
        self.model = model
        self.api_key = api_key
        self.on_relay = on_relay
        self.on_round = on_round
        self.interval = interval
        self.keep = keep
        self.rounds: list[Round] = []
        self._closing: list[Round] = []
        """Rounds dropped from `rounds` whose close has not finished (a cancelled drop)."""
        self.server = _ServerCalls(base_url, api_key)
        self._posted: dict[str, set[str]] = {}
        self._fed: dict[str, int] = {}
        self._numbers: dict[str, int] = {}

    # -- one round -------------------------------------------------------------------------------

    async def start_round(
        self, name: str, conversation_id: str | None = None, *, rolling: bool = False
    ) -> Round:
        """Start scenario ``name`` in a conversation (default: the scenario's, or a fresh
        ``<id>-<n>`` when that one exists already) and post its task."""
        scenario = load_scenario(name)
        model_server, provider, model_name = await self._provider(scenario)
        try:
            cid = conversation_id or await self._fresh_id(scenario.conversation_id)
        except BaseException:  # cancelled or failed before the round exists: stop what it started
            with contextlib.suppress(Exception):
                await provider.aclose()
            if model_server is not None:
                await model_server.aclose()
            raise
        port = RemotePort.connect(self.base_url, cid, api_key=self.api_key, give_up_after=15.0)
        round_ = Round(cid, scenario, port, model_server, provider, rolling=rolling)
        timeout = RELAY_TIMEOUT / self.speed if rolling and not math.isinf(self.speed) else None

        def make(key: str, agent_name: str) -> Any:
            return self._harness(round_, key, agent_name, model_name, relay_timeout=timeout)

        def on_run(turn: Any, handle: RunHandle[Any]) -> None:
            handle.add_done_callback(lambda: _settle(round_.answered, handle))

        round_.serving = asyncio.create_task(
            serve(make(scenario.serve, scenario.serve), port, on_run=on_run), name=f"convograph-demo-{cid}"
        )
        self.rounds.append(round_)
        await port.client.start_run(cid, scenario.task)
        if self.on_round is not None:
            self.on_round(round_)
        return round_

    async def _provider(self, scenario: Scenario) -> tuple[ModelServer | None, Any, str | None]:
        """(the scripted model server or None, the provider, the real model's name or None)."""
        if self.model is not None:
            provider, model_name = make_provider(self.model.spec, base_url=self.model.base_url)
            return None, provider, model_name
        server = ModelServer(scenario.model, speed=self.speed)
        await server.start()
        base = server.anthropic_base_url if scenario.api == "anthropic" else server.openai_base_url
        provider, _ = make_provider(f"{scenario.api}:scripted", api_key="demo-key", base_url=base)
        return server, provider, None

    async def _fresh_id(self, base: str) -> str:
        """``base``, else ``base-2``, ``base-3``, ...: the first that has no events, never one this
        demo used before (a deleted round's id is not reused: a viewer may still show it)."""
        n = self._numbers.get(base, 1)
        while True:
            cid = base if n == 1 else f"{base}-{n}"
            n += 1
            if await self.server.conversation(cid) is None:
                self._numbers[base] = n
                return cid

    def _harness(
        self, round_: Round, key: str, name: str, model_name: str | None, *, relay_timeout: float | None
    ) -> Agent | ReplHarness:
        spec = round_.scenario.agents[key]
        model = model_name or spec.model
        options = spec.options if model_name is None else {}  # scripted options may not suit a real API
        if spec.harness == "repl":
            context = CONTEXTS[spec.context]() if spec.context else None
            return ReplHarness(
                round_.provider, model, sub_model=model_name or spec.sub_model, system=spec.system,
                max_iterations=spec.max_iterations, name=name, context=context, options=options,
            )  # fmt: skip

        def make(agent_key: str, agent_name: str) -> Any:
            return self._harness(round_, agent_key, agent_name, model_name, relay_timeout=relay_timeout)

        tools = build_tools(round_.scenario, key, speed=self.speed, make_agent=make)
        return Agent(
            round_.provider, model=model, tools=tools, system=spec.system, name=name, options=options,
            budget=Budget(max_turns=spec.max_turns), max_tokens=spec.max_tokens,
            ask=self._reviewer(round_), relay_timeout=relay_timeout,
        )  # fmt: skip

    def _reviewer(self, round_: Round) -> Callable[[Relay], Any]:
        """The scenario's reviewer: its decision after a while, or a person (None: wait)."""

        async def ask(relay: Relay) -> Decision | None:
            decision = round_.scenario.reviewer.get(relay.tool)
            if decision is None:
                if self.on_relay is not None:
                    self.on_relay(round_.conversation_id, relay.id)
                return None
            await asyncio.sleep(0 if math.isinf(self.speed) else decision.after / self.speed)
            return Decision(decision.approved, decision.reason)

        return ask

    # -- the schedule ------------------------------------------------------------------------------

    async def first_round(self, names: tuple[str, ...], *, stagger: float = 1.5) -> list[Round]:
        """Start every scenario in ``names`` (``stagger`` seconds apart at speed 1)."""
        rounds = []
        for n, name in enumerate(names):
            if n and not math.isinf(self.speed):
                await asyncio.sleep(stagger / self.speed)
            rounds.append(await self.start_round(name))
        return rounds

    async def rolling(self, names: tuple[str, ...]) -> None:
        """A new round every ``interval`` seconds, scenarios in turn, keeping at most ``keep``
        rolling conversations (the oldest deleted). Runs until cancelled; stops (saying why by
        raising) when the server refuses to delete a conversation (a key without admin scope)."""
        turn = 0
        while True:
            await asyncio.sleep(self.interval / self.speed)
            await self.start_round(names[turn % len(names)], rolling=True)
            turn += 1
            rolling = [r for r in self.rounds if r.rolling]
            while len(rolling) > self.keep:
                await self.drop(rolling.pop(0))

    async def drop(self, round_: Round) -> None:
        """Detach a round's agent and delete its conversation. A drop cancelled half-way (the
        rolling schedule stopped) leaves the round in `_closing`, which `close` finishes."""
        self.rounds.remove(round_)
        self._closing.append(round_)
        await round_.close()
        self._closing.remove(round_)
        await self.server.delete(round_.conversation_id)
        self._posted.pop(round_.conversation_id, None)
        self._fed.pop(round_.conversation_id, None)

    async def feed_explorer(self, *, every: float = 3.0) -> None:
        """Post the hook envelopes of each round's events to ``POST /events`` (workspace ``demo``),
        each once, every ``every`` seconds until cancelled."""
        while True:
            for round_ in list(self.rounds):
                with contextlib.suppress(httpx.HTTPError, RuntimeError):
                    await self._feed(round_.conversation_id)
            await asyncio.sleep(every)

    async def _feed(self, cid: str) -> None:
        info = await self.server.conversation(cid)
        if info is None or info.get("lastSeq") == self._fed.get(cid):
            return
        events = [json.loads(encode_event(e)) for e in await self.server.replay(cid)]
        posted = self._posted.setdefault(cid, set())
        for envelope in hook_envelopes(events, prefix=cid):
            if envelope["idempotency_key"] not in posted:
                await self.server.post_envelope(envelope)
                posted.add(envelope["idempotency_key"])
        self._fed[cid] = info.get("lastSeq", 0)

    async def close(self) -> None:
        for round_ in [*self._closing, *self.rounds]:
            await round_.close()
        await self.server.aclose()


def _settle(answered: asyncio.Future[Any], handle: RunHandle[Any]) -> None:
    if answered.done():
        return
    with contextlib.suppress(BaseException):
        result = handle.result()
        if result.reason != "claimed":
            answered.set_result(result)


class _ServerCalls:
    """The few plain HTTP calls the demo makes besides its ports."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30.0)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def conversation(self, cid: str) -> dict[str, Any] | None:
        """The conversation's summary, None when it has no events."""
        response = await self._http.get(f"/v1/conversations/{cid}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    async def replay(self, cid: str) -> list[Any]:
        response = await self._http.get(f"/v1/conversations/{cid}/events")
        response.raise_for_status()
        return [parse_event(line) for line in response.content.splitlines() if line.strip()]

    async def delete(self, cid: str) -> None:
        response = await self._http.delete(f"/v1/conversations/{cid}")
        if response.status_code not in (200, 204, 404):
            raise RuntimeError(f"deleting {cid} answered {response.status_code}: {response.text[:300]}")

    async def post_envelope(self, envelope: dict[str, Any]) -> None:
        response = await self._http.post("/events", json=envelope)
        if response.status_code != 202:
            raise RuntimeError(f"POST /events answered {response.status_code}: {response.text[:300]}")
