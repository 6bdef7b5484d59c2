// Keyed, incremental DOM rendering of a ConversationModel.
//
// Each view owns one element (`view.el`), created once and patched in place when the model marks
// it dirty; each rendered list (`Level`) owns one container and only grows at the end (a dropped
// "pending" placeholder is the one removal). `flush()` runs once per animation frame and costs
// O(views changed + items appended) — never a rebuild of the thread. Branch contents are built
// lazily the first time their <details> opens, so a 10k-node conversation with collapsed
// subagents creates only the elements on screen.

import { renderMarkdown } from "./markdown.js";
import { buildRelay, decideRelay, updateRelay } from "./relay.js";
import { formatClock, formatDuration, formatStamp } from "./time.js";
import { copyButton, formatNumber, formatTokens, fullText, h, MAX_PAYLOAD_CHARS, oneLine, payloadText, shortId } from "./util.js";

const NESTING = new Set(["tool_call", "repl"]);
const CHUNK = 50;
const SLICE_MIN = 50; // turns appended per flush however late it is
const STATUS_LABEL = { streaming: "running", complete: "done", error: "error" };

export class ThreadView {
  /**
   * @param {HTMLElement} root container for the top-level list
   * @param {import("./model.js").ConversationModel} model
   * @param {{onRelay: (relayId: string, approved: boolean, reason: string|null, always?: boolean) => Promise<void>,
   *          selection?: Map<string, number>, onSelect?: (viewId: string, index: number) => void}} options
   */
  constructor(root, model, options) {
    this.root = root;
    this.model = model;
    this.options = options;
    this.containers = new Map(); // Level -> container element
    this.selection = options.selection ?? new Map(); // view id -> chosen alternative (0 = main)
    root.classList.add("level");
    root._chunked = true;
    root.setAttribute("role", "feed");
    root.setAttribute("aria-busy", "false");
    // "toggle" does not bubble: one capturing listener builds a tool card's body on first open.
    root.addEventListener("toggle", (event) => {
      const card = event.target;
      if (card.open && card._view && card.classList.contains("tool")) this._toolBody(card._view);
    }, true);
    this.containers.set(model.top, root);
  }

  /** Apply pending model changes to the DOM. New turns are appended until `deadline`
   * (`performance.now()` time; at least SLICE_MIN of them): a level with more left stays dirty, and
   * the call returns true, so the caller renders the rest in the next frames (a 20k-event
   * conversation opened at once paints its first turns at once instead of after one long task).
   * Changes to turns already rendered are always applied. */
  flush(deadline = Infinity) {
    const { model } = this;
    const levels = model.dirtyLevels;
    const views = model.dirtyViews;
    model.dirtyLevels = new Set();
    model.dirtyViews = new Set();
    let more = false;
    for (const level of levels) {
      const container = this.containers.get(level);
      if (container && !this._reconcile(level, container, deadline)) {
        model.dirtyLevels.add(level);
        more = true;
      }
    }
    for (const view of views) {
      if (view.el && !view.removed) this._update(view);
    }
    return more;
  }

  /** Append the level's items not rendered yet, until `deadline`; returns whether all are. */
  _reconcile(level, container, deadline = Infinity) {
    if (level.shrunk) {
      const rendered = container._chunked ? container.querySelectorAll(":scope > .chunk > .turn") : container.children;
      for (const child of [...rendered]) if (child._view && child._view.removed) child.remove();
      container._rendered = [...container.querySelectorAll(":scope > .turn, :scope > .chunk > .turn")].length;
      level.shrunk = false;
    }
    const items = level.items;
    const start = container._rendered ?? 0;
    if (start >= items.length) return true;
    // Items after a view showing an alternative continuation stay hidden.
    const cutAt = level.cutView ? items.indexOf(level.cutView) : -1;
    let cutting = cutAt >= 0 && cutAt < start;
    const fragment = document.createDocumentFragment();
    let i = start;
    for (; i < items.length; i++) {
      if (i - start >= SLICE_MIN && (i - start) % 16 === 0 && performance.now() > deadline) break;
      const el = this._element(items[i]);
      if (cutting) el.hidden = true;
      fragment.append(el);
      if ((items[i].appliedSelection ?? 0) > 0) fragment.append(items[i].parts.alt);
      if (level.cutView === items[i]) cutting = true;
    }
    if (container._chunked) this._appendChunked(container, fragment);
    else container.append(fragment);
    container._rendered = i;
    return i >= items.length;
  }

