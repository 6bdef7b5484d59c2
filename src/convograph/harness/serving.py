"""Serving a conversation: an agent attached to it answers every reply it awaits.

``await agent.serve(port)`` (or `serve`) keeps an `Agent` or a `ReplHarness` attached to the
conversation behind ``port`` until it is cancelled:

- **Attached**: through a `RemotePort` it holds the server's control stream open, so the server
  (and the viewer) list it as serving; the stream also carries cancel requests
  (``POST /v1/conversations/{cid}/runs/{runId}/cancel``), which end the run ``cancelled``.
- **Follows** the conversation's stream. Whenever a user message, an edit, a regenerate, a branch
  switch or a summary arrives, it asks the port whether the conversation now awaits a reply
  (`convograph.hypergraph.turns.pending_turn`; the server computes it for a `RemotePort`).
- **Answers** it with one run from the active path as it stands (the history is the port's
  messages projection, so an edit or a regenerate changes what the model sees). The run's
  ``harness_start`` carries the turn's claim as its ``eventId``: when several agents serve one
  conversation they all try, the log stores the claim once, and only that run goes on (the others
  end ``"claimed"`` without a trace). So a request survives restarts (it is the conversation
  itself) and is answered exactly once.
- **One run at a time.** A new request that arrives while a run answers (the tip moved: an edit,
  a regenerate, a new message) supersedes it: the run is cancelled (``harness_end`` ``cancelled``),
  then the new request is answered. (``POST .../runs`` refuses new input while a run answers, so
  this happens through edits, regenerates and writers posting events directly.)

A cancelled ``serve`` cancels its running run (which still ends with its ``harness_end``) and
detaches.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, Protocol

import httpx

from convograph.client import ApiError
from convograph.events import Event
from convograph.harness.base import ConversationPort
from convograph.harness.ids import new_id
from convograph.harness.runs import RunHandle
from convograph.hypergraph.turns import PendingTurn

__all__ = ["Servable", "ServingPort", "honour_cancels", "serve"]

WAKE_TYPES: Final = frozenset({"user", "edit", "regenerate", "switch_branch", "summarize"})
"""Events after which the conversation may await a reply."""
RETRY_SECONDS: Final = 1.0
"""When the server could not be asked (it restarts), ask again after this long."""


class ServingPort(ConversationPort, Protocol):
    """A `ConversationPort` an agent can serve through (`LogPort`, `RemotePort`)."""

    async def claim(self, event: Event) -> bool:
        """Store ``event`` now unless its ``eventId`` is stored already; True when stored now."""
        ...

    async def head(self) -> int:
        """The conversation's last seq."""
        ...

    def changes(self, after: int) -> AsyncIterator[Event]:
        """Every event stored after seq ``after``, live."""
        ...

    async def pending_turn(self) -> PendingTurn | None:
        """The reply the conversation awaits, if any."""
        ...

    def control(self, agent_id: str, **info: Any) -> AsyncIterator[tuple[str, Any]]:
        """Attach as ``agent_id``; control messages ``(kind, data)`` while attached."""
        ...


class Servable(Protocol):
    """What `serve` runs: `Agent` or `ReplHarness`. ``kind`` (``"agent"`` or ``"repl"``) is how
    the server lists it while attached."""

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    def start(
        self,
        port: ConversationPort,
        task: str | None = None,
        *,
        parent_id: str | None = None,
        claim: str | None = None,
    ) -> RunHandle[Any]: ...


async def serve(
    harness: Servable,
    port: ServingPort,
    *,
    agent_id: str | None = None,
    on_run: Callable[[PendingTurn, RunHandle[Any]], None] | None = None,
) -> None:
    """Serve the conversation behind ``port`` with ``harness`` until cancelled (module docstring).

    ``agent_id`` identifies this attachment to the server (default: a fresh id); ``on_run`` is
    called with each run started (the turn it answers and its handle). Raises what the port
    raises when following the conversation or attaching fails for good (e.g. a refused key)."""
    await _Serving(harness, port, agent_id or f"{harness.name}-{new_id()}", on_run).run()


