"""Subagent summaries name the subagent's own run, before and after a steering command (issue 28
item 6): once the thread comes from the server's active path, a summary used to fall back to the
run of the branch's first turn (a model call's run): the wrong name, tokens and status."""

from __future__ import annotations

import httpx
import pytest

from convograph.demo.conversations import research_script
from tests.e2e.conftest import PageProbe
from tests.e2e.test_viewer import post, wait_seq
from tests.support.server import ServerProcess

pytestmark = pytest.mark.e2e

FOLLOW_UP = [
    {"type": "user", "runId": "run-user-2", "parentId": "run-lead:harness_end", "content": "And Weaviate?"},
    {"type": "harness_start", "runId": "run-lead-2", "parentId": "run-user-2:user", "agentId": "lead"},
    {
        "type": "text",
        "runId": "run-lead-2",
        "id": "lead2-text",
        "content": "Weaviate reclaims space the same way.",
    },
    {"type": "harness_end", "runId": "run-lead-2", "parentId": "run-user-2:user"},
]
"""A second exchange after the research, so that steering it keeps the subagents on the path."""

QDRANT = 'article[data-id="run-lead/call-qdrant"] > .branches > details.branch > summary'
MILVUS = 'article[data-id="run-lead/call-milvus"] > .branches > details.branch > summary'


def summaries(probe: PageProbe) -> tuple[str, str]:
    page = probe.page
    return page.locator(QDRANT).inner_text(), page.locator(MILVUS).inner_text()


def assert_right_runs(qdrant: str, milvus: str) -> None:
    # researcher-qdrant and its code reader: 980 + 3,105 + 2,710 + 640 + 1,880 in, 343 out.
    assert "researcher-qdrant" in qdrant, qdrant
    assert "9,315 in / 343 out" in qdrant, qdrant
    assert "done" in qdrant, qdrant
    # researcher-milvus ended normally; only its first provider call (its own run) failed.
    assert "researcher-milvus" in milvus, milvus
    assert "done" in milvus, milvus
    assert "error" not in milvus, milvus


@pytest.mark.parametrize("command", ["edit", "regenerate", "switch"])
def test_summaries_keep_their_run_after_a_command(
    demo_server: ServerProcess, probe: PageProbe, command: str
) -> None:
    cid = f"e2e-summaries-{command}"
    events = [*research_script().events(decisions={"relay-write-report": True}), *FOLLOW_UP]
    post(demo_server.url, cid, events)
    page = probe.page
    page.goto(f"{demo_server.url}/c/{cid}")
    wait_seq(probe, len(events))
    page.locator(QDRANT).wait_for()
    assert_right_runs(*summaries(probe))  # the client model's thread

    api = f"{demo_server.url}/v1/conversations/{cid}"
    path = httpx.get(f"{api}/path").json()["path"]
    # Each command acts on the follow-up exchange, so the research stays on the active path.
    follow_up = [m for m in path if m["role"] == "user"][-1]["id"]
    last_reply = path[-1]["id"]
    if command == "edit":
        response = httpx.post(f"{api}/messages/{follow_up}/edit", json={"content": "And LanceDB?"})
    elif command == "regenerate":
        response = httpx.post(f"{api}/messages/{last_reply}/regenerate", json={})
    else:
        httpx.post(f"{api}/messages/{follow_up}/edit", json={"content": "And LanceDB?"})
        response = httpx.post(f"{api}/messages/{follow_up}/select", json={})  # back to the original
    assert response.status_code == 200, response.text
    # The thread is now the server's active path (rendered from /thread).
    page.wait_for_function("() => window.convograph.steering.path.length > 0")
    page.wait_for_function(
        "() => document.querySelector('.thread').dataset.source === 'server'", timeout=10_000
    )
    page.locator(QDRANT).wait_for()
    assert_right_runs(*summaries(probe))
    probe.shot(f"summaries-after-{command}")
