# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
"""Parameters reach FalkorDB unchanged: every value is rendered as Cypher literal text (JSON text
from msgspec when no map is involved, the recursive formatter otherwise); a property test sends
arbitrary unicode strings (quotes, backslashes, control characters, astral characters) and
nested lists through a real FalkorDB and reads them back. NUL is the one character FalkorDB
cannot hold (it ends a C string): it arrives as U+FFFD. Floats are stored exactly, but replies
print 15 significant digits, so they are compared at that precision (and exactly in-engine)."""

from __future__ import annotations

import math
import sys
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.literals import (
    MapFreeList,
    cypher_literal,
)
from convograph.intelligence.literals import literal_fast as _literal_fast
from convograph.intelligence.literals import needs_formatter as _needs_formatter
from convograph.intelligence.writer import GraphNames
from tests.test_intelligence_support import falkor, names  # noqa: F401

TRICKY = st.sampled_from(['"', "'", "\\", "\\u0041", "\\n", "\x00", "\x01", "\x1f", "\x7f", "\n", "\r", "\t",
                          "\u2028", "\u00e9", "\U0001f600", "\U0010ffff", "`", "$", "{", "}", "/", "\\/"])  # fmt: skip
TEXT = st.lists(st.one_of(st.text(), TRICKY), max_size=6).map("".join)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(min_value=-1e300, max_value=1e300),  # replies print %.15g: near DBL_MAX that overflows
    TEXT,
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4), max_leaves=12)
SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _echo(falkor: FalkorEngine, graph: str, value: Any) -> Any:
    return falkor.execute(graph, "RETURN $v AS v", {"v": value}).rows[0][0]


def _expected(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_expected(item) for item in value]
    if isinstance(value, dict):
        return {key: _expected(item) for key, item in value.items()}
    return value


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and not isinstance(want, bool):
        return isinstance(got, int | float) and math.isclose(got, want, rel_tol=1e-14, abs_tol=1e-300)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_same, got, want))
    if isinstance(want, dict):
        return (
            isinstance(got, dict) and got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
        )
    return type(got) is type(want) and got == want


@SETTINGS
@given(value=VALUES)
def test_values_round_trip_through_falkordb(falkor: FalkorEngine, names: GraphNames, value: Any) -> None:
    graph = names.graph("echo")
    assert _same(_echo(falkor, graph, value), _expected(value))
    if isinstance(value, list):  # the writer's map-free rows take the JSON path without the map walk
        assert _same(_echo(falkor, graph, MapFreeList(value)), _expected(value))
    if isinstance(value, float) and not 0 < abs(value) < sys.float_info.min:
        # stored exactly: equal in-engine to the value rendered by repr (FalkorDB cannot parse a
        # subnormal literal at all: those are flushed to zero, see the next test)
        assert falkor.execute(graph, f"RETURN $v = {value!r} AS same", {"v": value}).rows[0][0] is True


def test_subnormal_floats_are_flushed_to_zero_not_refused(falkor: FalkorEngine, names: GraphNames) -> None:
    graph = names.graph("echo")
    for tiny in (2.225073858507203e-309, 5e-324, -1e-310):
        assert _echo(falkor, graph, tiny) == 0.0
        assert _echo(falkor, graph, [tiny, 1.5]) == [0.0, 1.5]
        assert _echo(falkor, graph, {"x": [tiny]}) == {"x": [0.0]}
    assert _echo(falkor, graph, "text e-309 and e-400") == "text e-309 and e-400"
    assert _echo(falkor, graph, 3e-308) == 3e-308  # normal, exponent -308: exact


def test_only_numbers_with_a_subnormal_exponent_take_the_formatter() -> None:
    import msgspec

    for tiny in (5e-324, -1e-310, 2.225073858507203e-309, 1e-308):
        for value in (tiny, [tiny], [1, tiny, "x"], {"a": tiny}):
            assert _needs_formatter(msgspec.json.encode(value)), value
    # UUID groups and other text that only looks like an exponent keep the JSON path
    for text in ("e5ac812e-3092-46e8-8660", "ab1e-310a", "1e-3100", "x 2e-31", "7e-309-"):
        assert not _needs_formatter(msgspec.json.encode([text, 1.5])), text
    assert _needs_formatter(msgspec.json.encode("\x01"))  # msgspec's \u0001 escape


def test_a_literal_backslash_u_keeps_the_json_path_and_an_escape_does_not() -> None:
    import msgspec

    for text in ("C:\\users\\me", "\\u0041", "a\\\\u", "\\\\\\u12"):  # even runs of backslashes before u
        encoded = msgspec.json.encode([text, 1.5])
        assert b"\\u" in encoded
        assert not _needs_formatter(encoded), text
    for text in ("\x01", "C:\\users\x02", "\\\x1f", "x\\u" * 3 + "\x1e"):  # msgspec escapes these as \u00XX
        assert _needs_formatter(msgspec.json.encode([text, "u"])), text


@SETTINGS
@given(text=TEXT)
def test_strings_round_trip_by_both_renderers(falkor: FalkorEngine, names: GraphNames, text: str) -> None:
    graph = names.graph("echo")
    for literal in {_literal_fast(text), cypher_literal(text)}:
        reply = falkor.command("GRAPH.QUERY", graph, f"CYPHER v={literal} RETURN $v")
        assert reply[1][0][0] == _expected(text)


@SETTINGS
@given(
    mapping=st.dictionaries(
        st.text(min_size=1).filter(lambda k: "`" not in k and "\x00" not in k), VALUES, max_size=4
    )
)
def test_maps_round_trip(falkor: FalkorEngine, names: GraphNames, mapping: dict[str, Any]) -> None:
    assert _same(_echo(falkor, names.graph("echo"), mapping), _expected(mapping))
