// Reads convograph `?protocol=ai-sdk` streams (SSE bytes, one file each) with the `ai` package's
// own parser and reducer, as useChat does: `parseJsonEventStream` validates every chunk against
// `uiMessageChunkSchema`, `readUIMessageStream` folds them into UI messages (a new `start`
// messageId starts a new message), and `validateUIMessages` checks the messages it built and
// the subagent transcripts they carry (`data-subagent` parts).
// Prints one report per file, [{"chunks": n, "types": {...}, "transient": [...], "messages":
// [...]}], as JSON; exits 1 naming the file and the error on any failure.
import { readFileSync } from 'node:fs';
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema, validateUIMessages } from 'ai';

async function read(path) {
  const bytes = readFileSync(path);
  const source = new ReadableStream({
    start(controller) {
      controller.enqueue(new Uint8Array(bytes));
      controller.close();
    },
  });
  let chunks = 0;
  const types = {};
  const transient = [];
  const stream = parseJsonEventStream({ stream: source, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(result, controller) {
        if (!result.success) throw result.error;
        chunks += 1;
        types[result.value.type] = (types[result.value.type] ?? 0) + 1;
        if (result.value.transient) transient.push(result.value);
        controller.enqueue(result.value);
      },
    }),
  );
  const messages = new Map();
  for await (const message of readUIMessageStream({ stream, terminateOnError: true })) {
    messages.set(message.id, message);
  }
  const list = [...messages.values()];
  if (list.length > 0) await validateUIMessages({ messages: list });
  const transcripts = [];
  for (const message of list) {
    for (const part of message.parts) {
      if (part.type === 'data-subagent') transcripts.push(part.data.message);
    }
  }
  for (const chunk of transient) {
    if (chunk.type === 'data-subagent') transcripts.push(chunk.data.message);
  }
  const nonEmpty = transcripts.filter((message) => message.parts.length > 0);
  if (nonEmpty.length > 0) await validateUIMessages({ messages: nonEmpty });
  return { chunks, types, transient, messages: list };
}

const reports = [];
for (const path of process.argv.slice(2)) {
  try {
    reports.push(await read(path));
  } catch (error) {
    process.stderr.write(`${path}: ${error?.name ?? 'Error'}: ${error?.message ?? error}\n${error?.cause ? JSON.stringify(error.cause) : ''}\n`);
    process.exit(1);
  }
}
process.stdout.write(JSON.stringify(reports));
