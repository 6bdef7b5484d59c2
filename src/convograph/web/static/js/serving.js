// Serving: the agents attached to this conversation, and a message box while one serves it.
//
// Agents run outside the server and *serve* a conversation (docs/harness.md, "Serving"): the
// server lists them in `GET .../runs` with the conversation's top-level runs and the reply it
// awaits. When an agent serves this conversation, the panel says so ("lead is serving this
// conversation: your message starts its next turn"), offers a message box (`POST .../runs` puts
// the message at the end of the active path; the agent answers it) and, while a run answers,
// names it with a Stop button (`POST .../runs/{runId}/cancel`). Edits and regenerates made with
// the steering controls start the next turn the same way. Without an attached agent the panel is
// hidden. Refreshed after the stream's events (runs start and end, messages arrive) and every
// 5 s (agents attach and leave without an event).

import { api, cidPath, h } from "./util.js";

const REFRESH_MS = 5000;
const TRIGGERS = new Set(["user", "harness_start", "harness_end", "edit", "regenerate", "switch_branch", "summarize"]);

export class ServingPanel {
  constructor(cid) {
    this.cid = cid;
    this.state = null; // the last GET .../runs answer
    this.busy = false;
    this.status = h("p", { class: "serving__status" }); // a live region only while shown (render)
    this.problem = h("p", { class: "error-text serving__problem", hidden: true });
    this.input = h("textarea", { class: "input serving__input", rows: "2", "aria-label": "Message to the agent", placeholder: "Message the agent (Ctrl+Enter sends)" });
    this.send = h("button", { type: "button", class: "btn btn--primary" }, "Send");
    this.stop = h("button", { type: "button", class: "btn serving__stop", hidden: true }, "Stop");
    this.force = h("button", { type: "button", class: "btn serving__force", hidden: true }, "End it anyway");
    this.element = h(
      "section",
      { class: "serving", hidden: true, "aria-label": "Agent serving this conversation" },
      this.status,
      h("div", { class: "serving__compose" }, this.input, h("div", { class: "row" }, this.send, this.stop, this.force)),
      this.problem,
    );
    this.send.addEventListener("click", () => this._send());
    this.input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        this._send();
      }
    });
    this.stop.addEventListener("click", () => this._stop(false));
    this.force.addEventListener("click", () => this._stop(true));
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
    this.pending = null;
    this.refresh();
  }

  /** Stream events: refresh soon when one may change the runs, the agents' work or the pending turn. */
  onEvents(events) {
    if (events.some((event) => TRIGGERS.has(event.type))) this.schedule(150);
  }

  schedule(delay) {
    if (this.pending) return;
    this.pending = setTimeout(() => {
      this.pending = null;
      this.refresh();
    }, delay);
  }

  async refresh() {
    try {
      this.state = await api(`${cidPath(this.cid)}/runs`);
    } catch {
      return; // keep what is shown; the next refresh tries again
    }
    this.render();
  }

  /** The run answering now (the newest top-level run still streaming), or null. */
  running() {
    const runs = this.state ? this.state.runs : [];
    for (let i = runs.length - 1; i >= 0; i--) if (runs[i].status === "streaming" && runs[i].reason === null) return runs[i];
    return null;
  }

  render() {
    const agents = (this.state ? this.state.agents : []).filter((a) => a.serving);
    this.element.hidden = agents.length === 0;
    // One polite live region while an agent serves; none on pages without one (issue 28: few regions).
    if (agents.length) this.status.setAttribute("role", "status");
    else this.status.removeAttribute("role");
    if (!agents.length) return;
    const names = [...new Set(agents.map((a) => a.name))];
    const who = names.join(" and ");
    const model = agents.length === 1 && agents[0].model ? ` (${agents[0].model})` : "";
    const run = this.running();
    const pending = this.state.pending;
    let text;
    if (run) text = `${run.agentId ?? who} is answering…`;
    else if (pending) text = `Your ${pending.kind === "regenerate" ? "regenerate request" : "message"} is waiting for ${who}.`;
    else text = `${who}${model} ${names.length > 1 ? "are" : "is"} serving this conversation: your message starts ${names.length > 1 ? "their" : "its"} next turn.`;
    if (this.status.textContent !== text) this.status.textContent = text;
    this.element.dataset.state = run ? "running" : pending ? "pending" : "idle";
    this.element.dataset.runId = run ? run.runId : "";
    this.stop.hidden = !run;
    if (!run) this.force.hidden = true;
    this.send.disabled = this.busy || Boolean(run);
    this.input.disabled = Boolean(run);
  }

  async _send() {
    const text = this.input.value.trim();
    if (!text || this.busy) return;
    this.busy = true;
    this._problem(null);
    this.render();
    try {
      this.state = { ...this.state, pending: (await api(`${cidPath(this.cid)}/runs`, { method: "POST", body: { input: text } })).pending };
      this.input.value = "";
    } catch (error) {
      this._problem(`The server refused: ${error.message}`);
    } finally {
      this.busy = false;
      this.render();
      this.schedule(0);
    }
  }

  async _stop(force) {
    const run = this.running();
    if (!run) return;
    this._problem(null);
    try {
      await api(`${cidPath(this.cid)}/runs/${encodeURIComponent(run.runId)}/cancel`, { method: "POST", body: force ? { force: true } : {} });
      this.force.hidden = true;
    } catch (error) {
      const code = error.data && error.data.error && error.data.error.code;
      this._problem(code === "no_agent_attached" ? "No attached agent holds this run (its agent may be gone)." : `The server refused: ${error.message}`);
      this.force.hidden = code !== "no_agent_attached";
    }
    this.schedule(0);
  }

  _problem(message) {
    this.problem.hidden = !message;
    this.problem.textContent = message ?? "";
  }

  dispose() {
    clearInterval(this.timer);
    clearTimeout(this.pending);
  }
}
