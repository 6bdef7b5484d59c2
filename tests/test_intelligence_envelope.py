from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convograph.intelligence.envelope import (
    EnvelopeError,
    base_event_id,
    content_fingerprint,
    parse_envelope,
    parse_timestamp_ms,
)

GOOD = {
    "event": "tool:pre",
    "workspace": "-home-alice-api",
    "idempotency_key": "aci-event-v1:abc",
    "data": {"session_id": "S1", "timestamp": "2025-03-15T06:02:25.123+00:00", "tool_call_id": "call_1"},
}


def test_valid_envelope_derives_identity() -> None:
    env = parse_envelope(GOOD)
    assert env.session_id == "S1"
    assert env.epoch_ms == 1742018545123
    assert env.base_id == "S1__tool_pre__1742018545123__call_1"
    assert env.dedupe_key == "aci-event-v1:abc"
    assert env.fingerprint == content_fingerprint("tool:pre", GOOD["data"])


def test_bytes_and_str_bodies_parse_the_same() -> None:
    raw = json.dumps(GOOD)
    assert parse_envelope(raw) == parse_envelope(raw.encode()) == parse_envelope(GOOD)


def test_missing_idempotency_key_falls_back_to_the_content_fingerprint() -> None:
    body = {k: v for k, v in GOOD.items() if k != "idempotency_key"}
    env = parse_envelope(body)
    assert env.idempotency_key is None
    assert env.dedupe_key == f"sha256:{env.fingerprint}"


def test_fingerprint_ignores_key_order() -> None:
    assert content_fingerprint("x", {"a": 1, "b": [1, {"c": 2, "d": 3}]}) == content_fingerprint(
        "x", {"b": [1, {"d": 3, "c": 2}], "a": 1}
    )


@pytest.mark.parametrize(
    ("mutate", "code", "field"),
    [
        (lambda b: b["data"].pop("timestamp"), "invalid_timestamp", "data.timestamp"),
        (lambda b: b["data"].update(timestamp="yesterday"), "invalid_timestamp", "data.timestamp"),
        (lambda b: b["data"].update(timestamp="  "), "invalid_timestamp", "data.timestamp"),
        (lambda b: b["data"].update(timestamp=1742018545), "invalid_timestamp", "data.timestamp"),
        (lambda b: b.update(workspace="   "), "invalid_workspace", "workspace"),
        (lambda b: b.pop("workspace"), "invalid_workspace", "workspace"),
        (lambda b: b.update(event=""), "invalid_event", "event"),
        (lambda b: b["data"].pop("session_id"), "missing_session_id", "data.session_id"),
        (lambda b: b["data"].update(session_id="a/b"), "invalid_session_id", "data.session_id"),
        (lambda b: b["data"].update(session_id="a\\b"), "invalid_session_id", "data.session_id"),
        (lambda b: b["data"].update(session_id=".."), "invalid_session_id", "data.session_id"),
        (lambda b: b["data"].update(session_id=42), "invalid_session_id", "data.session_id"),
        # fuzzed: node ids with these edges segfault FalkorDB's unique-constraint check
        (lambda b: b["data"].update(session_id=" s"), "invalid_session_id", "data.session_id"),
        (lambda b: b["data"].update(session_id="s\x0b"), "invalid_session_id", "data.session_id"),
        (lambda b: b["data"].update(session_id="s\x01"), "invalid_session_id", "data.session_id"),
        (lambda b: b["data"].update(session_id="a\x01b"), "invalid_session_id", "data.session_id"),
        (lambda b: b.update(data=[1, 2]), "invalid_data", "data"),
        (lambda b: b.update(idempotency_key=""), "invalid_idempotency_key", "idempotency_key"),
    ],
)
def test_invalid_envelopes_name_the_field(mutate, code: str, field: str) -> None:  # type: ignore[no-untyped-def]
    body = json.loads(json.dumps(GOOD))
    mutate(body)
    with pytest.raises(EnvelopeError) as info:
        parse_envelope(body)
    assert info.value.code == code
    assert info.value.field == field
    assert field in info.value.message or field.split(".")[-1] in info.value.message


def test_non_json_body_is_a_clear_error() -> None:
    with pytest.raises(EnvelopeError, match="not valid JSON"):
        parse_envelope(b"{nope")
    with pytest.raises(EnvelopeError, match="JSON object"):
        parse_envelope(b"[1]")


