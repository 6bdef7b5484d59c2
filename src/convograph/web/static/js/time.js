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
let stamp = null;

/** The time of day of `ms` (local time, with seconds): "14:03:05". */
export function formatClock(ms) {
  if (ms === null || ms === undefined) return "";
  clock ??= new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  return clock.format(ms);
}

/** Date and time of `ms` with milliseconds, for tooltips: "2026-11-28 14:03:05.123". */
export function formatStamp(ms) {
  if (ms === null || ms === undefined) return "";
  stamp ??= new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
    fractionalSecondDigits: 3,
  });
  return stamp.format(ms);
}
