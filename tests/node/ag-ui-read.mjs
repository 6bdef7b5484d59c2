// Reads convograph `?protocol=ag-ui` streams (SSE bytes, one file each) with the AG-UI reference
// client (@ag-ui/client), as HttpAgent does: its SSE parser, `enforceEvents` (every event parsed
// by the @ag-ui/core schemas; unknown material is a failure here), `transformChunks`,
// `verifyEvents` (the sequencing rules) and `defaultApplyEvents` (the message reducer). Prints
// one report per file, [{"events": n, "types": {...}, "runs": [...], "messages": [...],
// "state": {...}}], as JSON; exits 1 naming the file and the error on any failure or warning.
import { readFileSync } from 'node:fs';
import {
  defaultApplyEvents,
  enforceEvents,
  transformChunks,
  transformHttpEventStream,
  verifyEvents,
} from '@ag-ui/client';
import { Observable, lastValueFrom, share, toArray } from 'rxjs';

const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(' '));

async function read(path) {
  const bytes = new Uint8Array(readFileSync(path));
  // The body arrives after the headers, as from fetch: the client's SSE parser subscribes on the
  // headers and would miss a body delivered in the same tick.
  const http$ = new Observable((subscriber) => {
    subscriber.next({ type: 'headers', status: 200, headers: new Headers({ 'content-type': 'text/event-stream' }) });
    setTimeout(() => {
      subscriber.next({ type: 'data', data: bytes });
      subscriber.complete();
    }, 0);
  });
  const events$ = transformHttpEventStream(http$).pipe(enforceEvents(), transformChunks(), verifyEvents(), share());
  const agent = { messages: [], state: {} };
  const input = { threadId: 'check', runId: 'check', messages: [], state: {}, tools: [], context: [] };
  const [events, mutations] = await Promise.all([
    lastValueFrom(events$.pipe(toArray())),
    lastValueFrom(defaultApplyEvents(input, events$, agent, []).pipe(toArray()), { defaultValue: [] }),
  ]);
  let messages = [];
  let state = {};
  for (const mutation of mutations) {
    if (mutation.messages !== undefined) messages = mutation.messages;
    if (mutation.state !== undefined) state = mutation.state;
  }
  const types = {};
  for (const event of events) types[event.type] = (types[event.type] ?? 0) + 1;
  if (warnings.length > 0) throw new Error(`warnings: ${warnings.join(' | ')}`);
  const runs = events.filter((event) => event.type === 'RUN_STARTED').map((event) => event.runId);
  return { events: events.length, types, runs, messages, state };
}

const reports = [];
for (const path of process.argv.slice(2)) {
  try {
    reports.push(await read(path));
  } catch (error) {
    process.stderr.write(`${path}: ${error?.name ?? 'Error'}: ${error?.message ?? error}\n`);
    process.exit(1);
  }
}
process.stdout.write(JSON.stringify(reports));