def test_naive_timestamps_are_utc_and_z_suffix_works() -> None:
    assert parse_timestamp_ms("2025-03-15T06:02:25.123") == 1742018545123
    assert parse_timestamp_ms("2025-03-15T06:02:25.123Z") == 1742018545123
    assert parse_timestamp_ms("2025-03-15T07:02:25.123+01:00") == 1742018545123
    assert parse_timestamp_ms("2025-03-15T06:02:25.123999+00:00") == 1742018545123  # floors


def test_base_id_uses_double_underscores_and_the_tool_call_disambiguator() -> None:
    assert base_event_id("S", "session:start", 5, None) == "S__session_start__5"
    assert base_event_id("S", "tool:post", 5, "call_x") == "S__tool_post__5__call_x"
    assert base_event_id("S", "delegate:agent_spawned", 5, "") == "S__delegate_agent_spawned__5"


# --- adversarial bodies: only EnvelopeError, naming the problem --------------------------------------

_GOOD_JSON = json.dumps(GOOD).encode()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (_GOOD_JSON.replace(b'"S1"', b'"S1\xff"'), "not UTF-8"),  # was UnicodeDecodeError
        (json.dumps(GOOD).replace('"S1"', '"S1\ud800"'), "lone surrogate"),  # was UnicodeEncodeError
        (
            b'{"event": "x", "data": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            "nested too deeply",
        ),  # RecursionError
    ],
)
def test_undecodable_bodies_are_invalid_json(body: bytes | str, fragment: str) -> None:
    with pytest.raises(EnvelopeError, match=fragment) as info:
        parse_envelope(body)
    assert info.value.code == "invalid_json"


def test_bytearray_and_memoryview_bodies_are_decoded() -> None:
    assert (
        parse_envelope(bytearray(_GOOD_JSON))
        == parse_envelope(memoryview(_GOOD_JSON))
        == parse_envelope(GOOD)
    )


@pytest.mark.parametrize(
    ("mutate", "code", "field"),
    [
        (lambda b: b["data"].update(score=float("nan")), "invalid_data", "data"),  # was stored as null
        (lambda b: b["data"].update(nested=[{"x": float("inf")}]), "invalid_data", "data"),
        (lambda b: b["data"].update(obj=object()), "invalid_data", "data"),  # was TypeError
        (lambda b: b["data"].update({1: "x"}), "invalid_data", "data"),  # was TypeError
        (lambda b: b["data"].update(text="\ud800"), "invalid_data", "data"),  # was UnicodeEncodeError
        (lambda b: b.update(event="tool:\ud800"), "invalid_event", "event"),  # was UnicodeEncodeError
        (lambda b: b["data"].update(session_id="S\udfff"), "invalid_session_id", "data.session_id"),
        (
            lambda b: b["data"].update(timestamp="2025-03-15T06:02:25\x00"),
            "invalid_timestamp",
            "data.timestamp",
        ),
    ],
)
def test_mapping_bodies_must_hold_json(mutate, code: str, field: str) -> None:  # type: ignore[no-untyped-def]
    """A mapping body (the Python API) is held to what a JSON body could carry."""
    body = json.loads(json.dumps(GOOD))
    mutate(body)
    with pytest.raises(EnvelopeError) as info:
        parse_envelope(body)
    assert (info.value.code, info.value.field) == (code, field)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(
        ["2025-03-15T06:02:25Z", "S1", "a/b", "..", "", " ", "\x00", "9999-12-31T23:59:59-23:59"]
    )
)
_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=10,
)
_keys = st.sampled_from(["event", "workspace", "data", "idempotency_key", "session_id", "timestamp", "x"])


@st.composite
def _bodies(draw: st.DrawFn) -> object:
    body = json.loads(json.dumps(GOOD))
    for _ in range(draw(st.integers(1, 3))):
        data = body.get("data")
        target = data if isinstance(data, dict) and draw(st.booleans()) else body
        key = draw(_keys)
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(_values)
    return body


