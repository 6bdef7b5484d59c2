"""Provider-harness overhead per streamed chunk, in process, with the fake model at full speed.

    python -m benchmarks.harness            # 10,000-chunk answers, 7 rounds
    python -m benchmarks.harness --quick    # 2,000-chunk answers, 3 rounds

For each API (Chat Completions, Responses, Messages) one answer of N text deltas is rendered once by
the scripted model server's wire renderer (`convograph.testing.model_wire`) and replayed from memory
through an ``httpx2.MockTransport`` (one transport read per SSE event, as on a socket), so no
server, socket or other process shares the measurement. Two loops read the same bytes with the same
SDK client:

- **SDK alone**: ``create(stream=True)`` and iterate the SDK's stream (HTTP, SSE decoding, JSON,
  pydantic model construction: the cost any SDK user pays);
- **provider**: ``provider.invoke(request)`` over that client, yielding convograph events;
- **harness alone**: ``provider.invoke(request)`` reading the items the SDK parsed beforehand (its
  ``_open`` replaced by a replay of them): only the harness's own work (translation to events,
  event ids, block ids, the watchdog stamps, the extra async-iterator layers).

"harness alone" is the overhead compared with the target (<= 20 us per chunk); "difference" =
(provider - SDK alone) / N measures the same thing end to end, but inside the SDK's much larger
and noisier cost. Rounds alternate SDK / provider and medians are reported, with the load average
(the machine is shared).
A second figure runs the same provider against the real model server on 127.0.0.1 in the same
event loop, for scale.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import httpx2
import openai

from convograph.harness import ModelRequest
from convograph.harness.providers import AnthropicProvider, OpenAIChatProvider, OpenAIResponsesProvider
from convograph.harness.providers.base import StreamingProvider
from convograph.testing import ModelServer, Reply, Say
from convograph.testing.model_wire import render_stream

TARGET_US = 20.0
MESSAGES = [{"role": "user", "content": "Write a long answer."}]


class _Replay(httpx2.AsyncByteStream):
    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.events:
            yield event


def _transport(events: list[bytes]) -> httpx2.MockTransport:
    def handle(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream; charset=utf-8"}
        return httpx2.Response(200, headers=headers, stream=_Replay(events))

    return httpx2.MockTransport(handle)


def _answer(chunks: int) -> Reply:
    pieces = [f"tok{i} " for i in range(chunks)]
    return Reply(content=[Say(text="".join(pieces), chunks=pieces)])


async def _sdk_alone(open_stream: Callable[[], Any]) -> int:
    count = 0
    stream = await open_stream()
    async for _ in stream:
        count += 1
    return count


async def _provider(provider: StreamingProvider, request: ModelRequest) -> int:
    count = 0
    async for _ in provider.invoke(request):
        count += 1
    return count


def _setup(api: str, events: list[bytes]) -> tuple[Callable[[], Any], StreamingProvider, ModelRequest]:
    http = httpx2.AsyncClient(transport=_transport(events))
    if api == "messages":
        claude = anthropic.AsyncAnthropic(
            api_key="k", base_url="http://model", http_client=http, max_retries=0
        )
        request = ModelRequest(model="m", messages=MESSAGES, max_tokens=100_000)

        def open_messages() -> Any:
            return claude.messages.create(model="m", max_tokens=100_000, messages=MESSAGES, stream=True)  # type: ignore[arg-type]

        return open_messages, AnthropicProvider(client=claude), request
    client = openai.AsyncOpenAI(api_key="k", base_url="http://model/v1", http_client=http, max_retries=0)
    request = ModelRequest(model="m", messages=MESSAGES)
    if api == "responses":

        def open_responses() -> Any:
            return client.responses.create(model="m", input="Write a long answer.", stream=True)

        return open_responses, OpenAIResponsesProvider(client=client), request

    def open_chat() -> Any:
        return client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},  # type: ignore[arg-type]
        )

    return open_chat, OpenAIChatProvider(client=client), request


class _Preparsed:
    """Makes a provider read items the SDK already parsed: what remains is the harness's own work."""

    def __init__(self, provider: StreamingProvider, items: list[Any]) -> None:
        self.provider = provider
        self.items = items

    async def _replay(self) -> AsyncIterator[Any]:
        for item in self.items:
            yield item

    async def open(self, request: ModelRequest) -> AsyncIterator[Any]:
        return self._replay()


