"""Deterministic conversation streams for the projection benchmark and tests.

`agent_conversation(turns)` is the real agent-harness shape (spec §1.5): per user turn an agent run
with lifecycle, provider runs (parent = the agent's run id) streaming reasoning and text, relays,
tool calls with progress and results, every fourth call spawning a subagent that does the same one
level down, usage per provider call. About 50 nodes per turn.
"""

from __future__ import annotations

from typing import Any


def agent_conversation(turns: int, *, chunks: int = 3, calls: int = 3) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    counter = 0

    def fresh(prefix: str) -> str:
        nonlocal counter
        counter += 1
        return f"{prefix}{counter}"

    def agent(run: str, parent: str | None, depth: int) -> None:
        start: dict[str, Any] = {"type": "harness_start", "runId": run, "agentId": run}
        if parent is not None:
            start["parentId"] = parent
        events.append(start)
        for step in range(2):
            provider = fresh("p")
            rid, tid = fresh("r"), fresh("t")
            for c in range(chunks):
                events.append(
                    {"type": "reasoning", "runId": provider, "parentId": run, "id": rid, "content": f"think {c} "}
                )
            for c in range(chunks):
                events.append(
                    {"type": "text", "runId": provider, "parentId": run, "id": tid, "content": f"chunk {c} of {run}. "}
                )
            events.append({"type": "usage", "runId": provider, "parentId": run, "inputTokens": 50, "outputTokens": 20})
            if step == 1:
                break
            ids = [f"{run}/{fresh('c')}" for _ in range(calls)]
            for i, call in enumerate(ids):
                if i == 0:
                    events.append(
                        {"type": "relay", "kind": "permission", "runId": run, "id": fresh("relay"),
                         "toolCallId": call, "tool": "exec", "params": {"cmd": "ls"}}
                    )
                name = "agent" if (i == 1 and depth < 2 and counter % 4 == 0) else "exec"
                events.append({"type": "tool_call", "runId": run, "id": call, "name": name, "input": {"cmd": f"echo {i}"}})
            for i, call in enumerate(ids):
                name = events[-calls + i]["name"] if False else "exec"
                if any(e.get("id") == call and e.get("name") == "agent" for e in events[-2 * calls - 1 :]):
                    agent(fresh("sub"), call, depth + 1)
                    name = "agent"
                else:
                    events.append({"type": "tool_progress", "runId": run, "id": fresh("pg"), "toolCallId": call,
                                   "name": "exec", "content": {"channel": "stdout", "data": "line\n"}})
                    events.append({"type": "tool_progress", "runId": run, "id": fresh("pg"), "toolCallId": call,
                                   "name": "exec", "content": {"pid": 7, "cpuPercent": 1.0, "rssKb": 10, "wallMs": 5}})
                events.append({"type": "tool_result", "runId": run, "id": call, "name": name, "output": {"result": i}})
        events.append({"type": "harness_end", "runId": run, "agentId": run})

    previous: str | None = None
    for turn in range(turns):
        user_run = f"u{turn}"
        user: dict[str, Any] = {"type": "user", "runId": user_run, "content": f"question {turn}"}
        if previous is not None:
            user["parentId"] = previous
        events.append(user)
        run = f"a{turn}"
        agent(run, f"{user_run}:user", 0)
        previous = f"{run}:harness_end"
    return events
