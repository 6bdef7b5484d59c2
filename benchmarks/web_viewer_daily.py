"""Issue 28's viewer benchmarks, run through ``python -m benchmarks.web_viewer --first-paint`` and
``--search`` (see that module's docstring): the first paint of a 20,000-event conversation, side by
side with another build of the viewer's assets, and search within it and across 1,000
conversations."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from benchmarks.web_viewer import ARGS, CHROMIUM, conversation, server


def timestamped(
    events: Iterator[dict[str, Any]], start_ms: int, step_ms: int = 20
) -> Iterator[dict[str, Any]]:
    """``events`` stamped as a producer would: milliseconds since the epoch, ``step_ms`` apart."""
    for n, event in enumerate(events):
        yield {**event, "timestamp": start_ms + n * step_ms}


FIRST_PAINT = """
window.__paint = { firstTurn: null };
new MutationObserver((records, observer) => {
  if (document.querySelector("article.turn")) {
    observer.disconnect();
    requestAnimationFrame(() => requestAnimationFrame(() => { window.__paint.firstTurn = performance.now(); }));
  }
}).observe(document, { childList: true, subtree: true });
"""
"""Records when the first turn was painted (two frames after it entered the DOM), in ms since the
navigation started (``performance.now()``'s origin)."""


def open_cold(browser: Any, url: str, last_seq: int) -> tuple[float, float]:
    """Open ``url`` in a fresh page: (first paint s, full load s), both from the navigation start.
    Full load: every event applied and every top-level turn rendered (subagents are built when
    opened)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.add_init_script(FIRST_PAINT)
        page.goto(url)
        page.wait_for_function(  # every event applied, and every top-level turn rendered
            f"() => window.convograph && window.convograph.model.lastSeq >= {last_seq}"
            " && window.convograph.thread.root._rendered === window.convograph.model.top.items.length",
            timeout=120_000,
        )
        loaded: float = page.evaluate(
            "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
        )
        page.wait_for_function("() => window.__paint.firstTurn !== null")
        first: float = page.evaluate("() => window.__paint.firstTurn")
        return first / 1000, loaded / 1000
    finally:
        page.close()


def first_paint(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    events = list(
        itertools.islice(timestamped(conversation(), int(time.time() * 1000) - 3_600_000), args.events)
    )
    builds = (
        {"now": None} if args.baseline_static is None else {"baseline": args.baseline_static, "now": None}
    )
    results: dict[str, Any] = {"events": len(events), "repeat": args.repeat}
    tmp = Path(tempfile.mkdtemp(prefix="convograph-bench-web-"))
    try:
        with contextlib.ExitStack() as stack:
            urls = {}
            for name, static in builds.items():
                url = stack.enter_context(server(tmp / name, static))
                for start in range(0, len(events), 5000):
                    httpx.post(
                        f"{url}/v1/conversations/bench/events", json=events[start : start + 5000], timeout=120
                    )
                urls[name] = url
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                samples: dict[str, list[tuple[float, float]]] = {name: [] for name in builds}
                for url in urls.values():  # warm-up, not counted: the browser's first page is slower
                    open_cold(browser, f"{url}/c/bench", len(events))
                for _ in range(args.repeat):  # interleaved, so both builds see the same load
                    for name, url in urls.items():
                        samples[name].append(open_cold(browser, f"{url}/c/bench", len(events)))
                views = None
                page = browser.new_page()
                page.goto(f"{urls['now']}/c/bench")
                page.wait_for_function(
                    f"() => window.convograph && window.convograph.model.lastSeq >= {len(events)}"
                )
                views = page.evaluate("() => window.convograph.model.viewCount")
                browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["views"] = views
    for name, runs in samples.items():
        firsts, loads = sorted(r[0] for r in runs), sorted(r[1] for r in runs)
        results[name] = {
            "first_paint_s": {
                "median": round(firsts[len(firsts) // 2], 3),
                "min": round(firsts[0], 3),
                "max": round(firsts[-1], 3),
            },
            "full_load_s": {
                "median": round(loads[len(loads) // 2], 3),
                "min": round(loads[0], 3),
                "max": round(loads[-1], 3),
            },
        }
    return results


SEARCH_IN_PAGE = """
([text, kind, tool]) => {
  const find = window.convograph.find;
  find.input.value = text; find.kind.value = kind; find.refreshTools(); find.tool.value = tool;
  find.run();
  return { ms: find.lastMs, matches: find.results.length };
}
"""

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "vector",
    "index",
    "shard",
    "replica",
]


def small_conversation(n: int) -> list[dict[str, Any]]:
    """One of the 1,000 conversations of the cross-conversation search: a question, a model call,
    a tool call and an answer (about 30 events, 2-3 KB of text)."""
    word = WORDS[n % len(WORDS)]
    run = {"runId": f"a{n}", "parentId": "u:user"}
    events: list[dict[str, Any]] = [
        {
            "type": "user",
            "runId": "u",
            "content": f"Question {n}: how do {word} shards rebalance under load?",
        },
        {"type": "harness_start", **run, "agentId": "assistant"},
    ]
    events += [
        {"type": "text", **run, "id": "t1", "content": f"Looking into {word} rebalancing, part {k}. "}
        for k in range(12)
    ]
    events.append(
        {"type": "tool_call", **run, "id": "c1", "name": f"tool_{n % 7}", "input": {"query": f"{word} {n}"}}
    )
    events.append(
        {
            "type": "tool_result",
            **run,
            "id": "c1",
            "name": f"tool_{n % 7}",
            "output": {"hits": n % 13, "note": f"ticket-{n:05d}"},
        }
    )
    events += [
        {"type": "text", **run, "id": "t2", "content": f"Answer chunk {k} for {word}. "} for k in range(12)
    ]
    if n % 10 == 0:
        events.append({"type": "error", "runId": f"a{n}", "message": f"rate limited ({n})"})
    events.append({"type": "harness_end", **run})
    return events


def search(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    events = list(
        itertools.islice(timestamped(conversation(), int(time.time() * 1000) - 3_600_000), args.events)
    )
    out: dict[str, Any] = {"events": len(events)}
    tmp = Path(tempfile.mkdtemp(prefix="convograph-bench-web-"))
    try:
        with server(tmp / "data") as url:
            for start in range(0, len(events), 5000):
                httpx.post(
                    f"{url}/v1/conversations/bench/events", json=events[start : start + 5000], timeout=120
                )
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(f"{url}/c/bench")
                page.wait_for_function(
                    f"() => window.convograph && window.convograph.model.lastSeq >= {len(events)}"
                )
                out["views"] = page.evaluate("() => window.convograph.model.viewCount")
                queries = [
                    ("chunk 3 of turn 500", "all", ""),
                    ("working", "all", ""),
                    ("", "tools", "read_file"),
                    ("zzz-nowhere", "all", ""),
                ]
                within = {}
                for text, kind, tool in queries:
                    label = text or f"{kind}:{tool}"
                    cold = page.evaluate(SEARCH_IN_PAGE, [text, kind, tool]) if not within else None
                    warm = [page.evaluate(SEARCH_IN_PAGE, [text, kind, tool]) for _ in range(args.repeat)]
                    ms = sorted(w["ms"] for w in warm)
                    within[label] = {
                        "matches": warm[0]["matches"],
                        "cold_ms": round(cold["ms"], 1) if cold else None,
                        "warm_ms_median": round(ms[len(ms) // 2], 1),
                        "warm_ms_max": round(ms[-1], 1),
                    }
                out["within_conversation"] = within

                # 1,000 conversations, then the search endpoint (cold: every digest folded first).
                with httpx.Client(base_url=url, timeout=120) as client:
                    for n in range(args.conversations):
                        client.post(f"/v1/conversations/conv-{n:04d}/events", json=small_conversation(n))
                    across = {}
                    for q in ("ticket-00777", "rebalancing", "sigma"):
                        timings = []
                        for _ in range(args.repeat + 1):
                            t0 = time.perf_counter()
                            body = client.get(
                                "/v1/search/conversations", params={"q": q, "limit": 10_000}
                            ).json()
                            timings.append((time.perf_counter() - t0) * 1000)
                        warm_ms = sorted(timings[1:])
                        across[q] = {
                            "total": body["total"],
                            "searched": body["searched"],
                            "first_ms": round(timings[0], 1),
                            "warm_ms_median": round(warm_ms[len(warm_ms) // 2], 1),
                            "warm_ms_max": round(warm_ms[-1], 1),
                        }
                    out["across_conversations"] = across
                # The list page filtering its rows in the page (title, id, tools, agents; status).
                page.goto(f"{url}/")
                page.wait_for_function(
                    f"() => document.querySelector('.page p[role=status]').textContent.startsWith('{args.conversations + 1:,} conversations')",
                    timeout=60_000,
                )
                filter_ms = page.evaluate(
                    """() => {
                      const input = document.querySelector('#list-search');
                      const times = [];
                      for (const q of ['sigma', 'tool_3', 'conv-07', 'question 12', 'zzz']) {
                        const t0 = performance.now();
                        input.value = q; input.dispatchEvent(new Event('input'));
                        times.push(performance.now() - t0);
                      }
                      return times;
                    }"""
                )
                out["list_filter_ms"] = [round(t, 1) for t in filter_ms]
                # Typing a query to its results on screen: the page's filter, then the server's
                # text search once the 200 ms debounce has passed (the debounce subtracted).
                typed = []
                for q in ("ticket-00777", "rebalancing", "sigma shards", "ticket-00123"):
                    page.fill("#list-search", "")
                    took: float = page.evaluate(
                        """(q) => new Promise((resolve) => {
                          const state = document.querySelector('.page p[role=status]');
                          const input = document.querySelector('#list-search');
                          const t0 = performance.now();
                          input.value = q; input.dispatchEvent(new Event('input'));
                          const done = () => !state.textContent.includes('searching');
                          const check = () => done() ? resolve(performance.now() - t0) : requestAnimationFrame(check);
                          requestAnimationFrame(check);
                        })""",
                        q,
                    )
                    state = page.locator(".page p[role=status]").inner_text()
                    typed.append({"query": q, "state": state, "ms_after_debounce": round(took - 200, 1)})
                out["list_search_typed"] = typed
                browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
