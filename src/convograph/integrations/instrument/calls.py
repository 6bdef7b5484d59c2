"""One instrumented SDK call, from its request to its end, and the stream observers.

`CallRecord` is made on the caller's thread when the SDK method is called. Its hooks (`begin`,
`chunk`, `result`, `end`) only hand items to the worker (`convograph.integrations.instrument.
recorder`); everything else runs there:

1. ``begin``: the request's new entries (`convograph.integrations.instrument.history`: compared
   with the previous request of this API and the answer it got, or, on the first call here, with
   the conversation's stored projection) become
   ``user`` / ``tool_result`` events (and a run for assistant messages the app sends that were
   never recorded), then ``harness_start`` of the call's run (``agentId`` = the model).
2. ``chunk`` / ``result``: the SDK's stream items, or its whole response, go through the provider
   harness's own `Translator` (`convograph.harness.providers`): the same ``text`` / ``reasoning``
   / ``tool_call`` / ``usage`` events, ids and rules as a provider call.
3. ``end``: the translator's closing events (tool calls, usage), an ``error`` when the call failed
   (the SDK raised, the stream ended early, or the caller closed it first), and ``harness_end``
   (``reason`` ``final``, ``error`` or ``cancelled``, ``totalUsage``). Finalised exactly once.

Streams are observed in place (`observe_stream`): the SDK's stream object keeps its type; the
observer is a generator installed as the stream's own iterator (``_iterator``, which every way of
reading it goes through: iteration, ``text_stream``, ``until_done``, ``get_final_message``, the SDKs'
stream helpers) plus a ``close`` that finalises the call. Sync and async streams share the
`CallRecord` hooks and differ only in the observer generator.

Nothing here raises into the caller: a failing hook is logged at debug level and the call goes on.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterator, Hashable, Iterator, Mapping, Sequence
from typing import Any, Final, Protocol

from convograph.events import Edit, Event, HarnessEnd, HarnessStart, TotalUsage
from convograph.harness.base import MessageFormat
from convograph.harness.providers.base import Failure, Translator
from convograph.integrations.instrument.history import (
    BranchReader,
    Entry,
    branch_command,
    new_start,
    output_messages,
)
from convograph.integrations.instrument.recorder import Conversation, Sink, worker

__all__ = ["CLOSED_EARLY", "NOT_RECORDED", "CallRecord", "SdkApi", "observe_async_stream", "observe_stream"]

log = logging.getLogger("convograph.instrument")

BEGIN: Final = 0
CHUNK: Final = 1
RESULT: Final = 2
END: Final = 3

CLOSED_EARLY: Final = "cancelled: the caller closed the stream before the model finished"
NOT_RECORDED: Final = "(output not recorded)"
"""Ends a call whose output the instrumentation cannot read (a raw HTTP response): its run ends
``final`` without output, and the app's next request brings the answer in as history."""


class SdkApi(BranchReader, Protocol):
    """One API of one SDK (Chat Completions, Responses, Messages): how its requests read as
    entries and events, and which provider translator reads its responses."""

    name: str
    """For logs: ``"openai.chat"``, ``"openai.responses"``, ``"anthropic.messages"``."""
    format: MessageFormat
    """The messages projection its requests are compared with."""
    api_name: str
    """How error messages name the API (``"OpenAI"``)."""
    response_type: type
    """The SDK's whole-response type (``ChatCompletion``, ...)."""
    stream_types: tuple[type, ...]
    """The SDK's stream types."""

    def translator(self, parent_id: str | None) -> Translator: ...

    def entries(self, request: Mapping[str, Any]) -> list[Entry]:
        """The request's conversation as comparable entries (system prompts left out)."""
        ...

    def history_keys(self, messages: list[dict[str, Any]]) -> list[Hashable]:
        """The keys of the recorded conversation (its projection in `format`)."""
        ...

    def merge(self, keys: list[Hashable]) -> list[Hashable]:
        """``keys`` with consecutive tool-call-only turns merged (`merge_call_turns`)."""
        ...

    def continues_server_state(self, request: Mapping[str, Any]) -> bool:
        """The request holds only new input, the rest kept by the API (``previous_response_id``)."""
        ...

    def request_events(
        self, new: Sequence[Entry], request: Sequence[Entry], names: Mapping[str, str], parent_id: str | None
    ) -> list[Event]:
        """Events for the ``new`` entries; ``names`` maps recorded tool call ids to tool names."""
        ...

    def feed_result(self, translator: Translator, result: Any, out: list[Event]) -> None:
        """A whole (non-streaming) response through ``translator``."""
        ...

    def failure(self, exc: BaseException, base_url: str) -> str:
        """What an exception the SDK raised means (`convograph.harness.providers` wording)."""
        ...


