// The find bar of a conversation: search its thread (js/search.js) by text, kind, status and tool;
// the matches in a list (click to go there), "n of m" with previous / next (Enter, Shift+Enter),
// and the matching text of the current turn highlighted with the CSS Custom Highlight API (no
// change to the thread's DOM).

import { marked } from "./list.js";
import { KINDS, searchThread, snippet } from "./search.js";
import { h } from "./util.js";

const SHOWN = 200; // matches listed (all are counted and reachable with next / previous)
const HIGHLIGHT = "convograph-find";
const KIND_LABELS = { all: "Everything", messages: "Messages", tools: "Tool calls", reasoning: "Reasoning", errors: "Errors" };
const KIND_OF = { user: "you", text: "text", reasoning: "reasoning", tool_call: "tool", repl: "REPL", relay: "relay", error: "error" };

export class FindBar {
  /**
   * @param {{model: () => object, reveal: (view: object) => void, toolNames: () => string[],
   *          who: (view: object) => string}} options
   */
  constructor({ model, reveal, toolNames, who }) {
    this.getModel = model;
    this.reveal = reveal;
    this.toolNames = toolNames;
    this.who = who;
    this.results = [];
    this.index = -1;
    this.lastMs = null; // how long the last search took (for the benchmark)
    this.input = h("input", { type: "search", class: "input find__input", id: "find", placeholder: "Search this conversation ( / )", "aria-label": "Search this conversation", autocomplete: "off" });
    this.kind = h("select", { class: "input input--select", "aria-label": "Kind of turn" }, ...Object.keys(KINDS).map((k) => h("option", { value: k }, KIND_LABELS[k])));
    this.status = h("select", { class: "input input--select", "aria-label": "Status" },
      h("option", { value: "" }, "Any status"), h("option", { value: "running" }, "running"), h("option", { value: "done" }, "done"), h("option", { value: "error" }, "error"));
    this.tool = h("select", { class: "input input--select", "aria-label": "Tool" }, h("option", { value: "" }, "Any tool"));
    this.count = h("span", { class: "find__count muted", "aria-live": "polite" });
    this.prev = h("button", { type: "button", class: "btn btn--icon", "aria-label": "Previous match", onclick: () => this.step(-1) }, "‹");
    this.next = h("button", { type: "button", class: "btn btn--icon", "aria-label": "Next match", onclick: () => this.step(1) }, "›");
    this.list = h("ol", { class: "find__results", "aria-label": "Matches", hidden: true });
    this.element = h("div", { class: "find", role: "search", "aria-label": "Search this conversation" },
      h("div", { class: "find__bar" }, this.input, this.kind, this.status, this.tool, (this.nav = h("span", { class: "find__nav" }, this.prev, this.count, this.next))),
      this.list);
    this.input.addEventListener("input", () => this.run());
    for (const select of [this.kind, this.status, this.tool]) select.addEventListener("change", () => this.run());
    this.tool.addEventListener("focus", () => this.refreshTools());
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        this.step(event.shiftKey ? -1 : 1);
      } else if (event.key === "Escape") {
        this.clear();
      }
    });
    this.refreshTools();
    this._showCount();
  }

  get active() {
    return Boolean(this.input.value.trim() || this.kind.value !== "all" || this.status.value || this.tool.value);
  }

  /** Offer the tools the conversation called so far (call when it may have called a new one). */
  refreshTools() {
    const names = [...new Set(this.toolNames())].sort();
    const key = names.join("\n");
    if (key === this.tool._names) return;
    this.tool._names = key;
    const chosen = this.tool.value;
    this.tool.replaceChildren(h("option", { value: "" }, "Any tool"), ...names.map((n) => h("option", { value: n }, n)));
    this.tool.value = chosen;
  }

  /** Search again (after typing, a filter change, or new events while a search is shown). */
  run({ keepPlace = false } = {}) {
    if (!this.active) {
      this.results = [];
      this.index = -1;
      this.list.hidden = true;
      this.list.replaceChildren();
      this._highlight(null);
      this._showCount();
      return;
    }
    const started = performance.now();
    const current = this.results[this.index]?.view;
    this.results = searchThread(this.getModel(), { text: this.input.value, kind: this.kind.value, status: this.status.value, tool: this.tool.value });
    this.lastMs = performance.now() - started;
    this.index = keepPlace && current ? this.results.findIndex((r) => r.view === current) : -1;
    this._renderList();
    this._showCount();
  }

  _renderList() {
    const needle = this.input.value.trim();
    const items = this.results.slice(0, SHOWN).map((result, i) => {
      const view = result.view;
      const label = view.kind === "tool_call" ? view.name : KIND_OF[view.kind] ?? view.kind;
      const button = h("button", { type: "button", class: "find__result", "data-id": view.id, onclick: () => this.go(i) },
        h("span", { class: `find__kind find__kind--${view.kind}` }, label),
        h("span", { class: "find__who muted" }, this.who(view)),
        h("span", { class: "find__snippet" }, marked(snippet(view, result.at, needle.length), needle)));
      return h("li", {}, button);
    });
    if (this.results.length > SHOWN) items.push(h("li", { class: "muted small" }, `${(this.results.length - SHOWN).toLocaleString()} more: use next / previous`));
    this.list.replaceChildren(...items);
    this.list.hidden = false;
  }

  _showCount() {
    const n = this.results.length;
    this.count.textContent = !this.active ? "" : n === 0 ? "no matches" : this.index >= 0 ? `${this.index + 1} of ${n.toLocaleString()}` : `${n.toLocaleString()} match${n === 1 ? "" : "es"}`;
    this.prev.disabled = this.next.disabled = n === 0;
    this.nav.hidden = !this.active;
  }

  step(delta) {
    if (!this.results.length) return;
    const n = this.results.length;
    this.go(this.index < 0 ? (delta > 0 ? 0 : n - 1) : (this.index + delta + n) % n);
  }

  /** Go to match `i`: open the subagents that hold it, scroll to it, highlight its text. */
  go(i) {
    const result = this.results[i];
    if (!result) return;
    this.index = i;
    this._showCount();
    for (const el of this.list.querySelectorAll("[aria-current]")) el.removeAttribute("aria-current");
    this.list.querySelector(`li:nth-child(${i + 1}) > button`)?.setAttribute("aria-current", "true");
    this.reveal(result.view);
    this._highlight(result.view);
  }

  _highlight(view) {
    for (const el of document.querySelectorAll(".turn--match")) el.classList.remove("turn--match");
    if (view && view.el) view.el.classList.add("turn--match");
    const highlights = typeof CSS !== "undefined" ? CSS.highlights : undefined;
    if (!highlights) return;
    highlights.delete(HIGHLIGHT);
    const needle = this.input.value.trim().toLowerCase();
    if (!view || !view.el || !needle) return;
    const ranges = [];
    const walker = document.createTreeWalker(view.el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node && ranges.length < 100; node = walker.nextNode()) {
      const lower = node.data.toLowerCase();
      for (let at = lower.indexOf(needle); at >= 0; at = lower.indexOf(needle, at + needle.length)) {
        const range = new Range();
        range.setStart(node, at);
        range.setEnd(node, at + needle.length);
        ranges.push(range);
      }
    }
    if (ranges.length) highlights.set(HIGHLIGHT, new Highlight(...ranges));
  }

  clear() {
    this.input.value = "";
    this.kind.value = "all";
    this.status.value = "";
    this.tool.value = "";
    this.run();
  }
}
