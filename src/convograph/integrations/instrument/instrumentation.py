"""``instrument()`` / ``uninstrument()``: which clients are recorded, where, and for how long.

A registry maps instrumented clients (weakly) and whole SDKs to their `Instrumentation`; the SDK
methods are patched while at least one instrumentation of that SDK is live and restored (the same
function objects) when the last one ends. `conversation()` sets the conversation (and parent) of
the calls made in a context (a web request, a task), over the instrumentation's own.

At interpreter exit every live instrumentation is flushed (for at most its ``flush_timeout``).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures.thread  # noqa: F401 - its exit hook must be registered before ours
import contextlib
import contextvars
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, Final, Self

from convograph.harness.ids import new_id
from convograph.integrations.instrument import anthropic_sdk, openai_sdk
from convograph.integrations.instrument.calls import CallRecord, SdkApi
from convograph.integrations.instrument.patching import Patch, install
from convograph.integrations.instrument.recorder import Sink, SinkTarget, wait, worker
from convograph.store import validate_conversation_id

__all__ = ["Instrumentation", "conversation", "instrument", "uninstrument"]

log = logging.getLogger("convograph.instrument")

_SDKS: Final = {
    "openai": (openai_sdk.PATCHES, {}),
    "anthropic": (anthropic_sdk.PATCHES, anthropic_sdk.STREAM_MANAGERS),
}


@dataclass(frozen=True, slots=True)
class _Scope:
    conversation_id: str | None
    parent_id: str | None


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "convograph_instrument_scope", default=None
)


class Instrumentation:
    """What one `instrument` call set up. Use it as a context manager (sync or async) to end it,
    or call `uninstrument`. ``conversation_id`` is where calls go (a fresh uuid7 unless given)."""

    def __init__(
        self,
        sdks: tuple[str, ...],
        client: Any,
        sink: Sink,
        conversation_id: str,
        parent_id: str | None,
        flush_timeout: float,
    ) -> None:
        self.sdks = sdks
        self.client = weakref.ref(client) if client is not None else None
        self.sink = sink
        self.conversation_id = conversation_id
        self.parent_id = parent_id
        self.flush_timeout = flush_timeout
        self.active = True

    def __repr__(self) -> str:
        what = "a client" if self.client is not None else " and ".join(self.sdks)
        return f"<Instrumentation of {what} into {self.sink.description} ({self.conversation_id})>"

    @property
    def lost(self) -> int:
        """Events that could not be stored so far (the sink refused them or could not be reached)."""
        return self.sink.lost

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every call recorded so far is stored; False after ``timeout`` seconds
        (default `flush_timeout`). Blocks the calling thread: in a coroutine use `aflush`."""
        limit = self.flush_timeout if timeout is None else timeout
        finished, _ = wait(worker().run_after_pending(self.sink.flush), limit)
        return finished

    async def aflush(self, timeout: float | None = None) -> bool:
        """`flush` for a coroutine (does not block the event loop)."""
        limit = self.flush_timeout if timeout is None else timeout
        future = asyncio.wrap_future(worker().run_after_pending(self.sink.flush))
        try:
            await asyncio.wait_for(asyncio.shield(future), limit)
        except TimeoutError:
            return False
        return True

    def uninstrument(self, timeout: float | None = None) -> bool:
        """Stop recording (restoring the SDK methods when no other instrumentation needs them),
        then store what is queued, for at most ``timeout`` seconds. Returns whether everything was
        stored. Idempotent."""
        if not _REGISTRY.remove(self):
            return True
        limit = self.flush_timeout if timeout is None else timeout
        finished, stored = wait(worker().run_after_pending(lambda: self.sink.aclose(limit)), limit + 1)
        return bool(finished and stored)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.uninstrument()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.uninstrument)