class CallRecord:
    """One SDK call (module docstring). The hooks run on the caller's thread and never raise."""

    __slots__ = (
        "__weakref__",
        "_conversation",
        "_ended",
        "_output",
        "_request_keys",
        "_translator",
        "api",
        "base_url",
        "conversation_id",
        "finalized",
        "model",
        "parent_id",
        "request",
        "sink",
    )

    def __init__(
        self,
        api: SdkApi,
        sink: Sink,
        conversation_id: str,
        parent_id: str | None,
        request: dict[str, Any],
        base_url: str,
    ) -> None:
        self.api = api
        self.base_url = base_url
        self.sink = sink
        self.conversation_id = conversation_id
        self.parent_id = parent_id
        self.request = request
        model = request.get("model")
        self.model = model if isinstance(model, str) else None
        self.finalized = False
        self._conversation: Conversation | None = None
        self._translator: Translator | None = None
        self._output: list[Event] = []
        self._request_keys: list[Hashable] = []
        self._ended = False

    # -- hooks (caller's thread) -----------------------------------------------------------------

    def begin(self) -> None:
        self._submit(BEGIN, None)

    def chunk(self, item: Any) -> None:
        self._submit(CHUNK, item)

    def result(self, response: Any) -> None:
        """A whole response arrived: record it and end the call."""
        if not self.finalized:
            self.finalized = True
            self._submit(RESULT, response)

    def end(self, error: BaseException | str | None = None) -> None:
        """The call ended: normally (``None``), with an SDK exception, with a message
        (`CLOSED_EARLY`), or unread (`NOT_RECORDED`). Only the first end counts."""
        if not self.finalized:
            self.finalized = True
            self._submit(END, error)

    def _submit(self, kind: int, payload: Any) -> None:
        try:
            worker().submit(self, kind, payload)
        except Exception:  # (a worker that cannot start at interpreter exit)
            log.debug("could not hand %s over to the instrumentation", self.api.name, exc_info=True)

    # -- the worker ------------------------------------------------------------------------------

    async def handle(self, kind: int, payload: Any) -> Conversation | None:
        if kind == BEGIN:
            return await self._begin()
        conversation, translator = self._conversation, self._translator
        if conversation is None or translator is None or self._ended:
            return None  # `begin` failed (already logged)
        out: list[Event] = []
        try:
            if kind == CHUNK:
                translator.feed(payload, out)
            elif kind == RESULT:
                self.api.feed_result(translator, payload, out)
                self._finish(out, None)
            else:
                self._finish(out, payload)
        except Failure as exc:  # a failed response (Responses ``status: failed``), an error event
            self._finish(out, f"{self.api.api_name} API: {exc.message}")
        if out:
            self._output.extend(out)
            conversation.outbox.extend(out)
        if self._ended:
            output = conversation.shadow.apply_output(self._output)
            self._output = []
            if not self.api.continues_server_state(self.request):
                # What the app sends next starts with this request and the answer it got.
                answer = self.api.history_keys(output_messages(output, self.api.format))
                conversation.expected[self.api.name] = self.api.merge(self._request_keys + answer)
        return conversation

    async def _begin(self) -> Conversation:
        conversation = await self.sink.conversation(self.conversation_id)
        self._conversation = conversation
        api, shadow = self.api, conversation.shadow
        entries = api.entries(self.request)
        start = 0
        events: list[Event] = []
        keys = [entry.key for entry in entries]
        if not api.continues_server_state(self.request):
            expected = conversation.expected.pop(api.name, None)
            if expected is None:  # the first call of this API here: the conversation as stored
                expected = api.history_keys(shadow.messages(api.format))
            start, diverged = new_start(expected, keys)
            command = branch_command(shadow, expected, entries, start, api) if diverged else None
            if command is not None:
                events.append(command)
                start += isinstance(command, Edit)  # the edit holds the changed user message
            elif diverged:
                log.debug("the request leaves the recorded history at entry %d; recording from there", start)
        events += api.request_events(entries[start:], entries, shadow.call_names, self.parent_id)
        shadow.apply(events)
        self._request_keys = keys
        translator = self._translator = api.translator(self.parent_id)
        start_event = HarnessStart(
            run_id=translator.run_id,
            parent_id=self.parent_id,
            agent_id=self.model,
            event_id=translator.event_id(),
        )
        self._output.append(start_event)
        conversation.outbox.extend(events)
        conversation.outbox.append(start_event)
        return conversation

    def _finish(self, out: list[Event], error: BaseException | str | None) -> None:
        """Closing events: tool calls and usage of a complete call, the error of a failed one,
        then ``harness_end``. Once."""
        translator = self._translator
        assert translator is not None
        self._ended = True
        reason = "final"
        message: str | None = None
        if error is None:
            try:
                translator.finish(out)
            except Failure as exc:
                message = f"{self.api.api_name} API: {exc.message}"
        elif isinstance(error, str):
            message = None if error == NOT_RECORDED else error
        elif isinstance(error, Exception):
            message = f"{self.api.api_name} API: {self.api.failure(error, self.base_url)}"
        else:  # a task cancellation or a KeyboardInterrupt while the call ran
            message = f"cancelled: {type(error).__name__} while the call was running"
        if message is not None:
            reason = "cancelled" if message.startswith("cancelled:") else "error"
            out.append(translator.error(message))
        usage = translator.usage
        total = (
            TotalUsage(
                input_tokens=usage[0],
                output_tokens=usage[1],
                cache_read_tokens=usage[2],
                cache_creation_tokens=usage[3],
            )
            if usage is not None
            else None
        )
        out.append(
            HarnessEnd(
                run_id=translator.run_id,
                parent_id=self.parent_id,
                agent_id=self.model,
                reason=reason,
                iterations=1,
                total_usage=total,
                event_id=translator.event_id(),
            )
        )


