"""A live agent (``convograph run`` in a subprocess) asks permission; the relay is answered in the
browser (the viewer's Allow button, Playwright + Chromium) and the agent goes on to its answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import PageProbe
from tests.support.server import ServerProcess, start_server

TOOLS = '''
from convograph.harness import tool

@tool(policy="ask")
def publish(title: str) -> str:
    """Publish a post."""
    return f"published {title!r}"
'''


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = start_server(tmp_path / "data")
    try:
        yield process
    finally:
        process.stop()


def test_a_relay_allowed_in_the_viewer_lets_the_live_agent_go_on(
    server: ServerProcess, probe: PageProbe, tmp_path: Path
) -> None:
    (tmp_path / "e2e_relay_tools.py").write_text(TOOLS)
    script = [
        {"text": "I will publish it.", "tool_calls": [{"name": "publish", "arguments": {"title": "Hello"}}]},
        {"text": "Published, as you allowed."},
    ]
    (tmp_path / "script.json").write_text(json.dumps(script))
    cid = "e2e-live-relay"
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "convograph",
            "run",
            "Publish the post",
            "--model",
            f"scripted:{tmp_path / 'script.json'}",
            "--tools",
            "e2e_relay_tools:publish",
            "--server",
            server.url,
            "--conversation",
            cid,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    try:
        page: Any = probe.page
        page.goto(f"{server.url}/c/{cid}")
        relay = page.locator('article[data-kind="relay"]')
        relay.wait_for(timeout=60_000)
        assert relay.get_attribute("data-decision") == "pending"
        assert agent.poll() is None  # the agent is waiting
        relay.locator("button.btn--allow").click()
        page.wait_for_selector('article[data-kind="relay"][data-decision="allowed"]')
        out, err = agent.communicate(timeout=60)
        assert agent.returncode == 0, err
        assert "Published, as you allowed." in out
        page.get_by_text("Published, as you allowed.").wait_for()
        probe.shot("harness-relay-allowed")
    finally:
        if agent.poll() is None:
            agent.kill()


def test_always_allow_in_the_viewer_lets_later_matching_calls_run_unasked(
    server: ServerProcess, probe: PageProbe, tmp_path: Path
) -> None:
    """ "Always allow" on the first ``publish`` ("Hello world"): the second ("Hello again", the same
    first word) runs without a relay; the agent ends with its answer."""
    (tmp_path / "e2e_relay_tools.py").write_text(TOOLS)
    script = [
        {"text": "First post.", "tool_calls": [{"name": "publish", "arguments": {"title": "Hello world"}}]},
        {"text": "Second post.", "tool_calls": [{"name": "publish", "arguments": {"title": "Hello again"}}]},
        {"text": "Both published."},
    ]
    (tmp_path / "script.json").write_text(json.dumps(script))
    cid = "e2e-always-allow"
    agent = subprocess.Popen(
        [sys.executable, "-m", "convograph", "run", "Publish both", "--model", f"scripted:{tmp_path / 'script.json'}",
         "--tools", "e2e_relay_tools:publish", "--server", server.url, "--conversation", cid],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    try:
        page: Any = probe.page
        page.goto(f"{server.url}/c/{cid}")
        relay = page.locator('article[data-kind="relay"]')
        relay.wait_for(timeout=60_000)
        relay.locator("button.btn--always").click()
        out, err = agent.communicate(timeout=60)
        assert agent.returncode == 0, err
        assert "Both published." in out
        page.get_by_text("Both published.").wait_for()
        assert page.locator('article[data-kind="relay"]').count() == 1  # the second call was not asked
        assert "Always allowed" in relay.inner_text()
        probe.shot("harness-relay-always-allowed")
    finally:
        if agent.poll() is None:
            agent.kill()
