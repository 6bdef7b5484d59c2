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
 * Follow `url` (an SSE endpoint taking `?after=`) from `after`. Calls `onEvents(events)` with
 * each parsed batch (every event carries `seq`), `onState(state)` with "connecting" | "live" |
 * "reconnecting" | "closed". Returns {close(), after()}.
 */
export function followStream(url, { after = 0, onEvents, onState = () => {}, minBackoff = 250, maxBackoff = 5000 }) {
  let lastSeq = after;
  let closed = false;
  let controller = null;
  let backoff = minBackoff;
  let timer = null;

  async function connect() {
    if (closed) return;
    controller = new AbortController();
    onState(lastSeq > 0 ? "reconnecting" : "connecting");
    const sep = url.includes("?") ? "&" : "?";
    try {
      const response = await fetch(`${url}${sep}after=${lastSeq}`, {
        headers: authHeaders({ Accept: "text/event-stream", "Last-Event-ID": String(lastSeq) }),
        signal: controller.signal,
        cache: "no-store",
      });
      if (response.status === 401) {
        onState("needs key");
        await requestKey("This server needs an API key to stream the conversation.");
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
        if (!messages.length) continue;
        const events = [];
        for (const message of messages) {
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
    /** Drop the current connection (it resumes by itself); used by the "reconnect" control. */
    drop() {
      if (controller) controller.abort();
    },
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
  let closed = false;
  let controller = null;
  let backoff = minBackoff;
  let timer = null;

  async function connect() {
    if (closed) return;
    controller = new AbortController();
    onState("connecting");
    try {
      const response = await fetch(url, {
        headers: authHeaders({ Accept: "text/event-stream" }),
        signal: controller.signal,
        cache: "no-store",
      });
      if (response.status === 404) {
        onState("unsupported");
        return;
      }
      if (response.status === 401) {
        onState("needs key");
        await requestKey("This server needs an API key to list conversations.");
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
        for (const message of messages) {
          let data;
          try {
            data = JSON.parse(message.data);
          } catch {
            continue;
          }
          onMessage(message.event, data);
        }
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
  };
}
