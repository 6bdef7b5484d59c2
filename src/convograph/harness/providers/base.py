"""What every provider harness shares: the call loop with retries, time limits and cancellation,
and the per-attempt `Translator` that turns one SDK stream into convograph events.

A subclass (one per API) supplies three leaves: `StreamingProvider._open` (start the SDK's streaming
call), `StreamingProvider._translator` (a fresh `Translator` for one attempt) and
`StreamingProvider._classify` (an SDK exception as a `Failure`). The base owns everything else.

Event rules (seed 003, docs/harness.md):

- Each attempt (one HTTP request) is one run: a fresh uuid7 ``runId``; ``parentId`` is
  ``request.parent_id``; every event has ``eventId = "<runId>:<n>"`` (n counts the run's events), so
  re-posting an event is idempotent. A call that needs no retry therefore has exactly one run.
- A failed attempt yields one ``error`` naming the cause and what happens next ("retrying in 1.2 s,
  attempt 1 of 4" or "giving up"). The call failed iff its last event is an ``error``.
- An attempt is retried only if it failed in a retryable way (429, 408, 409, 5xx, 529, a dropped
  connection, a first-token or idle timeout, a retryable mid-stream error) **before yielding any
  event**: streamed text is already in the conversation, and repeating it would duplicate it.
- Tool calls are yielded after the stream ends, then one ``usage`` (when the API reported it).
- Cancelling the task that iterates yields an ``error`` ("cancelled ...") and re-raises
  `asyncio.CancelledError` on the next pull; `ProviderCall.aclose` on an unfinished call returns
  that ``error`` event to the caller (it can no longer be yielded). Never silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Final, Self

import httpx2

from convograph.events import Error, Event, Reasoning, Text, ToolCall, Usage
from convograph.harness.base import MessageFormat, ModelRequest
from convograph.harness.ids import new_id
from convograph.harness.retry import RetryPolicy, Timeouts, retry_after_seconds

__all__ = [
    "Failure",
    "ProviderCall",
    "StreamingProvider",
    "Translator",
    "classify_status",
    "classify_transport",
    "detail_of",
    "retryable_kind",
    "tool_input",
]


class Failure(Exception):
    """Why an attempt failed, and whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after


def tool_input(raw: str) -> Any:
    """Parsed tool arguments; ``""`` is ``{}``; malformed JSON becomes upstream's
    ``{"__toolParseError": True, "parseError", "rawArguments"}``."""
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        return {"__toolParseError": True, "parseError": str(exc), "rawArguments": raw}


class Translator:
    """One attempt's events: ids, block ids, accumulated tool calls and usage. Subclasses implement
    `feed` (one SDK stream item -> events appended to ``out``) and `finish` (events after the stream,
    or a `Failure` when the stream ended before the model finished)."""

    def __init__(self, parent_id: str | None) -> None:
        self.run_id = new_id()
        self.parent_id = parent_id
        self.count = 0
        self.emitted = False
        """Whether any event of this attempt reached the caller (then it is not retried)."""
        self.calls: dict[Any, list[str]] = {}
        """Tool calls by the API's key: [id, name, argument pieces...]."""
        self.usage: tuple[int, int, int | None, int | None] | None = None

    def event_id(self) -> str:
        self.count += 1
        return f"{self.run_id}:{self.count - 1}"

    def text(self, block_id: str, content: str) -> Text:
        return Text(
            run_id=self.run_id,
            parent_id=self.parent_id,
            id=block_id,
            content=content,
            event_id=self.event_id(),
        )

    def reasoning(
        self, block_id: str, content: str, *, signature: str | None = None, redacted_data: str | None = None
    ) -> Reasoning:
        return Reasoning(
            run_id=self.run_id,
            parent_id=self.parent_id,
            id=block_id,
            content=content,
            signature=signature,
            redacted_data=redacted_data,
            event_id=self.event_id(),
        )

    def error(self, message: str) -> Error:
        return Error(run_id=self.run_id, parent_id=self.parent_id, message=message, event_id=self.event_id())

    def set_usage(
        self,
        input_tokens: int,
        output_tokens: int,
        cache_read: int | None = None,
        cache_creation: int | None = None,
    ) -> None:
        """Record the call's usage: ``input_tokens`` is the whole prompt, cached tokens included;
        zero cache counts are left out."""
        self.usage = (input_tokens, output_tokens, cache_read or None, cache_creation or None)

    def closing_events(self, out: list[Event]) -> None:
        """The accumulated tool calls (in the order they started), then the usage."""
        for call_id, name, *pieces in self.calls.values():
            out.append(
                ToolCall(
                    run_id=self.run_id,
                    parent_id=self.parent_id,
                    id=call_id or f"call_{new_id().replace('-', '')[:24]}",
                    name=name,
                    input=tool_input("".join(pieces)),
                    event_id=self.event_id(),
                )
            )
        if self.usage is not None:
            input_tokens, output_tokens, cache_read, cache_creation = self.usage
            out.append(
                Usage(
                    run_id=self.run_id,
                    parent_id=self.parent_id,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    cache_read_tokens=cache_read,
                    cache_creation_tokens=cache_creation,
                    event_id=self.event_id(),
                )
            )

    def feed(self, item: Any, out: list[Event]) -> None:
        raise NotImplementedError

    def finish(self, out: list[Event]) -> None:
        raise NotImplementedError


