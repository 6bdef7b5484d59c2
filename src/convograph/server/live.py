"""Live state the server keeps per conversation: fan-out hubs for streams, and cached graphs.

**Hubs.** One `ConversationHub` per conversation with listeners follows the event log's live tail
once, encodes each event's SSE frame once, and offers it to every `Listener` (a bounded buffer,
never blocking). So an append costs one log read and one encode per conversation, whatever the
number of subscribers, and a slow subscriber never slows ingest or the others. `stream_frames` turns
a listener into the exact byte stream a client must see: the log is the source of truth, hub
events are hints: anything missing between the client's cursor and the next hub event is read from
the log, a buffer overflow switches the client to catching up from the log. Hence no gap and no
duplicate, by construction. Frames waiting in a buffer go out as one write.

**Cache.** `LiveConversations` keeps the hypergraph (with an incremental thread projector), the
flat graph and the relay state of recently used conversations up to date: events ingested here are applied as they are stored (O(Δ)); anything
else is read from the log on the next access. Least recently used conversations are evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

from convograph.events import Event, Relay
from convograph.graph import Graph, create_graph, reduce_event
from convograph.projections import ConversationProjector
from convograph.projections.fold import ConversationFold
from convograph.server.sse import HEARTBEAT_FRAME, event_frame
from convograph.store import EventLog, StoredEvent

__all__ = [
    "ConversationHub",
    "HubRegistry",
    "Listener",
    "LiveConversations",
    "LiveState",
    "Wakeable",
    "stream_frames",
]

READ_PAGE: Final = 1000


class Wakeable:
    """A subscriber that sleeps until something is offered to it (`wake`) or a timeout passes."""

    __slots__ = ("_wakeup",)

    def __init__(self) -> None:
        self._wakeup = asyncio.Event()

    def wake(self) -> None:
        self._wakeup.set()

    async def wait(self, timeout: float) -> bool:
        """Wait for a wake-up; False on timeout."""
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self._wakeup.clear()
        return True


class Listener(Wakeable):
    """A bounded buffer of live ``(seq, frame)`` pairs for one subscriber. `offer` never blocks."""

    __slots__ = ("_capacity", "buffer", "overflowed")

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.buffer: deque[tuple[int, bytes]] = deque()
        self._capacity = capacity
        self.overflowed = False

    def offer(self, seq: int, frame: bytes) -> None:
        if len(self.buffer) >= self._capacity:
            # Too far behind: drop the buffer; the reader catches up from the log instead.
            self.buffer.clear()
            self.overflowed = True
        else:
            self.buffer.append((seq, frame))
        self._wakeup.set()


class ConversationHub:
    """Follows one conversation's tail from ``start_seq`` and offers events to its listeners."""

    def __init__(self, log: EventLog, conversation_id: str, start_seq: int) -> None:
        self.conversation_id = conversation_id
        self.start_seq = start_seq
        self.listeners: set[Listener] = set()
        self._task = asyncio.create_task(self._run(log), name=f"convograph-hub-{conversation_id}")

    async def _run(self, log: EventLog) -> None:
        async for stored in log.subscribe(self.conversation_id, self.start_seq):
            frame = event_frame(stored)
            for listener in tuple(self.listeners):
                listener.offer(stored.seq, frame)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        for listener in self.listeners:
            listener.wake()


class HubRegistry:
    """One hub per conversation with listeners; a hub stops when its last listener leaves."""

    def __init__(self, log: EventLog, *, buffer_size: int) -> None:
        self._log = log
        self._hubs: dict[str, ConversationHub] = {}
        self._starting: dict[str, asyncio.Future[ConversationHub]] = {}
        self._buffer_size = buffer_size
        self.closed = asyncio.Event()

    @property
    def listener_count(self) -> int:
        return sum(len(hub.listeners) for hub in self._hubs.values())

    async def join(self, conversation_id: str) -> Listener:
        """A new listener on ``conversation_id``'s hub (started at the log's current end if new).

        Every event stored after this returns reaches the listener (or marks it overflowed).
        """
        hub = self._hubs.get(conversation_id)
        if hub is None:
            pending = self._starting.get(conversation_id)
            if pending is None:
                future: asyncio.Future[ConversationHub] = asyncio.get_running_loop().create_future()
                self._starting[conversation_id] = future
                try:
                    info = await self._log.get_conversation(conversation_id)
                    hub = ConversationHub(self._log, conversation_id, info.last_seq if info else 0)
                    self._hubs[conversation_id] = hub
                    future.set_result(hub)
                except BaseException as exc:
                    future.set_exception(exc)
                    future.exception()  # mark retrieved
                    raise
                finally:
                    del self._starting[conversation_id]
            else:
                hub = await asyncio.shield(pending)
        listener = Listener(self._buffer_size)
        hub.listeners.add(listener)
        return listener

    async def leave(self, conversation_id: str, listener: Listener) -> None:
        hub = self._hubs.get(conversation_id)
        if hub is None:
            return
        hub.listeners.discard(listener)
        if not hub.listeners:
            del self._hubs[conversation_id]
            await hub.close()

    async def close(self) -> None:
        self.closed.set()
        hubs, self._hubs = self._hubs, {}
        for hub in hubs.values():
            await hub.close()


