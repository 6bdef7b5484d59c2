// The permission card of a relay: what is asked, Allow / Always allow / Deny with a reason, and the
// decision once the log has it (a decision is a `relay_resolved` event; the card only asks for it).

import { announce, h, payloadText } from "./util.js";

export function buildRelay(view, el, decide) {
  const parts = view.parts;
  parts.title = h("div", { class: "relay__title" });
  parts.params = h("pre", { class: "payload" });
  parts.reason = h("input", { type: "text", class: "relay__reason", placeholder: "Reason (optional)", "aria-label": "Reason for the decision (optional)" });
  parts.allow = h("button", { type: "button", class: "btn btn--allow", onclick: () => decide(true, false) }, "Allow");
  // "Always allow": later calls of this tool whose parameters match are approved without asking
  // (the harness derives the rule: docs/harness.md, "Always allow").
  parts.always = h("button", { type: "button", class: "btn btn--always", onclick: () => decide(true, true),
    title: "Allow this call and later calls of this tool with matching parameters (a command: the same first word)" }, "Always allow");
  parts.deny = h("button", { type: "button", class: "btn btn--deny", onclick: () => decide(false, false) }, "Deny");
  parts.actions = h("div", { class: "relay__actions", role: "group", "aria-label": "Permission decision" }, parts.reason, parts.allow, parts.always, parts.deny);
  parts.outcome = h("div", { class: "relay__outcome" });
  // An alert only while it says something (an empty alert per relay is noise to screen readers).
  parts.problem = h("div", { class: "relay__problem", hidden: true });
  el.append(h("div", { class: "relay" }, parts.title, parts.params, parts.actions, parts.outcome, parts.problem));
}

export async function decideRelay(view, approved, always, onRelay) {
  const parts = view.parts;
  const buttons = [parts.allow, parts.always, parts.deny];
  for (const button of buttons) button.disabled = true;
  showProblem(parts.problem, "");
  parts.outcome.textContent = approved ? "Sending approval…" : "Sending denial…";
  try {
    await onRelay(view.id, approved, parts.reason.value.trim() || null, always);
    if (!view.decision) parts.outcome.textContent = "Decision recorded; waiting for the event…";
    announce(`${always ? "Always allowed" : approved ? "Allowed" : "Denied"} ${view.tool}.`);
  } catch (error) {
    parts.outcome.textContent = "";
    showProblem(parts.problem, `Could not record the decision: ${error.message}`);
    if (!view.decision) for (const button of buttons) button.disabled = false;
  }
}

export function updateRelay(view) {
  const parts = view.parts;
  parts.title.textContent = `Permission requested: ${view.tool}`;
  parts.params.textContent = payloadText(view.params);
  const decision = view.decision;
  view.el.dataset.decision = decision ? (decision.approved ? "allowed" : "denied") : "pending";
  if (decision) {
    parts.actions.hidden = true;
    showProblem(parts.problem, "");
    parts.outcome.className = `relay__outcome relay__outcome--${decision.approved ? "allowed" : "denied"}`;
    const verdict = decision.approved ? (decision.always ? "Always allowed" : "Allowed") : "Denied";
    parts.outcome.textContent = `${verdict}${decision.reason ? ` — ${decision.reason}` : ""}`;
  } else {
    parts.actions.hidden = false;
  }
}

/** Show `message` in a relay's problem line as an alert, or hide the line when it is empty. */
function showProblem(el, message) {
  el.hidden = !message;
  el.textContent = message;
  if (message) el.setAttribute("role", "alert");
  else el.removeAttribute("role");
}