class _Watchdog:
    """Enforces `Timeouts` on one attempt with one timer handle, re-armed lazily (O(1) per chunk:
    the chunk loop only stamps when a read starts and ends). When a limit passes during a read, the
    reading task is cancelled and `expired` names the limit; when it passes while the caller holds
    an event, the next read fails at once. Time the caller spends between reads is not "idle"."""

    __slots__ = ("_handle", "_loop", "deadline", "expired", "first", "read_since", "reader", "timeouts")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeouts: Timeouts, deadline: float) -> None:
        self._loop = loop
        self.timeouts = timeouts
        self.deadline = deadline
        self.first = True
        """No streamed item yet (the first-token limit applies, not the idle one)."""
        self.read_since: float = loop.time()
        self.reader: asyncio.Task[Any] | None = None
        self.expired: str | None = None
        self._handle = loop.call_at(min(deadline, self.read_since + timeouts.first_token), self._fire)

    def _fire(self) -> None:
        now = self._loop.time()
        if now >= self.deadline:
            self.expired = "total"
        elif self.reader is not None:
            limit = self.timeouts.first_token if self.first else self.timeouts.idle
            if now - self.read_since >= limit:
                self.expired = "first_token" if self.first else "idle"
            else:
                self._handle = self._loop.call_at(min(self.deadline, self.read_since + limit), self._fire)
                return
        else:  # the caller holds an event: look again one idle period from now
            self._handle = self._loop.call_at(min(self.deadline, now + self.timeouts.idle), self._fire)
            return
        if self.reader is not None:
            self.reader.cancel()

    def first_item(self) -> None:
        """The first streamed item arrived: from now on the idle limit applies (once per attempt)."""
        self.first = False
        self._handle.cancel()
        now = self._loop.time()
        self._handle = self._loop.call_at(min(self.deadline, now + self.timeouts.idle), self._fire)

    def failure(self) -> Failure:
        limits = self.timeouts
        if self.expired == "first_token":
            return Failure(
                f"no response within {limits.first_token:g} s (first-token time limit)", retryable=True
            )
        if self.expired == "idle":
            return Failure(f"the stream was silent for {limits.idle:g} s (idle time limit)", retryable=True)
        return Failure(f"the call exceeded its total time limit of {limits.total:g} s", retryable=False)

    def disarm(self) -> None:
        self._handle.cancel()


