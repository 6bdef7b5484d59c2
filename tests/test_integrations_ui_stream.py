"""The shared base of the UI streams: frame ids and resume cursors, run outcomes, and how turns
open and close around loose events."""

from __future__ import annotations

import pytest

from convograph.events import HarnessEnd, parse_event
from convograph.integrations.ui_state import Turn, outcome_of, parse_resume, sse_frames
from convograph.integrations.ui_stream import UIEventStream


def test_frame_ids_name_the_event_and_the_chunk_before_its_last() -> None:
    assert sse_frames(7, [b"{}", b"[]", b"1"]) == [
        b"id: 7:0\ndata: {}\n\n",
        b"id: 7:1\ndata: []\n\n",
        b"id: 7\ndata: 1\n\n",
    ]
    assert sse_frames(7, []) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [("12", (12, 0)), ("12:0", (11, 1)), ("12:3", (11, 4)), (" 5 ", (5, 0)), ("0", (0, 0))],
)
def test_resume_cursors(value: str, expected: tuple[int, int]) -> None:
    assert parse_resume(value) == expected


@pytest.mark.parametrize("value", ["", "x", "-1", "1:", ":2", "1:2:3", "0:1", "\uff11\uff12"])
def test_bad_resume_cursors_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match=r"expected <seq> or <seq>:<chunk>|seq 0 has no chunks"):
        parse_resume(value)


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [
        (None, "success"),
        ("final", "success"),
        ("error", "error"),
        ("provider_failure", "error"),
        ("cancelled", "cancelled"),
        ("user_interrupt", "cancelled"),
        ("max_iterations", "length"),
    ],
)
def test_outcomes(reason: str | None, outcome: str) -> None:
    assert outcome_of(HarnessEnd(run_id="r", reason=reason)) == outcome
    assert outcome_of(None) == "cancelled"


class Recorder(UIEventStream):
    """Records the turn hooks: what a protocol subclass would see."""

    def before_turn(self, turn: Turn) -> None:
        self.emit({"open": turn.turn_id, "loose": turn.loose})

    def after_turn(self, turn: Turn, end: HarnessEnd | None) -> None:
        self.emit({"close": turn.turn_id})


def turns(*wires: dict[str, object]) -> list[dict[str, object]]:
    stream = Recorder("c")
    return [chunk for seq, wire in enumerate(wires, 1) for chunk in stream.chunks(parse_event(wire), seq)]


def test_loose_events_get_a_turn_that_closes_when_another_run_needs_one() -> None:
    assert turns(
        {"type": "user", "runId": "u", "content": "hi"},
        {"type": "connected"},  # shows nothing: the user's turn stays open
        {"type": "harness_start", "runId": "a"},
        {"type": "user", "runId": "u2", "content": "steer"},  # joins the open harness turn
        {"type": "harness_end", "runId": "a"},
        {"type": "tool_result", "runId": "a", "id": "late", "name": "x"},  # after its run: loose
        {"type": "error", "message": "server"},  # run-less: another loose turn
    ) == [
        {"open": "u", "loose": True},
        {"close": "u"},
        {"open": "a", "loose": False},
        {"close": "a"},
        {"open": "a#6", "loose": True},
        {"close": "a#6"},
        {"open": "seq-7", "loose": True},
    ]


def test_concurrent_top_level_runs_share_one_turn() -> None:
    assert turns(
        {"type": "harness_start", "runId": "a"},
        {"type": "harness_start", "runId": "b"},
        {"type": "harness_end", "runId": "a"},
        {"type": "text", "runId": "b", "id": "t", "content": "x"},
        {"type": "harness_end", "runId": "b"},
    ) == [{"open": "a", "loose": False}, {"close": "a"}]
