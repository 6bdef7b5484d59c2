"""SDK instrumentation: what is patched and restored, which calls are recorded where, the SDK's own
stream objects, failed and interrupted calls, histories the app trims or brings, and failures of
the instrumentation itself, which never reach the caller."""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from convograph.events import Edit, Error, Event, HarnessEnd, HarnessStart, Text, ToolResult, User
from convograph.harness.providers.openai_chat import ChatTranslator
from convograph.instrument import conversation, instrument, uninstrument
from convograph.integrations.instrument import anthropic_sdk, openai_sdk
from convograph.store import MemoryEventLog
from convograph.testing import ModelServer, Reply, Say, ToolUse
from tests.support.instrument_apps import (
    APPS,
    CHAT_TOOLS,
    QUESTION,
    THANKS,
    ChatAccumulator,
    chat_after,
    chat_start,
    chat_turn,
    script,
)
from tests.test_integrations_instrument import (
    check_recording,
    last_answer,
    make_client,
    normalise_chat,
    projected_history,
    sent_history,
)
from tests.test_integrations_instrument_example import stored_events


def events_of(log: MemoryEventLog, cid: str) -> list[Event]:
    return [stored.event for stored in asyncio.run(log.read(cid))]


def patched_methods() -> dict[tuple[type, str], Any]:
    """Every method the instrumentation patches, as the SDK classes hold it now."""
    methods = {}
    for module, owner, name, _, _ in (*openai_sdk.PATCHES, *anthropic_sdk.PATCHES):
        cls = getattr(importlib.import_module(module), owner)
        methods[(cls, name)] = cls.__dict__[name]
    return methods


@pytest.fixture(autouse=True)
def nothing_left_instrumented() -> Iterator[None]:
    yield
    uninstrument(timeout=5)


# -- patching and routing ------------------------------------------------------------------------------


def test_uninstrument_restores_the_very_same_methods() -> None:
    originals = patched_methods()
    first = instrument(sink=MemoryEventLog())  # both SDKs
    patched = patched_methods()
    assert all(patched[key] is not original for key, original in originals.items())
    assert (
        patched[(openai.resources.chat.Completions, "create")].__wrapped__
        is originals[(openai.resources.chat.Completions, "create")]
    )
    client = openai.OpenAI(api_key="test")
    second = instrument(client, sink=MemoryEventLog())
    first.uninstrument()
    assert (
        patched_methods()[(openai.resources.chat.Completions, "create")]
        is not originals[(openai.resources.chat.Completions, "create")]
    )  # the client's instrumentation still needs the openai patches ...
    assert (
        patched_methods()[(anthropic.resources.Messages, "create")]
        is originals[(anthropic.resources.Messages, "create")]
    )  # ... not the anthropic ones
    assert second.uninstrument()
    assert patched_methods() == originals
    assert all(patched_methods()[key] is original for key, original in originals.items())
    assert first.uninstrument()  # idempotent


def test_only_the_instrumented_client_is_recorded() -> None:
    log = MemoryEventLog()
    with ModelServer([Reply(content=[Say(text="one")]), Reply(content=[Say(text="two")])]) as server:
        watched = make_client("chat", server, is_async=False)
        other = make_client("chat", server, is_async=False)
        with instrument(watched, sink=log, conversation_id="watched") as recording:
            other.chat.completions.create(model="m", messages=[{"role": "user", "content": "not me"}])
            watched.chat.completions.create(model="m", messages=[{"role": "user", "content": "me"}])
            assert recording.flush()
    assert [e.content for e in events_of(log, "watched") if isinstance(e, User)] == ["me"]


def test_instrumenting_a_module_covers_clients_made_before_and_after_it() -> None:
    log = MemoryEventLog()
    with ModelServer([Reply(content=[Say(text="a")]), Reply(content=[Say(text="b")])]) as server:
        before = make_client("chat", server, is_async=False)
        with instrument(openai, sink=log, conversation_id="module") as recording:
            after = make_client("chat", server, is_async=False)
            before.chat.completions.create(model="m", messages=[{"role": "user", "content": "before"}])
            after.chat.completions.create(model="m", messages=[{"role": "user", "content": "after"}])
            assert recording.flush()
    events = events_of(log, "module")
    # Two one-message histories in one conversation: the second is a branch of the first.
    assert [e.content for e in events if isinstance(e, User | Edit)] == ["before", "after"]
    assert projected_history("chat", events) == [
        {"role": "user", "content": "after"},
        {"role": "assistant", "content": "b"},
    ]