  /** The top level goes into chunks of CHUNK turns, each `content-visibility: auto`: the browser
   * skips style, layout and paint of chunks off screen and tracks a few hundred boxes, not one
   * per turn. */
  _appendChunked(container, fragment) {
    let chunk = container.lastElementChild;
    const nodes = [...fragment.childNodes];
    for (const node of nodes) {
      if (!chunk || !chunk.classList.contains("chunk") || chunk._turns >= CHUNK) {
        chunk = h("div", { class: "chunk" });
        chunk._turns = 0;
        container.append(chunk);
      }
      chunk.append(node);
      if (node._view) chunk._turns += 1;
    }
  }

  _element(view) {
    if (view.el) return view.el;
    const label = view.role === "user" ? "User" : `Assistant ${view.kind.replace("_", " ")}`;
    const el = h("article", {
      class: `turn turn--${view.role} kind--${view.kind}`,
      tabindex: "-1",
      "data-id": view.id,
      "data-kind": view.kind,
      "data-run": view.runId,
      "aria-label": label,
    });
    el._view = view;
    view.el = el;
    view.parts = {};
    this._build(view, el);
    this._update(view);
    return el;
  }

  // -- building (once per view) -----------------------------------------------------------------

  _build(view, el) {
    const parts = view.parts;
    // Not a live region: a status per turn would make screen readers read every change.
    parts.status = h("span", { class: "status" });
    // When the turn happened, which is also the link to it (copied on click; app.js handles it for
    // every turn at once); "#" when the events carry no time.
    parts.time = h("a", { class: "turn__link", href: `#turn=${encodeURIComponent(view.id)}`, "aria-label": "Copy a link to this turn" }, "#");
    const meta = h(
      "div",
      { class: "turn__meta" },
      h("span", { class: "role" }, view.role === "user" ? "You" : this._who(view)),
      parts.status,
      parts.time,
    );
    el.append(meta);
    switch (view.kind) {
      case "user":
        parts.body = h("div", { class: "turn__text" });
        meta.append(copyButton(() => userText(view.content), "Copy message"));
        el.append(parts.body);
        break;
      case "text":
        // Model text is Markdown, rendered to DOM nodes (never HTML: see markdown.js).
        parts.body = h("div", { class: "turn__text md" });
        meta.append(copyButton(() => view.text, "Copy message"));
        el.append(parts.body);
        break;
      case "reasoning": {
        parts.body = h("div", { class: "turn__text reasoning__text" });
        parts.summary = h("summary", {}, "Reasoning");
        parts.details = h("details", { class: "reasoning" }, parts.summary, parts.body);
        el.append(parts.details);
        break;
      }
      case "pending":
        el.append(h("div", { class: "pending" }, h("span", { class: "dots", "aria-hidden": "true" }), "working…"));
        break;
      case "error":
        parts.body = h("div", { class: "error__message" });
        el.append(parts.body);
        break;
      case "tool_call":
        this._buildTool(view, el);
        break;
      case "relay":
        buildRelay(view, el, (approved, always) => decideRelay(view, approved, always, this.options.onRelay));
        break;
      case "repl":
        this._buildRepl(view, el);
        break;
      default:
        el.append(h("pre", { class: "payload" }, payloadText(view)));
    }
    parts.switcher = h("nav", { class: "switcher", "aria-label": "Alternative continuations", hidden: true });
    parts.branches = h("div", { class: "branches" });
    // An alternative continuation renders right after this turn, in place of the main one.
    parts.alt = h("div", { class: "alternative level" });
    el.append(parts.switcher, parts.branches);
  }

  _who(view) {
    const run = this.model.runs.get(view.runId);
    let agent = run && run.agentId;
    let current = run;
    const seen = new Set();
    while (!agent && current && current.parent && !seen.has(current.parent)) {
      seen.add(current.parent);
      current = this.model.runs.get(current.parent);
      agent = current && current.agentId;
    }
    return agent ? `Assistant · ${agent}` : "Assistant";
  }

  _buildTool(view, el) {
    const parts = view.parts;
    parts.title = h("span", { class: "tool__name" });
    parts.summaryLine = h("span", { class: "tool__summary" });
    parts.toolState = h("span", { class: "tool__state" });
    parts.duration = h("span", { class: "tool__duration" });
    parts.card = h(
      "details",
      { class: "tool" },
      h("summary", { class: "tool__header" }, h("span", { class: "tool__icon", "aria-hidden": "true" }, "⚙"), parts.title, parts.summaryLine, parts.duration, parts.toolState),
    );
    parts.card._view = view;
    // The body (input, progress, output) is built the first time the card opens: most cards of a
    // long thread are never opened (the root's capture listener for "toggle" builds it).
    parts.openTool = () => {
      this._toolBody(view);
      parts.card.open = true;
    };
    el.append(parts.card);
  }

