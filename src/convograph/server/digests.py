"""Conversation digests: what the conversation list shows and searches beyond the log's summary row.

A `Digest` is a fold of one conversation's events, in seq order: its title (the first user
message, whitespace collapsed, at most `TITLE_CHARS` characters), the tools it called (with call
counts), the agents that ran, its error count and first error messages, and a search text (user and
assistant text, reasoning, tool names, inputs and outputs, relays, REPL code and output, error
messages and edits; the first `SEARCH_TEXT_CHARS` characters of it).

`DigestIndex` keeps one digest per conversation and catches it up with the log on demand, reading
only the events after the last one it folded: a changed row costs O(new events), a search
O(conversations + text searched) and no read at all when nothing changed. The search text is
capped per conversation, so the index holds at most ~2 x `SEARCH_TEXT_CHARS` characters per
conversation (the text and its lower-case copy).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from convograph.events import (
    Edit,
    Error,
    HarnessStart,
    Reasoning,
    Relay,
    ReplInput,
    ReplOutput,
    Text,
    ToolCall,
    ToolResult,
    User,
)
from convograph.store import ConversationInfo, EventLog, StoredEvent

__all__ = [
    "MAX_QUERY_CHARS",
    "SEARCH_TEXT_CHARS",
    "TITLE_CHARS",
    "Digest",
    "DigestIndex",
    "SearchHit",
    "fold_digest",
    "search_digests",
]

TITLE_CHARS: Final = 120
SEARCH_TEXT_CHARS: Final = 32_000
"""Characters of a conversation's text that cross-conversation search looks at (the first ones)."""
PAYLOAD_CHARS: Final = 2_000
"""Characters of one tool input / output / REPL output that go into the search text."""
MAX_TOOLS: Final = 64
MAX_AGENTS: Final = 64
MAX_ERROR_MESSAGES: Final = 5
MAX_QUERY_CHARS: Final = 200
SNIPPET_CHARS: Final = 60
"""Characters of context on each side of a match in a snippet."""
READ_PAGE: Final = 1000

_encode = msgspec.json.Encoder()