class ProviderCall:
    """The events of one model call: an ``AsyncIterator[Event]`` (what `Provider.invoke` returns).

    `aclose` ends an unfinished call, closes its HTTP response and returns the ``error`` event
    ("cancelled ...") that ends the call's record, for the caller to record; after a task
    cancellation it re-raises `asyncio.CancelledError` (see the module docstring)."""

    def __init__(self, provider: StreamingProvider, request: ModelRequest) -> None:
        self.translator: Translator | None = None
        self.finished = False
        self.cancelled = False
        """A task cancellation was reported with an ``error`` event and is to be re-raised."""
        self._events = provider._run(request, self)

    def __aiter__(self) -> ProviderCall:
        return self

    async def __anext__(self) -> Event:
        if self.cancelled:
            await self._events.aclose()
            raise asyncio.CancelledError
        try:
            return await self._events.__anext__()
        except StopAsyncIteration:
            self.finished = True
            raise

    async def aclose(self) -> Error | None:
        """Stop the call. Returns the ``error`` event that records the stop when the call had not
        finished (None otherwise)."""
        pending = self.cancelled
        record: Error | None = None
        if not self.finished and not pending and self.translator is not None:
            record = self.translator.error(
                "cancelled: the caller closed the stream before the model finished"
            )
        self.finished = True
        await self._events.aclose()
        if pending:
            raise asyncio.CancelledError
        return record


_CANCELLED: Final = "cancelled: the task running the model call was cancelled"


class StreamingProvider:
    """Base of the provider harnesses (module docstring). Subclasses set `api_name`, `key_env` and
    `message_format`, and implement `_open`, `_translator` and `_classify`."""

    api_name = "model"
    """How error messages name the API ("OpenAI", "Anthropic")."""
    key_env = ""
    """The environment variable holding the API key (named by authentication errors)."""

    def __init__(self, *, retry: RetryPolicy | None = None, timeouts: Timeouts | None = None) -> None:
        self.retry = retry or RetryPolicy()
        self.timeouts = timeouts or Timeouts()

    @property
    def message_format(self) -> MessageFormat:
        raise NotImplementedError

    def invoke(self, request: ModelRequest) -> ProviderCall:
        """The events of one model call (module docstring)."""
        return ProviderCall(self, request)

    async def aclose(self) -> None:
        """Close the SDK client's connections (a subclass that holds one overrides this)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _open(self, request: ModelRequest) -> AsyncIterator[Any]:
        """Start the SDK's streaming call; returns its stream of items."""
        raise NotImplementedError

    def _translator(self, request: ModelRequest) -> Translator:
        raise NotImplementedError

    def _classify(self, exc: Exception) -> Failure:
        """An exception raised by the SDK (or while translating) as a `Failure`."""
        raise NotImplementedError

    async def _run(self, request: ModelRequest, call: ProviderCall) -> AsyncGenerator[Event]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeouts.total
        attempt = 1
        translator = call.translator = self._translator(request)
        while True:
            out: list[Event] = []
            watchdog = _Watchdog(loop, self.timeouts, deadline)
            stream: Any = None
            failure: Failure | None = None
            try:
                watchdog.reader = asyncio.current_task()
                stream = await self._open(request)
                read = stream.__anext__
                while True:
                    watchdog.reader = asyncio.current_task()
                    watchdog.read_since = loop.time()
                    try:
                        item = await read()
                    except StopAsyncIteration:
                        break
                    finally:
                        watchdog.reader = None
                    if watchdog.first:
                        watchdog.first_item()
                    translator.feed(item, out)
                    if out:
                        translator.emitted = True
                        for event in out:
                            yield event
                        out.clear()
                    if watchdog.expired is not None:
                        raise watchdog.failure()
                translator.finish(out)
            except asyncio.CancelledError:
                if watchdog.expired is None:
                    call.cancelled = True
                    yield translator.error(_CANCELLED)
                    raise
                _uncancel()
                failure = watchdog.failure()
            except Failure as exc:
                failure = exc
            except Exception as exc:
                failure = self._classify(exc)
            finally:
                watchdog.disarm()
                await _close(stream)
            if failure is None:
                for event in out:
                    yield event
                return
            delay = self._retry_delay(failure, translator, attempt, loop.time(), deadline)
            yield translator.error(self._describe(failure, attempt, delay))
            if delay is None:
                return
            attempt += 1
            translator = call.translator = self._translator(request)
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                call.cancelled = True
                yield translator.error(_CANCELLED)
                raise

    def _retry_delay(
        self, failure: Failure, translator: Translator, attempt: int, now: float, deadline: float
    ) -> float | None:
        """Seconds before the next attempt, or None when the call ends here."""
        if not failure.retryable or attempt >= self.retry.max_attempts:
            return None
        if translator.emitted:
            failure.message += "; not retried: part of the answer had already streamed"
            return None
        if failure.retry_after is not None and failure.retry_after > self.retry.max_retry_after:
            failure.message += (
                f" (the server asks to wait {failure.retry_after:g} s, more than the "
                f"{self.retry.max_retry_after:g} s this harness waits)"
            )
            return None
        delay = self.retry.delay(attempt, failure.retry_after)
        if now + delay >= deadline:
            failure.message += f" (no time left for a retry within the {self.timeouts.total:g} s total limit)"
            return None
        return delay

    def _describe(self, failure: Failure, attempt: int, delay: float | None) -> str:
        where = f"attempt {attempt} of {self.retry.max_attempts}"
        if delay is not None:
            return f"{self.api_name} API: {failure.message}; retrying in {delay:.2f} s ({where})"
        return f"{self.api_name} API: {failure.message} ({where}, giving up)"


