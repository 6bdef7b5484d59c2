// Event times and how the viewer writes them. Pure functions (the model and the tests use them).
//
// An event's `timestamp` is the producer's: ISO 8601 text, or a number of Unix seconds or
// milliseconds (a number above 1e12 is milliseconds; the demo player stamps milliseconds). The
// server does not add one at ingest, so events without it have no time and nothing is derived
// from them (no duration is guessed from arrival).

/** `timestamp` as Unix milliseconds, or null when absent or unreadable. */
export function eventTime(timestamp) {
  if (timestamp === null || timestamp === undefined || timestamp === "") return null;
  if (typeof timestamp === "number") {
    if (!Number.isFinite(timestamp)) return null;
    return timestamp > 1e12 ? timestamp : timestamp * 1000;
  }
  if (typeof timestamp === "string") {
    const ms = Date.parse(timestamp);
    if (!Number.isNaN(ms)) return ms;
    const n = Number(timestamp);
    return Number.isFinite(n) ? eventTime(n) : null;
  }
  return null;
}

/** A duration in ms as people read it: "420 ms", "2.4 s", "1 min 05 s", "2 h 03 min". */
export function formatDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 60_000) return `${Math.round(ms / 1000)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
}

let clock = null;

let clockSecond = null;
let clockText = "";

/** The time of day of `ms` (local time, with seconds): "14:03:05". The last second's text is
 * kept: turns come in runs within one second, and Intl formatting is the costly part. */
export function formatClock(ms) {
  if (ms === null || ms === undefined) return "";
  const second = Math.floor(ms / 1000);
  if (second !== clockSecond) {
    clock ??= new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    clockSecond = second;
    clockText = clock.format(ms);
  }
  return clockText;
}

const pad = (n, width = 2) => String(n).padStart(width, "0");

/** Date and time of `ms` (local) with milliseconds, for tooltips: "2026-11-28 14:03:05.123".
 * Built by hand: Intl with fractional seconds costs ~15 µs a call, which shows on 5,000 turns. */
export function formatStamp(ms) {
  if (ms === null || ms === undefined) return "";
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}
