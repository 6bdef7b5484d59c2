// Graph explorer: a read-only Cypher box over the context-intelligence graph (`POST /cypher`),
// with a workspace selector, saved example questions, a results table and a short history.

import { api, h, payloadText } from "./util.js";

export const EXAMPLES = [
  {
    title: "Recent sessions",
    query: "MATCH (s:Session {workspace: $workspace})\nRETURN s.node_id AS session, s.agent_name AS agent, s.started_at AS started\nORDER BY started DESC\nLIMIT 25",
  },
  {
    title: "Which agent spawned which",
    query: "MATCH (p:Session {workspace: $workspace})-[:HAS_FORK]->(c:Session)\nRETURN p.node_id AS parent, c.node_id AS child, c.agent_name AS agent\nLIMIT 50",
  },
  {
    title: "Most used tools",
    query: "MATCH (s:Session {workspace: $workspace})-[:HAS_TOOL_CALL]->(tc:ToolCall)\nRETURN tc.tool_name AS tool, count(*) AS calls\nORDER BY calls DESC\nLIMIT 20",
  },
  {
    title: "Errors (tools and LLM calls)",
    query: "MATCH (s:Session {workspace: $workspace})-[:HAS_EVENT]->(e:Event)\nWHERE e:ToolErrorEvent OR e:LlmErrorEvent\nRETURN s.node_id AS session, labels(e)[2] AS kind, e.occurred_at AS at\nORDER BY at\nLIMIT 50",
  },
  {
    title: "LLM calls per session",
    query: "MATCH (s:Session {workspace: $workspace})-[:HAS_EVENT]->(e:LlmResponseEvent)\nRETURN s.node_id AS session, count(e) AS llm_calls\nORDER BY llm_calls DESC\nLIMIT 25",
  },
  {
    title: "Events by label",
    query: "MATCH (e:Event {workspace: $workspace})\nRETURN labels(e) AS labels, count(*) AS events\nORDER BY events DESC\nLIMIT 30",
  },
  {
    title: "Smoke test",
    query: "RETURN 1 AS one, 'convograph' AS name",
  },
];

const HISTORY_KEY = "convograph.explorer.history";
const SAVED_KEY = "convograph.explorer.saved";

function load(key) {
  try {
    return JSON.parse(localStorage.getItem(key) || "[]");
  } catch {
    return [];
  }
}

function store(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch {
    /* not persisted */
  }
}
const WORKSPACE_KEY = "convograph.explorer.workspace";

