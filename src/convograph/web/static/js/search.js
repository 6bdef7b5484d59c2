// Search within one conversation: every view of the thread (the top level and every subagent, to
// any depth), matched by text and filtered by kind, status and tool, in reading order.
//
// Each view keeps the lower-case text it is searched by, rebuilt only when the view changed (a
// key of its changing parts), so searching again as the reader types, or as events arrive, costs
// O(views + text searched): a 20k-event conversation is searched in a few ms (BENCHMARKS.md).

export const KINDS = {
  all: null,
  messages: new Set(["user", "text"]),
  tools: new Set(["tool_call", "repl", "relay"]),
  reasoning: new Set(["reasoning"]),
  errors: null, // error turns, failed tool calls and REPL turns that raised
};

/** What a view's status filter sees: "running", "done" or "error" (a failed tool call is an error). */
export function statusOf(view) {
  if (view.kind === "tool_call" && view.hasOutput) {
    const out = view.output;
    return out && typeof out === "object" && (out.error || out.status === "denied") ? "error" : "done";
  }
  if (view.kind === "repl" && view.result) return view.result.error ? "error" : "done";
  return view.status === "streaming" ? "running" : view.status === "error" ? "error" : "done";
}

function isError(view) {
  return view.kind === "error" || (view.kind !== "user" && statusOf(view) === "error" && (view.kind === "tool_call" || view.kind === "repl"));
}

/** The text a view is found by (lower case), cached on the view until it changes. */
function haystack(view) {
  const key = changeKey(view);
  const cache = view._search;
  if (cache && cache.key === key) return cache;
  const text = searchText(view);
  view._search = { key, text, lower: text.toLowerCase() };
  return view._search;
}

function changeKey(view) {
  switch (view.kind) {
    case "text":
    case "reasoning":
      return view.text.length;
    case "tool_call":
      return `${view.name}|${view.hasOutput}|${view.progress ? view.progress.count : 0}`;
    case "repl":
      return `${view.stdout.length}|${view.stderr.length}|${view.result ? 1 : 0}`;
    case "relay":
      return view.decision ? 1 : 0;
    default:
      return 0;
  }
}

const json = (value) => {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value);
  } catch {
    return "";
  }
};

function searchText(view) {
  switch (view.kind) {
    case "text":
    case "reasoning":
      return view.text;
    case "user":
      return typeof view.content === "string" ? view.content : Array.isArray(view.content) ? view.content.map((p) => p.text ?? "").join("\n") : json(view.content);
    case "error":
      return view.message ?? "";
    case "tool_call": {
      const progress = view.progress ? `${view.progress.stdout}\n${view.progress.stderr}` : "";
      return `${view.name}\n${json(view.input)}\n${progress}\n${view.hasOutput ? json(view.output) : ""}`;
    }
    case "relay":
      return `${view.tool}\n${json(view.params)}\n${view.decision && view.decision.reason ? view.decision.reason : ""}`;
    case "repl":
      return `${view.code}\n${view.stdout}\n${view.stderr}\n${view.result ? `${view.result.stdout}\n${view.result.error ?? ""}` : ""}`;
    default:
      return "";
  }
}

/** Every view of `model`'s thread in reading order (a view, then its branches, then the next). */
export function* allViews(model) {
  const stack = [[model.top.items, 0]];
  while (stack.length) {
    const top = stack[stack.length - 1];
    const [items, i] = top;
    if (i >= items.length) {
      stack.pop();
      continue;
    }
    top[1] = i + 1;
    const view = items[i];
    if (view.removed || view.kind === "pending") continue;
    yield view;
    for (let b = view.branches.length - 1; b >= 0; b--) stack.push([view.branches[b].items, 0]);
  }
}

/**
 * The views of `model` that match: `text` (case-insensitive, in the view's text, tool name, input,
 * progress and output, error message, relay, REPL code and output), `kind` (a key of KINDS),
 * `status` ("running" | "done" | "error") and `tool` (a tool call's name). Returns [{view, at}]
 * in reading order (`at`: where the text matched in the view's search text, -1 without text).
 */
export function searchThread(model, { text = "", kind = "all", status = "", tool = "" } = {}) {
  const needle = text.trim().toLowerCase();
  const kinds = KINDS[kind] ?? null;
  const out = [];
  for (const view of allViews(model)) {
    if (kinds && !kinds.has(view.kind)) continue;
    if (kind === "errors" && !isError(view)) continue;
    if (tool && !(view.kind === "tool_call" && view.name === tool)) continue;
    if (status && statusOf(view) !== status) continue;
    let at = -1;
    if (needle) {
      at = haystack(view).lower.indexOf(needle);
      if (at < 0) continue;
    }
    out.push({ view, at });
  }
  return out;
}

/** A short piece of the view's search text around `at` (for the results list). */
export function snippet(view, at, length, context = 48) {
  const { text } = haystack(view);
  if (at < 0) return text.slice(0, 2 * context).replace(/\s+/g, " ").trim();
  const start = Math.max(0, at - context);
  const end = Math.min(text.length, at + length + context);
  return `${start ? "…" : ""}${text.slice(start, end).replace(/\s+/g, " ")}${end < text.length ? "…" : ""}`;
}
