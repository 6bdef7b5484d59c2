"""`BatchWriter`: the write side both ports share: a bounded queue, one writer task, batches.

`put` waits while the queue is full (back-pressure: a fast producer cannot grow memory without
bound). The writer takes what has accumulated, up to ``batch_size`` events (waiting up to
``linger`` seconds after the first for more), and hands it to ``write``; so while one write is in
flight (an fsync, an HTTP round trip) the next events gather into the next batch: one write per
batch, not per event. `flush` waits until everything put so far is written. When ``write``
raises, the writer stops, the events still queued are dropped, and every later `put` / `flush`
raises that error (wrapped by ``fail``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from convograph.events import Event

__all__ = ["BatchWriter"]


class BatchWriter:
    """A bounded queue of events written in batches by one task (module docstring)."""

    def __init__(
        self,
        write: Callable[[Sequence[Event]], Awaitable[None]],
        *,
        name: str,
        batch_size: int = 256,
        queue_size: int = 4096,
        linger: float = 0.0,
        fail: Callable[[Exception], Exception] = lambda exc: exc,
    ) -> None:
        if batch_size < 1 or queue_size < 1:
            raise ValueError("batch_size and queue_size must be at least 1")
        self._write = write
        self._name = name
        self._batch_size = batch_size
        self._linger = linger
        self._fail = fail
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task[None] | None = None
        self._failure: Exception | None = None
        self.batches = 0
        """Batches written, for tests and metrics."""

    def check(self) -> None:
        """Raise the writer's failure, if it failed."""
        if self._failure is not None:
            raise self._failure

    async def put(self, events: Sequence[Event]) -> None:
        """Queue ``events`` in order (waits while the queue is full)."""
        self.check()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=self._name)
        for event in events:
            await self._queue.put(event)
            self.check()

    async def flush(self) -> None:
        """Wait until every event put so far is written; raise if the writer failed."""
        task = self._task
        if task is not None and not task.done():
            join = asyncio.ensure_future(self._queue.join())
            racing: list[asyncio.Future[Any]] = [join, task]
            try:
                await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            finally:
                join.cancel()
        self.check()

    async def aclose(self) -> None:
        """Flush what is queued (ignoring a failure), then stop the writer."""
        with contextlib.suppress(Exception):
            await self.flush()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        queue = self._queue
        while True:
            batch = [await queue.get()]
            deadline = time.monotonic() + self._linger
            while len(batch) < self._batch_size:
                try:
                    batch.append(queue.get_nowait())
                except asyncio.QueueEmpty:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        batch.append(await asyncio.wait_for(queue.get(), remaining))
                    except TimeoutError:
                        break
            try:
                await self._write(batch)
                self.batches += 1
            except Exception as exc:
                self._failure = self._fail(exc)
            finally:
                for _ in batch:
                    queue.task_done()
            if self._failure is not None:
                while not queue.empty():  # nothing more can be written: release the waiters
                    queue.get_nowait()
                    queue.task_done()
                return
