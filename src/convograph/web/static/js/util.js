// Small DOM and formatting helpers shared by the views.

/** Create an element: h("div", {class: "x", onclick: fn}, child, "text", ...). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** Say `message` to screen-reader users through the page's one polite live region. */
export function announce(message) {
  const region = document.getElementById("announcer");
  if (!region) return;
  region.textContent = "";
  // A fresh text node in a later task is announced even when the text repeats.
  setTimeout(() => {
    region.textContent = message;
  }, 50);
}

/** Put `text` on the clipboard: the Clipboard API where the page may use it (a secure context:
 * https, or http on localhost), else a hidden textarea and `execCommand("copy")`. Returns whether
 * it worked. */
export async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    /* refused (no permission, no focus): try the fallback */
  }
  const focused = document.activeElement;
  const area = h("textarea", { class: "visually-hidden", readonly: true, "aria-hidden": "true" });
  area.value = text;
  document.body.append(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  area.remove();
  if (focused && focused.focus) focused.focus();
  return ok;
}

/** A small "Copy" button that copies `getText()` (called on click: the full text, not what the
 * page shows of it) and says so for a moment. One listener on the document serves every copy
 * button (a thread has thousands). */
export function copyButton(getText, label = "Copy") {
  const button = h("button", { type: "button", class: "btn btn--copy", "aria-label": label }, "Copy");
  button._copy = getText;
  return button;
}

if (typeof document !== "undefined") document.addEventListener("click", async (event) => {
  const button = event.target.closest && event.target.closest("button.btn--copy");
  if (!button || !button._copy) return;
  event.preventDefault();
  event.stopPropagation();
  const ok = await copyText(button._copy());
  button.textContent = ok ? "Copied" : "Copy failed";
  button.dataset.copied = String(ok);
  announce(ok ? "Copied to the clipboard." : "Could not copy to the clipboard.");
  clearTimeout(button._reset);
  button._reset = setTimeout(() => {
    button.textContent = "Copy";
    delete button.dataset.copied;
  }, 1500);
});

