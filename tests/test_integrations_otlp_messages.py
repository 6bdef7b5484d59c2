"""`messages.HistoryPrefixes`: a history text that extends the one read before is read from where
that one ended, and gives exactly what reading it whole gives."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convograph.integrations.otlp.messages import HistoryPrefixes, _message_list

message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "tool"]),
        "parts": st.lists(st.fixed_dictionaries({"type": st.just("text"), "content": st.text(max_size=20)})),
    }
)


def whole(text: str) -> list[object] | None:
    return _message_list(text, "gen_ai.input.messages", [])


@given(
    first=st.lists(message, max_size=4),
    more=st.lists(message, max_size=4),
    separators=st.sampled_from([(",", ":"), (", ", ": ")]),
)
def test_an_extended_history_reads_as_a_whole_one(
    first: list[dict[str, object]], more: list[dict[str, object]], separators: tuple[str, str]
) -> None:
    prefixes = HistoryPrefixes()
    old_text = json.dumps(first, separators=separators)
    new_text = json.dumps(first + more, separators=separators)
    old = prefixes.read(("t", "p"), old_text)
    new = prefixes.read(("t", "p"), new_text)
    assert old == whole(old_text)
    assert new == whole(new_text)
    if first:
        assert old is not None
        assert new is not None
        assert new[0] is old[0]  # the remembered message, not a re-read copy


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('[{"role":"user","parts":[]}]', '[{"role":"user","parts":[]}x]'),  # not JSON: read whole
        ('[{"role":"user","parts":[]}]', '[{"role":"user","parts":[]},'),  # truncated
        ('[{"role":"user","parts":[]}]', '[{"role":"user","parts":[]}] trailing'),
        ("[]", '[{"role":"user","parts":[]}]'),
        ('[{"role":"user","parts":[]}]', '{"role":"user"}'),
    ],
)
def test_what_does_not_continue_the_last_text_is_read_whole(old: str, new: str) -> None:
    prefixes = HistoryPrefixes()
    prefixes.read(("t", None), old)
    assert prefixes.read(("t", None), new) == whole(new)


def test_the_texts_kept_are_bounded() -> None:
    prefixes = HistoryPrefixes(max_chars=400)
    text = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "x" * 50}]}])
    for parent in range(10):
        prefixes.read(("t", str(parent)), text)
    assert prefixes._chars <= 400
