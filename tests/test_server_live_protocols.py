"""`stream_frames` with a protocol's encoder on a real (in-memory) event log: a subscriber whose
place in the frame ring is gone after a burst reads the rest from the log with a fresh encoder and
still gets exactly the frames of an uninterrupted stream."""

from __future__ import annotations

import asyncio
from functools import partial

import pytest

from convograph.integrations.ag_ui import AGUIEventStream
from convograph.integrations.ai_sdk import AISDKStream
from convograph.integrations.ui_stream import UIEventStream
from convograph.server.live import HubRegistry, Subscriber, stream_frames
from convograph.store.memory import MemoryEventLog
from tests.support.conversations import recorded_conversations, sse_bytes

EVENTS = recorded_conversations()["research-approved"]


@pytest.mark.parametrize("encoder", [AGUIEventStream, AISDKStream])
async def test_an_overflowing_subscriber_catches_up_with_the_same_frames(
    encoder: type[UIEventStream],
) -> None:
    log = MemoryEventLog()
    hubs = HubRegistry(log, max_frames=2, max_bytes=1 << 20)  # overflows on any burst
    expected = sse_bytes(encoder("c"), EVENTS)
    half = len(EVENTS) // 3
    await log.append("c", EVENTS[:half])
    received = bytearray()

    async def subscriber() -> None:
        async for _, chunk in stream_frames(
            log, hubs, "c", Subscriber(0), heartbeat=5, stream_format="p", factory=partial(encoder, "c")
        ):
            received.extend(chunk)
            if len(received) >= len(expected):
                return

    task = asyncio.create_task(subscriber())
    await asyncio.sleep(0.05)
    for start in range(half, len(EVENTS), 25):  # bursts of 25: more than the buffer holds
        await log.append("c", EVENTS[start : start + 25])
        await asyncio.sleep(0)
    await asyncio.wait_for(task, 20)
    await hubs.close()
    assert bytes(received) == expected


async def test_a_resume_inside_an_event_skips_the_frames_already_seen() -> None:
    log = MemoryEventLog()
    hubs = HubRegistry(log, max_frames=64, max_bytes=1 << 20)
    await log.append("c", EVENTS)
    expected = sse_bytes(AGUIEventStream("c"), EVENTS).split(b"\n\n")[:-1]
    at = next(index for index, frame in enumerate(expected) if frame.startswith(b"id: 3:1\n"))
    received = bytearray()
    async for _, chunk in stream_frames(
        log,
        hubs,
        "c",
        Subscriber(2),
        heartbeat=5,
        stream_format="ag-ui",
        factory=partial(AGUIEventStream, "c"),
        skip=2,
    ):
        received.extend(chunk)
        if received.endswith(expected[-1] + b"\n\n"):
            break
    await hubs.close()
    assert bytes(received) == b"".join(frame + b"\n\n" for frame in expected[at + 1 :])