def _uncancel() -> None:
    """Undo the cancellation a `_Watchdog` requested (so enclosing timeouts keep counting right)."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


async def _close(stream: Any) -> None:
    """Close an SDK stream (its HTTP response), whatever state it is in."""
    if stream is None:
        return
    close = getattr(stream, "close", None)
    if close is None:
        return
    # Closing a broken stream may fail too; the failure is already reported.
    with contextlib.suppress(Exception):
        await close()


def detail_of(body: object, fallback: str) -> str:
    """The human message inside an API error body (``{"error": {"message"}}``, either API)."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    if isinstance(body, str) and body:
        return body[:500]
    return fallback


def classify_status(status: int, detail: str, headers: Mapping[str, str] | None, key_env: str) -> Failure:
    """A failed HTTP status as a `Failure` (shared by every provider)."""
    where = f"HTTP {status}: {detail}"
    if status == 401:
        return Failure(f"the API key was rejected ({where}); set {key_env} to a valid key", retryable=False)
    if status == 403:
        return Failure(
            f"permission denied ({where}); check that {key_env} may use this model", retryable=False
        )
    retry_after = retry_after_seconds(headers)
    if status == 429:
        return Failure(f"rate limited ({where})", retryable=True, retry_after=retry_after)
    if status == 529:
        return Failure(f"overloaded ({where})", retryable=True, retry_after=retry_after)
    if status >= 500 or status in (408, 409):
        return Failure(f"server error ({where})", retryable=True, retry_after=retry_after)
    return Failure(f"request rejected ({where})", retryable=False)


def retryable_kind(kind: str) -> bool:
    """Mid-stream error types worth another attempt: server-side trouble, not a bad request."""
    lowered = kind.lower()
    return not any(
        word in lowered for word in ("invalid", "context_length", "not_found", "permission", "auth")
    )


def classify_transport(exc: Exception, sdk: Any, base_url: str) -> Failure | None:
    """A connect timeout or a failed / dropped connection, for either SDK: their ``APITimeoutError``
    / ``APIConnectionError``, or the HTTP client's own transport error when an SDK lets one through
    mid-stream (Anthropic's stream does). None otherwise."""
    if isinstance(exc, sdk.APITimeoutError | httpx2.TimeoutException):
        return Failure(f"timed out talking to {base_url}", retryable=True)
    if isinstance(exc, sdk.APIConnectionError | httpx2.TransportError):
        cause = exc if isinstance(exc, httpx2.TransportError) else exc.__cause__ or exc.__context__
        reason = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return Failure(f"connection to {base_url} failed or was dropped{reason}", retryable=True)
    return None
