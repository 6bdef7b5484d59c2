"""SDK instrumentation into a real ``convograph serve`` subprocess (through `RemotePort`: batched,
retried, idempotent), and what happens when that server is down: the caller never notices."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convograph.client import ConvographClient
from convograph.events import Event, ToolCall, User
from convograph.harness.providers.openai_responses import responses_input
from convograph.instrument import instrument
from convograph.testing import ModelServer, Reply, Say
from tests.support.instrument_apps import ANSWERS, APPS, QUESTION, THANKS, run_app, run_app_async, script
from tests.support.server import ServerProcess, free_port, start_server
from tests.test_integrations_instrument import (
    APIS,
    FORMAT,
    MODES,
    check_recording,
    last_answer,
    make_client,
    normalise_chat,
    normalise_messages,
    normalise_responses,
    sent_history,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(
        tmp_path_factory.mktemp("instrument") / "data", "--no-intelligence", ready_timeout=120
    )
    try:
        yield process
    finally:
        process.stop()


async def stored(
    url: str, cid: str, api: str
) -> tuple[list[Event], list[dict[str, Any]], list[dict[str, Any]]]:
    """The conversation's events, the server's own messages projection and its thread."""
    async with ConvographClient(url) as client:
        events = await client.replay(cid)
        messages = await client.projection(cid, "messages", format=FORMAT[api])
        thread = await client.projection(cid, "thread")
    return events, messages, thread


def check_server_side(
    api: str, messages: list[dict[str, Any]], thread: list[dict[str, Any]], body: Any
) -> None:
    """The server's messages projection is the history the SDK sent, plus the answer; its thread
    shows the tool call with its result."""
    if api == "chat":
        projected = normalise_chat(messages)
    elif api == "responses":
        projected = normalise_responses(responses_input(messages))
    else:
        projected = normalise_messages(messages)
    assert projected == [*sent_history(api, body), last_answer(api)]
    calls = [view["content"] for view in thread if view["content"]["kind"] == "tool_call"]
    assert [(c["name"], c["input"], c["output"]) for c in calls] == [
        ("weather", {"city": "Paris"}, "sunny, 24 C")
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_a_sync_client_is_recorded_into_a_server(server: ServerProcess, api: str, mode: str) -> None:
    cid = f"served-sync-{api}-{mode}"
    with ModelServer(script()) as models:
        client = make_client(api, models, is_async=False)
        with instrument(client, sink=server.url, conversation_id=cid) as recording:
            run_app(api, client, mode)
        assert recording.lost == 0
    events, messages, thread = asyncio.run(stored(server.url, cid, api))
    check_recording(api, events, models)
    check_server_side(api, messages, thread, models.requests[-1].body)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
async def test_an_async_client_is_recorded_into_a_server(server: ServerProcess, api: str, mode: str) -> None:
    cid = f"served-async-{api}-{mode}"
    async with ModelServer(script()) as models:
        client = make_client(api, models, is_async=True)
        async with instrument(client, sink=server.url, conversation_id=cid):
            await run_app_async(api, client, mode)
    events, messages, thread = await stored(server.url, cid, api)
    check_recording(api, events, models)
    check_server_side(api, messages, thread, models.requests[-1].body)


@pytest.mark.parametrize("api", APIS)
def test_a_server_that_is_down_never_breaks_the_caller(api: str) -> None:
    """Nothing listens at the sink's URL: every call, streamed or not, returns what it returns
    without instrumentation, and ending the instrumentation gives up after its timeout."""
    dead = f"http://127.0.0.1:{free_port()}"
    with ModelServer(script() * 4) as models:
        client = make_client(api, models, is_async=False)
        plain_history = run_app(api, client, "plain")
        recording = instrument(client, sink=dead, conversation_id="nowhere")
        for mode in MODES:
            assert _texts(api, run_app(api, client, mode)) == _texts(api, plain_history)
        started = time.monotonic()
        assert recording.uninstrument(timeout=1) is False
        assert time.monotonic() - started < 10
    assert all(request.status == 200 for request in models.requests)


async def test_a_server_that_is_down_never_breaks_an_async_caller() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with ModelServer(script() * 2) as models:
        client = make_client("messages", models, is_async=True)
        async with instrument(
            client, sink=dead, conversation_id="nowhere-async", flush_timeout=1
        ) as recording:
            for mode in ("stream", "helper"):
                history = await run_app_async("messages", client, mode)
                assert _texts("messages", history) == list(ANSWERS)
            assert await recording.aflush(timeout=0.5) is False


def test_events_queued_while_the_server_restarts_are_stored_once(tmp_path: Path) -> None:
    """The server stops mid-conversation and comes back on the same port: the port retries the
    same batches (idempotent by eventId), so the conversation is whole, each turn once."""
    port = free_port()
    served = start_server(tmp_path / "data", "--no-intelligence", port=port, ready_timeout=120)
    cid = "restarted"
    with ModelServer(script()) as models:
        client = make_client("chat", models, is_async=False)
        recording = instrument(client, sink=served.url, conversation_id=cid)
        start, turn, _, after = APPS["chat"]
        history = start()
        after(history, turn(client, history, "stream"), 0)
        assert recording.flush()
        served.stop()
        after(history, turn(client, history, "stream"), 1)  # recorded while the server is down
        after(history, turn(client, history, "plain"), 2)
        served = start_server(tmp_path / "data", "--no-intelligence", port=port, ready_timeout=120)
        try:
            assert recording.uninstrument(timeout=30)
            events, messages, _ = asyncio.run(stored(served.url, cid, "chat"))
        finally:
            served.stop()
    assert [e.content for e in events if isinstance(e, User)] == [QUESTION, THANKS]
    assert len([e for e in events if isinstance(e, ToolCall)]) == 1
    assert normalise_chat(messages) == [*sent_history("chat", models.requests[-1].body), last_answer("chat")]


def _texts(api: str, history: list[Any]) -> list[str]:
    """The assistant answers in an app's final history."""
    texts = []
    for item in history:
        if api == "chat":
            if isinstance(item, dict) and item.get("role") == "assistant":
                texts.append(item["content"])
        elif api == "responses":
            if getattr(item, "type", None) == "message":
                texts.append("".join(part.text for part in item.content))
        elif isinstance(item, dict) and item.get("role") == "assistant":
            texts.append(
                "".join(
                    getattr(b, "text", "") if not isinstance(b, dict) else b.get("text", "")
                    for b in item["content"]
                )
            )
    return texts


