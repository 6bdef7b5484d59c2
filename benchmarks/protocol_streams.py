"""Encoding cost of the protocol streams (in process, no server): convograph's own frames, AG-UI
and the AI SDK UI message stream, side by side on the same stored events.

    python -m benchmarks.protocol_streams            # 20k events per workload
    python -m benchmarks.protocol_streams --quick    # 2k

A live stream encodes each event once per conversation and format (the hub shares the frames with
every subscriber); a subscriber that connects or resumes after N events costs one replay of those N
events through its own encoder (`convograph.server.live`), which is what "replay" measures. The
workload's top-level run ends on its last event, so AG-UI's ``MESSAGES_SNAPSHOT`` (built from the
whole thread) is in the figures; "last event" is that event alone.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from benchmarks.workloads import streaming, subagents
from convograph.events import Event, HarnessEnd
from convograph.integrations.ag_ui import AGUIEventStream
from convograph.integrations.ai_sdk import AISDKStream
from convograph.server.sse import event_frame
from convograph.store import StoredEvent


class Native:
    """convograph's own frames, behind the same ``feed`` as the protocol encoders."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id

    def feed(self, stored: StoredEvent) -> list[bytes]:
        return [event_frame(stored)]


ENCODERS: dict[str, Callable[[str], object]] = {
    "native": Native,
    "ag-ui": AGUIEventStream,
    "ai-sdk": AISDKStream,
}


def stored_events(events: list[Event]) -> list[StoredEvent]:
    return [
        StoredEvent(seq=i, conversation_id="bench", event=e, received_at=0.0) for i, e in enumerate(events, 1)
    ]


def measure(name: str, items: list[StoredEvent]) -> tuple[float, float, int]:
    """(µs per event over all but the last, ms for the last event, bytes) of one encoder."""
    encoder = ENCODERS[name]("bench")
    size = 0
    started = time.perf_counter()
    for item in items[:-1]:
        size += sum(len(frame) for frame in encoder.feed(item))  # type: ignore[attr-defined]
    middle = time.perf_counter() - started
    started = time.perf_counter()
    size += sum(len(frame) for frame in encoder.feed(items[-1]))  # type: ignore[attr-defined]
    last = time.perf_counter() - started
    return middle / (len(items) - 1) * 1e6, last * 1000, size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    count = 2_000 if args.quick else 20_000
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}  {count:,} events per workload, load average {os.getloadavg()[0]:.2f}"
    )
    for workload in (streaming, subagents):
        events = [*workload(count - 1), HarnessEnd(run_id="agent", reason="final")]
        items = stored_events(events)
        results = {name: measure(name, items) for name in ENCODERS}
        base = results["native"][0]
        for name, (per_event, last, size) in results.items():
            print(
                f"{workload.__name__:10} {name:7}: {per_event:6.1f} µs/event ({per_event / base:4.1f}x native), "
                f"replay of {count:,} events {per_event * count / 1000:7.1f} ms, last event {last:6.1f} ms, "
                f"{size / count:5.0f} bytes/event"
            )


if __name__ == "__main__":
    main()