  _toolBody(view) {
    const parts = view.parts;
    if (parts.input) return;
    parts.input = h("pre", { class: "payload" });
    parts.progress = h("pre", { class: "payload payload--progress" });
    parts.output = h("pre", { class: "payload" });
    const copyable = (pre, getText, label) => h("div", { class: "copyable" }, pre, copyButton(getText, label));
    parts.progressBox = h("details", { class: "tool__section", open: true, hidden: true }, h("summary", {}, "Progress"),
      copyable(parts.progress, () => progressText(view.progress, { full: true }), "Copy progress"));
    parts.outputBox = h("details", { class: "tool__section", hidden: true }, h("summary", {}, "Output"),
      copyable(parts.output, () => fullText(view.output), "Copy output"));
    parts.card.append(h("div", { class: "tool__body" }, h("details", { class: "tool__section", open: true }, h("summary", {}, "Input"),
      copyable(parts.input, () => fullText(view.input), "Copy input")), parts.progressBox, parts.outputBox));
    this._updateToolBody(view);
  }

  _buildRepl(view, el) {
    const parts = view.parts;
    parts.code = h("pre", { class: "repl__code" });
    parts.stdout = h("pre", { class: "payload repl__stdout" });
    parts.stderr = h("pre", { class: "payload repl__stderr" });
    parts.state = h("span", { class: "tool__state" });
    parts.card = h(
      "details",
      { class: "tool repl", open: true },
      h("summary", { class: "tool__header" }, h("span", { class: "tool__icon", "aria-hidden": "true" }, "›_"), h("span", { class: "tool__name" }, "REPL"), parts.iteration = h("span", { class: "tool__summary" }), parts.state),
      h("div", { class: "tool__body" }, h("div", { class: "copyable" }, parts.code, copyButton(() => view.code, "Copy code")), parts.stdout, parts.stderr),
    );
    el.append(parts.card);
  }

  // -- updating (on every change) ---------------------------------------------------------------

  _update(view) {
    const parts = view.parts;
    const el = view.el;
    const status = view.status;
    el.dataset.status = status;
    parts.status.className = `status status--${status}`;
    parts.status.textContent = view.role === "user" ? "" : STATUS_LABEL[status];
    switch (view.kind) {
      case "user":
        parts.body.textContent = userText(view.content);
        break;
      case "text":
        if (parts.shownText !== view.text) {
          parts.shownText = view.text;
          parts.body.replaceChildren(renderMarkdown(view.text, { copyButton }));
        }
        break;
      case "reasoning":
        parts.body.textContent = view.redacted
          ? "The provider redacted this thinking block; its encrypted payload is kept and sent back as is."
          : view.text;
        parts.summary.textContent = view.redacted
          ? "Redacted thinking"
          : `Reasoning · ${formatNumber(view.text.length)} chars`;
        break;
      case "error":
        parts.body.textContent = view.message;
        break;
      case "tool_call":
        this._updateTool(view);
        break;
      case "relay":
        updateRelay(view);
        break;
      case "repl":
        this._updateRepl(view);
        break;
      default:
    }
    this._updateTime(view);
    this._updateBranches(view);
  }

  /** When the turn started (time of day; the full date and time in its tooltip), how long it took
   * (a streamed turn: first to last delta; a tool call: call to result), and its model calls. */
  _updateTime(view) {
    const parts = view.parts;
    const start = view.start ?? null;
    const end = view.end ?? null;
    if (parts.shownStart !== start || parts.shownEnd !== end) {
      parts.shownStart = start;
      parts.shownEnd = end;
      const took = start !== null && end !== null && end > start ? end - start : null;
      if (start !== null) {
        parts.time.dataset.time = new Date(start).toISOString();
        parts.time.title = took ? `${formatStamp(start)} → ${formatStamp(end)}` : formatStamp(start);
        parts.time.textContent = formatClock(start) + (took && view.kind !== "tool_call" ? ` · ${formatDuration(took)}` : "");
        parts.time.setAttribute("aria-label", `${parts.time.textContent}: copy a link to this turn`);
      }
      if (parts.duration) parts.duration.textContent = took && view.hasOutput ? formatDuration(took) : "";
    }
    const calls = view.calls ?? [];
    if ((parts.shownCalls ?? 0) !== calls.length) {
      parts.shownCalls = calls.length;
      if (!parts.calls) {
        parts.calls = h("div", { class: "turn__calls" });
        parts.switcher.before(parts.calls);
      }
      parts.calls.replaceChildren(...calls.map((call) => h("div", { class: "model-call", "data-call": `${call.runId}#${call.index}` }, ...modelCallParts(call))));
    }
  }

