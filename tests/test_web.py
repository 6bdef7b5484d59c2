"""`convograph.web`: the shipped assets, how the server serves them, and the client model.

The client model (``static/js/model.js``) is run under Node when it is installed, fed the bundled
conversations, and compared with the server's `project_thread`; the browser tests in
``tests/e2e`` cover the same model in Chromium.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from convograph.demo.conversations import DEMO_CONVERSATIONS
from convograph.events import parse_event
from convograph.graph import create_graph, reduce_events
from convograph.hypergraph import create_conversation, reduce_conversation_events
from convograph.jsonable import to_jsonable
from convograph.projections import ConversationProjector, project_thread
from convograph.server import create_app
from convograph.server.config import ServerConfig
from convograph.web import STATIC_DIR, index_html

JS = STATIC_DIR / "js"


def test_static_dir_ships_the_assets() -> None:
    assert (STATIC_DIR / "index.html").is_file()
    assert (STATIC_DIR / "app.css").is_file()
    assert {p.name for p in JS.glob("*.js")} >= {"app.js", "model.js", "stream.js", "thread.js", "dag.js"}
    assert index_html() == (STATIC_DIR / "index.html").read_bytes()


def test_index_references_only_shipped_assets() -> None:
    html = index_html().decode()
    refs = re.findall(r'(?:src|href)="([^"#]+)"', html)
    assert refs, "index.html references no assets"
    for ref in refs:
        if ref.startswith("data:") or ref == "/" or ref == "/explore":
            continue
        assert ref.startswith("/static/"), ref
        assert (STATIC_DIR / ref.removeprefix("/static/")).is_file(), ref


def test_every_module_import_resolves_to_a_shipped_file() -> None:
    for module in JS.glob("*.js"):
        for target in re.findall(r'^import .* from "(\.[^"]+)";', module.read_text(), flags=re.M):
            assert (module.parent / target).resolve().is_file(), f"{module.name} imports missing {target}"


def test_the_shell_preloads_every_module() -> None:
    """The page asks for every module at once (rel=modulepreload) instead of discovering them
    import by import: each module but the entry point and the classic theme script is listed."""
    preloaded = set(
        re.findall(r'<link rel="modulepreload" href="/static/js/([^"]+)">', index_html().decode())
    )
    assert preloaded == {p.name for p in JS.glob("*.js")} - {"app.js", "theme.js"}


def test_assets_make_no_external_requests() -> None:
    """No CDN, no web fonts, no absolute URLs fetched: the viewer works offline."""
    for path in [*STATIC_DIR.rglob("*.js"), *STATIC_DIR.rglob("*.css"), STATIC_DIR / "index.html"]:
        text = path.read_text()
        urls = set(re.findall(r"https?://[^\s\"'`)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, f"{path.name} mentions {urls}"
        assert "@import" not in text
        assert "@font-face" not in text


def test_csp_forbids_other_origins() -> None:
    html = index_html().decode()
    assert "default-src 'self'" in html
    assert "connect-src 'self'" in html


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient[Litestar]]:
    config = ServerConfig(data_dir=tmp_path, database_url="memory://", intelligence=False)
    with TestClient(create_app(config)) as test_client:
        yield test_client


@pytest.mark.parametrize("path", ["/", "/c/demo-research", "/c/demo-research/graph", "/explore"])
def test_server_answers_page_routes_with_the_shell(client: TestClient[Litestar], path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.content == index_html()


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/static/js/app.js", "javascript"),
        ("/static/app.css", "text/css"),
        ("/static/js/model.js", "javascript"),
    ],
)
def test_server_serves_assets(client: TestClient[Litestar], path: str, kind: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert kind in response.headers["content-type"]
    assert response.content == (STATIC_DIR / path.removeprefix("/static/")).read_bytes()


# --- the client model under Node --------------------------------------------------------------------

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed (the e2e tests cover the model)")

RUNNER = """
import { ConversationModel } from %(model)s;
const input = JSON.parse(await new Promise((resolve) => {
  let data = ""; process.stdin.on("data", (c) => (data += c)); process.stdin.on("end", () => resolve(data));
}));
const out = {};
for (const [name, batches] of Object.entries(input)) {
  const model = new ConversationModel();
  const applied = [];
  for (const batch of batches) for (const event of batch) applied.push(model.apply(event));
  out[name] = { thread: model.toJSON(), lastSeq: model.lastSeq, eventCount: model.eventCount, applied,
                usage: model.usage, pending: model.pendingRelays().map((r) => r.id) };
}
process.stdout.write(JSON.stringify(out));
"""


def run_model(inputs: dict[str, list[list[dict[str, Any]]]]) -> dict[str, Any]:
    assert NODE is not None
    script = RUNNER % {"model": json.dumps((JS / "model.js").as_uri())}
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        input=json.dumps(inputs),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def with_seq(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**event, "seq": n} for n, event in enumerate(events, start=1)]


def shape(views: list[dict[str, Any]]) -> list[Any]:
    out = []
    for v in views:
        content = v["content"]
        detail = (
            content.get("text") or content.get("message") or content.get("name") or content.get("content")
        )
        out.append(
            (
                v["id"],
                v["runId"],
                v["role"],
                content["kind"],
                v["status"],
                detail,
                [shape(b) for b in v["branches"]],
            )
        )
    return out


def demo_events() -> dict[str, list[dict[str, Any]]]:
    out = {}
    for factory in DEMO_CONVERSATIONS:
        script = factory()
        out[script.conversation_id] = with_seq(script.events(decisions={"relay-write-report": True}))
    return out


@needs_node
def test_client_model_matches_project_thread() -> None:
    """Without REPL events (a documented viewer extension) the client places every view exactly
    as the server's thread projection does."""
    conversations = {
        cid: [e for e in events if not e["type"].startswith("repl_")]
        for cid, events in demo_events().items()
        if cid != "demo-rlm"
    }
    result = run_model({cid: [events] for cid, events in conversations.items()})
    for cid, events in conversations.items():
        expected = to_jsonable(project_thread(reduce_events(create_graph(), events)))
        assert shape(result[cid]["thread"]) == shape(expected), cid