/** The whole of a payload as text (for copying): strings as-is, anything else as indented JSON. */
export function fullText(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

export const MAX_PAYLOAD_CHARS = 20000;

/** A payload as display text: strings as-is, anything else as indented JSON; long text is cut
 * and says so (users must be told when a view is truncated). */
export function payloadText(value) {
  let text;
  if (value === undefined) return "";
  if (typeof value === "string") text = value;
  else {
    try {
      text = JSON.stringify(value, null, 2);
    } catch {
      text = String(value);
    }
  }
  if (text.length > MAX_PAYLOAD_CHARS) {
    return `${text.slice(0, MAX_PAYLOAD_CHARS)}\n… (truncated for display: ${text.length.toLocaleString()} characters in full)`;
  }
  return text;
}

/** One-line summary of a payload (tool input in a card header). */
export function oneLine(value, max = 90) {
  let text;
  if (value === null || value === undefined) return "";
  if (typeof value === "string") text = value;
  else if (typeof value === "object" && !Array.isArray(value)) {
    text = Object.entries(value)
      .map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`)
      .join(", ");
  } else text = JSON.stringify(value);
  text = text.replace(/\s+/g, " ");
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export function shortId(id) {
  if (!id) return "";
  return id.length > 14 ? `${id.slice(0, 6)}…${id.slice(-5)}` : id;
}

let numbers = null;

/** `n` with the reader's digit grouping ("9,315"); one cached formatter (toLocaleString makes a
 * new one per call, which shows in a 20k-event load). */
export function formatNumber(n) {
  numbers ??= new Intl.NumberFormat();
  return numbers.format(n);
}

export function formatTokens(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  return formatNumber(n);
}

export function formatTime(value) {
  if (value === null || value === undefined || value === "") return "";
  const date = typeof value === "number" ? new Date(value > 1e12 ? value : value * 1000) : new Date(value);
  if (Number.isNaN(date.getTime())) return String(value);
  return date.toLocaleString();
}

export function relativeTime(value) {
  if (value === null || value === undefined || value === "") return "";
  const date = typeof value === "number" ? new Date(value > 1e12 ? value : value * 1000) : new Date(value);
  const seconds = (Date.now() - date.getTime()) / 1000;
  if (Number.isNaN(seconds)) return String(value);
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return date.toLocaleDateString();
}

// -- API keys -------------------------------------------------------------------------------------
// A server started with keys answers 401 without `Authorization: Bearer <key>`. The viewer then
// asks for a key once (a dialog), keeps it for the tab (sessionStorage) or, if asked to, on this
// device (localStorage), and retries. Keys never leave this origin.

const KEY_NAME = "convograph.apiKey";
let keyRequest = null;

export function apiKey() {
  try {
    return sessionStorage.getItem(KEY_NAME) || localStorage.getItem(KEY_NAME) || "";
  } catch {
    return "";
  }
}

export function authHeaders(headers = {}) {
  const key = apiKey();
  return key ? { ...headers, Authorization: `Bearer ${key}` } : headers;
}

/** Ask for an API key (one dialog however many requests failed); resolves once one is saved. */
export function requestKey(message) {
  if (keyRequest) return keyRequest;
  const dialog = document.getElementById("key-dialog");
  const form = dialog.querySelector("form");
  const input = dialog.querySelector("#api-key");
  const remember = dialog.querySelector("#api-key-remember");
  dialog.querySelector(".key-dialog__message").textContent = message;
  dialog.oncancel = (event) => event.preventDefault(); // nothing works without a key
  keyRequest = new Promise((resolve) => {
    form.onsubmit = (event) => {
      event.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      try {
        sessionStorage.setItem(KEY_NAME, key);
        if (remember.checked) localStorage.setItem(KEY_NAME, key);
        else localStorage.removeItem(KEY_NAME);
      } catch {
        /* storage unavailable: the key lasts for this request only */
      }
      dialog.close();
      keyRequest = null;
      resolve(key);
    };
  });
  input.value = "";
  if (!dialog.open) dialog.showModal();
  input.focus();
  return keyRequest;
}

/** JSON request helper: throws Error(message from the server's {"error": {...}} body). A 401
 * asks for an API key and retries. */
export async function api(path, { method = "GET", body, signal } = {}) {
  const response = await fetch(path, {
    method,
    signal,
    headers: authHeaders(body === undefined ? { Accept: "application/json" } : { "Content-Type": "application/json", Accept: "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) {
    await requestKey(await errorMessage(response, "This server needs an API key."));
    return api(path, { method, body, signal });
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!response.ok) {
    const message = data && data.error ? data.error.message : `${response.status} ${response.statusText}`;
    const error = new Error(message);
    error.status = response.status;
    error.data = data;
    throw error;
  }
  return data;
}

async function errorMessage(response, fallback) {
  try {
    const data = await response.json();
    return data && data.error ? `${fallback} (${data.error.message})` : fallback;
  } catch {
    return fallback;
  }
}

/** Coalesce calls into one per animation frame, and at most one per `minInterval` ms (a busy
 * stream then costs ~1000/minInterval DOM updates per second however many events arrive). */
export function frameScheduler(fn, minInterval = 0) {
  let scheduled = false;
  let last = -Infinity;
  const run = () => {
    scheduled = false;
    last = performance.now();
    fn();
  };
  return () => {
    if (scheduled) return;
    scheduled = true;
    const wait = last + minInterval - performance.now();
    if (wait > 0) setTimeout(() => requestAnimationFrame(run), wait);
    else requestAnimationFrame(run);
  };
}

export const cidPath = (cid) => `/v1/conversations/${encodeURIComponent(cid)}`;

/** Run async `fn` after `delay` ms when asked with `schedule(delay)`, never twice at once (a request
 * during a run runs it again after). */
export function throttle(fn, { trailing = false } = {}) {
  let timer = null;
  let running = false;
  let again = false;
  const run = async () => {
    timer = null;
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      await fn();
    } finally {
      running = false;
      if (again) {
        again = false;
        schedule(0);
      }
    }
  };
  // A pending run is kept (not pushed back), so a continuous stream still refreshes every
  // `delay` ms — unless `trailing`, where each request pushes the run back (it happens once the
  // requests stop); an immediate request (delay 0) replaces a later one.
  const schedule = (delay) => {
    if (timer !== null) {
      if (delay > 0 && !trailing) return;
      clearTimeout(timer);
    }
    timer = setTimeout(run, delay);
  };
  schedule.cancel = () => clearTimeout(timer);
  return schedule;
}
