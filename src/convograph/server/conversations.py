"""Conversation endpoints (contract §4): ingest, list, replay, SSE, projections, relays."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any, Final

import msgspec
from litestar import Controller, MediaType, Request, Response, delete, get, post
from litestar.params import FromPath, HeaderParameter, QueryParameter
from litestar.response import Stream

from convograph.events import Event, RelayResolved, encode_event
from convograph.jsonable import to_jsonable
from convograph.projections import project_dag, project_messages, project_thread
from convograph.server.bodies import decode_body, parse_event_batch
from convograph.server.errors import ApiError
from convograph.server.live import EncoderFactory, LiveState, Subscriber, stream_frames
from convograph.server.openapi import SSE, SVG, ConversationId, documented, one_of, reply
from convograph.server.protocols import STREAM_PROTOCOLS, protocol_stream_options
from convograph.server.sse import RETRY_FRAME
from convograph.server.state import (
    admit_stream,
    existing_conversation,
    principal_of,
    require,
    server_state,
    unknown_conversation,
)
from convograph.server.streaming import EventStream
from convograph.server.summaries import ListListener
from convograph.store import MAX_SEQ, ConversationInfo

__all__ = ["ConversationController", "RelayDecision", "live_conversation_list"]

NDJSON: Final = "application/x-ndjson"
MESSAGE_FORMATS: Final = ("openai", "anthropic", "gateway")

_encode = msgspec.json.encode
_SEQ: Final = {"one_of": None, "type": "string", "pattern": "^[0-9]*$"}
"""Declared schema of a seq given as text (the handler parses it: 400)."""


class IngestResult(msgspec.Struct, frozen=True, kw_only=True):
    accepted: int
    duplicates: int
    last_seq: int


class Spooled(msgspec.Struct, frozen=True, kw_only=True):
    """Reply of an append while the backend is down: durable in the local spool, seqs unknown yet."""

    accepted: int
    duplicates: int
    last_seq: None
    spooled: bool


class RelayDecision(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``POST .../relays/{relay_id}``."""

    approved: bool
    reason: str | None = None
    always: bool = False
    """With ``approved``: later calls of the tool with matching parameters are approved without
    asking ("always allow", docs/harness.md)."""


# Reply shapes, for the OpenAPI document (the handlers encode plain data of these shapes).


class ConversationList(msgspec.Struct, frozen=True, kw_only=True):
    conversations: list[ConversationInfo]


class ConversationSummary(ConversationInfo, frozen=True, kw_only=True, rename="camel"):
    pending_relays: list[str]


class RelayList(msgspec.Struct, frozen=True, kw_only=True):
    relays: list[dict[str, Any]]
    """Each relay event (wire form) with its ``decision`` (a ``relay_resolved`` event, or null)."""


class RelayDecided(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    relay_id: str
    approved: bool
    seq: int
    decided_at: float


def _json(data: Any, status: int = 200) -> Response[bytes]:
    return Response(_encode(data), status_code=status, media_type=MediaType.JSON)


def _parse_seq(raw: str | None, name: str) -> int | None:
    """A seq given as text: ASCII digits only (no sign, ``_``, exponent or other scripts' digits,
    all of which `int` would take); 400 naming ``name`` otherwise."""
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()):
        raise ApiError(400, f"{name} must be a non-negative integer seq (digits 0-9), got {raw!r}")
    value = int(raw)
    if value > MAX_SEQ:
        raise ApiError(400, f"{name} must be a seq between 0 and {MAX_SEQ}, got {raw!r}")
    return value


def _check_cursor(after_seq: int, info: ConversationInfo | None, name: str) -> None:
    """409 ``cursor_past_head`` when ``after_seq`` is past the conversation's last seq: nothing
    would ever come (the conversation was deleted and re-created, or the cursor is another's)."""
    last_seq = info.last_seq if info is not None else 0
    if after_seq > last_seq:
        raise ApiError(
            409,
            f"{name} {after_seq} is past this conversation's last seq {last_seq} (was it deleted and"
            f" re-created?): resume after a seq at most {last_seq}, or after 0 to read it from the start",
            code="cursor_past_head",
            details={"lastSeq": last_seq, "requested": after_seq},
            headers={"X-Convograph-Seq": str(last_seq)},
        )


