"""Steering cues and screen-reader hygiene (issue 28 item 8): a reply is expected after an edit,
Regenerate sits on the answer, the errors button says what it is, and the thread holds no live
region per turn or per relay."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import PageProbe
from tests.e2e.test_viewer import post, wait_seq
from tests.support.server import ServerProcess

pytestmark = pytest.mark.e2e

EXCHANGE = [
    {"type": "user", "runId": "u1", "content": "Which retry policy is safer?"},
    {"type": "harness_start", "runId": "a1", "parentId": "u1:user", "agentId": "assistant"},
    {"type": "reasoning", "runId": "a1-llm", "parentId": "a1", "id": "r1", "content": "Compare caps."},
    {"type": "text", "runId": "a1-llm", "parentId": "a1", "id": "t1", "content": "Policy B: capped."},
    {"type": "harness_end", "runId": "a1"},
]


def test_an_edit_says_a_reply_is_expected(demo_server: ServerProcess, probe: PageProbe) -> None:
    cid = "e2e-awaiting"
    post(demo_server.url, cid, EXCHANGE)
    page = probe.page
    page.goto(f"{demo_server.url}/c/{cid}")
    user = page.locator('article[data-id="u1:user"]')
    user.locator(".steer >> text=Edit").click()
    user.locator("textarea.steer-editor").fill("Which retry policy is faster?")
    user.locator("text=Save as new branch").click()
    waiting = page.locator(".steer-loose", has_text="Waiting for the agent's reply")
    waiting.wait_for()
    assert page.locator(".thread > .steer-loose").last.get_attribute("data-sig", timeout=1000) is not None
    # It stays one element (not re-announced) while the path refreshes.
    handle = waiting.element_handle()
    page.wait_for_timeout(2000)
    assert handle is not None
    assert handle.evaluate("(el) => el.isConnected")
    probe.shot("awaiting-reply")
    # The agent picks it up: its own "working…" turn replaces the placeholder.
    post(demo_server.url, cid, [{"type": "harness_start", "runId": "a2", "agentId": "assistant"}])
    waiting.wait_for(state="detached")


def test_regenerate_sits_on_the_answer(demo_server: ServerProcess, probe: PageProbe) -> None:
    cid = "e2e-regen-anchor"
    post(demo_server.url, cid, EXCHANGE)
    page = probe.page
    page.goto(f"{demo_server.url}/c/{cid}")
    answer = page.locator('article[data-id="t1"]')
    answer.locator(".steer >> text=Regenerate").wait_for()
    assert page.locator('article[data-id="r1"] .steer').count() == 0
    # Below the answer's text.
    order = answer.evaluate(
        "(el) => [...el.children].filter((c) => !c.hidden && c.className !== 'branches').map((c) => c.className.split(' ')[0])"
    )
    assert order[-2:] == ["turn__text", "steer"], order
    probe.shot("regenerate-on-answer")


def test_live_regions_are_few_and_the_errors_button_is_named(
    demo_server: ServerProcess, probe: PageProbe
) -> None:
    page = probe.page
    page.goto(demo_server.url + "/c/demo-research")
    last = httpx.get(f"{demo_server.url}/v1/conversations/demo-research").json()["lastSeq"]
    wait_seq(probe, last)
    page.keyboard.press("e")
    page.locator('article[data-id="run-code-reader/call-exec"]').wait_for()
    counts = page.evaluate(
        """() => ({
          alert: document.querySelectorAll('.thread [role=alert]').length,
          status: document.querySelectorAll('.thread [role=status]').length,
          live: document.querySelectorAll('.thread [aria-live]:not([aria-live=off])').length,
          page: document.querySelectorAll('[aria-live]:not([aria-live=off]), [role=status], [role=alert]').length,
        })"""
    )
    assert counts["alert"] == 0
    assert counts["status"] == 0
    assert counts["live"] == 0
    assert counts["page"] <= 4  # connection state, the announcer, the steering problem, the list state
    errors = page.get_by_role("button", name="1 error: show the next one")
    assert errors.inner_text() == "1"
    errors.click()
    assert page.evaluate("() => document.activeElement.dataset.kind") == "error"
    probe.shot("a11y-errors")


def test_the_list_shows_titles(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.goto(demo_server.url + "/")
    research = page.locator('tr[data-id="demo-research"]')
    research.locator("a.conv__title").wait_for()
    assert research.locator("a").inner_text().startswith("We need a vector database for ~50M embeddings")
    assert research.locator(".conv__id").inner_text() == "demo-research"
    # A conversation created now gets its title live, and the filter matches titles.
    post(
        demo_server.url, "e2e-titled", [{"type": "user", "runId": "u", "content": "Plan the  Q3\nmigration"}]
    )
    titled = page.locator('tr[data-id="e2e-titled"] a.conv__title')
    titled.wait_for()
    assert titled.inner_text() == "Plan the Q3 migration"
    page.fill('input[type="search"]', "q3 migr")
    page.wait_for_function("() => document.querySelectorAll('.conversations tbody tr').length === 1")
    probe.shot("list-titles")
    page.set_viewport_size({"width": 375, "height": 812})
    page.fill('input[type="search"]', "")
    probe.shot("375-list-titles")
    assert httpx.delete(f"{demo_server.url}/v1/conversations/e2e-titled", timeout=10).status_code == 204
