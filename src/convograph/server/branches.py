"""Steering endpoints: the active path with its branches, and the commands that change it.

Every command (edit, regenerate, select a branch, summarize) is appended to the conversation's log
as a command event (docs/events.md), so it is durable, streamed to every subscriber like any event,
and replayed into the same state after a restart. A command that would not apply is refused before
anything is stored (404 unknown message, 409 not applicable here).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
from litestar import Controller, MediaType, Request, Response, get, post
from litestar.params import FromPath

from convograph.events import ContentPart, Edit, Event, Regenerate, Summarize, SwitchBranch
from convograph.hypergraph import default_active, list_siblings, walk
from convograph.hypergraph import queries as q
from convograph.hypergraph.commands import check_command
from convograph.hypergraph.operations import OperationError
from convograph.jsonable import to_jsonable
from convograph.server.bodies import decode_body
from convograph.server.errors import ApiError
from convograph.server.live import LiveState
from convograph.server.openapi import ConversationId, documented
from convograph.server.state import ServerState, existing_conversation, require, server_state

__all__ = ["BranchController", "view_id"]

_FLAT_ID_TYPES = frozenset({"text", "reasoning", "tool_call", "relay", "tool_progress"})
_RUN_SCOPED = frozenset({"harness_start", "harness_end", "error", "user"})


def view_id(event: Any) -> str | None:
    """The thread-view id of the block an event starts (the flat-graph id scheme), if any."""
    kind = event.type
    if kind in _FLAT_ID_TYPES:
        return str(event.id)
    if kind == "tool_result":
        return f"{event.id}:result"
    if kind in _RUN_SCOPED:
        return f"{event.run_id if event.run_id is not None else '_stream'}:{kind}"
    return None


class EditBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    content: str | list[ContentPart]


class SummarizeBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    first_id: str
    last_id: str
    text: str
    model: str | None = None


class PathMessage(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One message of the active path (`active_path`), for the OpenAPI document."""

    id: str
    role: str
    parent_id: str | None
    siblings: list[str]
    index: int
    view_ids: list[str]
    summary: dict[str, Any] | None


class PathReply(msgspec.Struct, frozen=True, kw_only=True):
    path: list[PathMessage]


class CommandReply(msgspec.Struct, frozen=True, kw_only=True):
    """A recorded command: its seq, and the active path it leaves."""

    seq: int
    path: list[PathMessage]


_COMMAND_ERRORS = (400, 404, 409)


def active_path(live: LiveState) -> list[dict[str, Any]]:
    """The main thread's active messages, each with its siblings (alternative branches)."""
    conversation = live.conversation
    out = []
    for message in walk(conversation, default_active(conversation)):
        siblings = [sibling.id for sibling in list_siblings(conversation, message.id)]
        view_ids = []
        for block_id in message.block_ids:
            chunks = q.chunks_of(conversation, block_id)
            if chunks:
                found = view_id(chunks[0].event)
                if found is not None:
                    view_ids.append(found)
        out.append(
            {
                "id": message.id,
                "role": message.role,
                "parentId": message.parent_id,
                "siblings": siblings,
                "index": siblings.index(message.id) if message.id in siblings else 0,
                "viewIds": view_ids,
                "summary": to_jsonable(message.summary) if message.summary is not None else None,
            }
        )
    return out


async def _record(state: ServerState, cid: str, live: LiveState, command: Any) -> Response[bytes]:
    try:
        check_command(live.conversation, command)
    except OperationError as exc:
        status = 404 if "no message" in str(exc) else 409
        raise ApiError(
            status, str(exc), code="unknown_message" if status == 404 else "not_applicable"
        ) from None
    event: Event = command
    result = await state.log.append(cid, [event])
    state.appended(cid, result)
    state.metrics.events_accepted += result.accepted
    live = await state.conversations.get(cid)
    return Response(
        msgspec.json.encode({"seq": result.last_seq, "path": active_path(live)}), media_type=MediaType.JSON
    )


def _stamp() -> dict[str, Any]:
    return {
        "event_id": f"cmd-{uuid.uuid4().hex}",
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
    }


async def _live(request: Request[Any, Any, Any], cid: str) -> tuple[ServerState, LiveState]:
    state = server_state(request)
    return state, await existing_conversation(state, cid)


class BranchController(Controller):
    path = "/v1/conversations"
    tags = ["branches"]  # noqa: RUF012 - Litestar's attribute

    @get(
        "/{cid:str}/path",
        guards=[require("read")],
        summary="Active path with sibling branches",
        **documented(PathReply, errors=(400, 404)),
    )
    async def path_of(self, request: Request[Any, Any, Any], cid: ConversationId) -> Response[bytes]:
        _, live = await _live(request, cid)
        return Response(msgspec.json.encode({"path": active_path(live)}), media_type=MediaType.JSON)

    @post(
        "/{cid:str}/messages/{mid:str}/edit",
        guards=[require("write")],
        status_code=200,
        summary="Edit a message",
        **documented(CommandReply, body=EditBody, errors=(*_COMMAND_ERRORS, 413)),
    )
    async def edit(
        self, request: Request[Any, Any, Any], cid: ConversationId, mid: FromPath[str]
    ) -> Response[bytes]:
        """A new sibling branch holding ``content``; it becomes active. The original is kept."""
        state, live = await _live(request, cid)
        body = decode_body(await request.body(), EditBody)
        run_id = f"edit-{uuid.uuid4().hex[:12]}"
        return await _record(
            state, cid, live, Edit(message_id=mid, content=body.content, run_id=run_id, **_stamp())
        )

    @post(
        "/{cid:str}/messages/{mid:str}/regenerate",
        guards=[require("write")],
        status_code=200,
        summary="Regenerate",
        **documented(CommandReply, errors=_COMMAND_ERRORS),
    )
    async def regenerate(
        self, request: Request[Any, Any, Any], cid: ConversationId, mid: FromPath[str]
    ) -> Response[bytes]:
        """An empty sibling assistant turn, active and open: the agent's next run fills it."""
        state, live = await _live(request, cid)
        return await _record(state, cid, live, Regenerate(message_id=mid, **_stamp()))

    @post(
        "/{cid:str}/messages/{mid:str}/select",
        guards=[require("write")],
        status_code=200,
        summary="Switch branch",
        **documented(CommandReply, errors=_COMMAND_ERRORS),
    )
    async def select(
        self, request: Request[Any, Any, Any], cid: ConversationId, mid: FromPath[str]
    ) -> Response[bytes]:
        """Make the branch through ``mid`` the active one."""
        state, live = await _live(request, cid)
        return await _record(state, cid, live, SwitchBranch(message_id=mid, **_stamp()))

    @post(
        "/{cid:str}/summaries",
        guards=[require("write")],
        status_code=200,
        summary="Summarize a range",
        **documented(CommandReply, body=SummarizeBody, errors=(*_COMMAND_ERRORS, 413)),
    )
    async def summarize(self, request: Request[Any, Any, Any], cid: ConversationId) -> Response[bytes]:
        """Replace the active messages ``firstId``..``lastId`` by a summary holding ``text``."""
        state, live = await _live(request, cid)
        body = decode_body(await request.body(), SummarizeBody)
        command = Summarize(
            first_id=body.first_id, last_id=body.last_id, text=body.text, model=body.model, **_stamp()
        )
        return await _record(state, cid, live, command)
