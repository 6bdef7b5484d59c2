"""Where a harness's events go and where its history comes from (`ConversationPort` implementations).

- `LogPort`: in process, over any convograph `EventLog` (``MemoryEventLog``, SQLite, Postgres,
  Redis). Appends are awaited (durable under the log's policy). One follower task tails the
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
from collections.abc import Sequence
from typing import Any

import msgspec

from convograph.events import Event, RelayResolved, User
from convograph.harness.base import ConversationPort, MessageFormat
from convograph.harness.ids import new_id
from convograph.hypergraph.commands import COMMAND_TYPES, reduce_with_commands
from convograph.projections import ConversationProjector
from convograph.store import EventLog, validate_conversation_id

__all__ = ["ConversationState", "LogPort", "SubagentPort"]


class ConversationState:
    """One conversation folded event by event: the hypergraph with commands applied (edit,
    regenerate, switch_branch, summarize), its thread views kept incrementally, and the relay
    decisions. O(1) amortised per ordinary event; a command costs its operation plus a rebuild."""

    def __init__(self) -> None:
        self.projector = ConversationProjector()
        self.decisions: dict[str, RelayResolved] = {}
        self._waiters: dict[str, asyncio.Future[RelayResolved]] = {}

    def apply(self, event: Event) -> None:
        projector = self.projector
        if isinstance(event, COMMAND_TYPES):
            changed = reduce_with_commands(projector.conversation, event)
            if changed is not projector.conversation:
                projector.replace(changed)
            return
        projector.apply(event)
        if isinstance(event, RelayResolved) and event.relay_id not in self.decisions:
            self.decisions[event.relay_id] = event
            waiter = self._waiters.pop(event.relay_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(event)

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

    def __init__(self, log: EventLog, conversation_id: str) -> None:
        self._log = log
        self._cid = validate_conversation_id(conversation_id)
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
        await self._log.append(self._cid, events)

    async def history(self, format: MessageFormat) -> list[dict[str, Any]]:
        await self.sync()
        return self.state.messages(format)

    async def relay_decision(self, relay_id: str) -> RelayResolved:
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

    async def sync(self) -> None:
        """Wait until every event stored so far is folded into `state`."""
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

    async def aclose(self) -> None:
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

    async def history(self, format: MessageFormat) -> list[dict[str, Any]]:
        return self.state.messages(format)

    async def relay_decision(self, relay_id: str) -> RelayResolved:
        return await self._root.relay_decision(relay_id)
