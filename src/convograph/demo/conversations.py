"""Bundled demo conversations as paced scripts (deterministic; no randomness, no network).

A `Script` is a list of `Step`s: an event (wire form) and how long a real system would take
before emitting it (`delay`, seconds at speed 1), or an `AwaitRelay` that pauses the script until
someone decides a relay, then continues with the approved or the denied branch — the real
permission-relay flow (upstream spec §6.4): a denied call emits a ``tool_result`` with
``status: "denied"`` and no ``tool_call``.

Pacing: streamed text at ~45 tokens/s (a token ~ 4 characters), tool latency as a real tool
would have it (given per call), a short pause between lifecycle steps.

Conversations:
- `research_script()` — a lead agent fans out to two researcher subagents in parallel (each with
  its own parallel tools), one of which delegates to a second-level code-reading subagent that
  streams ``exec`` progress; a provider call fails with an error and is retried; reasoning and
  usage throughout; ends on a pending ``write_file`` permission relay left for the user.
- `rlm_script()` — a recursive-language-model run: REPL turns (``repl_input`` /
  ``repl_progress`` / ``repl_output``), a child RLM run spawned from a REPL turn, a turn that
  fails with a runtime error (reported in its ``repl_output``, as the RLM harness does) and is
  fixed, and the final answer.
- `retry_policies_script()` — `convograph.examples.multi_agent_events()`, paced.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from convograph.examples import multi_agent_events

__all__ = [
    "DEMO_CONVERSATIONS",
    "AwaitRelay",
    "Script",
    "Step",
    "research_script",
    "retry_policies_script",
    "rlm_script",
]

Wire = dict[str, Any]

TOKENS_PER_SECOND: Final = 45.0
CHARS_PER_TOKEN: Final = 4.0


@dataclass(frozen=True, slots=True)
class Step:
    """Emit ``event`` after waiting ``delay`` seconds (at speed 1)."""

    event: Wire
    delay: float


@dataclass(frozen=True, slots=True)
class AwaitRelay:
    """Pause until relay ``relay_id`` is decided; then play ``approved`` or ``denied``."""

    relay_id: str
    approved: list[Step | AwaitRelay]
    denied: list[Step | AwaitRelay]


@dataclass(slots=True)
class Script:
    """Builds a paced event list; every event gets a stable ``eventId`` (replays deduplicate)."""

    conversation_id: str
    title: str
    steps: list[Step | AwaitRelay] = field(default_factory=list)
    id_prefix: str = ""
    """Prefix of generated ``eventId``s (default: the conversation id)."""
    _count: int = 0

    def emit(self, event_type: str, *, delay: float = 0.15, **fields: Any) -> Wire:
        event: Wire = {"type": event_type, **{k: v for k, v in fields.items() if v is not None}}
        event["eventId"] = f"{self.id_prefix or self.conversation_id}-{self._count:04d}"
        self._count += 1
        self.steps.append(Step(event, delay))
        return event

    def stream(self, kind: str, run_id: str, text_id: str, text: str, *, parent: str | None = None) -> None:
        """Stream ``text`` as ``kind`` deltas of a few tokens each, paced like a model."""
        for piece in _fragments(text):
            self.emit(
                kind,
                delay=len(piece) / CHARS_PER_TOKEN / TOKENS_PER_SECOND,
                runId=run_id,
                parentId=parent,
                id=text_id,
                content=piece,
            )

    def branch(self, name: str) -> Script:
        """A continuation script (after a relay) whose event ids are namespaced by ``name``."""
        return Script(self.conversation_id, self.title, id_prefix=f"{self.conversation_id}-{name}")

    def await_relay(self, relay_id: str, approved: Script, denied: Script) -> None:
        self.steps.append(AwaitRelay(relay_id, approved.steps, denied.steps))

    def events(self, *, decisions: dict[str, bool] | None = None) -> list[Wire]:
        """The events in order, taking each relay's branch from ``decisions`` (with the
        ``relay_resolved`` event the server would record), stopping at the first undecided relay.
        For tests and for `convograph ingest`-style use."""
        return list(_flatten(self.steps, decisions or {}))


def _flatten(steps: list[Step | AwaitRelay], decisions: dict[str, bool]) -> Iterator[Wire]:
    for step in steps:
        if isinstance(step, Step):
            yield step.event
            continue
        if step.relay_id not in decisions:
            return
        approved = decisions[step.relay_id]
        # What the server records for a decision (same eventId, so a real decision deduplicates).
        yield {
            "type": "relay_resolved",
            "relayId": step.relay_id,
            "approved": approved,
            "eventId": f"relay-decision:{step.relay_id}",
        }
        yield from _flatten(step.approved if approved else step.denied, decisions)


def _fragments(text: str, size: int = 18) -> Iterator[str]:
    """Word-boundary pieces of roughly ``size`` characters (a few tokens), keeping spaces."""
    words = text.split(" ")
    piece = ""
    for i, word in enumerate(words):
        token = word if i == 0 else " " + word
        if piece and len(piece) + len(token) > size:
            yield piece
            piece = token
        else:
            piece += token
    if piece:
        yield piece


# --- the multi-agent research session ---------------------------------------------------------------


def research_script() -> Script:
    s = Script("demo-research", "Vector database research (nested subagents, pending relay)")
    user, lead = "run-user-1", "run-lead"
    s.emit(
        "user",
        delay=0.6,
        runId=user,
        content=(
            "We need a vector database for ~50M embeddings that are updated all day. Compare how Qdrant "
            "and Milvus handle deletes and compaction, check what pgvector would cost us, and write up "
            "a recommendation."
        ),
    )
    s.emit("harness_start", delay=0.4, runId=lead, parentId=f"{user}:user", agentId="lead")

    p1 = "run-lead-llm-1"
    s.stream(
        "reasoning",
        p1,
        "lead-think-1",
        "Three independent questions: Qdrant internals, Milvus internals, pgvector cost. The first two "
        "need real digging, so each gets its own researcher. The pgvector question is one search. "
        "Run all three at once.",
        parent=lead,
    )
    s.emit(
        "reasoning", delay=0.0, runId=p1, parentId=lead, id="lead-think-1", content="", signature="sig-lead-1"
    )
    s.stream(
        "text",
        p1,
        "lead-text-1",
        "I'll research Qdrant and Milvus with two researchers in parallel and look up pgvector myself.",
        parent=lead,
    )
    s.emit(
        "usage", delay=0.05, runId=p1, parentId=lead, inputTokens=2140, outputTokens=118, cacheReadTokens=1536
    )

    t_q, t_m, t_pg = f"{lead}/call-qdrant", f"{lead}/call-milvus", f"{lead}/call-pgvector"
    s.emit(
        "tool_call",
        delay=0.2,
        runId=lead,
        id=t_q,
        name="agent",
        input={
            "agent": "researcher",
            "task": "How does Qdrant handle deletes, compaction and updates at 50M vectors?",
        },
    )
    s.emit(
        "tool_call",
        delay=0.05,
        runId=lead,
        id=t_m,
        name="agent",
        input={
            "agent": "researcher",
            "task": "How does Milvus handle deletes, compaction and updates at 50M vectors?",
        },
    )
    s.emit(
        "tool_call",
        delay=0.05,
        runId=lead,
        id=t_pg,
        name="web_search",
        input={"query": "pgvector HNSW 50 million vectors memory cost update performance"},
    )

    # Researcher 1 (Qdrant), level 1.
    rq = "run-researcher-qdrant"
    s.emit("harness_start", delay=0.3, runId=rq, parentId=t_q, agentId="researcher-qdrant")
    # Researcher 2 (Milvus), level 1, starts concurrently; its first LLM call fails.
    rm = "run-researcher-milvus"
    s.emit("harness_start", delay=0.1, runId=rm, parentId=t_m, agentId="researcher-milvus")
    s.emit(
        "error",
        delay=1.2,
        runId="run-milvus-llm-0",
        parentId=rm,
        message="anthropic: 529 overloaded_error — Overloaded (attempt 1 of 3, retrying in 2s)",
    )

    q1 = "run-qdrant-llm-1"
    s.stream(
        "reasoning", q1, "q-think-1", "Start from the storage docs, then confirm in the source.", parent=rq
    )
    s.stream(
        "text", q1, "q-text-1", "Reading Qdrant's storage documentation and the optimizer config.", parent=rq
    )
    s.emit("usage", delay=0.05, runId=q1, parentId=rq, inputTokens=980, outputTokens=64)
    q_docs, q_cfg = f"{rq}/call-docs", f"{rq}/call-config"
    s.emit(
        "tool_call",
        delay=0.2,
        runId=rq,
        id=q_docs,
        name="fetch_url",
        input={"url": "https://qdrant.tech/documentation/concepts/optimizer/"},
    )
    s.emit(
        "tool_call",
        delay=0.05,
        runId=rq,
        id=q_cfg,
        name="fetch_url",
        input={"url": "https://qdrant.tech/documentation/concepts/storage/"},
    )

    s.emit(
        "tool_result",
        delay=0.2,
        runId=t_pg.split("/")[0],
        id=t_pg,
        name="web_search",
        output={
            "results": [
                {
                    "title": "pgvector 0.8: HNSW index build and memory",
                    "snippet": "HNSW on 50M 768-d vectors needs ~150 GB RAM to stay in memory",
                },
                {
                    "title": "Updating rows with pgvector",
                    "snippet": "Updates are delete+insert; dead tuples bloat HNSW until VACUUM",
                },
            ]
        },
    )

    m1 = "run-milvus-llm-1"
    s.stream(
        "text",
        m1,
        "m-text-1",
        "Retrying after the overload. Checking Milvus's segment and compaction design.",
        parent=rm,
    )
    s.emit("usage", delay=0.05, runId=m1, parentId=rm, inputTokens=1012, outputTokens=71)
    m_docs = f"{rm}/call-docs"
    s.emit(
        "tool_call",
        delay=0.2,
        runId=rm,
        id=m_docs,
        name="fetch_url",
        input={"url": "https://milvus.io/docs/compaction.md"},
    )

    s.emit(
        "tool_result",
        delay=0.9,
        runId=rq,
        id=q_cfg,
        name="fetch_url",
        output={
            "status": 200,
            "chars": 18344,
            "context": "Points are stored in segments; updates are copy-on-write; the WAL makes writes durable.",
        },
    )
    s.emit(
        "tool_result",
        delay=0.4,
        runId=rq,
        id=q_docs,
        name="fetch_url",
        output={
            "status": 200,
            "chars": 22901,
            "context": "Deleted points are marked and removed by the vacuum optimizer once deleted_threshold (0.2) of a segment is reached.",
        },
    )

    q2 = "run-qdrant-llm-2"
    s.stream(
        "text",
        q2,
        "q-text-2",
        "The docs say deletes are soft until the vacuum optimizer runs. I'll have a code reader confirm "
        "the threshold logic in the source.",
        parent=rq,
    )
    s.emit(
        "usage", delay=0.05, runId=q2, parentId=rq, inputTokens=3105, outputTokens=88, cacheReadTokens=2048
    )
    q_code = f"{rq}/call-code-reader"
    s.emit(
        "tool_call",
        delay=0.2,
        runId=rq,
        id=q_code,
        name="agent",
        input={
            "agent": "code-reader",
            "task": "Find where Qdrant's vacuum optimizer decides to rebuild a segment",
        },
    )

    # Level 2: the code reader, nested under researcher-qdrant.
    cr = "run-code-reader"
    s.emit("harness_start", delay=0.3, runId=cr, parentId=q_code, agentId="code-reader")
    c1 = "run-code-reader-llm-1"
    s.stream(
        "text", c1, "c-text-1", "Cloning the repository and searching for the vacuum optimizer.", parent=cr
    )
    s.emit("usage", delay=0.05, runId=c1, parentId=cr, inputTokens=640, outputTokens=41)
    c_exec = f"{cr}/call-exec"
    s.emit(
        "tool_call",
        delay=0.2,
        runId=cr,
        id=c_exec,
        name="exec",
        input={
            "command": "git clone --depth 1 https://github.com/qdrant/qdrant && rg -n 'deleted_threshold' qdrant/lib"
        },
    )
    lines = [
        "Cloning into 'qdrant'...\n",
        "Receiving objects: 100% (4102/4102), 9.81 MiB | 12.3 MiB/s, done.\n",
        "qdrant/lib/collection/src/collection_manager/optimizers/vacuum_optimizer.rs:31:    deleted_threshold: f64,\n",
        "qdrant/lib/collection/src/collection_manager/optimizers/vacuum_optimizer.rs:88:        if deleted_ratio < self.deleted_threshold {\n",
        "qdrant/lib/collection/src/operations/config_diff.rs:142:    pub deleted_threshold: Option<f64>,\n",
    ]
    for n, line in enumerate(lines):
        s.emit(
            "tool_progress",
            delay=0.5,
            runId=cr,
            id=f"{c_exec}/progress-{n}",
            toolCallId=c_exec,
            name="exec",
            content={"channel": "stdout", "data": line},
        )
        if n == 1:
            s.emit(
                "tool_progress",
                delay=0.1,
                runId=cr,
                id=f"{c_exec}/metrics-{n}",
                toolCallId=c_exec,
                name="exec",
                content={"pid": 48213, "cpuPercent": 71.5, "rssKb": 182336, "wallMs": 2140},
            )
    s.emit(
        "tool_result",
        delay=0.3,
        runId=cr,
        id=c_exec,
        name="exec",
        output={"exitCode": 0, "stdout": "".join(lines[2:])},
    )
    c2 = "run-code-reader-llm-2"
    s.stream(
        "text",
        c2,
        "c-text-2",
        "Confirmed: vacuum_optimizer.rs rebuilds a segment only when deleted_ratio >= deleted_threshold "
        "(default 0.2) and the segment has at least vacuum_min_vector_number (1000) vectors.",
        parent=cr,
    )
    s.emit("usage", delay=0.05, runId=c2, parentId=cr, inputTokens=1880, outputTokens=66)
    s.emit("harness_end", delay=0.2, runId=cr, parentId=q_code, agentId="code-reader")
    s.emit(
        "tool_result",
        delay=0.1,
        runId=rq,
        id=q_code,
        name="agent",
        output={"result": "vacuum at deleted_ratio >= 0.2 (and >= 1000 vectors); see vacuum_optimizer.rs:88"},
    )

    s.emit(
        "tool_result",
        delay=0.2,
        runId=rm,
        id=m_docs,
        name="fetch_url",
        output={
            "status": 200,
            "chars": 15022,
            "context": "Deletes write delete logs per segment; compaction merges small segments and purges deleted entities.",
        },
    )
    m2 = "run-milvus-llm-2"
    s.stream(
        "text",
        m2,
        "m-text-2",
        "Milvus stores deletes as delta logs and purges them during compaction; frequent updates mean "
        "frequent compactions, which cost IO and temporarily double segment storage.",
        parent=rm,
    )
    s.emit("usage", delay=0.05, runId=m2, parentId=rm, inputTokens=2290, outputTokens=97)
    s.emit("harness_end", delay=0.2, runId=rm, parentId=t_m, agentId="researcher-milvus")
    s.emit(
        "tool_result",
        delay=0.1,
        runId=lead,
        id=t_m,
        name="agent",
        output={
            "result": "Delta logs + compaction; update-heavy workloads compact often (IO spikes, 2x transient storage)."
        },
    )

    q3 = "run-qdrant-llm-3"
    s.stream(
        "text",
        q3,
        "q-text-3",
        "Qdrant: updates are copy-on-write, deletes are soft and reclaimed by the vacuum optimizer at "
        "a 20% deleted ratio per segment. Tunable, and it runs in the background without blocking reads.",
        parent=rq,
    )
    s.emit("usage", delay=0.05, runId=q3, parentId=rq, inputTokens=2710, outputTokens=84)
    s.emit("harness_end", delay=0.2, runId=rq, parentId=t_q, agentId="researcher-qdrant")
    s.emit(
        "tool_result",
        delay=0.1,
        runId=lead,
        id=t_q,
        name="agent",
        output={
            "result": "Soft deletes + background vacuum at 20% deleted per segment (tunable); copy-on-write updates."
        },
    )

    p2 = "run-lead-llm-2"
    s.stream(
        "reasoning",
        p2,
        "lead-think-2",
        "Both handle deletes lazily. Qdrant's vacuum is per segment and tunable; Milvus compaction is "
        "heavier under constant updates. pgvector would need ~150 GB RAM plus VACUUM tuning.",
        parent=lead,
    )
    s.stream(
        "text",
        p2,
        "lead-text-2",
        "Recommendation: Qdrant. With updates all day, its per-segment vacuum (tunable deleted_threshold) "
        "reclaims space in the background without the compaction IO spikes Milvus shows, and unlike "
        "pgvector it does not need the whole HNSW index in RAM (~150 GB at 50M x 768-d). Keep Milvus as "
        "the fallback if we later need GPU indexes. I'd like to save this as a report.",
        parent=lead,
    )
    s.emit(
        "usage", delay=0.05, runId=p2, parentId=lead, inputTokens=5230, outputTokens=212, cacheReadTokens=4096
    )

    relay_id, write_call = "relay-write-report", f"{lead}/call-write-report"
    params = {"path": "reports/vector-db-recommendation.md", "bytes": 2381}
    s.emit(
        "relay",
        delay=0.3,
        runId=lead,
        id=relay_id,
        kind="permission",
        toolCallId=write_call,
        tool="write_file",
        params=params,
    )

    approved = s.branch("write-approved")
    approved.emit("tool_call", delay=0.2, runId=lead, id=write_call, name="write_file", input=params)
    approved.emit(
        "tool_result",
        delay=0.4,
        runId=lead,
        id=write_call,
        name="write_file",
        output={"result": "ok", "path": params["path"], "bytes": 2381},
    )
    p3 = "run-lead-llm-3"
    approved.stream(
        "text", p3, "lead-text-3", "Saved the report to reports/vector-db-recommendation.md.", parent=lead
    )
    approved.emit("usage", delay=0.05, runId=p3, parentId=lead, inputTokens=5510, outputTokens=19)
    approved.emit("harness_end", delay=0.2, runId=lead, parentId=f"{user}:user", agentId="lead")

    denied = s.branch("write-denied")
    denied.emit(
        "tool_result",
        delay=0.2,
        runId=lead,
        id=write_call,
        name="write_file",
        output={"status": "denied", "reason": "Permission denied by the user"},
    )
    denied.stream(
        "text",
        p3,
        "lead-text-3",
        "Understood, I won't write the file; the recommendation above stands.",
        parent=lead,
    )
    denied.emit("usage", delay=0.05, runId=p3, parentId=lead, inputTokens=5490, outputTokens=17)
    denied.emit("harness_end", delay=0.2, runId=lead, parentId=f"{user}:user", agentId="lead")

    s.await_relay(relay_id, approved, denied)
    return s


# --- the RLM / REPL run ------------------------------------------------------------------------------


def rlm_script() -> Script:
    s = Script("demo-rlm", "Recursive LM over 1,200 support tickets (REPL)")
    user, rlm = "run-user-rlm", "run-rlm"
    s.emit(
        "user",
        delay=0.5,
        runId=user,
        content=(
            "How many of the 1,200 support tickets in the context mention a refund, and what share of those "
            "were resolved within 24 hours?"
        ),
    )
    s.emit("harness_start", delay=0.3, runId=rlm, parentId=f"{user}:user", maxIterations=8, agentId="rlm")

    def turn(
        n: int,
        code: str,
        progress: list[tuple[str, str]],
        stdout: str,
        *,
        error: str | None = None,
        done: bool = False,
        duration: int = 40,
        think: str | None = None,
        child: Script | None = None,
    ) -> None:
        if think:
            s.stream("text", rlm, f"rlm-text-{n}", think)
        call = f"repl-{n}"
        s.emit("repl_input", delay=0.3, runId=rlm, id=call, code=code, iteration=n)
        for stream, chunk in progress:
            s.emit("repl_progress", delay=0.35, runId=rlm, id=call, chunk=chunk, stream=stream)
        if child is not None:
            child_run(call)
            s.emit(
                "repl_progress",
                delay=0.1,
                runId=rlm,
                id=call,
                chunk="[llm_query] done result=40 items\n",
                stream="stderr",
            )
            s.emit("repl_progress", delay=0.1, runId=rlm, id=call, chunk=stdout, stream="stdout")
        s.emit(
            "repl_output",
            delay=0.2,
            runId=rlm,
            id=call,
            stdout=stdout,
            error=error,
            done=done,
            iteration=n,
            durationMs=duration,
        )
        s.emit("usage", delay=0.05, runId=rlm, inputTokens=900 + 350 * n, outputTokens=60 + 10 * n)

    def child_run(call: str) -> None:
        """A child RLM run spawned by ``llm_query`` inside REPL turn ``call`` (parent: the turn)."""
        child = "run-rlm-child-1"
        s.emit(
            "harness_start",
            delay=0.3,
            runId=child,
            parentId=call,
            depth=1,
            maxIterations=3,
            agentId="rlm-child",
        )
        s.stream(
            "text", child, "child-text-1", "Classifying 40 billing tickets: 9 explicitly ask for money back."
        )
        s.emit("usage", delay=0.05, runId=child, inputTokens=6120, outputTokens=95)
        s.emit(
            "harness_end",
            delay=0.2,
            runId=child,
            parentId=call,
            reason="final",
            iterations=1,
            totalUsage={"inputTokens": 6120, "outputTokens": 95},
        )

    turn(
        1,
        "console.log(context.length)\nconsole.log(JSON.stringify(context[0], null, 1).slice(0, 300))",
        [
            ("stdout", "1200\n"),
            (
                "stdout",
                '{\n "id": "T-10001",\n "subject": "Charged twice for March",\n "createdAt": "2026-03-02T09:14:00Z",\n "resolvedAt": "2026-03-02T15:40:00Z"\n}\n',
            ),
        ],
        '1200\n{ "id": "T-10001", "subject": "Charged twice for March", ... }\n',
        think="First, the shape of the data.",
    )
    turn(
        2,
        "const refund = context.filter(t => /refund|money back|chargeback/i.test(t.subject + ' ' + t.body))\n"
        "console.log(refund.length)",
        [("stdout", "214\n")],
        "214\n",
        duration=18,
        think="Filter by keywords first; ambiguous wording gets a sub-model check.",
    )
    turn(
        3,
        "const unsure = context.filter(t => /charged|billing/i.test(t.body) && !refund.includes(t))\n"
        "const verdicts = await llm_query('Does this ticket ask for a refund? yes/no', unsure.slice(0, 40))\n"
        "console.log(verdicts.filter(v => v === 'yes').length)",
        [("stderr", "[llm_query] prompt=Does this ticket ask for a refund? context=40 items depth=1\n")],
        "9\n",
        duration=6211,
        think="Some billing tickets ask for money back without saying refund.",
        child=s,
    )
    turn(
        4,
        "const all = refund.concat(unsure.slice(0, 40).filter((t, i) => verdicts[i] === 'yes'))\n"
        "const fast = all.filter(t => (Date.parse(t.resolved.at) - Date.parse(t.createdAt)) < 864e5)\n"
        "console.log(all.length, fast.length)",
        [],
        "",
        error="TypeError: Cannot read properties of undefined (reading 'at')\n    at <anonymous>:2:47",
        duration=3,
        think="Now the 24-hour share.",
    )
    turn(
        5,
        "const fast = all.filter(t => t.resolvedAt && (Date.parse(t.resolvedAt) - Date.parse(t.createdAt)) < 864e5)\n"
        "FINAL(`${all.length} refund tickets; ${fast.length} (${(100 * fast.length / all.length).toFixed(1)}%) resolved within 24h`)",
        [("stdout", "223 161\n")],
        "223 refund tickets; 161 (72.2%) resolved within 24h",
        done=True,
        duration=11,
        think="The field is resolvedAt, not resolved.at; some tickets are still open.",
    )
    s.stream(
        "text",
        rlm,
        "rlm-final",
        "223 of the 1,200 tickets ask for a refund (214 by keyword, 9 more found by a sub-model over "
        "billing tickets). 161 of them (72.2%) were resolved within 24 hours.",
    )
    s.emit(
        "harness_end",
        delay=0.2,
        runId=rlm,
        parentId=f"{user}:user",
        reason="final",
        iterations=5,
        totalUsage={"inputTokens": 19420, "outputTokens": 575},
    )
    return s


# --- the library's bundled example, paced -------------------------------------------------------------


def retry_policies_script() -> Script:
    s = Script("demo-retry-policies", "HTTP client retry policies (approved and denied relays)")
    for event in multi_agent_events():
        fields = {k: v for k, v in event.items() if k not in ("type", "eventId", "timestamp")}
        kind = event["type"]
        if kind in ("text", "reasoning"):
            delay = len(str(event.get("content", ""))) / CHARS_PER_TOKEN / TOKENS_PER_SECOND
        elif kind == "tool_result":
            delay = 0.7
        elif kind in ("relay_resolved", "user"):
            delay = 1.0
        else:
            delay = 0.15
        s.emit(kind, delay=delay, **fields)
    return s


DEMO_CONVERSATIONS: Final = (research_script, rlm_script, retry_policies_script)
"""Factories of every bundled demo conversation, in the order the demo plays them."""
