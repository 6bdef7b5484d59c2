"""Deterministic agent-harness conversations for the projection benchmark.

`agent_conversation(turns)` has the real agent-harness shape (spec §1.5): per user turn an agent run
with lifecycle; provider runs (``parentId`` = the agent's run id) streaming reasoning and text, with
usage; a relay, then parallel tool calls with progress and results; every fourth call a subagent
doing the same one level down (two levels at most). About 22 nodes (flat graph) per turn.
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

    def provider_call(run: str) -> None:
        provider, reasoning_id, text_id = fresh("p"), fresh("r"), fresh("t")
        for c in range(chunks):
            events.append(
                {
                    "type": "reasoning",
                    "runId": provider,
                    "parentId": run,
                    "id": reasoning_id,
                    "content": f"think {c} ",
                }
            )
        for c in range(chunks):
            events.append(
                {
                    "type": "text",
                    "runId": provider,
                    "parentId": run,
                    "id": text_id,
                    "content": f"chunk {c} of {run}. ",
                }
            )
        events.append(
            {"type": "usage", "runId": provider, "parentId": run, "inputTokens": 50, "outputTokens": 20}
        )

    def agent(run: str, parent: str | None, depth: int) -> None:
        start: dict[str, Any] = {"type": "harness_start", "runId": run, "agentId": run}
        if parent is not None:
            start["parentId"] = parent
        events.append(start)
        provider_call(run)
        ids = [f"{run}/{fresh('c')}" for _ in range(calls)]
        spawns = {ids[1]} if depth < 2 and counter % 4 == 0 else set()
        events.append(
            {
                "type": "relay",
                "kind": "permission",
                "runId": run,
                "id": fresh("relay"),
                "toolCallId": ids[0],
                "tool": "exec",
                "params": {"cmd": "ls"},
            }
        )
        for i, call in enumerate(ids):
            name = "agent" if call in spawns else "exec"
            events.append(
                {"type": "tool_call", "runId": run, "id": call, "name": name, "input": {"cmd": f"echo {i}"}}
            )
        for i, call in enumerate(ids):
            if call in spawns:
                agent(fresh("sub"), call, depth + 1)
            else:
                events.append(
                    {
                        "type": "tool_progress",
                        "runId": run,
                        "id": fresh("pg"),
                        "toolCallId": call,
                        "name": "exec",
                        "content": {"channel": "stdout", "data": "line\n"},
                    }
                )
                events.append(
                    {
                        "type": "tool_progress",
                        "runId": run,
                        "id": fresh("pg"),
                        "toolCallId": call,
                        "name": "exec",
                        "content": {"pid": 7, "cpuPercent": 1.0, "rssKb": 10, "wallMs": 5},
                    }
                )
            name = "agent" if call in spawns else "exec"
            events.append(
                {"type": "tool_result", "runId": run, "id": call, "name": name, "output": {"result": i}}
            )
        provider_call(run)
        events.append({"type": "harness_end", "runId": run, "agentId": run})

    previous: str | None = None
    for turn in range(turns):
        user_run = f"u{turn}"
        user: dict[str, Any] = {"type": "user", "runId": user_run, "content": f"question {turn}"}
        if previous is not None:
            user["parentId"] = previous
        events.append(user)
        agent(f"a{turn}", f"{user_run}:user", 0)
        previous = f"a{turn}:harness_end"
    return events