@settings(max_examples=300, deadline=None)
@given(
    body=_bodies(),
    as_text=st.booleans(),
    noise=st.sampled_from([b"", b"\xff", b"\xef\xbb\xbf", b"[" * 3000, b"\\ud800"]),
)
def test_fuzz_parse_envelope_succeeds_or_raises_envelope_error(
    body: object, as_text: bool, noise: bytes
) -> None:
    raw: object = body
    if as_text:
        try:
            encoded = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError):
            encoded = b"{}"
        raw = encoded[:-1] + noise + encoded[-1:] if noise else encoded
    try:
        envelope = parse_envelope(raw)  # type: ignore[arg-type]
    except EnvelopeError as exc:
        failure = (exc.code, exc.message)
    else:
        assert envelope.data_json == msgspec.json.encode(envelope.data, order="sorted")
        again = {
            "event": envelope.event,
            "workspace": envelope.workspace,
            "data": msgspec.json.decode(envelope.data_json),
        }
        assert parse_envelope(again).fingerprint == envelope.fingerprint
        return
    assert failure[0].startswith(("invalid_", "missing_"))
    assert failure[1]


def _reference_ms(value: str) -> int | None:
    """What ``parse_timestamp_ms`` answered before its per-second cache (None: refused)."""
    from datetime import UTC, datetime

    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    delta = parsed - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


@settings(max_examples=500, deadline=None)
@given(
    year=st.integers(1, 9999),
    month=st.integers(0, 13),
    day=st.integers(0, 32),
    hour=st.integers(0, 25),
    minute=st.integers(0, 61),
    second=st.integers(0, 61),
    fraction=st.sampled_from(
        [
            "",
            ".",
            ".0",
            ".07",
            ".007",
            ".0071",
            ".00712",
            ".007129",
            ".0071299",
            ".999",
            ",007",
            ".\u0661\u0662\u0663",  # digits, not ASCII ones
            ".12\uff17",
        ]
    ),
    suffix=st.sampled_from(["", "Z", "+00:00", "-00:00", "+01:00", "-05:30", " ", "z"]),
    digits=st.integers(0, 999_999),
)
def test_timestamp_cache_answers_as_fromisoformat(
    year: int,
    month: int,
    day: int,
    hour: int,
    minute: int,
    second: int,
    fraction: str,
    suffix: str,
    digits: int,
) -> None:
    if fraction.count("0") and len(fraction) > 1:  # vary the fraction digits too
        fraction = "." + str(digits).zfill(6)[: len(fraction) - 1]
    value = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}{fraction}{suffix}"
    want = _reference_ms(value)
    for _ in range(2):  # the second time from the cache
        if want is None:
            with pytest.raises(EnvelopeError):
                parse_timestamp_ms(value)
        else:
            assert parse_timestamp_ms(value) == want, value


def test_json_decoded_mappings_give_the_envelope_of_their_text() -> None:
    bodies = [
        b'{"event":"tool:post","workspace":"w","data":{"session_id":"S","timestamp":"2026-03-02T09:00:00Z",'
        b'"parent_id":null,"result":{"output":[1.5,null,{"x":null}]}}}',
        b'{"event":"session:start","workspace":"w","idempotency_key":"k",'
        b'"data":{"session_id":"S","timestamp":"2026-03-02T09:00:00.123456","n":1e308}}',
    ]
    for raw in bodies:
        assert parse_envelope(msgspec.json.decode(raw), json_decoded=True) == parse_envelope(raw)
    with pytest.raises(EnvelopeError) as info:  # a plain mapping is still walked for NaN
        parse_envelope(
            {
                "event": "e",
                "workspace": "w",
                "data": {"session_id": "S", "timestamp": "2026-03-02T09:00:00Z", "x": [None, float("nan")]},
            }
        )
    assert info.value.code == "invalid_data"


def test_a_cached_second_answers_every_fraction_as_fromisoformat() -> None:
    """The fast path (a second the cache holds, then the fraction) answers as the full parse:
    non-ASCII digits, other separators and suffixes are left to it."""
    assert parse_timestamp_ms("2026-03-02T09:00:00.007+00:00") == 1772442000007  # caches the second
    for value in (
        "2026-03-02T09:00:00.123Z",
        "2026-03-02T09:00:00.999",
        "2026-03-02T09:00:00.\u0661\u0662\u0663+00:00",
        "2026-03-02T09:00:00.12\uff17Z",
        "2026-03-02T09:00:00,007+00:00",
        "2026-03-02T09:00:00.+07+00:00",
        "2026-03-02T09:00:00.007+00:0x",
        "2026-03-02T09:00:00.007z",
        "2026-03-02T09:00:00.00 ",
        "2026-03-02T09:00:00.007-00:00",
        "2026-03-02T09:00:00.007+01:00",
    ):
        want = _reference_ms(value)
        if want is None:
            with pytest.raises(EnvelopeError):
                parse_timestamp_ms(value)
        else:
            assert parse_timestamp_ms(value) == want, value
