"""Search and filters within a conversation and across the list, a shareable link to one turn, and
the colour theme (issue 28 item 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import PageProbe
from tests.e2e.test_viewer import wait_seq
from tests.support.server import ServerProcess, start_server

pytestmark = pytest.mark.e2e


def open_research(demo_server: ServerProcess, probe: PageProbe, fragment: str = "") -> Any:
    page = probe.page
    page.goto(f"{demo_server.url}/c/demo-research{fragment}")
    last = httpx.get(f"{demo_server.url}/v1/conversations/demo-research").json()["lastSeq"]
    wait_seq(probe, last)
    return page


def test_find_within_a_conversation(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = open_research(demo_server, probe)
    page.keyboard.press("/")
    assert page.evaluate("() => document.activeElement.id") == "find"
    page.keyboard.type("deleted_threshold")
    count = page.locator(".find__count")
    page.wait_for_function("() => document.querySelector('.find__count').textContent.endsWith('matches')")
    results = page.locator(".find__result")
    kinds = results.locator(".find__kind").all_inner_texts()
    # Found in a second-level subagent's tool call (its command and streamed output) and texts.
    assert "exec" in kinds
    assert results.count() == int(count.inner_text().split()[0])
    # Enter goes to the first match, opening the subagents that hold it, and highlights it.
    page.keyboard.press("Enter")
    assert count.inner_text().startswith("1 of ")
    first = results.first.get_attribute("data-id")
    current = page.locator(f'article[data-id="{first}"]')
    assert current.is_visible()
    assert "turn--match" in (current.get_attribute("class") or "")
    assert page.evaluate("() => CSS.highlights.get('convograph-find').size") >= 1
    probe.shot("find")
    page.locator("#find").press("Shift+Enter")  # previous: wraps to the last match
    assert count.inner_text().startswith(f"{results.count()} of ")

    # Filters, alone and with text.
    def matches(text: str = "", filters: dict[str, str] | None = None) -> list[str]:
        page.fill("#find", text)
        for label, value in (filters or {}).items():
            page.get_by_label(label, exact=True).select_option(value)
        ids: list[str] = results.evaluate_all("(rs) => rs.map((r) => r.dataset.id)")
        for label in filters or {}:
            page.get_by_label(label, exact=True).select_option(index=0)
        return ids

    assert matches(filters={"Kind of turn": "errors"}) == ["run-milvus-llm-0:error"]
    assert matches(filters={"Tool": "exec"}) == ["run-code-reader/call-exec"]
    assert matches("qdrant", {"Kind of turn": "messages", "Status": "done"})[0] == "run-user-1:user"
    assert "run-lead/call-write-report" not in matches(filters={"Kind of turn": "tools"})  # relay pending
    assert matches("no such words anywhere") == []
    assert count.inner_text() == "no matches"
    page.keyboard.press("Escape")
    assert page.locator(".find__results").is_hidden()
    page.set_viewport_size({"width": 375, "height": 812})
    page.fill("#find", "vacuum")
    probe.shot("375-find")


def test_a_link_opens_one_turn(demo_server: ServerProcess, probe: PageProbe) -> None:
    # A turn two subagents deep: the link opens both regions, scrolls to it and marks it.
    page = open_research(demo_server, probe, "#turn=run-code-reader%2Fcall-exec")
    turn = page.locator('article[data-id="run-code-reader/call-exec"]')
    turn.wait_for()
    page.wait_for_function("() => document.activeElement.dataset.id === 'run-code-reader/call-exec'")
    assert "turn--target" in (turn.get_attribute("class") or "")
    assert turn.is_visible()
    probe.shot("turn-link")
    # A turn's "#" copies its link and puts it in the address.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=demo_server.url)
    answer = page.locator('article[data-id="lead-text-2"]')
    answer.get_by_role("link", name="Copy a link to this turn").click()
    page.wait_for_function("() => location.hash === '#turn=lead-text-2'")
    assert (
        page.evaluate("() => navigator.clipboard.readText()")
        == f"{demo_server.url}/c/demo-research#turn=lead-text-2"
    )
    assert page.evaluate("() => document.activeElement.dataset.id") == "lead-text-2"


def test_search_and_filter_across_the_list(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.goto(demo_server.url + "/")
    page.wait_for_selector('tr[data-id="demo-research"] a.conv__title')

    def shown() -> list[str]:
        page.wait_for_function(
            "() => !document.querySelector('.page p[role=status]').textContent.includes('searching')"
        )
        ids: list[str] = page.locator(".conversations tbody tr").evaluate_all(
            "(rs) => rs.map((r) => r.dataset.id)"
        )
        return ids

    # Text that is only inside a subagent's tool output: found by the server's text search.
    # (Other tests of this server post copies of the research conversation: they match too.)
    page.fill("#list-search", "deleted_ratio")
    page.wait_for_selector(".conv__hit mark")
    found = shown()
    assert "demo-research" in found
    assert not {"demo-rlm", "demo-retry-policies"} & set(found)
    assert page.locator(".conversations tbody tr").count() == page.locator(".conv__hit mark").count()
    assert "deleted_ratio" in page.locator('tr[data-id="demo-research"] .conv__hit').inner_text()
    assert page.evaluate("() => location.search") == "?q=deleted_ratio"
    probe.shot("list-search")
    # A tool name matches at once; the filters combine with the text.
    page.fill("#list-search", "")
    page.get_by_label("Tool used").select_option("exec")
    assert "demo-research" in shown()
    assert not {"demo-rlm", "demo-retry-policies"} & set(shown())
    page.get_by_label("Tool used").select_option("")
    page.check("#list-errors")
    with_errors = shown()
    assert "demo-research" in with_errors
    assert "demo-rlm" not in with_errors
    page.get_by_label("Status").select_option("complete")
    assert "demo-research" not in shown()  # it waits on a relay: active
    # The search is in the address: a reload (or a shared link) shows the same list.
    url = page.url
    assert "errors=1" in url
    assert "status=complete" in url
    page.goto(url)
    page.wait_for_selector(".conversations tbody")
    assert page.locator("#list-errors").is_checked()
    assert page.get_by_label("Status").input_value() == "complete"
    page.set_viewport_size({"width": 375, "height": 812})
    page.goto(demo_server.url + "/?q=qdrant")
    page.wait_for_selector(".conversations tbody tr")
    assert page.evaluate(
        "() => document.scrollingElement.scrollWidth <= document.scrollingElement.clientWidth"
    )
    probe.shot("375-list-search")


def test_theme_follows_the_system_until_chosen(demo_server: ServerProcess, browser: Any) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="dark")
    try:
        page = context.new_page()
        probe = PageProbe(page)
        page.goto(demo_server.url + "/c/demo-research")
        page.wait_for_selector('article[data-kind="relay"]')
        background = "() => getComputedStyle(document.body).backgroundColor"
        dark = page.evaluate(background)
        assert dark == "rgb(17, 19, 23)"  # the system's dark scheme, with nothing chosen
        button = page.locator("#theme-button")
        assert button.get_attribute("aria-label") == "Colour theme: Auto (dark). Switch to dark."
        probe.shot("dark-thread")
        button.click()  # -> dark (chosen)
        button.click()  # -> light, although the system is dark
        assert page.evaluate(background) == "rgb(247, 247, 248)"
        assert page.evaluate("() => localStorage.getItem('convograph.theme')") == "light"
        page.reload()
        page.wait_for_selector('article[data-kind="relay"]')
        assert (
            page.evaluate("() => document.documentElement.dataset.theme") == "light"
        )  # before any module ran
        assert page.evaluate(background) == "rgb(247, 247, 248)"
        button.click()  # -> auto: the system's again
        assert page.evaluate("() => localStorage.getItem('convograph.theme')") is None
        assert page.evaluate(background) == dark
        page.set_viewport_size({"width": 375, "height": 812})
        page.keyboard.press("w")
        page.wait_for_selector(".tl-row")
        probe.shot("375-dark-timeline")
        page.set_viewport_size({"width": 1280, "height": 900})
        probe.shot("dark-timeline")
        assert probe.unexpected_errors() == []
    finally:
        context.close()


def test_a_long_list_shows_a_page_at_a_time(tmp_path: Path, probe: PageProbe) -> None:
    server = start_server(tmp_path / "data")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for n in range(130):
                content = f"Question {n}" + (" about refunds" if n % 2 else "")
                client.post(
                    f"/v1/conversations/many-{n:03d}/events",
                    json=[{"type": "user", "runId": "u", "content": content}],
                )
        page = probe.page
        page.goto(server.url + "/")
        rows = page.locator(".conversations tbody tr")
        page.wait_for_function("() => document.querySelectorAll('.conversations tbody tr').length === 100")
        more = page.locator(".list__more")
        assert more.inner_text() == "Show 30 more (30 not shown)"
        more.click()
        assert rows.count() == 130
        assert more.is_hidden()
        page.fill("#list-search", "refunds")  # a new search starts at the first page again
        page.wait_for_function("() => document.querySelectorAll('.conversations tbody tr').length === 65")
        assert "65 matches" in page.locator(".page p[role=status]").inner_text()
        page.goto("about:blank")  # close the live list before the server stops
    finally:
        server.stop()
