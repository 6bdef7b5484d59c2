"""``GET /v1/search/conversations``: search across the conversations a key may read.

Criteria combine (all must hold): ``q`` (case-insensitive text, found in a conversation's title,
tool names, agents, error messages or search text), ``status`` (the list's status), ``tool`` (a
tool it called) and ``errors=true`` (it has at least one error). Answers from the `DigestIndex`,
caught up first with the events each conversation gained since (none when nothing changed): a
search costs O(conversations + text searched), with no read of the log when it is current.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec
from litestar import MediaType, Request, Response, get
from litestar.params import QueryParameter

from convograph.jsonable import to_jsonable
from convograph.server.digests import MAX_QUERY_CHARS, SearchHit, search_digests
from convograph.server.errors import ApiError
from convograph.server.openapi import documented, one_of
from convograph.server.state import principal_of, require, server_state
from convograph.store import ConversationInfo
from convograph.store.status import ACTIVE, COMPLETE, ERROR, IDLE

__all__ = ["ConversationMatch", "SearchReply", "search_conversations"]

STATUSES: Final = (IDLE, ACTIVE, COMPLETE, ERROR)
MAX_LIMIT: Final = 10_000


class ConversationMatch(ConversationInfo, frozen=True, kw_only=True, rename="camel"):
    """A conversation that matched: its list row, its digest and where the text matched."""

    title: str | None
    tools: list[str]
    agents: list[str]
    errors: int
    hits: list[SearchHit]
    """Where ``q`` matched (at most 3; empty without ``q``)."""
    text_complete: bool
    """False when the conversation has more text than the search looks at (its first
    `SEARCH_TEXT_CHARS` characters)."""


class SearchReply(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    query: str
    results: list[ConversationMatch]
    """Newest activity first, at most ``limit``."""
    total: int
    """Conversations that matched (``results`` holds the first ``limit``)."""
    searched: int
    """Conversations searched (those the key may read)."""


@get(
    "/v1/search/conversations",
    guards=[require("read")],
    summary="Search conversations (text, tool, status, errors)",
    tags=["conversations"],
    **documented(SearchReply, errors=(400,)),
)
async def search_conversations(
    request: Request[Any, Any, Any],
    q: Annotated[
        str,
        QueryParameter(
            name="q", description=f"Text to find, case-insensitive; 1-{MAX_QUERY_CHARS} characters."
        ),
    ] = "",
    status: Annotated[str, one_of("status", *STATUSES)] = "",
    tool: Annotated[
        str, QueryParameter(name="tool", description="Only conversations that called this tool.")
    ] = "",
    errors: Annotated[
        bool, QueryParameter(name="errors", description="Only conversations with errors.")
    ] = False,
    limit: Annotated[int, QueryParameter(name="limit", ge=1, le=MAX_LIMIT)] = 50,
) -> Response[bytes]:
    needle = q.strip().lower()
    if len(needle) > MAX_QUERY_CHARS:
        raise ApiError(400, f"q must be at most {MAX_QUERY_CHARS} characters, got {len(needle)}")
    if status and status not in STATUSES:
        raise ApiError(400, f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    if not (needle or status or tool or errors):
        raise ApiError(400, "give at least one of q, status, tool or errors=true")
    state = server_state(request)
    principal = principal_of(request)
    rows = [
        info for info in await state.log.list_conversations() if principal.can_reach_conversation(info.id)
    ]
    rows.sort(key=lambda info: info.last_activity, reverse=True)
    matches: list[ConversationMatch] = []
    total = 0
    for info in rows:
        if status and info.status != status:
            continue
        digest = await state.digests.catch_up(info.id, info.last_seq)
        if (tool and tool not in digest.tools) or (errors and not digest.errors):
            continue
        hits = search_digests(digest, needle) if needle else []
        if needle and not hits:
            continue
        total += 1
        if len(matches) < limit:
            matches.append(
                ConversationMatch(
                    **msgspec.structs.asdict(info),
                    **digest.row_fields(),
                    hits=hits,
                    text_complete=digest.text_complete,
                )
            )
    reply = SearchReply(query=q, results=matches, total=total, searched=len(rows))
    return Response(msgspec.json.encode(to_jsonable(reply)), media_type=MediaType.JSON)
