"""The web viewer in a real Chromium against a real ``convograph serve``.

Each test saves a screenshot of the view it checks under ``test-artifacts/e2e/``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from convograph.demo.conversations import research_script, rlm_script
from tests.e2e.conftest import PageProbe
from tests.support.server import ServerProcess, start_server

pytestmark = pytest.mark.e2e


def post(url: str, cid: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    response = httpx.post(f"{url}/v1/conversations/{cid}/events", json=events, timeout=30)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def model_json(probe: PageProbe) -> Any:
    return probe.page.evaluate("() => window.convograph.model.toJSON()")


def wait_seq(probe: PageProbe, seq: int, timeout: float = 20_000) -> None:
    probe.page.wait_for_function(
        f"() => window.convograph && window.convograph.model.lastSeq >= {seq}", timeout=timeout
    )


def test_list_shows_live_conversations(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.goto(demo_server.url + "/")
    for cid in ("demo-research", "demo-rlm", "demo-retry-policies"):
        page.wait_for_selector(f'tr[data-id="{cid}"] a')
    polls: list[str] = []
    page.on(
        "request",
        lambda request: polls.append(request.url) if request.url.endswith("/v1/conversations") else None,
    )
    # A conversation created after the page loaded appears without a reload, pushed by the live
    # feed (/v1/live/conversations), and its row follows new events and its deletion.
    post(demo_server.url, "e2e-late-arrival", [{"type": "user", "runId": "u", "content": "hello"}])
    page.wait_for_selector('tr[data-id="e2e-late-arrival"]', timeout=10_000)
    post(demo_server.url, "e2e-late-arrival", [{"type": "user", "runId": "u2", "content": "again"}])
    page.wait_for_function(
        """() => document.querySelector('tr[data-id="e2e-late-arrival"] td.num')?.textContent === "2" """,
        timeout=10_000,
    )
    probe.shot("list")
    assert httpx.delete(f"{demo_server.url}/v1/conversations/e2e-late-arrival", timeout=10).status_code == 204
    page.wait_for_selector('tr[data-id="e2e-late-arrival"]', state="detached", timeout=10_000)
    assert polls == []  # pushed, not polled
    page.click('tr[data-id="demo-research"] a')
    page.wait_for_url("**/c/demo-research")
    page.wait_for_selector("article.kind--user")


def test_thread_renders_demo_conversation(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.goto(demo_server.url + "/c/demo-research")
    page.wait_for_selector('article[data-kind="relay"]')
    user = page.locator("article.kind--user").first
    assert "50M embeddings" in user.inner_text()
    # Reasoning is collapsed by default and opens on demand.
    reasoning = page.locator("article.kind--reasoning details.reasoning").first
    assert reasoning.get_attribute("open") is None
    reasoning.locator("summary").click()
    assert "Three independent questions" in reasoning.inner_text()
    # Tool cards with state; the parallel fan-out shows three calls.
    tools = page.locator('.thread > .chunk > article[data-kind="tool_call"]')
    assert tools.count() == 3
    assert [tools.nth(i).get_attribute("data-tool-state") for i in range(3)] == ["done", "done", "done"]
    # Usage totals and run status in the header.
    stats = page.locator(".stats").inner_text()
    assert "Tokens" in stats
    assert "in" in stats
    assert "1 failed" in stats
    assert page.locator(".relay-banner").is_visible()
    probe.shot("thread")


def test_nested_branch_expands_to_second_level(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.goto(demo_server.url + "/c/demo-research")
    page.wait_for_selector('article[data-kind="relay"]')
    qdrant = page.locator('article[data-id="run-lead/call-qdrant"]')
    branch = qdrant.locator(":scope > .branches > details.branch").first
    assert "researcher-qdrant" in branch.locator("summary").inner_text()
    assert branch.locator(".branch__body article").count() == 0  # built lazily, on first open
    # Keyboard: focus the summary and press Enter.
    branch.locator(":scope > summary").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector('article[data-id="run-researcher-qdrant/call-code-reader"]')
    inner = page.locator(
        'article[data-id="run-researcher-qdrant/call-code-reader"] > .branches > details.branch'
    )
    assert "code-reader" in inner.locator("summary").inner_text()
    inner.locator(":scope > summary").click()
    exec_card = page.locator('article[data-id="run-code-reader/call-exec"]')
    exec_card.wait_for()
    assert "Confirmed: vacuum_optimizer.rs" in inner.inner_text()
    exec_card.locator("summary.tool__header").click()
    progress = exec_card.locator(".payload--progress").inner_text()
    assert "vacuum_optimizer.rs:88" in progress
    assert "pid 48213" in progress
    # The failed provider call of the other researcher shows as an error inside its branch.
    milvus = page.locator('article[data-id="run-lead/call-milvus"] > .branches > details.branch')
    milvus.locator(":scope > summary").click()
    assert "529 overloaded" in milvus.locator("article.kind--error").inner_text()
    probe.shot("nested-branches")


def test_relay_allow_reaches_server_and_survives_reload(demo_server: ServerProcess, probe: PageProbe) -> None:
    cid = "e2e-relay"
    post(demo_server.url, cid, research_script().events())
    page = probe.page
    page.goto(f"{demo_server.url}/c/{cid}")
    relay = page.locator('article[data-kind="relay"]')
    relay.wait_for()
    assert relay.get_attribute("data-decision") == "pending"
    page.keyboard.press("r")  # jump to the pending request
    focused = page.evaluate("() => document.activeElement.textContent")
    assert focused == "Allow"
    relay.locator("input.relay__reason").fill("report folder is fine")
    relay.locator("button.btn--allow").click()
    page.wait_for_selector('article[data-kind="relay"][data-decision="allowed"]')
    decided = httpx.get(f"{demo_server.url}/v1/conversations/{cid}/relays").json()["relays"]
    assert decided[0]["decision"]["approved"] is True
    assert decided[0]["decision"]["reason"] == "report folder is fine"
    page.reload()
    page.wait_for_selector('article[data-kind="relay"][data-decision="allowed"]')
    assert page.locator("button.btn--allow").is_hidden()
    assert "Allowed — report folder is fine" in relay.inner_text()
    assert page.locator(".relay-banner").is_hidden()
    probe.shot("relay-allowed")


def test_dropped_stream_resumes_without_duplicates_or_gaps(tmp_path: Path, probe: PageProbe) -> None:
    """Kill the server mid-conversation, restart it on the same port and data, keep posting: the
    page reconnects with Last-Event-ID and ends with exactly the thread of a fresh load."""
    events = research_script().events(decisions={"relay-write-report": True})
    half = len(events) // 2
    server = start_server(tmp_path / "data")
    try:
        cid = "e2e-resume"
        post(server.url, cid, events[:half])
        page = probe.page
        page.goto(f"{server.url}/c/{cid}")
        wait_seq(probe, half)
        probe.expect_errors("ERR_INCOMPLETE_CHUNKED_ENCODING", "ERR_CONNECTION_REFUSED", "ERR_EMPTY_RESPONSE")
        server.stop()
        page.wait_for_selector(".conn--reconnecting")
        server = start_server(tmp_path / "data", port=server.port)
        for start in range(half, len(events), 7):  # arrive in small batches, like a live agent
            post(server.url, cid, events[start : start + 7])
        wait_seq(probe, len(events))
        page.wait_for_selector(".conn--live")
        page.keyboard.press("e")
        resumed = model_json(probe)
        assert page.evaluate("() => window.convograph.model.eventCount") == len(events)
        probe.shot("resumed")
        # The streamed text of the final answer appears once, complete.
        final = page.locator('article[data-id="lead-text-2"] .turn__text').inner_text()
        assert final.count("Recommendation: Qdrant.") == 1
        assert final.endswith("I'd like to save this as a report.")
        page.reload()
        wait_seq(probe, len(events))
        assert model_json(probe) == resumed
    finally:
        server.stop()


def test_live_events_stream_into_open_page(demo_server: ServerProcess, probe: PageProbe) -> None:
    cid = "e2e-live"
    events = rlm_script().events()
    post(demo_server.url, cid, events[:3])
    page = probe.page
    page.goto(f"{demo_server.url}/c/{cid}")
    page.wait_for_selector("article.kind--user")
    for event in events[3:]:
        post(demo_server.url, cid, [event])
    page.wait_for_function(
        "() => [...document.querySelectorAll('article.kind--text .turn__text')].some(e => e.textContent.includes('72.2%) were resolved'))"
    )
    repl = page.locator('article[data-id="repl-3"]')
    assert "llm_query" in repl.inner_text()
    child = repl.locator(":scope > .branches > details.branch")
    assert "rlm-child" in child.locator("summary").inner_text()
    assert page.locator('article[data-id="repl-4"] .tool__state').inner_text().startswith("error")
    probe.shot("repl")


def test_thinking_blocks_render_apart_and_redacted_says_so(
    demo_server: ServerProcess, probe: PageProbe
) -> None:
    """A response with a signed and a redacted thinking block: two reasoning turns, the redacted
    one labelled as such (its payload is not text to show)."""
    cid = "e2e-thinking"
    run = {"runId": "a1"}
    post(
        demo_server.url,
        cid,
        [
            {"type": "user", "runId": "u1", "content": "Why is the sky blue?"},
            {"type": "reasoning", **run, "parentId": "u1:user", "id": "r1", "content": "Rayleigh scattering"},
            {"type": "reasoning", **run, "id": "r1", "content": "", "signature": "sig-1"},
            {"type": "reasoning", **run, "id": "r2", "content": "", "redactedData": "EmwKAhgB"},
            {"type": "text", **run, "id": "t1", "content": "Short wavelengths scatter more."},
        ],
    )
    page = probe.page
    page.goto(f"{demo_server.url}/c/{cid}")
    page.wait_for_selector('article[data-id="r2"]')
    summaries = page.locator("article.kind--reasoning details.reasoning summary")
    assert summaries.count() == 2
    assert summaries.nth(0).inner_text().startswith("Reasoning")
    assert summaries.nth(1).inner_text() == "Redacted thinking"
    probe.shot("thinking")


def test_thread_matches_server_projection(demo_server: ServerProcess, probe: PageProbe) -> None:
    """The viewer's incremental model places views exactly as the server's /thread does."""
    page = probe.page
    for cid in ("demo-research", "demo-retry-policies"):
        page.goto(f"{demo_server.url}/c/{cid}")
        last = httpx.get(f"{demo_server.url}/v1/conversations/{cid}").json()["lastSeq"]
        wait_seq(probe, last)
        client = model_json(probe)
        server = httpx.get(f"{demo_server.url}/v1/conversations/{cid}/thread?model=flat").json()
        assert _shape(client) == _shape(server), cid


def _shape(views: list[dict[str, Any]]) -> list[Any]:
    out = []
    for v in views:
        content = v["content"]
        text = content.get("text") or content.get("message") or content.get("name") or ""
        out.append(
            (
                v["id"],
                v["runId"],
                v["role"],
                content["kind"],
                v["status"],
                text,
                [_shape(b) for b in v["branches"]],
            )
        )
    return out


def test_graph_view_pans_zooms_and_shows_node(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.goto(demo_server.url + "/c/demo-research/graph")
    page.wait_for_selector(".dag__node")
    assert page.locator(".dag__node").count() > 10
    scene = page.locator(".dag__svg > g").first
    before = scene.get_attribute("transform")
    page.locator(".dag__svg").focus()
    page.keyboard.press("+")
    page.keyboard.press("ArrowLeft")
    page.wait_for_function(
        f"() => document.querySelector('.dag__svg > g').getAttribute('transform') !== {json.dumps(before)}"
    )
    page.keyboard.press("0")  # fit again: the first node is back in view
    node = page.locator('.dag__node[data-id="run-user-1:user"]')
    node.click()
    detail = page.locator(".dag__detail").inner_text()
    assert "run-user-1:user" in detail
    assert "50M embeddings" in detail
    probe.shot("graph")
    # Tabs switch without reloading the stream.
    page.click("#tab-thread")
    page.wait_for_selector("article.kind--user")


def test_explorer_runs_a_query(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.goto(demo_server.url + "/explore")
    # The workspace selector starts in a workspace that has data, and offers every one.
    page.wait_for_function("() => document.querySelector('#workspace').value !== '*'")
    page.wait_for_selector('#workspaces option[value="demo"]', state="attached")
    page.fill("#workspace", "demo")
    page.click("text=Most used tools")
    page.wait_for_selector(".results td")
    tools = page.locator(".results tbody tr td:first-child").all_inner_texts()
    assert {"fetch_url", "agent", "exec"} <= set(tools)
    page.click("text=Which agent spawned which")
    page.wait_for_function("() => document.querySelector('.results').textContent.includes('code-reader')")
    page.fill("#cypher", "RETURN 1 AS one, 'convograph' AS name")
    page.locator("#cypher").press("Control+Enter")
    page.wait_for_function("() => document.querySelector('.results th')?.textContent === 'one'")
    assert page.locator(".results th").all_inner_texts() == ["one", "name"]
    assert page.locator(".results td").all_inner_texts() == ["1", "convograph"]
    assert "1 row" in page.locator(".page--explorer [role=status]").inner_text()
    # An example question runs too, and lands in the history.
    assert page.locator(".history li").count() >= 3
    # A question saved under a name is listed, survives a reload and runs on click.
    page.fill("#cypher", "RETURN 40 + 2 AS answer")
    page.fill("#save-name", "The answer")
    page.click("text=Save question")
    page.reload()
    page.click(".saved >> text=The answer")
    page.wait_for_selector(".results td")
    assert page.locator(".results td").all_inner_texts() == ["42"]
    probe.shot("explorer")


def test_keyboard_navigation_moves_between_turns(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.goto(demo_server.url + "/c/demo-retry-policies")
    page.wait_for_selector("article.kind--user")
    time.sleep(0.2)
    page.keyboard.press("j")
    first = page.evaluate("() => document.activeElement.dataset.id")
    page.keyboard.press("j")
    second = page.evaluate("() => document.activeElement.dataset.id")
    page.keyboard.press("k")
    assert page.evaluate("() => document.activeElement.dataset.id") == first
    assert first != second


def test_sibling_replies_show_a_switcher_that_remembers_the_choice(
    demo_server: ServerProcess, probe: PageProbe
) -> None:
    """A regenerated reply (a second run hanging off the same user turn) is an alternative."""
    cid = "e2e-siblings"

    def reply(run: str, text: str) -> list[dict[str, Any]]:
        return [
            {"type": "harness_start", "runId": run, "parentId": "u1:user", "agentId": "assistant"},
            {"type": "text", "runId": f"{run}-llm", "parentId": run, "id": f"{run}-t", "content": text},
            {"type": "harness_end", "runId": run, "parentId": "u1:user"},
        ]

    post(
        demo_server.url,
        cid,
        [
            {"type": "user", "runId": "u1", "content": "Name a prime number."},
            *reply("first", "Seven."),
            {"type": "user", "runId": "u2", "parentId": "first:harness_end", "content": "Another?"},
            *reply("second", "Eleven."),
        ],
    )
    page = probe.page
    page.goto(f"{demo_server.url}/c/{cid}")
    user = page.locator('article[data-id="u1:user"]')
    user.wait_for()
    switcher = user.locator(".switcher")
    assert switcher.locator(".switcher__count").inner_text() == "1 / 2"
    assert page.locator('article[data-id="first-t"]').is_visible()
    switcher.get_by_role("button", name="Next alternative").click()
    assert switcher.locator(".switcher__count").inner_text() == "2 / 2"
    assert page.locator('article[data-id="second-t"]').is_visible()
    assert page.locator('article[data-id="first-t"]').is_hidden()
    assert page.locator('article[data-id="u2:user"]').is_hidden()  # the rest of the first path
    probe.shot("alternatives")
    page.reload()
    page.locator('article[data-id="u1:user"] .switcher__count').wait_for()
    assert page.locator('article[data-id="u1:user"] .switcher__count').inner_text() == "2 / 2"
    assert page.locator('article[data-id="second-t"]').is_visible()
    assert page.locator('article[data-id="first-t"]').is_hidden()


def test_server_with_api_keys_asks_for_one_and_streams(tmp_path: Path, probe: PageProbe) -> None:
    key_file = tmp_path / "keys.json"
    created = subprocess.run(
        [sys.executable, "-m", "convograph", "keys", "create", "viewer", "--file", str(key_file),
         "--scope", "read", "--scope", "write"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    key = created.stdout.strip().splitlines()[0]
    server = start_server(tmp_path / "data", "--api-key-file", str(key_file))
    try:
        headers = {"Authorization": f"Bearer {key}"}
        events = rlm_script().events()
        response = httpx.post(f"{server.url}/v1/conversations/e2e-keys/events", json=events, headers=headers)
        assert response.status_code == 200, response.text
        page = probe.page
        probe.expect_errors("401")
        page.goto(f"{server.url}/c/e2e-keys")
        dialog = page.locator("#key-dialog")
        dialog.wait_for()
        assert "API key" in dialog.inner_text()
        page.fill("#api-key", key)
        page.click("#key-dialog button[type=submit]")
        wait_seq(probe, len(events))
        page.locator('article[data-id="repl-5"]').wait_for()
        # The key is kept for the tab: the list page loads without asking again.
        page.click("text=Conversations")
        page.wait_for_selector('tr[data-id="e2e-keys"]')
        assert dialog.is_hidden()
        probe.shot("api-key")
        page.goto("about:blank")  # close the page's live list feed before the server goes away
    finally:
        server.stop()


def test_error_jump_and_hide_toggles(demo_server: ServerProcess, probe: PageProbe) -> None:
    page = probe.page
    page.goto(demo_server.url + "/c/demo-research")
    page.wait_for_selector('article[data-kind="relay"]')
    error = page.locator("article.kind--error")
    assert error.count() == 0  # inside a collapsed subagent: not built yet
    page.keyboard.press("x")  # opens the regions holding the first error and focuses it
    error.first.wait_for()
    assert page.evaluate("() => document.activeElement.dataset.kind") == "error"
    assert "529 overloaded" in error.first.inner_text()
    # Hiding subagents and reasoning is a view preference, remembered across pages.
    page.click('button[data-toggle="hide-subagents"]')
    assert error.first.is_hidden()
    page.click('button[data-toggle="hide-reasoning"]')
    assert page.locator("article.kind--reasoning").first.is_hidden()
    probe.shot("hidden-subagents")
    page.reload()
    page.wait_for_selector('article[data-kind="relay"]')
    assert page.locator('button[data-toggle="hide-subagents"]').get_attribute("aria-pressed") == "true"
    qdrant = page.locator('article[data-id="run-lead/call-qdrant"] > .branches')
    assert qdrant.is_hidden()
    page.click('button[data-toggle="hide-subagents"]')
    page.click('button[data-toggle="hide-reasoning"]')
    assert qdrant.is_visible()


def test_edit_switch_and_regenerate_through_the_branch_endpoints(
    demo_server: ServerProcess, probe: PageProbe
) -> None:
    cid = "e2e-steer"
    post(
        demo_server.url,
        cid,
        [
            {"type": "user", "runId": "u1", "content": "Which retry policy is safer?"},
            {"type": "harness_start", "runId": "a1", "parentId": "u1:user", "agentId": "assistant"},
            {"type": "text", "runId": "a1", "id": "t1", "content": "Policy B: capped, with backoff."},
            {"type": "harness_end", "runId": "a1"},
        ],
    )
    page = probe.page
    page.goto(f"{demo_server.url}/c/{cid}")
    user = page.locator('article[data-id="u1:user"]')
    user.locator(".steer >> text=Edit").click()
    editor = user.locator("textarea.steer-editor")
    editor.fill("Which retry policy is faster?")
    user.locator("text=Save as new branch").click()
    # The edit is a new branch on the server; the thread now shows the active path.
    edited = page.locator("article.kind--user", has_text="faster")
    edited.wait_for()
    assert edited.locator(".steer .switcher__count").inner_text() == "2 / 2"
    assert page.locator("article.kind--user", has_text="safer?").count() == 0
    probe.shot("steer-edited")
    edited.get_by_role("button", name="Previous branch").click()
    original = page.locator("article.kind--user", has_text="safer?")
    original.wait_for()
    assert original.locator(".steer .switcher__count").inner_text() == "1 / 2"
    assert page.locator('article[data-id="t1"]').is_visible()
    # The choice is the server's state: a reload shows the same path.
    page.reload()
    page.locator("article.kind--user", has_text="safer?").wait_for()
    page.wait_for_selector('article[data-id="t1"] .steer')
    page.locator('article[data-id="t1"] .steer >> text=Regenerate').click()
    page.wait_for_selector(".steer-loose")
    assert "2 / 2" in page.locator(".steer-loose .switcher__count").inner_text()
    events = httpx.get(f"{demo_server.url}/v1/conversations/{cid}/events").text
    kinds = [json.loads(line)["type"] for line in events.splitlines()]
    assert kinds[-3:] == ["edit", "switch_branch", "regenerate"]
    probe.shot("steer-regenerated")


def test_repl_cells_stay_once_the_server_computes_the_path(
    demo_server: ServerProcess, probe: PageProbe
) -> None:
    """After a steering command the thread comes from the server's active path (`/thread?repl=1`):
    the REPL turns, their output and the child run nested under its turn still show."""
    cid = "e2e-rlm-steered"
    post(demo_server.url, cid, rlm_script().events())
    api = f"{demo_server.url}/v1/conversations/{cid}"
    user_id = httpx.get(f"{api}/path").json()["path"][0]["id"]
    edited = httpx.post(f"{api}/messages/{user_id}/edit", json={"content": "How many mention a refund?"})
    assert edited.status_code == 200, edited.text
    assert httpx.post(f"{api}/messages/{user_id}/select").status_code == 200  # back to the original
    page = probe.page
    page.goto(f"{demo_server.url}/c/{cid}")
    page.locator("article.kind--user .steer .switcher__count").wait_for()  # rendered from the server
    assert page.locator("article.kind--user .steer .switcher__count").inner_text() == "1 / 2"
    repl = page.locator('article[data-id="repl-3"]')
    repl.wait_for()
    assert "llm_query" in repl.inner_text()
    child = repl.locator(":scope > .branches > details.branch")
    assert "rlm-child" in child.locator("summary").inner_text()
    assert page.locator('article[data-id="repl-4"] .tool__state').inner_text().startswith("error")
    assert page.locator("article.kind--repl").count() == 5
    probe.shot("repl-steered")


def test_a_conversation_deleted_and_re_created_reloads_the_page(
    demo_server: ServerProcess, probe: PageProbe
) -> None:
    """The stream's resume point is past the new conversation's end (409 cursor_past_head): the
    page starts over instead of retrying that cursor forever."""
    cid = "e2e-recreated"
    post(demo_server.url, cid, [{"type": "user", "runId": f"u{n}", "content": f"old {n}"} for n in range(5)])
    page = probe.page
    probe.expect_errors("409 (Conflict)")  # the browser logs the refused resume itself
    page.goto(f"{demo_server.url}/c/{cid}")
    page.wait_for_selector("article.kind--user")
    assert httpx.delete(f"{demo_server.url}/v1/conversations/{cid}", timeout=10).status_code == 204
    post(demo_server.url, cid, [{"type": "user", "runId": "fresh", "content": "a brand new start"}])
    page.wait_for_function(
        "() => [...document.querySelectorAll('article.kind--user')].some(e => e.textContent.includes('a brand new start'))",
        timeout=20_000,
    )
    assert "old 4" not in page.locator("main").inner_text()
