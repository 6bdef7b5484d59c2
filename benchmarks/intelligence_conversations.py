"""The conversation source of `benchmarks.intelligence` (``--source conversation``): what folding
conversation events into the context-intelligence graph costs.

    python -m benchmarks.intelligence --source conversation [--conversations N] [--quick] [--json]

Workload (`conversation_workload`, seeded): N conversations shaped as the agent harness records
them (docs/harness.md): per turn a ``user``, the agent's ``harness_start``, model calls that are
provider runs of their own (streamed ``text`` deltas, then ``usage``), the agent's ``tool_call``s
after each model call (up to four at once, run concurrently, their ``tool_result``s in finishing
order; one in eight a failure), one turn in three spawning a subagent (its own run, two model
calls, one tool call), one model call in twenty a failed attempt (an ``error`` on a run of its
own) before its retry; ``harness_end`` with ``totalUsage``.

The clock: `conversation_envelopes` (what the server's feeder sends: the structural events)
→ ``ingest_many`` in batches of 2,000 → ``wait_applied`` (everything queryable), in process, on
an embedded FalkorDB, semantic layers on (they fold conversations). CPU per envelope of this
process (journal, layer 1, the fold) and of the FalkorDB child. Only public names that existed
before the fold changed are used, so the same module measures an older checkout
(``PYTHONPATH=<old>/src``) side by side.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from convograph.events import parse_event
from convograph.intelligence.conversations import conversation_envelopes
from convograph.intelligence.service import IntelligenceService
from convograph.store import StoredEvent

T0 = 1_772_442_000_000
TOOLS = ("read_file", "grep", "bash", "edit", "web_search", "list_dir")


class _Writer:
    """One conversation's wire events with increasing timestamps and per-run ids."""

    def __init__(self, cid: str, rng: random.Random) -> None:
        self.cid = cid
        self.rng = rng
        self.events: list[dict[str, Any]] = []
        self.clock = T0 + rng.randrange(10**9)
        self.ids = 0

    def id(self, kind: str) -> str:
        self.ids += 1
        return f"{kind}-{self.ids}"

    def add(self, event: dict[str, Any], gap_ms: int = 5) -> None:
        self.clock += gap_ms
        event["timestamp"] = self.clock
        self.events.append(event)

    def model_call(self, agent_run: str, tokens: list[int]) -> None:
        if self.rng.random() < 0.05:  # a failed attempt, retried by the provider
            self.add({"type": "error", "runId": self.id("p"), "parentId": agent_run, "message": "HTTP 529"})
        run = self.id("p")
        block = self.id("t")
        for _ in range(3):
            self.add(
                {"type": "text", "runId": run, "parentId": agent_run, "id": block, "content": "word " * 8}
            )
        used = (self.rng.randrange(500, 4000), self.rng.randrange(20, 400))
        tokens[0] += used[0]
        tokens[1] += used[1]
        self.add(
            {
                "type": "usage",
                "runId": run,
                "parentId": agent_run,
                "inputTokens": used[0],
                "outputTokens": used[1],
            }
        )

    def tools(self, agent_run: str, parent: str, count: int, spawn: bool) -> None:
        calls = [f"{agent_run}/call-{self.id('c')}" for _ in range(count)]
        names = {
            call: "agent" if spawn and i == 0 else self.rng.choice(TOOLS) for i, call in enumerate(calls)
        }
        for index, call in enumerate(calls):
            self.add(
                {
                    "type": "tool_call",
                    "runId": agent_run,
                    "parentId": parent,
                    "id": call,
                    "name": names[call],
                    "input": {"i": index},
                }
            )
        if spawn:
            self.agent(calls[0], "scout", calls=2, tool_turns=1)
        self.rng.shuffle(calls)
        for call in calls:
            output: dict[str, Any] = (
                {"error": "exit 1"} if self.rng.random() < 0.125 else {"context": "ok", "result": "ok"}
            )
            self.add(
                {
                    "type": "tool_result",
                    "runId": agent_run,
                    "parentId": parent,
                    "id": call,
                    "name": names[call],
                    "output": output,
                },
                20,
            )

    def agent(self, parent: str, name: str, calls: int, tool_turns: int, spawn: bool = False) -> None:
        run = self.id("run")
        tokens = [0, 0]
        self.add({"type": "harness_start", "runId": run, "parentId": parent, "agentId": name})
        for turn in range(calls):
            self.model_call(run, tokens)
            if turn < tool_turns:
                self.tools(run, parent, self.rng.randint(1, 4), spawn and turn == 0)
        total = {"inputTokens": tokens[0], "outputTokens": tokens[1]}
        self.add(
            {
                "type": "harness_end",
                "runId": run,
                "parentId": parent,
                "agentId": name,
                "reason": "final",
                "totalUsage": total,
            }
        )


