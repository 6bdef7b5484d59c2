"""Read NDJSON event streams, reporting the line number of every bad line.

One pass, O(total bytes). Blank lines are skipped (they still count for line numbers). A bad line
never stops the read: it is reported as an `EventError` carrying its ``line``. A UTF-8 byte order
mark at the start of a line (editors on Windows write one at the start of a file) is ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from convograph.events.codec import EventError, parse_event
from convograph.events.types import Event

__all__ = ["NdjsonBatch", "iter_ndjson", "parse_ndjson", "read_ndjson_file"]


class NdjsonBatch(msgspec.Struct, frozen=True):
    """Everything one NDJSON input held: the good events in order, and every bad line."""

    events: list[Event]
    errors: list[EventError]
    lines: int

    @property
    def ok(self) -> bool:
        return not self.errors


def iter_ndjson(
    lines: Iterable[bytes | str], *, first_line: int = 1
) -> Iterator[tuple[int, Event | EventError]]:
    """Yield ``(line_number, event_or_error)`` for every non-blank line."""
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        try:
            yield number, parse_event(line)
        except EventError as exc:
            yield number, exc.located(line=number)


def parse_ndjson(data: bytes | str) -> NdjsonBatch:
    """Parse a whole NDJSON document held in memory.

    Lines end at ``\n`` only (a ``\r`` before it is whitespace), as when a file is read: JSON
    text may hold U+2028 and other characters ``str.splitlines`` would break a line at."""
    if isinstance(data, str):
        return _collect(data.split("\n"))
    return _collect(data.split(b"\n"))


def read_ndjson_file(path: str | Path) -> NdjsonBatch:
    """Parse an NDJSON file, streaming it line by line."""
    with open(path, "rb") as handle:
        return _collect(handle)


def _collect(lines: Iterable[bytes | str]) -> NdjsonBatch:
    events: list[Event] = []
    errors: list[EventError] = []
    count = 0
    for count, item in iter_ndjson(lines):  # noqa: B007 - count is the last line number seen
        if isinstance(item, EventError):
            errors.append(item)
        else:
            events.append(item)
    return NdjsonBatch(events=events, errors=errors, lines=count)
