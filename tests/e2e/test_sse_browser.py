"""The browser recipe of docs/server.md ("Browsers (EventSource)"), run as written in Chromium
against a real ``convograph serve``: named frames reach their listeners, ``onmessage`` never fires,
an ``error`` event is told from a connection error, a dropped stream resumes exactly, and the
server's ``stream_end`` and a refused reconnect (409) are seen (issue 26, item 12)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from convograph.events import EVENT_TYPES
from tests.e2e.conftest import PageProbe
from tests.support.server import start_server

DOC = Path(__file__).resolve().parents[2] / "docs" / "server.md"


def recipe() -> str:
    """The first ``js`` block after the "Browsers" heading of docs/server.md."""
    text = DOC.read_text()
    section = text[text.index("### Browsers (`EventSource`)") :]
    match = re.search(r"```js\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


def post(url: str, cid: str, events: list[dict[str, Any]]) -> None:
    httpx.post(f"{url}/v1/conversations/{cid}/events", json=events, timeout=10).raise_for_status()


def test_the_recipe_lists_every_event_type() -> None:
    listed = re.search(r"const EVENT_TYPES = (\[.*?\]);", recipe(), re.DOTALL)
    assert listed is not None
    assert set(json.loads(listed.group(1))) == EVENT_TYPES


@pytest.mark.usefixtures("demo_server")  # set up before the browser: it runs asyncio (conftest)
def test_the_browser_recipe_tells_error_events_from_connection_errors(
    tmp_path: Path, probe: PageProbe
) -> None:
    server = start_server(tmp_path / "data", env={"CONVOGRAPH_SSE_HEARTBEAT_SECONDS": "1"})
    cid = "browser-1"
    try:
        post(
            server.url,
            cid,
            [
                {"type": "user", "runId": "u", "content": "hi"},
                {"type": "text", "runId": "a", "id": "t1", "content": "working"},
                {"type": "error", "runId": "a", "message": "the model timed out"},
                {"type": "text", "runId": "a", "id": "t2", "content": "retrying"},
            ],
        )
        page = probe.page
        page.goto(f"{server.url}/healthz")  # same origin as the stream
        page.add_script_tag(content=recipe())
        page.evaluate(
            """(url) => {
                window.got = []; window.ends = []; window.unnamed = 0;
                window.source = followConversation(url, (e) => window.got.push([e.seq, e.type]),
                                                   (end) => window.ends.push(end.reason));
                window.source.onmessage = () => { window.unnamed += 1; };
            }""",
            f"/v1/conversations/{cid}/stream",
        )
        page.wait_for_function("() => window.got.length === 4")
        assert page.evaluate("() => window.got") == [[1, "user"], [2, "text"], [3, "error"], [4, "text"]]
        assert page.evaluate("() => window.ends") == []  # the error event was not a connection error

        # the server stops (stream_end "shutdown") and comes back: EventSource resumes exactly
        probe.expect_errors("ERR_CONNECTION_REFUSED", "ERR_EMPTY_RESPONSE", "ERR_INCOMPLETE_CHUNKED_ENCODING")
        server.stop()
        page.wait_for_function("() => window.ends.includes('shutdown')")
        server = start_server(tmp_path / "data", port=server.port)
        post(server.url, cid, [{"type": "text", "runId": "a", "id": "t3", "content": "back"}])
        page.wait_for_function("() => window.got.length === 5", timeout=30_000)
        assert page.evaluate("() => window.got")[4] == [5, "text"]

        # deleted (stream_end "deleted"), then re-created: the reconnect is refused with 409
        probe.expect_errors("409")
        httpx.delete(f"{server.url}/v1/conversations/{cid}", timeout=10).raise_for_status()
        post(server.url, cid, [{"type": "user", "runId": "u", "content": "new"}])
        page.wait_for_function("() => window.ends.includes('refused')", timeout=30_000)
        assert page.evaluate("() => window.ends") == ["shutdown", "deleted", "refused"]
        assert page.evaluate("() => window.source.readyState") == 2  # CLOSED: no retry loop
        assert page.evaluate("() => window.got.length") == 5
        assert page.evaluate("() => window.unnamed") == 0  # onmessage never fires
    finally:
        server.stop()
