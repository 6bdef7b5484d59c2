"""Time in the viewer (issue 28 items 10 and 11): when each turn happened and how long it and each
tool call took, a timeline (waterfall) of runs, tool calls and model calls, and per model call its
tokens, cache reads and writes, and latency."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.conftest import PageProbe
from tests.e2e.test_viewer import post, wait_seq
from tests.support.server import ServerProcess

pytestmark = pytest.mark.e2e

T0 = datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def timed_conversation() -> list[dict[str, Any]]:
    """A lead agent: one model call, a search (1.3 s), a subagent (1.2 s) with its own model call,
    then a second model call. ISO timestamps; the model calls' usage in milliseconds since epoch
    (both forms are accepted)."""

    def ms(seconds: float) -> int:
        return int((T0 + timedelta(seconds=seconds)).timestamp() * 1000)

    lead = {"runId": "lead"}
    return [
        {"type": "user", "runId": "u1", "content": "Find the flaky tests.", "timestamp": at(0)},
        {"type": "harness_start", **lead, "parentId": "u1:user", "agentId": "lead", "timestamp": at(0.2)},
        {"type": "reasoning", "runId": "llm-1", "parentId": "lead", "id": "r1", "content": "Search first.", "timestamp": at(0.5)},
        {"type": "reasoning", "runId": "llm-1", "parentId": "lead", "id": "r1", "content": " Then delegate.", "timestamp": at(1.0)},
        {"type": "text", "runId": "llm-1", "parentId": "lead", "id": "t1", "content": "Searching the CI logs", "timestamp": at(1.2)},
        {"type": "text", "runId": "llm-1", "parentId": "lead", "id": "t1", "content": " now.", "timestamp": at(2.0)},
        {"type": "usage", "runId": "llm-1", "parentId": "lead", "inputTokens": 1200, "outputTokens": 80,
         "cacheReadTokens": 1024, "cacheCreationTokens": 64, "timestamp": ms(2.1)},
        {"type": "tool_call", **lead, "id": "lead/c1", "name": "search", "input": {"q": "flaky"}, "timestamp": at(2.2)},
        {"type": "tool_result", **lead, "id": "lead/c1", "name": "search", "output": {"hits": 4}, "timestamp": at(3.5)},
        {"type": "tool_call", **lead, "id": "lead/spawn", "name": "agent", "input": {"task": "triage"}, "timestamp": at(3.6)},
        {"type": "harness_start", "runId": "sub", "parentId": "lead/spawn", "agentId": "worker", "timestamp": at(3.7)},
        {"type": "text", "runId": "sub-llm", "parentId": "sub", "id": "s1", "content": "Two are timing out.", "timestamp": at(3.8)},
        {"type": "usage", "runId": "sub-llm", "parentId": "sub", "inputTokens": 500, "outputTokens": 40, "timestamp": ms(4.6)},
        {"type": "harness_end", "runId": "sub", "parentId": "lead/spawn", "timestamp": at(4.7)},
        {"type": "tool_result", **lead, "id": "lead/spawn", "name": "agent", "output": {"result": "2 flaky"}, "timestamp": at(4.8)},
        {"type": "text", "runId": "llm-2", "parentId": "lead", "id": "t2", "content": "Two tests are flaky.", "timestamp": at(5.0)},
        {"type": "usage", "runId": "llm-2", "parentId": "lead", "inputTokens": 2000, "outputTokens": 100,
         "cacheReadTokens": 1800, "timestamp": ms(6.1)},
        {"type": "harness_end", **lead, "parentId": "u1:user", "timestamp": at(6.2)},
    ]  # fmt: skip


def test_turns_and_tool_calls_say_when_and_how_long(demo_server: ServerProcess, probe: PageProbe) -> None:
    events = timed_conversation()
    post(demo_server.url, "e2e-timed", events)
    page = probe.page
    page.goto(f"{demo_server.url}/c/e2e-timed")
    wait_seq(probe, len(events))
    user_time = page.locator('article[data-id="u1:user"] .turn__link')  # the time links to the turn
    assert user_time.get_attribute("data-time") == "2026-03-01T10:00:00.000Z"
    assert user_time.get_attribute("href") == "#turn=u1%3Auser"
    answer = page.locator('article[data-id="t1"]')
    assert answer.locator(".turn__link").inner_text().endswith("· 800 ms")  # first to last delta
    assert page.locator('article[data-id="lead/c1"] .tool__duration').inner_text() == "1.3 s"
    assert page.locator('article[data-id="lead/spawn"] .tool__duration').inner_text() == "1.2 s"
    # The model call that produced the answer: tokens, cache reads and writes, latency (first event
    # of the call to its usage: 0.5 s -> 2.1 s).
    call = answer.locator(".model-call")
    assert call.inner_text() == "Model call · 1,200 in · 80 out · 1,024 cache read · 64 cache write · 1.6 s"
    assert "Duration\n6.2 s" in page.locator(".stats").inner_text()
    probe.shot("timed-thread")
    page.set_viewport_size({"width": 375, "height": 812})
    probe.shot("375-timed-thread")


def test_timeline_shows_runs_tool_calls_and_model_calls(demo_server: ServerProcess, probe: PageProbe) -> None:
    events = timed_conversation()
    post(demo_server.url, "e2e-timeline", events)
    page = probe.page
    page.goto(f"{demo_server.url}/c/e2e-timeline")
    wait_seq(probe, len(events))
    page.keyboard.press("w")
    page.wait_for_url("**/c/e2e-timeline/timeline")
    rows = page.locator(".tl-row")
    rows.first.wait_for()
    keys = rows.evaluate_all("(rows) => rows.map((r) => r.dataset.key)")
    assert keys == [
        "run:u1", "run:lead", "run:llm-1", "tool:lead/c1", "tool:lead/spawn", "run:sub", "run:sub-llm", "run:llm-2"
    ]  # fmt: skip
    kinds = rows.evaluate_all("(rows) => rows.map((r) => r.dataset.kind)")
    assert kinds == ["user", "agent", "llm", "tool", "tool", "agent", "llm", "llm"]
    search = page.locator('.tl-row[data-key="tool:lead/c1"]')
    assert search.locator(".tl-dur").inner_text() == "1.3 s"
    # Bars sit on one axis: the search spans 2.2 s -> 3.5 s of the conversation's 6.2 s.
    track, bar = search.locator(".tl-track"), search.locator(".tl-bar")
    t, b = track.bounding_box(), bar.bounding_box()
    assert t is not None
    assert b is not None
    assert abs((b["x"] - t["x"]) / t["width"] - 2.2 / 6.2) < 0.01
    assert abs(b["width"] / t["width"] - 1.3 / 6.2) < 0.01
    worker = page.locator('.tl-row[data-key="run:sub"]')
    assert "worker" in worker.inner_text()
    indent = "(el) => parseFloat(getComputedStyle(el.querySelector('.tl-name')).paddingLeft)"
    spawn = page.locator('.tl-row[data-key="tool:lead/spawn"]')
    assert worker.evaluate(indent) == spawn.evaluate(indent) + 14  # under the call that spawned it
    # Per model call: tokens, cache and latency.
    calls = page.locator(".tl-calls tbody tr")
    assert calls.count() == 3
    assert calls.nth(0).locator("td").all_inner_texts() == [
        "1",
        "lead",
        "+500 ms",
        "1.6 s",
        "1,200",
        "80",
        "1,024",
        "64",
    ]
    assert calls.nth(1).locator("td").all_inner_texts()[1] == "worker"
    assert calls.nth(2).locator("td").all_inner_texts()[6] == "1,800"
    probe.shot("timeline")
    page.set_viewport_size({"width": 375, "height": 812})
    assert page.evaluate(
        "() => document.scrollingElement.scrollWidth <= document.scrollingElement.clientWidth"
    )
    probe.shot("375-timeline")
    page.set_viewport_size({"width": 1280, "height": 900})
    # A row shows its turn in the thread.
    search.click()
    page.wait_for_url("**/c/e2e-timeline")
    assert page.evaluate("() => document.activeElement.dataset.id") == "lead/c1"


def test_timeline_without_timestamps_says_so(demo_server: ServerProcess, probe: PageProbe) -> None:
    post(demo_server.url, "e2e-untimed", [{"type": "user", "runId": "u", "content": "hi"}])
    page = probe.page
    page.goto(f"{demo_server.url}/c/e2e-untimed/timeline")
    page.locator(".timeline__empty").wait_for()
    assert "no timestamp" in page.locator(".timeline__empty").inner_text().lower()
    assert page.locator('article[data-id="u:user"] .turn__link').inner_text() == "#"  # a link, no time