class _Serving:
    def __init__(
        self,
        harness: Servable,
        port: ServingPort,
        agent_id: str,
        on_run: Callable[[PendingTurn, RunHandle[Any]], None] | None,
    ) -> None:
        self.harness = harness
        self.port = port
        self.agent_id = agent_id
        self.on_run = on_run
        self.wake = asyncio.Event()
        self.current: RunHandle[Any] | None = None
        self.claim: str | None = None

    def busy(self) -> bool:
        return self.current is not None and not self.current.done()

    async def run(self) -> None:
        helpers = [
            asyncio.create_task(self._watch(), name=f"convograph-serve-watch-{self.agent_id}"),
            asyncio.create_task(self._control(), name=f"convograph-serve-control-{self.agent_id}"),
        ]
        for helper in helpers:
            helper.add_done_callback(lambda _: self.wake.set())
        try:
            while True:
                await self.wake.wait()
                self.wake.clear()
                for helper in helpers:
                    if helper.done():
                        helper.result()  # a helper only ends by failing: raise its error
                        raise RuntimeError("serving stopped following the conversation")
                try:
                    await self._answer()
                except (httpx.TransportError, ApiError) as exc:  # the server restarts: look again soon
                    if isinstance(exc, ApiError) and exc.status < 500 and exc.status != 429:
                        raise
                    asyncio.get_running_loop().call_later(RETRY_SECONDS, self.wake.set)
        finally:
            for helper in helpers:
                helper.cancel()
            if self.current is not None and not self.current.done():
                self.current.cancel()
            await _outlive_cancellation(self.current.wait() if self.current is not None else None, helpers)

    async def _answer(self) -> None:
        """Start a run for the pending turn, if there is one and it is not the one being answered."""
        turn = await self.port.pending_turn()
        if turn is None or (self.busy() and turn.claim == self.claim):
            return
        if self.current is not None and not self.current.done():
            self.current.cancel()  # superseded by a newer request
            await self.current.wait()
        handle = self.harness.start(self.port, parent_id=turn.parent_id, claim=turn.claim)
        self.current, self.claim = handle, turn.claim
        handle.add_done_callback(self.wake.set)  # then look again: something may have arrived
        if self.on_run is not None:
            self.on_run(turn, handle)

    async def _watch(self) -> None:
        head = await self.port.head()
        self.wake.set()  # look once now: a reply may be awaited since before we attached
        async for event in self.port.changes(head):
            if event.type in WAKE_TYPES:
                self.wake.set()

    async def _control(self) -> None:
        try:
            await honour_cancels(self.port, self.harness, lambda: self.current, agent_id=self.agent_id)
        except ApiError as exc:
            if exc.status not in (404, 405):
                raise
            await asyncio.Event().wait()  # a server without agent presence: serve without it


async def honour_cancels(
    port: ServingPort,
    harness: Servable,
    current: Callable[[], RunHandle[Any] | None],
    *,
    agent_id: str,
    serving: bool = True,
) -> None:
    """Stay attached to the server as ``agent_id`` (listed as ``harness``'s name and model; serving
    or not) and cancel ``current()`` when a cancel request names its run. Runs until cancelled.
    `serve` uses it; so does ``convograph run --server`` for its one run (``serving=False``)."""
    info = {"name": harness.name, "model": harness.model, "kind": harness.kind, "serving": serving}
    async for message, data in port.control(agent_id, **info):
        if message == "cancel" and isinstance(data, dict):
            run = current()
            if run is not None and not run.done() and run.run_id == data.get("runId"):
                run.cancel()


async def _outlive_cancellation(run: Awaitable[Any] | None, helpers: list[asyncio.Task[None]]) -> None:
    """Wait until the helpers and the run being stopped have ended, however often the caller is
    cancelled meanwhile (a stop asked for twice must not leave a run emitting into a closed port);
    then re-raise the cancellation, if there was one."""
    everything: list[asyncio.Future[Any]] = [*helpers]
    if run is not None:
        everything.append(asyncio.ensure_future(run))
    pending = set(everything)
    cancelled = False
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True
    for future in everything:
        if not future.cancelled():
            future.exception()  # retrieved: failures were reported where they happened
    if cancelled:
        raise asyncio.CancelledError
