"""Conversation status fold and seq assignment: pure functions, checked with hypothesis."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from convograph.events import Error, Event, HarnessEnd, HarnessStart, Text
from convograph.store.batch import assign_seqs
from convograph.store.status import RunTally, fold_status

runs = st.sampled_from(["a", "b", "c"])
events = st.one_of(
    st.builds(HarnessStart, run_id=runs),
    st.builds(HarnessEnd, run_id=runs, reason=st.sampled_from([None, "stop", "error"])),
    st.builds(Error, run_id=st.one_of(st.none(), runs), message=st.just("boom")),
    st.builds(Text, run_id=runs, id=st.just("t"), content=st.just("x")),
)


def test_status_values() -> None:
    assert RunTally().status == "idle"
    tally = fold_status(RunTally(), [HarnessStart(run_id="a"), HarnessStart(run_id="b")])
    assert tally.status == "active"
    tally = fold_status(tally, [HarnessEnd(run_id="a")])
    assert tally.status == "active"
    assert fold_status(tally, [HarnessEnd(run_id="b")]).status == "complete"
    assert fold_status(tally, [Error(run_id="b", message="x")]).status == "error"
    assert fold_status(tally, [HarnessEnd(run_id="b", reason="error")]).status == "error"


@given(st.lists(events, max_size=40), st.lists(st.integers(0, 40), max_size=5))
def test_folding_in_any_batching_gives_the_same_tally(stream: list[Event], cuts: list[int]) -> None:
    whole = fold_status(RunTally(), stream)
    tally = RunTally()
    start = 0
    for cut in [*sorted({min(c, len(stream)) for c in cuts}), len(stream)]:
        tally = fold_status(tally, stream[start:cut])
        start = cut
    assert tally == whole


@given(st.lists(st.integers(0, 15), max_size=60), st.integers(0, 1000))
def test_redelivery_converges_and_seqs_are_contiguous(ids: list[int], last_seq: int) -> None:
    batch = [Text(run_id="r", id="t", content="x", event_id=f"e{i}") for i in ids]
    stored, dups = assign_seqs("c", batch, set(), last_seq, 0.0)
    assert [s.seq for s in stored] == list(range(last_seq + 1, last_seq + 1 + len(set(ids))))
    assert [s.event.event_id for s in stored] == list(dict.fromkeys(f"e{i}" for i in ids))
    assert len(stored) + len(dups) == len(batch)
    again, redelivered = assign_seqs(
        "c", batch, {s.event.event_id for s in stored if s.event.event_id}, 0, 0.0
    )
    assert again == []
    assert len(redelivered) == len(batch)