async def bench_harness_alone(
    provider: StreamingProvider,
    open_stream: Callable[[], Any],
    request: ModelRequest,
    chunks: int,
    rounds: int,
) -> float:
    """Microseconds per chunk of the harness over items the SDK parsed beforehand (median)."""
    stream = await open_stream()
    items = [item async for item in stream]
    preparsed = _Preparsed(provider, items)
    provider._open = preparsed.open  # type: ignore[method-assign]
    times = []
    for _ in range(rounds + 1):
        start = time.perf_counter()
        await _provider(provider, request)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) / chunks * 1e6


async def bench_in_process(api: str, chunks: int, rounds: int) -> dict[str, float]:
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
    events = render_stream(api, _answer(chunks), body, "", "0000")  # type: ignore[arg-type]
    open_stream, provider, request = _setup(api, events)
    await _sdk_alone(open_stream)  # warm both paths (imports, pydantic caches)
    await _provider(provider, request)
    sdk_times, provider_times = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        items = await _sdk_alone(open_stream)
        sdk_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        produced = await _provider(provider, request)
        provider_times.append(time.perf_counter() - start)
    alone = await bench_harness_alone(provider, open_stream, request, chunks, rounds)
    await provider.aclose()
    sdk, ours = statistics.median(sdk_times), statistics.median(provider_times)
    return {
        "harness_us": alone,
        "sdk_items": items,
        "events": produced,
        "sdk_us": sdk / chunks * 1e6,
        "provider_us": ours / chunks * 1e6,
        "overhead_us": (ours - sdk) / chunks * 1e6,
        "overhead_min_us": (min(provider_times) - min(sdk_times)) / chunks * 1e6,
    }


async def bench_loopback(chunks: int) -> float:
    """Microseconds per chunk, Chat Completions provider against the real server in this loop."""
    async with ModelServer([_answer(chunks)] * 2, check_requests=False) as server:
        chat = OpenAIChatProvider(base_url=server.openai_base_url, api_key="k")
        request = ModelRequest(model="m", messages=MESSAGES)
        await _provider(chat, request)
        start = time.perf_counter()
        await _provider(chat, request)
        elapsed = time.perf_counter() - start
        await chat.aclose()
    return elapsed / chunks * 1e6


async def main(chunks: int, rounds: int) -> None:
    print(
        f"load average {os.getloadavg()[0]:.1f}; {chunks} text deltas per answer; median of {rounds} rounds"
    )
    head = ("API", "SDK alone", "provider", "difference", "(min-min)", "harness alone", "vs target")
    print(f"{head[0]:<10}" + "".join(f"{h:>14}" for h in head[1:]))
    for api in ("chat", "responses", "messages"):
        r = await bench_in_process(api, chunks, rounds)
        figures = [r["sdk_us"], r["provider_us"], r["overhead_us"], r["overhead_min_us"], r["harness_us"]]
        print(
            f"{api:<10}"
            + "".join(f"{value:>12.1f}us" for value in figures)
            + f"{r['harness_us'] / TARGET_US:>13.2f}x"
            + f"   ({r['sdk_items']:.0f} SDK items -> {r['events']:.0f} events)"
        )
    loopback = await bench_loopback(chunks)
    print(
        f"chat provider via the model server on 127.0.0.1 (server in the same loop): {loopback:.1f}us per chunk"
    )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(2_000 if args.quick else 10_000, 3 if args.quick else 7))
