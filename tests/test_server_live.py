"""`convograph.server.live.FrameRing`: the shared buffer of a conversation's latest SSE frames."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from convograph.server.live import FrameRing

_operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3000)),
        st.tuples(st.just("release"), st.integers(0, 40)),
        st.tuples(st.just("jump"), st.integers(2, 10)),
    ),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(operations=_operations, max_frames=st.integers(1, 20), max_bytes=st.integers(1, 8000))
def test_the_ring_holds_the_newest_frames_within_its_bounds(
    operations: list[tuple[str, int]], max_frames: int, max_bytes: int
) -> None:
    ring = FrameRing(0, max_frames=max_frames, max_bytes=max_bytes)
    held: dict[int, bytes] = {}  # the model: seq -> frame
    last = 0
    for operation, value in operations:
        if operation == "release":
            floor = last - value
            ring.release_through(floor)
            held = {seq: frame for seq, frame in held.items() if seq > floor}
            continue
        seq = last + (value if operation == "jump" else 1)
        frame = bytes([seq % 251]) * (value if operation == "append" else 10)
        assert ring.append(seq, frame) == (seq == last + 1)
        if seq != last + 1:
            held = {}
        held[seq] = frame
        last = seq
        while len(held) > 1 and (len(held) > max_frames or sum(map(len, held.values())) > max_bytes):
            del held[min(held)]
        assert len(ring) == len(held)
        assert ring.bytes == sum(map(len, held.values()))
        assert ring.last_seq == last
        assert ring.first_seq == (min(held) if held else last + 1)
        for cursor in range(max(0, ring.first_seq - 3), last + 2):
            assert ring.holds_after(cursor) == (cursor >= ring.first_seq - 1)
            if ring.holds_after(cursor):
                frames = ring.frames_after(cursor, 4000)
                expected = [held[s] for s in range(cursor + 1, last + 1)]
                assert frames == expected[: len(frames)]
                assert bool(frames) == bool(expected)
                assert (
                    len(frames) == len(expected) or sum(map(len, frames)) + len(expected[len(frames)]) > 4000
                )
