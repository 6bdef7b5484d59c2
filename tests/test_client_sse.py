"""The SSE decoder follows the WHATWG event-stream rules (where upstream's parser broke)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from convograph.client.sse import ServerSentEvent, SSEDecoder


def decode(*chunks: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    out: list[ServerSentEvent] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out


def test_basic_fields() -> None:
    events = decode(b'id: 3\nevent: text\ndata: {"a":1}\n\n')
    assert events == [ServerSentEvent(event="text", data='{"a":1}', id="3")]


def test_crlf_and_cr_line_ends() -> None:
    assert decode(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n") == [
        ServerSentEvent("message", "a", None),
        ServerSentEvent("message", "b", None),
        ServerSentEvent("message", "c", None),
    ]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    assert decode(b"data: a\r", b"\n\r", b"\n") == [ServerSentEvent("message", "a", None)]


def test_multiline_data_joined_with_newline() -> None:
    assert decode(b"data: one\ndata:two\ndata\n\n")[0].data == "one\ntwo\n"


def test_comments_and_empty_events_are_skipped() -> None:
    assert decode(b": heartbeat\n\n: another\nevent: x\n\n") == []


def test_last_event_id_persists_and_nul_ids_are_ignored() -> None:
    events = decode(b"id: 7\ndata: a\n\ndata: b\n\nid: 8\x00\ndata: c\n\n")
    assert [event.id for event in events] == ["7", "7", "7"]


def test_retry_only_digits() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"retry: 1500\n\nretry: soon\n\n")
    assert decoder.retry == 1500


def test_unterminated_event_at_eof_is_not_dispatched() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: partial") == []
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\n") == [ServerSentEvent("message", "partial", None)]


def test_utf8_split_inside_a_character() -> None:
    encoded = "data: é→✓\n\n".encode()
    assert decode(encoded[:8], encoded[8:]) == [ServerSentEvent("message", "é→✓", None)]


@given(
    st.lists(st.text(alphabet=st.characters(blacklist_characters="\r\n\x00"), max_size=20), max_size=6),
    st.data(),
)
def test_any_chunking_gives_the_same_events(payloads: list[str], data: st.DataObject) -> None:
    stream = b"".join(f"id: {i}\nevent: e\ndata: {p}\n\n".encode() for i, p in enumerate(payloads))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    expected = [ServerSentEvent("e", p, str(i)) for i, p in enumerate(payloads)]
    got = decode(*chunks)
    assert [(e.event, e.data, e.id) for e in got] == [(e.event, e.data, e.id) for e in expected]
