"""Live state the server keeps per conversation: fan-out hubs for streams, and cached graphs.

**Hubs.** One `ConversationHub` per conversation with listeners follows the event log's live tail
once, encodes each event's SSE frame once, and offers it to every `Listener` (a bounded buffer,
never blocking). So an append costs one log read and one encode per conversation, whatever the
number of subscribers, and a slow subscriber never slows ingest or the others. `stream_frames` turns
a listener into the exact byte stream a client must see: the log is the source of truth, hub
events are hints: anything missing between the client's cursor and the next hub event is read from
the log, a buffer overflow switches the client to catching up from the log. Hence no gap and no
duplicate, by construction. Frames waiting in a buffer go out as one write.

**Stream formats.** Besides convograph's own frames (`event_frame`, one per event, depending on the
event alone), a stream may carry another protocol's (AG-UI, the AI SDK's): a `FrameEncoder` whose
frames for an event depend on the events before it. Such a stream has its own hub per conversation
(the encoder is fed every event once, its frames shared by all subscribers) and each subscriber
frames what it reads from the log with its own encoder, fed the earlier events first with their
output dropped. The frames are the same either way: a format's frames are a function of the log's
prefix.

**Cache.** `LiveConversations` keeps the hypergraph (with an incremental thread projector), the
flat graph and the relay state of recently used conversations up to date: events ingested here are applied as they are stored (O(Δ)); anything
else is read from the log on the next access. Least recently used conversations are evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final, Protocol

from convograph.events import Event, Relay, RelayResolved
from convograph.graph import Graph, create_graph, reduce_event
from convograph.hypergraph.commands import COMMAND_TYPES, reduce_with_commands
from convograph.hypergraph.model import Conversation
from convograph.projections import ConversationProjector
from convograph.server.sse import HEARTBEAT_FRAME, event_frame
from convograph.store import EventLog, StoredEvent

__all__ = [
    "ConversationHub",
    "EncoderFactory",
    "FrameEncoder",
    "HubRegistry",
    "Listener",
    "LiveConversations",
    "LiveState",
    "Wakeable",
    "stream_frames",
]

READ_PAGE: Final = 1000


class FrameEncoder(Protocol):
    """A stream format's encoder: the SSE frames of each stored event, fed in seq order from the
    conversation's first event (its frames may depend on the events before)."""

    def feed(self, stored: StoredEvent) -> list[bytes]: ...


EncoderFactory = Callable[[], FrameEncoder]
"""Makes a fresh encoder of one format (None where a stream takes convograph's own frames)."""


async def _feed_silently(
    log: EventLog, conversation_id: str, encoder: FrameEncoder, after: int, until: int
) -> int:
    """Feed ``encoder`` the events ``after < seq <= until``, dropping its frames; the last seq fed."""
    while after < until:
        page = await log.read(conversation_id, after, min(READ_PAGE, until - after))
        if not page:
            break
        for stored in page:
            encoder.feed(stored)
        after = page[-1].seq
    return after


class _LogFramer:
    """Frames of the events one subscriber reads from the log, in its stream's format. A format's
    encoder is first fed the events it has not seen (their frames dropped), so what it frames
    equals what the hub's encoder made of the same events; ``skip`` drops the first frames of
    event ``skip_seq`` (a client that resumes in the middle of an event's frames). `release`
    drops the encoder once the subscriber follows the hub (its state is O(conversation)); a later
    read from the log (a gap, an overflow) makes a new one, fed from the start."""

    def __init__(
        self, log: EventLog, conversation_id: str, factory: EncoderFactory | None, skip_seq: int, skip: int
    ) -> None:
        self._log = log
        self._conversation_id = conversation_id
        self._factory = factory
        self._encoder = factory() if factory is not None else None
        self._fed = 0
        self._skip_seq = skip_seq
        self._skip = skip

    def release(self) -> None:
        if self._factory is not None:
            self._encoder = None
            self._fed = 0

    async def read(self, after: int, limit: int) -> tuple[list[StoredEvent], bytes]:
        """Up to ``limit`` events after ``after`` and their frames."""
        if self._factory is None:
            page = await self._log.read(self._conversation_id, after, limit)
            return page, b"".join(event_frame(stored) for stored in page)
        encoder = self._encoder
        if encoder is None:
            encoder = self._encoder = self._factory()
        if self._fed < after:
            self._fed = await _feed_silently(self._log, self._conversation_id, encoder, self._fed, after)
        page = await self._log.read(self._conversation_id, after, limit)
        chunks = []
        for stored in page:
            frames = encoder.feed(stored)
            if stored.seq == self._skip_seq:
                frames = frames[self._skip :]
            chunks.append(b"".join(frames))
        if page:
            self._fed = page[-1].seq
        return page, b"".join(chunks)


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
    """Follows one conversation's tail from ``start_seq`` and offers events to its listeners,
    framed by ``encoder`` (fed the events up to ``start_seq`` first) or as convograph's own."""

    def __init__(
        self, log: EventLog, conversation_id: str, start_seq: int, encoder: FrameEncoder | None = None
    ) -> None:
        self.conversation_id = conversation_id
        self.start_seq = start_seq
        self.listeners: set[Listener] = set()
        self._encoder = encoder
        self._task = asyncio.create_task(self._run(log), name=f"convograph-hub-{conversation_id}")

    async def _run(self, log: EventLog) -> None:
        encoder = self._encoder
        if encoder is not None:
            await _feed_silently(log, self.conversation_id, encoder, 0, self.start_seq)
        async for stored in log.subscribe(self.conversation_id, self.start_seq):
            frame = event_frame(stored) if encoder is None else b"".join(encoder.feed(stored))
            for listener in tuple(self.listeners):
                listener.offer(stored.seq, frame)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        for listener in self.listeners:
            listener.wake()


