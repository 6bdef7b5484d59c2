// Client-side conversation model: wire events (in seq order) -> nested thread views.
//
// A port of convograph.graph.reducer (node ids, the incoming edge of each node) and
// convograph.projections.thread.ThreadBuilder (placement, merging, status), so the viewer
// updates in O(1) per event instead of refetching /thread. Extensions the server's /thread
// does not have (documented in docs/web.md): REPL cells (repl_input/progress/output, with
// child RLM runs nested under their cell; the server has them only behind ?repl=1), relay decisions (relay_resolved), usage totals,
// and generic tool progress for tools without a registered accumulator.
//
// Invariants: an event whose seq is <= lastSeq, or whose eventId was seen, changes nothing
// (so a resumed stream can overlap without duplicating). Every view created or changed is
// added to `dirtyViews`; every list that grew or shrank to `dirtyLevels`. The renderer
// drains both once per animation frame.

import { foldProgress, newProgress } from "./progress.js";
import { eventTime } from "./time.js";

const CONTENT_KINDS = new Set(["text", "reasoning", "tool_call", "user", "error", "relay", "repl"]);
const NESTING_KINDS = new Set(["tool_call", "repl"]); // children always nest, never promote
const SUFFIX = { harness_start: ":harness_start", harness_end: ":harness_end", error: ":error", user: ":user" };
const NODE_KINDS = new Set([
  "text", "reasoning", "tool_call", "tool_result", "tool_progress", "user",
  "harness_start", "harness_end", "error", "usage", "relay", "repl_input",
]);

let levelCounter = 0;

/** One list of views: the top level, or one branch of `owner` (attached on first view). */
export class Level {
  constructor(owner, runId = null) {
    this.key = `L${levelCounter++}`;
    this.owner = owner;
    this.runId = runId; // the run this branch was opened for (a subagent), null for the top level
    this.items = [];
    this.attached = owner === null;
    this.shrunk = false; // a view was removed since the last render
  }
}

class Run {
  constructor(id) {
    this.id = id;
    this.started = false;
    this.ended = false;
    this.errored = false;
    this.parent = null;
    this.children = [];
    this.views = [];
    this.agentId = null;
    this.usage = { input: 0, output: 0, cacheRead: 0, cacheCreation: 0, calls: 0 };
    this.start = null; // time (ms) of the run's first and last timestamped events
    this.end = null;
    this.callStart = null; // time of the first event since the run's last usage: the next model call's start
  }
  get hasLifecycle() {
    return this.started || this.ended || this.errored;
  }
}

export class ConversationModel {
  constructor() {
    this.lastSeq = 0;
    this.eventCount = 0;
    this.top = new Level(null);
    this.nodes = new Map(); // node id -> {id, kind, run, event, level, view}
    this.lastByRun = new Map();
    this.runs = new Map();
    this.calls = new Map(); // tool call id -> view
    this.results = new Map();
    this.progress = new Map(); // call id -> [{name, content}]
    this.relayParams = new Map(); // tool call id -> params
    this.relays = new Map(); // relay id -> view
    this.decisions = new Map(); // relay id -> {approved, always, reason}
    this.repls = new Map(); // repl id -> view
    this.pendingViews = new Map(); // run id -> [level, view]
    this.promoted = new Set();
    this.hasContinuation = new Set();
    this.seenEventIds = new Set();
    this.usage = { input: 0, output: 0, cacheRead: 0, cacheCreation: 0, calls: 0 };
    this.errors = 0;
    this.errorViews = [];
    this.modelCalls = []; // one per usage event: {runId, index, input, output, cacheRead, cacheCreation, start, end, model}
    this.now = null; // time (ms) of the event being applied, null without a timestamp
    this.firstTime = null;
    this.lastTime = null;
    this.dirtyViews = new Set();
    this.dirtyLevels = new Set();
    this.dirtyMeta = false;
    this.viewCount = 0;
  }

