"""Giving memory back to the operating system after live streams close (glibc's ``malloc_trim``).

A closed stream's buffers are freed at once (reference counting; `convograph.server.streaming`),
but glibc's allocator keeps freed pages inside the process when live allocations sit among them,
so the server's RSS would stay at its peak long after a burst of streams is gone (measured: 1,000
streams that never read, closed, left ~90 MB the process no longer used). ``malloc_trim(0)`` returns
those pages. `MemoryTrimmer` calls it in a worker thread, once per burst of closes (``interval``
seconds after the first close of the burst, again while closes keep coming), never while streams
are steady. One call walks the allocator's free lists: a few ms for a few hundred MB. Elsewhere
than glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from typing import Final

__all__ = ["MemoryTrimmer", "malloc_trim"]

log = logging.getLogger("convograph.server")

TRIM_INTERVAL_SECONDS: Final = 2.0


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return function


malloc_trim: Final = _load_malloc_trim()
"""glibc's ``malloc_trim(pad)``, or None where there is none."""


class MemoryTrimmer:
    """Coalesces "much was freed" notices into one ``malloc_trim(0)`` per ``interval`` seconds."""

    def __init__(self, *, interval: float = TRIM_INTERVAL_SECONDS) -> None:
        self._interval = interval
        self._pending = False
        self._task: asyncio.Task[None] | None = None
        self.trims = 0

    def request(self) -> None:
        """Memory was freed (a stream closed): trim within ``interval`` seconds. O(1)."""
        if malloc_trim is None:
            return
        self._pending = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="convograph-memory-trim")

    async def _run(self) -> None:
        assert malloc_trim is not None
        while self._pending:
            await asyncio.sleep(self._interval)
            self._pending = False
            try:
                await asyncio.to_thread(malloc_trim, 0)
            except Exception:  # never fatal: memory is merely kept
                log.debug("malloc_trim failed", exc_info=True)
            self.trims += 1

    async def close(self) -> None:
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