class HubRegistry:
    """One hub per conversation and stream format with listeners; a hub stops when its last
    listener leaves."""

    def __init__(self, log: EventLog, *, buffer_size: int) -> None:
        self._log = log
        self._hubs: dict[tuple[str, str], ConversationHub] = {}
        self._starting: dict[tuple[str, str], asyncio.Future[ConversationHub]] = {}
        self._buffer_size = buffer_size
        self.closed = asyncio.Event()

    @property
    def listener_count(self) -> int:
        return sum(len(hub.listeners) for hub in self._hubs.values())

    async def join(
        self, conversation_id: str, stream_format: str = "", factory: EncoderFactory | None = None
    ) -> Listener:
        """A new listener on ``conversation_id``'s hub for ``stream_format`` (framed by encoders
        from ``factory``; convograph's own frames by default), started at the log's current end if
        new. Every event stored after this returns reaches the listener (or marks it overflowed).
        """
        key = (conversation_id, stream_format)
        hub = self._hubs.get(key)
        if hub is None:
            pending = self._starting.get(key)
            if pending is None:
                future: asyncio.Future[ConversationHub] = asyncio.get_running_loop().create_future()
                self._starting[key] = future
                try:
                    info = await self._log.get_conversation(conversation_id)
                    encoder = factory() if factory is not None else None
                    hub = ConversationHub(self._log, conversation_id, info.last_seq if info else 0, encoder)
                    self._hubs[key] = hub
                    future.set_result(hub)
                except BaseException as exc:
                    future.set_exception(exc)
                    future.exception()  # mark retrieved
                    raise
                finally:
                    del self._starting[key]
            else:
                hub = await asyncio.shield(pending)
        listener = Listener(self._buffer_size)
        hub.listeners.add(listener)
        return listener

    async def leave(self, conversation_id: str, listener: Listener, stream_format: str = "") -> None:
        key = (conversation_id, stream_format)
        hub = self._hubs.get(key)
        if hub is None:
            return
        hub.listeners.discard(listener)
        if not hub.listeners:
            del self._hubs[key]
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
    stream_format: str = "",
    factory: EncoderFactory | None = None,
    skip: int = 0,
) -> AsyncIterator[tuple[int, bytes]]:
    """SSE bytes carrying every event with ``seq > after_seq`` exactly once, in order: stored ones,
    then live ones. Yields ``(events_in_chunk, chunk)``; a heartbeat comment (0 events) after
    ``heartbeat`` idle seconds. Ends when the registry closes. ``stream_format`` / ``factory``:
    another protocol's frames (see the module docstring); ``skip``: drop the first frames of the
    first event (a client resuming in the middle of an event's frames)."""
    listener = await hubs.join(conversation_id, stream_format, factory)
    framer = _LogFramer(log, conversation_id, factory, after_seq + 1, skip)
    cursor = after_seq

    async def catch_up() -> AsyncIterator[tuple[int, bytes]]:
        nonlocal cursor
        while True:
            page, frames = await framer.read(cursor, READ_PAGE)
            if page:
                cursor = page[-1].seq
                yield len(page), frames
            if len(page) < READ_PAGE:
                return

    try:
        async for chunk in catch_up():  # the listener already collects what comes after
            yield chunk
        framer.release()
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
                    missing, missing_frames = await framer.read(cursor, min(READ_PAGE, seq - cursor - 1))
                    if missing:
                        yield len(missing), missing_frames
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
        await hubs.leave(conversation_id, listener, stream_format)


# --- cached conversation state -----------------------------------------------------------------------


class LiveState:
    """One conversation as of ``last_seq``: its hypergraph (kept with an incremental thread
    projector, commands applied), its flat graph, and its relays."""

    __slots__ = ("decisions", "graph", "last_seq", "lock", "memo", "projector", "relays", "repl_projector")

    def __init__(self) -> None:
        self.graph: Graph = create_graph()
        self.projector = ConversationProjector()
        self.repl_projector: ConversationProjector | None = None
        """The thread with REPL cells (``/thread?repl=1``), made on first request (O(N) once),
        then following `projector`'s conversation: O(new chunks) per event, no second reduce."""
        self.last_seq = 0
        self.relays: dict[str, Relay] = {}
        self.decisions: dict[str, RelayResolved] = {}
        self.lock = asyncio.Lock()
        self.memo: dict[Any, Any] = {}
        """Projection results keyed by (name, options); cleared when events arrive."""

    @property
    def conversation(self) -> Conversation:
        conversation: Conversation = self.projector.conversation
        return conversation

    def apply(self, events: Sequence[Event], last_seq: int) -> None:
        graph = self.graph
        projector = self.projector
        for event in events:
            graph = reduce_event(graph, event)
            if isinstance(event, COMMAND_TYPES):
                changed = reduce_with_commands(projector.conversation, event)
                if changed is not projector.conversation:
                    projector.replace(changed)
                    if self.repl_projector is not None:
                        self.repl_projector.replace(changed)
                continue
            projector.apply(event)
            if self.repl_projector is not None:
                self.repl_projector.advance(projector.conversation)
            if isinstance(event, Relay):
                self.relays.setdefault(event.id, event)
            elif isinstance(event, RelayResolved):
                self.decisions.setdefault(event.relay_id, event)
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
