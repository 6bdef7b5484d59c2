"""`convograph.events.values`: token counts and timestamps `parse_event` accepts (issue 26, item 10)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convograph.events import EventError, parse_event
from convograph.events.values import MAX_COUNT, MAX_EPOCH_MS

TEXT: dict[str, Any] = {"type": "text", "runId": "r", "id": "t", "content": "x"}
USAGE: dict[str, Any] = {"type": "usage", "runId": "r", "inputTokens": 1, "outputTokens": 2}


def refused(wire: dict[str, Any] | bytes) -> EventError:
    with pytest.raises(EventError) as info:
        parse_event(wire)
    return info.value


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"type":"usage","runId":"r","inputTokens":1' + b"0" * 400 + b',"outputTokens":1}', "inputTokens"),
        (b'{"type":"usage","runId":"r","inputTokens":1,"outputTokens":-1}', "outputTokens"),
        (
            b'{"type":"harness_end","runId":"r","totalUsage":{"inputTokens":1,"outputTokens":-5}}',
            "totalUsage.outputTokens",
        ),
        (b'{"type":"usage","runId":"r","inputTokens":9007199254740992,"outputTokens":0}', "inputTokens"),
        (
            b'{"type":"usage","runId":"r","inputTokens":0,"outputTokens":0,"cacheReadTokens":-2}',
            "cacheReadTokens",
        ),
        (b'{"type":"harness_start","runId":"r","depth":-1}', "depth"),
        (b'{"type":"harness_end","runId":"r","iterations":-3}', "iterations"),
        (b'{"type":"repl_output","runId":"r","id":"c","durationMs":-0.5}', "durationMs"),
        (b'{"type":"repl_input","runId":"r","id":"c","code":"x","iteration":-1}', "iteration"),
    ],
)
def test_counts_are_non_negative_integers_that_fit_2_53(raw: bytes, field: str) -> None:
    error = refused(raw)
    assert error.field == field
    assert "9007199254740991" in error.problem
    assert len(str(error)) < 300  # a 401-digit number is described, not echoed


def test_counts_at_the_bounds_are_accepted() -> None:
    event = parse_event({**USAGE, "inputTokens": 0, "outputTokens": MAX_COUNT, "cacheReadTokens": 0})
    assert event.output_tokens == MAX_COUNT  # type: ignore[union-attr]
    assert parse_event({**USAGE, "type": "harness_end", "totalUsage": {"inputTokens": 0, "outputTokens": 0}})


@pytest.mark.parametrize(
    "timestamp",
    [
        "2026-11-28T10:00:00Z",
        "2026-11-28T10:00:00.123Z",
        "2026-11-28T10:00:00.123456789+05:30",
        "2026-11-28t10:00:00z",
        "2026-11-28 10:00:00-08:00",
        "2026-11-28T10:00:00",  # no offset: read as UTC
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999Z",
        0,
        1_764_324_000_000,
        1_764_324_000_000.5,
        MAX_EPOCH_MS,
    ],
)
def test_rfc3339_and_epoch_milliseconds_are_accepted(timestamp: Any) -> None:
    assert parse_event({**TEXT, "timestamp": timestamp}).timestamp == timestamp


@pytest.mark.parametrize(
    "timestamp",
    [
        "not a date",
        "",
        "2026-02-30T00:00:00Z",
        "2026-11-28T24:00:00Z",
        "2026-11-28T10:00:60Z",
        "2026-11-28T10:00:00+24:00",
        "2026-11-28",
        "2026-W48-5",
        "20261128T100000Z",
        "2026-11-28T10:00:00.Z",
        " 2026-11-28T10:00:00Z",
        "2026-11-28T10:00:00Z\x00",
        1e300,
        -1,
        MAX_EPOCH_MS + 1,
    ],
)
def test_other_timestamps_are_refused_naming_the_field(timestamp: Any) -> None:
    error = refused({**TEXT, "timestamp": timestamp})
    assert error.field == "timestamp"
    assert "RFC 3339" in error.problem
    assert "253402300799999" in error.problem


def test_a_timestamp_of_1e300_from_json_text() -> None:
    error = refused(b'{"type":"text","runId":"r","id":"t","content":"x","timestamp":1e300}')
    assert error.field == "timestamp"


@given(st.datetimes(timezones=st.timezones()))
def test_every_isoformat_with_an_offset_is_accepted(moment: Any) -> None:
    value = moment.isoformat()
    if moment.utcoffset() is None or moment.utcoffset().seconds % 60:  # RFC 3339 offsets are whole minutes
        return
    assert parse_event({**TEXT, "timestamp": value}).timestamp == value
