"""Golden outputs: the one-shot projections stay byte-identical (as JSON) across optimisations.

Each case is a deterministic stream (seeded `random.Random`, no Hypothesis: the inputs must not
change with a library upgrade) covering interrupted, denied, parallel, nested and orphan calls,
provider runs, signed and unsigned reasoning, streamed text, progress, errors and user follow-ups,
plus shuffled-and-redelivered variants (late parents, results before calls) and the benchmark's
agent-harness shape. For every case the JSON of the flat-graph and hypergraph thread (default and
each `ViewOptions`), messages in every format, DAG layout and SVG is hashed; the digests were
recorded from the implementation before the one-shot fast paths were added, and re-recorded once
(2026-11-27) for a deliberate change: the flat DAG lists its edges in their targets' arrival order
(was grouped by source); nodes, groups and sizes were checked identical before and after. Re-recorded
again (2026-11-27, fourteenth session) for another: a signed reasoning node is a thread view of its
own (was merged with the reasoning next to it, voiding its signature). Checked before re-recording:
every changed thread output equals the new one with consecutive reasoning views of a run merged
back, and the OpenAI outputs did not change. And once more the same day: reasoning views gained
``redactedData`` (null in every case here); checked that nothing else changed in any thread or
message output. Re-recorded (shuffled-10, -12, -24) when chunks waiting for a late spawner started
to keep their arrival order (`sources._drain`: a later chunk overtook an earlier one whose spawner
was placed in the same retry pass); checked that only those views moved, to arrival order.

A deliberate output change re-records them: ``python -m tests.test_projections_golden``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from benchmarks.projections_workload import agent_conversation

from convograph import create_graph, reduce_events, to_jsonable
from convograph.hypergraph import create_conversation, default_active, reduce_conversation_events
from convograph.projections import ViewOptions, project_dag, project_messages, project_thread

OPTIONS: dict[str, ViewOptions | None] = {
    "default": None,
    "hide_reasoning": ViewOptions(hide_reasoning=True),
    "collapse_tools": ViewOptions(collapse_tools=True),
    "hide_subagents": ViewOptions(hide_subagents=True),
}


def random_stream(rnd: random.Random) -> list[dict[str, Any]]:
    """One agent-harness stream drawn with ``rnd`` (the shapes of `agent_streams`, plus streamed
    text, progress and provider runs with several chunks)."""
    events: list[dict[str, Any]] = []
    counter = 0

    def fresh(prefix: str) -> str:
        nonlocal counter
        counter += 1
        return f"{prefix}{counter}"

    def agent(run: str, parent: str | None, depth: int) -> None:
        start: dict[str, Any] = {"type": "harness_start", "runId": run}
        if parent is not None:
            start["parentId"] = parent
        events.append(start)
        for _ in range(rnd.randint(0, 7)):
            action = rnd.choice(
                ["text", "provider", "reasoning", "calls", "denied", "orphan", "subagent", "error", "user"]
            )
            if action == "text":
                text_id = fresh("t")
                for piece in range(rnd.randint(1, 3)):
                    content = rnd.choice(["", "a", "line\nnext", "é ü", f"piece {piece} " * 9])
                    events.append({"type": "text", "runId": run, "id": text_id, "content": content})
            elif action == "provider":
                provider, text_id = fresh("p"), fresh("t")
                if rnd.random() < 0.5:
                    events.append(
                        {
                            "type": "reasoning",
                            "runId": provider,
                            "parentId": run,
                            "id": fresh("r"),
                            "content": "hm",
                        }
                    )
                for piece in range(rnd.randint(1, 3)):
                    events.append(
                        {
                            "type": "text",
                            "runId": provider,
                            "parentId": run,
                            "id": text_id,
                            "content": f"hi{piece}",
                        }
                    )
                events.append(
                    {"type": "usage", "runId": provider, "parentId": run, "inputTokens": 5, "outputTokens": 2}
                )
            elif action == "reasoning":
                event: dict[str, Any] = {"type": "reasoning", "runId": run, "id": fresh("r"), "content": "th"}
                if rnd.random() < 0.5:
                    event["signature"] = "sig"
                events.append(event)
            elif action == "calls":
                ids = [f"{run}/{fresh('c')}" for _ in range(rnd.randint(1, 3))]
                for call in ids:
                    tool_input = rnd.choice([{"a": 1}, None, "raw", [1], {"cmd": "x" * 50}])
                    events.append(
                        {"type": "tool_call", "runId": run, "id": call, "name": "exec", "input": tool_input}
                    )
                answered = [c for c in ids if rnd.random() < 0.6]  # the rest are interrupted
                rnd.shuffle(answered)
                for call in answered:
                    if rnd.random() < 0.5:
                        progress: list[dict[str, Any]] = [
                            {"channel": "stdout", "data": "o\n"},
                            {"pid": 3, "cpuPercent": 1.5},
                        ]
                        for chunk in progress:
                            events.append(
                                {
                                    "type": "tool_progress",
                                    "runId": run,
                                    "id": fresh("pg"),
                                    "toolCallId": call,
                                    "name": "exec",
                                    "content": chunk,
                                }
                            )
                    output = rnd.choice(["ok", {"x": 1}, "", None, "ü" * 3])
                    events.append(
                        {"type": "tool_result", "runId": run, "id": call, "name": "exec", "output": output}
                    )
            elif action == "denied":
                call = f"{run}/{fresh('d')}"
                relay = {
                    "type": "relay",
                    "kind": "permission",
                    "runId": run,
                    "id": fresh("relay"),
                    "toolCallId": call,
                    "tool": "rm",
                    "params": {"p": 1},
                }
                denied = {
                    "type": "tool_result",
                    "runId": run,
                    "id": call,
                    "name": "rm",
                    "output": {"status": "denied", "reason": "no"},
                }
                events.extend([relay, denied])
            elif action == "orphan":
                events.append(
                    {"type": "tool_result", "runId": run, "id": fresh("ghost"), "name": "x", "output": 1}
                )
            elif action == "subagent" and depth < 2:
                call = f"{run}/{fresh('s')}"
                events.append({"type": "tool_call", "runId": run, "id": call, "name": "agent", "input": {}})
                agent(fresh("sub"), call, depth + 1)
                if rnd.random() < 0.5:
                    events.append(
                        {"type": "tool_result", "runId": run, "id": call, "name": "agent", "output": "r"}
                    )
            elif action == "error":
                events.append({"type": "error", "runId": run, "message": "boom"})
            elif action == "user":
                events.append({"type": "user", "runId": fresh("u"), "parentId": run, "content": "more"})
        if rnd.random() < 0.6:
            events.append({"type": "harness_end", "runId": run})

    previous: str | None = None
    for turn in range(rnd.randint(1, 5)):
        user = f"user{turn}"
        user_event: dict[str, Any] = {"type": "user", "runId": user, "content": rnd.choice(["q", "", "why?"])}
        if previous is not None and rnd.random() < 0.5:
            user_event["parentId"] = previous
        events.append(user_event)
        agent(f"agent{turn}", f"{user}:user", 0)
        previous = f"agent{turn}:harness_start"
    return events


def cases() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for seed in range(80):
        rnd = random.Random(seed)
        events = random_stream(rnd)
        yield f"random-{seed}", events
        if seed % 2 == 0:  # results before calls, children before parents, redelivery
            shuffled = list(events)
            rnd.shuffle(shuffled)
            yield f"shuffled-{seed}", shuffled + shuffled[: len(shuffled) // 3]
    yield "agent-harness-25", agent_conversation(25)


def _encode(value: Any) -> bytes:
    return json.dumps(to_jsonable(value), ensure_ascii=False, separators=(",", ":")).encode()


def outputs(events: list[dict[str, Any]]) -> Iterator[tuple[str, Callable[[], Any]]]:
    graph = reduce_events(create_graph(), events)
    conv = reduce_conversation_events(create_conversation(), events)
    active = default_active(conv)
    for name, options in OPTIONS.items():
        yield f"flat thread {name}", partial(project_thread, graph, options=options)
        yield f"hypergraph thread {name}", partial(project_thread, conv, active, options=options)
    for fmt in ("openai", "anthropic", "gateway"):
        yield f"flat messages {fmt}", partial(project_messages, graph, format=fmt)
        yield f"hypergraph messages {fmt}", partial(project_messages, conv, active, format=fmt)
    yield "flat dag", partial(project_dag, graph)
    yield "flat svg", lambda: project_dag(graph).to_svg()
    yield "hypergraph dag", partial(project_dag, conv, active)
    yield "hypergraph svg", lambda: project_dag(conv, active).to_svg()


def digest(events: list[dict[str, Any]]) -> dict[str, str]:
    return {label: hashlib.sha256(_encode(fn())).hexdigest()[:16] for label, fn in outputs(events)}


def combined(events: list[dict[str, Any]]) -> str:
    """One digest over every output of a case (the per-output digests name what changed)."""
    return hashlib.sha256(json.dumps(digest(events), sort_keys=True).encode()).hexdigest()[:16]


GOLDEN: dict[str, str] = {
    "random-0": "b57e0e296778b7e0",
    "shuffled-0": "5226a8eea5e5ad31",
    "random-1": "fc119e72bbde112c",
    "random-2": "3679e43f0fae0f39",
    "shuffled-2": "6d15a4a322ddb462",
    "random-3": "6cb155c9e587fca9",
    "random-4": "0a62fb27da1b132b",
    "shuffled-4": "6323c5ae5e1df8c6",
    "random-5": "abb17d76c966b267",
    "random-6": "3636f217e9c31707",
    "shuffled-6": "c68c6e5d93599d7c",
    "random-7": "ef211ca20a12c1ca",
    "random-8": "99acd164607b79b6",
    "shuffled-8": "05349c866339d191",
    "random-9": "e39ac658098fd47a",
    "random-10": "9c2f1115df61b054",
    "shuffled-10": "e4015a1cab82932e",
    "random-11": "f7328cdc8feb99fe",
    "random-12": "93919df831babb87",
    "shuffled-12": "8dd59cd208ae10aa",
    "random-13": "fd4e3cf35116c99e",
    "random-14": "034b8b52aa5a2398",
    "shuffled-14": "2cb247ff5b30f70f",
    "random-15": "d48f47f51d380ebc",
    "random-16": "b6714679505555df",
    "shuffled-16": "843e399dbc437bd1",
    "random-17": "5cbcc355272dbeef",
    "random-18": "be390beb14961ea8",
    "shuffled-18": "de2b97e2744d2d37",
    "random-19": "ea431145768f8029",
    "random-20": "cd34b31ff98973f6",
    "shuffled-20": "be159f4314c2bca7",
    "random-21": "49b3621253c41bd9",
    "random-22": "0ca3e75d1db43dee",
    "shuffled-22": "2484ba2181fa45ab",
    "random-23": "d4f9a53964330467",
    "random-24": "db7c7bb2458bf2b6",
    "shuffled-24": "b31e1e09f809b7f4",
    "random-25": "6e3e33f8f9d8b4fd",
    "random-26": "916e68a77a13a157",
    "shuffled-26": "ecfc22a8860a9a9d",
    "random-27": "91f8e571a09e9f43",
    "random-28": "f8e2ed452fe1c17e",
    "shuffled-28": "7e9581a39520e4b2",
    "random-29": "cb656059c1ed6021",
    "random-30": "a2998a725cd07aa3",
    "shuffled-30": "cc5fbaee5ab32043",
    "random-31": "95c2543fd2d31bbb",
    "random-32": "85794471f0a34a30",
    "shuffled-32": "157c519bbd1326af",
    "random-33": "fb2e82e7e83c7ce6",
    "random-34": "f163f4897573aab3",
    "shuffled-34": "b80fca65b0c4c945",
    "random-35": "4b27381954c4ca62",
    "random-36": "e248e4abd017f891",
    "shuffled-36": "223a51f52c3d7934",
    "random-37": "ce4fdddc81749cd4",
    "random-38": "ef92d53f21885415",
    "shuffled-38": "bfdca252c240edba",
    "random-39": "1a792cf762bfa45a",
    "random-40": "0a1080b7bad14af3",
    "shuffled-40": "a90f852105539e38",
    "random-41": "78ffdb1b0665502c",
    "random-42": "3326e928a5c9e75e",
    "shuffled-42": "81ce588507141e90",
    "random-43": "322e7d3f5afe7632",
    "random-44": "c055cd2e03306057",
    "shuffled-44": "c222d09036e86bf7",
    "random-45": "72967f257a9ab541",
    "random-46": "adede2200d64542a",
    "shuffled-46": "0bcf81b9c8bb9dfa",
    "random-47": "43bc99e60b4e7f62",
    "random-48": "1e0625438664d472",
    "shuffled-48": "52de4ea09c67061a",
    "random-49": "5be72dc922a1a7ce",
    "random-50": "91fb2f7763906fcf",
    "shuffled-50": "b96091fe9e85c0fc",
    "random-51": "084be0fe620f5b2d",
    "random-52": "90cb3e8f107f2ee8",
    "shuffled-52": "9e5d00246cf2da15",
    "random-53": "ab653ce4c97666fb",
    "random-54": "bfa58167779016c3",
    "shuffled-54": "258c659c37afaa77",
    "random-55": "e896fcb2ff3842a8",
    "random-56": "66eca0d1154479ab",
    "shuffled-56": "a512769f7bfee117",
    "random-57": "adede2200d64542a",
    "random-58": "371800c14ac97330",
    "shuffled-58": "a275fd4461a3c05c",
    "random-59": "155d1b9602ac3f13",
    "random-60": "41c21e25603f49a5",
    "shuffled-60": "4d7f042b9ecf76c0",
    "random-61": "ae75bbcb42ed0522",
    "random-62": "3157d8e97a59836e",
    "shuffled-62": "9b514a8cf29be5c5",
    "random-63": "4e6c0bf39720fcfd",
    "random-64": "5fb848cf5fe64412",
    "shuffled-64": "91062f4b898656ce",
    "random-65": "02ca8cde5431238d",
    "random-66": "c8d3ca94561c0a92",
    "shuffled-66": "6f49c055c1e15e56",
    "random-67": "1f8d1902e83c9925",
    "random-68": "b2e098eb2343d6f5",
    "shuffled-68": "413ce6b0d5feaed7",
    "random-69": "9895e44daf7ad905",
    "random-70": "03fbdd4e5eb5cb3c",
    "shuffled-70": "40187f1ccc1aaeb3",
    "random-71": "7f532f107f4bd045",
    "random-72": "dd214f4ca0d7416c",
    "shuffled-72": "cb83f08d52beb49a",
    "random-73": "3e54c64e31afdb80",
    "random-74": "e3e6791e8f244e21",
    "shuffled-74": "02bc6adc0952ed9d",
    "random-75": "11df1ce337bbbb56",
    "random-76": "63fa3bbfa143ae82",
    "shuffled-76": "030410684e6555a6",
    "random-77": "156e921b20f2f264",
    "random-78": "c7d01a1946b605b3",
    "shuffled-78": "735556d1a29a1b77",
    "random-79": "adc2ba30df179c1e",
    "agent-harness-25": "6d7354e09c9c35d8",
}


@pytest.mark.parametrize(("name", "events"), list(cases()), ids=[name for name, _ in cases()])
def test_one_shot_outputs_match_the_golden_digests(name: str, events: list[dict[str, Any]]) -> None:
    assert combined(events) == GOLDEN[name], digest(events)


if __name__ == "__main__":
    print("GOLDEN: dict[str, str] = {")
    for case_name, case_events in cases():
        print(f'    "{case_name}": "{combined(case_events)}",')
    print("}")