def test_a_conversation_scope_routes_the_calls_made_in_it() -> None:
    log = MemoryEventLog()
    with ModelServer([Reply(content=[Say(text="a")]), Reply(content=[Say(text="b")])]) as server:
        client = make_client("chat", server, is_async=False)
        with instrument(client, sink=log, conversation_id="default", parent_id="app-run") as recording:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "here"}])
            with conversation("ticket-7", parent_id="ticket-run"):
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "there"}])
            assert recording.flush()
    default, ticket = events_of(log, "default"), events_of(log, "ticket-7")
    assert [e.content for e in default if isinstance(e, User)] == ["here"]
    assert [e.content for e in ticket if isinstance(e, User)] == ["there"]
    assert {e.parent_id for e in default} == {"app-run"}
    assert {e.parent_id for e in ticket} == {"ticket-run"}


def test_bad_arguments_are_refused_with_what_is_wrong() -> None:
    client = openai.OpenAI(api_key="test")
    with pytest.raises(TypeError, match="sink must be"):
        instrument(client, sink=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="event log"):
        instrument(client, sink="ftp://example.com/log")
    with pytest.raises(ValueError, match="conversation"):
        instrument(client, sink=MemoryEventLog(), conversation_id="not a valid id!")
    with pytest.raises(TypeError, match="openai or anthropic client"):
        instrument(object())
    with pytest.raises(ValueError, match="flush_timeout"):
        instrument(client, sink=MemoryEventLog(), flush_timeout=0)
    recording = instrument(client, sink=MemoryEventLog())
    with pytest.raises(ValueError, match="already instrumented"):
        instrument(client, sink=MemoryEventLog())
    recording.uninstrument()


# -- the SDK's own stream objects ---------------------------------------------------------------------------


def test_the_caller_gets_the_sdks_own_stream_and_closing_it_early_is_recorded() -> None:
    log = MemoryEventLog()
    long_answer = Reply(content=[Say(text="word " * 40)], chunk_size=5)
    with ModelServer([long_answer]) as server:
        client = make_client("chat", server, is_async=False)
        with instrument(client, sink=log, conversation_id="closed") as recording:
            with client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "talk"}], stream=True
            ) as stream:
                assert type(stream) is openai.Stream
                chunks = [next(stream), next(stream), next(stream)]
            assert stream.response.is_closed
            assert recording.flush()
    events = events_of(log, "closed")
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert "".join(e.content for e in events if isinstance(e, Text)) == streamed
    errors = [e.message for e in events if isinstance(e, Error)]
    assert errors == ["cancelled: the caller closed the stream before the model finished"]
    assert [e.reason for e in events if isinstance(e, HarnessEnd)] == ["cancelled"]


def test_a_final_message_read_without_iterating_is_recorded() -> None:
    """``get_final_message()`` reads the stream inside the SDK (``until_done``): still observed."""
    log = MemoryEventLog()
    with ModelServer([Reply(content=[Say(text="All read.")])]) as server:
        client = make_client("messages", server, is_async=False)
        with instrument(client, sink=log, conversation_id="final") as recording:
            with client.messages.stream(
                model="c", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
            ) as stream:
                assert type(stream) is anthropic.lib.streaming.MessageStream
                message = stream.get_final_message()
            assert recording.flush()
    assert message.content[0].text == "All read."
    events = events_of(log, "final")
    assert "".join(e.content for e in events if isinstance(e, Text)) == "All read."
    assert [e.reason for e in events if isinstance(e, HarnessEnd)] == ["final"]


