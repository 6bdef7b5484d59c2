"""Live state the server keeps per conversation: fan-out hubs for streams, and cached graphs.

**Hubs.** One `ConversationHub` per conversation with subscribers follows the event log's live
tail once, encodes each event's SSE frame once and keeps the latest frames in a `FrameRing`
shared by every `Subscriber` of the conversation (bounded in frames and bytes; frames every live
subscriber has sent are dropped at once). A subscriber is a cursor into that ring, so its own
memory is O(1) whatever it lags, an append costs one log read and one encode per conversation
however many subscribers there are, and a slow subscriber never slows ingest or the others.

`stream_frames` turns a subscriber into the exact byte stream a client must see. The log is the
source of truth, the ring a cache of its tail: a subscriber first catches up from the log (pages
sized to about `PAGE_BYTES`, pulled only as fast as the client reads), then reads the ring. No gap
and no duplicate, by construction: the cursor only ever moves to the next seq. A live subscriber
the ring has left behind while it was still sending (its client reads too slowly: more than the
ring's bound behind the head) is ended with a ``stream_end`` frame, and its client resumes with
``Last-Event-ID`` (from the log); one that was idle when a burst larger than the ring arrived
just reads the burst from the log. Frames go out in writes of at most
`CHUNK_BYTES`, so a client that stops reading pins at most one such write besides the
transport's own buffer.

**Stream formats.** Besides convograph's own frames (`event_frame`, one per event, depending on the
event alone), a stream may carry another protocol's (AG-UI, the AI SDK's): a `FrameEncoder` whose
frames for an event depend on the events before it. Such a stream has its own hub per conversation
(its encoder is fed every event once, its frames shared by all subscribers through the ring) and a
subscriber catching up frames what it reads from the log with its own encoder (`_LogFramer`), fed
the earlier events first with their output dropped. The frames are the same either way: a format's
frames are a function of the log's prefix.

**Cache.** `LiveConversations` keeps the hypergraph (with an incremental thread projector), the
flat graph and the relay state of recently used conversations up to date: events ingested here are applied as they are stored (O(Δ)); anything
else is read from the log on the next access. Least recently used conversations are evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Final, Protocol

from convograph.events import Event, Relay, RelayResolved
from convograph.graph import Graph, create_graph, reduce_event
from convograph.hypergraph.commands import COMMAND_TYPES, reduce_with_commands
from convograph.hypergraph.model import Conversation
from convograph.projections import ConversationProjector
from convograph.server.sse import HEARTBEAT_FRAME, end_frame, event_frame
from convograph.store import EventLog, StoredEvent

__all__ = [
    "CHUNK_BYTES",
    "ConversationHub",
    "EncoderFactory",
    "FrameEncoder",
    "FrameRing",
    "HubRegistry",
    "LiveConversations",
    "LiveState",
    "Subscriber",
    "Wakeable",
    "stream_frames",
]

logger = logging.getLogger("convograph.server")

READ_PAGE: Final = 1000
"""Most events read from the log at once while a subscriber catches up."""
CHUNK_BYTES: Final = 64 * 1024
"""Most bytes of frames handed to the HTTP server in one write (a larger frame goes alone).
Measured: 32 KiB chunks replayed 20-45% fewer events/s; per stream that does not read, the
server holds about three chunks (the transport's buffer and the next write)."""
PAGE_BYTES: Final = CHUNK_BYTES
"""Catch-up pages are sized to hold about this many bytes of frames (1 to `READ_PAGE` events):
one chunk, so a stream waiting for its client holds no second page."""
FIRST_PAGE: Final = 50
"""Events in a subscriber's first catch-up page, before their size is known."""


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
    read from the log makes a new one, fed from the start."""

    def __init__(
        self, log: EventLog, conversation_id: str, factory: EncoderFactory | None, skip_seq: int, skip: int
    ) -> None:
        self._log = log
        self._conversation_id = conversation_id
        self._factory = factory
        self._encoder: FrameEncoder | None = None
        self._fed = 0
        self._skip_seq = skip_seq
        self.skip = skip
        """Frames still to drop from event ``skip_seq``: while > 0 the subscriber reads the log."""

    def release(self) -> None:
        self._encoder = None
        self._fed = 0

    async def read(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        """``(seq, frame)`` of up to ``limit`` events after ``after``."""
        page = await self._log.read(self._conversation_id, after, limit)
        if self._factory is None:
            return [(stored.seq, event_frame(stored)) for stored in page]
        encoder = self._encoder
        if encoder is None:
            encoder = self._encoder = self._factory()
            self._fed = 0
        if self._fed < after:
            self._fed = await _feed_silently(self._log, self._conversation_id, encoder, self._fed, after)
        out: list[tuple[int, bytes]] = []
        for stored in page:
            frames = encoder.feed(stored)
            if stored.seq == self._skip_seq and self.skip:
                frames, self.skip = frames[self.skip :], 0
            out.append((stored.seq, b"".join(frames)))
        if page:
            self._fed = page[-1].seq
        return out


class Wakeable:
    """Something that sleeps until it is offered work (`wake`), told to end (`end`), or a
    timeout passes. ``end_reason`` is why it must end (None while it may go on)."""

    __slots__ = ("_wakeup", "end_reason", "waiting")

    def __init__(self) -> None:
        self._wakeup = asyncio.Event()
        self.end_reason: str | None = None
        self.waiting = False
        """True while it sleeps in `wait` (it had nothing left to do)."""

    def wake(self) -> None:
        self._wakeup.set()

    def end(self, reason: str) -> None:
        """Ask it to end (the first reason given wins) and wake it."""
        if self.end_reason is None:
            self.end_reason = reason
        self._wakeup.set()

    async def wait(self, timeout: float) -> bool:
        """Wait for a wake-up; False on timeout."""
        self.waiting = True
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self.waiting = False
            self._wakeup.clear()
        return True


class Subscriber(Wakeable):
    """One stream's place in a conversation: ``cursor`` is the last seq it was given, ``live``
    whether it reads the hub's ring (else it is catching up from the log)."""

    __slots__ = ("cursor", "live")

    def __init__(self, cursor: int) -> None:
        super().__init__()
        self.cursor = cursor
        self.live = False


class FrameRing:
    """The latest frames of one conversation by consecutive seq, at most ``max_frames`` frames and
    ``max_bytes`` bytes (the newest frame is always kept). O(1) append, lookup and eviction."""

    def __init__(self, last_seq: int, *, max_frames: int, max_bytes: int) -> None:
        self._frames: list[bytes] = []
        self._start = 0
        """Index in ``_frames`` of the oldest frame held (the slots before it are emptied)."""
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self.last_seq = last_seq
        """The newest seq seen."""
        self.first_seq = last_seq + 1
        """The seq of the oldest frame held (``last_seq + 1`` when none is)."""
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._frames) - self._start

    def holds_after(self, cursor: int) -> bool:
        """Whether every frame seen with seq > ``cursor`` is still held."""
        return cursor >= self.first_seq - 1

    def append(self, seq: int, frame: bytes) -> bool:
        """Add the frame of ``seq``; False when ``seq`` did not follow ``last_seq`` (the ring then
        restarts at ``seq``, and readers must look at the log for what came before)."""
        follows = seq == self.last_seq + 1
        if not follows:
            self._frames, self._start, self.bytes = [], 0, 0
            self.first_seq = seq
        self._frames.append(frame)
        self.bytes += len(frame)
        self.last_seq = seq
        while len(self) > 1 and (len(self) > self._max_frames or self.bytes > self._max_bytes):
            self._drop_oldest()
        return follows

    def release_through(self, seq: int) -> None:
        """Drop the frames with seq <= ``seq`` (every reader has them)."""
        while len(self) and self.first_seq <= seq:
            self._drop_oldest()

    def frames_after(self, cursor: int, max_bytes: int) -> list[bytes]:
        """Consecutive frames from seq ``cursor + 1``: as many as fit ``max_bytes`` (at least one
        when any is held). Only for a cursor the ring `holds_after`."""
        frames: list[bytes] = []
        size = 0
        for index in range(self._start + cursor + 1 - self.first_seq, len(self._frames)):
            frame = self._frames[index]
            if frames and size + len(frame) > max_bytes:
                break
            frames.append(frame)
            size += len(frame)
        return frames

    def _drop_oldest(self) -> None:
        self.bytes -= len(self._frames[self._start])
        self._frames[self._start] = b""
        self._start += 1
        self.first_seq += 1
        if self._start >= 1024 and self._start * 2 >= len(self._frames):
            del self._frames[: self._start]
            self._start = 0


