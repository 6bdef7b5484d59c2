"""What SDK instrumentation (`convograph.instrument`) adds per call and per streamed chunk, side by
side with the same client uninstrumented, in one run.

    python -m benchmarks.instrument            # 5,000-chunk answers, 7 rounds; 200 calls
    python -m benchmarks.instrument --quick    # 1,000-chunk answers, 3 rounds; 60 calls

The SDKs' sync clients (the hand-off to the instrumentation's thread is the part worth measuring)
read replies rendered once by the scripted model server's wire renderer and replayed from memory
through an ``httpx2.MockTransport`` (one read per SSE event), so no server or socket shares the
measurement. The instrumentation records into an in-process `MemoryEventLog` (through `LogPort`).

- **per chunk**: one answer of N text deltas, read with ``create(stream=True)``; rounds alternate
  plain / instrumented. Figures: wall time per chunk on the caller's thread, the difference, the
  CPU the caller's thread spends per chunk (``time.thread_time``: the hand-off), and the CPU of the
  whole process per chunk (the caller's thread plus the instrumentation's, which translates and
  stores the events; measured until its backlog is stored).
- **instrumentation alone**: the same items, parsed by the SDK beforehand, through the observer
  the instrumentation installs on a stream: its own CPU per chunk on the caller's thread and in
  the whole process, without the SDK's (much larger and noisier) parsing cost around it.
- **per call**: a chat that grows by an answer and a question per call (the whole history re-sent
  each time, up to ``2 * calls`` messages), non-streaming; the same calls plain and instrumented.
  Figures: wall time per call, the difference, and the time the instrumentation then needs to store
  its backlog (it works while the caller goes on).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2
import openai

from convograph.instrument import instrument
from convograph.integrations.instrument.anthropic_sdk import MESSAGES
from convograph.integrations.instrument.calls import CallRecord, observe_stream
from convograph.integrations.instrument.openai_sdk import CHAT, RESPONSES
from convograph.store import MemoryEventLog
from convograph.testing import Reply, Say
from convograph.testing.model_wire import render_response, render_stream

Client = Any


class _Replay(httpx2.SyncByteStream):
    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    def __iter__(self) -> Iterator[bytes]:
        yield from self.events


def _client(api: str, answer: Callable[[httpx2.Request], httpx2.Response]) -> Client:
    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    if api == "messages":
        return anthropic.Anthropic(api_key="k", base_url="http://model", http_client=http, max_retries=0)
    return openai.OpenAI(api_key="k", base_url="http://model/v1", http_client=http, max_retries=0)


def _streaming_client(api: str, chunks: int) -> Client:
    pieces = [f"tok{i} " for i in range(chunks)]
    reply = Reply(content=[Say(text="".join(pieces), chunks=pieces)])
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
    events = render_stream(api, reply, body, "", "0000")  # type: ignore[arg-type]
    headers = {"content-type": "text/event-stream; charset=utf-8"}
    return _client(api, lambda request: httpx2.Response(200, headers=headers, stream=_Replay(events)))


def _read_stream(api: str, client: Client) -> int:
    return len(_read_stream_items(api, client))


def bench_chunks(api: str, chunks: int, rounds: int) -> dict[str, float]:
    client = _streaming_client(api, chunks)
    log = MemoryEventLog()
    _read_stream(api, client)  # warm the SDK (imports, pydantic caches)
    plain: list[tuple[float, float, float]] = []
    watched: list[tuple[float, float, float]] = []
    for round_ in range(rounds + 1):
        started = (time.perf_counter(), time.thread_time(), time.process_time())
        items = _read_stream(api, client)
        plain.append(_since(started))
        recording = instrument(client, sink=log, conversation_id=f"bench-{api}-{round_}")
        started = (time.perf_counter(), time.thread_time(), time.process_time())
        _read_stream(api, client)
        wall, caller, _ = _since(started)
        recording.flush(timeout=120)
        watched.append((wall, caller, time.process_time() - started[2]))
        recording.uninstrument()
    plain, watched = plain[1:], watched[1:]  # the first instrumented round starts the worker
    per_chunk = [statistics.median(column) / items * 1e6 for column in zip(*plain, strict=True)]
    per_chunk_watched = [statistics.median(column) / items * 1e6 for column in zip(*watched, strict=True)]
    return {
        "items": items,
        "plain_us": per_chunk[0],
        "watched_us": per_chunk_watched[0],
        "difference_us": per_chunk_watched[0] - per_chunk[0],
        "caller_cpu_us": per_chunk_watched[1] - per_chunk[1],
        "process_cpu_us": per_chunk_watched[2] - per_chunk[2],
    }


class _Items:
    """A stand-in SDK stream over items parsed beforehand (what `observe_stream` needs)."""

    def __init__(self, items: list[Any]) -> None:
        self._iterator = iter(items)

    def close(self) -> None:
        pass


def bench_alone(api: str, chunks: int, rounds: int) -> dict[str, float]:
    """The instrumentation's own cost per chunk, over items the SDK parsed beforehand: the
    caller's thread (the observer and the hand-off) and the whole process (the worker too)."""
    client = _streaming_client(api, chunks)
    items = list(_read_stream_items(api, client))
    spec = {"chat": CHAT, "responses": RESPONSES, "messages": MESSAGES}[api]
    caller, process = [], []
    for round_ in range(rounds + 1):
        recording = instrument(client, sink=MemoryEventLog(), conversation_id=f"alone-{api}-{round_}")
        request = {"model": "m", "messages": [{"role": "user", "content": "Write."}], "input": "Write."}
        call = CallRecord(spec, recording.sink, recording.conversation_id, None, request, "")
        started = (time.thread_time(), time.process_time())
        call.begin()
        stream = _Items(items)
        observe_stream(stream, call)
        for _ in stream._iterator:
            pass
        caller.append(time.thread_time() - started[0])
        recording.flush(timeout=120)
        process.append(time.process_time() - started[1])
        recording.uninstrument()
    return {
        "caller_us": statistics.median(caller[1:]) / len(items) * 1e6,
        "process_us": statistics.median(process[1:]) / len(items) * 1e6,
    }


