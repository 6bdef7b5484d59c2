"""Event vocabulary: parsing, encoding, errors that name the field, NDJSON line numbers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convograph import EventError, encode_event, parse_event
from convograph.events import (
    EVENT_TYPES,
    Error,
    ImagePart,
    Relay,
    ReplOutput,
    Text,
    TextPart,
    Usage,
    User,
    check_ids,
    event_to_wire,
    pack_event,
    parse_ndjson,
    read_ndjson_file,
    unpack_event,
)

SAMPLES: list[dict[str, Any]] = [
    {"type": "connected", "sessionId": "s-1", "sourceIds": ["a", "b"]},
    {"type": "harness_start", "runId": "r", "agentId": "main", "depth": 1, "maxIterations": 10},
    {
        "type": "harness_end",
        "runId": "r",
        "reason": "final",
        "iterations": 2,
        "totalUsage": {"inputTokens": 5, "outputTokens": 7},
    },
    {"type": "text", "runId": "r", "parentId": "p", "id": "t1", "content": "hi"},
    {"type": "reasoning", "runId": "r", "id": "th1", "content": "hmm", "signature": "sig"},
    {"type": "tool_call", "runId": "r", "id": "r/x", "name": "bash", "input": {"command": "ls"}},
    {"type": "tool_result", "runId": "r", "id": "r/x", "name": "bash", "output": {"context": "ok"}},
    {
        "type": "tool_progress",
        "runId": "r",
        "id": "p1",
        "toolCallId": "r/x",
        "name": "exec",
        "content": {"channel": "stdout", "data": "a"},
    },
    {"type": "user", "runId": "u1", "content": "hello", "timestamp": "2026-11-22T00:00:00Z"},
    {
        "type": "user",
        "runId": "u2",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "mediaType": "image/png", "data": "AAAA"},
            {"type": "document", "mediaType": "application/pdf", "data": "BBBB"},
        ],
    },
    {"type": "error", "runId": "r", "message": "boom"},
    {"type": "error", "message": "server failure"},
    {
        "type": "usage",
        "runId": "r",
        "inputTokens": 1,
        "outputTokens": 2,
        "cacheReadTokens": 3,
        "cacheCreationTokens": 4,
    },
    {
        "type": "relay",
        "kind": "permission",
        "runId": "r",
        "id": "rel1",
        "toolCallId": "r/x",
        "tool": "bash",
        "params": {"command": "rm"},
    },
    {"type": "relay_resolved", "relayId": "rel1", "tool": "bash", "approved": False, "reason": "no"},
    {"type": "repl_input", "runId": "r", "id": "c1", "code": "print(1)", "iteration": 0},
    {"type": "repl_progress", "runId": "r", "id": "c1", "chunk": "1\n", "stream": "stderr"},
    {
        "type": "repl_output",
        "runId": "r",
        "id": "c1",
        "stdout": "1\n",
        "done": True,
        "iteration": 0,
        "durationMs": 12.5,
        "truncated": False,
    },
    {"type": "edit", "messageId": "msg:1", "content": "try again", "runId": "edit-1"},
    {"type": "regenerate", "messageId": "msg:2"},
    {"type": "switch_branch", "messageId": "msg:3"},
    {"type": "summarize", "firstId": "msg:1", "lastId": "msg:4", "text": "short", "model": "m"},
    {"type": "reasoning", "runId": "r", "id": "th2", "content": "", "redactedData": "EmwKAhgB"},
]


def test_samples_cover_every_type() -> None:
    assert {sample["type"] for sample in SAMPLES} == EVENT_TYPES


@pytest.mark.parametrize("wire", SAMPLES, ids=lambda s: str(s["type"]))
def test_round_trip_keeps_wire_exactly(wire: dict[str, Any]) -> None:
    event = parse_event(wire)
    assert event.type == wire["type"]
    assert json.loads(encode_event(event)) == wire
    assert parse_event(encode_event(event)) == event
    assert unpack_event(pack_event(event)) == event


def test_parse_accepts_mapping_str_and_bytes() -> None:
    wire = {"type": "text", "runId": "r", "id": "t", "content": "x"}
    as_text = json.dumps(wire)
    assert parse_event(wire) == parse_event(as_text) == parse_event(as_text.encode())


def test_snake_case_attributes() -> None:
    event = parse_event(SAMPLES[12])
    assert isinstance(event, Usage)
    assert (event.run_id, event.input_tokens, event.cache_creation_tokens) == ("r", 1, 4)
    user = parse_event(SAMPLES[9])
    assert isinstance(user, User)
    assert isinstance(user.content, list)
    assert isinstance(user.content[0], TextPart)
    assert isinstance(user.content[1], ImagePart)
    assert user.content[1].media_type == "image/png"


def test_envelope_fields() -> None:
    event = parse_event({"type": "error", "message": "x", "eventId": "e1", "seq": 4, "timestamp": 17.5})
    assert isinstance(event, Error)
    assert (event.event_id, event.seq, event.timestamp, event.run_id) == ("e1", 4, 17.5, None)


def test_unknown_fields_are_kept_and_round_trip() -> None:
    wire = {"type": "text", "runId": "r", "id": "t", "content": "x", "model": "m", "nested": {"a": [1]}}
    event = parse_event(wire)
    assert event.extra == {"model": "m", "nested": {"a": [1]}}
    assert json.loads(encode_event(event)) == wire
    assert event_to_wire(event) == wire
    assert unpack_event(pack_event(event)) == event


def test_relay_params_default_to_empty() -> None:
    wire = {"type": "relay", "kind": "permission", "runId": "r", "id": "x", "toolCallId": "t", "tool": "b"}
    event = parse_event(wire)
    assert isinstance(event, Relay)
    assert (event.kind, event.params) == ("permission", {})
    with pytest.raises(EventError, match="`kind`"):
        parse_event({key: value for key, value in wire.items() if key != "kind"})


@pytest.mark.parametrize(
    ("wire", "field", "fragment"),
    [
        ({"type": "text", "runId": "r", "id": "t", "content": 3}, "content", "expected `str`"),
        ({"type": "text", "runId": "r", "id": "t"}, "content", "missing"),
        ({"type": "text", "id": "t", "content": "x"}, "runId", "missing"),
        ({"runId": "r"}, "type", "missing"),
        ({"type": "nope", "runId": "r"}, "type", "unknown event type 'nope'"),
        ({"type": 7}, "type", "unknown event type 7"),
        (
            {"type": "user", "runId": "r", "content": [{"type": "text"}]},
            "content[0].text",
            "missing",
        ),
        (
            {"type": "user", "runId": "r", "content": [{"type": "video", "data": "x"}]},
            "content[0].type",
            "video",
        ),
        (
            {"type": "repl_progress", "runId": "r", "id": "x", "chunk": "a", "stream": "err"},
            "stream",
            "err",
        ),
        (
            {"type": "usage", "runId": "r", "inputTokens": "1", "outputTokens": 2},
            "inputTokens",
            "expected `int`",
        ),
        (
            {"type": "relay", "runId": "r", "id": "x", "toolCallId": "t", "tool": "b", "kind": "other"},
            "kind",
            "other",
        ),
    ],
)
def test_errors_name_the_field(wire: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(EventError) as info:
        parse_event(wire)
    assert info.value.field == field
    assert fragment in str(info.value)
    assert f"`{field}`" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [(b"{oops", "invalid JSON"), (b"[1, 2]", "expected a JSON object"), ("42", "expected a JSON object")],
)
def test_errors_for_non_objects(raw: bytes | str, fragment: str) -> None:
    with pytest.raises(EventError, match=fragment) as info:
        parse_event(raw)
    assert info.value.field is None


def test_error_to_dict_and_location() -> None:
    err = EventError("bad", field="content").located(line=3, index=1)
    assert err.to_dict() == {"index": 1, "line": 3, "field": "content", "message": "bad"}
    assert str(err) == "line 3, item 1, field `content`: bad"


def test_ndjson_reports_every_bad_line_and_keeps_good_ones() -> None:
    data = (
        b'{"type":"text","runId":"r","id":"t","content":"a"}\n'
        b"\n"
        b"{broken\n"
        b'{"type":"text","runId":"r","id":"t","content":5}\n'
        b'{"type":"harness_end","runId":"r"}\n'
    )
    batch = parse_ndjson(data)
    assert [type(event) for event in batch.events] == [Text, type(parse_event(SAMPLES[2]))]
    assert [(err.line, err.field) for err in batch.errors] == [(3, None), (4, "content")]
    assert not batch.ok


def test_repl_output_numbers() -> None:
    event = parse_event(next(sample for sample in SAMPLES if sample["type"] == "repl_output"))
    assert isinstance(event, ReplOutput)
    assert event.duration_ms == 12.5


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    content=st.text(),
    run_id=st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=20
    ),
    tool_input=json_values,
    extra=st.dictionaries(st.sampled_from(["model", "x-trace", "provider"]), json_values, max_size=3),
)
def test_round_trip_property(content: str, run_id: str, tool_input: Any, extra: dict[str, Any]) -> None:
    for wire in (
        {"type": "text", "runId": run_id, "id": "t", "content": content, **extra},
        {"type": "tool_call", "runId": run_id, "id": "c", "name": "n", "input": tool_input, **extra},
    ):
        event = parse_event(wire)
        assert parse_event(encode_event(event)) == event
        assert unpack_event(pack_event(event)) == event


# --- adversarial input: every failure is an EventError, and one bad line never stops a stream -------

_TEXT = '{"type":"text","runId":"r","id":"t","content":%s}'


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ((_TEXT % '"\xff"').encode("latin-1"), "not UTF-8"),  # was a bare UnicodeDecodeError
        (_TEXT % '"\ud800"', "lone surrogate"),  # a real lone surrogate in str input
        ("[" * 5000 + "]" * 5000, "nested too deeply"),  # was RecursionError
        (_TEXT % ("[" * 5000 + "]" * 5000), "nested too deeply"),
    ],
)
def test_undecodable_text_is_an_event_error(raw: bytes | str, fragment: str) -> None:
    with pytest.raises(EventError, match=fragment) as info:
        parse_event(raw)
    assert info.value.field is None


@pytest.mark.parametrize(
    ("wire", "field", "fragment"),
    [
        (
            {"type": "text", "runId": "r", "id": "t", "content": "x", "timestamp": float("nan")},
            "timestamp",
            "NaN",
        ),
        (
            {"type": "tool_call", "runId": "r", "id": "c", "name": "n", "input": [1.0, float("inf")]},
            "input",
            "NaN",
        ),
        ({"type": "tool_call", "runId": "r", "id": "c", "name": "n", "input": object()}, "input", "JSON"),
        ({"type": "text", "runId": "r", "id": "t", "content": "\ud800"}, "content", "JSON"),
        (
            {"type": "text", "runId": "r", "id": "t", "content": "x", "x-model": {"a": [complex(1, 2)]}},
            "x-model",
            "JSON",
        ),
        (
            {"type": "text", "runId": "r", "id": "t", "content": "x", 1: 2},
            None,
            "field names must be strings",
        ),
    ],
)
def test_mappings_must_hold_json_values(wire: dict[Any, Any], field: str | None, fragment: str) -> None:
    """A mapping that JSON cannot carry would fail later when stored or sent (or, for NaN, turn
    into null): it is refused up front, naming the field."""
    with pytest.raises(EventError, match=fragment) as info:
        parse_event(wire)
    assert info.value.field == field


@pytest.mark.parametrize(
    "escape",
    [
        "\\ud800",  # a high surrogate ending the string (msgspec said "Input data was truncated")
        "\\ud800x",
        "\\udc00",  # a low surrogate alone
        "ab\\ud83d\\ud83d",  # a high surrogate followed by another high one
    ],
)
def test_a_lone_surrogate_escape_is_named_with_its_position(escape: str) -> None:
    raw = ('{"type":"text","runId":"r","id":"t","content":"' + escape + '"}').encode()
    error = refused_text(raw)
    assert "surrogate" in error
    assert "truncated" not in error
    assert f"at byte {raw.index(b'\\u')}" in error


def test_an_escaped_backslash_before_u_is_not_an_escape() -> None:
    assert parse_event(b'{"type":"text","runId":"r","id":"t","content":"\\\\ud800"}').content == "\\ud800"


def test_invalid_utf8_is_located_at_its_byte() -> None:
    raw = b'{"type":"text","runId":"r","id":"t","content":"abc\xffdef"}'
    error = refused_text(raw)
    assert "not UTF-8" in error
    assert f"at byte {raw.index(b'\xff')}" in error


def refused_text(raw: bytes) -> str:
    with pytest.raises(EventError) as info:
        parse_event(raw)
    return info.value.problem


def test_a_leading_byte_order_mark_is_ignored(tmp_path: Any) -> None:
    line = _TEXT % '"a"'
    assert parse_event("\ufeff" + line) == parse_event(line)
    assert parse_event(b"\xef\xbb\xbf" + line.encode()) == parse_event(line)
    path = tmp_path / "bom.ndjson"
    path.write_bytes(b"\xef\xbb\xbf" + line.encode() + b"\r\n" + line.encode() + b"\r\n")
    batch = read_ndjson_file(path)
    assert (len(batch.events), batch.errors) == (2, [])


def test_a_non_utf8_line_is_reported_and_the_rest_kept(tmp_path: Any) -> None:
    path = tmp_path / "mixed.ndjson"
    path.write_bytes((_TEXT % '"\xff"').encode("latin-1") + b"\n" + (_TEXT % '"ok"').encode() + b"\n")
    batch = read_ndjson_file(path)
    assert [event.content for event in batch.events] == ["ok"]  # type: ignore[union-attr]
    assert [(error.line, error.field) for error in batch.errors] == [(1, None)]


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x1c", "\x0b"])
def test_ndjson_str_lines_end_at_newline_only(separator: str) -> None:
    """JSON strings may hold these characters raw; `str.splitlines` used to cut the line there."""
    data = _TEXT % json.dumps(f"a{separator}b", ensure_ascii=False) + "\n"
    for document in (data, data.encode()):
        batch = parse_ndjson(document)
        assert batch.errors == []
        assert [event.content for event in batch.events] == [f"a{separator}b"]  # type: ignore[union-attr]


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
_json_any = st.recursive(
    _json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=12,
)
_field_names = st.sampled_from(
    ["type", "runId", "id", "content", "name", "input", "seq", "timestamp", "inputTokens", "kind", "x"]
)
_wire_like = st.dictionaries(_field_names, _json_any, max_size=6).map(
    lambda wire: wire if "type" in wire and wire.get("x") is None else {**wire, "type": wire.get("x")}
) | st.builds(
    lambda kind, fields: {"type": kind, **fields},
    st.sampled_from(sorted(EVENT_TYPES)),
    st.dictionaries(_field_names, _json_any, max_size=6),
)


def _mangle(data: bytes, cuts: list[int], noise: bytes) -> bytes:
    for cut in cuts:
        position = cut % (len(data) + 1)
        data = data[:position] + noise + data[position:]
    return data


@settings(max_examples=300, deadline=None)
@given(wire=_wire_like)
def test_fuzz_parse_event_mappings_succeed_or_raise_event_error(wire: dict[str, Any]) -> None:
    try:
        event = parse_event(wire)
    except EventError as exc:
        problem = exc.problem
    else:
        assert parse_event(encode_event(event)) == event
        assert unpack_event(pack_event(event)) == event
        return
    assert problem


@settings(max_examples=300, deadline=None)
@given(
    wire=_wire_like,
    cuts=st.lists(st.integers(0, 10_000), max_size=3),
    noise=st.sampled_from(
        [
            b"",
            b"\xff",
            b"\xef\xbb\xbf",
            b"\r",
            b"\x00",
            b"\\ud800",
            b"\xed\xa0\x80",
            b"[" * 3000,
            b"NaN",
            b'"',
        ]
    ),
)
def test_fuzz_ndjson_bytes_never_raise_and_keep_every_good_line(
    wire: dict[str, Any], cuts: list[int], noise: bytes
) -> None:
    good = _TEXT % '"kept"'
    try:
        line = json.dumps(wire, allow_nan=True).encode()
    except (TypeError, ValueError):
        line = b"{}"
    mangled = _mangle(line, cuts, noise)
    document = b"\r\n".join([good.encode(), mangled, b"", good.encode()])
    batch = parse_ndjson(document)
    kept = [event for event in batch.events if getattr(event, "content", None) == "kept"]
    assert len(kept) == 2
    assert all(isinstance(error, EventError) and error.line == 2 for error in batch.errors)
    assert len(batch.events) + len(batch.errors) == 3


# --- NUL (U+0000) in ids: rejected at parse time (ids land in text columns and keys) -----------------

_NUL_ID_CASES: list[tuple[dict[str, Any], str]] = [
    ({"type": "text", "runId": "r\x00", "id": "t", "content": "ab"}, "runId"),
    ({"type": "text", "runId": "r", "id": "t\x00", "content": "ab"}, "id"),
    ({"type": "text", "runId": "r", "id": "t", "content": "ab", "parentId": "\x00"}, "parentId"),
    ({"type": "text", "runId": "r", "id": "t", "content": "ab", "agentId": "a\x00b"}, "agentId"),
    ({"type": "text", "runId": "r", "id": "t", "content": "ab", "eventId": "e\x00"}, "eventId"),
    ({"type": "user", "runId": "u", "id": "m\x00", "content": "hi"}, "id"),
    ({"type": "error", "runId": "\x00", "message": "boom"}, "runId"),
    ({"type": "tool_progress", "runId": "r", "id": "p", "toolCallId": "c\x00", "name": "n"}, "toolCallId"),
    ({"type": "connected", "sessionId": "s\x00"}, "sessionId"),
    ({"type": "connected", "sourceIds": ["a", "b\x00"]}, "sourceIds[1]"),
    ({"type": "relay_resolved", "relayId": "\x00", "approved": True}, "relayId"),
    ({"type": "edit", "messageId": "m\x00", "content": "x"}, "messageId"),
    ({"type": "summarize", "firstId": "a", "lastId": "b\x00", "text": "t"}, "lastId"),
    ({"type": "summarize", "firstId": "a", "lastId": "b", "text": "t", "threadId": "\x00"}, "threadId"),
]


@pytest.mark.parametrize(("wire", "field"), _NUL_ID_CASES, ids=lambda c: c if isinstance(c, str) else None)
def test_an_id_holding_nul_is_rejected_naming_the_field(wire: dict[str, Any], field: str) -> None:
    text = json.dumps(wire)
    for raw in (wire, text, text.encode()):
        with pytest.raises(EventError, match="NUL") as caught:
            parse_event(raw)  # type: ignore[arg-type]
        assert caught.value.field == field
    batch = parse_ndjson(b"\n".join([_TEXT.encode() % b'"kept"', text.encode()]))
    assert [error.to_dict() for error in batch.errors] == [
        {"line": 2, "field": field, "message": batch.errors[0].problem}
    ]
    assert len(batch.events) == 1


def test_check_ids_covers_events_built_in_python() -> None:
    with pytest.raises(EventError, match="NUL") as caught:
        check_ids(Text(run_id="r", id="t\x00", content=""))
    assert caught.value.field == "id"
    with pytest.raises(EventError, match="expected `str`, got `int`") as caught:
        check_ids(Text(run_id=5, id="t", content=""))  # type: ignore[arg-type]
    assert caught.value.field == "runId"
    check_ids(Text(run_id="r", id="t", content="\x00"))


def test_nul_in_content_is_kept_exactly() -> None:
    wires: list[dict[str, Any]] = [
        {"type": "text", "runId": "r", "id": "t", "content": "a\x00b"},
        {"type": "user", "runId": "u", "content": [{"type": "text", "text": "\x00"}]},
        {"type": "tool_call", "runId": "r", "id": "c", "name": "n\x00", "input": {"k\x00": ["\x00"]}},
        {"type": "tool_result", "runId": "r", "id": "c", "name": "n", "output": "\x00\x01\xff"},
        {"type": "text", "runId": "r", "id": "t", "content": "ok", "x-extra\x00": "\x00"},
    ]
    for wire in wires:
        event = parse_event(wire)
        assert event_to_wire(event) == wire
        assert parse_event(encode_event(event)) == event == parse_event(json.dumps(wire))
        assert unpack_event(pack_event(event)) == event
