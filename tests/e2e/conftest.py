"""Browser end-to-end fixtures: a real ``convograph serve`` subprocess and Debian's Chromium
driven by Playwright for Python (never ``playwright install``).

Chromium missing: the tests skip locally and FAIL when ``CI=true`` (run ``scripts/ensure-browser``).
Every page blocks and records requests that leave 127.0.0.1, so a test fails if the viewer ever
reaches for the network. Screenshots go to ``test-artifacts/e2e/``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from convograph.demo import DEMO_CONVERSATIONS, play_all
from convograph.demo.intelligence import hook_envelopes
from tests.support.server import ServerProcess, start_server

CHROMIUM = Path(os.environ.get("CONVOGRAPH_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "e2e"


def require_chromium() -> None:
    if CHROMIUM.is_file():
        return
    message = f"Chromium not found at {CHROMIUM} (run scripts/ensure-browser)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def seed_demo(url: str) -> None:
    """Every bundled demo conversation, fast, stopping at pending relays, plus their hook
    envelopes for the explorer (workspace ``demo``), as ``convograph demo`` does."""
    scripts = [factory() for factory in DEMO_CONVERSATIONS]
    envelopes = [e for s in scripts for e in hook_envelopes(s.events(), prefix=s.conversation_id)]
    # In a thread of its own: Playwright's sync API keeps an event loop running in this one once the
    # package's browser fixture has started (any test module may start it before this fixture).
    with ThreadPoolExecutor(1) as pool:
        pool.submit(
            asyncio.run, play_all(url, scripts, speed=None, wait_for_relays=False, envelopes=envelopes)
        ).result()
    # Hook events reach the graph shortly after 202: wait until the demo sessions are queryable.
    query = {"query": "MATCH (s:Session {workspace: $workspace}) RETURN count(s) AS n", "workspace": "demo"}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = httpx.post(f"{url}/cypher", json=query, timeout=10).json().get("results", [])
        if rows and rows[0]["n"] > 0:
            return
        time.sleep(0.2)
    raise RuntimeError("the demo's hook events never reached the graph")


@pytest.fixture(scope="package")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the session, seeded with the demo conversations."""
    server = start_server(tmp_path_factory.mktemp("e2e") / "data")
    try:
        seed_demo(server.url)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """Package-scoped: Playwright's sync API runs an event loop in this thread while it is open, so
    it must be closed before any other test package (asyncio tests) runs."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


class PageProbe:
    """A page plus what it did: external requests it tried, console errors, page errors."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.external: list[str] = []
        self.errors: list[str] = []
        self.expected: tuple[str, ...] = ()

    def expect_errors(self, *fragments: str) -> None:
        """Console errors containing any of ``fragments`` are part of the test (a killed server)."""
        self.expected += fragments

    def unexpected_errors(self) -> list[str]:
        return [e for e in self.errors if not any(f in e for f in self.expected)]

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def probe(browser: Any) -> Iterator[PageProbe]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    page = context.new_page()
    page.set_default_timeout(15_000)
    result = PageProbe(page)

    def route(route: Any) -> None:
        url: str = route.request.url
        if url.startswith(("http://127.0.0.1", "data:", "blob:")):
            route.continue_()
        else:
            result.external.append(url)
            route.abort()

    context.route("**/*", route)
    page.on("pageerror", lambda exc: result.errors.append(f"pageerror: {exc}"))
    page.on(
        "console", lambda msg: result.errors.append(f"console: {msg.text}") if msg.type == "error" else None
    )
    try:
        yield result
    finally:
        context.close()
    assert result.external == [], f"the viewer made external requests: {result.external}"
    assert result.unexpected_errors() == [], f"the page logged errors: {result.unexpected_errors()}"
