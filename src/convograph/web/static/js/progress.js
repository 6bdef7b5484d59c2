// Tool progress folded per call, as the client model keeps it.

const MAX_OTHER_PROGRESS = 50;

/** An empty progress state: stdout / stderr so far, the latest metrics, the latest other contents. */
export function newProgress() {
  return { count: 0, stdout: "", stderr: "", metrics: null, other: [] };
}

/** Fold one tool_progress content into a call's progress state, in O(size of the content): the
 * `exec` accumulator of convograph.projections.progress (stdout / stderr chunks appended, the
 * latest metrics snapshot kept), plus the latest few contents of any other shape. */
export function foldProgress(state, content) {
  state.count += 1;
  if (content && typeof content === "object" && (content.channel === "stdout" || content.channel === "stderr") && typeof content.data === "string") {
    state[content.channel] += content.data;
  } else if (content && typeof content === "object" && typeof content.pid === "number") {
    state.metrics = content;
  } else {
    state.other.push(content);
    if (state.other.length > MAX_OTHER_PROGRESS) state.other.shift();
  }
}
