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
messages they separated, as the old renderer did). And again for item 6: distinct text streams of
an assistant message are joined with a blank line (were run together). Checked before
re-recording: no thread or DAG output changed, no old message output held a blank line, and
every changed one equals the old with its blank lines removed (for Anthropic, consecutive text
blocks concatenated on both sides: an unsigned thinking block left out no longer splits them).
Re-recorded (shuffled-10, -12, -24) when chunks waiting for a late spawner started to keep their
arrival order (`sources._drain`: a later chunk overtook an earlier one whose spawner was placed in
the same retry pass); checked that only those views moved, to arrival order.

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
    "random-1": "fee7ddbc13499a04",
    "random-2": "3679e43f0fae0f39",
    "shuffled-2": "6d15a4a322ddb462",
    "random-3": "6cb155c9e587fca9",
    "random-4": "2232b8fd7e19b73d",
    "shuffled-4": "42cd680cb23208c0",
    "random-5": "753225c14f8d0b9c",
    "random-6": "cdf4e1b34a0f67b4",
    "shuffled-6": "5be40161dcc9780c",
    "random-7": "3e979f471c93d94d",
    "random-8": "64040220af3c68e5",
    "shuffled-8": "49b37a0b89d23608",
    "random-9": "81bb62ed99e8656d",
    "random-10": "d112d3a50c01a4e4",
    "shuffled-10": "dcb5432ac5b15c2e",
    "random-11": "aa11318335d2971c",
    "random-12": "54c5e190b68dd18d",
    "shuffled-12": "d6c987cf6c058c74",
    "random-13": "9134035fd30dad77",
    "random-14": "034b8b52aa5a2398",
    "shuffled-14": "2cb247ff5b30f70f",
    "random-15": "d48f47f51d380ebc",
    "random-16": "241b3afa83dcd6ab",
    "shuffled-16": "bc2cc418d5ed9cb6",
    "random-17": "e0d8eef1f9b8dfe2",
    "random-18": "0fb498c722a3be7f",
    "shuffled-18": "701faac346e3401a",
    "random-19": "ea431145768f8029",
    "random-20": "87bb03dab2cf269e",
    "shuffled-20": "40b044964d7cbf5d",
    "random-21": "201b19dc7a974bf3",
    "random-22": "6bd82d173415c221",
    "shuffled-22": "be513124b772a351",
    "random-23": "63d06faa3bcb14a8",
    "random-24": "27aa839557155304",
    "shuffled-24": "65225abc3918cabf",
    "random-25": "61a8d129220e38c2",
    "random-26": "af6d069a192bdc75",
    "shuffled-26": "be8145332e062de9",
    "random-27": "7b993753e994c4c1",
    "random-28": "f8e2ed452fe1c17e",
    "shuffled-28": "7e9581a39520e4b2",
    "random-29": "61f555b86dc6907c",
    "random-30": "bb88c441dd8841f1",
    "shuffled-30": "7e16b8efbcb7b801",
    "random-31": "d86f17d69d755a65",
    "random-32": "85794471f0a34a30",
    "shuffled-32": "88bf9e916bc338db",
    "random-33": "d8c2e499a397a106",
    "random-34": "c6a80f3e87c989d4",
    "shuffled-34": "ba385f849adb9d7a",
    "random-35": "6c72850918ba5eb9",
    "random-36": "cbd21baa4cf4716a",
    "shuffled-36": "54459d658001382c",
    "random-37": "da9056c7764e0279",
    "random-38": "d381dc832c7e6dbf",
    "shuffled-38": "8651e51038f6f6fe",
    "random-39": "c500806eb0fb124d",
    "random-40": "c28c6fe1506e1c60",
    "shuffled-40": "8ab585cdcaac4134",
    "random-41": "84978ca7dba9f50e",
    "random-42": "9cc6a6855080afba",
    "shuffled-42": "90c14c2486931a1e",
    "random-43": "75754e28adff2555",
    "random-44": "c055cd2e03306057",
    "shuffled-44": "1e56033ad54cc349",
    "random-45": "4220b96b4c5a9c16",
    "random-46": "873764769f0c4e31",
    "shuffled-46": "38a655be9a9d2205",
    "random-47": "43bc99e60b4e7f62",
    "random-48": "24140c64629c358e",
    "shuffled-48": "1e6ea3cc1f05649b",
    "random-49": "579b9962999e7f6a",
    "random-50": "2ac9c60d425e9ae8",
    "shuffled-50": "95647cfa7bcca0b1",
    "random-51": "084be0fe620f5b2d",
    "random-52": "05cfe995f9dc0777",
    "shuffled-52": "f6bf93b9990cefd7",
    "random-53": "59a0a1b2fb0a4495",
    "random-54": "12e8edd719ac6a3f",
    "shuffled-54": "7ec3193938f74fc3",
    "random-55": "e896fcb2ff3842a8",
    "random-56": "2b9e52da73cd660a",
    "shuffled-56": "437385a2ac8b3920",
    "random-57": "873764769f0c4e31",
    "random-58": "04c24ca13f4d3e11",
    "shuffled-58": "8729664e6dfd21f8",
    "random-59": "33d418d7dab0f9ea",
    "random-60": "a9621385160f4421",
    "shuffled-60": "3a1ca1b73cd0b7b7",
    "random-61": "52a88fb2c03393e0",
    "random-62": "a5fe6325971a01fe",
    "shuffled-62": "748033234e9e097c",
    "random-63": "42f9fb8f66cde0ad",
    "random-64": "ade599a85a6ed59a",
    "shuffled-64": "109493667e0846e4",
    "random-65": "3f555621dccb9043",
    "random-66": "2092653f21647df5",
    "shuffled-66": "ad4c409a92a558cc",
    "random-67": "1f8d1902e83c9925",
    "random-68": "b2e098eb2343d6f5",
    "shuffled-68": "3f055c656c91c9e7",
    "random-69": "9895e44daf7ad905",
    "random-70": "57383d18193bf592",
    "shuffled-70": "6ae09406051acfdc",
    "random-71": "a25d8f386cbfa8d6",
    "random-72": "dd214f4ca0d7416c",
    "shuffled-72": "cb83f08d52beb49a",
    "random-73": "1271b21e9f8c4bc1",
    "random-74": "7d1f914eca500f2f",
    "shuffled-74": "42b30281612b8df5",
    "random-75": "16541bfcaf583038",
    "random-76": "0228fa705ccb6670",
    "shuffled-76": "fcce7560378c39d0",
    "random-77": "39a20c8525f342cd",
    "random-78": "38c3578fbf652adb",
    "shuffled-78": "28c8c99c4d1015a9",
    "random-79": "8b9725f4422a05fe",
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
