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

Re-recorded (2026-11-28) for issue 27 item 3: a tool call's view says ``hasOutput`` and holds
``output: null`` before its result (was: no ``output`` key, msgspec's UNSET). Checked before
re-recording: with ``hasOutput`` and a pending ``output: null`` removed, every case gives its old
digest.

Re-recorded (2026-11-28) when a model call's ``usage``, or a run's ``harness_start`` /
``harness_end``, in a list started to mark a new assistant turn for the tool calls after it
(`ThreadBuilder.model_call_starts`): shuffled-4, -6, -8, -18, -34, -44, -48, -52, -54, -58 and -62
changed, their message outputs only (every thread and DAG digest the same, and every ordered
stream's, random-* and agent-harness-25, unchanged), each by assistant turns holding calls on both
sides of such a node now split there.
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
    "random-0": "2dd29522e78eb246",
    "shuffled-0": "f56c4f25ab67da2f",
    "random-1": "a75b5e2ef491c514",
    "random-2": "4ebb8def9aafa198",
    "shuffled-2": "9bde33788691b856",
    "random-3": "f8917f906e483d25",
    "random-4": "d3f751bbb7791890",
    "shuffled-4": "c1285efba7255657",
    "random-5": "e23ed484ece31ed7",
    "random-6": "d90da61c2371438c",
    "shuffled-6": "dbbc03fa54b6ed81",
    "random-7": "7a5d3a5b75ff9f50",
    "random-8": "6d567a79f272e9be",
    "shuffled-8": "10b583f3724e375a",
    "random-9": "13ed03fd96661478",
    "random-10": "8b43ee0fd885f9cb",
    "shuffled-10": "1ef2d49f07f6bc28",
    "random-11": "9a99a481bb49fc62",
    "random-12": "096f11ffc1f6a0e1",
    "shuffled-12": "a8105dc5ac38e72f",
    "random-13": "17d1315525fe7684",
    "random-14": "7a31de83e19aa833",
    "shuffled-14": "01cb98fc9002b077",
    "random-15": "d4b2c2c10b309b65",
    "random-16": "38d8dff55589f437",
    "shuffled-16": "376a6f6d0d7dc258",
    "random-17": "47df730196da2762",
    "random-18": "8b98a2a870cafad0",
    "shuffled-18": "d7a7422db4a63814",
    "random-19": "ea431145768f8029",
    "random-20": "fe535230b28d994a",
    "shuffled-20": "afe909ee63219309",
    "random-21": "43d360a60e9993da",
    "random-22": "4167765b72e8042e",
    "shuffled-22": "01e6093b49d931ca",
    "random-23": "cf51588141542b65",
    "random-24": "b3d31a4740d201b8",
    "shuffled-24": "d1ec324d545cfa51",
    "random-25": "5e500f3eecd0344f",
    "random-26": "58dc8fe79f625750",
    "shuffled-26": "63c1c39909997ed6",
    "random-27": "258d4d4f7b09f2cb",
    "random-28": "f8e2ed452fe1c17e",
    "shuffled-28": "7e9581a39520e4b2",
    "random-29": "a02523dc3e73a40b",
    "random-30": "f6b670fdd437689a",
    "shuffled-30": "82ba85244643b481",
    "random-31": "d8dd543a05e729e6",
    "random-32": "668a17c8567f0411",
    "shuffled-32": "5664932aaec1da45",
    "random-33": "285e851be3666fad",
    "random-34": "9fe2d087ca7da466",
    "shuffled-34": "3a086788db4b27c0",
    "random-35": "ac6e8a3d274d8961",
    "random-36": "f7f6a54866c1a584",
    "shuffled-36": "7a3b983dc9939404",
    "random-37": "cf282d5a8664d9f4",
    "random-38": "1fd4655f0317acee",
    "shuffled-38": "46797c5d3ea1c858",
    "random-39": "b7b323ea094db302",
    "random-40": "333d72e22d269ffe",
    "shuffled-40": "7ea9fbe8838da45d",
    "random-41": "6a5536852dec4324",
    "random-42": "3777b640984613f2",
    "shuffled-42": "8dc502770147d8fb",
    "random-43": "31e62b1cdcc47c57",
    "random-44": "aaf5d4fcac3679a9",
    "shuffled-44": "b6419718556fc325",
    "random-45": "8919bb56267ca8c3",
    "random-46": "873764769f0c4e31",
    "shuffled-46": "38a655be9a9d2205",
    "random-47": "147d791b1529fadc",
    "random-48": "3cbfb16e66ba6519",
    "shuffled-48": "ed5b6f4d167f0424",
    "random-49": "f8ca3a7865f386e0",
    "random-50": "058f1f4e3d885dbd",
    "shuffled-50": "c9641b0021783eb1",
    "random-51": "131030adabefb254",
    "random-52": "fde8ee6479d51d99",
    "shuffled-52": "973ba244b0f16478",
    "random-53": "eb72c4360464f1dc",
    "random-54": "3afa32461700dbdb",
    "shuffled-54": "0de3cd5e16e3029e",
    "random-55": "65fd75a5e4ee135d",
    "random-56": "9148c697fbb8f3b7",
    "shuffled-56": "98c33e10b826fe5e",
    "random-57": "873764769f0c4e31",
    "random-58": "14ed22dbe420c372",
    "shuffled-58": "bcde294306de0bee",
    "random-59": "b226971e989c2bda",
    "random-60": "d162eea06bca224d",
    "shuffled-60": "5fb65fcd65e76c21",
    "random-61": "2bd9dde40cdaebdb",
    "random-62": "c19d89934f86e820",
    "shuffled-62": "a5bddc58921bcdb4",
    "random-63": "9dcd2915c777140f",
    "random-64": "ad9ada8e6aea1ef3",
    "shuffled-64": "69a6e190ce178eb5",
    "random-65": "fe589da4e0fff3dd",
    "random-66": "db57c16a29383328",
    "shuffled-66": "13d519478ef113f8",
    "random-67": "46196517323e87e9",
    "random-68": "56cb006841f14f6a",
    "shuffled-68": "c721da893f91a812",
    "random-69": "9895e44daf7ad905",
    "random-70": "2574beb45e0d2139",
    "shuffled-70": "e4401d9987946786",
    "random-71": "4fc98cb8e63ba4bc",
    "random-72": "4b5b54c81d65940a",
    "shuffled-72": "f7fcb6f223f017ce",
    "random-73": "7b86b7f6a8df551f",
    "random-74": "20d4b2c634db128f",
    "shuffled-74": "2a9ce0d0bee8ae64",
    "random-75": "884054fd2e2c7fa8",
    "random-76": "2f3e09c121e692c6",
    "shuffled-76": "3d9c8999450a868a",
    "random-77": "793080cd08e23caa",
    "random-78": "debe33d476c2c107",
    "shuffled-78": "348aec2516c063a6",
    "random-79": "257abf6edce36256",
    "agent-harness-25": "616704facca1feb2",
}


@pytest.mark.parametrize(("name", "events"), list(cases()), ids=[name for name, _ in cases()])
def test_one_shot_outputs_match_the_golden_digests(name: str, events: list[dict[str, Any]]) -> None:
    assert combined(events) == GOLDEN[name], digest(events)


if __name__ == "__main__":
    print("GOLDEN: dict[str, str] = {")
    for case_name, case_events in cases():
        print(f'    "{case_name}": "{combined(case_events)}",')
    print("}")
