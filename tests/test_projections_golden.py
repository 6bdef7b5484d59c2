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
back, and the OpenAI outputs did not change.

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
    "random-0": "d8539bbc35f5cc3a",
    "shuffled-0": "26c3c23d7bf5062f",
    "random-1": "fc119e72bbde112c",
    "random-2": "3679e43f0fae0f39",
    "shuffled-2": "6d15a4a322ddb462",
    "random-3": "32fd5f096378686b",
    "random-4": "d98033f6c1e52e34",
    "shuffled-4": "bc3ca9046b109aec",
    "random-5": "7d1c266529449922",
    "random-6": "1571b57a3c917a7f",
    "shuffled-6": "c887d1b34c0ba8a1",
    "random-7": "55490659d1da716b",
    "random-8": "e410a08d7d1b0b43",
    "shuffled-8": "cf56ea0e56f94f67",
    "random-9": "fe503d60042d27d4",
    "random-10": "13b9baf456282e49",
    "shuffled-10": "e1eb41ad8190d04e",
    "random-11": "45c4839e6b40413e",
    "random-12": "af509deb8a184270",
    "shuffled-12": "a2dad4e5b836b3b4",
    "random-13": "c8b9781b7e4fbd81",
    "random-14": "034b8b52aa5a2398",
    "shuffled-14": "2cb247ff5b30f70f",
    "random-15": "d48f47f51d380ebc",
    "random-16": "b8d43760a00b08aa",
    "shuffled-16": "1a87467601e8a3e4",
    "random-17": "ebcffa22f898e588",
    "random-18": "507c965d11324610",
    "shuffled-18": "0ed4f6a0597e7c2b",
    "random-19": "ea431145768f8029",
    "random-20": "96db95b2cf91cce0",
    "shuffled-20": "14b65919c592b6db",
    "random-21": "690e4dda30a2d1d8",
    "random-22": "0ca3e75d1db43dee",
    "shuffled-22": "2484ba2181fa45ab",
    "random-23": "56b92feb0dc0e25b",
    "random-24": "8e3b45e187bcd9e2",
    "shuffled-24": "76d36d6df213bac8",
    "random-25": "6e3e33f8f9d8b4fd",
    "random-26": "916e68a77a13a157",
    "shuffled-26": "ecfc22a8860a9a9d",
    "random-27": "f69fc67a3951df19",
    "random-28": "d81da9106987eb49",
    "shuffled-28": "10ead7104e6943b4",
    "random-29": "cc26c3ed46ca1e0d",
    "random-30": "e63ced00e228ab2a",
    "shuffled-30": "fbfe7ffae41bd9fe",
    "random-31": "95c2543fd2d31bbb",
    "random-32": "85794471f0a34a30",
    "shuffled-32": "157c519bbd1326af",
    "random-33": "d5ae77dc6ffe3dfb",
    "random-34": "ddd85630f530ab91",
    "shuffled-34": "999cb9aedf862ffe",
    "random-35": "f030acfcc2781cb5",
    "random-36": "eca401e2c700dfbc",
    "shuffled-36": "d7a33d2b2a1d90e6",
    "random-37": "17efc978d7a05a0c",
    "random-38": "f89c5cf352fceec9",
    "shuffled-38": "279487e49ae4c028",
    "random-39": "9de6d516982166b0",
    "random-40": "4a05a29d7382caa7",
    "shuffled-40": "7fdda53106c66be3",
    "random-41": "f462c42c7a909947",
    "random-42": "3326e928a5c9e75e",
    "shuffled-42": "81ce588507141e90",
    "random-43": "322e7d3f5afe7632",
    "random-44": "6c1884ce4197f162",
    "shuffled-44": "c9569873158cc990",
    "random-45": "dc7fb8be5e164b1d",
    "random-46": "adede2200d64542a",
    "shuffled-46": "0bcf81b9c8bb9dfa",
    "random-47": "43bc99e60b4e7f62",
    "random-48": "ef30f139100ef9bd",
    "shuffled-48": "3b9072c180ec4b7b",
    "random-49": "d092a1e1ab19b077",
    "random-50": "27ca13ca86cfe604",
    "shuffled-50": "2e61271ed471758c",
    "random-51": "6603a4e2c0ba60cf",
    "random-52": "0df28eaaae6dd62e",
    "shuffled-52": "dc5ea506595fc942",
    "random-53": "e25a270ea007b1d9",
    "random-54": "bfa58167779016c3",
    "shuffled-54": "258c659c37afaa77",
    "random-55": "e896fcb2ff3842a8",
    "random-56": "75704be85d7f7c5c",
    "shuffled-56": "e769a370267b6eea",
    "random-57": "adede2200d64542a",
    "random-58": "81b5f9b9d662e4c4",
    "shuffled-58": "5beeb411843c620c",
    "random-59": "eb6c5c41a1c0a8ed",
    "random-60": "80bca00730d6a125",
    "shuffled-60": "a7148a464a75f2ac",
    "random-61": "a1e7e8f301a4cdeb",
    "random-62": "9d8c376fd1872c79",
    "shuffled-62": "9a86ea83a58fea40",
    "random-63": "bc284bb81c7c20f3",
    "random-64": "07a05d043363da73",
    "shuffled-64": "25185064536a9fde",
    "random-65": "70774e8e61a27945",
    "random-66": "ca09dcc547de4791",
    "shuffled-66": "6b29bf076890b37e",
    "random-67": "22808516162a0d49",
    "random-68": "50740c6d98c358e7",
    "shuffled-68": "68a21681d316fd51",
    "random-69": "9895e44daf7ad905",
    "random-70": "3ae3b1607c8d898c",
    "shuffled-70": "60882429c2463326",
    "random-71": "84c3bfb98378e4cc",
    "random-72": "dd214f4ca0d7416c",
    "shuffled-72": "cb83f08d52beb49a",
    "random-73": "da6d8e9633089f71",
    "random-74": "527dd18e0dc07b14",
    "shuffled-74": "2634e968b9b0218b",
    "random-75": "09063604714851d2",
    "random-76": "31483feb4c87ec33",
    "shuffled-76": "2b4ea689387e09a8",
    "random-77": "5cf2b31d5f2c9954",
    "random-78": "8c9bd6e00876800f",
    "shuffled-78": "0b6cdb600fa05f19",
    "random-79": "19f9ed516b02d344",
    "agent-harness-25": "32b4b822e0056afd",
}


@pytest.mark.parametrize(("name", "events"), list(cases()), ids=[name for name, _ in cases()])
def test_one_shot_outputs_match_the_golden_digests(name: str, events: list[dict[str, Any]]) -> None:
    assert combined(events) == GOLDEN[name], digest(events)


if __name__ == "__main__":
    print("GOLDEN: dict[str, str] = {")
    for case_name, case_events in cases():
        print(f'    "{case_name}": "{combined(case_events)}",')
    print("}")
