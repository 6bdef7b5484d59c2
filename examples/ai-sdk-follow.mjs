// Follows a convograph conversation as the Vercel AI SDK UI message stream, with the `ai`
// package's own reader (what useChat's resumeStream runs): each assistant message as it grows.
//
//   node examples/ai-sdk-follow.mjs http://127.0.0.1:8321 CONVERSATION [--once]
//
// --once: stop when the first message finishes. Needs the `ai` package: in your project
// (`npm i ai`), or in this repository after scripts/ensure-node-tools.
const ai = await import('ai').catch(() => import(new URL('../tests/node/node_modules/ai/dist/index.js', import.meta.url)));
const [server, conversation, once] = process.argv.slice(2);
const controller = new AbortController();
const response = await fetch(`${server}/v1/conversations/${encodeURIComponent(conversation)}/stream?protocol=ai-sdk`, {
  signal: controller.signal,
});
const chunks = ai.parseJsonEventStream({ stream: response.body, schema: ai.uiMessageChunkSchema }).pipeThrough(
  new TransformStream({
    transform(result, out) {
      if (!result.success) throw result.error;
      if (result.value.type === 'data-user') console.log(`\nuser: ${JSON.stringify(result.value.data.content)}`);
      out.enqueue(result.value);
      if (once === '--once' && result.value.type === 'finish') controller.abort();
    },
  }),
);
try {
  for await (const message of ai.readUIMessageStream({ stream: chunks })) {
    const text = message.parts.filter((part) => part.type === 'text').map((part) => part.text).join('');
    const tools = message.parts.filter((part) => part.type === 'dynamic-tool').map((part) => `${part.toolName}:${part.state}`);
    console.log(`${message.id}: ${JSON.stringify(text)} ${tools.length ? `[${tools.join(', ')}]` : ''}`);
  }
} catch (error) {
  if (error?.name !== 'AbortError') throw error;
}