async def test_an_async_stream_closed_early_is_recorded_as_cancelled() -> None:
    log = MemoryEventLog()
    async with ModelServer([Reply(content=[Say(text="word " * 40)], chunk_size=5)]) as server:
        client = make_client("messages", server, is_async=True)
        async with instrument(client, sink=log, conversation_id="async-closed") as recording:
            async with client.messages.stream(
                model="c", max_tokens=64, messages=[{"role": "user", "content": "talk"}]
            ) as stream:
                async for text in stream.text_stream:
                    if text:
                        break
            assert await recording.aflush()
    events = [stored.event for stored in await log.read("async-closed")]
    assert [e.reason for e in events if isinstance(e, HarnessEnd)] == ["cancelled"]
    assert "".join(e.content for e in events if isinstance(e, Text)).startswith("word")


# -- failed calls ----------------------------------------------------------------------------------------------


def test_an_api_error_reaches_the_caller_unchanged_and_is_recorded_once() -> None:
    log = MemoryEventLog()
    script = [
        Reply(status=429, error="Rate limit reached", retry_after=1),
        Reply(content=[Say(text="Hello.")]),
    ]
    messages = [{"role": "user", "content": "hi"}]
    with ModelServer(script) as server:
        client = make_client("chat", server, is_async=False)
        with instrument(client, sink=log, conversation_id="retried") as recording:
            with pytest.raises(openai.RateLimitError):
                client.chat.completions.create(model="m", messages=messages)
            client.chat.completions.create(model="m", messages=messages)  # the app retries
            assert recording.flush()
    events = events_of(log, "retried")
    assert [e.content for e in events if isinstance(e, User)] == ["hi"]  # not twice
    errors = [e.message for e in events if isinstance(e, Error)]
    assert len(errors) == 1
    assert errors[0].startswith("OpenAI API: rate limited (HTTP 429: Rate limit reached")
    assert [e.reason for e in events if isinstance(e, HarnessEnd)] == ["error", "final"]
    assert normalise_chat(projected_history_chat(events)) == [
        *messages,
        {"role": "assistant", "content": "Hello."},
    ]


def projected_history_chat(events: list[Event]) -> list[dict[str, Any]]:
    from convograph.harness.ports import ConversationState

    state = ConversationState()
    for event in events:
        state.apply(event)
    return state.messages("openai")


def test_a_stream_cut_mid_answer_is_recorded_with_what_streamed() -> None:
    log = MemoryEventLog()
    with ModelServer(
        [Reply(content=[Say(text="This answer is cut short.")], chunk_size=4, cut_after=4)]
    ) as server:
        client = make_client("messages", server, is_async=False)
        with instrument(client, sink=log, conversation_id="cut") as recording:
            received: list[str] = []
            stream = client.messages.create(
                model="c", max_tokens=64, messages=[{"role": "user", "content": "go"}], stream=True
            )
            with pytest.raises(Exception) as raised:
                received.extend(e.delta.text for e in stream if e.type == "content_block_delta")
            assert recording.flush()
    events = events_of(log, "cut")
    assert received
    assert "".join(e.content for e in events if isinstance(e, Text)) == "".join(received)
    errors = [e.message for e in events if isinstance(e, Error)]
    assert len(errors) == 1
    assert errors[0].startswith("Anthropic API: ")
    assert type(raised.value).__module__.startswith(("anthropic", "httpx"))
    assert [e.reason for e in events if isinstance(e, HarnessEnd)] == ["error"]


# -- histories the app trims, brings or continues -------------------------------------------------------------


def test_a_sliding_window_is_not_recorded_again() -> None:
    """The app keeps only its last messages: the overlap with what was recorded is recognised."""
    log = MemoryEventLog()
    with ModelServer(script()) as server:
        client = make_client("chat", server, is_async=False)
        with instrument(client, sink=log, conversation_id="window") as recording:
            history = chat_start()
            chat_after(history, chat_turn(client, history, "plain"), 0)
            chat_after(history, chat_turn(client, history, "plain"), 1)
            window = [history[0], *history[-2:]]  # the system prompt, the last answer, "Thanks!"
            chat_turn(client, window, "plain")
            assert recording.flush()
    events = events_of(log, "window")
    assert [e.content for e in events if isinstance(e, User)] == [QUESTION, THANKS]
    assert len([e for e in events if isinstance(e, HarnessStart)]) == 3


