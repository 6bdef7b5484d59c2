"""Runs and attached agents: steering a live agent from the API and the viewer (docs/server.md, "Runs").

Agents run outside the server (their model keys stay with them) and **serve** a conversation: they
attach through a control stream, follow the conversation's event stream, and answer whenever the
conversation awaits a reply (`convograph.hypergraph.turns`): a new user message, an edit, a
regenerate. Routes:

- ``GET  /v1/conversations/{cid}/runs``: the top-level runs (oldest first), the pending turn and the
  attached agents: what the viewer shows (empty, not 404, before the conversation has events).
- ``POST /v1/conversations/{cid}/runs`` ``{"input"?}``: a new user message at the end of the active
  path (refused with 409 while a run is answering: cancel it first), or, without input, a check
  that the conversation awaits a reply; 202 with the pending turn. The request is the log itself:
  a conversation that awaits a reply stays so until a run claims it, across restarts, and when
  several agents serve it exactly one claims it (the claim is the answering ``harness_start``'s
  ``eventId``, stored once).
- ``POST /v1/conversations/{cid}/runs/{runId}/cancel`` ``{"force"?}``: sent to the attached agents,
  whose holder ends the run with ``harness_end`` ``cancelled``; with ``force``, when no agent is
  attached to receive it (its agent died), the server records that end itself.
- ``GET  /v1/conversations/{cid}/agents``: the attached agents (`convograph.server.presence`).
- ``GET  /v1/conversations/{cid}/agents/{agentId}/control``: an agent's control stream (SSE):
  ``event: attached`` first, then ``event: cancel`` ``{"runId", "reason"}``; holding it open is
  being attached.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Annotated, Any, Final

import msgspec
from litestar import Controller, MediaType, Request, Response, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Stream

from convograph.events import ContentPart, Event, HarnessEnd, User
from convograph.hypergraph import MAIN_THREAD
from convograph.hypergraph.queries import chunks_of, run_ids, run_info
from convograph.hypergraph.turns import PendingTurn, pending_turn
from convograph.server.bodies import decode_body
from convograph.server.errors import ApiError
from convograph.server.live import LiveState, Wakeable
from convograph.server.openapi import SSE, ConversationId, documented
from convograph.server.presence import AgentInfo, Presence
from convograph.server.sse import HEARTBEAT_FRAME, RETRY_FRAME
from convograph.server.state import ServerState, admit_stream, existing_conversation, require, server_state
from convograph.server.streaming import EventStream

__all__ = ["RunController", "RunRow", "presence_of", "root_runs"]

AGENT_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


class RunRow(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A top-level run of the conversation (an agent answering a message, not a subagent)."""

    run_id: str
    agent_id: str | None
    status: str
    """``streaming``, ``complete``, ``error`` or ``aborted`` (the thread's run status)."""
    reason: str | None
    """Its ``harness_end`` reason (``final``, ``cancelled``, ``error``, ``max_turns``, ...), once ended."""
    first_seq: int


class RunsReply(msgspec.Struct, frozen=True, kw_only=True):
    runs: list[RunRow]
    pending: PendingTurn | None
    agents: list[AgentInfo]


