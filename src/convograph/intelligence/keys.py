"""Node ids the graph engine can hold under a unique constraint.

FalkorDB (4.22, the engine ``falkordblite`` embeds) crashes the whole server (SIGSEGV in
``EnforceUniqueEntity``) when it creates a node whose uniquely constrained string property

- starts or ends with ASCII whitespace (``' '``, ``\\t``, ``\\n``, ``\\v``, ``\\f``, ``\\r``;
  FalkorDB issue #1340),
- contains U+0001 anywhere (measured here: the unique index's tag separator), or
- is longer than 4,096 bytes (FalkorDB issue #2440),

and again on every replay of the event after the restart. Under a plain (not unique) index the
same values do not crash it, but an index lookup never finds them: every ``MERGE`` of such an id
creates one more duplicate node (measured on 4.22). So every ``node_id`` built from client data
passes through `graph_key`: an id the engine can hold keeps its seed-004 form, and only any other
is replaced by a readable, deterministic stand-in (so redelivery, replays and rebuilds converge on
the same node). ``data`` keeps the payload as sent.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["MAX_KEY_BYTES", "graph_key", "is_graph_safe"]

MAX_KEY_BYTES: Final = 1024
"""Longest id kept as is (UTF-8 bytes): a quarter of the engine's limit, leaving room for the
prefixes (``tool:``) and collision suffixes (``__`` + 12 hex) added around a key."""

_EDGE: Final = " \t\n\v\f\r"
_STAND_IN_CHARS: Final = 64


def is_graph_safe(value: str) -> bool:
    """Whether the engine can hold ``value`` under a unique constraint as it is. O(len)."""
    return (
        bool(value)
        and value[0] not in _EDGE
        and value[-1] not in _EDGE
        and "\x01" not in value
        and (len(value) <= MAX_KEY_BYTES // 4 or len(value.encode("utf-8", "surrogatepass")) <= MAX_KEY_BYTES)
    )


def graph_key(value: str) -> str:
    """``value`` when `is_graph_safe`, else ``<readable prefix>~<24 hex of sha256(value)>``: the
    prefix is ``value`` without U+0001, edge whitespace and anything past 64 characters, so a
    stand-in is itself safe (idempotent: ``graph_key(graph_key(v)) == graph_key(v)``) and two
    different values get different stand-ins. O(len(value))."""
    if is_graph_safe(value):
        return value
    prefix = value.replace("\x01", "").strip(_EDGE)[:_STAND_IN_CHARS].lstrip(_EDGE)
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"{prefix}~{digest}"