def test_a_restarted_app_continues_its_stored_conversation() -> None:
    """A new instrumentation on the same log reads the conversation back: the history the app
    re-sends after a restart is not recorded twice."""
    log = MemoryEventLog()
    with ModelServer(script()) as server:
        client = make_client("chat", server, is_async=False)
        history = chat_start()
        with instrument(client, sink=log, conversation_id="resumed"):
            chat_after(history, chat_turn(client, history, "stream"), 0)
        with instrument(client, sink=log, conversation_id="resumed"):
            chat_after(history, chat_turn(client, history, "stream"), 1)
            chat_after(history, chat_turn(client, history, "stream"), 2)
    check_recording("chat", events_of(log, "resumed"), server)


def test_history_the_app_brings_is_recorded_once_in_order() -> None:
    """Messages never recorded (few-shot examples, an earlier uninstrumented call) are recorded
    as they are, so the conversation still projects to what was sent."""
    log = MemoryEventLog()
    brought = [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Capital of France?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_look",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "France"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_look", "content": "Paris"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "Capital of Italy?"},
    ]
    with ModelServer([Reply(content=[Say(text="Rome.")])]) as server:
        client = make_client("chat", server, is_async=False)
        with instrument(client, sink=log, conversation_id="brought") as recording:
            client.chat.completions.create(model="m", messages=brought)
            assert recording.flush()
    events = events_of(log, "brought")
    assert projected_history("chat", events) == [
        *sent_history("chat", server.requests[-1].body),
        last_answer_of("Rome."),
    ]
    assert [(e.id, e.name, e.output) for e in events if isinstance(e, ToolResult)] == [
        ("call_look", "lookup", "Paris")
    ]