class StartRun(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    input: str | list[ContentPart] | None = None
    """A new user message; without it, the conversation must already await a reply."""


class RunStarted(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    pending: PendingTurn
    agents: list[AgentInfo]
    """The agents that may answer (none: the turn waits until one attaches)."""


class CancelRun(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    reason: str | None = None
    force: bool = False
    """End the run in the log here when no attached agent can be told (its agent is gone)."""


class CancelSent(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    run_id: str
    delivered: int
    """Attached agents the request went to (0 with ``force``: the server ended the run itself)."""
    ended: bool
    """True when the server recorded the run's ``harness_end`` itself (``force``)."""


class AgentList(msgspec.Struct, frozen=True, kw_only=True):
    agents: list[AgentInfo]


def presence_of(request: Request[Any, Any, Any]) -> Presence:
    """This server's `Presence`."""
    return server_state(request).presence


def root_runs(live: LiveState) -> list[RunRow]:
    """The conversation's top-level runs, oldest first: runs with a lifecycle on the main thread
    that no tool call or REPL turn spawned. O(runs); memoised per seq."""
    cached = live.memo.get(("root-runs",))
    if cached is not None:
        return list(cached)
    conversation = live.conversation
    rows = []
    for run_id in run_ids(conversation):
        info = run_info(conversation, run_id)
        if not info.has_lifecycle or info.thread_id != MAIN_THREAD:
            continue
        if info.spawn is not None and info.spawn.kind != "reply":
            continue
        rows.append(
            RunRow(
                run_id=run_id,
                agent_id=info.agent_id,
                status=info.status,
                reason=_end_reason(live, run_id),
                first_seq=info.first_seq,
            )
        )
    live.memo[("root-runs",)] = tuple(rows)
    return rows


def _end_reason(live: LiveState, run_id: str) -> str | None:
    try:
        chunks = chunks_of(live.conversation, f"block:{run_id}:harness_end")
    except KeyError:
        return None
    reason = getattr(chunks[0].event, "reason", None) if chunks else None
    return reason if isinstance(reason, str) else "ended"


def _json(data: Any, status: int = 200) -> Response[bytes]:
    return Response(msgspec.json.encode(data), status_code=status, media_type=MediaType.JSON)


def _stamp(prefix: str) -> dict[str, Any]:
    return {
        "event_id": f"{prefix}-{uuid.uuid4().hex}",
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
    }


async def _append(state: ServerState, cid: str, event: Event) -> int:
    result = await state.log.append(cid, [event])
    state.appended(cid, result)
    state.metrics.events_accepted += result.accepted
    return result.conversation_last_seq


class RunController(Controller):
    path = "/v1/conversations"
    tags = ["runs"]  # noqa: RUF012 - Litestar's attribute

    @get(
        "/{cid:str}/runs",
        guards=[require("read")],
        summary="Runs, the pending turn and the attached agents",
        **documented(RunsReply, errors=(400,)),
    )
    async def list_runs(self, request: Request[Any, Any, Any], cid: ConversationId) -> Response[bytes]:
        """Also for a conversation without events yet (an agent may serve it before it starts)."""
        live = await server_state(request).conversations.get(cid)
        agents = await presence_of(request).listed(cid)
        return _json({"runs": root_runs(live), "pending": pending_turn(live.conversation), "agents": agents})

    @post(
        "/{cid:str}/runs",
        guards=[require("write")],
        status_code=202,
        summary="Start the next turn",
        **documented(RunStarted, status=202, body=StartRun, errors=(400, 404, 409, 413)),
    )
    async def start_run(self, request: Request[Any, Any, Any], cid: ConversationId) -> Response[bytes]:
        """With ``input``: a user message at the end of the active path (409 ``run_in_progress``
        while a run answers). Then the conversation awaits a reply, which a serving agent claims;
        without input it must await one already (409 ``nothing_to_answer``)."""
        state = server_state(request)
        body = decode_body(await request.body(), StartRun)
        live = await state.conversations.get(cid)
        if body.input is not None:
            if isinstance(body.input, str) and not body.input.strip():
                raise ApiError(400, "input is empty: send the message text (or content parts)")
            running = [row.run_id for row in root_runs(live) if row.status == "streaming"]
            if running:
                raise ApiError(
                    409,
                    f"run {running[-1]} is still answering; wait for it or cancel it "
                    f"(POST /v1/conversations/{cid}/runs/{running[-1]}/cancel) first",
                    code="run_in_progress",
                    details={"runIds": running},
                )
            user = User(run_id=f"user-{uuid.uuid4().hex[:12]}", content=body.input, **_stamp("run-input"))
            await _append(state, cid, user)
            live = await state.conversations.get(cid)
        elif live.last_seq == 0:
            raise ApiError(404, f"conversation {cid!r} has no events", code="unknown_conversation")
        turn = pending_turn(live.conversation)
        if turn is None:
            raise ApiError(
                409,
                "the active path ends with an answer: nothing awaits a reply (send input, edit a "
                "message or regenerate an answer)",
                code="nothing_to_answer",
            )
        agents = [agent for agent in await presence_of(request).listed(cid) if agent.serving]
        return _json({"seq": live.last_seq, "pending": turn, "agents": agents}, 202)

    @post(
        "/{cid:str}/runs/{run_id:str}/cancel",
        guards=[require("write")],
        status_code=202,
        summary="Cancel a run",
        **documented(CancelSent, status=202, body=CancelRun, errors=(400, 404, 409, 413)),
    )
    async def cancel_run(
        self, request: Request[Any, Any, Any], cid: ConversationId, run_id: FromPath[str]
    ) -> Response[bytes]:
        """Ask the attached agents to stop ``run_id`` (its holder ends it ``cancelled``)."""
        state = server_state(request)
        body = decode_body(await request.body(), CancelRun)
        live = await existing_conversation(state, cid)
        row = next((r for r in root_runs(live) if r.run_id == run_id), None)
        if row is None:
            raise ApiError(404, f"conversation {cid!r} has no top-level run {run_id!r}", code="unknown_run")
        if row.reason is not None or row.status != "streaming":
            raise ApiError(
                409, f"run {run_id} has already ended ({row.reason or row.status})", code="run_ended"
            )
        frame = _control_frame("cancel", {"runId": run_id, "reason": body.reason})
        delivered = await presence_of(request).send(cid, frame)
        if delivered:
            return _json(CancelSent(run_id=run_id, delivered=delivered, ended=False), 202)
        if not body.force:
            raise ApiError(
                409,
                f"no agent is attached to this conversation to stop run {run_id}; if its agent is gone, "
                'send {"force": true} to record the run as cancelled',
                code="no_agent_attached",
            )
        end = HarnessEnd(
            run_id=run_id, agent_id=row.agent_id, reason="cancelled", **_stamp(f"cancel-{run_id}")
        )
        await _append(state, cid, end)
        return _json(CancelSent(run_id=run_id, delivered=0, ended=True), 202)

    @get(
        "/{cid:str}/agents",
        guards=[require("read")],
        summary="Attached agents",
        **documented(AgentList, errors=(400,)),
    )
    async def list_agents(self, request: Request[Any, Any, Any], cid: ConversationId) -> Response[bytes]:
        return _json({"agents": await presence_of(request).listed(cid)})

    @get(
        "/{cid:str}/agents/{agent_id:str}/control",
        guards=[require("write")],
        summary="An agent's control stream (Server-Sent Events)",
        **documented(str, media_type=SSE, description="Control messages while attached", errors=(400,)),
    )
    async def control(
        self,
        request: Request[Any, Any, Any],
        cid: ConversationId,
        agent_id: FromPath[str],
        name: Annotated[str | None, QueryParameter(name="name")] = None,
        model: Annotated[str | None, QueryParameter(name="model")] = None,
        kind: Annotated[str | None, QueryParameter(name="kind")] = None,
        serving: Annotated[bool, QueryParameter(name="serving")] = True,
    ) -> Stream:
        """Holding this stream open attaches the agent (``name`` = its runs' ``agentId``)."""
        if not AGENT_ID.match(agent_id):
            raise ApiError(400, f"agent id {agent_id!r} must be 1-128 letters, digits or . _ : @ -")
        info = AgentInfo(
            id=agent_id, name=(name or agent_id)[:128], model=model, kind=kind or "agent", serving=serving
        )
        state = server_state(request)
        release = admit_stream(request)
        gone = Wakeable()
        return EventStream(
            _control_frames(state.presence, cid, info, gone, state.config.sse_heartbeat_seconds),
            stop=lambda: gone.end("disconnected"),
            release=release,
        )


def _control_frame(kind: str, data: Any) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), msgspec.json.encode(data))


async def _control_frames(
    presence: Presence, cid: str, info: AgentInfo, gone: Wakeable, heartbeat: float
) -> AsyncGenerator[bytes, None]:
    """The control stream of one attached agent; ends when its client leaves (``gone``) or at server
    shutdown (`Presence.close`)."""
    entry = presence.attach(cid, info)
    try:
        yield RETRY_FRAME + _control_frame("attached", {"id": info.id, "conversationId": cid})
        while not presence.closed and gone.end_reason is None:
            while entry.outbox:
                yield entry.outbox.popleft()
            if not await entry.wakeup.wait(heartbeat) and gone.end_reason is None and not presence.closed:
                yield HEARTBEAT_FRAME
    finally:
        presence.leave(cid, entry)