  /** Apply one wire event (with `seq`). Returns true when it was new. */
  apply(event) {
    const seq = typeof event.seq === "number" ? event.seq : null;
    if (seq !== null) {
      if (seq <= this.lastSeq) return false;
      this.lastSeq = seq;
    }
    if (event.eventId) {
      if (this.seenEventIds.has(event.eventId)) return false;
      this.seenEventIds.add(event.eventId);
    }
    this.eventCount += 1;
    this.dirtyMeta = true;
    this._clock(event);
    const type = event.type;
    if (type === "relay_resolved") return this._resolveRelay(event), true;
    if (type === "repl_progress") return this._replProgress(event), true;
    if (type === "repl_output") return this._replOutput(event), true;
    if (!NODE_KINDS.has(type)) return true; // connected and unknown types: counted only
    const runId = event.runId ?? "_stream";
    const nodeId = this._nodeId(event, runId);
    const existing = this.nodes.get(nodeId);
    if (existing) {
      if (existing.kind === type) this._update(existing, event);
      return true;
    }
    // The incoming edge: the run's previous node, else parentId (a node, else a run's newest node).
    let parent = this.lastByRun.get(runId) ?? null;
    if (parent === null && event.parentId && event.parentId !== nodeId) {
      if (this.nodes.has(event.parentId)) parent = event.parentId;
      else parent = this.lastByRun.get(event.parentId) ?? null;
    }
    this.lastByRun.set(runId, nodeId);
    const node = { id: nodeId, kind: type, run: runId, event, level: null, view: null, text: "" };
    this.nodes.set(nodeId, node);
    this._add(node, parent);
    return true;
  }

  /** Note the event's time: the conversation's span, its run's span, the run's next call start. */
  _clock(event) {
    const t = eventTime(event.timestamp);
    this.now = t;
    if (t === null) return;
    if (this.firstTime === null || t < this.firstTime) this.firstTime = t;
    if (this.lastTime === null || t > this.lastTime) this.lastTime = t;
    if (!event.runId) return;
    const run = this._run(event.runId);
    if (run.start === null || t < run.start) run.start = t;
    if (run.end === null || t > run.end) run.end = t;
    if (run.callStart === null && event.type !== "usage") run.callStart = t;
  }

  _nodeId(event, runId) {
    const suffix = SUFFIX[event.type];
    if (suffix) return runId + suffix;
    if (event.type === "tool_result") return `${event.id}:result`;
    if (event.type === "usage") {
      const run = this._run(runId);
      return `${runId}:usage:${run.usage.calls}`;
    }
    return event.id;
  }

  _run(id) {
    let run = this.runs.get(id);
    if (!run) {
      run = new Run(id);
      run.seq = this.lastSeq; // the seq of the event that named it first (orders runs that share a time)
      this.runs.set(id, run);
    }
    return run;
  }

  statusOf(runId) {
    const seen = new Set();
    let current = runId;
    while (current !== null && !seen.has(current)) {
      seen.add(current);
      const run = this.runs.get(current);
      if (!run) return "complete";
      if (run.errored) return "error";
      if (run.ended) return "complete";
      if (run.started) return "streaming";
      current = run.parent;
    }
    return "complete";
  }

  _restamp(runId) {
    const stack = [runId];
    const seen = new Set();
    while (stack.length) {
      const current = stack.pop();
      if (seen.has(current)) continue;
      seen.add(current);
      const run = this.runs.get(current);
      if (!run) continue;
      const status = this.statusOf(current);
      for (const view of run.views) {
        if (view.role !== "user" && view.status !== status) {
          view.status = status;
          this.dirtyViews.add(view);
        }
      }
      if (run.branchOwners) for (const owner of run.branchOwners) this.dirtyViews.add(owner);
      for (const child of run.children) {
        const childRun = this.runs.get(child);
        if (childRun && !childRun.hasLifecycle) stack.push(child);
      }
    }
  }

  // -- levels ----------------------------------------------------------------------------------

  _append(level, view) {
    const items = level.items;
    if (items.length && items[items.length - 1].kind === "pending") {
      this._dropPending(items[items.length - 1].runId);
    }
    view.level = level;
    items.push(view);
    if (!level.attached && level.owner) {
      level.owner.branches.push(level);
      level.attached = true;
      const run = this._run(view.runId);
      (run.branchOwners ??= []).push(level.owner);
      this.dirtyViews.add(level.owner);
    }
    this._run(view.runId).views.push(view);
    this.dirtyViews.add(view);
    this.dirtyLevels.add(level);
    this.viewCount += 1;
  }

  _dropPending(runId) {
    const entry = this.pendingViews.get(runId);
    if (!entry) return;
    this.pendingViews.delete(runId);
    const [level, view] = entry;
    const index = level.items.lastIndexOf(view);
    if (index >= 0) level.items.splice(index, 1);
    const runViews = this._run(runId).views;
    const runIndex = runViews.lastIndexOf(view);
    if (runIndex >= 0) runViews.splice(runIndex, 1);
    if (!level.items.length && level.attached && level.owner) {
      const branches = level.owner.branches;
      const b = branches.indexOf(level);
      if (b >= 0) branches.splice(b, 1);
      level.attached = false;
      this.dirtyViews.add(level.owner);
    }
    level.shrunk = true;
    view.removed = true;
    this.dirtyLevels.add(level);
    this.viewCount -= 1;
  }

