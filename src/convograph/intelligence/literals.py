"""Cypher literals for statement parameters: FalkorDB reads parameters from a ``CYPHER name=value``
header in the statement text, rendered here. `params_header` is a straight O(size) formatter (the
client library's one was the ingest hot spot): JSON text where JSON is a Cypher literal (no map,
no ``\\uXXXX`` escape, no subnormal float), the recursive `cypher_literal` otherwise.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

__all__ = [
    "MapFreeList",
    "NormalFloatList",
    "cypher_literal",
    "literal_fast",
    "needs_formatter",
    "params_header",
]


def _quote(text: str) -> str:
    """A double-quoted FalkorDB string literal of ``text``. FalkorDB reads every other character
    (control characters included) literally, but a NUL ends its C string: NUL is written as
    U+FFFD, the one value that cannot travel unchanged."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cypher_literal(value: Any) -> str:
    """A Cypher literal for a JSON-like value (str, bool, int, float, None, list, mapping)."""
    if isinstance(value, str):
        return _quote(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float) and 0.0 < abs(value) < _SMALLEST_NORMAL:
        return "-0.0" if value < 0 else "0.0"  # FalkorDB's parser refuses subnormals: flushed to zero
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping):
        parts = []
        for key, item in value.items():
            name = str(key)
            if not name or "`" in name:
                raise ValueError(f"map key {name!r} cannot be used as a Cypher parameter key")
            parts.append(f"`{name}`:{cypher_literal(item)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(cypher_literal(item) for item in value) + "]"
    raise TypeError(f"cannot pass {type(value).__name__} as a Cypher parameter")


_json_encoder = msgspec.json.Encoder()
_SCALARS = (str, int, float, bool, type(None))
_SMALLEST_NORMAL = sys.float_info.min
_ESCAPE = re.compile(rb"\\u")
_SUBNORMAL_EXPONENT = re.compile(rb"e-3(?:0[89]|[1-9][0-9])(?=[,\]}]|\Z)")
"""Exponents -308 and below ending a number: the text of every subnormal float (and of a few
normal ones). A JSON number ends at ``,``, ``]``, ``}`` or the end of the text; without that
lookahead every UUID with a group like ``…e-3092`` matched, and one such id sent its whole
5,000-row statement down the slow recursive formatter (~210 of ci-large's 119k events)."""


def _has_map(value: Any) -> bool:
    if isinstance(value, Mapping):
        return True
    if isinstance(value, list | tuple):
        return any(_has_map(item) for item in value if not isinstance(item, _SCALARS))
    return False


class MapFreeList(list[Any]):
    """A parameter list the caller promises holds no mapping at any depth (rows of scalars and
    lists): it skips the O(size) Python walk that looks for maps (measured ~10 µs per event row)."""

    __slots__ = ()


class NormalFloatList(MapFreeList):
    """A `MapFreeList` that also holds no subnormal float at any depth (the layer-1 Event rows:
    `lifters.graph_value` flushes them): its JSON text is not scanned for subnormal exponents
    (~0.7 us per ci-large event, most of it in the UUIDs and payload text of the rows)."""

    __slots__ = ()


def literal_fast(value: Any) -> str:
    """JSON text is a Cypher literal when no map is involved: FalkorDB reads JSON string escapes
    (``\\n``, ``\\"``, raw UTF-8 ...) except ``\\uXXXX``, which msgspec only emits for control
    characters; those (rare) values take the recursive path. O(size), in C."""
    kind = type(value)
    if kind is not MapFreeList and kind is not NormalFloatList and _has_map(value):
        return cypher_literal(value)
    encoded = _json_encoder.encode(value)
    if needs_formatter(encoded, subnormals=kind is not NormalFloatList):
        return cypher_literal(value)
    return encoded.decode()


def needs_formatter(encoded: bytes, *, subnormals: bool = True) -> bool:
    """Whether JSON text may hold what FalkorDB reads differently: a ``\\uXXXX`` escape or (unless
    ``subnormals`` is false) a subnormal float. False positives only cost the slower formatter (a
    text holding a literal backslash followed by ``u`` is not one any more). O(size)."""
    hit = _ESCAPE.search(encoded)  # a regex literal search: ~1.5x faster than `in` here
    while hit is not None:
        # ``\u`` is an escape when its backslash is not itself escaped: an odd run of
        # backslashes ends there (``\\u`` is a literal backslash followed by ``u``)
        at = hit.start()
        start = at
        while start > 0 and encoded[start - 1] == 0x5C:
            start -= 1
        if (at - start) % 2 == 0:
            return True
        hit = _ESCAPE.search(encoded, at + 2)
    if not subnormals:
        return False
    at = encoded.find(b"e-3")  # bytes.find is a fast scan; the pattern is matched only where it starts
    while at >= 0:
        if _SUBNORMAL_EXPONENT.match(encoded, at) is not None:
            return True
        at = encoded.find(b"e-3", at + 3)
    return False


def params_header(params: Mapping[str, Any] | None) -> str:
    if not params:
        return ""
    parts = []
    for key, value in params.items():
        if not key or not key.replace("_", "a").isalnum():
            raise ValueError(f"parameter name {key!r} must be letters, digits and '_'")
        parts.append(f"{key}={literal_fast(value)}")
    return "CYPHER " + " ".join(parts) + " "