export class ExplorerView {
  constructor(root) {
    this.root = root;
    this.controller = null;
    this.workspace = h("input", { class: "input", id: "workspace", list: "workspaces", value: localStorage.getItem(WORKSPACE_KEY) || "*", autocomplete: "off" });
    this.workspaces = h("datalist", { id: "workspaces" }, h("option", { value: "*" }, "every workspace"));
    this.query = h("textarea", { class: "input query", id: "cypher", rows: "7", spellcheck: "false", "aria-describedby": "cypher-help" }, EXAMPLES[0].query);
    this.run = h("button", { type: "button", class: "btn btn--primary", onclick: () => this.execute() }, "Run query");
    this.status = h("p", { class: "muted", role: "status", "aria-live": "polite" });
    this.results = h("div", { class: "results" });
    this.history = h("ul", { class: "history" });
    this.saved = h("ul", { class: "examples saved", "aria-label": "Saved questions" });
    this.saveName = h("input", { class: "input input--small", id: "save-name", placeholder: "Name this question", "aria-label": "Name for the saved question" });
    const saveForm = h("form", { class: "row save-form" }, this.saveName, h("button", { type: "submit", class: "btn" }, "Save question"));
    saveForm.addEventListener("submit", (event) => {
      event.preventDefault();
      this.save();
    });
    this.saveForm = saveForm;
    const examples = h(
      "ul",
      { class: "examples", "aria-label": "Example questions" },
      ...EXAMPLES.map((ex) => h("li", {}, h("button", { type: "button", class: "btn btn--link", onclick: () => this.use(ex.query, true) }, ex.title))),
    );
    this.query.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        this.execute();
      }
    });
    this.workspace.addEventListener("change", () => localStorage.setItem(WORKSPACE_KEY, this.workspace.value));
    root.replaceChildren(
      h(
        "section",
        { class: "page page--explorer" },
        h("div", { class: "page__head" }, h("h1", {}, "Graph explorer")),
        h(
          "div",
          { class: "explorer" },
          h(
            "div",
            { class: "explorer__main" },
            h("label", { for: "workspace" }, "Workspace"),
            h("div", { class: "row" }, this.workspace, this.workspaces),
            h("label", { for: "cypher" }, "Cypher (read-only)"),
            this.query,
            h("p", { id: "cypher-help", class: "muted small" }, "$workspace is set from the selector (\"*\" queries every workspace you may read). Ctrl+Enter runs the query. Results are bounded by the server."),
            h("div", { class: "row" }, this.run),
            this.saveForm,
            this.status,
            this.results,
          ),
          h("aside", { class: "explorer__side" }, h("h2", {}, "Example questions"), examples, h("h2", {}, "Saved questions"), this.saved, h("h2", {}, "History"), this.history),
        ),
      ),
    );
    this.renderHistory();
    this.renderSaved();
    this.loadWorkspaces();
  }

  use(query, run = false) {
    this.query.value = query;
    this.query.focus();
    if (run) this.execute();
  }

  async loadWorkspaces(attempt = 0) {
    try {
      const data = await api("/cypher", {
        method: "POST",
        body: { query: "MATCH (s:Session) RETURN DISTINCT s.workspace AS workspace LIMIT 200", workspace: "*" },
      });
      const found = (data.results ?? []).map((row) => row.workspace).filter(Boolean);
      for (const name of found) this.workspaces.append(h("option", { value: name }));
      // With no choice made yet, start in the first workspace that has data ($workspace-scoped
      // examples return nothing under "*").
      if (!localStorage.getItem(WORKSPACE_KEY) && this.workspace.value === "*" && found.length) this.workspace.value = found[0];
      // Hook events are applied to the graph shortly after they are accepted: look again a few
      // times while the graph is still empty.
      if (!found.length && attempt < 5 && !this.disposed) this.retry = setTimeout(() => this.loadWorkspaces(attempt + 1), 2000);
    } catch {
      /* no graph yet, or not allowed: the input still takes any name */
    }
  }

  async execute() {
    const query = this.query.value.trim();
    if (!query) return;
    if (this.controller) this.controller.abort();
    this.controller = new AbortController();
    const workspace = this.workspace.value.trim() || "*";
    this.run.disabled = true;
    this.status.className = "muted";
    this.status.textContent = "Running…";
    const started = performance.now();
    try {
      const data = await api("/cypher", { method: "POST", body: { query, workspace }, signal: this.controller.signal });
      const ms = Math.round(performance.now() - started);
      const rows = data.results ?? [];
      this.status.textContent = `${rows.length.toLocaleString()} row${rows.length === 1 ? "" : "s"} in ${ms} ms${data.truncated ? " — truncated: the server's row limit was reached, add LIMIT or narrow the query" : ""}`;
      this.results.replaceChildren(resultsTable(data.columns ?? [], rows));
      this.remember(query);
    } catch (error) {
      if (error.name === "AbortError") return;
      this.status.className = "error-text";
      this.status.setAttribute("role", "alert");
      this.status.textContent = `Query failed: ${error.message}`;
      this.results.replaceChildren();
    } finally {
      this.run.disabled = false;
    }
  }

  /** Save the current query under a name (this device); a name saved again is replaced. */
  save() {
    const name = this.saveName.value.trim();
    const query = this.query.value.trim();
    if (!name || !query) {
      this.saveName.focus();
      return;
    }
    const items = load(SAVED_KEY).filter((item) => item.name !== name);
    items.unshift({ name, query, workspace: this.workspace.value.trim() || "*" });
    store(SAVED_KEY, items);
    this.saveName.value = "";
    this.renderSaved();
  }

  renderSaved() {
    const items = load(SAVED_KEY);
    this.saved.replaceChildren(
      ...(items.length
        ? items.map((item) =>
            h(
              "li",
              { class: "saved__item" },
              h("button", { type: "button", class: "btn btn--link", title: item.query, onclick: () => {
                this.workspace.value = item.workspace || "*";
                this.use(item.query, true);
              } }, item.name),
              h("button", { type: "button", class: "btn btn--icon btn--ghost", "aria-label": `Delete saved question ${item.name}`, onclick: () => {
                store(SAVED_KEY, load(SAVED_KEY).filter((other) => other.name !== item.name));
                this.renderSaved();
              } }, "×"),
            ),
          )
        : [h("li", { class: "muted small" }, "Name a query and save it to keep it here.")]),
    );
  }

  remember(query) {
    let items = [];
    try {
      items = JSON.parse(localStorage.getItem(HISTORY_KEY) || "[]");
    } catch {
      items = [];
    }
    items = [query, ...items.filter((q) => q !== query)].slice(0, 15);
    try {
      localStorage.setItem(HISTORY_KEY, JSON.stringify(items));
    } catch {
      /* ignore */
    }
    this.renderHistory(items);
  }

  renderHistory(items) {
    if (!items) {
      try {
        items = JSON.parse(localStorage.getItem(HISTORY_KEY) || "[]");
      } catch {
        items = [];
      }
    }
    this.history.replaceChildren(
      ...(items.length
        ? items.map((q) => h("li", {}, h("button", { type: "button", class: "btn btn--link mono", title: q, onclick: () => this.use(q) }, q.length > 70 ? `${q.slice(0, 69)}…` : q)))
        : [h("li", { class: "muted" }, "Queries you run appear here.")]),
    );
  }

  dispose() {
    this.disposed = true;
    clearTimeout(this.retry);
    if (this.controller) this.controller.abort();
  }
}

function resultsTable(columns, rows) {
  if (!rows.length) return h("p", { class: "muted" }, "No rows.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "table", "aria-label": "Query results" },
      h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", { scope: "col" }, c)))),
      h(
        "tbody",
        {},
        ...rows.map((row) => h("tr", {}, ...columns.map((c) => {
          const value = row[c];
          return h("td", { class: typeof value === "number" ? "num" : "" }, value === null || value === undefined ? "" : typeof value === "object" ? h("pre", { class: "payload" }, payloadText(value)) : String(value));
        }))),
      ),
    ),
  );
}
