"""`ConvographClient`: an async httpx client for the conversation API, with resumable streams.

`stream()` yields every event of a conversation exactly once, in seq order, across dropped
connections: it reconnects with ``Last-Event-ID`` set to the last seq it delivered (waiting the
server's ``retry`` interval, then backing off), and skips anything at or below that seq.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import httpx
import msgspec

from convograph.client.sse import END_EVENT, SSEDecoder
from convograph.events import Event, Relay, RelayResolved, encode_event, parse_event

__all__ = ["ApiError", "ConvographClient", "CursorPastHead"]


class ApiError(Exception):
    """A non-2xx answer: ``status``, and the server's ``code``, ``message`` and ``details``."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details


class CursorPastHead(ApiError):
    """409 ``cursor_past_head``: the seq to resume after is past the conversation's last seq
    (``last_seq``), e.g. because the conversation was deleted and re-created, or the cursor belongs
    to another conversation. Retrying cannot help: start again from ``after=0`` (or from a seq
    at most ``last_seq``) knowing that the events seen so far are not this conversation's."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(status, code, message, details)
        self.last_seq: int = int(details["lastSeq"])


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        error = response.json()["error"]
        code, message, details = error["code"], error["message"], error.get("details")
        if code == "cursor_past_head":
            raise CursorPastHead(response.status_code, code, message, details)
        raise ApiError(response.status_code, code, message, details)
    except (ValueError, KeyError, TypeError):
        raise ApiError(response.status_code, "http_error", response.text[:500]) from None


class ConvographClient:
    """Talks to ``convograph serve``. Use as ``async with ConvographClient(url) as client``."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8321",
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> ConvographClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def append(
        self, conversation_id: str, events: Iterable[Event | Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Post a batch as NDJSON; returns ``{"accepted", "duplicates", "last_seq"}``."""
        body = b"".join(
            encode_event(event if not isinstance(event, Mapping) else parse_event(event)) + b"\n"
            for event in events
        )
        response = await self._http.post(
            f"/v1/conversations/{conversation_id}/events",
            content=body,
            headers={"Content-Type": "application/x-ndjson"},
        )
        _raise_for(response)
        result: dict[str, Any] = response.json()
        return result

    async def conversations(self) -> list[dict[str, Any]]:
        response = await self._http.get("/v1/conversations")
        _raise_for(response)
        items: list[dict[str, Any]] = response.json()["conversations"]
        return items

    async def conversation(self, conversation_id: str) -> dict[str, Any]:
        """One conversation's summary (``lastSeq``, ``pendingRelays``, ...); 404 before it has events."""
        return await self._json("GET", f"/v1/conversations/{conversation_id}")

    async def replay(self, conversation_id: str, after: int = 0) -> list[Event]:
        """Stored events with seq > ``after`` (each carries its ``seq``). Raises `CursorPastHead`
        when ``after`` is past the conversation's last seq."""
        response = await self._http.get(
            f"/v1/conversations/{conversation_id}/events", params={"after": after}
        )
        _raise_for(response)
        return [parse_event(line) for line in response.content.splitlines() if line.strip()]

    async def projection(self, conversation_id: str, name: str, **params: str) -> Any:
        """``thread``, ``messages`` (``format=openai|anthropic|gateway``) or ``dag``, as JSON data."""
        response = await self._http.get(f"/v1/conversations/{conversation_id}/{name}", params=params)
        _raise_for(response)
        return response.json()

    async def decide_relay(
        self,
        conversation_id: str,
        relay_id: str,
        *,
        approved: bool,
        reason: str | None = None,
        always: bool = False,
    ) -> dict[str, Any]:
        """Decide a permission relay; ``always`` (with ``approved``) also approves later calls of
        its tool with matching parameters ("always allow")."""
        body: dict[str, Any] = {"approved": approved}
        if reason is not None:
            body["reason"] = reason
        if always:
            body["always"] = True
        response = await self._http.post(
            f"/v1/conversations/{conversation_id}/relays/{relay_id}", content=msgspec.json.encode(body)
        )
        _raise_for(response)
        result: dict[str, Any] = response.json()
        return result

    async def relays(self, conversation_id: str) -> list[tuple[Relay, RelayResolved | None]]:
        """The conversation's relays, each with its decision (None while pending)."""
        listed = await self._json("GET", f"/v1/conversations/{conversation_id}/relays")
        pairs: list[tuple[Relay, RelayResolved | None]] = []
        for item in listed["relays"]:
            decision = item.pop("decision", None)
            relay = parse_event(msgspec.json.encode(item))
            resolved = parse_event(msgspec.json.encode(decision)) if decision is not None else None
            if isinstance(relay, Relay):
                pairs.append((relay, resolved if isinstance(resolved, RelayResolved) else None))
        return pairs

    async def runs(self, conversation_id: str) -> dict[str, Any]:
        """``{"runs", "pending", "agents"}``: the top-level runs, the turn the conversation awaits
        (or None) and the attached agents."""
        return await self._json("GET", f"/v1/conversations/{conversation_id}/runs")

    async def agents(self, conversation_id: str) -> dict[str, Any]:
        """``{"agents": [...]}``: the agents attached to the conversation."""
        return await self._json("GET", f"/v1/conversations/{conversation_id}/agents")

    async def start_run(self, conversation_id: str, content: Any = None) -> dict[str, Any]:
        """Ask for the next turn: ``content`` (a string or content parts) becomes a user message at
        the end of the active path; without it the conversation must already await a reply."""
        body = {} if content is None else {"input": content}
        return await self._json("POST", f"/v1/conversations/{conversation_id}/runs", body)

    async def cancel_run(
        self, conversation_id: str, run_id: str, *, reason: str | None = None, force: bool = False
    ) -> dict[str, Any]:
        """Ask the agent running ``run_id`` to stop (``force``: end it in the log when no agent is
        attached)."""
        body: dict[str, Any] = {"force": force} if force else {}
        if reason is not None:
            body["reason"] = reason
        return await self._json("POST", f"/v1/conversations/{conversation_id}/runs/{run_id}/cancel", body)

    async def _json(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        content = msgspec.json.encode(body) if body is not None else None
        response = await self._http.request(
            method, path, content=content, headers={"Content-Type": "application/json"} if content else None
        )
        _raise_for(response)
        result: dict[str, Any] = response.json()
        return result

    async def control(
        self,
        conversation_id: str,
        agent_id: str,
        *,
        initial_retry: float = 0.5,
        max_retry: float = 5.0,
        **info: Any,
    ) -> AsyncIterator[tuple[str, Any]]:
        """Attach as agent ``agent_id`` (``info``: ``name``, ``model``, ``kind``, ``serving``) and
        yield its control messages as ``(event, data)``: ``("attached", ...)`` on every (re)connect,
        ``("cancel", {"runId", "reason"})``. Reconnects (backing off) until the caller stops
        iterating; an HTTP error answer (a bad key, a bad id) is raised as `ApiError`."""
        params = {
            k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in info.items() if v is not None
        }
        failures = 0
        while True:
            decoder = SSEDecoder()
            try:
                async with self._http.stream(
                    "GET",
                    f"/v1/conversations/{conversation_id}/agents/{agent_id}/control",
                    params=params,
                    headers={"Accept": "text/event-stream"},
                    timeout=httpx.Timeout(self._http.timeout.connect, read=None),
                ) as response:
                    if not response.is_success:
                        await response.aread()
                        _raise_for(response)
                    async for chunk in response.aiter_raw():
                        for message in decoder.feed(chunk):
                            failures = 0
                            yield message.event, msgspec.json.decode(message.data) if message.data else None
            except (httpx.TransportError, httpx.StreamError):
                pass
            failures += 1
            await asyncio.sleep(min(max_retry, initial_retry * (2 ** max(0, failures - 1))))

    async def stream(
        self,
        conversation_id: str,
        *,
        after: int = 0,
        max_reconnects: int | None = None,
        initial_retry: float = 1.0,
        max_retry: float = 15.0,
    ) -> AsyncIterator[Event]:
        """Every event with seq > ``after``, live, surviving disconnects (see the module docstring).

        Raises `ApiError` for an HTTP error answer (not retried): `CursorPastHead` (with the
        conversation's ``last_seq``) when ``after``, or the last seq delivered, is past the
        conversation's end, as after it was deleted and re-created; and the last transport error
        once ``max_reconnects`` consecutive reconnects failed.
        """
        last_seq = after
        failures = 0
        delay = initial_retry
        while True:
            decoder = SSEDecoder()
            try:
                async with self._http.stream(
                    "GET",
                    f"/v1/conversations/{conversation_id}/stream",
                    headers={"Last-Event-ID": str(last_seq), "Accept": "text/event-stream"},
                    timeout=httpx.Timeout(self._http.timeout.connect, read=None),
                ) as response:
                    if not response.is_success:
                        await response.aread()
                        _raise_for(response)
                    async for chunk in response.aiter_raw():
                        for message in decoder.feed(chunk):
                            if decoder.retry is not None:
                                delay = decoder.retry / 1000
                            if message.event == END_EVENT:  # the server ends the stream: resume
                                continue
                            if message.id is None or not message.id.isdigit():
                                continue
                            seq = int(message.id)
                            if seq <= last_seq:
                                continue
                            event = parse_event(message.data)
                            last_seq = seq
                            failures = 0
                            yield event
            except (httpx.TransportError, httpx.StreamError):
                failures += 1
                if max_reconnects is not None and failures > max_reconnects:
                    raise
            else:
                failures += 1  # the server ended the stream (shutdown): reconnect
                if max_reconnects is not None and failures > max_reconnects:
                    return
            await asyncio.sleep(min(max_retry, delay * (2 ** max(0, failures - 1))))
