"""Play paced demo scripts into a running convograph server through its HTTP API.

Each event is posted to ``POST /v1/conversations/{id}/events`` after its step's delay (divided by
``speed``), stamped with the current time. In fast mode (``speed=None``) there are no delays and
events go in one batch per stretch between relays. At an `AwaitRelay` the player polls
``GET /v1/conversations/{id}/relays`` until the relay is decided (in the viewer, or by any API
client), then plays the approved or denied continuation — or, with ``wait_for_relays=False``,
stops there and reports the relay as pending.

Replaying into a data directory that already holds the conversation is harmless: every event has
a stable ``eventId``, so the server counts repeats as duplicates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from convograph.demo.conversations import AwaitRelay, Script, Step

__all__ = ["DemoError", "PlayResult", "play_all", "play_script", "post_envelopes"]


class DemoError(RuntimeError):
    """The server refused or failed a request; the message names the request and the reply."""


@dataclass(frozen=True, slots=True)
class PlayResult:
    conversation_id: str
    posted: int
    duplicates: int
    pending_relay: str | None
    """The relay the script stopped at (``wait_for_relays=False``), else ``None``."""


def _stamped(event: dict[str, Any]) -> dict[str, Any]:
    return {**event, "timestamp": int(time.time() * 1000)}


async def _post(client: httpx.AsyncClient, cid: str, events: list[dict[str, Any]]) -> tuple[int, int]:
    if not events:
        return 0, 0
    url = f"/v1/conversations/{cid}/events"
    response = await client.post(url, json=events if len(events) > 1 else events[0])
    if response.status_code != 200:
        raise DemoError(f"POST {url} answered {response.status_code}: {response.text[:500]}")
    body = response.json()
    return int(body.get("accepted", 0)), int(body.get("duplicates", 0))


async def _decision(client: httpx.AsyncClient, cid: str, relay_id: str, poll: float) -> bool:
    url = f"/v1/conversations/{cid}/relays"
    while True:
        response = await client.get(url)
        if response.status_code != 200:
            raise DemoError(f"GET {url} answered {response.status_code}: {response.text[:500]}")
        for relay in response.json().get("relays", []):
            if relay.get("id") == relay_id and relay.get("decision") is not None:
                return bool(relay["decision"].get("approved"))
        await asyncio.sleep(poll)


async def play_script(
    client: httpx.AsyncClient,
    script: Script,
    *,
    speed: float | None = 1.0,
    wait_for_relays: bool = True,
    relay_poll: float = 0.5,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
    on_relay: Callable[[str, str], None] | None = None,
) -> PlayResult:
    """Post ``script`` into the server behind ``client`` (its ``base_url``). ``speed=None`` is fast
    mode. Returns once the script (and every decided relay continuation) has been played.
    ``on_relay(conversation_id, relay_id)`` is called when the player starts waiting on a relay."""
    cid = script.conversation_id
    posted = duplicates = 0
    batch: list[dict[str, Any]] = []
    steps: Sequence[Step | AwaitRelay] = script.steps
    index = 0
    while index < len(steps):
        step = steps[index]
        index += 1
        if isinstance(step, AwaitRelay):
            accepted, dup = await _post(client, cid, batch)
            posted, duplicates, batch = posted + accepted, duplicates + dup, []
            if not wait_for_relays:
                return PlayResult(cid, posted, duplicates, step.relay_id)
            if on_relay is not None:
                on_relay(cid, step.relay_id)
            approved = await _decision(client, cid, step.relay_id, relay_poll)
            steps, index = (step.approved if approved else step.denied), 0
            continue
        if speed is None:
            batch.append(_stamped(step.event))
            continue
        if step.delay > 0:
            await asyncio.sleep(step.delay / speed)
        accepted, dup = await _post(client, cid, [_stamped(step.event)])
        posted, duplicates = posted + accepted, duplicates + dup
        if on_event is not None:
            on_event(cid, step.event)
    accepted, dup = await _post(client, cid, batch)
    return PlayResult(cid, posted + accepted, duplicates + dup, None)


async def post_envelopes(client: httpx.AsyncClient, envelopes: Sequence[dict[str, Any]]) -> int:
    """Post context-intelligence hook envelopes to ``POST /events``; returns how many were queued
    (not duplicates). Raises `DemoError` naming the first refusal."""
    queued = 0
    for envelope in envelopes:
        response = await client.post("/events", json=envelope)
        if response.status_code != 202:
            raise DemoError(f"POST /events answered {response.status_code}: {response.text[:500]}")
        queued += response.json().get("status") == "queued"
    return queued


async def play_all(
    base_url: str,
    scripts: Sequence[Script],
    *,
    speed: float | None = 1.0,
    wait_for_relays: bool = True,
    stagger: float = 1.5,
    headers: dict[str, str] | None = None,
    envelopes: Sequence[dict[str, Any]] = (),
    on_relay: Callable[[str, str], None] | None = None,
) -> list[PlayResult]:
    """Play every script concurrently, each starting ``stagger`` seconds (at speed 1) after the
    previous one, so the conversation list fills up the way a busy server's would. ``envelopes``
    (context-intelligence hook events) are posted first, so the explorer has data at once."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0, headers=headers) as client:
        if envelopes:
            await post_envelopes(client, envelopes)

        async def delayed(n: int, script: Script) -> PlayResult:
            if speed is not None and n:
                await asyncio.sleep(n * stagger / speed)
            return await play_script(
                client, script, speed=speed, wait_for_relays=wait_for_relays, on_relay=on_relay
            )

        return list(await asyncio.gather(*(delayed(n, s) for n, s in enumerate(scripts))))