  _updateTool(view) {
    const parts = view.parts;
    parts.title.textContent = view.name;
    if (parts.shownSummary !== view.input) {
      parts.shownSummary = view.input;
      parts.summaryLine.textContent = oneLine(view.input);
    }
    const state = toolState(view);
    if (parts.shownState !== state) {
      parts.shownState = state;
      parts.toolState.className = `tool__state tool__state--${state}`;
      parts.toolState.textContent = state;
      view.el.dataset.toolState = state;
    }
    if (parts.input) this._updateToolBody(view);
  }

  _updateToolBody(view) {
    const parts = view.parts;
    if (parts.shownInput !== view.input) {
      parts.shownInput = view.input;
      parts.input.textContent = payloadText(view.input);
    }
    if (view.progress && view.progress.count !== parts.shownProgress) {
      parts.shownProgress = view.progress.count;
      parts.progressBox.hidden = false;
      parts.progress.textContent = progressText(view.progress);
    }
    if (view.hasOutput && parts.shownOutput !== view.output) {
      parts.shownOutput = view.output;
      parts.outputBox.hidden = false;
      parts.output.textContent = payloadText(view.output);
    }
  }

  _updateRepl(view) {
    const parts = view.parts;
    parts.code.textContent = view.code;
    parts.iteration.textContent = view.iteration !== null ? `iteration ${view.iteration}` : "";
    const result = view.result;
    const stdout = result ? result.stdout || view.stdout : view.stdout;
    parts.stdout.textContent = payloadText(stdout);
    parts.stdout.hidden = !stdout;
    const stderr = [view.stderr, result && result.error].filter(Boolean).join("\n");
    parts.stderr.textContent = stderr;
    parts.stderr.hidden = !stderr;
    const state = !result ? (view.status === "streaming" ? "running" : "no result") : result.error ? "error" : result.done ? "final" : "done";
    parts.state.className = `tool__state tool__state--${state.replace(" ", "-")}`;
    parts.state.textContent = result && result.durationMs !== null ? `${state} · ${result.durationMs} ms` : state;
  }

  _updateBranches(view) {
    const branches = view.branches;
    const parts = view.parts;
    if (!branches.length) return;
    if (NESTING.has(view.kind)) {
      // Subagents: one collapsible region per child run, nested to any depth.
      parts.branchEls ??= new Map();
      for (const level of branches) {
        let entry = parts.branchEls.get(level);
        if (!entry) {
          entry = this._branchElement(level);
          parts.branchEls.set(level, entry);
          parts.branches.append(entry.details);
        }
        this._updateBranchSummary(level, entry);
      }
      return;
    }
    // Alternatives (a sibling continuation: an edit or a regeneration): a switcher.
    const count = branches.length + 1;
    const selected = Math.min(this.selection.get(view.id) ?? 0, count - 1);
    const switcher = parts.switcher;
    switcher.hidden = false;
    if ((view.appliedSelection ?? 0) !== selected) this._applySelection(view, selected);
    switcher.replaceChildren(
      h("button", { type: "button", class: "btn btn--icon", "aria-label": "Previous alternative", disabled: selected === 0, onclick: () => this.select(view, selected - 1) }, "‹"),
      h("span", { class: "switcher__count", "aria-live": "polite" }, `${selected + 1} / ${count}`),
      h("button", { type: "button", class: "btn btn--icon", "aria-label": "Next alternative", disabled: selected === count - 1, onclick: () => this.select(view, selected + 1) }, "›"),
    );
  }

  /** Show alternative `index` (0 = the main continuation) after `view`. */
  select(view, index) {
    this.selection.set(view.id, index);
    if (this.options.onSelect) this.options.onSelect(view.id, index);
    this._updateBranches(view);
  }

  _applySelection(view, index) {
    view.appliedSelection = index;
    const level = view.level;
    level.cutView = index > 0 ? view : null;
    // Hide the main continuation after the view when an alternative is chosen.
    const items = level.items;
    for (let i = items.indexOf(view) + 1; i < items.length; i++) if (items[i].el) items[i].el.hidden = index > 0;
    const alt = view.parts.alt;
    alt.replaceChildren();
    if (index > 0 && alt.previousElementSibling !== view.el) view.el.after(alt);
    if (index > 0) {
      const branch = view.branches[index - 1];
      const container = h("div", { class: "level", role: "feed", "aria-label": `Alternative ${index + 1}` });
      alt.append(container);
      this.containers.set(branch, container);
      this._reconcile(branch, container);
    }
  }

