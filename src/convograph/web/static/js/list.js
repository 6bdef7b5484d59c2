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
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Conversation"), h("th", { scope: "col" }, "Status"), h("th", { scope: "col", class: "num col-events" }, "Events"), h("th", { scope: "col" }, "Last activity"))),
    body,
  );
  main.replaceChildren(h("section", { class: "page" },
    h("div", { class: "page__head" }, h("h1", {}, "Conversations")),
    h("div", { class: "filters", role: "search", "aria-label": "Search conversations" },
      query, status, tool, h("label", { class: "check", for: "list-errors" }, errorsOnly, "With errors")),
    state,
    h("div", { class: "table-wrap" }, table)));

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

  function render() {
    const filtered = Boolean(query.value.trim() || status.value || tool.value || errorsOnly.checked);
    const shown = matching();
    const els = shown.map(([r, hits]) => {
      let tr = rowEls.get(r.id);
      if (!tr) {
        tr = h("tr", { "data-id": r.id });
        rowEls.set(r.id, tr);
      }
      // The title (the first user message, from the server's digest) when there is one, the id below.
      const link = h("a", { href: `/c/${encodeURIComponent(r.id)}`, "data-link": true, class: r.title ? "conv__title" : "conv__id", title: r.title || null }, r.title || r.id);
      tr.replaceChildren(
        h("td", {}, link, r.title ? h("div", { class: "conv__id muted" }, r.id) : null,
          ...(hits ?? []).slice(0, 1).map((hit) => h("div", { class: "conv__hit" }, marked(hit.snippet, query.value.trim())))),
        h("td", {}, h("span", { class: `status status--${r.status}` }, r.status),
          r.errors ? h("span", { class: "conv__errors", title: `${r.errors} error event${r.errors === 1 ? "" : "s"}` }, `${r.errors} error${r.errors === 1 ? "" : "s"}`) : null),
        h("td", { class: "num col-events" }, (r.eventCount ?? 0).toLocaleString()),
        h("td", { title: new Date((r.lastActivity ?? 0) * 1000).toLocaleString() }, relativeTime(r.lastActivity)),
      );
      return tr;
    });
    body.replaceChildren(...els);
    const pending = query.value.trim() && serverSearch && searched !== query.value.trim().toLowerCase() ? " · searching text…" : "";
    state.textContent = rows.length
      ? `${rows.length} conversation${rows.length === 1 ? "" : "s"}${filtered ? `, ${shown.length} shown` : ""}${pending} · updates live`
      : "No conversations yet. Post events to /v1/conversations/<id>/events, or run `convograph demo`.";
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
        const data = await api(`/v1/search/conversations?q=${encodeURIComponent(needle)}&limit=500`);
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
  const ticker = setInterval(render, 10000); // keep "last activity" fresh while nothing changes
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