  _place(node, parentId) {
    const parent = parentId === null ? null : this.nodes.get(parentId);
    if (!parent || !parent.level) return this.top;
    if (parent.run === node.run) {
      this.hasContinuation.add(parentId);
      return parent.level;
    }
    const run = this._run(node.run);
    if (run.parent === null) {
      run.parent = parent.run;
      this._run(parent.run).children.push(node.run);
    }
    const parentView = parent.view;
    if (NESTING_KINDS.has(parent.kind === "repl_input" ? "repl" : parent.kind)) {
      return parentView ? new Level(parentView, node.run) : parent.level;
    }
    if (CONTENT_KINDS.has(parent.kind) && parentView) {
      if (!this.hasContinuation.has(parentId) && !this.promoted.has(parentId)) {
        this.promoted.add(parentId);
        return parent.level;
      }
      return new Level(parentView, node.run);
    }
    return parent.level;
  }

  _newView(node, kind, fields, id = node.id) {
    const role = kind === "user" ? "user" : "assistant";
    return {
      id,
      kind,
      runId: node.run,
      role,
      status: role === "user" ? "complete" : this.statusOf(node.run),
      branches: [],
      level: null,
      seq: node.event.seq ?? null,
      timestamp: node.event.timestamp ?? null,
      start: this.now, // ms; a streamed turn or a tool call ends later (`end`)
      end: this.now,
      ...fields,
    };
  }

  _add(node, parentId) {
    if (this.pendingViews.has(node.run)) this._dropPending(node.run);
    const level = this._place(node, parentId);
    node.level = level;
    const run = this._run(node.run);
    const ev = node.event;
    switch (node.kind) {
      case "harness_start":
        run.started = true;
        run.agentId = ev.agentId ?? run.agentId;
        this._restamp(node.run);
        if (this.statusOf(node.run) === "streaming") {
          const view = this._newView(node, "pending", {});
          this._append(level, view);
          this.pendingViews.set(node.run, [level, view]);
        }
        return;
      case "harness_end":
        run.ended = true;
        this._restamp(node.run);
        return;
      case "error": {
        run.errored = true;
        this.errors += 1;
        this._restamp(node.run);
        const view = this._newView(node, "error", { message: ev.message });
        node.view = view;
        this.errorViews.push(view);
        this._append(level, view);
        return;
      }
      case "usage":
        this._addUsage(node.run, ev);
        return;
      case "text":
      case "reasoning":
        this._addText(node, level);
        return;
      case "tool_call":
        this._addToolCall(node, level);
        return;
      case "tool_result":
        this._addToolResult(node, level);
        return;
      case "tool_progress":
        this._addProgress(node);
        return;
      case "user": {
        const view = this._newView(node, "user", { content: ev.content });
        node.view = view;
        this._append(level, view);
        return;
      }
      case "relay": {
        this.relayParams.set(ev.toolCallId, ev.params ?? {});
        const view = this._newView(node, "relay", {
          relayKind: ev.kind, toolCallId: ev.toolCallId, tool: ev.tool, params: ev.params ?? {},
          decision: this.decisions.get(ev.id) ?? null,
        });
        node.view = view;
        this.relays.set(ev.id, view);
        this._append(level, view);
        return;
      }
      case "repl_input": {
        const view = this._newView(node, "repl", {
          code: ev.code, iteration: ev.iteration ?? null, stdout: "", stderr: "", result: null,
        });
        node.view = view;
        this.repls.set(ev.id, view);
        this._append(level, view);
        return;
      }
      default:
    }
  }

