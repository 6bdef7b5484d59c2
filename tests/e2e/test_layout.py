"""Narrow screens (issue 28 item 7): at 375 px no page scrolls sideways, and a subagent summary
wraps as units (agent, status, steps, tokens), never in the middle of one."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import PageProbe
from tests.support.server import ServerProcess

pytestmark = pytest.mark.e2e

PHONE = {"width": 375, "height": 812}


def sideways_overflow(probe: PageProbe) -> list[str]:
    """The page scrolls sideways (document wider than the viewport), and the elements that stick
    out past the right edge (the culprits, for the failure message)."""
    result: list[str] = probe.page.evaluate(
        """() => {
          const root = document.scrollingElement;
          if (root.scrollWidth <= root.clientWidth) return [];
          const out = [];
          for (const el of document.querySelectorAll('body *:not(svg *)')) {
            const r = el.getBoundingClientRect();
            if (r.width && r.right > root.clientWidth + 1) out.push(`${el.tagName.toLowerCase()}.${el.className}`);
          }
          return [`scrollWidth ${root.scrollWidth} > ${root.clientWidth}`, ...out.slice(0, 12)];
        }"""
    )
    return result


def test_no_page_scrolls_sideways_at_375_px(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.set_viewport_size(PHONE)
    page.goto(demo_server.url + "/")
    page.wait_for_selector('tr[data-id="demo-research"]')
    assert sideways_overflow(probe) == []
    probe.shot("375-list")

    page.goto(demo_server.url + "/c/demo-research")
    page.wait_for_selector('article[data-kind="relay"]')
    page.keyboard.press("e")  # every subagent open: the deepest nesting is the widest
    page.locator('article[data-id="run-code-reader/call-exec"]').wait_for()
    page.locator('article[data-id="run-code-reader/call-exec"] summary.tool__header').click()
    assert sideways_overflow(probe) == []
    probe.shot("375-thread")

    page.goto(demo_server.url + "/c/demo-research/graph")
    page.wait_for_selector(".dag__node")
    assert sideways_overflow(probe) == []
    probe.shot("375-graph")

    page.goto(demo_server.url + "/explore")
    page.wait_for_selector("#cypher")
    assert sideways_overflow(probe) == []
    probe.shot("375-explorer")


def test_subagent_summary_wraps_between_its_parts(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.set_viewport_size(PHONE)
    page.goto(demo_server.url + "/c/demo-research")
    summary = page.locator('article[data-id="run-lead/call-qdrant"] > .branches > details.branch > summary')
    summary.wait_for()
    # Each part stays on one line: its height is one line of its own text.
    parts = summary.locator(":scope > span")
    assert parts.count() >= 4
    for i in range(parts.count()):
        part = parts.nth(i)
        lines = part.evaluate(
            "(el) => Math.round(el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight))"
        )
        assert lines == 1, (part.inner_text(), lines)
    box = summary.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= PHONE["width"]
    probe.shot("375-summary")
