// Follows a convograph conversation as AG-UI events with the AG-UI reference client's own pipeline
// (@ag-ui/client: its SSE parser, schema checks, sequence verifier and message reducer) and
// prints the conversation's messages at the end of every run.
//
//   node examples/ag-ui-follow.mjs http://127.0.0.1:8321 CONVERSATION [RUNS]
//
// RUNS: stop after that many runs have finished. Needs @ag-ui/client: in your project
// (`npm i @ag-ui/client rxjs`), or in this repository after scripts/ensure-node-tools.
const local = (path) => import(new URL(`../tests/node/node_modules/${path}`, import.meta.url));
const agui = await import('@ag-ui/client').catch(() => local('@ag-ui/client/dist/index.mjs'));
const rxjs = await import('rxjs').catch(() => local('rxjs/dist/cjs/index.js'));
const [server, conversation, runs] = process.argv.slice(2);
const controller = new AbortController();
const url = `${server}/v1/conversations/${encodeURIComponent(conversation)}/stream?protocol=ag-ui`;
const events$ = agui
  .transformHttpEventStream(agui.runHttpRequest(() => fetch(url, { signal: controller.signal })))
  .pipe(agui.enforceEvents(), agui.transformChunks(), agui.verifyEvents(), rxjs.share());
const agent = { messages: [], state: {} };
const input = { threadId: conversation, runId: 'follow', messages: [], state: {} };
let messages = [];
let finished = 0;
events$.subscribe({
  next(event) {
    if (controller.signal.aborted || (event.type !== 'RUN_FINISHED' && event.type !== 'RUN_ERROR')) return;
    finished += 1;
    setTimeout(() => {
      console.log(`-- ${event.type} ${event.runId ?? ''}: ${messages.length} messages`);
      for (const message of messages) {
        const who = message.subagentRunId ? `${message.role}@${message.subagentRunId}` : message.role;
        const calls = (message.toolCalls ?? []).map((call) => call.function.name);
        console.log(`  ${who}: ${JSON.stringify(message.content ?? '')} ${calls.length ? `calls ${calls}` : ''}`);
      }
    }, 0);
    if (runs !== undefined && finished >= Number(runs)) setTimeout(() => controller.abort(), 0);
  },
  error(error) {
    if (error?.name !== 'AbortError') console.error(error);
  },
});
agui.defaultApplyEvents(input, events$, agent, []).subscribe({
  next(mutation) {
    if (mutation.messages !== undefined) messages = mutation.messages;
  },
  error() {},
});