def last_answer_of(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def test_responses_chained_by_previous_response_id_record_every_input_item() -> None:
    log = MemoryEventLog()
    replies = [
        Reply(content=[ToolUse(name="weather", arguments={"city": "Rome"}, id="call_rome")]),
        Reply(content=[Say(text="Warm in Rome.")]),
    ]
    with ModelServer(replies, check_requests=False) as server:  # it keeps no response state
        client = make_client("responses", server, is_async=False)
        with instrument(client, sink=log, conversation_id="chained") as recording:
            first = client.responses.create(model="m", input="Weather in Rome?")
            client.responses.create(
                model="m",
                previous_response_id=first.id,
                input=[{"type": "function_call_output", "call_id": "call_rome", "output": "warm"}],
            )
            assert recording.flush()
    events = events_of(log, "chained")
    assert [e.content for e in events if isinstance(e, User)] == ["Weather in Rome?"]
    assert [(e.id, e.name, e.output) for e in events if isinstance(e, ToolResult)] == [
        ("call_rome", "weather", "warm")
    ]
    assert "".join(e.content for e in events if isinstance(e, Text)) == "Warm in Rome."


# -- failures of the instrumentation itself -----------------------------------------------------------------------


class RefusingLog(MemoryEventLog):
    async def append(self, conversation_id: str, events: Any) -> Any:
        raise RuntimeError("disk full")


def test_a_sink_that_refuses_events_never_breaks_the_caller() -> None:
    with ModelServer(script()) as server:
        client = make_client("chat", server, is_async=False)
        with instrument(client, sink=RefusingLog(), conversation_id="refused") as recording:
            history = chat_start()
            for turn, mode in enumerate(("plain", "stream", "helper")):
                chat_after(history, chat_turn(client, history, mode), turn)
            assert recording.flush()
            assert recording.lost > 0
    assert history[-1]["content"] == last_answer("chat")["content"]


def test_a_bug_in_the_instrumentation_never_breaks_the_caller(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The translator and the request reader raise: the caller's stream yields the same chunks,
    its calls return the same answers, and the failure is logged at debug level."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("instrumentation bug")

    caplog.set_level(logging.DEBUG, logger="convograph.instrument")
    with ModelServer([Reply(content=[Say(text="The same answer.")])] * 4) as server:
        client = make_client("chat", server, is_async=False)
        expected = [_chunks(client, "stream")]
        expected.append(
            client.chat.completions.create(model="m", messages=chat_start()).choices[0].message.content
        )
        monkeypatch.setattr(ChatTranslator, "feed", broken)
        monkeypatch.setattr(openai_sdk.ChatApi, "entries", broken)
        with instrument(client, sink=MemoryEventLog(), conversation_id="buggy") as recording:
            got = [_chunks(client, "stream")]
            got.append(
                client.chat.completions.create(model="m", messages=chat_start()).choices[0].message.content
            )
            assert recording.flush()
    assert got == expected
    assert "instrumentation bug" in caplog.text


def _chunks(client: Any, mode: str) -> list[str]:
    stream = client.chat.completions.create(model="m", messages=chat_start(), tools=[], stream=True)
    return [chunk.model_dump_json(exclude={"id", "created"}) for chunk in stream]


def test_a_hand_off_that_fails_never_breaks_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even the caller-side hooks (the hand-off to the worker) failing leaves calls and streams as
    they are."""
    from convograph.integrations.instrument import recorder

    with ModelServer([Reply(content=[Say(text="Still fine.")])] * 4) as server:
        client = make_client("messages", server, is_async=False)
        recording = instrument(client, sink=MemoryEventLog(), conversation_id="handoff")
        with monkeypatch.context() as patch:
            patch.setattr(
                recorder.Worker, "submit", lambda *args: (_ for _ in ()).throw(RuntimeError("full"))
            )
            request = {"model": "c", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
            assert client.messages.create(**request).content[0].text == "Still fine."
            texts = [
                e.delta.text
                for e in client.messages.create(**request, stream=True)
                if e.type == "content_block_delta"
            ]
            assert "".join(texts) == "Still fine."
            with client.messages.stream(**request) as stream:
                assert stream.get_final_text() == "Still fine."
        recording.uninstrument()


# -- edits and regenerations --------------------------------------------------------------------------------------


def _two_turns_then(api: str, change: str) -> tuple[list[Event], ModelServer]:
    """Two turns, then the third call twice: asked again as it was (``regenerate``), or with its
    question edited (``edit``)."""
    start, turn, _, after = APPS[api]
    log = MemoryEventLog()
    with ModelServer([*script(), Reply(content=[Say(text="A second answer.")])]) as server:
        client = make_client(api, server, is_async=False)
        with instrument(client, sink=log, conversation_id=f"{change}-{api}") as recording:
            history = start()
            after(history, turn(client, history, "stream"), 0)
            after(history, turn(client, history, "stream"), 1)
            turn(client, history, "stream")  # the answer the app throws away
            if change == "edit":
                history[-1] = {"role": "user", "content": "Thanks! And in Rome?"}
            turn(client, history, "stream")
            assert recording.flush()
    return events_of(log, f"{change}-{api}"), server


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_asking_again_regenerates_the_answer(api: str) -> None:
    from convograph.events import Regenerate

    events, server = _two_turns_then(api, "regenerate")
    assert len([e for e in events if isinstance(e, Regenerate)]) == 1
    assert [e.content for e in events if isinstance(e, User)] == [QUESTION, THANKS]
    second = {"role": "assistant", "content": "A second answer."}
    if api == "messages":
        second = {"role": "assistant", "content": [{"type": "text", "text": "A second answer."}]}
    assert projected_history(api, events) == [*sent_history(api, server.requests[-1].body), second]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_an_edited_question_starts_a_branch(api: str) -> None:
    from convograph.events import Edit

    events, server = _two_turns_then(api, "edit")
    assert [e.content for e in events if isinstance(e, Edit)] == ["Thanks! And in Rome?"]
    assert [e.content for e in events if isinstance(e, User)] == [QUESTION, THANKS]
    second = {"role": "assistant", "content": "A second answer."}
    if api == "messages":
        second = {"role": "assistant", "content": [{"type": "text", "text": "A second answer."}]}
    assert projected_history(api, events) == [*sent_history(api, server.requests[-1].body), second]


def _streamed_without_usage(client: Any, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A streamed call without ``stream_options.include_usage`` (the SDK's default): no usage."""
    accumulator = ChatAccumulator()
    for chunk in client.chat.completions.create(
        model="gpt-test", messages=messages, tools=CHAT_TOOLS, stream=True
    ):
        accumulator.add(chunk)
    message: dict[str, Any] = accumulator.message()
    return message


@pytest.mark.parametrize("mode", ["plain", "stream", "stream without usage"])
def test_an_agent_loop_of_tool_only_turns_is_recorded_once(mode: str) -> None:
    """A model that calls one tool after another without a word: each turn is recorded once, and
    the projection gives back the tool-only turns as they were sent, each with its own results
    (each call is a run of its own, whose start marks the turn when no usage was reported)."""
    log = MemoryEventLog()
    replies = [
        Reply(content=[ToolUse(name="weather", arguments={"city": "Paris"})]),
        Reply(content=[ToolUse(name="weather", arguments={"city": "Rome"})]),
        Reply(content=[Say(text="Paris 24 C, Rome 27 C.")]),
    ]
    with ModelServer(replies) as server:
        client = make_client("chat", server, is_async=False)
        with instrument(client, sink=log, conversation_id="agent-loop") as recording:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "Paris and Rome?"}]
            while True:
                if mode == "stream without usage":
                    message = _streamed_without_usage(client, messages)
                else:
                    message = chat_turn(client, messages, mode)
                messages.append(message)
                if not message.get("tool_calls"):
                    break
                for call in message["tool_calls"]:
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": "warm"})
            assert recording.flush()
    events = events_of(log, "agent-loop")
    assert [e.content for e in events if isinstance(e, User)] == ["Paris and Rome?"]
    assert len([e for e in events if isinstance(e, ToolResult)]) == 2
    assert len([e for e in events if isinstance(e, HarnessStart)]) == 3
    sent = normalise_chat(server.requests[-1].body["messages"])
    answer = {"role": "assistant", "content": "Paris 24 C, Rome 27 C."}
    assert projected_history("chat", events) == [*sent, answer]


