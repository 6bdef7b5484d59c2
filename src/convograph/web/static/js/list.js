// The conversation list: rows pushed live by /v1/live/conversations (polled from an older server),
// with search and filters across every conversation.
//
// Search and filters, combined: text (a row's title, id, tools and agents match at once, in the
// page; the conversations' text through GET /v1/search/conversations, whose snippets show under
// the titles), status, a tool it called, and "with errors". Rows carry their digest (title, tools,
// agents, errors: server/digests.py), so every filter but the full text is instant. The search is
// in the address (?q=&status=&tool=&errors=1), so a filtered list can be shared.

import { followFeed } from "./stream.js";
import { api, frameScheduler, h, relativeTime } from "./util.js";

const STATUSES = ["active", "complete", "error", "idle"];
const SERVER_SEARCH_DELAY = 200; // ms after the last keystroke
const PAGE = 100; // rows shown at first, and added by "Show more"
const SNIPPET_ROWS = 100; // rows that show where their text matched
const SEARCH_LIMIT = 10000; // conversations the server's text search returns (the server's maximum)

/** The list page in `main`; returns {dispose()}. */
export function listPage(main) {
  document.title = "Conversations · convograph";
  const params = new URLSearchParams(location.search);
  const query = h("input", {
    type: "search", class: "input", id: "list-search", placeholder: "Search titles, text, tools, errors…",
    "aria-label": "Search conversations", value: params.get("q") ?? "",
  });
  const status = h("select", { class: "input input--select", "aria-label": "Status" },
    h("option", { value: "" }, "Any status"), ...STATUSES.map((s) => h("option", { value: s }, s)));
  status.value = STATUSES.includes(params.get("status")) ? params.get("status") : "";
  const tool = h("select", { class: "input input--select", "aria-label": "Tool used" }, h("option", { value: "" }, "Any tool"));
  const errorsOnly = h("input", { type: "checkbox", id: "list-errors", checked: params.get("errors") === "1" });
  const state = h("p", { class: "muted", role: "status", "aria-live": "polite" }, "Loading…");
  const body = h("tbody");
  const table = h(
    "table",
    { class: "table conversations", "aria-label": "Conversations" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Conversation"), h("th", { scope: "col", class: "col-status" }, "Status"),
      h("th", { scope: "col", class: "num col-events" }, "Events"), h("th", { scope: "col", class: "col-activity" }, "Last activity"))),
    body,
  );
  main.replaceChildren(h("section", { class: "page" },
    h("div", { class: "page__head" }, h("h1", {}, "Conversations")),
    h("div", { class: "filters", role: "search", "aria-label": "Search conversations" },
      query, status, tool, h("label", { class: "check", for: "list-errors" }, errorsOnly, "With errors")),
    state,
    h("div", { class: "table-wrap" }, table)));

  // A page of rows at a time (a table of 1,000 rows costs a long layout on every change).
  let pageSize = PAGE;
  const more = h("button", { type: "button", class: "btn list__more", hidden: true, onclick: () => {
    pageSize += PAGE;
    render();
  } });
  main.querySelector(".table-wrap").after(more);
  let rows = [];
  const rowEls = new Map();
  let textHits = new Map(); // conversation id -> [{field, snippet}] from the server's text search
  let searched = ""; // the query textHits answer
  let serverSearch = true; // false against a server without the search endpoint

  const wanted = params.get("tool");
  function toolOptions() {
    const names = new Set();
    for (const r of rows) for (const name of r.tools ?? []) names.add(name);
    const chosen = tool.value || wanted || "";
    if (chosen) names.add(chosen);
    const sorted = [...names].sort();
    if (sorted.join("\n") === tool._names) return;
    tool._names = sorted.join("\n");
    tool.replaceChildren(h("option", { value: "" }, "Any tool"), ...sorted.map((name) => h("option", { value: name }, name)));
    tool.value = chosen;
  }

  /** The rows to show, and why each matched the text: O(rows). */
  function matching() {
    const needle = query.value.trim().toLowerCase();
    const out = [];
    for (const r of rows) {
      if (status.value && r.status !== status.value) continue;
      if (tool.value && !(r.tools ?? []).includes(tool.value)) continue;
      if (errorsOnly.checked && !r.errors) continue;
      let hits = null;
      if (needle) {
        const local = [r.title ?? "", r.id, ...(r.tools ?? []), ...(r.agents ?? [])].some((s) => s.toLowerCase().includes(needle));
        const remote = searched === needle ? textHits.get(r.id) : null;
        if (!local && !remote) continue;
        hits = remote ? remote.filter((hit) => hit.field === "text" || hit.field === "error") : null;
      }
      out.push([r, hits]);
    }
    return out;
  }

  let cellsAt = 0; // when the rows' cells were last all rebuilt ("last activity" ages)
  function render({ refresh = false } = {}) {
    if (refresh) cellsAt = performance.now();
    const filtered = Boolean(query.value.trim() || status.value || tool.value || errorsOnly.checked);
    const matched = matching();
    const shown = matched.slice(0, pageSize);
    const needle = query.value.trim();
    const els = shown.map(([r, hits], index) => {
      if (index >= SNIPPET_ROWS) hits = null; // snippets for the first rows only: a broad query stays fast
      let tr = rowEls.get(r.id);
      if (!tr) {
        tr = h("tr", { "data-id": r.id });
        rowEls.set(r.id, tr);
      }
      // A row's cells are rebuilt only when its data, its match or the time shown changed: typing
      // in the search box re-filters 1,000 rows without rebuilding them.
      const hit = hits && hits.length ? `${hits[0].snippet}\u0000${needle}` : "";
      if (tr._row === r && tr._hit === hit && tr._at === cellsAt) return tr;
      tr._row = r;
      tr._hit = hit;
      tr._at = cellsAt;
      // The title (the first user message, from the server's digest) when there is one, the id below.
      const link = h("a", { href: `/c/${encodeURIComponent(r.id)}`, "data-link": true, class: r.title ? "conv__title" : "conv__id", title: r.title || null }, r.title || r.id);
      tr.replaceChildren(
        h("td", {}, link, r.title ? h("div", { class: "conv__id muted" }, r.id) : null,
          ...(hits ?? []).slice(0, 1).map((hit) => h("div", { class: "conv__hit" }, marked(hit.snippet, needle)))),
        h("td", {}, h("span", { class: `status status--${r.status}` }, r.status),
          r.errors ? h("span", { class: "conv__errors", title: `${r.errors} error event${r.errors === 1 ? "" : "s"}` }, `${r.errors} error${r.errors === 1 ? "" : "s"}`) : null),
        h("td", { class: "num col-events" }, (r.eventCount ?? 0).toLocaleString()),
        h("td", { title: new Date((r.lastActivity ?? 0) * 1000).toLocaleString() }, relativeTime(r.lastActivity)),
      );
      return tr;
    });
    // Re-inserting 1,000 unchanged rows costs a table layout: only when the rows shown changed.
    const current = body.children;
    if (els.length !== current.length || els.some((tr, i) => current[i] !== tr)) body.replaceChildren(...els);
    const pending = query.value.trim() && serverSearch && searched !== query.value.trim().toLowerCase() ? " · searching text…" : "";
    const count = (n) => n.toLocaleString();
    state.textContent = rows.length
      ? `${count(rows.length)} conversation${rows.length === 1 ? "" : "s"}${filtered ? `, ${count(matched.length)} match${matched.length === 1 ? "" : "es"}` : ""}${pending} · updates live`
      : "No conversations yet. Post events to /v1/conversations/<id>/events, or run `convograph demo`.";
    more.hidden = matched.length <= shown.length;
    more.textContent = `Show ${count(Math.min(PAGE, matched.length - shown.length))} more (${count(matched.length - shown.length)} not shown)`;
  }

  // -- the server's text search (debounced; an answer for an older query is dropped) ---------------
  let searchTimer = null;
  let searchSeq = 0;
  function scheduleSearch(delay = SERVER_SEARCH_DELAY) {
    clearTimeout(searchTimer);
    const needle = query.value.trim().toLowerCase();
    if (!needle || !serverSearch) {
      searched = needle;
      textHits = new Map();
      return;
    }
    searchTimer = setTimeout(async () => {
      const mine = ++searchSeq;
      try {
        const data = await api(`/v1/search/conversations?q=${encodeURIComponent(needle)}&limit=${SEARCH_LIMIT}`);
        if (mine !== searchSeq) return;
        textHits = new Map(data.results.map((row) => [row.id, row.hits]));
        searched = needle;
      } catch (error) {
        if (error.status === 404 || error.status === 405) serverSearch = false; // an older server
        searched = needle;
      }
      render();
    }, delay);
  }

  function filtersChanged() {
    pageSize = PAGE;
    const next = new URLSearchParams();
    if (query.value.trim()) next.set("q", query.value.trim());
    if (status.value) next.set("status", status.value);
    if (tool.value) next.set("tool", tool.value);
    if (errorsOnly.checked) next.set("errors", "1");
    const search = next.toString();
    history.replaceState(null, "", search ? `/?${search}` : "/");
    render();
  }
  query.addEventListener("input", () => {
    scheduleSearch();
    filtersChanged();
  });
  for (const control of [status, tool, errorsOnly]) control.addEventListener("change", filtersChanged);

  // Rows arrive over the live feed (/v1/live/conversations: a snapshot, then changed rows). A row
  // can come again, or right after the snapshot be older than it: the larger lastSeq wins. An
  // older server without the feed is polled instead.
  const byId = new Map();
  let stopped = false;
  let timer = null;
  function show() {
    rows = [...byId.values()].sort((a, b) => (b.lastActivity ?? 0) - (a.lastActivity ?? 0));
    toolOptions();
    render();
  }
  const scheduleShow = frameScheduler(show, 100);
  function onMessage(event, data) {
    if (event === "snapshot") {
      byId.clear();
      for (const row of data.conversations ?? []) byId.set(row.id, row);
      show();
      return;
    }
    if (event === "conversation") {
      const known = byId.get(data.id);
      if (!known || (data.lastSeq ?? 0) >= (known.lastSeq ?? 0)) byId.set(data.id, data);
      if (query.value.trim()) scheduleSearch(1000); // its text may match now
    } else if (event === "deleted") {
      byId.delete(data.id);
      rowEls.delete(data.id);
    }
    scheduleShow();
  }
  async function poll() {
    try {
      const data = await api("/v1/conversations");
      byId.clear();
      for (const row of Array.isArray(data) ? data : data.conversations ?? []) byId.set(row.id, row);
      show();
    } catch (error) {
      state.textContent = `Could not load conversations: ${error.message}`;
    }
    if (!stopped) timer = setTimeout(poll, document.hidden ? 10000 : 2000);
  }
  const feed = followFeed("/v1/live/conversations", {
    onMessage,
    onState(s) {
      if (s === "unsupported" && !stopped) poll();
      else if (s === "reconnecting" && !rows.length) state.textContent = "Could not load conversations: reconnecting…";
    },
  });
  const ticker = setInterval(() => render({ refresh: true }), 10000); // keep "last activity" fresh
  scheduleSearch(0);
  return {
    dispose() {
      stopped = true;
      feed.close();
      clearTimeout(timer);
      clearTimeout(searchTimer);
      clearInterval(ticker);
    },
  };
}

/** `text` with each occurrence of `needle` (case-insensitive) in a <mark>. */
export function marked(text, needle) {
  const fragment = document.createDocumentFragment();
  const lower = text.toLowerCase();
  const n = needle.toLowerCase();
  let at = 0;
  for (let i = n ? lower.indexOf(n) : -1; i >= 0; i = lower.indexOf(n, i + n.length)) {
    fragment.append(text.slice(at, i), h("mark", {}, text.slice(i, i + n.length)));
    at = i + n.length;
  }
  fragment.append(text.slice(at));
  return fragment;
}