async def stream_frames(
    log: EventLog,
    hubs: HubRegistry,
    conversation_id: str,
    after_seq: int,
    *,
    heartbeat: float,
) -> AsyncIterator[tuple[int, bytes]]:
    """SSE bytes carrying every event with ``seq > after_seq`` exactly once, in order: stored ones,
    then live ones. Yields ``(events_in_chunk, chunk)``; a heartbeat comment (0 events) after
    ``heartbeat`` idle seconds. Ends when the registry closes."""
    listener = await hubs.join(conversation_id)
    cursor = after_seq

    async def catch_up() -> AsyncIterator[tuple[int, bytes]]:
        nonlocal cursor
        while True:
            page = await log.read(conversation_id, cursor, READ_PAGE)
            if page:
                cursor = page[-1].seq
                yield len(page), b"".join(event_frame(stored) for stored in page)
            if len(page) < READ_PAGE:
                return

    try:
        async for chunk in catch_up():  # the listener already collects what comes after
            yield chunk
        while not hubs.closed.is_set():
            if listener.overflowed:
                listener.overflowed = False
                listener.buffer.clear()
                async for chunk in catch_up():
                    yield chunk
            frames: list[bytes] = []
            while listener.buffer and not listener.overflowed:
                seq, frame = listener.buffer.popleft()
                if seq <= cursor:
                    continue
                if seq > cursor + 1:  # a gap: the log has what the hub skipped
                    if frames:
                        yield len(frames), b"".join(frames)
                        frames = []
                    missing = await log.read(conversation_id, cursor, min(READ_PAGE, seq - cursor - 1))
                    if missing:
                        yield len(missing), b"".join(event_frame(stored) for stored in missing)
                        cursor = missing[-1].seq
                    if seq > cursor + 1:
                        listener.buffer.appendleft((seq, frame))
                        continue
                cursor = seq
                frames.append(frame)
            if frames:
                yield len(frames), b"".join(frames)
            if not listener.buffer and not await listener.wait(heartbeat) and not hubs.closed.is_set():
                yield 0, HEARTBEAT_FRAME
    finally:
        await hubs.leave(conversation_id, listener)


# --- cached conversation state -----------------------------------------------------------------------


class LiveState(ConversationFold):
    """One conversation as of ``last_seq``: the shared fold (`ConversationFold`: its hypergraph,
    kept with an incremental thread projector, commands applied, and its relays), plus its flat
    graph and, once asked, the thread with REPL cells."""

    __slots__ = ("graph", "last_seq", "lock", "memo", "repl_projector")

    def __init__(self) -> None:
        super().__init__()
        self.graph: Graph = create_graph()
        self.repl_projector: ConversationProjector | None = None
        """The thread with REPL cells (``/thread?repl=1``), made on first request (O(N) once),
        then following `projector`'s conversation: O(new chunks) per event, no second reduce."""
        self.last_seq = 0
        self.lock = asyncio.Lock()
        self.memo: dict[Any, Any] = {}
        """Projection results keyed by (name, options); cleared when events arrive."""

    def apply(self, events: Sequence[Event], last_seq: int) -> None:
        graph = self.graph
        for event in events:
            graph = reduce_event(graph, event)
            step = self.fold(event)
            if self.repl_projector is not None:
                if step == "replaced":
                    self.repl_projector.replace(self.projector.conversation)
                elif step == "applied":
                    self.repl_projector.advance(self.projector.conversation)
        self.graph = graph
        self.last_seq = last_seq
        self.memo.clear()

    def thread_with_repl_cells(self) -> Any:
        """The active path's thread views with REPL cells, as JSON-ready data."""
        if self.repl_projector is None:
            self.repl_projector = ConversationProjector(self.projector.conversation, repl_cells=True)
        return self.repl_projector.to_jsonable()

    def pending_relays(self) -> list[Relay]:
        return [relay for relay_id, relay in self.relays.items() if relay_id not in self.decisions]


class LiveConversations:
    """LRU cache of `LiveState`, caught up from the log on access. O(new events) per access."""

    def __init__(self, log: EventLog, *, capacity: int) -> None:
        self._log = log
        self._capacity = capacity
        self._states: OrderedDict[str, LiveState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._states)

    async def get(self, conversation_id: str) -> LiveState:
        """The conversation's state, including every event stored so far."""
        state = self._states.get(conversation_id)
        if state is None:
            state = LiveState()
            self._states[conversation_id] = state
            while len(self._states) > self._capacity:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(conversation_id)
        async with state.lock:
            while True:
                page = await self._log.read(conversation_id, state.last_seq, 10_000)
                if not page:
                    break
                state.apply([stored.event for stored in page], page[-1].seq)
        return state

    def stored(self, conversation_id: str, stored: Sequence[StoredEvent]) -> None:
        """Apply events just stored by this process when they extend the cached state."""
        state = self._states.get(conversation_id)
        if state is None or not stored or state.lock.locked():
            return
        if stored[0].seq == state.last_seq + 1:
            state.apply([item.event for item in stored], stored[-1].seq)

    def forget(self, conversation_id: str) -> None:
        self._states.pop(conversation_id, None)