@dataclass(slots=True, eq=False)
class Digest:
    """One conversation's digest, folded up to event ``seq``."""

    seq: int = 0
    title: str | None = None
    tools: dict[str, int] = field(default_factory=dict)
    agents: dict[str, None] = field(default_factory=dict)
    errors: int = 0
    error_messages: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    """The search text, in pieces (joined on demand by `text`: appending deltas stays O(delta))."""
    length: int = 0
    text_complete: bool = True
    """False once the conversation had more text than `SEARCH_TEXT_CHARS` (the rest is not searched)."""
    last_stream: str | None = None
    """Id of the text / reasoning stream the search text ends with (its next delta joins it)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _lower: str | None = None

    def text(self) -> tuple[str, str]:
        """The search text and its lower-case copy (built once per change, then cached)."""
        if self._lower is None or len(self.parts) != 1:
            joined = "".join(self.parts)
            self.parts = [joined]
            self._lower = joined.lower()
        return self.parts[0], self._lower

    def row_fields(self) -> dict[str, Any]:
        """What a list row carries besides `ConversationInfo`: title, tools, agents, errors."""
        return {
            "title": self.title,
            "tools": list(self.tools),
            "agents": list(self.agents),
            "errors": self.errors,
        }


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _user_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(getattr(part, "text", "") or "" for part in content)


def _payload(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else _encode.encode(value).decode()
    return text[:PAYLOAD_CHARS]


def _append_text(digest: Digest, text: str, *, stream: str | None = None) -> None:
    """Add ``text`` to the search text: a delta of the stream the text ends with joins it, anything
    else starts a new line. Past `SEARCH_TEXT_CHARS` the text is cut and marked incomplete."""
    if not text:
        return
    if stream is None or stream != digest.last_stream:
        text = ("\n" if digest.length else "") + text
    digest.last_stream = stream
    room = SEARCH_TEXT_CHARS - digest.length
    if room <= 0:
        digest.text_complete = False
        return
    if len(text) > room:
        text = text[:room]
        digest.text_complete = False
    digest.parts.append(text)
    digest.length += len(text)
    digest._lower = None


def fold_digest(digest: Digest, events: Iterable[StoredEvent]) -> Digest:
    """Fold ``events`` (in seq order, after ``digest.seq``) into ``digest``, in place; returns it.
    O(len(events) + text added)."""
    for stored in events:
        event = stored.event
        digest.seq = stored.seq
        if isinstance(event, Text | Reasoning):
            _append_text(digest, event.content, stream=event.id)
        elif isinstance(event, User):
            text = _user_text(event.content)
            if digest.title is None and text.strip():
                title = _one_line(text)
                digest.title = title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"
            _append_text(digest, text)
        elif isinstance(event, ToolCall):
            if event.name in digest.tools or len(digest.tools) < MAX_TOOLS:
                digest.tools[event.name] = digest.tools.get(event.name, 0) + 1
            _append_text(digest, f"{event.name} {_payload(event.input)}")
        elif isinstance(event, ToolResult):
            _append_text(digest, _payload(event.output))
        elif isinstance(event, Error):
            digest.errors += 1
            if len(digest.error_messages) < MAX_ERROR_MESSAGES:
                digest.error_messages.append(_one_line(event.message)[:200])
            _append_text(digest, event.message)
        elif isinstance(event, HarnessStart):
            if event.agent_id and len(digest.agents) < MAX_AGENTS:
                digest.agents[event.agent_id] = None
        elif isinstance(event, Relay):
            _append_text(digest, f"{event.tool} {_payload(event.params)}")
        elif isinstance(event, ReplInput):
            _append_text(digest, event.code[:PAYLOAD_CHARS])
        elif isinstance(event, ReplOutput):
            _append_text(
                digest, (event.stdout or "")[:PAYLOAD_CHARS] + (f"\n{event.error}" if event.error else "")
            )
        elif isinstance(event, Edit):
            _append_text(digest, _user_text(event.content))
    return digest


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    """Where a query matched one conversation: ``field`` is ``title``, ``tool``, ``agent``,
    ``error`` or ``text``; ``snippet`` shows the match with some context."""

    field: str
    snippet: str


def _snippet(text: str, lower: str, at: int, length: int) -> str:
    # A lower-case copy of unusual Unicode can differ in length: then the snippet comes from it.
    source = text if len(text) == len(lower) else lower
    start, end = max(0, at - SNIPPET_CHARS), min(len(source), at + length + SNIPPET_CHARS)
    piece = source[start:end].replace("\\n", " ")  # a newline inside JSON-encoded tool output
    return ("…" if start else "") + _one_line(piece) + ("…" if end < len(source) else "")


def search_digests(digest: Digest, needle: str, *, max_hits: int = 3) -> list[SearchHit]:
    """Where ``needle`` (lower case) occurs in ``digest``: title, tool names, agents, error messages,
    then the search text; at most ``max_hits``. O(text)."""
    hits: list[SearchHit] = []
    if digest.title and needle in digest.title.lower():
        hits.append(SearchHit(field="title", snippet=digest.title))
    hits.extend(SearchHit(field="tool", snippet=name) for name in digest.tools if needle in name.lower())
    hits.extend(SearchHit(field="agent", snippet=name) for name in digest.agents if needle in name.lower())
    hits.extend(SearchHit(field="error", snippet=m) for m in digest.error_messages if needle in m.lower())
    if len(hits) < max_hits and digest.length:
        text, lower = digest.text()
        at = lower.find(needle)
        if at >= 0:
            hits.append(SearchHit(field="text", snippet=_snippet(text, lower, at, len(needle))))
    return hits[:max_hits]


class DigestIndex:
    """One `Digest` per conversation, caught up with ``log`` on demand (see the module docstring)."""

    def __init__(self, log: EventLog) -> None:
        self._log = log
        self._digests: dict[str, Digest] = {}

    def __len__(self) -> int:
        return len(self._digests)

    def get(self, conversation_id: str) -> Digest | None:
        return self._digests.get(conversation_id)

    def current(self, info: ConversationInfo) -> bool:
        """The digest of ``info``'s conversation has folded every event the row counts."""
        digest = self._digests.get(info.id)
        return digest is not None and digest.seq == info.last_seq

    def forget(self, conversation_id: str) -> None:
        self._digests.pop(conversation_id, None)

    async def catch_up(self, conversation_id: str, last_seq: int) -> Digest:
        """The digest folded up to at least ``last_seq`` (reading only the events after the last one
        folded; none when it is current). A log that restarted below the digest's seq (the
        conversation was deleted and written again elsewhere) is folded again from the start."""
        digest = self._digests.get(conversation_id)
        if digest is not None and digest.seq == last_seq:
            return digest
        if digest is None or last_seq < digest.seq:
            digest = self._digests[conversation_id] = Digest()
        async with digest.lock:
            while digest.seq < last_seq:
                page = await self._log.read(conversation_id, digest.seq, READ_PAGE)
                if not page:
                    break
                fold_digest(digest, page)
        return digest

    async def catch_up_all(self, rows: Sequence[ConversationInfo]) -> None:
        for info in rows:
            if not self.current(info):
                await self.catch_up(info.id, info.last_seq)