def test_an_edit_and_a_regenerate_reach_the_server_as_its_own_commands(server: ServerProcess) -> None:
    """The server checks command events before storing them: the branches the instrumentation
    records apply there too, and its messages projection follows the app's last request."""
    start, turn, _, after = APPS["messages"]
    cid = "served-branches"
    replies = [*script(), Reply(content=[Say(text="Again.")]), Reply(content=[Say(text="Rome too.")])]
    with ModelServer(replies) as models:
        client = make_client("messages", models, is_async=False)
        with instrument(client, sink=server.url, conversation_id=cid) as recording:
            history = start()
            after(history, turn(client, history, "plain"), 0)
            after(history, turn(client, history, "plain"), 1)
            turn(client, history, "plain")
            turn(client, history, "plain")  # asked again: a regenerate
            history[-1] = {"role": "user", "content": "Thanks! And in Rome?"}
            turn(client, history, "plain")  # edited: a new branch
        assert recording.lost == 0
    events, messages, _ = asyncio.run(stored(server.url, cid, "messages"))
    assert [e.type for e in events if e.type in ("edit", "regenerate")] == ["regenerate", "edit"]
    answer = {"role": "assistant", "content": [{"type": "text", "text": "Rome too."}]}
    assert normalise_messages(messages) == [*sent_history("messages", models.requests[-1].body), answer]
