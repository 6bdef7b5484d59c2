// The viewer's entry point: routing, the conversation list, the conversation page (thread and
// graph and timeline tabs) and the explorer. Routes: /  ·  /c/<id>  ·  /c/<id>/graph  ·
// /c/<id>/timeline  ·  /explore.

import { DagView, nodeContent } from "./dag.js";
import { ExplorerView } from "./explorer.js";
import { FindBar } from "./find.js";
import { listPage } from "./list.js";
import { ConversationModel, Level } from "./model.js";
import { modelFromThread, Steering } from "./steer.js";
import { allViews } from "./search.js";
import { ServingPanel } from "./serving.js";
import { followStream } from "./stream.js";
import { setupThemeButton } from "./theme-button.js";
import { ThreadView } from "./thread.js";
import { TimelineView } from "./timeline.js";
import { formatDuration, formatStamp } from "./time.js";
import { announce, api, cidPath, copyText, formatTokens, frameScheduler, h, throttle } from "./util.js";

const main = document.getElementById("main");
let current = null; // the active page: {dispose()}

// -- routing ---------------------------------------------------------------------------------------

function route() {
  const path = location.pathname;
  const match = path.match(/^\/c\/(.+?)(\/graph|\/timeline)?\/?$/);
  const tab = match && match[2] ? match[2].slice(1) : "thread";
  if (match && current && current.cid === decodeURIComponent(match[1])) {
    current.showTab(tab); // same conversation, other tab: keep the model and the live stream
    return;
  }
  if (current) current.dispose();
  current = null;
  document.querySelectorAll("[data-nav]").forEach((a) => a.removeAttribute("aria-current"));
  if (match) {
    current = conversationPage(decodeURIComponent(match[1]), tab);
  } else if (path.startsWith("/explore")) {
    document.querySelector('[data-nav="explore"]').setAttribute("aria-current", "page");
    current = explorerPage();
  } else {
    document.querySelector('[data-nav="conversations"]').setAttribute("aria-current", "page");
    current = listPage(main);
  }
}

export function navigate(path) {
  if (path === location.pathname) return;
  history.pushState(null, "", path);
  route();
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-link]");
  if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  navigate(link.getAttribute("href"));
});
window.addEventListener("popstate", route);

const help = document.getElementById("help");
document.getElementById("help-button").addEventListener("click", () => help.showModal());

setupThemeButton(document.getElementById("theme-button"));

// -- conversation page -----------------------------------------------------------------------------

const SELECTION_KEY = "convograph.selection";
// Time a frame may spend appending new turns (the rest goes to the next frames): the first frame
// little, so a long thread paints its first turns at once; then more, so the rest follows soon.
const FIRST_FRAME_BUDGET_MS = 16;
const FRAME_BUDGET_MS = 60;

function loadSelection(cid) {
  try {
    const all = JSON.parse(localStorage.getItem(SELECTION_KEY) || "{}");
    return new Map(Object.entries(all[cid] || {}));
  } catch {
    return new Map();
  }
}

function saveSelection(cid, selection) {
  try {
    const all = JSON.parse(localStorage.getItem(SELECTION_KEY) || "{}");
    all[cid] = Object.fromEntries(selection);
    localStorage.setItem(SELECTION_KEY, JSON.stringify(all));
  } catch {
    /* storage unavailable: the selection lasts for this page only */
  }
}

const PREFS_KEY = "convograph.view";

function viewPrefs() {
  try {
    return JSON.parse(localStorage.getItem(PREFS_KEY) || "{}");
  } catch {
    return {};
  }
}

/** A toolbar toggle that adds `cls` to the thread (persisted for every conversation). */
function toggle(label, cls) {
  const button = h("button", { type: "button", class: "btn", "aria-pressed": String(!!viewPrefs()[cls]), "data-toggle": cls }, label);
  button.addEventListener("click", () => {
    const on = button.getAttribute("aria-pressed") !== "true";
    button.setAttribute("aria-pressed", String(on));
    document.querySelector(".thread").classList.toggle(cls, on);
    const prefs = viewPrefs();
    prefs[cls] = on;
    try {
      localStorage.setItem(PREFS_KEY, JSON.stringify(prefs));
    } catch {
      /* not persisted */
    }
  });
  return button;
}

