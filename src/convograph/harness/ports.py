"""Where a harness's events go and where its history comes from (`ConversationPort` implementations).

- `LogPort`: in process, over any convograph `EventLog` (``MemoryEventLog``, SQLite, Postgres,
  Redis). `emit` queues (bounded); one writer appends what has gathered as one batch, so while an
  append is in flight (an fsync) the next events collect into the next one: one durable append per
  batch, not per streamed chunk. `flush` waits until everything emitted is stored (`history`,
  `relay_decision` and `aclose` flush first). One follower task tails the
  conversation and folds every event, the harness's own and anyone else's (a viewer's edit through
  a server on the same log), into a `ConversationState`: the hypergraph with user commands applied,
  kept by the incremental thread projector, so `history` costs O(new events) to catch up plus
  rendering the messages, never a rebuild. Relay decisions are read from the same fold.
- `SubagentPort`: a child run's port. Its events go to the parent's port (the same conversation,
  live in the viewer); its history is its own run: the task as the user message, then the child's
  own turns (folded locally from what it emits), not the parent's conversation.
- `convograph.harness.remote.RemotePort`: to a ``convograph serve`` through the client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec

from convograph.events import Event, Relay, RelayResolved, User
from convograph.harness.base import ConversationPort, MessageFormat
from convograph.harness.batching import BatchWriter
from convograph.harness.ids import new_id
from convograph.hypergraph.turns import PendingTurn, pending_turn
from convograph.projections.fold import ConversationFold
from convograph.store import EventLog, validate_conversation_id

__all__ = ["ConversationState", "LogPort", "SubagentPort"]


class ConversationState(ConversationFold):
    """One conversation folded event by event (`ConversationFold`: the hypergraph with commands
    applied, its thread views kept incrementally, the relay decisions), plus waiters for decisions.
    O(1) amortised per ordinary event; a command costs its operation plus a rebuild."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        super().__init__()
        self._waiters: dict[str, asyncio.Future[RelayResolved]] = {}

    def apply(self, event: Event) -> None:
        self.fold(event)
        if isinstance(event, RelayResolved):
            waiter = self._waiters.pop(event.relay_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(self.decisions[event.relay_id])

    def messages(self, format: MessageFormat) -> list[dict[str, Any]]:
        """The request history of the active path (`project_messages`), O(views)."""
        return self.projector.messages(format)

    async def decision(self, relay_id: str) -> RelayResolved:
        """The first decision recorded for ``relay_id``, waiting for it if needed."""
        decided = self.decisions.get(relay_id)
        if decided is not None:
            return decided
        waiter = self._waiters.get(relay_id)
        if waiter is None:
            waiter = self._waiters[relay_id] = asyncio.get_running_loop().create_future()
        return await asyncio.shield(waiter)


class LogPort:
    """A `ConversationPort` over an `EventLog` in this process (module docstring).

    Use as ``async with LogPort(log, "cid") as port``, or call `aclose` when done (it stops the
    follower; the log stays open: it is the caller's)."""

    def __init__(
        self, log: EventLog, conversation_id: str, *, batch_size: int = 512, queue_size: int = 4096
    ) -> None:
        self._log = log
        self._cid = validate_conversation_id(conversation_id)
        self._writer = BatchWriter(
            self._append, name=f"convograph-log-{self._cid}", batch_size=batch_size, queue_size=queue_size
        )
        self.state = ConversationState()
        self._applied = 0
        self._advanced = asyncio.Event()
        self._follower: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    @property
    def conversation_id(self) -> str:
        return self._cid

    async def __aenter__(self) -> LogPort:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def emit(self, events: Sequence[Event]) -> None:
        """Queue ``events`` for the log (waits while the queue is full); raises once an append failed."""
        await self._writer.put(events)

    async def flush(self) -> None:
        """Wait until every event emitted so far is stored."""
        await self._writer.flush()

    async def _append(self, batch: Sequence[Event]) -> None:
        await self._log.append(self._cid, batch)

    async def history(self, format: MessageFormat) -> list[dict[str, Any]]:
        await self.sync()
        return self.state.messages(format)

    async def relay_decision(self, relay_id: str) -> RelayResolved:
        await self.flush()
        self._ensure_follower()
        follower = self._follower
        assert follower is not None
        decided = asyncio.ensure_future(self.state.decision(relay_id))
        try:
            await asyncio.wait({decided, follower}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not decided.done():
                decided.cancel()
        if decided.done() and not decided.cancelled():
            return decided.result()
        raise self._follow_error()

    async def standing_grants(self) -> list[Relay]:
        await self.sync()
        return self.state.standing_grants()

    async def sync(self) -> None:
        """Wait until every event emitted (or stored by anyone) so far is folded into `state`."""
        await self.flush()
        self._ensure_follower()
        info = await self._log.get_conversation(self._cid)
        target = info.last_seq if info is not None else 0
        while self._applied < target:
            if self._follower is not None and self._follower.done():
                raise self._follow_error()
            self._advanced.clear()
            if self._applied >= target:
                break
            waiter = asyncio.ensure_future(self._advanced.wait())
            follower = self._follower
            assert follower is not None
            try:
                await asyncio.wait({waiter, follower}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()

    # -- serving (`convograph.harness.serving`) ----------------------------------------------------

    async def claim(self, event: Event) -> bool:
        """Store ``event`` now, after everything emitted, unless its ``eventId`` is stored already;
        True when this call stored it (a run's claim: `convograph.harness.runs.open_run`)."""
        await self.flush()
        result = await self._log.append(self._cid, [event])
        return result.accepted > 0 or result.spooled

    async def head(self) -> int:
        """The conversation's last seq (0 before it has events)."""
        info = await self._log.get_conversation(self._cid)
        return info.last_seq if info is not None else 0

    async def changes(self, after: int) -> AsyncIterator[Event]:
        """Every event stored after seq ``after`` (by anyone), live."""
        async for stored in self._log.subscribe(self._cid, after):
            yield stored.event

    async def pending_turn(self) -> PendingTurn | None:
        """The reply the conversation awaits (`convograph.hypergraph.turns`), after everything stored."""
        await self.sync()
        return pending_turn(self.state.projector.conversation)

    async def control(self, agent_id: str, **info: Any) -> AsyncIterator[tuple[str, Any]]:
        """No control channel in process (no server to attach to): yields nothing, ever."""
        await asyncio.Event().wait()
        yield "attached", {"id": agent_id, **info}  # pragma: no cover - never reached

    async def aclose(self) -> None:
        await self._writer.aclose()
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await follower

    def _ensure_follower(self) -> None:
        if self._follower is None:
            self._follower = asyncio.create_task(self._follow(), name=f"convograph-port-{self._cid}")

    async def _follow(self) -> None:
        try:
            async for stored in self._log.subscribe(self._cid, self._applied):
                self.state.apply(stored.event)
                self._applied = stored.seq
                self._advanced.set()
        except Exception as exc:
            self._failure = exc
            raise

    def _follow_error(self) -> Exception:
        return RuntimeError(f"following conversation {self._cid!r} failed: {self._failure!r}")


class SubagentPort:
    """A child run's port (module docstring). ``anchor`` is the child's ``parentId`` (the spawning
    tool call id): in the local fold the child's events point at the task's user block instead,
    so the child's turns follow its task as a reply would."""

    def __init__(self, parent: ConversationPort, task: str, *, anchor: str) -> None:
        self._root: ConversationPort = parent._root if isinstance(parent, SubagentPort) else parent
        self._anchor = anchor
        self.state = ConversationState()
        task_run = f"task-{new_id()}"
        self._task_block = f"{task_run}:user"
        self.state.apply(User(run_id=task_run, content=task))

    @property
    def conversation_id(self) -> str:
        return self._root.conversation_id

    async def emit(self, events: Sequence[Event]) -> None:
        await self._root.emit(events)
        for event in events:
            if event.parent_id == self._anchor:
                event = msgspec.structs.replace(event, parent_id=self._task_block)
            self.state.apply(event)

    async def flush(self) -> None:
        await self._root.flush()

    async def history(self, format: MessageFormat) -> list[dict[str, Any]]:
        return self.state.messages(format)

    async def relay_decision(self, relay_id: str) -> RelayResolved:
        return await self._root.relay_decision(relay_id)

    async def standing_grants(self) -> list[Relay]:
        return await self._root.standing_grants()
