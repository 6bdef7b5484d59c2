"""A Server-Sent Events decoder that follows the WHATWG "event stream interpretation" rules.

Upstream's parser split only on ``\\n\\n``, needed ``data: `` with a space, joined multi-line data
without newlines and ignored ``id``/``event``/``retry``. This one:

- accepts CRLF, LF and CR line ends, including a CRLF split across two chunks;
- strips one space after the colon, joins ``data`` lines with ``\\n``;
- keeps the last event id across events (as the spec's "last event ID buffer"), ignores ids holding
  NUL, and takes ``retry`` only when it is all digits;
- skips comments (``:`` lines, e.g. heartbeats) and events without data;
- discards an event left unterminated at end of stream, as the spec requires (a server that means
  it always ends an event with a blank line).

O(bytes) per `feed`: line ends are found with ``str.find``, not a per-character Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["END_EVENT", "SSEDecoder", "ServerSentEvent"]

END_EVENT = "stream_end"
"""The name of the frame ``convograph serve`` ends a stream with (shutdown, a deleted conversation,
a client too far behind): ``{"reason", "message", "lastEventId"}``. Not an event."""


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str
    data: str
    id: str | None
    retry: int | None = None


class SSEDecoder:
    """Incremental decoder: `feed` bytes as they arrive, get the events they complete."""

    def __init__(self) -> None:
        self._pending = ""
        self._decoder_tail = b""
        self._data: list[str] = []
        self._event = ""
        self.last_event_id: str | None = None
        self.retry: int | None = None
        self._retry_changed: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        raw = self._decoder_tail + chunk
        try:
            text = raw.decode("utf-8")
            self._decoder_tail = b""
        except UnicodeDecodeError as exc:
            if exc.start >= len(raw) - 3 and exc.reason == "unexpected end of data":
                text = raw[: exc.start].decode("utf-8")
                self._decoder_tail = raw[exc.start :]
            else:
                text = raw.decode("utf-8", errors="replace")
                self._decoder_tail = b""
        buffer = self._pending + text
        events: list[ServerSentEvent] = []
        start = 0
        length = len(buffer)
        while True:
            cr = buffer.find("\r", start)
            lf = buffer.find("\n", start)
            if cr == -1 and lf == -1:
                break
            if cr != -1 and (lf == -1 or cr < lf):
                if cr == length - 1:
                    break  # a CR at the end may be the first half of a CRLF: wait for more
                end, next_start = cr, cr + 2 if buffer[cr + 1] == "\n" else cr + 1
            else:
                end, next_start = lf, lf + 1
            event = self._line(buffer[start:end])
            if event is not None:
                events.append(event)
            start = next_start
        self._pending = buffer[start:]
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif field == "retry" and value.isdigit():
            self.retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event_type = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return ServerSentEvent(
            event=event_type or "message", data="\n".join(data), id=self.last_event_id, retry=self.retry
        )