class _Registry:
    """Live instrumentations by client and by SDK, and the patches they share."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.clients: weakref.WeakKeyDictionary[Any, Instrumentation] = weakref.WeakKeyDictionary()
        self.sdks: dict[str, Instrumentation] = {}
        self.patches: dict[str, list[Patch]] = {}
        self.live: list[Instrumentation] = []

    def add(self, instrumentation: Instrumentation, client: Any) -> None:
        with self.lock:
            if client is not None:
                existing = self.clients.get(client)
                if existing is not None:
                    raise ValueError(
                        f"this client is already instrumented ({existing!r}); uninstrument it first"
                    )
                self.clients[client] = instrumentation
            else:
                for sdk in instrumentation.sdks:
                    if sdk in self.sdks:
                        raise ValueError(
                            f"{sdk} is already instrumented ({self.sdks[sdk]!r}); uninstrument it first"
                        )
                for sdk in instrumentation.sdks:
                    self.sdks[sdk] = instrumentation
            for sdk in instrumentation.sdks:
                if sdk not in self.patches:
                    table, managers = _SDKS[sdk]
                    self.patches[sdk] = install(sdk, table, start_call, managers)
            self.live.append(instrumentation)

    def remove(self, instrumentation: Instrumentation) -> bool:
        with self.lock:
            if not instrumentation.active:
                return False
            instrumentation.active = False
            self.live.remove(instrumentation)
            for sdk, owner in list(self.sdks.items()):
                if owner is instrumentation:
                    del self.sdks[sdk]
            client = instrumentation.client() if instrumentation.client is not None else None
            if client is not None and self.clients.get(client) is instrumentation:
                del self.clients[client]
            needed = {sdk for live in self.live for sdk in live.sdks}
            for sdk in [sdk for sdk in self.patches if sdk not in needed]:
                for patch in self.patches.pop(sdk):
                    patch.restore()
            return True

    def find(self, client: Any, sdk: str) -> Instrumentation | None:
        found = self.clients.get(client) if client is not None else None
        return found if found is not None else self.sdks.get(sdk)


_REGISTRY: Final = _Registry()


def start_call(resource: Any, api: SdkApi, sdk: str, kwargs: dict[str, Any]) -> CallRecord | None:
    """The record of a call on ``resource`` (`convograph.integrations.instrument.patching.StartCall`).
    Copies the request's message list (the app may append to it once the call returns) and turns
    a one-shot iterable of messages into a list the SDK then reads (``kwargs`` is the call's own)."""
    try:
        client = getattr(resource, "_client", None)
        instrumentation = _REGISTRY.find(client, sdk)
        if instrumentation is None or not instrumentation.active:
            return None
        request = dict(kwargs)
        for key in ("messages", "input"):
            value = kwargs.get(key)
            if isinstance(value, list):
                request[key] = list(value)
            elif (
                value is not None and not isinstance(value, str | tuple | dict) and hasattr(value, "__iter__")
            ):
                kwargs[key] = list(value)
                request[key] = list(kwargs[key])
        scope = _SCOPE.get()
        conversation_id = instrumentation.conversation_id
        parent_id = instrumentation.parent_id
        if scope is not None:
            conversation_id = scope.conversation_id or conversation_id
            parent_id = scope.parent_id if scope.parent_id is not None else parent_id
        base_url = str(getattr(client, "base_url", ""))
        return CallRecord(api, instrumentation.sink, conversation_id, parent_id, request, base_url)
    except Exception:
        log.debug("could not start recording a %s call", api.name, exc_info=True)
        return None


def _sdk_of(target: Any) -> tuple[tuple[str, ...], Any]:
    """``(sdks, client)`` for ``instrument``'s target."""
    if target is None:
        available = tuple(sdk for sdk in _SDKS if _importable(sdk))
        if not available:
            raise ImportError("neither openai nor anthropic is installed: nothing to instrument")
        return available, None
    if isinstance(target, ModuleType):
        if target.__name__ not in _SDKS:
            raise ValueError(f"instrument() takes the openai or anthropic module, not {target.__name__}")
        return (target.__name__,), None
    root = type(target).__module__.split(".", 1)[0]
    if root not in _SDKS or not hasattr(target, "base_url"):
        raise TypeError(
            "instrument() takes an openai or anthropic client (OpenAI, AsyncOpenAI, Anthropic, "
            f"AsyncAnthropic, ...), the openai / anthropic module, or nothing; got {type(target).__name__}"
        )
    return (root,), target


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def instrument(
    target: Any = None,
    *,
    sink: SinkTarget = None,
    conversation_id: str | None = None,
    parent_id: str | None = None,
    api_key: str | None = None,
    flush_timeout: float = 10.0,
) -> Instrumentation:
    """Record every call of ``target`` as convograph events, with no change to the calling code.

    ``target``: an ``openai`` / ``anthropic`` client (only its calls), the ``openai`` or
    ``anthropic`` module (every client of that SDK), or None (every client of both).
    ``sink``: a ``convograph serve`` URL (``api_key`` for its key), an event-log URL, an
    `EventLog` or a `ConvographClient`; default: ``$CONVOGRAPH_DATABASE_URL`` or
    ``.convograph/events.db`` (what ``convograph serve`` shows). ``conversation_id``: where calls go
    (a fresh id when None; `conversation` overrides it per context). ``parent_id``: the ``parentId``
    of the recorded events. docs/integrations.md describes what is recorded."""
    if flush_timeout <= 0:
        raise ValueError(f"flush_timeout must be positive, got {flush_timeout}")
    sdks, client = _sdk_of(target)
    cid = validate_conversation_id(conversation_id) if conversation_id is not None else new_id()
    instrumentation = Instrumentation(
        sdks, client, Sink(sink, api_key=api_key), cid, parent_id, flush_timeout
    )
    _REGISTRY.add(instrumentation, client)
    _ensure_exit_flush()
    try:  # open the sink now (`Sink.open`); a sink that cannot open now is tried again by calls
        wait(worker().run_after_pending(instrumentation.sink.open), flush_timeout)
    except Exception:
        log.debug("could not open %s yet", instrumentation.sink.description, exc_info=True)
    return instrumentation


def uninstrument(target: Any = None, *, timeout: float | None = None) -> bool:
    """End the instrumentation of ``target`` (a client or SDK module given to `instrument`), or of
    everything when None; returns whether everything recorded was stored in time."""
    with _REGISTRY.lock:
        live = list(_REGISTRY.live)
    if target is not None:
        if isinstance(target, ModuleType):
            live = [i for i in live if i.client is None and target.__name__ in i.sdks]
        else:
            live = [i for i in live if i.client is not None and i.client() is target]
    stored = [i.uninstrument(timeout) for i in live]  # every one, even after a failure
    return all(stored)


@contextlib.contextmanager
def conversation(conversation_id: str | None = None, *, parent_id: str | None = None) -> Iterator[None]:
    """Record the calls made in this context (this thread, or this task and the tasks it starts)
    into ``conversation_id`` (with ``parent_id``), whatever the instrumentation's own settings."""
    if conversation_id is not None:
        validate_conversation_id(conversation_id)
    token = _SCOPE.set(_Scope(conversation_id, parent_id))
    try:
        yield
    finally:
        _SCOPE.reset(token)


_EXIT_HOOKED = False


def _ensure_exit_flush() -> None:
    """Flush at exit, in `threading`'s own exit hooks (what `concurrent.futures` uses): they run
    before the interpreter joins its threads and, registered after `concurrent.futures.thread`'s,
    before the loop's executor shuts down (a first connection may still resolve a host name).
    `atexit` is the fallback where they are missing. Nothing can start a thread by then (Python
    3.12): `Sink.open` opened the sink when it was instrumented."""
    global _EXIT_HOOKED
    if not _EXIT_HOOKED:
        _EXIT_HOOKED = True
        register = getattr(threading, "_register_atexit", None)
        if register is not None:
            register(_flush_at_exit)
        else:  # pragma: no cover - every supported Python has it
            atexit.register(_flush_at_exit)


def _flush_at_exit() -> None:
    """Store what the live instrumentations queued, each for at most its ``flush_timeout``."""
    with _REGISTRY.lock:
        live = list(_REGISTRY.live)
    started = time.monotonic()
    for instrumentation in live:
        with contextlib.suppress(Exception):
            if not instrumentation.flush():
                log.debug("%r: not everything was stored at exit", instrumentation)
    log.debug("flushed %d instrumentations at exit in %.2f s", len(live), time.monotonic() - started)
