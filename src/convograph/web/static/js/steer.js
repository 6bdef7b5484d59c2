// Steering: edit, regenerate and branch switching through the server's branch endpoints.
//
// The server owns the conversation's active path (the hypergraph model): `GET .../path` lists the
// active messages, each with its sibling branches and the thread-view ids of its blocks. The
// viewer attaches controls to the first rendered view of each message: a switcher when a message
// has siblings (`POST .../messages/{sibling}/select`), Edit on user messages
// (`POST .../messages/{id}/edit`), Regenerate on assistant messages (`POST .../regenerate`).
// Every command is an event in the log, so it reaches every open viewer through the stream.
// A server without these endpoints (404 on /path for a conversation that has events) gets no
// controls.

import { api, cidPath, h } from "./util.js";

export class Steering {
  /** @param {string} cid  @param {() => void} onCommand called after a command was recorded
   *  @param {(message: string|null) => void} onProblem shows (or clears) a refusal */
  constructor(cid, onCommand, onProblem, { agentActive = () => false } = {}) {
    this.cid = cid;
    this.agentActive = agentActive; // () => true while a run of the conversation is streaming
    this.onCommand = onCommand;
    this.onProblem = onProblem;
    this.available = null; // unknown until the first /path answer
    this.path = [];
    this.unanchored = false; // a message of the path had no rendered turn at the last decorate
    this.busy = false;
    this.problem = null;
    this.awaiting = null; // the "waiting for the agent's reply" placeholder, while shown
  }

  async refresh() {
    if (this.available === false) return;
    try {
      const data = await api(`${cidPath(this.cid)}/path`);
      this.available = true;
      this.path = data.path ?? [];
    } catch (error) {
      if (error.status === 404 && error.data && error.data.error && error.data.error.code === "unknown_conversation") return;
      if (error.status === 404 || error.status === 405) this.available = false;
    }
  }

  /** Attach controls to the rendered views of `root`. Idempotent and O(DOM turns + path): one
   * pass indexes the rendered turns; a message whose controls are already in place (same anchor,
   * same branch position) is left alone, so a refresh of a large path touches almost nothing.
   * Placeholders ("waiting for the agent") stay in place while they say the same thing. */
  decorate(root) {
    const loose = new Map([...root.querySelectorAll(":scope > .steer-loose")].map((el) => [el.dataset.sig, el]));
    if (!this.available) {
      for (const old of root.querySelectorAll(".steer, :scope > .steer-loose")) old.remove();
      return;
    }
    const byId = new Map();
    for (const el of root.querySelectorAll("article[data-id]")) byId.set(el.dataset.id, el);
    const keep = new Set();
    const placeholders = [];
    this.unanchored = false;
    for (const message of this.path) {
      const anchor = anchorOf(message, byId);
      const signature = `${message.id}|${message.role}|${message.index}/${message.siblings.length}|${this.busy}`;
      if (anchor) {
        const existing = anchor.querySelector(":scope > .steer");
        if (existing && existing.dataset.sig === signature) {
          keep.add(existing);
          continue;
        }
        if (existing) existing.remove();
        const controls = this._controls(message);
        if (!controls) continue;
        controls.dataset.sig = signature;
        // Below the message's text, where a reader who has just read it looks for what to do next.
        anchor.querySelector(":scope > .switcher").before(controls);
        keep.add(controls);
      } else if (message.viewIds.length) {
        // Its turns are not rendered yet (rendering is coalesced; flush retries), or hidden by the
        // reader's choice of a local alternative: no controls until one shows.
        this.unanchored = true;
      } else {
        this.unanchored = true;
        // A regenerated turn with nothing in it yet: show where it is.
        placeholders.push([`regenerated|${signature}`, () => this._controls(message), "New reply requested — waiting for the agent's next run."]);
      }
    }
    // The path ends with your message (an edit, or a question not answered yet) and no agent is
    // working: a reply is expected.
    const last = this.path[this.path.length - 1];
    if (last && last.role === "user" && !this.agentActive()) {
      placeholders.push([`awaiting|${last.id}`, () => null, "Waiting for the agent's reply to your message."]);
    }
    const kept = new Set();
    for (const [sig, controls, text] of placeholders) {
      // The same placeholder element while it says the same thing, even across a re-render of the
      // thread: moved to the end rather than made again (a new status element is announced again).
      let el = loose.get(sig) ?? (this.awaiting?.dataset.sig === sig ? this.awaiting : undefined);
      if (!el) el = h("div", { class: "turn steer-loose", role: "status", "data-sig": sig }, h("p", { class: "muted" }, text), controls());
      if (!el.isConnected || el.parentNode !== root || el.nextElementSibling) root.append(el);
      kept.add(el);
      const inner = el.querySelector(".steer");
      if (inner) keep.add(inner);
    }
    for (const el of loose.values()) if (!kept.has(el)) el.remove();
    this.awaiting = [...kept].find((el) => el.dataset.sig.startsWith("awaiting|")) ?? null;
    for (const old of root.querySelectorAll(".steer")) if (!keep.has(old)) old.remove();
  }

