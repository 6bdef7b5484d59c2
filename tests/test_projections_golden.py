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
message output.
Re-recorded (2026-11-28) for issue 26 item 5: every request history opens with a user message
(`OPENING_USER_TEXT` when none was logged), empty user messages read `EMPTY_USER_TEXT` and empty
OpenAI tool results `EMPTY_RESULT_TEXT`. Checked before re-recording: no thread or DAG output
changed, and every changed message output maps back to the old one by undoing exactly those
three substitutions (for Anthropic, removing the stand-in texts and merging the same-role
messages they separated, as the old renderer did).

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
    "random-0": "aed6d7704c184374",
    "shuffled-0": "90b68c34cbaa6ea9",
    "random-1": "04cc967e32497f0a",
    "random-2": "3679e43f0fae0f39",
    "shuffled-2": "6d15a4a322ddb462",
    "random-3": "6cb155c9e587fca9",
    "random-4": "2232b8fd7e19b73d",
    "shuffled-4": "f523d3303aaaf4c4",
    "random-5": "753225c14f8d0b9c",
    "random-6": "8e456712048c4565",
    "shuffled-6": "527e12c1b1adf605",
    "random-7": "d2ddcc1d9d100550",
    "random-8": "64040220af3c68e5",
    "shuffled-8": "7901492a712cb54c",
    "random-9": "3a09a7be3f23a6ba",
    "random-10": "d112d3a50c01a4e4",
    "shuffled-10": "862bdb037de34ad2",
    "random-11": "fa6d61d933dd7b13",
    "random-12": "54c5e190b68dd18d",
    "shuffled-12": "66796c1b50eded5e",
    "random-13": "9134035fd30dad77",
    "random-14": "034b8b52aa5a2398",
    "shuffled-14": "2cb247ff5b30f70f",
    "random-15": "d48f47f51d380ebc",
    "random-16": "e05b9a8efcb1e7c1",
    "shuffled-16": "6ab28fd59ca582d8",
    "random-17": "bc16814cd89a1e03",
    "random-18": "0fb498c722a3be7f",
    "shuffled-18": "701faac346e3401a",
    "random-19": "ea431145768f8029",
    "random-20": "87bb03dab2cf269e",
    "shuffled-20": "40b044964d7cbf5d",
    "random-21": "201b19dc7a974bf3",
    "random-22": "6bd82d173415c221",
    "shuffled-22": "be513124b772a351",
    "random-23": "63d06faa3bcb14a8",
    "random-24": "3982e133154b07a9",
    "shuffled-24": "9c43c60eeb2c263a",
    "random-25": "61a8d129220e38c2",
    "random-26": "ccd9c12914158d03",
    "shuffled-26": "5b7bcbafdb405e6b",
    "random-27": "677badff0e5dab0a",
    "random-28": "f8e2ed452fe1c17e",
    "shuffled-28": "7e9581a39520e4b2",
    "random-29": "1aa842c322a63b2c",
    "random-30": "bb88c441dd8841f1",
    "shuffled-30": "f2c0ea5a663116d9",
    "random-31": "d86f17d69d755a65",
    "random-32": "85794471f0a34a30",
    "shuffled-32": "88bf9e916bc338db",
    "random-33": "b3de87ef8858820e",
    "random-34": "9e481be5145ce07f",
    "shuffled-34": "e444dd62025e7718",
    "random-35": "9e608ce0459de9cf",
    "random-36": "cbd21baa4cf4716a",
    "shuffled-36": "54459d658001382c",
    "random-37": "0e3459b50e1f2427",
    "random-38": "d381dc832c7e6dbf",
    "shuffled-38": "8651e51038f6f6fe",
    "random-39": "ae65c520a794ebb6",
    "random-40": "6416e2a629899091",
    "shuffled-40": "8ab585cdcaac4134",
    "random-41": "ba9076cbc3f64769",
    "random-42": "3326e928a5c9e75e",
    "shuffled-42": "7b9517d80ba69be7",
    "random-43": "75754e28adff2555",
    "random-44": "c055cd2e03306057",
    "shuffled-44": "88a5fdd5813c94b9",
    "random-45": "ede4b96f2f1ea17e",
    "random-46": "873764769f0c4e31",
    "shuffled-46": "38a655be9a9d2205",
    "random-47": "43bc99e60b4e7f62",
    "random-48": "6f47966ee294d0c8",
    "shuffled-48": "85d698fdb3618642",
    "random-49": "7e204013cdb8aacd",
    "random-50": "2ac9c60d425e9ae8",
    "shuffled-50": "a7d14bcaa88e975b",
    "random-51": "084be0fe620f5b2d",
    "random-52": "36afcc23c747fd33",
    "shuffled-52": "2ea2a8d8e79c615f",
    "random-53": "59a0a1b2fb0a4495",
    "random-54": "12e8edd719ac6a3f",
    "shuffled-54": "7ec3193938f74fc3",
    "random-55": "e896fcb2ff3842a8",
    "random-56": "58b7e530d3a0db3b",
    "shuffled-56": "08b23a8a5e107d25",
    "random-57": "873764769f0c4e31",
    "random-58": "04c24ca13f4d3e11",
    "shuffled-58": "6a6f2d13340c53e2",
    "random-59": "155d1b9602ac3f13",
    "random-60": "a9621385160f4421",
    "shuffled-60": "3a1ca1b73cd0b7b7",
    "random-61": "22893dbec7476345",
    "random-62": "d7a79a42059b55a7",
    "shuffled-62": "09d15fc68448d89c",
    "random-63": "253fa7dbe56872ff",
    "random-64": "07b3f79df7bc3538",
    "shuffled-64": "12017c92ef7eb039",
    "random-65": "3f555621dccb9043",
    "random-66": "8d7287a3bc531fdd",
    "shuffled-66": "c89be19c548697be",
    "random-67": "1f8d1902e83c9925",
    "random-68": "b2e098eb2343d6f5",
    "shuffled-68": "5a1c2a115c346da7",
    "random-69": "9895e44daf7ad905",
    "random-70": "57383d18193bf592",
    "shuffled-70": "9d3ecc0ed302adf1",
    "random-71": "7f532f107f4bd045",
    "random-72": "dd214f4ca0d7416c",
    "shuffled-72": "cb83f08d52beb49a",
    "random-73": "130bdb9a6296a3a6",
    "random-74": "7d1f914eca500f2f",
    "shuffled-74": "de410f071321a8b8",
    "random-75": "3d0a12a4969e8023",
    "random-76": "acc61341a5ad03ab",
    "shuffled-76": "ad7f939289f6fe5e",
    "random-77": "39a20c8525f342cd",
    "random-78": "38c3578fbf652adb",
    "shuffled-78": "28c8c99c4d1015a9",
    "random-79": "1746e72967f1cbba",
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
