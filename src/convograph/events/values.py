"""Value rules the types cannot state: counts and timestamps an event may hold.

`parse_event` applies `value_problem` to every event it accepts (the conversation ingest of
``convograph serve`` goes through it for every body form), so these are refused with an `EventError`
naming the field, before anything is stored:

- **Counts** (token counts of ``usage`` and ``harness_end.totalUsage``, ``depth``,
  ``maxIterations``, ``iterations``, ``iteration``, ``durationMs``) are non-negative and at most
  `MAX_COUNT` = 2^53 - 1, the largest integer every JSON reader (a JavaScript viewer too) holds
  exactly. They are integers, except ``durationMs``, which may be fractional.
- **Timestamps** are RFC 3339 date-times (``2026-11-28T10:00:00.123Z``: ``T``, ``t`` or a space
  between date and time, any number of fraction digits, ``Z`` / ``z`` or a ``±HH:MM`` offset; a time
  without an offset is read as UTC; no leap second) or epoch milliseconds, a number from 0
  (1970-01-01T00:00:00Z) to `MAX_EPOCH_MS` (9999-12-31T23:59:59.999Z).

The rules hold for what arrives from now on: `unpack_event` does not apply them, so events an event
log stored before still read back. Cost: nothing for an event without counts or timestamp; a
timestamp string costs two dictionary lookups once its second (``YYYY-MM-DDTHH:MM:SS``) and its tail
(fraction and offset) have been seen, a regular expression and a ``fromisoformat`` the first time.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any, Final

from convograph.events.types import (
    Event,
    HarnessEnd,
    HarnessStart,
    ReplInput,
    ReplOutput,
    Usage,
)

__all__ = [
    "COUNTED_TYPES",
    "MAX_COUNT",
    "MAX_EPOCH_MS",
    "MIN_EPOCH_MS",
    "timestamp_problem",
    "value_problem",
]

MAX_COUNT: Final = 2**53 - 1
MIN_EPOCH_MS: Final = 0
MAX_EPOCH_MS: Final = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z, the last millisecond an RFC 3339 date-time can name."""

_TOKENS: Final = (
    ("input_tokens", "inputTokens"),
    ("output_tokens", "outputTokens"),
    ("cache_read_tokens", "cacheReadTokens"),
    ("cache_creation_tokens", "cacheCreationTokens"),
)
_COUNTS: Final[dict[type[Any], tuple[tuple[str, str], ...]]] = {
    Usage: _TOKENS,
    HarnessStart: (("depth", "depth"), ("max_iterations", "maxIterations")),
    HarnessEnd: (("iterations", "iterations"),),
    ReplInput: (("iteration", "iteration"),),
    ReplOutput: (("iteration", "iteration"), ("duration_ms", "durationMs")),
}
"""The count fields of each event class, as (attribute, wire name)."""
COUNTED_TYPES: Final = frozenset(_COUNTS)
"""Event classes with count fields (the others need a check only when they carry a timestamp)."""

_COUNT_RULE: Final = f"must be a non-negative integer at most {MAX_COUNT} (2^53 - 1)"
_TIMESTAMP_RULE: Final = (
    "must be an RFC 3339 date-time (2026-11-28T10:00:00.123Z; without an offset it is UTC) or epoch"
    f" milliseconds from {MIN_EPOCH_MS} to {MAX_EPOCH_MS} (9999-12-31T23:59:59.999Z)"
)
_SECOND: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}")
_TAIL: Final = re.compile(r"(?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?")
_CACHE_SIZE: Final = 65536
_valid_seconds: set[str] = set()
_valid_tails: set[str] = set()


def value_problem(event: Event) -> tuple[str, str] | None:
    """``(wire field, problem)`` of the first count or timestamp of ``event`` outside the rules
    (see the module docstring), or None. O(number of count fields); the common cases (an integer
    count, a timestamp whose second and tail were seen) take no function call."""
    timestamp = event.timestamp
    if timestamp is not None:
        if type(timestamp) is str:
            known = timestamp[:19] in _valid_seconds and timestamp[19:] in _valid_tails
        else:
            known = type(timestamp) is int and MIN_EPOCH_MS <= timestamp <= MAX_EPOCH_MS
        if not known:
            problem = timestamp_problem(timestamp)
            if problem is not None:
                return "timestamp", problem
    counts = _COUNTS.get(type(event))
    if counts is not None:
        for attr, wire in counts:
            value = getattr(event, attr)
            plain = value is None or (type(value) is int and 0 <= value <= MAX_COUNT)
            if not plain and not _is_count(value):
                return wire, _count_problem(value)
    if type(event) is HarnessEnd and event.total_usage is not None:
        for attr, wire in _TOKENS:
            value = getattr(event.total_usage, attr)
            if value is not None and not _is_count(value):
                return f"totalUsage.{wire}", _count_problem(value)
    return None


def _is_count(value: int | float) -> bool:
    if type(value) is int:
        return 0 <= value <= MAX_COUNT
    return isinstance(value, float) and math.isfinite(value) and 0 <= value <= MAX_COUNT


def _count_problem(value: int | float) -> str:
    if isinstance(value, int) and abs(value) > 10**30:
        return f"{_COUNT_RULE}, got an integer of {len(str(abs(value)))} digits"
    return f"{_COUNT_RULE}, got {value!r}"


def timestamp_problem(value: str | int | float) -> str | None:
    """Why ``value`` is not a valid event timestamp, or None when it is."""
    if isinstance(value, str):
        if _valid_string(value):
            return None
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"{_TIMESTAMP_RULE}, got {shown!r}"
    number = type(value) is int or (type(value) is float and math.isfinite(value))
    if number and MIN_EPOCH_MS <= value <= MAX_EPOCH_MS:
        return None
    return f"{_TIMESTAMP_RULE}, got {value!r}"


def _valid_string(value: str) -> bool:
    second, tail = value[:19], value[19:]
    if second in _valid_seconds and tail in _valid_tails:
        return True
    if _SECOND.fullmatch(second) is None or _TAIL.fullmatch(tail) is None:
        return False
    try:  # the fields' ranges: month 13, February 30, hour 24, second 60
        datetime.fromisoformat(f"{second[:10]}T{second[11:]}")
    except ValueError:
        return False
    if len(_valid_seconds) >= _CACHE_SIZE:
        _valid_seconds.clear()
    if len(_valid_tails) >= _CACHE_SIZE:
        _valid_tails.clear()
    _valid_seconds.add(second)
    _valid_tails.add(tail)  # "" too: the fast path looks the tail up even when there is none
    return True