# -- stream observers ----------------------------------------------------------------------------


def observe_stream(stream: Any, call: CallRecord) -> bool:
    """Observe a sync SDK stream in place (module docstring). False when this stream has no
    iterator to observe (another SDK version): it is then left untouched."""
    inner = _inner_iterator(stream)
    if inner is None:
        return False
    stream._iterator = _observed(inner, call)
    _hook_close(stream, call, is_async=False)
    return True


def observe_async_stream(stream: Any, call: CallRecord) -> bool:
    """`observe_stream` for an async SDK stream."""
    inner = _inner_iterator(stream)
    if inner is None:
        return False
    stream._iterator = _observed_async(inner, call)
    _hook_close(stream, call, is_async=True)
    return True


def _inner_iterator(stream: Any) -> Any:
    try:
        return stream._iterator
    except AttributeError:
        log.debug("%s has no _iterator: its output is not recorded", type(stream).__name__)
        return None


def _observed(inner: Iterator[Any], call: CallRecord) -> Iterator[Any]:
    """The stream's items, each handed to ``call``; the end, a failure or a close ends the call.
    Holds no reference to the stream (a dropped stream is still freed by reference counting)."""
    try:
        for item in inner:
            call.chunk(item)
            yield item
    except GeneratorExit:
        call.end(CLOSED_EARLY)
        close = getattr(inner, "close", None)
        if close is not None:
            close()
        raise
    except BaseException as exc:
        call.end(exc)
        raise
    call.end()


async def _observed_async(inner: AsyncIterator[Any], call: CallRecord) -> AsyncIterator[Any]:
    """`_observed` for an async stream."""
    try:
        async for item in inner:
            call.chunk(item)
            yield item
    except GeneratorExit:
        call.end(CLOSED_EARLY)
        close = getattr(inner, "aclose", None)
        if close is not None:
            await close()
        raise
    except BaseException as exc:
        call.end(exc)
        raise
    call.end()


def _hook_close(stream: Any, call: CallRecord, *, is_async: bool) -> None:
    """Give the stream a ``close`` that closes it as before, then ends the call (a stream closed
    before its end was recorded as cancelled). The stream is held weakly: no reference cycle."""
    original = type(stream).close
    ref = weakref.ref(stream)
    if is_async:

        async def aclose() -> None:
            target = ref()
            if target is not None:
                await original(target)
            call.end(CLOSED_EARLY)

        stream.close = aclose
    else:

        def close() -> None:
            target = ref()
            if target is not None:
                original(target)
            call.end(CLOSED_EARLY)

        stream.close = close