def _model(model: str) -> str:
    if model not in ("hypergraph", "flat"):
        raise ApiError(400, f"model must be hypergraph or flat, got {model!r}")
    return model


def _memo(live: LiveState, key: tuple[Any, ...], build: Any) -> bytes:
    """Encoded projection for the state's current seq, built at most once per seq."""
    cached: bytes | None = live.memo.get(key)
    if cached is None:
        cached = _encode(to_jsonable(build()))
        live.memo[key] = cached
    return cached


class ConversationController(Controller):
    path = "/v1/conversations"
    tags = ["conversations"]  # noqa: RUF012 - Litestar's attribute

    @post(
        "/{cid:str}/events",
        guards=[require("write")],
        status_code=200,
        summary="Append events",
        **documented(
            IngestResult,
            description="Stored (duplicates by eventId are counted, not stored again)",
            body=Event | list[Event],
            ndjson_body=True,
            errors=(400, 413, 415, 422),
            also={202: reply(Spooled, "The backend is down: spooled locally, stored when it is back")},
        ),
    )
    async def append_events(self, request: Request[Any, Any, Any], cid: ConversationId) -> Response[bytes]:
        """Body: one event, a JSON array, or NDJSON. Validated whole (422 lists every bad item)."""
        state = server_state(request)
        body = await request.body()
        try:
            events = parse_event_batch(
                body, request.headers.get("content-type"), max_events=state.config.max_batch_events
            )
        except ApiError as exc:
            if exc.status == 422:
                state.metrics.events_rejected += len(exc.details or ())
            raise
        result = await state.log.append(cid, events)
        state.appended(cid, result)
        state.metrics.events_accepted += result.accepted
        state.metrics.events_duplicate += result.duplicates
        if state.feeder is not None and result.accepted:  # the graph is fed from the log, in the background
            state.feeder.mark(cid)
        if result.spooled:
            # The backend is down: the batch is durable in the local spool and gets its seqs when
            # the spool drains, so the seq is not known yet.
            return _json(
                {"accepted": result.accepted, "duplicates": 0, "last_seq": None, "spooled": True}, 202
            )
        return _json(
            to_jsonable(
                IngestResult(
                    accepted=result.accepted,
                    duplicates=result.duplicates,
                    last_seq=result.conversation_last_seq,
                )
            )
        )

    @get("/", guards=[require("read")], summary="List conversations", **documented(ConversationList))
    async def list_conversations(self, request: Request[Any, Any, Any]) -> Response[bytes]:
        state = server_state(request)
        principal = principal_of(request)
        infos = [
            info for info in await state.log.list_conversations() if principal.can_reach_conversation(info.id)
        ]
        return _json({"conversations": to_jsonable(infos)})

    @get(
        "/{cid:str}",
        guards=[require("read")],
        summary="One conversation's summary",
        **documented(ConversationSummary, errors=(400, 404)),
    )
    async def get_conversation(self, request: Request[Any, Any, Any], cid: ConversationId) -> Response[bytes]:
        state = server_state(request)
        info = await state.log.get_conversation(cid)
        if info is None:
            raise unknown_conversation(cid)
        live = await state.conversations.get(cid)
        body = to_jsonable(info)
        body["pendingRelays"] = [relay_id for relay_id in live.relays if relay_id not in live.decisions]
        return _json(body)

    @delete(
        "/{cid:str}",
        guards=[require("admin")],
        status_code=204,
        summary="Delete a conversation",
        **documented(None, status=204, description="Deleted", errors=(400, 404)),
    )
    async def delete_conversation(self, request: Request[Any, Any, Any], cid: ConversationId) -> None:
        state = server_state(request)
        if not await state.log.delete(cid):
            raise unknown_conversation(cid)
        state.conversations.forget(cid)
        state.conversation_list.deleted(cid)
        state.hubs.end_conversation(cid, "deleted")  # open streams end: the seqs start again
        if state.feeder is not None:  # its session in the context-intelligence graph goes too
            try:
                await state.feeder.forget(cid)
            except Exception as exc:
                from convograph.intelligence.conversations import conversation_target

                workspace, session_id = conversation_target(cid)
                raise ApiError(
                    503,
                    f"the conversation was deleted from the log, but forgetting its graph session failed"
                    f" ({exc}); retry with DELETE /sessions/{session_id}?workspace={workspace}",
                    code="unavailable",
                ) from None

    @get(
        "/{cid:str}/events",
        guards=[require("read")],
        summary="Replay events as NDJSON",
        **documented(Event, media_type=NDJSON, description="One event per line", errors=(400, 404, 409)),
    )
    async def replay(
        self,
        request: Request[Any, Any, Any],
        cid: ConversationId,
        after: Annotated[
            str | None,
            QueryParameter(name="after", description="Return events with seq > after.", schema_extra=_SEQ),
        ] = None,
        limit: Annotated[int | None, QueryParameter(name="limit", ge=1)] = None,
    ) -> Stream:
        state = server_state(request)
        after_seq = _parse_seq(after, "after") or 0
        info = await state.log.get_conversation(cid)
        if info is None:
            raise unknown_conversation(cid)
        _check_cursor(after_seq, info, "after")

        async def lines() -> AsyncIterator[bytes]:
            cursor, remaining = after_seq, limit
            while remaining is None or remaining > 0:
                page_size = 1000 if remaining is None else min(1000, remaining)
                page = await state.log.read(cid, cursor, page_size)
                if not page:
                    return
                yield b"".join(encode_event(stored.event) + b"\n" for stored in page)
                cursor = page[-1].seq
                if remaining is not None:
                    remaining -= len(page)

        return Stream(lines(), media_type=NDJSON)

    @get(
        "/{cid:str}/stream",
        guards=[require("read")],
        summary="Live events (Server-Sent Events)",
        **documented(str, media_type=SSE, description="An endless event stream", errors=(400, 409, 429)),
    )
    async def stream(
        self,
        request: Request[Any, Any, Any],
        cid: ConversationId,
        after: Annotated[str | None, QueryParameter(name="after", schema_extra=_SEQ)] = None,
        last_event_id: Annotated[str | None, HeaderParameter(name="Last-Event-ID", schema_extra=_SEQ)] = None,
        protocol: Annotated[str, one_of("protocol", *STREAM_PROTOCOLS)] = "native",
    ) -> Stream:
        """``id: <seq>``, ``event: <type>``, ``data: <json>``; resumes after ``Last-Event-ID`` (or
        ``?after=``) with exactly the missing events, then live ones; ``: heartbeat`` while idle.
        ``protocol=ag-ui`` / ``ai-sdk``: the same stream as AG-UI events / the AI SDK UI message
        stream (docs/integrations.md); their ``Last-Event-ID`` may be ``<seq>:<chunk>``. A cursor
        past the conversation's last seq is a 409 carrying that seq."""
        state = server_state(request)
        factory: EncoderFactory | None = None
        headers: dict[str, str] = {}
        skip = 0
        if protocol == "native":
            resume = _parse_seq(last_event_id, "Last-Event-ID")
            after_seq = resume if resume is not None else (_parse_seq(after, "after") or 0)
        else:
            factory, headers, after_seq, skip = protocol_stream_options(
                protocol, cid, _parse_seq(after, "after") or 0, last_event_id
            )
        if after_seq:
            cursor_name = "Last-Event-ID" if last_event_id else "after"
            _check_cursor(after_seq, await state.log.get_conversation(cid), cursor_name)
        release = admit_stream(request)
        heartbeat = state.config.sse_heartbeat_seconds
        metrics = state.metrics
        subscriber = Subscriber(after_seq)
        stream_format = "" if protocol == "native" else protocol

        async def frames() -> AsyncGenerator[bytes, None]:
            yield RETRY_FRAME
            async for count, chunk in stream_frames(
                state.log,
                state.hubs,
                cid,
                subscriber,
                heartbeat=heartbeat,
                stream_format=stream_format,
                factory=factory,
                skip=skip,
            ):
                metrics.sse_events_sent += count
                yield chunk

        return EventStream(
            frames(), stop=lambda: subscriber.end("disconnected"), release=release, headers=headers
        )

    @get(
        "/{cid:str}/thread",
        guards=[require("read")],
        summary="Thread projection",
        **documented(list[dict[str, Any]], description="The thread's views", errors=(400, 404)),
    )
    async def thread(
        self,
        request: Request[Any, Any, Any],
        cid: ConversationId,
        model: Annotated[str, one_of("model", "hypergraph", "flat")] = "hypergraph",
        repl: Annotated[bool, QueryParameter(name="repl")] = False,
    ) -> Response[bytes]:
        """ViewNodes of the active path (``model=hypergraph``, the default: branches and commands
        apply) or of the whole flat graph (``model=flat``). ``repl=true`` (hypergraph only): REPL
        turns as ``repl`` views, with the runs they spawned nested under them (beyond the seed,
        whose thread drops ``repl_*`` events; docs/server.md)."""
        live = await existing_conversation(server_state(request), cid)
        if _model(model) == "flat":
            if repl:
                raise ApiError(400, "repl=true needs model=hypergraph (the flat graph keeps no REPL events)")
            body = _memo(live, ("thread", "flat"), lambda: project_thread(live.graph))
        elif repl:
            body = _memo(live, ("thread", "repl"), live.thread_with_repl_cells)
        else:
            body = _memo(live, ("thread",), live.projector.to_jsonable)
        return Response(body, media_type=MediaType.JSON, headers={"X-Convograph-Seq": str(live.last_seq)})

    @get(
        "/{cid:str}/messages",
        guards=[require("read")],
        summary="LLM message list",
        **documented(list[dict[str, Any]], description="The request history", errors=(400, 404)),
    )
    async def messages(
        self,
        request: Request[Any, Any, Any],
        cid: ConversationId,
        format: Annotated[str, one_of("format", *MESSAGE_FORMATS)] = "openai",
        model: Annotated[str, one_of("model", "hypergraph", "flat")] = "hypergraph",
    ) -> Response[bytes]:
        if format not in MESSAGE_FORMATS:
            raise ApiError(400, f"format must be one of {', '.join(MESSAGE_FORMATS)}, got {format!r}")
        live = await existing_conversation(server_state(request), cid)
        if _model(model) == "flat":
            body = _memo(
                live, ("messages", format, "flat"), lambda: project_messages(live.graph, format=format)
            )
        else:
            body = _memo(live, ("messages", format), lambda: live.projector.messages(format))
        return Response(body, media_type=MediaType.JSON, headers={"X-Convograph-Seq": str(live.last_seq)})

    @get(
        "/{cid:str}/dag",
        guards=[require("read")],
        summary="DAG layout (JSON, or SVG with ?format=svg)",
        **documented(
            dict[str, Any],
            description="The layout (SVG with ?format=svg)",
            errors=(400, 404),
            also_media=[SVG],
        ),
    )
    async def dag(
        self,
        request: Request[Any, Any, Any],
        cid: ConversationId,
        format: Annotated[str, one_of("format", "json", "svg")] = "json",
        model: Annotated[str, one_of("model", "hypergraph", "flat")] = "hypergraph",
    ) -> Response[bytes]:
        if format not in ("json", "svg"):
            raise ApiError(400, f"format must be json or svg, got {format!r}")
        live = await existing_conversation(server_state(request), cid)
        flat = _model(model) == "flat"
        key = ("dag", flat)
        layout = live.memo.get(key)
        if layout is None:
            layout = live.memo[key] = project_dag(live.graph) if flat else project_dag(live.conversation)
        if format == "svg":
            svg = live.memo.get(("dag-svg", flat))
            if svg is None:
                svg = live.memo[("dag-svg", flat)] = layout.to_svg().encode()
            return Response(svg, media_type="image/svg+xml")
        body = _memo(live, ("dag-json", flat), lambda: layout)
        return Response(body, media_type=MediaType.JSON)

    @get(
        "/{cid:str}/repl",
        guards=[require("read")],
        summary="REPL view (RLM agents, turns, children)",
        **documented(dict[str, Any], description="The REPL view", errors=(400, 404)),
    )
    async def repl(self, request: Request[Any, Any, Any], cid: ConversationId) -> Response[bytes]:
        """`project_repl` of the conversation (spec §4.5: root agents, every agent by run id),
        from the conversation's `ReplProjector`: O(new events + agents + turns) per request."""
        live = await existing_conversation(server_state(request), cid)
        body = _memo(live, ("repl",), live.projector.repl)
        return Response(body, media_type=MediaType.JSON, headers={"X-Convograph-Seq": str(live.last_seq)})

    @get(
        "/{cid:str}/relays",
        guards=[require("read")],
        summary="Relays and their decisions",
        **documented(RelayList, errors=(400, 404)),
    )
    async def relays(self, request: Request[Any, Any, Any], cid: ConversationId) -> Response[bytes]:
        live = await existing_conversation(server_state(request), cid)
        out = []
        for relay_id, relay in live.relays.items():
            decision = live.decisions.get(relay_id)
            item = to_jsonable(relay)
            item["decision"] = to_jsonable(decision) if decision is not None else None
            out.append(item)
        return _json({"relays": out})

    @post(
        "/{cid:str}/relays/{relay_id:str}",
        guards=[require("write")],
        status_code=200,
        summary="Decide a relay",
        **documented(RelayDecided, body=RelayDecision, errors=(400, 404, 409, 413)),
    )
    async def decide_relay(
        self, request: Request[Any, Any, Any], cid: ConversationId, relay_id: FromPath[str]
    ) -> Response[bytes]:
        """Records ``relay_resolved`` in the log, so the decision survives reconnects and restarts.
        A relay is decided once: a second decision is refused with 409."""
        state = server_state(request)
        decision = decode_body(await request.body(), RelayDecision)
        live = await existing_conversation(state, cid)
        relay = live.relays.get(relay_id)
        if relay is None:
            raise ApiError(404, f"conversation {cid!r} has no relay {relay_id!r}", code="unknown_relay")
        if relay_id in live.decisions:
            raise _already_decided(live.decisions[relay_id])
        if decision.always and not decision.approved:
            raise ApiError(400, "always applies to an approval: send approved: true with always: true")
        event: Event = RelayResolved(
            relay_id=relay_id,
            approved=decision.approved,
            always=decision.always,
            reason=decision.reason,
            tool=relay.tool,
            run_id=relay.run_id,
            event_id=f"relay-decision:{relay_id}",
            timestamp=datetime.now(UTC).isoformat(timespec="milliseconds"),
        )
        result = await state.log.append(cid, [event])
        state.appended(cid, result)
        if result.duplicates:
            live = await state.conversations.get(cid)
            raise _already_decided(live.decisions.get(relay_id))
        state.metrics.events_accepted += result.accepted
        return _json(
            {
                "relayId": relay_id,
                "approved": decision.approved,
                "seq": result.last_seq,
                "decidedAt": time.time(),
            }
        )


