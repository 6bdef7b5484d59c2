// The timeline (waterfall) of a conversation: its runs, tool calls and model calls as bars on one
// time axis, nested as they ran (agent → its model calls and tool calls → the subagents a tool
// call spawned), and a table of the model calls with their tokens, cache use and latency.
//
// Built from the client model (times come from the events' `timestamp`s: time.js), on demand when
// the tab is shown and at most once a second while it stays open. O(runs + tool calls + model
// calls) per build; at most MAX_ROWS rows are drawn (the rest is counted).

import { formatDuration, formatStamp } from "./time.js";
import { formatTokens, h, oneLine, shortId } from "./util.js";

const MAX_ROWS = 3000;

/** The rows of the waterfall, depth first: {key, kind, label, detail, depth, start, end, status,
 * viewId, runId}. `kind`: "agent" (a run with an agent id), "user" (your messages), "run", "llm"
 * (a run that is one model call), "call" (one of several model calls of a run), "tool". Children
 * are ordered by start. */
export function timelineRows(model) {
  const claimed = new Set(); // runs shown under the tool call (or REPL turn) that spawned them
  for (const view of [...model.calls.values(), ...model.repls.values()]) {
    for (const level of view.branches) if (level.runId) claimed.add(level.runId);
  }
  const callsByRun = new Map();
  for (const call of model.modelCalls) {
    let list = callsByRun.get(call.runId);
    if (!list) callsByRun.set(call.runId, (list = []));
    list.push(call);
  }
  const rows = [];
  const seen = new Set();
  // By start time; entries that share one (timestamps are often milliseconds) in arrival order.
  const byStart = (a, b) => (a.start ?? Infinity) - (b.start ?? Infinity) || (a.seq ?? 0) - (b.seq ?? 0);

  const runEntry = (runId) => {
    const run = model.runs.get(runId);
    return run ? { type: "run", run, start: run.start, seq: run.seq } : null;
  };
  const visitRun = (run, depth) => {
    if (seen.has(run.id)) return;
    seen.add(run.id);
    const calls = callsByRun.get(run.id) ?? [];
    const tools = run.views.filter((v) => v.kind === "tool_call" || v.kind === "repl");
    const singleCall = !run.agentId && calls.length === 1 && !tools.length;
    const user = !run.agentId && run.views.length > 0 && run.views.every((v) => v.kind === "user");
    const status = model.statusOf(run.id);
    rows.push({
      key: `run:${run.id}`,
      kind: run.agentId ? "agent" : singleCall ? "llm" : user ? "user" : "run",
      label: run.agentId ?? (singleCall ? "model call" : user ? "you" : shortId(run.id)),
      detail: singleCall ? callDetail(calls[0]) : user ? oneLine(userText(run.views[0].content), 60) : usageDetail(model.usageBelow(run.id)),
      depth, start: run.start, end: run.end, status, runId: run.id,
      viewId: run.views.find((v) => v.kind !== "pending")?.id ?? null,
    });
    const children = [
      ...tools.map((view) => ({ type: "tool", view, start: view.start, seq: view.seq })),
      ...run.children.filter((id) => !claimed.has(id)).map(runEntry).filter(Boolean),
      ...(singleCall ? [] : calls.map((call) => ({ type: "call", call, start: call.start, seq: call.seq }))),
    ].sort(byStart);
    for (const child of children) {
      if (child.type === "run") visitRun(child.run, depth + 1);
      else if (child.type === "call") {
        const call = child.call;
        rows.push({
          key: `call:${call.runId}#${call.index}`, kind: "call", label: `model call ${call.index + 1}`,
          detail: callDetail(call), depth: depth + 1, start: call.start, end: call.end, status, runId: run.id,
          viewId: null,
        });
      } else {
        const view = child.view;
        const name = view.kind === "repl" ? `REPL${view.iteration !== null ? ` ${view.iteration}` : ""}` : view.name;
        rows.push({
          key: `tool:${view.id}`, kind: "tool", label: name, detail: view.kind === "repl" ? "" : toolDetail(view),
          depth: depth + 1, start: view.start, end: view.end, status: toolStatus(view), runId: run.id, viewId: view.id,
        });
        const spawned = view.branches.map((level) => runEntry(level.runId)).filter(Boolean).sort(byStart);
        for (const entry of spawned) visitRun(entry.run, depth + 2);
      }
    }
  };
  const roots = [...model.runs.values()].filter((run) => run.parent === null && (run.views.length || run.hasLifecycle || callsByRun.has(run.id)));
  for (const run of roots.sort(byStart)) visitRun(run, 0);
  return rows;
}

function userText(content) {
  if (typeof content === "string") return content;
  return Array.isArray(content) ? content.map((part) => part.text ?? "").join(" ") : "";
}

function usageDetail(usage) {
  return usage.calls ? `${formatTokens(usage.input)} in / ${formatTokens(usage.output)} out` : "";
}

function callDetail(call) {
  const cache = call.cacheRead ? ` · ${formatTokens(call.cacheRead)} cached` : "";
  return `${formatTokens(call.input)} → ${formatTokens(call.output)}${cache}`;
}

function toolDetail(view) {
  return toolStatus(view) === "streaming" ? "running" : "";
}

function toolStatus(view) {
  if (view.kind === "repl") return view.result ? (view.result.error ? "error" : "complete") : view.status;
  if (view.hasOutput) {
    const out = view.output;
    return out && typeof out === "object" && (out.error || out.status === "denied") ? "error" : "complete";
  }
  return view.status === "error" ? "error" : view.status;
}