class ConversationHub:
    """Follows one conversation's tail from ``start_seq`` into its `FrameRing` and wakes its
    subscribers. O(subscribers) per event (the wake-ups and the ring's release floor). With an
    ``encoder`` the frames are that stream format's (fed the events up to ``start_seq`` first)."""

    def __init__(
        self,
        log: EventLog,
        conversation_id: str,
        start_seq: int,
        *,
        max_frames: int,
        max_bytes: int,
        encoder: FrameEncoder | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.ring = FrameRing(start_seq, max_frames=max_frames, max_bytes=max_bytes)
        self.subscribers: set[Subscriber] = set()
        self.failed = False
        """Set when following the log failed: the hub is finished; a new one replaces it."""
        self._encoder = encoder
        self._task = asyncio.create_task(self._run(log, start_seq), name=f"convograph-hub-{conversation_id}")

    async def _run(self, log: EventLog, start_seq: int) -> None:
        try:
            await self._follow(log, start_seq)
        except Exception:  # the backend went away: end the streams, whose clients resume later
            logger.warning(
                "live streams of %r stopped following the event log", self.conversation_id, exc_info=True
            )
            self.failed = True
            for subscriber in tuple(self.subscribers):
                subscriber.end("unavailable")

    def _frame(self, stored: StoredEvent) -> bytes:
        encoder = self._encoder
        return event_frame(stored) if encoder is None else b"".join(encoder.feed(stored))

    async def _follow(self, log: EventLog, start_seq: int) -> None:
        ring = self.ring
        if self._encoder is not None:  # a format's frames depend on the events before
            await _feed_silently(log, self.conversation_id, self._encoder, 0, start_seq)
        async for stored in log.subscribe(self.conversation_id, start_seq):
            if not ring.append(stored.seq, self._frame(stored)):
                for subscriber in self.subscribers:  # the ring restarted: older frames are in the log
                    subscriber.live = False
            floor = min((s.cursor for s in self.subscribers if s.live), default=ring.last_seq)
            ring.release_through(floor)
            if floor < ring.first_seq - 1:  # the ring let go of frames a live subscriber lacks
                for subscriber in self.subscribers:
                    if subscriber.waiting and subscriber.cursor < ring.first_seq - 1:
                        subscriber.live = False  # it was idle: a burst, not a slow client
            for subscriber in tuple(self.subscribers):
                subscriber.wake()

    def end(self, reason: str) -> None:
        """End every subscriber and stop following the log."""
        self._task.cancel()
        for subscriber in self.subscribers:
            subscriber.end(reason)

    async def close(self, reason: str) -> None:
        self.end(reason)
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task


HubKey = tuple[str, str]
"""``(conversation id, stream format)``; ``""`` is convograph's own format."""


class HubRegistry:
    """One hub per conversation and stream format with subscribers; a hub stops when its last
    subscriber leaves. Each hub's ring holds at most ``max_frames`` frames and ``max_bytes``
    bytes: how far a live subscriber may fall behind before it is ended."""

    def __init__(self, log: EventLog, *, max_frames: int, max_bytes: int) -> None:
        self._log = log
        self._hubs: dict[HubKey, ConversationHub] = {}
        self._starting: dict[HubKey, asyncio.Future[ConversationHub]] = {}
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self.closed = False

    @property
    def subscriber_count(self) -> int:
        return sum(len(hub.subscribers) for hub in self._hubs.values())

    @property
    def buffered_bytes(self) -> int:
        """Bytes of frames the rings hold, over every conversation."""
        return sum(hub.ring.bytes for hub in self._hubs.values())

    async def join(
        self,
        conversation_id: str,
        subscriber: Subscriber,
        stream_format: str = "",
        factory: EncoderFactory | None = None,
    ) -> ConversationHub:
        """Add ``subscriber`` to ``conversation_id``'s hub for ``stream_format`` (framed by an
        encoder from ``factory``; convograph's own frames by default), started at the log's current
        end if new: every event stored after this returns reaches the hub's ring."""
        key = (conversation_id, stream_format)
        while True:
            hub = await self._hub(key, factory)
            if self._hubs.get(key) is hub:  # not ended while this waited for it
                break
        hub.subscribers.add(subscriber)
        if self.closed:
            subscriber.end("shutdown")
        return hub

    async def _hub(self, key: HubKey, factory: EncoderFactory | None) -> ConversationHub:
        """The running hub of ``key``, started if there is none (or it failed)."""
        hub = self._hubs.get(key)
        if hub is None or hub.failed:
            pending = self._starting.get(key)
            if pending is None:
                future: asyncio.Future[ConversationHub] = asyncio.get_running_loop().create_future()
                self._starting[key] = future
                try:
                    info = await self._log.get_conversation(key[0])
                    hub = ConversationHub(
                        self._log,
                        key[0],
                        info.last_seq if info else 0,
                        max_frames=self._max_frames,
                        max_bytes=self._max_bytes,
                        encoder=factory() if factory is not None else None,
                    )
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
        return hub

    def leave(self, conversation_id: str, subscriber: Subscriber, stream_format: str = "") -> None:
        """Remove ``subscriber``; the hub stops with its last one. O(1), never waits."""
        key = (conversation_id, stream_format)
        hub = self._hubs.get(key)
        if hub is None or subscriber not in hub.subscribers:
            return
        hub.subscribers.discard(subscriber)
        if not hub.subscribers:
            del self._hubs[key]
            hub.end("idle")

    def end_conversation(self, conversation_id: str, reason: str) -> None:
        """End every stream of ``conversation_id``, in every format (it was deleted: its seqs start
        again). O(hubs)."""
        for key in [key for key in self._hubs if key[0] == conversation_id]:
            self._hubs.pop(key).end(reason)

    async def close(self) -> None:
        """End every stream (``shutdown``) and stop every hub."""
        self.closed = True
        hubs, self._hubs = self._hubs, {}
        for hub in hubs.values():
            await hub.close("shutdown")


async def _read_page(
    framer: _LogFramer, cursor: int, page_size: int
) -> tuple[deque[tuple[int, int, bytes]], int]:
    """The events after ``cursor`` (at most ``page_size``) as chunks ``(count, last seq, bytes)``
    of at most `CHUNK_BYTES`, and the next page size: scaled so a page holds about `PAGE_BYTES`
    of frames, which bounds what a stream holds while its client does not read."""
    frames = await framer.read(cursor, page_size)
    size = sum(len(frame) for _, frame in frames)
    next_size = max(1, min(READ_PAGE, page_size * PAGE_BYTES // max(size, 1)))
    return deque(_chunks(frames, CHUNK_BYTES)), next_size


def _chunks(frames: Sequence[tuple[int, bytes]], max_bytes: int) -> Iterator[tuple[int, int, bytes]]:
    """``(count, last seq, bytes)`` of consecutive runs of ``frames`` of at most ``max_bytes``
    (a larger frame alone)."""
    start = size = 0
    for index, (_, frame) in enumerate(frames):
        if index > start and size + len(frame) > max_bytes:
            yield index - start, frames[index - 1][0], b"".join(frame for _, frame in frames[start:index])
            start, size = index, 0
        size += len(frame)
    if start < len(frames):
        yield len(frames) - start, frames[-1][0], b"".join(frame for _, frame in frames[start:])


async def stream_frames(
    log: EventLog,
    hubs: HubRegistry,
    conversation_id: str,
    subscriber: Subscriber,
    *,
    heartbeat: float,
    stream_format: str = "",
    factory: EncoderFactory | None = None,
    skip: int = 0,
) -> AsyncIterator[tuple[int, bytes]]:
    """SSE bytes carrying every event with ``seq > subscriber.cursor`` exactly once, in order:
    stored ones, then live ones. Yields ``(events_in_chunk, chunk)``; a heartbeat comment (0
    events) after ``heartbeat`` idle seconds. Ends when the subscriber is ended: its client went
    away (nothing more is sent), or the server ended it (a ``stream_end`` frame first: shutdown,
    conversation deleted, too far behind). ``stream_format`` / ``factory``: another protocol's
    frames (see the module docstring); ``skip``: drop the first frames of the first event (a client
    resuming in the middle of an event's frames)."""
    hub = await hubs.join(conversation_id, subscriber, stream_format, factory)
    framer = _LogFramer(log, conversation_id, factory, subscriber.cursor + 1, skip)
    page_size = FIRST_PAGE
    try:
        while subscriber.end_reason is None:
            ring = hub.ring
            if ring.holds_after(subscriber.cursor) and not framer.skip:
                if not subscriber.live:
                    framer.release()
                subscriber.live = True
                frames = ring.frames_after(subscriber.cursor, CHUNK_BYTES)
                if frames:
                    subscriber.cursor += len(frames)
                    yield len(frames), b"".join(frames)
                elif not await subscriber.wait(heartbeat) and subscriber.end_reason is None:
                    yield 0, HEARTBEAT_FRAME
            elif subscriber.live:  # the ring moved past what this client has not read yet
                subscriber.end("too_far_behind")
            else:  # catching up: one page from the log, sent as the client reads it
                chunks, page_size = await _read_page(framer, subscriber.cursor, page_size)
                if not chunks:  # the log lost what the ring no longer holds (deleted meanwhile)
                    subscriber.end("deleted")
                while chunks and subscriber.end_reason is None:
                    count, subscriber.cursor, chunk = chunks.popleft()
                    yield count, chunk
        if subscriber.end_reason != "disconnected":
            yield 0, end_frame(subscriber.end_reason or "shutdown", subscriber.cursor)
    finally:
        hubs.leave(conversation_id, subscriber, stream_format)


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