@needs_node
def test_client_model_ignores_redelivered_and_overlapping_events() -> None:
    """A resumed stream may overlap what the client already has: seq and eventId keep it exact."""
    events = demo_events()["demo-research"]
    inputs: dict[str, list[list[dict[str, Any]]]] = {"once": [events]}
    for cut in (1, 17, len(events) // 2, len(events) - 3):
        overlap = max(0, cut - 9)
        inputs[f"resume-{cut}"] = [events[:cut], events[overlap:]]
    no_seq = [{k: v for k, v in e.items() if k != "seq"} for e in events]
    inputs["redelivered-by-event-id"] = [no_seq, no_seq[: len(no_seq) // 2]]
    result = run_model(inputs)
    baseline = result["once"]
    assert baseline["eventCount"] == len(events)
    for name, got in result.items():
        assert got["thread"] == baseline["thread"], name
        assert got["usage"] == baseline["usage"], name
        assert got["eventCount"] == len(events), name


@needs_node
def test_client_model_tracks_relays_usage_and_repl() -> None:
    research = [e for e in demo_events()["demo-research"] if e["type"] != "relay_resolved"]
    pending_only = research[: next(i for i, e in enumerate(research) if e["type"] == "relay") + 1]
    rlm = demo_events()["demo-rlm"]
    result = run_model({"pending": [pending_only], "rlm": [rlm]})
    assert result["pending"]["pending"] == ["relay-write-report"]
    expected_input = sum(e["inputTokens"] for e in pending_only if e["type"] == "usage")
    assert result["pending"]["usage"]["input"] == expected_input
    rlm_thread = result["rlm"]["thread"]
    repls = [v for v in rlm_thread if v["content"]["kind"] == "repl"]
    assert [v["id"] for v in repls] == ["repl-1", "repl-2", "repl-3", "repl-4", "repl-5"]
    # The child RLM run nests under the REPL turn that spawned it.
    child = repls[2]["branches"]
    assert child
    assert child[0][0]["runId"] == "run-rlm-child-1"


@needs_node
def test_client_model_merges_and_extends_text_exactly() -> None:
    """Deltas append to their view; a delta to an earlier merged stream keeps arrival order per
    stream (the server's rule: a merged view's text is its members' texts in order)."""
    run = {"runId": "p", "parentId": "a"}
    deltas = [{"type": "text", **run, "id": "t1", "content": f"{n} "} for n in range(2000)]
    events = [
        {"type": "harness_start", "runId": "a"},
        *deltas,
        {"type": "text", **run, "id": "t2", "content": "second "},
        {"type": "text", **run, "id": "t1", "content": "late-first "},
        {"type": "text", **run, "id": "t2", "content": "more"},
        {"type": "tool_call", "runId": "a", "id": "a/x", "name": "exec", "input": {}},
        *[
            {"type": "tool_progress", "runId": "a", "id": f"pg{n}", "toolCallId": "a/x", "name": "exec",
             "content": {"channel": "stdout", "data": f"line {n}\n"}}
            for n in range(300)
        ],
    ]  # fmt: skip
    result = run_model({"t": [with_seq(events)]})
    thread = result["t"]["thread"]
    texts = [v for v in thread if v["content"]["kind"] == "text"]
    assert len(texts) == 1
    first = "".join(f"{n} " for n in range(2000)) + "late-first "
    assert texts[0]["content"]["text"] == first + "second more"
    expected = to_jsonable(project_thread(reduce_events(create_graph(), with_seq(events))))
    assert shape(thread) == shape(expected)


@needs_node
def test_client_model_keeps_signed_and_redacted_thinking_blocks_apart() -> None:
    """As the server: consecutive thinking blocks of one response stay separate views when signed
    or redacted; unsigned reasoning still merges."""
    run = {"runId": "a1"}
    events = [
        {"type": "user", "runId": "u1", "content": "hi"},
        {"type": "reasoning", **run, "parentId": "u1:user", "id": "r1", "content": "first"},
        {"type": "reasoning", **run, "id": "r1", "content": "", "signature": "sig-1"},
        {"type": "reasoning", **run, "id": "r2", "content": "", "redactedData": "EmwKAhgB"},
        {"type": "reasoning", **run, "id": "r3", "content": "second", "signature": "sig-3"},
        {"type": "reasoning", **run, "id": "r4", "content": "loose "},
        {"type": "reasoning", **run, "id": "r5", "content": "notes"},
        {"type": "text", **run, "id": "t1", "content": "done"},
    ]
    result = run_model({"t": [with_seq(events)]})
    expected = to_jsonable(project_thread(reduce_events(create_graph(), with_seq(events))))
    assert shape(result["t"]["thread"]) == shape(expected)
    assert [v["id"] for v in expected] == ["u1:user", "r1", "r2", "r3", "r4", "t1"]


SERVER_MODE_RUNNER = """
import { ConversationModel, Level } from %(model)s;
import { modelFromThread } from %(steer)s;
const input = JSON.parse(await new Promise((resolve) => {
  let data = ""; process.stdin.on("data", (c) => (data += c)); process.stdin.on("end", () => resolve(data));
}));
const live = new ConversationModel();
for (const event of input.events) live.apply(event);
const built = modelFromThread(input.server, live, Level);
const views = (level) => level.items.map((v) => ({ id: v.id, kind: v.kind, progress: v.progress ?? null,
  stdout: v.stdout ?? null, stderr: v.stderr ?? null, result: v.result ?? null,
  branchRuns: v.branches.map((b) => b.runId), branches: v.branches.map(views) }));
process.stdout.write(JSON.stringify({ server: views(built.top), client: views(live.top) }));
"""


def server_mode_views(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The views the viewer renders after a command (``server``): `modelFromThread` of what
    ``GET /thread?repl=1`` answers (the hypergraph's active path with REPL cells), with the
    client model fed ``events``; and the client model's own views (``client``)."""
    assert NODE is not None
    conversation = reduce_conversation_events(create_conversation(), [parse_event(e) for e in events])
    server = ConversationProjector(conversation, repl_cells=True).to_jsonable()
    script = SERVER_MODE_RUNNER % {
        "model": json.dumps((JS / "model.js").as_uri()),
        "steer": json.dumps((JS / "steer.js").as_uri()),
    }
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        input=json.dumps({"events": events, "server": server}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, list[dict[str, Any]]] = json.loads(done.stdout)
    return result


def walk(views: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for v in views:
        yield v
        for branch in v["branches"]:
            yield from walk(branch)


@needs_node
def test_server_mode_thread_shows_progress_of_every_tool() -> None:
    """After a command the viewer renders the server's thread, which folds progress only for
    registered tools (``exec``): the progress of other tools comes from the client model, as it
    does before any command."""
    run = {"runId": "a", "parentId": "u:user"}
    events: list[dict[str, Any]] = [
        {"type": "user", "runId": "u", "content": "find refunds"},
        {"type": "tool_call", **run, "id": "s1", "name": "search", "input": {"q": "refunds"}},
        {"type": "tool_progress", **run, "id": "p1", "toolCallId": "s1", "name": "search",
         "content": {"channel": "stdout", "data": "3 hits\n"}},
        {"type": "tool_progress", **run, "id": "p2", "toolCallId": "s1", "name": "search", "content": {"found": 3}},
        {"type": "tool_result", **run, "id": "s1", "name": "search", "output": "ok"},
        {"type": "tool_call", **run, "id": "x1", "name": "exec", "input": {"cmd": "wc -l"}},
        {"type": "tool_progress", **run, "id": "p3", "toolCallId": "x1", "name": "exec",
         "content": {"channel": "stderr", "data": "warn\n"}},
        {"type": "tool_call", **run, "id": "q1", "name": "search", "input": {"q": "none"}},
    ]  # fmt: skip
    views = {v["id"]: v for v in walk(server_mode_views(with_seq(events))["server"])}
    assert views["s1"]["progress"] == {
        "count": 2, "stdout": "3 hits\n", "stderr": "", "metrics": None, "other": [{"found": 3}]
    }  # fmt: skip
    assert views["x1"]["progress"]["stderr"] == "warn\n"
    assert views["q1"]["progress"] is None


def preorder(views: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(v["id"], v["kind"]) for v in walk(views)]


@needs_node
def test_server_mode_thread_shows_repl_cells_where_the_client_model_does() -> None:
    """The server's thread with REPL cells, rendered after a command, has the client model's
    views in the client model's places: the cells, the text between them, the child run nested
    under the turn that spawned it, and each cell's streamed output and result."""
    result = server_mode_views(demo_events()["demo-rlm"])
    server, client = result["server"], result["client"]
    assert [v for v in preorder(server) if v[1] == "repl"] == [(f"repl-{n}", "repl") for n in range(1, 6)]
    assert preorder(server) == preorder(client)
    client_cells = {v["id"]: v for v in walk(client) if v["kind"] == "repl"}
    for cell in (v for v in walk(server) if v["kind"] == "repl"):
        mine = client_cells[cell["id"]]
        assert (cell["stdout"], cell["stderr"], cell["result"]) == (
            mine["stdout"],
            mine["stderr"],
            mine["result"],
        )


@needs_node
@pytest.mark.parametrize("cid", ["demo-research", "demo-retry-policies", "demo-rlm"])
def test_server_mode_branches_belong_to_the_subagent_run(cid: str) -> None:
    """A subagent's branch in the server's thread starts with a turn of one of its model calls (a
    run below the subagent's): the branch still belongs to the subagent's run, as in the client
    model, so its summary names that agent and sums its tokens (issue 28 item 6)."""
    result = server_mode_views(demo_events()[cid])
    client = {v["id"]: v["branchRuns"] for v in walk(result["client"]) if v["branchRuns"]}
    server = {v["id"]: v["branchRuns"] for v in walk(result["server"]) if v["branchRuns"]}
    assert server
    assert server == {view_id: client[view_id] for view_id in server}


MARKDOWN_RUNNER = """
import { parseMarkdown, parseInline } from %(markdown)s;
import { scanner, tokens } from %(highlight)s;
const input = JSON.parse(await new Promise((resolve) => {
  let data = ""; process.stdin.on("data", (c) => (data += c)); process.stdin.on("end", () => resolve(data));
}));
const out = {
  blocks: input.markdown.map((text) => parseMarkdown(text)),
  inline: input.inline.map((text) => parseInline(text)),
  tokens: input.code.map(([lang, code]) => tokens(code, scanner(lang))),
};
process.stdout.write(JSON.stringify(out));
"""


def run_markdown(markdown: list[str], inline: list[str], code: list[tuple[str, str]]) -> dict[str, Any]:
    assert NODE is not None
    script = MARKDOWN_RUNNER % {
        "markdown": json.dumps((JS / "markdown.js").as_uri()),
        "highlight": json.dumps((JS / "highlight.js").as_uri()),
    }
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        input=json.dumps({"markdown": markdown, "inline": inline, "code": code}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@needs_node
def test_markdown_blocks_and_inline() -> None:
    out = run_markdown(
        markdown=[
            "```js\nconst a = 1;\n```\nafter",
            "```\nunclosed (still streaming)",
            "- a\n- b\n  - c\nlazy\n\n1) one",
            "| x | y |\n|---|:-:|\n| 1 | a \\| b |",
            "# Title #\n> q\nlazy\n\n---",
        ],
        inline=[
            "**b** *e* _e_ snake_case_name ~~d~~ `c`",
            "[t](https://a.io/x_(y) 'title') <https://b.io> see https://c.io/p. end",
            "<script>x</script> \\*not em\\* ![alt](https://i.io/p.png)",
            "``a ` b`` and a lone ` tick",
        ],
        code=[],
    )
    code, unclosed, lists, table, misc = out["blocks"]
    assert code == [{"type": "code", "lang": "js", "text": "const a = 1;"}, {"type": "p", "text": "after"}]
    assert unclosed == [{"type": "code", "lang": "", "text": "unclosed (still streaming)"}]
    bullets, ordered = lists
    assert [item[0]["text"] for item in bullets["items"]] == ["a", "b"]
    # A lazy continuation line continues the deepest open paragraph (CommonMark).
    assert bullets["items"][1][1]["items"] == [[{"type": "p", "text": "c\nlazy"}]]
    assert (ordered["ordered"], ordered["start"]) == (True, 1)
    assert table == [
        {"type": "table", "head": ["x", "y"], "align": [None, "center"], "rows": [["1", "a | b"]]}
    ]
    assert [b["type"] for b in misc] == ["h", "quote", "hr"]
    assert misc[0]["text"] == "Title"
    assert misc[1]["blocks"] == [{"type": "p", "text": "q\nlazy"}]
    emphasis, links, unsafe, ticks = out["inline"]
    assert [n["t"] for n in emphasis if n["t"] != "text"] == ["strong", "em", "em", "del", "code"]
    assert {"t": "text", "text": " snake_case_name "} in emphasis
    assert [(n["t"], n.get("href")) for n in links if n["t"] == "link"] == [
        ("link", "https://a.io/x_(y)"),
        ("link", "https://b.io"),
        ("link", "https://c.io/p"),
    ]
    assert unsafe[0] == {"t": "text", "text": "<script>x</script> *not em* "}  # text, never markup
    assert unsafe[1] == {"t": "image", "alt": "alt", "href": "https://i.io/p.png"}
    assert ticks == [{"t": "code", "text": "a ` b"}, {"t": "text", "text": " and a lone ` tick"}]


@needs_node
def test_highlighter_tokens_cover_the_code_exactly() -> None:
    samples = [
        ("python", 'def f(x):  # c\n    return "s" + 1 if x else None\n"""doc\nstring"""'),
        ("ts", "const a = `t ${b}`; // c\nif (a === null) { return 0x1f; }"),
        ("json", '{"a": [1, -2.5e3, true, null], "b": "s\\"q"}'),
        ("bash", 'echo "$HOME" # note\nexport X=1 && ls ${DIR}/a#b'),
        ("sql", "SELECT a FROM t WHERE b = 'x' -- c"),
        ("diff", "@@ -1 +1 @@\n-old\n+new"),
        ("yaml", "key: value # c\nlist:\n  - name: 'x'"),
        ("rust", 'fn main() { let s = "x"; }'),
        ("go", "func main() { var x = nil }"),
        ("html", '<a href="x">t</a><!-- c -->'),
    ]
    out = run_markdown([], [], samples)
    for (lang, code), toks in zip(samples, out["tokens"], strict=True):
        assert "".join(text for _, text in toks) == code, lang
    python = out["tokens"][0]
    assert ["keyword", "def"] in python
    assert ["comment", "# c"] in python
    assert ["string", '"s"'] in python
    assert ["literal", "None"] in python
    assert ["string", '"""doc\nstring"""'] in python
    assert ["comment", "# note"] in out["tokens"][3]
    assert not any(cls == "comment" and "b" in text for cls, text in out["tokens"][3])  # a#b is no comment
    assert ["keyword", "SELECT"] in out["tokens"][4]
    assert ["inserted", "+new"] in out["tokens"][5]


TIME_RUNNER = """
import { ConversationModel } from %(model)s;
import { eventTime, formatDuration } from %(time)s;
const input = JSON.parse(await new Promise((resolve) => {
  let data = ""; process.stdin.on("data", (c) => (data += c)); process.stdin.on("end", () => resolve(data));
}));
const model = new ConversationModel();
for (const event of input.events) model.apply(event);
const views = {};
const walk = (level) => { for (const v of level.items) { views[v.id] = { start: v.start, end: v.end, calls: (v.calls ?? []).length }; v.branches.forEach(walk); } };
walk(model.top);
process.stdout.write(JSON.stringify({
  calls: model.modelCalls, views, first: model.firstTime, last: model.lastTime,
  runs: Object.fromEntries([...model.runs.values()].map((r) => [r.id, [r.start, r.end]])),
  times: input.stamps.map(eventTime), durations: input.durations.map(formatDuration),
}));
"""


@needs_node
def test_client_model_times_turns_tool_calls_and_model_calls() -> None:
    def event(kind: str, seconds: float, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "timestamp": 1_700_000_000 + seconds, **fields}  # Unix seconds

    events = with_seq(
        [
            event("user", 0, runId="u", content="go"),
            event("text", 1, runId="m1", parentId="u:user", id="t", content="a"),
            event("text", 3, runId="m1", id="t", content="b"),
            event("usage", 4, runId="m1", inputTokens=10, outputTokens=2, cacheReadTokens=5),
            event("tool_call", 5, runId="m1", id="c", name="x"),
            event("usage", 5.5, runId="m1", inputTokens=3, outputTokens=1),  # starts at the tool call
            event("tool_result", 7.25, runId="m1", id="c", name="x", output="ok"),
            {"type": "text", "runId": "m1", "id": "late", "content": "no time"},
        ]
    )
    assert NODE is not None
    script = TIME_RUNNER % {
        "model": json.dumps((JS / "model.js").as_uri()),
        "time": json.dumps((JS / "time.js").as_uri()),
    }
    stamps = ["2026-03-01T10:00:00.250Z", 1_700_000_000, 1_700_000_000_500, "1700000000", "soon", None]
    durations = [420, 2400, 42_000, 65_000, 7_380_000, -1]
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        input=json.dumps({"events": events, "stamps": stamps, "durations": durations}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    base = 1_700_000_000_000
    assert out["views"]["t"] == {"start": base + 1000, "end": base + 3000, "calls": 1}
    # Each call shows on the run's newest turn when its usage arrives: the second on the tool call.
    assert out["views"]["c"] == {"start": base + 5000, "end": base + 7250, "calls": 1}
    assert out["views"]["late"]["start"] is None  # no timestamp: no time, none guessed
    first, second = out["calls"]
    assert (first["start"], first["end"], first["cacheRead"]) == (base + 1000, base + 4000, 5)
    assert (second["start"], second["end"], second["index"]) == (base + 5000, base + 5500, 1)
    assert (out["first"], out["last"]) == (base, base + 7250)
    assert out["runs"]["m1"] == [base + 1000, base + 7250]
    assert out["times"] == [1_772_359_200_250, base, base + 500, base, None, None]
    assert out["durations"] == ["420 ms", "2.4 s", "42 s", "1 min 05 s", "2 h 03 min", ""]


SEARCH_RUNNER = """
import { ConversationModel } from %(model)s;
import { searchThread } from %(search)s;
const input = JSON.parse(await new Promise((resolve) => {
  let data = ""; process.stdin.on("data", (c) => (data += c)); process.stdin.on("end", () => resolve(data));
}));
const model = new ConversationModel();
for (const event of input.events) model.apply(event);
process.stdout.write(JSON.stringify(input.queries.map((q) => searchThread(model, q).map((r) => r.view.id))));
"""


@needs_node
def test_search_within_a_conversation_finds_every_depth_and_filters() -> None:
    assert NODE is not None
    script = SEARCH_RUNNER % {
        "model": json.dumps((JS / "model.js").as_uri()),
        "search": json.dumps((JS / "search.js").as_uri()),
    }
    queries = [
        {"text": "DELETED_THRESHOLD"},
        {"kind": "errors"},
        {"tool": "exec"},
        {"text": "qdrant", "kind": "messages"},
        {"status": "running"},
        {"text": "vacuum", "kind": "reasoning"},
    ]
    events = demo_events()["demo-research"]
    events = events[: next(i for i, e in enumerate(events) if e["type"] == "relay") + 1]  # the relay pending
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        input=json.dumps({"events": events, "queries": queries}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    threshold, errors, execs, qdrant, running, reasoning = json.loads(done.stdout)
    # Reading order: the researcher's tool output, the code reader's command (two levels down), its
    # answer, then the lead's final answer.
    assert threshold == [
        "run-researcher-qdrant/call-docs",
        "run-code-reader/call-exec",
        "c-text-2",
        "lead-text-2",
    ]
    assert errors == ["run-milvus-llm-0:error"]
    assert execs == ["run-code-reader/call-exec"]
    assert qdrant[0] == "run-user-1:user"
    assert all(view_id.endswith(":user") or "text" in view_id for view_id in qdrant)
    # The lead is still running (it waits on the relay): its turns; the subagents' are done.
    assert "relay-write-report" in running
    assert "lead-text-1" in running
    assert not any(
        view_id.startswith(("q-", "c-", "m-", "run-researcher", "run-code")) for view_id in running
    )
    assert reasoning == ["lead-think-2"]  # "vacuum" in the lead's second thinking block
