"""A live agent serving a conversation (``convograph run --serve`` in a subprocess, on the OpenAI SDK
against the scripted model server): the viewer says it is serving, a message typed in the viewer
starts its next turn and the answer streams in live; Stop ends a run from the viewer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from convograph.testing import ModelServer, Reply, Say
from tests.e2e.conftest import PageProbe
from tests.support.server import ServerProcess, start_server

ANSWER = "Hello from the serving agent: this answer streams in a few words at a time."


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = start_server(tmp_path / "data", "--no-intelligence")
    try:
        yield process
    finally:
        process.stop()


def test_a_message_typed_in_the_viewer_starts_the_agents_turn_live(
    server: ServerProcess, probe: PageProbe
) -> None:
    cid = "e2e-served"
    replies = [
        Reply(content=[Say(text=ANSWER)], chunk_size=6, chunk_delay=0.12),
        Reply(content=[Say(text="This one takes a long time")], stall_after=3, stall=120),
    ]
    with ModelServer(replies) as model:
        agent = subprocess.Popen(
            [sys.executable, "-m", "convograph", "run", "--serve", "--name", "helper",
             "--model", "openai:scripted-model", "--base-url", model.openai_base_url,
             "--server", server.url, "--conversation", cid],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "OPENAI_API_KEY": "sk-test"},
        )  # fmt: skip
        try:
            page: Any = probe.page
            page.goto(f"{server.url}/c/{cid}")
            panel = page.locator("section.serving")
            panel.wait_for(state="visible", timeout=60_000)
            status = panel.locator(".serving__status")
            assert "helper (scripted-model) is serving this conversation" in status.inner_text()
            assert "your message starts its next turn" in status.inner_text()

            panel.locator("textarea").fill("Please say hello")
            panel.get_by_role("button", name="Send").click()
            page.get_by_text("Please say hello").first.wait_for()
            # Live: the run is shown answering while the text streams in.
            page.wait_for_selector('section.serving[data-state="running"]')
            assert "helper is answering" in status.inner_text()
            answer = page.locator("article[data-kind='text'] .turn__text").last
            page.wait_for_function(
                "(text) => { const all = [...document.querySelectorAll(\"article[data-kind='text'] .turn__text\")];"
                " const t = all.length ? all[all.length - 1].textContent : ''; return t.length > 0 && t.length < text.length; }",
                arg=ANSWER,
            )
            page.get_by_text(ANSWER).wait_for()
            assert answer.inner_text().strip() == ANSWER
            page.wait_for_selector('section.serving[data-state="idle"]')
            probe.shot("serving-answered")
            sent = model.requests_to("chat")[0].body["messages"]
            assert sent == [{"role": "user", "content": "Please say hello"}]

            # Stop from the viewer: the run ends cancelled.
            panel.locator("textarea").fill("Now something slow")
            panel.get_by_role("button", name="Send").click()
            page.wait_for_selector('section.serving[data-state="running"]')
            panel.get_by_role("button", name="Stop").click()
            page.wait_for_selector('section.serving[data-state="idle"]', timeout=30_000)
            runs = httpx.get(f"{server.url}/v1/conversations/{cid}/runs").json()["runs"]
            assert [r["reason"] for r in runs] == ["final", "cancelled"]
            probe.shot("serving-stopped")
        finally:
            agent.send_signal(signal.SIGINT)
            out, _ = agent.communicate(timeout=30)
    assert agent.returncode == 0, out
    assert "helper is serving conversation e2e-served" in out