  _controls(message) {
    const buttons = [];
    const count = message.siblings.length;
    if (count > 1) {
      const at = message.index;
      buttons.push(
        h("button", { type: "button", class: "btn btn--icon", "aria-label": "Previous branch", disabled: at === 0 || this.busy, onclick: () => this._select(message.siblings[at - 1]) }, "‹"),
        h("span", { class: "switcher__count", "aria-live": "polite" }, `${at + 1} / ${count}`),
        h("button", { type: "button", class: "btn btn--icon", "aria-label": "Next branch", disabled: at === count - 1 || this.busy, onclick: () => this._select(message.siblings[at + 1]) }, "›"),
      );
    }
    if (message.role === "user") {
      buttons.push(h("button", { type: "button", class: "btn btn--small", disabled: this.busy, onclick: (e) => this._edit(message, e.target.closest("article, .steer-loose")) }, "Edit"));
    } else if (message.role === "assistant") {
      buttons.push(h("button", { type: "button", class: "btn btn--small", disabled: this.busy, onclick: () => this._command(`messages/${encodeURIComponent(message.id)}/regenerate`, {}) }, "Regenerate"));
    }
    if (!buttons.length) return null;
    return h("div", { class: "steer", role: "group", "aria-label": `${message.role === "user" ? "Your message" : "Reply"}: branches and actions`, "data-message": message.id }, ...buttons);
  }

  _select(messageId) {
    return this._command(`messages/${encodeURIComponent(messageId)}/select`, {});
  }

  _edit(message, article) {
    if (!article || article.querySelector(".steer-editor")) return;
    const body = article.querySelector(".turn__text");
    const editor = h("textarea", { class: "input steer-editor", rows: "3", "aria-label": "Edited message" });
    editor.value = body ? body.textContent : "";
    const save = h("button", { type: "button", class: "btn btn--primary" }, "Save as new branch");
    const cancel = h("button", { type: "button", class: "btn" }, "Cancel");
    const box = h("div", { class: "steer-edit" }, editor, h("div", { class: "row" }, save, cancel));
    if (body) body.hidden = true;
    article.append(box);
    editor.focus();
    const close = () => {
      box.remove();
      if (body) body.hidden = false;
    };
    cancel.addEventListener("click", close);
    editor.addEventListener("keydown", (e) => {
      if (e.key === "Escape") close();
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) save.click();
    });
    save.addEventListener("click", async () => {
      const content = editor.value.trim();
      if (!content) return;
      save.disabled = true;
      const ok = await this._command(`messages/${encodeURIComponent(message.id)}/edit`, { content });
      if (ok) close();
      else save.disabled = false;
    });
  }

  async _command(path, body) {
    this.busy = true;
    this.problem = null;
    this.onProblem(null);
    try {
      const data = await api(`${cidPath(this.cid)}/${path}`, { method: "POST", body });
      if (data && data.path) this.path = data.path;
      this.onCommand();
      return true;
    } catch (error) {
      this.problem = error.message;
      this.onProblem(`The server refused: ${error.message}`);
      return false;
    } finally {
      this.busy = false;
    }
  }
}

