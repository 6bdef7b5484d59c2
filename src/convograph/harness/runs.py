"""What every harness run shares: a handle to wait for or cancel it, and the stop control behind it.

A run is one asyncio task. `RunControl.stop(reason)` cancels it; the run catches the
cancellation (`RunControl.stopped`), ends with its ``harness_end`` carrying that reason, and
returns its result normally, so a stopped run is never silent. A wall-time budget is a timer that
calls ``stop("max_seconds")``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any

import msgspec

from convograph.events import Event, HarnessStart
from convograph.events.types import _Event
from convograph.harness.base import ConversationPort, ModelRequest, Provider
from convograph.harness.ids import new_id

__all__ = ["RunControl", "RunHandle", "open_run", "provider_call"]


async def open_run(port: ConversationPort, start: HarnessStart) -> bool:
    """Emit a run's ``harness_start``; False when the run must not go on.

    A start with an ``eventId`` is a **claim** (`convograph.hypergraph.turns`): through a port that
    can claim (``port.claim(event) -> bool``: store it now unless its ``eventId`` is stored
    already), it is stored at once, and False means another agent's run holds that claim (this
    run then emits nothing more). Any other start is emitted as usual."""
    claim = getattr(port, "claim", None)
    if start.event_id is not None and claim is not None:
        return bool(await claim(start))
    if start.event_id is None:
        start = msgspec.structs.replace(start, event_id=new_id())
    await port.emit([start])
    return True


class RunControl:
    """Stop requests for the run executing in the current task (bind with `bind`)."""

    __slots__ = ("_task", "_timer", "stop_reason")

    def __init__(self) -> None:
        self.stop_reason: str | None = None
        self._task: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def bind(self, max_seconds: float | None = None) -> None:
        """Attach to the current task; with ``max_seconds``, stop it ("max_seconds") after that."""
        self._task = asyncio.current_task()
        if max_seconds is not None:
            self._timer = asyncio.get_running_loop().call_later(max_seconds, self.stop, "max_seconds")
        if self.stop_reason is not None and self._task is not None:
            self._task.cancel()  # stopped before it started

    def stop(self, reason: str) -> None:
        """Ask the run to end with ``reason`` (the first reason wins). Idempotent."""
        if self.stop_reason is None:
            self.stop_reason = reason
            if self._task is not None and not self._task.done():
                self._task.cancel()

    def stopped(self) -> str:
        """Call in ``except CancelledError``: the end reason, with the cancellation consumed."""
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return self.stop_reason or "cancelled"

    def release(self) -> None:
        """Cancel the wall-time timer (the run is ending)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class RunHandle[R]:
    """A running harness: `wait` for its result, or `cancel` it (it still ends with its
    ``harness_end``). Awaitable."""

    def __init__(self, run_id: str, control: RunControl, task: asyncio.Task[R]) -> None:
        self.run_id = run_id
        self._control = control
        self._task = task

    def done(self) -> bool:
        return self._task.done()

    def result(self) -> R:
        """The result of an ended run (`asyncio.InvalidStateError` before it ended)."""
        return self._task.result()

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the run has ended (its ``harness_end`` emitted)."""
        self._task.add_done_callback(lambda _: callback())

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the run: it ends with ``harness_end`` (``reason``), never silently. Idempotent."""
        self._control.stop(reason)

    async def wait(self) -> R:
        """The result. If the waiting coroutine is cancelled, the run is cancelled too and its end
        is awaited before the cancellation propagates."""
        try:
            return await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if self._task.done():
                raise
            self.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            raise

    def __await__(self) -> Generator[Any, None, R]:
        return self.wait().__await__()


@contextlib.asynccontextmanager
async def provider_call(
    provider: Provider, request: ModelRequest, record: Callable[[Event], Awaitable[None]]
) -> AsyncIterator[AsyncIterator[Event]]:
    """``provider.invoke(request)`` as a context: however the caller's loop ends (exhausted, a
    break, an exception, a cancellation) the stream is closed, so the provider stops its call; an
    event the provider returns from ``aclose`` (the ``error`` that ends an unfinished call) is
    passed to ``record``, so the call's record never just stops."""
    stream = provider.invoke(request)
    try:
        yield stream
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            ended = await close()
            if isinstance(ended, _Event):
                await record(ended)  # type: ignore[arg-type]
