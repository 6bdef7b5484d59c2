"""Web viewer under load: a 10k-node conversation, then 1,000 events/s streamed into the open page.

Run: ``python -m benchmarks.web_viewer`` (about a minute; ``--quick`` for a smoke run). Starts a
real ``convograph serve`` on a free port with a temporary data dir, posts the conversation, opens
it in Debian's Chromium (Playwright, headless) and measures, in the page:

- load: navigation to every event applied and rendered (the SSE replay of the whole log);
- while streaming at the target rate: frame intervals (a requestAnimationFrame loop), long tasks
  (PerformanceObserver, tasks > 50 ms), main-thread time by category (CDP Performance metrics),
  and post-to-paint lag (each event carries its post time; the lag is taken in the first frame
  after the DOM update that includes it);
- with ``--expand``, every subagent branch is opened before streaming (the DOM then holds every
  view, not only the top level);
- the rate the server actually accepted (posting is paced in 20 ms slices from one thread);
- with ``--baseline-static DIR``, of another build of the viewer's assets (to compare builds).

Targets (issue 9: "a 10k-node conversation streaming 1,000 events/s stays responsive"), made
concrete: p95 frame interval <= 50 ms (>= 20 fps), no long task over 200 ms while streaming,
p99 post-to-paint lag <= 1 s, initial load of the 10k-node conversation <= 5 s.

``--first-paint`` (issue 28): a 20,000-event conversation (timestamped, as producers send them),
opened cold ``--repeat`` times: first paint (navigation to the first turn painted) and full load
(every event applied and rendered), with ``--baseline-static DIR`` side by side against another
build of the viewer's assets (served by the same server code; e.g. ``git archive`` of an older
commit's ``src/convograph/web/static``). Target: first paint <= 1 s.

``--search`` (issue 28): search within that conversation in the page (the find bar: cold, when
every view builds its search text, then warm; target < 100 ms), and search across 1,000
conversations (``GET /v1/search/conversations``: cold, folding every conversation's digest, then
warm; and the list page's own filtering of 1,000 rows; target < 200 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def conversation() -> Iterator[dict[str, Any]]:
    """An endless multi-agent conversation: each turn streams reasoning and text, fans out to two
    parallel tool calls, one of which runs a subagent with its own tool call."""
    yield {"type": "user", "runId": "u", "content": "Work through the backlog."}
    yield {"type": "harness_start", "runId": "lead", "parentId": "u:user", "agentId": "lead"}
    turn = 0
    while True:
        p = f"lead-llm-{turn}"
        for k in range(3):
            yield {
                "type": "reasoning",
                "runId": p,
                "parentId": "lead",
                "id": f"{p}-r",
                "content": f"step {k} ",
            }
        for k in range(5):
            yield {
                "type": "text",
                "runId": p,
                "parentId": "lead",
                "id": f"{p}-t",
                "content": f"chunk {k} of turn {turn}. ",
            }
        yield {
            "type": "usage",
            "runId": p,
            "parentId": "lead",
            "inputTokens": 1000 + turn,
            "outputTokens": 50,
        }
        search, spawn = f"lead/search-{turn}", f"lead/agent-{turn}"
        yield {
            "type": "tool_call",
            "runId": "lead",
            "id": search,
            "name": "search",
            "input": {"q": f"item {turn}"},
        }
        yield {
            "type": "tool_call",
            "runId": "lead",
            "id": spawn,
            "name": "agent",
            "input": {"task": f"item {turn}"},
        }
        sub = f"sub-{turn}"
        yield {"type": "harness_start", "runId": sub, "parentId": spawn, "agentId": f"worker-{turn}"}
        s = f"{sub}-llm"
        for k in range(4):
            yield {"type": "text", "runId": s, "parentId": sub, "id": f"{s}-t", "content": f"working {k}. "}
        yield {
            "type": "tool_call",
            "runId": sub,
            "id": f"{sub}/read",
            "name": "read_file",
            "input": {"path": f"f{turn}.py"},
        }
        yield {
            "type": "tool_result",
            "runId": sub,
            "id": f"{sub}/read",
            "name": "read_file",
            "output": {"bytes": 812},
        }
        yield {"type": "harness_end", "runId": sub, "parentId": spawn}
        yield {
            "type": "tool_result",
            "runId": "lead",
            "id": search,
            "name": "search",
            "output": {"hits": turn % 7},
        }
        yield {
            "type": "tool_result",
            "runId": "lead",
            "id": spawn,
            "name": "agent",
            "output": {"result": "done"},
        }
        turn += 1


NODE_TYPES = {
    "reasoning",
    "text",
    "tool_call",
    "tool_result",
    "user",
    "harness_start",
    "harness_end",
    "usage",
}


def take_nodes(events: Iterator[dict[str, Any]], nodes: int) -> list[dict[str, Any]]:
    """Events until the flat graph holds ``nodes`` nodes (deltas of one stream are one node)."""
    seen: set[str] = set()
    out = []
    for event in events:
        out.append(event)
        key = (
            event.get("id")
            or f"{event['runId']}:{event['type']}:{len(out) if event['type'] == 'usage' else ''}"
        )
        if event["type"] in NODE_TYPES:
            seen.add(f"{event['type']}:{key}")
        if len(seen) >= nodes:
            return out
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


SERVE_WITH_STATIC = """
import sys
from pathlib import Path
import convograph.web
convograph.web.STATIC_DIR = Path(sys.argv.pop(1))
from convograph.cli import main
main()
"""
"""``convograph serve`` with the viewer's assets from another directory (argv[1]): the same server
code, another build of the viewer (for side-by-side comparisons)."""


@contextlib.contextmanager
def server(data_dir: Path, static_dir: Path | None = None) -> Iterator[str]:
    port = free_port()
    launcher = ["-m", "convograph"] if static_dir is None else ["-c", SERVE_WITH_STATIC, str(static_dir)]
    process = subprocess.Popen(
        [
            sys.executable,
            *launcher,
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/openapi.json", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError("server did not start")
        yield url
    finally:
        process.terminate()
        process.wait(15)


PROBE = """
window.__bench = { frames: [], longTasks: [], lags: [], newest: 0, newestSeen: 0 };
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__bench.longTasks.push(e.duration);
}).observe({ entryTypes: ["longtask"] });
(function loop(t) {
  const b = window.__bench;
  b.frames.push(t);
  if (b.newest > b.newestSeen) { b.lags.push(Date.now() - b.newest); b.newestSeen = b.newest; }
  requestAnimationFrame(loop);
})(performance.now());
"""

HOOK = """
() => {
  const m = window.convograph.model;
  const apply = m.apply.bind(m);
  m.apply = (e) => {
    const r = apply(e);
    if (typeof e.postedAt === "number" && e.postedAt > window.__bench.applied) window.__bench.applied = e.postedAt;
    return r;
  };
  const b = window.__bench;
  b.frames = []; b.longTasks = []; b.lags = [];
  b.applyMs = 0; b.flushMs = 0; b.flushMax = 0; b.flushes = 0; b.applied = 0;
  const t = window.convograph.thread;
  const flush = t.flush.bind(t);
  t.flush = (...args) => {
    const s = performance.now();
    const more = flush(...args);
    if (!more) b.newest = b.applied; // everything applied so far is in the DOM now
    const d = performance.now() - s;
    b.flushMs += d; b.flushes += 1; if (d > b.flushMax) b.flushMax = d;
    return more;
  };
  const apply2 = m.apply;
  m.apply = (e) => { const s = performance.now(); const r = apply2(e); b.applyMs += performance.now() - s; return r; };
}
"""


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--first-paint", action="store_true", help="first paint of a 20k-event conversation")
    parser.add_argument(
        "--search", action="store_true", help="search within one and across 1,000 conversations"
    )
    parser.add_argument("--events", type=int, default=20_000, help="events (--first-paint, --search)")
    parser.add_argument("--conversations", type=int, default=1000, help="conversations (--search)")
    parser.add_argument("--repeat", type=int, default=5, help="cold opens / warm searches per measure")
    parser.add_argument(
        "--baseline-static", type=Path, default=None, help="another build of the viewer's assets"
    )
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--rate", type=int, default=1000, help="events per second while streaming")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--quick", action="store_true", help="1k nodes, 3 s of streaming")
    parser.add_argument("--reduced-motion", action="store_true", help="emulate prefers-reduced-motion")
    parser.add_argument("--expand", action="store_true", help="open every subagent branch before streaming")
    args = parser.parse_args()
    if args.first_paint or args.search:
        from benchmarks.web_viewer_daily import first_paint, search

        print(json.dumps(first_paint(args) if args.first_paint else search(args), indent=2))
        return
    if args.quick:
        args.nodes, args.seconds = 1000, 3.0
    from playwright.sync_api import sync_playwright

    events = conversation()
    initial = take_nodes(events, args.nodes)
    tmp = Path(tempfile.mkdtemp(prefix="convograph-bench-web-"))
    try:
        with server(tmp / "data", args.baseline_static) as url:
            cid = "bench"
            for start in range(0, len(initial), 5000):
                httpx.post(
                    f"{url}/v1/conversations/{cid}/events", json=initial[start : start + 5000], timeout=120
                )
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(
                    viewport={"width": 1280, "height": 900},
                    reduced_motion="reduce" if args.reduced_motion else "no-preference",
                )
                page.add_init_script(PROBE)
                started = time.perf_counter()
                page.goto(f"{url}/c/{cid}")
                page.wait_for_function(
                    f"() => window.convograph && window.convograph.model.lastSeq >= {len(initial)}",
                    timeout=120_000,
                )
                page.evaluate(
                    "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"
                )
                load_s = time.perf_counter() - started
                views = page.evaluate("() => window.convograph.model.viewCount")
                if args.expand:
                    page.evaluate("() => window.convograph.thread.expandAll()")
                    page.evaluate(
                        "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"
                    )
                dom_turns = page.evaluate("() => document.querySelectorAll('article.turn').length")
                page.evaluate(HOOK)
                cdp = page.context.new_cdp_session(page)
                cdp.send("Performance.enable")
                before = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}

                total = int(args.rate * args.seconds)
                posted = 0
                post_error: list[str] = []

                def pump() -> None:
                    nonlocal posted
                    with httpx.Client(base_url=url, timeout=30) as client:
                        t0 = time.perf_counter()
                        slice_s = 0.02
                        while posted < total:
                            due = min(
                                total, int((time.perf_counter() - t0) * args.rate) + int(args.rate * slice_s)
                            )
                            batch = [
                                {**next(events), "postedAt": int(time.time() * 1000)}
                                for _ in range(due - posted)
                            ]
                            if batch:
                                r = client.post(f"/v1/conversations/{cid}/events", json=batch)
                                if r.status_code != 200:
                                    post_error.append(r.text[:200])
                                    return
                                posted += len(batch)
                            time.sleep(slice_s)

                t0 = time.perf_counter()
                thread = threading.Thread(target=pump)
                thread.start()
                thread.join()
                post_s = time.perf_counter() - t0
                last = len(initial) + posted
                page.wait_for_function(f"() => window.convograph.model.lastSeq >= {last}", timeout=60_000)
                page.evaluate(
                    "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"
                )
                drain_s = time.perf_counter() - t0 - post_s
                bench = page.evaluate("() => window.__bench")
                after = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
                browser_ms = {
                    k: round((after[k] - before[k]) * 1000)
                    for k in ("TaskDuration", "ScriptDuration", "RecalcStyleDuration", "LayoutDuration")
                }
                final_views = page.evaluate("() => window.convograph.model.viewCount")
                browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    frames = bench["frames"]
    intervals = [b - a for a, b in pairwise(frames)]
    result = {
        "initial_events": len(initial),
        "initial_views": views,
        "dom_turns_at_start": dom_turns,
        "load_s": round(load_s, 2),
        "streamed_events": posted,
        "achieved_rate": round(posted / post_s),
        "drain_after_posting_s": round(drain_s, 2),
        "final_views": final_views,
        "frame_p50_ms": round(pct(intervals, 0.5), 1),
        "frame_p95_ms": round(pct(intervals, 0.95), 1),
        "frame_max_ms": round(max(intervals, default=float("nan")), 1),
        "long_tasks": len(bench["longTasks"]),
        "long_task_max_ms": round(max(bench["longTasks"], default=0), 1),
        "lag_p50_ms": pct(bench["lags"], 0.5),
        "lag_p99_ms": pct(bench["lags"], 0.99),
        "model_apply_ms_total": round(bench.get("applyMs", 0)),
        "render_flush_ms_total": round(bench.get("flushMs", 0)),
        "render_flush_max_ms": round(bench.get("flushMax", 0), 1),
        "render_flushes": bench.get("flushes", 0),
        "browser_main_thread_ms": browser_ms,
        "errors": post_error,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