def test_a_forked_child_records_through_its_own_worker(tmp_path: Any) -> None:
    """A pre-forking server forks after ``instrument()``: the child's calls are recorded by a
    worker and connections of its own."""
    import multiprocessing
    import warnings

    database = tmp_path / "events.db"
    with ModelServer([Reply(content=[Say(text="parent")]), Reply(content=[Say(text="child")])]) as server:
        client = make_client("chat", server, is_async=False)
        with instrument(client, sink=f"sqlite:///{database}", conversation_id="forked") as recording:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "parent asks"}])
            assert recording.flush()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
                child = multiprocessing.get_context("fork").Process(
                    target=_child_call, args=(client, recording)
                )
                child.start()
            child.join(60)
            assert child.exitcode == 0

    events = stored_events(database, "forked")
    assert [e.content for e in events if isinstance(e, User | Edit)] == ["parent asks", "child asks"]
    assert "".join(e.content for e in events if isinstance(e, Text)) == "parentchild"


def _child_call(client: Any, recording: Any) -> None:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "child asks"}])
    if not recording.flush(timeout=30):
        raise SystemExit(1)


def test_a_parsed_completion_is_recorded() -> None:
    """``chat.completions.parse`` (structured outputs) posts without ``create``: patched too."""
    import pydantic

    class City(pydantic.BaseModel):
        name: str
        country: str

    log = MemoryEventLog()
    with ModelServer([Reply(content=[Say(text='{"name": "Paris", "country": "France"}')])]) as server:
        client = make_client("chat", server, is_async=False)
        with instrument(client, sink=log, conversation_id="parsed") as recording:
            completion = client.chat.completions.parse(
                model="m", messages=[{"role": "user", "content": "A city?"}], response_format=City
            )
            assert recording.flush()
    assert completion.choices[0].message.parsed == City(name="Paris", country="France")
    events = events_of(log, "parsed")
    assert [e.content for e in events if isinstance(e, User)] == ["A city?"]
    assert (
        "".join(e.content for e in events if isinstance(e, Text)) == '{"name": "Paris", "country": "France"}'
    )