/** Where a message's controls go: the first rendered, visible turn of a user message; for a reply,
 * its answer (the last text turn), not the reasoning or tool calls before it. */
function anchorOf(message, byId) {
  const shown = [];
  for (const id of message.viewIds) {
    const el = byId.get(id);
    if (el && !el.hidden) shown.push(el);
  }
  if (!shown.length) return null;
  if (message.role !== "assistant") return shown[0];
  for (let i = shown.length - 1; i >= 0; i--) if (shown[i].dataset.kind === "text") return shown[i];
  return shown.find((el) => el.dataset.kind !== "reasoning") ?? shown[0];
}

/** Thread views from the server's /thread JSON, shaped like ConversationModel views (for the
 * renderer), reading run status, usage and relay decisions from the live client model.
 *
 * The viewer asks for `/thread?repl=1`: REPL turns come as `repl` views with the runs they spawned
 * nested under them, as the client model shows them. Tool progress comes from the client model
 * when it has any for the call: the client folds every tool's progress, the server only
 * registered tools' (docs/web.md). */
export function modelFromThread(json, live, Level) {
  const top = new Level(null);
  const build = (items, level) => {
    for (const v of items) {
      const c = v.content;
      const view = { id: v.id, kind: c.kind, runId: v.runId, role: v.role, status: v.status, branches: [], level, seq: null };
      // Times and model calls come from the client model's view of the same id.
      const mine = live.calls.get(v.id) ?? live.repls.get(v.id) ?? live.nodes.get(v.id)?.view;
      if (mine) Object.assign(view, { start: mine.start ?? null, end: mine.end ?? null, calls: mine.calls });
      if (c.kind === "text" || c.kind === "reasoning") view.text = c.text ?? "";
      if (c.kind === "reasoning") view.redacted = Boolean(c.redactedData);
      if (c.kind === "user") view.content = c.content;
      if (c.kind === "error") view.message = c.message;
      if (c.kind === "tool_call") {
        Object.assign(view, { name: c.name, input: c.input ?? null, hasOutput: c.hasOutput ?? "output" in c, output: c.output });
        const p = c.progress;
        view.progress =
          live.progress.get(v.id) ??
          (p && typeof p === "object" ? { count: 1, stdout: p.stdout ?? "", stderr: p.stderr ?? "", metrics: p.metrics ?? null, other: [] } : null);
      }
      if (c.kind === "relay") {
        Object.assign(view, { relayKind: c.relayKind, toolCallId: c.toolCallId, tool: c.tool, params: c.params ?? {}, decision: live.decisions.get(v.id) ?? null });
      }
      if (c.kind === "repl") {
        const r = c.result;
        Object.assign(view, {
          code: c.code, iteration: c.iteration ?? null, stdout: c.stdout ?? "", stderr: c.stderr ?? "",
          result: r ? { stdout: r.stdout ?? "", error: r.error ?? null, done: !!r.done, durationMs: r.durationMs ?? null, truncated: !!r.truncated } : null,
        });
      }
      level.items.push(view);
      for (const branch of v.branches ?? []) {
        // The branch's run is the subagent's, not its first turn's (often a model call's run).
        const sub = new Level(view, branch[0] ? live.branchRun(v.runId, branch[0].runId) : null);
        sub.attached = true;
        view.branches.push(sub);
        build(branch, sub);
      }
    }
  };
  build(json, top);
  return {
    top,
    runs: live.runs,
    statusOf: (run) => live.statusOf(run),
    usageBelow: (run) => live.usageBelow(run),
    dirtyLevels: new Set([top]),
    dirtyViews: new Set(),
  };
}
