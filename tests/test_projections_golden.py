"""Golden outputs: the one-shot projections stay byte-identical (as JSON) across optimisations.

Each case is a deterministic stream (seeded `random.Random`, no Hypothesis: the inputs must not
change with a library upgrade) covering interrupted, denied, parallel, nested and orphan calls,
provider runs, signed and unsigned reasoning, streamed text, progress, errors and user follow-ups,
plus shuffled-and-redelivered variants (late parents, results before calls) and the benchmark's
agent-harness shape. For every case the JSON of the flat-graph and hypergraph thread (default and
each `ViewOptions`), messages in every format, DAG layout and SVG is hashed; the digests were
recorded from the implementation before the one-shot fast paths were added.

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
    "random-0": "ef04bbb6e1a09b00",
    "shuffled-0": "c89d2bb3ef0d58a1",
    "random-1": "cbacf8fe84c8314e",
    "random-2": "3679e43f0fae0f39",
    "shuffled-2": "6d15a4a322ddb462",
    "random-3": "b7d1625b22f34aee",
    "random-4": "5a554d238243cc4f",
    "shuffled-4": "fa2e4a63ccaf1297",
    "random-5": "ccf80aebf115d5a4",
    "random-6": "860f2a66b64d0f9b",
    "shuffled-6": "3abd0fb6fef93f94",
    "random-7": "98024c34321a7e7f",
    "random-8": "a1ad882f675b3636",
    "shuffled-8": "46b1bd9953b5646c",
    "random-9": "9676a48403d92593",
    "random-10": "1b95f66fc17a7a90",
    "shuffled-10": "cfc8787c27b51ab2",
    "random-11": "8e03f97f1fac1e18",
    "random-12": "0b3ed6304e91ff87",
    "shuffled-12": "31c277d046eda1fc",
    "random-13": "da99fbe6b2c06c19",
    "random-14": "034b8b52aa5a2398",
    "shuffled-14": "2cb247ff5b30f70f",
    "random-15": "d48f47f51d380ebc",
    "random-16": "20868503670b849d",
    "shuffled-16": "24682464a6137aa5",
    "random-17": "e7ef72c23a07f3b2",
    "random-18": "51a8b6c5288325e2",
    "shuffled-18": "4c0f55ea7a6b59eb",
    "random-19": "ea431145768f8029",
    "random-20": "0202144fd89228b3",
    "shuffled-20": "481b1a071587ebfe",
    "random-21": "4c10f5312fe39a2a",
    "random-22": "0ca3e75d1db43dee",
    "shuffled-22": "a47c4944ab664721",
    "random-23": "475524cdef5142c5",
    "random-24": "3278df23245cb814",
    "shuffled-24": "62c62912bd5813e3",
    "random-25": "55c11083ebef8ab0",
    "random-26": "d1fdb35bc2dc3c59",
    "shuffled-26": "420dd735a5d159cc",
    "random-27": "3e768a64dbc2ddbe",
    "random-28": "d81da9106987eb49",
    "shuffled-28": "3f38ca3ecccf916e",
    "random-29": "3cb0d947d0e72a5f",
    "random-30": "4dc86ef622b69e6e",
    "shuffled-30": "da344e4a97aed416",
    "random-31": "bc895eecbbfe3cf0",
    "random-32": "85794471f0a34a30",
    "shuffled-32": "157c519bbd1326af",
    "random-33": "828d7fedea291289",
    "random-34": "0b30f7f29c641ecd",
    "shuffled-34": "8104b3f0f9e97b2d",
    "random-35": "e5c2993856ed1524",
    "random-36": "36750eb36dc45881",
    "shuffled-36": "858eb300f5d20e4f",
    "random-37": "efcff0e49113e5da",
    "random-38": "fbd07209a214a9f1",
    "shuffled-38": "4f3a7931ef97c996",
    "random-39": "42f7d8ea1f69fe8d",
    "random-40": "4a05a29d7382caa7",
    "shuffled-40": "e54ee8071f9e29c5",
    "random-41": "3c2654a6d17f6df5",
    "random-42": "67e330fb4441e077",
    "shuffled-42": "81ce588507141e90",
    "random-43": "322e7d3f5afe7632",
    "random-44": "6a1e7009e1f73a8c",
    "shuffled-44": "3e72c96ce05a509d",
    "random-45": "1b6502c9aad7418c",
    "random-46": "adede2200d64542a",
    "shuffled-46": "8a2dc9cd449cb244",
    "random-47": "177dc1ea7134fe48",
    "random-48": "f5d839eca04569ec",
    "shuffled-48": "213268f901187d23",
    "random-49": "487b6133e6d105d0",
    "random-50": "afd5b6a89b9e3ead",
    "shuffled-50": "aedb6efe892fe3e9",
    "random-51": "6e36b158e486e2df",
    "random-52": "aad09e187a0552b1",
    "shuffled-52": "4eabce21f02063f6",
    "random-53": "999e9eb66cccdde7",
    "random-54": "beb84875f54426cd",
    "shuffled-54": "d2fa3d446d8aaa4b",
    "random-55": "e792cb37234e5c62",
    "random-56": "4d407f32fc41fe10",
    "shuffled-56": "1716faac5302c4b5",
    "random-57": "adede2200d64542a",
    "random-58": "1fdd7e580908ed87",
    "shuffled-58": "470d5fa1890ebe7e",
    "random-59": "8ae4bce1c782aaea",
    "random-60": "f6c2ce8cd2385a28",
    "shuffled-60": "672462f844c4226c",
    "random-61": "0016fc4ec08489bb",
    "random-62": "34e4e41c917fc7b9",
    "shuffled-62": "cb37b0aecb36912d",
    "random-63": "64c5ad0fec93421e",
    "random-64": "85ea690101505d1f",
    "shuffled-64": "c2e13777cb8bc877",
    "random-65": "760981337bed4dc5",
    "random-66": "8fa1e9f06ce4cb4c",
    "shuffled-66": "6b29bf076890b37e",
    "random-67": "5da40c12e40d7f03",
    "random-68": "04bf73ccafa35038",
    "shuffled-68": "38e28851aeab08d8",
    "random-69": "489116f315b1c2fa",
    "random-70": "e7399e9a62985f94",
    "shuffled-70": "60882429c2463326",
    "random-71": "037586c3125a9df5",
    "random-72": "dd214f4ca0d7416c",
    "shuffled-72": "cb83f08d52beb49a",
    "random-73": "65e0277929d1360d",
    "random-74": "2a81303d249006a9",
    "shuffled-74": "9a9c490676193ec0",
    "random-75": "71ebe13773b2a7d0",
    "random-76": "9acc4edeb93070fc",
    "shuffled-76": "61d64dde1c4e275c",
    "random-77": "a0b4a36bfff0e943",
    "random-78": "8e1f0f059232382d",
    "shuffled-78": "affa252156b1ea65",
    "random-79": "dfb71a3ab9b153ee",
    "agent-harness-25": "3c6cb83baa4711f1",
}


@pytest.mark.parametrize(("name", "events"), list(cases()), ids=[name for name, _ in cases()])
def test_one_shot_outputs_match_the_golden_digests(name: str, events: list[dict[str, Any]]) -> None:
    assert combined(events) == GOLDEN[name], digest(events)


if __name__ == "__main__":
    print("GOLDEN: dict[str, str] = {")
    for case_name, case_events in cases():
        print(f'    "{case_name}": "{combined(case_events)}",')
    print("}")