function conversationPage(cid, tab) {
  document.title = `${cid} · convograph`;
  const model = new ConversationModel();
  const connection = h("span", { class: "conn conn--connecting", role: "status", "aria-live": "polite" }, "connecting");
  const stats = h("div", { class: "stats", "aria-live": "off" });
  const relayBanner = h("div", { class: "relay-banner", hidden: true, role: "region", "aria-label": "Pending permission requests" });
  const steerProblem = h("p", { class: "error-text", role: "alert", hidden: true });
  const prefs = viewPrefs();
  const threadRoot = h("div", { class: `thread${prefs["hide-reasoning"] ? " hide-reasoning" : ""}${prefs["hide-subagents"] ? " hide-subagents" : ""}`, "aria-label": "Conversation thread" });
  const empty = h("p", { class: "muted thread__empty" }, "Waiting for events…");
  const tabThread = h("a", { href: `/c/${encodeURIComponent(cid)}`, "data-link": true, role: "tab", id: "tab-thread" }, "Thread");
  const tabGraph = h("a", { href: `/c/${encodeURIComponent(cid)}/graph`, "data-link": true, role: "tab", id: "tab-graph" }, "Graph");
  const tabTimeline = h("a", { href: `/c/${encodeURIComponent(cid)}/timeline`, "data-link": true, role: "tab", id: "tab-timeline" }, "Timeline");
  const tabs = { thread: tabThread, graph: tabGraph, timeline: tabTimeline };
  const serving = new ServingPanel(cid); // agents serving the conversation, and a message box (serving.js)
  const threadPanel = h(
    "section",
    { role: "tabpanel", "aria-labelledby": "tab-thread", class: "panel" },
    h(
      "div",
      { class: "toolbar", role: "toolbar", "aria-label": "Thread controls" },
      h("button", { type: "button", class: "btn", onclick: () => thread.expandAll() }, "Expand all"),
      h("button", { type: "button", class: "btn", onclick: () => thread.collapseAll() }, "Collapse all"),
      toggle("Hide reasoning", "hide-reasoning"),
      toggle("Hide subagents", "hide-subagents"),
      h("button", { type: "button", class: "btn", onclick: () => stream.drop(), title: "Drop the live connection; it resumes from the last event received" }, "Reconnect"),
    ),
    relayBanner,
    steerProblem,
    empty,
    threadRoot,
    serving.element,
  );
  const find = new FindBar({
    model: () => thread.model,
    reveal: (view) => {
      reveal(view);
      // Open what hides the match: a tool card (input, progress, output) or a reasoning block.
      const parts = view.parts ?? {};
      if (parts.openTool) parts.openTool();
      else if (parts.card) parts.card.open = true;
      if (parts.outputBox && !parts.outputBox.hidden) parts.outputBox.open = true;
      if (parts.details) parts.details.open = true;
      if (view.el) view.el.focus({ preventScroll: true });
    },
    toolNames: () => [...model.calls.values()].map((v) => v.name),
    who: (view) => (view.role === "user" ? "You" : thread._who(view)),
  });
  threadPanel.querySelector(".toolbar").after(find.element);
  const graphPanel = h("section", { role: "tabpanel", "aria-labelledby": "tab-graph", class: "panel panel--graph" });
  const timelinePanel = h("section", { role: "tabpanel", "aria-labelledby": "tab-timeline", class: "panel panel--timeline" });
  const panels = { thread: threadPanel, graph: graphPanel, timeline: timelinePanel };
  main.replaceChildren(
    h(
      "section",
      { class: "page page--conversation" },
      h("div", { class: "page__head" }, h("h1", {}, h("a", { href: "/", "data-link": true, class: "crumb" }, "Conversations"), " / ", h("span", { class: "cid" }, cid)), connection),
      stats,
      h("div", { class: "tabs", role: "tablist", "aria-label": "Views" }, tabThread, tabGraph, tabTimeline),
      threadPanel,
      graphPanel,
      timelinePanel,
    ),
  );

  const selection = loadSelection(cid);
  const viewOptions = {
    selection,
    onSelect: () => saveSelection(cid, selection),
    onRelay: (relayId, approved, reason, always = false) => api(`${cidPath(cid)}/relays/${encodeURIComponent(relayId)}`, { method: "POST", body: { approved, ...(reason ? { reason } : {}), ...(always ? { always } : {}) } }).catch((error) => {
      if (error.status === 409) return; // already decided: the stream carries the decision
      throw error;
    }),
  };
  const clientThread = new ThreadView(threadRoot, model, viewOptions);
  let thread = clientThread;

  // Steering (edit / regenerate / switch branch). Once the log holds a command, the active path
  // is the server's to compute (hypergraph model): the thread is then rendered from its /thread,
  // refetched at most every 250 ms as events arrive; the client model still drives stats and relays.
  const COMMANDS = new Set(["edit", "regenerate", "switch_branch", "summarize"]);
  let serverMode = false;
  const steering = new Steering(
    cid,
    () => {
      scheduleSteer(0);
      if (serverMode) scheduleServerThread(0);
    },
    (message) => {
      steerProblem.hidden = !message;
      steerProblem.textContent = message ?? "";
    },
    { agentActive: () => model.runSummary().streaming > 0 },
  );
  // The path is refreshed once the stream goes quiet (trailing), not while an agent streams: it
  // is a walk of the whole active path on the server, and nobody edits a turn mid-stream.
  const scheduleSteer = throttle(
    async () => {
      await steering.refresh();
      steering.decorate(threadRoot);
      if (steering.unanchored) {
        redecorateBudget = 20;
        setTimeout(flush, 250);
      }
    },
    { trailing: true },
  );
  const scheduleServerThread = throttle(async () => {
    let json;
    try {
      json = await api(`${cidPath(cid)}/thread?repl=1`);
    } catch {
      return;
    }
    const open = new Set([...threadRoot.querySelectorAll("details.branch[open]")].map((d) => d.closest("article")?.dataset.id));
    threadRoot.replaceChildren();
    threadRoot._rendered = 0;
    thread = new ThreadView(threadRoot, modelFromThread(json, model, Level), viewOptions);
    threadRoot.dataset.source = "server";
    thread.flush();
    for (const id of open) {
      const details = id && threadRoot.querySelector(`article[data-id="${CSS.escape(id)}"] > .branches > details.branch`);
      if (details) {
        details.open = true;
        details._build();
      }
    }
    empty.hidden = json.length > 0;
    steering.decorate(threadRoot);
    if (find.active) find.run(); // the views were rebuilt
    goToTarget();
  });

  let dag = null;
  let timeline = null;
  function showTab(name) {
    for (const [key, tabEl] of Object.entries(tabs)) {
      tabEl.setAttribute("aria-selected", String(key === name));
      tabEl.tabIndex = key === name ? 0 : -1;
      panels[key].hidden = key !== name;
    }
    if (name === "timeline") {
      timeline ??= new TimelineView(timelinePanel, model, showInThread);
      timeline.refresh();
    }
    if (name === "graph") {
      if (!dag) dag = new DagView(graphPanel, cid, (id) => nodeContent(model, id));
      dag.load();
    }
  }
  showTab(tab);

  const renderStats = () => {
    const runs = model.runSummary();
    const u = model.usage;
    const pending = model.pendingRelays();
    const items = [
      ["Events", model.eventCount.toLocaleString()],
      ["Runs", `${runs.streaming} running · ${runs.complete} done${runs.error ? ` · ${runs.error} failed` : ""}`],
      ["Tokens", `${formatTokens(u.input)} in · ${formatTokens(u.output)} out${u.cacheRead ? ` · ${formatTokens(u.cacheRead)} cached` : ""}${u.cacheCreation ? ` · ${formatTokens(u.cacheCreation)} cache write` : ""}`],
      ["LLM calls", u.calls.toLocaleString()],
    ];
    if (model.firstTime !== null && model.lastTime > model.firstTime) {
      items.push(["Duration", formatDuration(model.lastTime - model.firstTime), `${formatStamp(model.firstTime)} → ${formatStamp(model.lastTime)}`]);
    }
    stats.replaceChildren(...items.map(([k, v, title]) => h("div", { class: "stat", title: title ?? null }, h("span", { class: "stat__label" }, k), h("span", { class: "stat__value" }, v))));
    if (model.errors) {
      stats.append(
        h("div", { class: "stat" }, h("span", { class: "stat__label" }, "Errors"),
          h("button", {
            type: "button", class: "btn btn--link stat__value error-text", title: "Show the next error (x)",
            "aria-label": `${model.errors} error${model.errors === 1 ? "" : "s"}: show the next one`, onclick: focusNextError,
          }, String(model.errors))),
      );
    }
    relayBanner.hidden = pending.length === 0;
    if (pending.length) {
      relayBanner.replaceChildren(
        h("span", {}, `${pending.length} permission request${pending.length === 1 ? "" : "s"} waiting for you.`),
        h("button", { type: "button", class: "btn", onclick: () => focusRelay(pending[0].view) }, "Review"),
      );
    }
  };

  /** Open every subagent region that holds `view` (outermost first), then scroll to it. */
  function reveal(view) {
    const chain = [];
    for (let level = view.level; level && level.owner; level = level.owner.level) chain.push(level);
    for (const level of chain.reverse()) {
      const owner = level.owner;
      const entry = owner.parts && owner.parts.branchEls && owner.parts.branchEls.get(level);
      if (entry) {
        entry.details.open = true;
        entry.details._build();
      }
    }
    thread.flush();
    if (view.el) view.el.scrollIntoView({ block: "center" });
  }

  function focusRelay(view) {
    if (serverMode) {
      const el = threadRoot.querySelector(`article[data-id="${CSS.escape(view.id)}"]`);
      if (el) {
        el.scrollIntoView({ block: "center" });
        (el.querySelector(".btn--allow") || el).focus();
      }
      return;
    }
    reveal(view);
    if (view.el) (view.parts.allow || view.el).focus();
  }

  let errorCursor = 0;
  function focusNextError() {
    const errors = model.errorViews;
    if (!errors.length) return;
    const view = errors[errorCursor++ % errors.length];
    reveal(view);
    if (view.el) view.el.focus();
  }

  let lastRedecorate = 0;
  let redecorateBudget = 0;
  let backlog = null; // the frame that renders more of a long thread's turns
  const flush = frameScheduler(render, 50);
  function render() {
    // Follow the conversation while the reader is at the bottom (a chat's "stick to bottom").
    const root = document.scrollingElement;
    const follow = !threadPanel.hidden && root.scrollTop > 0 && root.scrollTop + root.clientHeight >= root.scrollHeight - 120;
    if (serverMode) {
      model.dirtyViews.clear();
      model.dirtyLevels.clear();
    } else if (thread.flush(performance.now() + (threadRoot._rendered ? FRAME_BUDGET_MS : FIRST_FRAME_BUDGET_MS)) && backlog === null) {
      // More turns to append: in the next frames, a slice each, so the page paints and answers
      // input meanwhile.
      backlog = requestAnimationFrame(() => {
        backlog = null;
        render();
      });
    }
    // The path may have arrived before its turns were rendered (rendering is coalesced): attach the
    // controls from the cached path once they are, without refetching; retried every 250 ms, a
    // bounded number of times (an empty regenerated turn stays unanchored on purpose).
    if (steering.unanchored && redecorateBudget > 0 && performance.now() - lastRedecorate >= 250) {
      lastRedecorate = performance.now();
      redecorateBudget -= 1;
      steering.decorate(threadRoot);
      if (steering.unanchored && redecorateBudget > 0) setTimeout(flush, 250);
    }
    if (follow) root.scrollTop = root.scrollHeight;
    if (connection.classList.contains("conn--live")) connection.textContent = `live · seq ${model.lastSeq}`;
    if (!serverMode) empty.hidden = model.top.items.length > 0;
    threadRoot.classList.toggle("thread--large", model.viewCount > 400);
    if (model.dirtyMeta) {
      model.dirtyMeta = false;
      renderStats();
      // An agent picked up the message we were waiting on: its own "working…" turn shows now.
      if (steering.awaiting && model.runSummary().streaming > 0) {
        steering.awaiting.remove();
        steering.awaiting = null;
      }
    }
    if (dag && !graphPanel.hidden) scheduleDag();
    if (find.active && !serverMode) scheduleFind();
    // New tools for the find bar's list: at most every 2 s (it walks every call), and once more
    // after the last change (calls that arrive within the 2 s would otherwise never be listed).
    if (model.calls.size !== toolCount) scheduleTools();
    if (target) goToTarget();
    if (timeline && !timelinePanel.hidden) scheduleTimeline();
  }
  let toolCount = 0; // tool calls known when the find bar's tool list was last made
  let toolsAt = -Infinity;
  let toolsTimer = null;
  function scheduleTools() {
    if (toolsTimer) return;
    toolsTimer = setTimeout(() => {
      toolsTimer = null;
      toolCount = model.calls.size;
      toolsAt = performance.now();
      find.refreshTools();
    }, Math.max(0, 2000 - (performance.now() - toolsAt)));
  }
  // While a search is shown, new events are searched too (at most twice a second).
  let findTimer = null;
  function scheduleFind() {
    if (findTimer) return;
    findTimer = setTimeout(() => {
      findTimer = null;
      if (find.active) find.run({ keepPlace: true });
    }, 500);
  }

  // A link to one turn: /c/<id>#turn=<view id>. The turn is shown (opening the subagents that hold
  // it) as soon as it is rendered; the turn's "#" link copies it.
  let target = turnInHash();
  let targeted = null;
  function goToTarget() {
    if (!target) return;
    const view = findView(thread.model, target);
    if (!view) return;
    target = null;
    reveal(view);
    if (targeted) targeted.classList.remove("turn--target");
    targeted = view.el;
    if (view.el) {
      view.el.classList.add("turn--target");
      view.el.focus({ preventScroll: true });
    }
  }
  function onHashChange() {
    target = turnInHash();
    goToTarget();
  }
  window.addEventListener("hashchange", onHashChange);
  threadRoot.addEventListener("click", async (event) => {
    const link = event.target.closest("a.turn__link");
    if (!link) return;
    event.preventDefault();
    const url = `${location.origin}${location.pathname}${link.getAttribute("href")}`;
    history.replaceState(null, "", link.getAttribute("href"));
    onHashChange();
    const ok = await copyText(url);
    link.dataset.copied = String(ok);
    announce(ok ? "Link to this turn copied." : "The link to this turn is in the address bar.");
    setTimeout(() => delete link.dataset.copied, 1500);
  });

  let timelineTimer = null;
  function scheduleTimeline() {
    if (timelineTimer) return;
    timelineTimer = setTimeout(() => {
      timelineTimer = null;
      if (!timelinePanel.hidden) timeline.refresh();
    }, 1000);
  }

  /** Show a timeline row's turn in the thread (the tool call, or the run's first turn). */
  function showInThread(row) {
    navigate(`/c/${encodeURIComponent(cid)}`);
    const id = row.viewId ?? model.runs.get(row.runId)?.views.find((v) => v.kind !== "pending")?.id;
    if (!id) return;
    const view = model.calls.get(id) ?? model.repls.get(id) ?? model.nodes.get(id)?.view;
    if (view && !serverMode) reveal(view);
    const el = threadRoot.querySelector(`article[data-id="${CSS.escape(id)}"]`);
    if (el) {
      el.scrollIntoView({ block: "center" });
      el.focus();
    }
  }

  let dagTimer = null;
  function scheduleDag() {
    if (dagTimer) return;
    // Every 2 s, or 5x the last layout fetch when that is slower (a big graph's layout is work).
    dagTimer = setTimeout(() => {
      dagTimer = null;
      if (dag && !graphPanel.hidden) dag.load();
    }, Math.max(2000, 5 * (dag.loadMs ?? 0)));
  }

  const stream = followStream(`${cidPath(cid)}/stream`, {
    after: 0,
    // The conversation was deleted and re-created under this id: what the page shows is gone.
    onPastHead: () => location.reload(),
    onEvents(events) {
      let command = false;
      for (const event of events) {
        model.apply(event);
        if (COMMANDS.has(event.type)) command = true;
      }
      if (command) serverMode = true;
      serving.onEvents(events);
      flush();
      if (serverMode) scheduleServerThread(command ? 0 : 250);
      scheduleSteer(command || steering.available === null ? 0 : 1500);
    },
    onState(state) {
      connection.className = `conn conn--${state}`;
      connection.textContent = state === "live" ? `live · seq ${model.lastSeq}` : state;
      threadRoot.setAttribute("aria-busy", String(state !== "live"));
    },
  });

  function onKey(event) {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target.closest && target.closest("input, textarea, select, [contenteditable], dialog")) return;
    const key = event.key;
    if (key === "j" || key === "k") {
      const turns = [...threadRoot.querySelectorAll("article.turn")].filter((el) => el.offsetParent !== null);
      if (!turns.length) return;
      const at = turns.indexOf(document.activeElement.closest ? document.activeElement.closest("article.turn") : null);
      const next = key === "j" ? Math.min(turns.length - 1, at + 1) : Math.max(0, at < 0 ? 0 : at - 1);
      turns[next].focus();
      turns[next].scrollIntoView({ block: "nearest" });
    } else if (key === "e") thread.expandAll();
    else if (key === "c") thread.collapseAll();
    else if (key === "r") {
      const pending = model.pendingRelays();
      if (pending.length) focusRelay(pending[0].view);
    } else if (key === "x") focusNextError();
    else if (key === "g") navigate(`/c/${encodeURIComponent(cid)}/graph`);
    else if (key === "t") navigate(`/c/${encodeURIComponent(cid)}`);
    else if (key === "w") navigate(`/c/${encodeURIComponent(cid)}/timeline`);
    else if (key === "?") help.showModal();
    else if (key === "/") find.input.focus();
    else return;
    event.preventDefault();
  }
  document.addEventListener("keydown", onKey);
  // Arrow keys move between the two tabs (WAI-ARIA tabs pattern).
  const tabOrder = [tabThread, tabGraph, tabTimeline];
  for (const t of tabOrder) {
    t.addEventListener("keydown", (e) => {
      if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
        e.preventDefault();
        const at = tabOrder.indexOf(t);
        const other = tabOrder[(at + (e.key === "ArrowRight" ? 1 : tabOrder.length - 1)) % tabOrder.length];
        other.focus();
        other.click();
      }
    });
  }

  // Test and debugging hooks (read-only views of the model, plus the reconnect control).
  window.convograph = {
    model,
    get thread() {
      return thread;
    },
    steering,
    stream,
    cid,
    get dag() {
      return dag;
    },
    get timeline() {
      return timeline;
    },
    find,
  };

  return {
    cid,
    showTab,
    dispose() {
      stream.close();
      serving.dispose();
      scheduleSteer.cancel();
      scheduleServerThread.cancel();
      clearTimeout(dagTimer);
      clearTimeout(timelineTimer);
      clearTimeout(findTimer);
      if (backlog !== null) cancelAnimationFrame(backlog);
      window.removeEventListener("hashchange", onHashChange);
      document.removeEventListener("keydown", onKey);
    },
  };
}

/** The view id named by the address's `#turn=<id>`, or null. */
function turnInHash() {
  const match = location.hash.match(/^#turn=(.+)$/);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return null;
  }
}

/** The view with id `id` in a thread model (client or server-built): O(views) at worst. */
function findView(threadModel, id) {
  if (threadModel.calls) {
    const known = threadModel.calls.get(id) ?? threadModel.repls.get(id) ?? threadModel.relays.get(id) ?? threadModel.nodes.get(id)?.view;
    if (known && !known.removed) return known;
  }
  for (const view of allViews(threadModel)) if (view.id === id) return view;
  return null;
}

// -- explorer --------------------------------------------------------------------------------------

function explorerPage() {
  document.title = "Graph explorer · convograph";
  const view = new ExplorerView(main);
  return { dispose: () => view.dispose() };
}

route();
