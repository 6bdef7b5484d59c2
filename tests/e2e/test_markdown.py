"""Markdown and code highlighting in model text, safely (no HTML from model text ever becomes
markup), and copy buttons on messages, code blocks, tool inputs and outputs (issue 28 item 9)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import PageProbe
from tests.e2e.test_viewer import post
from tests.support.server import ServerProcess

pytestmark = pytest.mark.e2e

ANSWER = """### Findings

Qdrant is **faster** here, *mostly*; see `vacuum_optimizer.rs` and the [docs](https://qdrant.tech/documentation/).
A second line of the same paragraph.

1. Deletes are soft
2. Compaction:
   - merges segments
   - purges ~~everything~~ deleted points

| engine | p99 (ms) |
|:-------|---------:|
| Qdrant | 12 |
| Milvus | 19 |

> Quoted caveat.

```python
def ratio(deleted: int, total: int) -> float:  # vacuum threshold
    return deleted / total if total else 0.0
```

Unsafe: <img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> [click](javascript:window.__pwned=3) ![diagram](https://example.com/d.png)"""

INPUT = {"command": "rg -n deleted_threshold", "env": {"LONG": "x" * 25_000}}


def conversation() -> list[dict[str, Any]]:
    run = {"runId": "a1", "parentId": "u1:user"}
    return [
        {"type": "user", "runId": "u1", "content": "Compare <b>Qdrant</b> and Milvus."},
        {"type": "text", **run, "id": "t1", "content": ANSWER[:200]},
        {"type": "text", **run, "id": "t1", "content": ANSWER[200:]},
        {"type": "tool_call", **run, "id": "c1", "name": "exec", "input": INPUT},
        {"type": "tool_result", **run, "id": "c1", "name": "exec", "output": {"exitCode": 0, "stdout": "ok"}},
    ]


def test_model_text_renders_as_safe_markdown(demo_server: ServerProcess, probe: PageProbe) -> None:
    post(demo_server.url, "e2e-markdown", conversation())
    page = probe.page
    page.goto(f"{demo_server.url}/c/e2e-markdown")
    body = page.locator('article[data-id="t1"] .turn__text')
    body.locator("table").wait_for()
    assert body.locator("h5.md-h").inner_text() == "Findings"  # headings rank below the page's
    assert body.locator("strong").first.inner_text() == "faster"
    assert body.locator("em").first.inner_text() == "mostly"
    assert body.locator("code.md-code-inline").first.inner_text() == "vacuum_optimizer.rs"
    docs = body.locator("a", has_text="docs")
    assert docs.get_attribute("href") == "https://qdrant.tech/documentation/"
    assert docs.get_attribute("target") == "_blank"
    assert "noopener" in (docs.get_attribute("rel") or "")
    assert body.locator("p").first.locator("br").count() == 1  # a single newline is a line break
    assert body.locator("ol > li").count() == 2
    assert body.locator("ol > li ul > li").count() == 2
    assert body.locator("del").inner_text() == "everything"
    assert body.locator("th").all_inner_texts() == ["engine", "p99 (ms)"]
    assert body.locator("td").nth(1).evaluate("(el) => getComputedStyle(el).textAlign") == "right"
    assert body.locator("blockquote").inner_text() == "Quoted caveat."
    code = body.locator(".md-code")
    assert code.locator(".md-code__lang").inner_text() == "python"
    assert code.locator(".tok-keyword").all_inner_texts()[:2] == ["def", "return"]
    assert code.locator(".tok-comment").inner_text() == "# vacuum threshold"
    # Nothing in model text became markup: HTML shows as text, no script ran, no image loads, and
    # a javascript: link is no link.
    assert '<img src=x onerror="window.__pwned=1">' in body.inner_text()
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator(".thread img, .thread script").count() == 0
    assert body.locator("a[href^=javascript]").count() == 0
    assert body.locator(".md-link--unsafe").inner_text() == "click"
    image = body.locator("a", has_text="[image: diagram]")
    assert image.get_attribute("href") == "https://example.com/d.png"
    # User text stays as typed (not Markdown).
    assert (
        page.locator('article[data-id="u1:user"] .turn__text').inner_text()
        == "Compare <b>Qdrant</b> and Milvus."
    )
    probe.shot("markdown")
    page.set_viewport_size({"width": 375, "height": 812})
    probe.shot("375-markdown")


def test_copy_buttons_copy_the_whole_text(demo_server: ServerProcess, probe: PageProbe) -> None:
    post(demo_server.url, "e2e-copy", conversation())
    page = probe.page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=demo_server.url)
    page.goto(f"{demo_server.url}/c/e2e-copy")
    answer = page.locator('article[data-id="t1"]')
    answer.locator("table").wait_for()

    def copied(button: Any) -> str:
        button.click()
        page.wait_for_function("(b) => b.dataset.copied === 'true'", arg=button.element_handle())
        text: str = page.evaluate("() => navigator.clipboard.readText()")
        return text

    assert copied(answer.get_by_role("button", name="Copy message")) == ANSWER  # the Markdown source
    code = copied(answer.get_by_role("button", name="Copy code"))
    assert code.startswith("def ratio(deleted: int, total: int) -> float:")
    assert code.endswith("return deleted / total if total else 0.0")
    user = page.locator('article[data-id="u1:user"]')
    assert copied(user.get_by_role("button", name="Copy message")) == "Compare <b>Qdrant</b> and Milvus."
    tool = page.locator('article[data-id="c1"]')
    tool.locator("summary.tool__header").click()
    # The input shown is cut at 20,000 characters; the copy is whole.
    assert "truncated for display" in tool.locator(".payload").first.inner_text()
    assert json.loads(copied(tool.get_by_role("button", name="Copy input"))) == INPUT
    tool.locator("summary", has_text="Output").click()
    assert json.loads(copied(tool.get_by_role("button", name="Copy output"))) == {
        "exitCode": 0,
        "stdout": "ok",
    }
    probe.shot("copy-buttons")
