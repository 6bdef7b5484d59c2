// Server-Sent Events over fetch(), with automatic resume from the last seq.

import { authHeaders, requestKey } from "./util.js";
//
// fetch() rather than EventSource: EventSource needs one listener per event name (it drops names
// it was not told about), and it hides why a connection ended. Here every `event:` is delivered,
// the `id:` line is the seq, and a dropped connection reconnects with `?after=<last seq>` (and the
// Last-Event-ID header) after a short backoff, so the client receives exactly what it missed.

/** Parse SSE text blocks; returns [messages, rest]. A message: {id, event, data}. */
export function parseSSE(buffer) {
  const messages = [];
  let start = 0;
  for (;;) {
    const end = buffer.indexOf("\n\n", start);
    if (end < 0) break;
    const block = buffer.slice(start, end);
    start = end + 2;
    let id = null;
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") id = value;
      else if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    if (data.length) messages.push({ id, event, data: data.join("\n") });
  }
  return [messages, buffer.slice(start)];
}

/**
 * The reconnecting loop both followers share: fetch `request()` ({url, headers}), hand every batch
 * of parsed SSE messages to `onMessages(messages)`, reconnect after a doubling backoff when the
 * connection ends or fails. 401 asks for an API key and retries at once; a status in `stopOn`
 * ends the loop with `onState("unsupported")`; 409 (the resume point is past the stream's end: the
 * conversation was deleted and re-created) calls `onPastHead()` and ends the loop.
 * Returns {close(), drop()}.
 */
function sseLoop({ request, onMessages, onState, keyPrompt, stopOn = [], minBackoff, maxBackoff, connectingState = () => "connecting", onPastHead = null }) {
  let closed = false;
  let controller = null;
  let backoff = minBackoff;
  let timer = null;

  async function connect() {
    if (closed) return;
    controller = new AbortController();
    onState(connectingState());
    const { url, headers } = request();
    try {
      const response = await fetch(url, {
        headers: authHeaders({ Accept: "text/event-stream", ...headers }),
        signal: controller.signal,
        cache: "no-store",
      });
      if (stopOn.includes(response.status)) {
        onState("unsupported");
        return;
      }
      if (response.status === 409 && onPastHead) {
        onState("closed");
        onPastHead();
        return;
      }
      if (response.status === 401) {
        onState("needs key");
        await requestKey(keyPrompt);
        backoff = 0;
        throw new Error("retry with the key");
      }
      if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
      onState("live");
      backoff = minBackoff;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value.replace(/\r\n?/g, "\n");
        const [messages, rest] = parseSSE(buffer);
        buffer = rest;
        if (messages.length) onMessages(messages);
      }
    } catch (error) {
      if (closed) return;
    }
    if (closed) return;
    onState("reconnecting");
    timer = setTimeout(connect, backoff);
    backoff = Math.min(maxBackoff, Math.max(minBackoff, backoff * 2));
  }

  connect();
  return {
    close() {
      closed = true;
      clearTimeout(timer);
      if (controller) controller.abort();
      onState("closed");
    },
    drop() {
      if (controller) controller.abort();
    },
  };
}

/**
 * Follow `url` (an SSE endpoint taking `?after=`) from `after`. Calls `onEvents(events)` with
 * each parsed batch (every event carries `seq`), `onState(state)` with "connecting" | "live" |
 * "reconnecting" | "closed", and `onPastHead()` when the server answers 409 `cursor_past_head`:
 * what the page holds is of a conversation that no longer exists (deleted and re-created), so it
 * must start again from seq 0. Returns {close(), drop(), after()}.
 */
export function followStream(url, { after = 0, onEvents, onState = () => {}, onPastHead = null, minBackoff = 250, maxBackoff = 5000 }) {
  let lastSeq = after;
  const sep = url.includes("?") ? "&" : "?";
  const loop = sseLoop({
    request: () => ({ url: `${url}${sep}after=${lastSeq}`, headers: { "Last-Event-ID": String(lastSeq) } }),
    connectingState: () => (lastSeq > 0 ? "reconnecting" : "connecting"),
    keyPrompt: "This server needs an API key to stream the conversation.",
    onState,
    onPastHead,
    minBackoff,
    maxBackoff,
    onMessages(messages) {
      const events = [];
      for (const message of messages) {
        if (message.event === "stream_end") continue; // the server ends this connection; the loop resumes
        let event;
        try {
          event = JSON.parse(message.data);
        } catch {
          continue;
        }
        if (event === null || typeof event !== "object") continue;
        const seq = message.id !== null && message.id !== "" ? Number(message.id) : event.seq;
        if (typeof seq === "number" && Number.isFinite(seq)) {
          if (seq <= lastSeq) continue; // overlap after a resume: already have it
          event.seq = seq;
          lastSeq = seq;
        }
        if (!event.type && message.event !== "message") event.type = message.event;
        events.push(event);
      }
      if (events.length) onEvents(events);
    },
  });
  return {
    close: loop.close,
    /** Drop the current connection (it resumes by itself); used by the "reconnect" control. */
    drop: loop.drop,
    after: () => lastSeq,
  };
}

/**
 * Follow a state-based SSE feed (no seq, no resume: each connection starts with a snapshot), such
 * as `/v1/live/conversations`. Calls `onMessage(event, data)` per message and `onState(state)`
 * with "connecting" | "live" | "reconnecting" | "unsupported" | "closed". "unsupported" (HTTP 404:
 * an older server) ends the feed so the caller can fall back to polling. Returns {close()}.
 */
export function followFeed(url, { onMessage, onState = () => {}, minBackoff = 500, maxBackoff = 10000 }) {
  const loop = sseLoop({
    request: () => ({ url, headers: {} }),
    keyPrompt: "This server needs an API key to list conversations.",
    stopOn: [404],
    onState,
    minBackoff,
    maxBackoff,
    onMessages(messages) {
      for (const message of messages) {
        let data;
        try {
          data = JSON.parse(message.data);
        } catch {
          continue;
        }
        onMessage(message.event, data);
      }
    },
  });
  return { close: loop.close };
}
