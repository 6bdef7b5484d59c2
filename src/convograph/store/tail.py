"""Live-tail plumbing shared by backends: a change signal and the replay-then-follow loop.

`follow` is the whole "no gap, no duplicate" argument in one place: it keeps a cursor (the last seq
it yielded) and only ever asks the log for ``seq > cursor``. Before each read it takes the current
wake-up token, so an append that lands between "read returned nothing" and "start waiting" has
already set that token and the wait returns at once. Seqs become visible in order (each backend
commits a conversation's appends one after another), so reading ``> cursor`` never skips one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from convograph.store.base import StoredEvent

__all__ = ["ChangeSignal", "follow"]


class ChangeSignal:
    """Per-conversation wake-up tokens. `notify` may be called from any thread via `notify_threadsafe`."""

    __slots__ = ("_events", "_loop")

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def token(self, conversation_id: str) -> asyncio.Event:
        """The event the next `notify` for ``conversation_id`` will set."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        token = self._events.get(conversation_id)
        if token is None:
            token = self._events[conversation_id] = asyncio.Event()
        return token

    def notify(self, conversation_id: str) -> None:
        """Wake every waiter on ``conversation_id`` (call on the loop's thread)."""
        token = self._events.pop(conversation_id, None)
        if token is not None:
            token.set()

    def notify_all(self) -> None:
        events, self._events = self._events, {}
        for token in events.values():
            token.set()

    def notify_threadsafe(self, conversation_id: str) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed between the check and the call
                loop.call_soon_threadsafe(self.notify, conversation_id)


async def follow(
    read: Callable[[str, int, int | None], Awaitable[list[StoredEvent]]],
    signal: ChangeSignal,
    conversation_id: str,
    after_seq: int,
    *,
    page_size: int = 1000,
    poll_interval: float = 1.0,
) -> AsyncIterator[StoredEvent]:
    """Yield events after ``after_seq`` forever: stored ones, then live ones.

    ``poll_interval`` bounds how long a missed notification (another process appending, a dropped
    LISTEN connection) can delay delivery.
    """
    cursor = after_seq
    while True:
        token = signal.token(conversation_id)
        page = await read(conversation_id, cursor, page_size)
        for stored in page:
            if stored.seq > cursor:
                cursor = stored.seq
                yield stored
        if len(page) >= page_size:
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(token.wait(), poll_interval)