def conversation_workload(conversations: int, turns: int = 3, seed: int = 7) -> dict[str, list[StoredEvent]]:
    """``{conversation id: stored events}`` (module docstring); O(events)."""
    rng = random.Random(seed)
    out: dict[str, list[StoredEvent]] = {}
    for index in range(conversations):
        writer = _Writer(f"bench:c{index}", rng)
        for _turn in range(turns):
            user = writer.id("u")
            writer.add({"type": "user", "runId": user, "content": "Do the next thing."})
            model_calls = rng.randint(2, 5)
            writer.agent(
                f"{user}:user",
                "lead",
                calls=model_calls,
                tool_turns=model_calls - 1,
                spawn=rng.random() < 1 / 3,
            )
        out[writer.cid] = [
            StoredEvent(
                seq=seq,
                conversation_id=writer.cid,
                event=parse_event(event),
                received_at=event["timestamp"] / 1000,
            )
            for seq, event in enumerate(writer.events, 1)
        ]
    return out


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(conversations: int, *, seed: int = 7) -> dict[str, Any]:
    """Build the workload, ingest it, and report rate, CPU per envelope and what the graph holds."""
    workload = conversation_workload(conversations, seed=seed)
    envelopes = [e for cid, stored in workload.items() for e in conversation_envelopes(cid, stored)]
    results: dict[str, Any] = {
        "conversations": conversations,
        "conversation_events": sum(len(stored) for stored in workload.values()),
        "envelopes": len(envelopes),
        "load_average_start": round(os.getloadavg()[0], 2),
    }
    with tempfile.TemporaryDirectory(prefix="cg-bench-conv-") as tmp:
        service = IntelligenceService.open(Path(tmp), semantic_layers=True)
        try:
            child = service.embedded.pid if service.embedded is not None else None
            if child is None:
                raise RuntimeError("the benchmark needs the embedded FalkorDB child")
            before = (_cpu(os.getpid()), _cpu(child))
            start = time.perf_counter()
            for offset in range(0, len(envelopes), 2000):
                service.ingest_many(envelopes[offset : offset + 2000])
            if not service.wait_applied(timeout=1800):
                raise TimeoutError("ingest did not drain")
            wall = time.perf_counter() - start
            process, graph = _cpu(os.getpid()) - before[0], _cpu(child) - before[1]
            results.update(
                {
                    "envelopes_per_s": round(len(envelopes) / wall),
                    "process_cpu_us_per_envelope": round(process / len(envelopes) * 1e6, 1),
                    "falkordb_cpu_us_per_envelope": round(graph / len(envelopes) * 1e6, 1),
                    "graph": _graph_counts(service),
                }
            )
        finally:
            service.close()
    results["load_average_end"] = round(os.getloadavg()[0], 2)
    return results


def _graph_counts(service: IntelligenceService) -> dict[str, Any]:
    def one(query: str) -> Any:
        rows = service.cypher(query, workspace="bench").results
        return next(iter(rows[0].values())) if rows else None

    return {
        "nodes": one("MATCH (n) RETURN count(n)"),
        "edges": one("MATCH ()-[r]->() RETURN count(r)"),
        "iterations_with_tokens": one(
            "MATCH (i:Iteration) WHERE i.output_tokens IS NOT NULL RETURN count(i)"
        ),
        "tool_calls": one("MATCH (t:ToolCall) RETURN count(t)"),
        "tool_calls_in_an_iteration": one(
            "MATCH (:Iteration)-[:HAS_TOOL_CALL]->(t:ToolCall) RETURN count(t)"
        ),
        "tool_rollup_calls": one("MATCH (t:Tool) RETURN sum(t.calls)"),
    }


def report(results: dict[str, Any]) -> str:
    return (
        f"{results['conversations']} conversations, {results['conversation_events']:,} conversation events, "
        f"{results['envelopes']:,} envelopes fed: {results['envelopes_per_s']:,} envelopes/s; CPU us per "
        f"envelope: process {results['process_cpu_us_per_envelope']}, FalkorDB "
        f"{results['falkordb_cpu_us_per_envelope']}; graph {results['graph']}; load average "
        f"{results['load_average_start']} -> {results['load_average_end']}"
    )