export class TimelineView {
  /** @param {HTMLElement} container  @param {import("./model.js").ConversationModel} model
   *  @param {(row: {viewId: string|null, runId: string}) => void} onShow show a row's turn in the thread */
  constructor(container, model, onShow) {
    this.container = container;
    this.model = model;
    this.onShow = onShow;
    this.built = -1; // the model's event count at the last build
  }

  /** Rebuild when the model changed since the last build. */
  refresh() {
    if (this.model.eventCount === this.built) return;
    this.built = this.model.eventCount;
    const model = this.model;
    if (model.firstTime === null) {
      this.container.replaceChildren(h("p", { class: "muted timeline__empty" },
        "No timestamps yet: the timeline places events by their `timestamp` field, and these events have none."));
      return;
    }
    const rows = timelineRows(model);
    const t0 = model.firstTime;
    const span = Math.max(1, model.lastTime - t0);
    const axis = h("div", { class: "tl-axis", "aria-hidden": "true" },
      ...[0, 0.25, 0.5, 0.75, 1].map((f) => {
        const tick = h("span", { class: "tl-tick" }, f === 0 ? "0 s" : `+${formatDuration(span * f)}`);
        tick.style.left = `${f * 100}%`;
        return tick;
      }));
    const list = h("div", { class: "tl-rows", role: "list", "aria-label": "Runs, tool calls and model calls in time order" });
    for (const row of rows.slice(0, MAX_ROWS)) list.append(this._row(row, t0, span));
    const more = rows.length > MAX_ROWS ? h("p", { class: "muted" }, `${(rows.length - MAX_ROWS).toLocaleString()} more rows not shown.`) : null;
    this.container.replaceChildren(
      h("p", { class: "muted small tl-caption" }, `Started ${formatStamp(t0)} · ${formatDuration(model.lastTime - t0) || "0 ms"} in all · click a row to see it in the thread`),
      h("div", { class: "tl-head" }, h("span", { class: "tl-head__name" }, "Run / call"), h("span", { class: "tl-head__dur" }, "Duration"), h("div", { class: "tl-track" }, axis)),
      list,
      ...[more, this._callsTable(t0)].filter(Boolean),
    );
  }

  _row(row, t0, span) {
    const took = row.start !== null && row.end !== null ? row.end - row.start : null;
    const bar = h("span", { class: `tl-bar tl-bar--${row.kind} tl-bar--${row.status}` });
    if (row.start !== null) {
      bar.style.left = `${((row.start - t0) / span) * 100}%`;
      bar.style.width = `${(Math.max(0, took ?? 0) / span) * 100}%`;
    } else bar.hidden = true;
    const name = h("span", { class: "tl-name" }, h("span", { class: `tl-kind tl-kind--${row.kind}` }, KIND_LABEL[row.kind]), h("span", { class: "tl-label" }, row.label), row.detail ? h("span", { class: "tl-detail" }, row.detail) : null);
    name.style.setProperty("--depth", String(row.depth)); // indented by the stylesheet (less on phones)
    const when = row.start !== null ? `${formatStamp(row.start)}${took ? ` → ${formatStamp(row.end)}` : ""}` : "no timestamp";
    const button = h("button", {
      type: "button", class: "tl-row", role: "listitem", "data-key": row.key, "data-kind": row.kind, title: when,
      "aria-label": `${KIND_LABEL[row.kind]} ${row.label}${row.detail ? `, ${row.detail}` : ""}, ${took !== null ? formatDuration(took) : "no duration"}, ${row.status === "complete" ? "done" : row.status}`,
      disabled: !row.viewId && !row.runId,
      onclick: () => this.onShow(row),
    }, name, h("span", { class: "tl-dur" }, took !== null ? formatDuration(took) : "–"), h("span", { class: "tl-track" }, bar));
    return button;
  }

  _callsTable(t0) {
    const calls = this.model.modelCalls;
    if (!calls.length) return null;
    const agentOf = (runId) => {
      const seen = new Set();
      for (let run = this.model.runs.get(runId); run && !seen.has(run.id); run = this.model.runs.get(run.parent)) {
        seen.add(run.id);
        if (run.agentId) return run.agentId;
      }
      return shortId(runId);
    };
    const num = (n) => h("td", { class: "num" }, n ? n.toLocaleString() : "–");
    const body = h("tbody", {}, ...calls.map((call, i) => {
      const took = call.start !== null && call.end !== null && call.end > call.start ? call.end - call.start : null;
      return h("tr", { "data-call": `${call.runId}#${call.index}` },
        h("td", { class: "num" }, String(i + 1)),
        h("td", {}, agentOf(call.runId), call.model ? h("div", { class: "muted small" }, call.model) : null),
        h("td", { class: "num", title: call.start !== null ? formatStamp(call.start) : "" }, call.start !== null ? `+${formatDuration(call.start - t0) || "0 ms"}` : "–"),
        h("td", { class: "num" }, took ? formatDuration(took) : "–"),
        num(call.input), num(call.output), num(call.cacheRead), num(call.cacheCreation));
    }));
    // Cache reads and writes as the producer counted them (whether input includes cached tokens
    // differs between providers, so no hit ratio is derived).
    const head = ["#", "Agent", "Start", "Latency", "Input", "Output", "Cache read", "Cache write"];
    return h("section", { class: "tl-calls" },
      h("h2", {}, `Model calls (${calls.length.toLocaleString()})`),
      h("p", { class: "muted small" }, "Latency: from the call's first event to its usage event (the events carry no request time)."),
      h("div", { class: "table-wrap" }, h("table", { class: "table", "aria-label": "Model calls" },
        h("thead", {}, h("tr", {}, ...head.map((t, k) => h("th", { scope: "col", class: k === 1 ? null : "num" }, t)))), body)));
  }
}

const KIND_LABEL = { agent: "agent", run: "run", user: "user", llm: "LLM", call: "LLM", tool: "tool" };