  _branchElement(level) {
    const summary = h("summary", { class: "branch__summary" });
    const body = h("div", { class: "level branch__body", role: "feed" });
    const details = h("details", { class: "branch", "data-level": level.key }, summary, body);
    const entry = { details, summary, body, built: false };
    // Built on first open, synchronously (expandAll descends right away).
    details._build = () => {
      if (entry.built) return;
      entry.built = true;
      this.containers.set(level, body);
      this._reconcile(level, body);
    };
    details.addEventListener("toggle", () => {
      if (details.open) details._build();
    });
    return entry;
  }

  _updateBranchSummary(level, entry) {
    const first = level.items[0];
    if (!first) return;
    const model = this.model;
    const runId = level.runId ?? first.runId;
    const run = model.runs.get(runId);
    const status = model.statusOf(runId);
    const usage = model.usageBelow(runId);
    const agent = run && run.agentId ? run.agentId : shortId(runId);
    const steps = level.items.length;
    entry.details.dataset.status = status;
    entry.summary.replaceChildren(
      h("span", { class: "branch__label" }, "Subagent"),
      h("span", { class: "branch__agent" }, agent),
      h("span", { class: `status status--${status}` }, STATUS_LABEL[status]),
      h("span", { class: "branch__stats" }, `${steps} step${steps === 1 ? "" : "s"}`),
      usage.calls ? h("span", { class: "branch__stats" }, `${formatTokens(usage.input)} in / ${formatTokens(usage.output)} out`) : null,
    );
  }

  /** Open every branch down to `depth` levels (keyboard shortcut "e"). */
  expandAll(depth = Infinity) {
    const open = (container, d) => {
      if (d <= 0) return;
      const selector = ":scope > .turn > .branches > details.branch, :scope > .chunk > .turn > .branches > details.branch";
      for (const details of container.querySelectorAll(selector)) {
        details.open = true;
        details._build();
        open(details.querySelector(":scope > .branch__body"), d - 1);
      }
    };
    open(this.root, depth);
  }

  /** Close every branch. */
  collapseAll() {
    for (const details of this.root.querySelectorAll("details.branch")) details.open = false;
  }
}

/** A model call as a line: "Model call · 980 in · 64 out · 1,536 cache read · 2.1 s". */
export function modelCallParts(call) {
  const items = [`${formatNumber(call.input)} in`, `${formatNumber(call.output)} out`];
  if (call.cacheRead) items.push(`${formatNumber(call.cacheRead)} cache read`);
  if (call.cacheCreation) items.push(`${formatNumber(call.cacheCreation)} cache write`);
  const took = call.start !== null && call.end !== null && call.end > call.start ? call.end - call.start : null;
  if (took) items.push(formatDuration(took));
  return [h("span", { class: "model-call__label" }, call.model ? `Model call · ${call.model}` : "Model call"), ` · ${items.join(" · ")}`];
}

function toolState(view) {
  if (view.hasOutput) {
    const out = view.output;
    if (out && typeof out === "object" && out.status === "denied") return "denied";
    if (out && typeof out === "object" && "error" in out && out.error) return "failed";
    return "done";
  }
  if (view.status === "error") return "failed";
  return view.status === "streaming" ? "running" : "no result";
}

/** A tool's progress as text: the end of long stdout / stderr (saying what was left out), or with
 * `full` all of it (for copying). */
function progressText(state, { full = false } = {}) {
  if (!state) return "";
  const cut = full ? (text) => text : tail;
  const lines = [];
  if (state.stdout) lines.push(cut(state.stdout));
  if (state.stderr) lines.push(`[stderr] ${cut(state.stderr)}`);
  const m = state.metrics;
  if (m) lines.push(`[pid ${m.pid}] cpu ${m.cpuPercent ?? "?"}% · rss ${m.rssKb ?? "?"} KB · ${m.wallMs ?? "?"} ms`);
  for (const content of state.other) lines.push(typeof content === "string" ? content : JSON.stringify(content));
  return lines.join("\n");
}

/** The end of a long log (the newest output matters most), saying how much was left out. */
function tail(text) {
  if (text.length <= MAX_PAYLOAD_CHARS) return text;
  return `… (${(text.length - MAX_PAYLOAD_CHARS).toLocaleString()} earlier characters not shown)\n${text.slice(-MAX_PAYLOAD_CHARS)}`;
}

function userText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return payloadText(content);
  return content
    .map((part) => (part.type === "text" ? part.text : `[${part.type}${part.mediaType ? `: ${part.mediaType}` : ""}]`))
    .join("\n");
}