  _update(node, event) {
    const view = node.view;
    switch (node.kind) {
      case "text":
      case "reasoning":
        node.text += event.content;
        if (event.signature) {
          node.signature = event.signature;
          if (view && view.members.length === 1) view.sealed = true;
        }
        if (view) {
          // O(delta) for the usual case (the stream being extended is the view's newest member);
          // a delta to an earlier merged member rebuilds the text.
          if (view.members[view.members.length - 1] === node) view.text += event.content;
          else view.text = view.members.map((m) => m.text).join("");
          if (this.now !== null) view.end = this.now;
          this.dirtyViews.add(view);
        }
        return;
      case "tool_call":
        if (view) {
          view.name = event.name;
          view.input = event.input;
          this.dirtyViews.add(view);
        }
        return;
      case "tool_result": {
        const callId = event.id;
        this.results.set(callId, event.output);
        const call = this.calls.get(callId);
        if (call) {
          call.output = event.output;
          call.hasOutput = true;
          if (this.now !== null) call.end = this.now;
          this.dirtyViews.add(call);
        }
        return;
      }
      default:
        if (view && node.kind === "error") {
          view.message = event.message;
          this.dirtyViews.add(view);
        }
    }
  }

  _addUsage(runId, ev) {
    const add = (u) => {
      u.input += ev.inputTokens ?? 0;
      u.output += ev.outputTokens ?? 0;
      u.cacheRead += ev.cacheReadTokens ?? 0;
      u.cacheCreation += ev.cacheCreationTokens ?? 0;
      u.calls += 1;
    };
    const run = this._run(runId);
    const call = {
      runId, index: run.usage.calls, seq: this.lastSeq, input: ev.inputTokens ?? 0, output: ev.outputTokens ?? 0,
      cacheRead: ev.cacheReadTokens ?? 0, cacheCreation: ev.cacheCreationTokens ?? 0,
      start: run.callStart ?? this.now, end: this.now, model: typeof ev.model === "string" ? ev.model : null,
    };
    run.callStart = null;
    this.modelCalls.push(call);
    // Shown on the run's newest turn (the call's answer, for a run per model call).
    const view = run.views[run.views.length - 1];
    if (view) {
      (view.calls ??= []).push(call);
      this.dirtyViews.add(view);
    }
    add(this.usage);
    add(run.usage);
    // Let branch headers that sum usage over their runs refresh.
    let current = runId;
    const seen = new Set();
    while (current && !seen.has(current)) {
      seen.add(current);
      const run = this.runs.get(current);
      if (!run) break;
      if (run.branchOwners) for (const owner of run.branchOwners) this.dirtyViews.add(owner);
      current = run.parent;
    }
  }

  _addText(node, level) {
    node.text = node.event.content ?? "";
    if (node.event.signature) node.signature = node.event.signature;
    if (node.event.redactedData) node.redactedData = node.event.redactedData;
    // A signed or redacted thinking block is a view of its own (the server's rule: its signature
    // covers exactly its text). Decided at arrival: a signature that comes after a later block
    // merged into it leaves the merged view here until a reload (the server rebuilds).
    const sealed = node.kind === "reasoning" && Boolean(node.signature || node.redactedData);
    const items = level.items;
    const last = items[items.length - 1];
    if (last && last.runId === node.run && last.kind === node.kind && !sealed && !last.sealed) {
      last.members.push(node);
      last.text += node.text;
      node.view = last;
      this.dirtyViews.add(last);
      return;
    }
    const view = this._newView(node, node.kind, {
      text: node.text, members: [node], sealed, redacted: Boolean(node.redactedData),
    });
    node.view = view;
    this._append(level, view);
  }

  _addToolCall(node, level) {
    const ev = node.event;
    const existing = this.calls.get(node.id);
    if (existing) {
      existing.name = ev.name;
      existing.input = ev.input;
      node.view = existing;
      this.dirtyViews.add(existing);
      return;
    }
    const view = this._newView(node, "tool_call", {
      name: ev.name, input: ev.input ?? null, output: undefined, hasOutput: false, progress: null,
    });
    if (this.results.has(node.id)) {
      view.output = this.results.get(node.id);
      view.hasOutput = true;
    }
    view.progress = this.progress.get(node.id) ?? null;
    node.view = view;
    this.calls.set(node.id, view);
    this._append(level, view);
  }

  _addToolResult(node, level) {
    const ev = node.event;
    this.results.set(ev.id, ev.output);
    const call = this.calls.get(ev.id);
    if (call) {
      call.output = ev.output;
      call.hasOutput = true;
      if (this.now !== null) call.end = this.now;
      this.dirtyViews.add(call);
      return;
    }
    // No call seen: a denied call (input from its relay) or an orphan result.
    const view = this._newView(node, "tool_call", {
      name: ev.name, input: this.relayParams.get(ev.id) ?? null, output: ev.output, hasOutput: true,
      progress: this.progress.get(ev.id) ?? null,
    }, ev.id);
    this.calls.set(ev.id, view);
    node.view = view;
    this._append(level, view);
  }