def _already_decided(existing: RelayResolved | None) -> ApiError:
    details = to_jsonable(existing) if existing is not None else None
    return ApiError(409, "this relay was already decided", code="relay_already_decided", details=details)


@get(
    "/v1/live/conversations",
    guards=[require("read")],
    summary="Live conversation list (Server-Sent Events)",
    tags=["conversations"],
    **documented(str, media_type=SSE, description="An endless event stream", errors=(429,)),
)
async def live_conversation_list(request: Request[Any, Any, Any]) -> Stream:
    """``event: snapshot`` (``{"conversations": [...]}``, the rows of ``GET /v1/conversations``),
    then ``event: conversation`` (one changed row) and ``event: deleted`` (``{"id"}``) as they
    happen; ``: heartbeat`` while idle. A reconnect starts with a fresh snapshot. A row may arrive
    again unchanged or, right after the snapshot, older than it: keep the one with the larger
    ``lastSeq``."""
    state = server_state(request)
    listener = ListListener(principal_of(request).can_reach_conversation)
    release = admit_stream(request)
    feed = state.conversation_list.frames(
        listener.can_see, heartbeat=state.config.sse_heartbeat_seconds, listener=listener
    )

    async def frames() -> AsyncGenerator[bytes, None]:
        yield RETRY_FRAME
        async for chunk in feed:
            yield chunk

    return EventStream(frames(), stop=lambda: listener.end("disconnected"), release=release)