def _read_stream_items(api: str, client: Client) -> list[Any]:
    question = [{"role": "user", "content": "Write a long answer."}]
    if api == "chat":
        stream = client.chat.completions.create(
            model="m", messages=question, stream=True, stream_options={"include_usage": True}
        )
    elif api == "responses":
        stream = client.responses.create(model="m", input=question, stream=True)
    else:
        stream = client.messages.create(model="m", max_tokens=100_000, messages=question, stream=True)
    return list(stream)


def _since(started: tuple[float, float, float]) -> tuple[float, float, float]:
    return (
        time.perf_counter() - started[0],
        time.thread_time() - started[1],
        time.process_time() - started[2],
    )


def _calling_client(api: str) -> Client:
    def answer(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        reply = Reply(content=[Say(text=f"Answer {len(body.get('messages') or body.get('input') or [])}.")])
        return httpx2.Response(200, json=render_response(api, reply, body, "", "0000"))  # type: ignore[arg-type]

    return _client(api, answer)


def _chat(api: str, client: Client, calls: int) -> list[float]:
    """``calls`` non-streaming calls of a growing chat; seconds per call."""
    history: list[Any] = [{"role": "user", "content": "Hello."}]
    times = []
    for index in range(calls):
        started = time.perf_counter()
        if api == "chat":
            text = client.chat.completions.create(model="m", messages=history).choices[0].message.content
        elif api == "responses":
            text = client.responses.create(model="m", input=history).output_text
        else:
            text = client.messages.create(model="m", max_tokens=1024, messages=history).content[0].text
        times.append(time.perf_counter() - started)
        history += [{"role": "assistant", "content": text}, {"role": "user", "content": f"And {index}?"}]
    return times


def bench_calls(api: str, calls: int) -> dict[str, float]:
    client = _calling_client(api)
    _chat(api, client, 3)  # warm
    plain = _chat(api, client, calls)
    recording = instrument(client, sink=MemoryEventLog(), conversation_id=f"calls-{api}")
    _chat(api, client, 1)  # start the worker
    recording.uninstrument()
    recording = instrument(client, sink=MemoryEventLog(), conversation_id=f"calls-{api}-measured")
    watched = _chat(api, client, calls)
    started = time.perf_counter()
    recording.flush(timeout=120)
    backlog = time.perf_counter() - started
    recording.uninstrument()
    return {
        "plain_us": statistics.median(plain) * 1e6,
        "watched_us": statistics.median(watched) * 1e6,
        "difference_us": (statistics.median(watched) - statistics.median(plain)) * 1e6,
        "backlog_ms": backlog * 1e3,
    }


def main(chunks: int, rounds: int, calls: int) -> None:
    print(
        f"load average {os.getloadavg()[0]:.1f}; {chunks} text deltas per answer, median of {rounds} rounds"
    )
    print(
        f"{'API':<10} {'plain':>9} {'instrumented':>13} {'difference':>11} {'caller CPU':>11} {'process CPU':>12}"
    )
    for api in ("chat", "responses", "messages"):
        r = bench_chunks(api, chunks, rounds)
        print(
            f"{api:<10} {r['plain_us']:>7.1f}us {r['watched_us']:>11.1f}us {r['difference_us']:>9.1f}us "
            f"{r['caller_cpu_us']:>9.1f}us {r['process_cpu_us']:>10.1f}us   ({int(r['items'])} items)"
        )
    print("\ninstrumentation alone (items parsed beforehand), per chunk: caller's thread / whole process")
    for api in ("chat", "responses", "messages"):
        r = bench_alone(api, chunks, rounds)
        print(f"{api:<10} {r['caller_us']:>7.2f}us {r['process_us']:>9.2f}us")
    print(f"\nper call: {calls} non-streaming calls of a growing chat (up to {2 * calls} messages), median")
    print(f"{'API':<10} {'plain':>9} {'instrumented':>13} {'difference':>11} {'backlog stored in':>18}")
    for api in ("chat", "responses", "messages"):
        r = bench_calls(api, calls)
        print(
            f"{api:<10} {r['plain_us']:>7.0f}us {r['watched_us']:>11.0f}us {r['difference_us']:>9.0f}us "
            f"{r['backlog_ms']:>15.1f}ms"
        )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1,000-chunk answers, 3 rounds, 60 calls")
    args = parser.parse_args()
    if args.quick:
        main(1_000, 3, 60)
    else:
        main(5_000, 7, 200)