  _addProgress(node) {
    const ev = node.event;
    let entries = this.progress.get(ev.toolCallId);
    if (!entries) {
      entries = newProgress();
      this.progress.set(ev.toolCallId, entries);
    }
    foldProgress(entries, ev.content);
    const call = this.calls.get(ev.toolCallId);
    if (call) {
      call.progress = entries;
      this.dirtyViews.add(call);
    }
  }

  _resolveRelay(ev) {
    const decision = { approved: !!ev.approved, always: !!ev.always, reason: ev.reason ?? null };
    this.decisions.set(ev.relayId, decision);
    const view = this.relays.get(ev.relayId);
    if (view) {
      view.decision = decision;
      this.dirtyViews.add(view);
    }
  }

  _replProgress(ev) {
    // Upstream: each progress event may have a fresh id; child RLM events are forwarded apart.
    const view = this.repls.get(ev.id) ?? this._latestRepl(ev.runId);
    if (!view) return;
    if (ev.stream === "stderr") view.stderr += ev.chunk ?? "";
    else view.stdout += ev.chunk ?? "";
    this.dirtyViews.add(view);
  }

  _replOutput(ev) {
    const view = this.repls.get(ev.id);
    if (!view) return;
    view.result = {
      stdout: ev.stdout ?? "", error: ev.error ?? null, done: !!ev.done,
      durationMs: ev.durationMs ?? null, truncated: !!ev.truncated,
    };
    if (this.now !== null) view.end = this.now;
    this.dirtyViews.add(view);
  }

  _latestRepl(runId) {
    const run = this.runs.get(runId);
    if (!run) return null;
    for (let i = run.views.length - 1; i >= 0; i--) if (run.views[i].kind === "repl") return run.views[i];
    return null;
  }

  /** The run a branch of a view in run `ownerRunId` belongs to, given the run of the branch's
   * first turn: that run's ancestor (or itself) whose parent is `ownerRunId`. A subagent's first
   * turn usually comes from one of its model calls (a run of its own below the subagent's run), so
   * the first turn's run is not the branch's. Falls back to `firstRunId` when the runs are not
   * linked (unknown to this model). O(depth). */
  branchRun(ownerRunId, firstRunId) {
    const seen = new Set();
    for (let run = this.runs.get(firstRunId); run && !seen.has(run.id); run = this.runs.get(run.parent)) {
      seen.add(run.id);
      if (run.parent === ownerRunId) return run.id;
    }
    return firstRunId;
  }

  /** Usage summed over a run and every run below it (a subagent's total). */
  usageBelow(runId) {
    const total = { input: 0, output: 0, calls: 0 };
    const stack = [runId];
    const seen = new Set();
    while (stack.length) {
      const id = stack.pop();
      if (seen.has(id)) continue;
      seen.add(id);
      const run = this.runs.get(id);
      if (!run) continue;
      total.input += run.usage.input;
      total.output += run.usage.output;
      total.calls += run.usage.calls;
      stack.push(...run.children);
    }
    return total;
  }

  /** Status counts per run, for the header ("2 streaming, 1 error"). */
  runSummary() {
    const counts = { streaming: 0, complete: 0, error: 0 };
    for (const run of this.runs.values()) {
      if (!run.hasLifecycle) continue;
      counts[this.statusOf(run.id)] += 1;
    }
    return counts;
  }

  /** Relays still waiting for a decision. */
  pendingRelays() {
    const out = [];
    for (const [id, view] of this.relays) if (!view.decision) out.push({ id, view });
    return out;
  }

  /** Plain JSON of the thread, in the server's /thread shape (used by tests to compare). */
  toJSON() {
    const conv = (level) => level.items.map((v) => {
      const content = { kind: v.kind };
      if (v.kind === "text" || v.kind === "reasoning") content.text = v.text;
      if (v.kind === "tool_call") {
        content.name = v.name;
        content.input = v.input;
        if (v.hasOutput) content.output = v.output;
      }
      if (v.kind === "user") content.content = v.content;
      if (v.kind === "error") content.message = v.message;
      if (v.kind === "relay") Object.assign(content, { relayKind: v.relayKind, toolCallId: v.toolCallId, tool: v.tool, params: v.params });
      if (v.kind === "repl") Object.assign(content, { code: v.code });
      return { id: v.id, runId: v.runId, role: v.role, content, status: v.status, branches: v.branches.map(conv) };
    });
    return conv(this.top);
  }
}
