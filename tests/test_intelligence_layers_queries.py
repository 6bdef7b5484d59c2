# ruff: noqa: F811  (pytest fixtures imported from tests.test_intelligence_support)
"""Every question of docs/querying.md, run on a real FalkorDB for each source of events: hook
events (tests/fixtures/ci_layers.ndjson), and conversation events as the agent harness records
them (`tests.support.harness_conversation`) and as the OTLP ingest stores them
(`tests.support.otlp_conversation`).

Each expected answer is computed in Python from the raw events (not from the graph): here for
hook events, in `tests.support.conversation_answers` for conversation events. A question the
doc says conversation events cannot answer (the data is not there) must answer empty.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from convograph.intelligence.blobs import MemoryBlobStore
from convograph.intelligence.conversations import feed_conversation
from convograph.intelligence.engine import FalkorEngine
from convograph.intelligence.journal import MemoryJournal
from convograph.intelligence.service import IntelligenceService
from convograph.intelligence.writer import GraphNames
from convograph.store import StoredEvent
from convograph.testing import MemoryEventLog
from tests.support.conversation_answers import ConversationAnswers
from tests.support.harness_conversation import record_harness_conversation
from tests.support.otlp_conversation import record_otlp_conversation
from tests.test_intelligence_support import falkor  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "tests" / "fixtures" / "ci_layers.ndjson"
DOC = ROOT / "docs" / "querying.md"


def load_questions() -> dict[int, str]:
    """``{number: cypher}`` from docs/querying.md (``### Qn.`` heading, then a cypher block)."""
    text = DOC.read_text(encoding="utf-8")
    found = re.findall(r"### Q(\d+)\..*?\n```cypher\n(.*?)```", text, flags=re.S)
    return {int(n): query for n, query in found}


def conversation_notes() -> dict[int, str]:
    """``{number: note}``: the ``*Conversation events*: ...`` line after a question's query."""
    text = DOC.read_text(encoding="utf-8")
    found = re.findall(r"### Q(\d+)\..*?```\n\*Conversation events\*: ([^\n]*)", text, flags=re.S)
    return {int(n): note for n, note in found}


def documented_empty(source: str) -> set[int]:
    """The questions docs/querying.md says conversation events of ``source`` cannot answer: notes
    starting ``empty`` (no conversation has the data) or ``OTLP only`` (the harness's have not)."""
    notes = conversation_notes()
    empty = {n for n, note in notes.items() if note.startswith("empty")}
    if source != "otlp":
        empty |= {n for n, note in notes.items() if note.startswith("OTLP only")}
    return empty


class Data:
    """Facts computed from the raw events, independently of the graph."""

    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self.lines = lines
        self.workspace = lines[0]["workspace"]
        by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for line in lines:
            line["ms"] = int(datetime.fromisoformat(line["data"]["timestamp"]).timestamp() * 1000)
            by_session[line["data"]["session_id"]].append(line)
        self.by_session = by_session
        self.agent: dict[str, str] = {}
        for sid, events in by_session.items():
            for e in events:
                if e["event"] == "session:fork":
                    self.agent[sid] = e["data"]["metadata"]["agent_name"]
        self.spawned = [e["data"] for e in lines if e["event"] == "delegate:agent_spawned"]
        self.completed = {
            (e["data"]["parent_session_id"], e["data"]["tool_call_id"] or e["data"]["sub_session_id"]): e
            for e in lines
            if e["event"] == "delegate:agent_completed"
        }

    def iterations(self) -> list[dict[str, Any]]:
        """One entry per provider:request inside a run, with its session and llm:response data."""
        out: list[dict[str, Any]] = []
        for sid, events in self.by_session.items():
            run: str | None = None
            runs = 0
            current: dict[str, Any] | None = None
            for e in events:
                if e["event"] == "execution:start":
                    runs += 1
                    run = f"{sid}::run::{runs}"
                elif e["event"] == "execution:end":
                    run = None
                    current = None
                elif e["event"] == "provider:request" and run is not None:
                    current = {"session": sid, "run": run, "tools": 0, "response": {}}
                    out.append(current)
                elif e["event"] == "llm:response" and current is not None:
                    current["response"] = e["data"]
                elif e["event"] == "tool:pre" and current is not None:
                    current["tools"] += 1
        return out

    def resolved(self, spawned: dict[str, Any]) -> str:
        agent = spawned["agent"]
        if agent != "self":
            return str(agent)
        own = self.agent.get(spawned["parent_session_id"])
        if own is None:
            return "root"
        return own if own != "self" else "unresolved"

    def tool_calls(self) -> dict[str, dict[str, Any]]:
        calls: dict[str, dict[str, Any]] = {}
        for e in self.lines:
            if e["event"] in ("tool:pre", "tool:post", "tool:error"):
                d = e["data"]
                call = calls.setdefault(
                    d["tool_call_id"], {"name": d["tool_name"], "ok": True, "group": None}
                )
                if e["event"] == "tool:pre":
                    call["start"] = e["ms"]
                    call["group"] = d.get("parallel_group_id")
                else:
                    call["end"] = e["ms"]
                    if e["event"] == "tool:error" or d["result"].get("success") is False:
                        call["ok"] = False
        return calls


@pytest.fixture(scope="module")
def data() -> Data:
    return Data([json.loads(line) for line in DATASET.read_text(encoding="utf-8").splitlines()])


@pytest.fixture(scope="module")
def layered(falkor: FalkorEngine, data: Data) -> Iterator[IntelligenceService]:
    names = GraphNames(f"q{uuid.uuid4().hex[:10]}:")
    service = IntelligenceService(
        MemoryJournal(), falkor, MemoryBlobStore(), names=names, semantic_layers=True
    )
    service.start()
    service.ingest_many([{k: v for k, v in line.items() if k != "ms"} for line in data.lines])
    assert service.wait_applied(timeout=120)
    assert service.applier.dead_lettered == 0, service.applier.last_error
    yield service
    service.close()
    for graph in falkor.graphs():
        if graph.startswith(names.prefix):
            falkor.delete_graph(graph)


def rows(service: IntelligenceService, data: Data, number: int) -> list[dict[str, Any]]:
    result = service.cypher(load_questions()[number], workspace=data.workspace)
    return [dict(row) for row in result.results]


CONVERSATION_SOURCES = ("harness", "otlp")
"""Conversation events by producer; each source's conversations are fed to a workspace of its name."""


async def _record_conversations() -> dict[str, dict[str, list[StoredEvent]]]:
    log = MemoryEventLog()
    harness = await record_harness_conversation(log, "harness:trip")
    cid, otlp = await record_otlp_conversation(log, "otlp")
    return {"harness": {"harness:trip": harness}, "otlp": {cid: otlp}}


@pytest.fixture(scope="module")
def conversations(
    falkor: FalkorEngine,
) -> Iterator[tuple[IntelligenceService, dict[str, ConversationAnswers]]]:
    """The conversations of each source, fed as `convograph serve` feeds them, and their answers."""
    recorded = asyncio.run(_record_conversations())
    names = GraphNames(f"qc{uuid.uuid4().hex[:10]}:")
    service = IntelligenceService(
        MemoryJournal(), falkor, MemoryBlobStore(), names=names, semantic_layers=True
    )
    service.start()
    for per_source in recorded.values():
        for cid, stored in per_source.items():
            assert feed_conversation(service, cid, stored) > 0
    assert service.wait_applied(timeout=120)
    assert service.applier.dead_lettered == 0, service.applier.last_error
    yield service, {source: ConversationAnswers(items) for source, items in recorded.items()}
    service.close()
    for graph in falkor.graphs():
        if graph.startswith(names.prefix):
            falkor.delete_graph(graph)


def test_docs_have_twenty_questions() -> None:
    assert sorted(load_questions()) == list(range(1, 21))


def q1(d: Data) -> Any:
    kinds: Counter[str] = Counter()
    for _sid, events in d.by_session.items():
        names = [e["event"] for e in events]
        starts = [e for e in events if e["event"] == "session:start"]
        if "session:fork" in names:
            kinds["forked"] += 1
        elif any(e["data"].get("parent_id") for e in starts):
            kinds["sub"] += 1
        elif starts:
            kinds["root"] += 1
        else:
            kinds["incomplete"] += 1
    referenced = {s["sub_session_id"] for s in d.spawned} | {
        e["data"]["parent"] for e in d.lines if e["event"] == "session:fork"
    }
    kinds["stub"] += len(referenced - set(d.by_session))
    return [{"kind": k, "sessions": n} for k, n in sorted(kinds.items())]


def q2(d: Data) -> Any:
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for it in d.iterations():
        usage = it["response"].get("usage", {})
        agent = d.agent.get(it["session"], "(root)")
        totals[agent][0] += usage.get("input_tokens", 0)
        totals[agent][1] += usage.get("output_tokens", 0)
        totals[agent][2] += usage.get("cache_read_input_tokens", 0)
    return [
        {"agent": a, "input": v[0], "output": v[1], "cache_read": v[2]} for a, v in sorted(totals.items())
    ]


def q3(d: Data) -> Any:
    calls: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    for call in d.tool_calls().values():
        calls[call["name"]] += 1
        failures[call["name"]] += 0 if call["ok"] else 1
    out = [{"tool": t, "failures": failures[t], "calls": calls[t]} for t in calls if failures[t]]
    return sorted(out, key=lambda r: (-r["failures"], r["tool"]))


def q4(d: Data) -> Any:
    children: dict[str, list[str]] = defaultdict(list)
    for s in d.spawned:
        children[s["parent_session_id"]].append(s["sub_session_id"])

    def count(sid: str) -> int:
        return sum(1 + count(c) for c in children[sid])

    roots = [
        sid
        for sid, events in d.by_session.items()
        if not any(e["event"] == "session:fork" or e["data"].get("parent_id") for e in events)
    ]
    return [{"root": r, "descendants": count(r)} for r in sorted(roots)]


def q5(d: Data) -> Any:
    its = [it for it in d.iterations() if "duration_ms" in it["response"]]
    its.sort(key=lambda it: -it["response"]["duration_ms"])
    return [it["response"]["duration_ms"] for it in its[:5]]


def q6(d: Data) -> Any:
    loads = Counter(e["data"]["skill_name"] for e in d.lines if e["event"] == "skill:loaded")
    return [{"skill": s, "loads": n} for s, n in sorted(loads.items(), key=lambda kv: (-kv[1], kv[0]))]


def q7(d: Data) -> Any:
    out = []
    for events in d.by_session.values():
        current: dict[str, Any] | None = None
        for e in events:
            if e["event"] == "recipe:start":
                current = {"recipe": e["data"]["name"], "total": e["data"]["total_steps"], "steps_run": 0}
                out.append(current)
            elif e["event"] == "recipe:step" and current is not None:
                current["steps_run"] += 1
            elif e["event"] == "recipe:complete" and current is not None:
                current["status"] = e["data"]["final_status"]
    return sorted(out, key=lambda r: r["recipe"])


def q8(d: Data) -> Any:
    durations: dict[str, list[int]] = defaultdict(list)
    for call in d.tool_calls().values():
        if "start" in call and "end" in call:
            durations[call["name"]].append(call["end"] - call["start"])
    return {t: (sum(v) / len(v), len(v)) for t, v in durations.items()}


def q9(d: Data) -> Any:
    per_run = Counter(it["run"] for it in d.iterations())
    return sorted(per_run.items(), key=lambda kv: (-kv[1], kv[0]))[:3]


def q10(d: Data) -> Any:
    groups = Counter(c["group"] for c in d.tool_calls().values() if c["group"])
    return {"groups": len(groups), "calls": sum(groups.values()), "largest": max(groups.values())}


def q11(d: Data) -> Any:
    agents: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s in d.spawned:
        agent = d.resolved(s)
        agents[agent][0] += 1
        key = (s["parent_session_id"], s["tool_call_id"] or s["sub_session_id"])
        agents[agent][1] += 1 if key in d.completed else 0
    return [{"agent": a, "delegations": v[0], "succeeded": v[1]} for a, v in sorted(agents.items())]


def q12(d: Data) -> Any:
    out = []
    for sid, events in d.by_session.items():
        if any(e["event"] == "cancel:completed" for e in events):
            end = next(e for e in events if e["event"] == "session:end")
            out.append({"session": sid, "session_status": end["data"]["status"], "run_status": "cancelled"})
    return out


def q13(d: Data) -> Any:
    saved = 0
    count = 0
    for events in d.by_session.values():
        before = None
        for e in events:
            if e["event"] == "context:pre_compact":
                before = e["data"]["tokens_before"]
                count += 1
            elif e["event"] == "context:post_compact" and before is not None:
                saved += before - e["data"]["tokens_after"]
                before = None
    return [{"compactions": count, "tokens_saved": saved}]


def q14(d: Data) -> Any:
    models: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for it in d.iterations():
        model = it["response"]["model"]
        models[model][0] += 1
        models[model][1] += it["response"]["usage"].get("cache_read_input_tokens", 0)
    return [{"model": m, "calls": v[0], "cache_read": v[1]} for m, v in sorted(models.items())]


def q15(d: Data) -> Any:
    out = []
    for events in d.by_session.values():
        step = None
        for e in events:
            if e["event"] == "recipe:step":
                step = e["data"]["steps"][e["data"]["current_step"]]["name"]
            elif e["event"] == "recipe:complete":
                step = None
            elif e["event"] == "delegate:agent_spawned" and step is not None:
                out.append((step, d.resolved(e["data"])))
    return sorted(out)


def q16(d: Data) -> Any:
    per_prompt: Counter[str] = Counter()
    for sid, events in d.by_session.items():
        prompts = 0
        runs = 0
        pending = None
        trigger: dict[str, str] = {}
        for e in events:
            if e["event"] == "prompt:submit":
                prompts += 1
                pending = f"{sid}::prompt::{prompts}"
            elif e["event"] == "execution:start":
                runs += 1
                if pending is not None:
                    trigger[f"{sid}::run::{runs}"] = pending
                    pending = None
        for it in d.iterations():
            if it["session"] == sid and it["run"] in trigger:
                per_prompt[trigger[it["run"]]] += it["response"].get("usage", {}).get("output_tokens", 0)
    return sorted(per_prompt.values(), reverse=True)[:3]


def q17(d: Data) -> Any:
    spans = []
    for sid, events in d.by_session.items():
        starts = [e["ms"] for e in events if e["event"] in ("session:start", "session:fork")]
        ends = [e["ms"] for e in events if e["event"] == "session:end"]
        if starts and ends:
            spans.append((max(ends) - min(starts), sid))
    spans.sort(reverse=True)
    return [{"session": sid, "ms": ms} for ms, sid in spans[:3]]


def q18(d: Data) -> Any:
    calls = d.tool_calls()
    out = [
        {"tool": calls[s["tool_call_id"]]["name"], "requested": s["agent"], "child": s["sub_session_id"]}
        for s in d.spawned
        if s["tool_call_id"]
    ]
    return sorted(out, key=lambda r: r["child"])


def q19(d: Data) -> Any:
    its = d.iterations()
    return [{"most_calls": max(it["tools"] for it in its), "attached_calls": sum(it["tools"] for it in its)}]


def q20(d: Data) -> Any:
    durations: dict[str, list[int]] = defaultdict(list)
    spawned_ms = {
        (e["data"]["parent_session_id"], e["data"]["tool_call_id"] or e["data"]["sub_session_id"]): e["ms"]
        for e in d.lines
        if e["event"] == "delegate:agent_spawned"
    }
    for s in d.spawned:
        key = (s["parent_session_id"], s["tool_call_id"] or s["sub_session_id"])
        if key in d.completed:
            durations[d.resolved(s)].append(d.completed[key]["ms"] - spawned_ms[key])
    return {a: (sum(v) / len(v), len(v)) for a, v in durations.items()}


def _approx(mapping: dict[str, tuple[float, int]], got: list[dict[str, Any]], key: str, value: str) -> None:
    assert {r[key] for r in got} == set(mapping)
    for r in got:
        avg, n = mapping[r[key]]
        assert r[value] == pytest.approx(avg)
        assert r["calls" if "calls" in r else "delegations"] == n


CHECKS: dict[int, Callable[[list[dict[str, Any]], Data], None]] = {
    1: lambda got, d: _eq(got, q1(d)),
    2: lambda got, d: _eq(got, q2(d)),
    3: lambda got, d: _eq(got, q3(d)),
    4: lambda got, d: _eq(got, q4(d)),
    5: lambda got, d: _eq([r["ms"] for r in got], q5(d)),
    6: lambda got, d: _eq(got, q6(d)),
    7: lambda got, d: _eq(got, q7(d)),
    8: lambda got, d: _approx(q8(d), got, "tool", "avg_ms"),
    9: lambda got, d: _eq([(r["run"], r["iterations"]) for r in got], q9(d)),
    10: lambda got, d: _eq(got, [q10(d)]),
    11: lambda got, d: _eq(got, q11(d)),
    12: lambda got, d: _eq(got, q12(d)),
    13: lambda got, d: _eq(got, q13(d)),
    14: lambda got, d: _eq(got, q14(d)),
    15: lambda got, d: _eq([(r["step"], r["agent"]) for r in got], q15(d)),
    16: lambda got, d: _eq([r["output"] for r in got], q16(d)),
    17: lambda got, d: _eq(got, q17(d)),
    18: lambda got, d: _eq(got, q18(d)),
    19: lambda got, d: _eq(got, q19(d)),
    20: lambda got, d: _approx(q20(d), got, "agent", "avg_ms"),
}


def _eq(got: Any, expected: Any) -> None:
    assert got == expected


NO_ANSWER: dict[int, list[dict[str, Any]]] = {13: [{"compactions": 0, "tokens_saved": 0}]}
"""What a question aggregating over nothing returns (one row of zeros); the others return no rows."""

CONVERSATION_CHECKS: dict[int, Callable[[list[dict[str, Any]], ConversationAnswers], None]] = {
    1: lambda got, a: _eq(got, a.q1()),
    2: lambda got, a: _eq(got, a.q2()),
    3: lambda got, a: _eq(got, a.q3()),
    4: lambda got, a: _eq(got, a.q4()),
    5: lambda got, a: _eq([r["ms"] for r in got], a.q5()),
    8: lambda got, a: _approx(a.durations(), got, "tool", "avg_ms"),
    9: lambda got, a: _eq([(r["run"], r["iterations"]) for r in got], a.q9()),
    10: lambda got, a: _eq(got, [a.q10()]),
    11: lambda got, a: _eq(got, a.q11()),
    12: lambda got, a: _eq(got, a.q12()),
    14: lambda got, a: _eq(got, a.q14()),
    16: lambda got, a: _eq([r["output"] for r in got], a.q16()),
    17: lambda got, a: _eq(got, a.q17()),
    18: lambda got, a: _eq(got, a.q18()),
    19: lambda got, a: _eq(got, a.q19()),
    20: lambda got, a: _approx(a.q20(), got, "agent", "avg_ms"),
}


@pytest.mark.parametrize("number", range(1, 21))
@pytest.mark.parametrize("source", ["hook", *CONVERSATION_SOURCES])
def test_question(source: str, number: int, request: pytest.FixtureRequest) -> None:
    if source == "hook":
        layered: IntelligenceService = request.getfixturevalue("layered")
        data: Data = request.getfixturevalue("data")
        got = rows(layered, data, number)
        assert got, f"Q{number} returned no rows"
        CHECKS[number](got, data)
        return
    service, answers = request.getfixturevalue("conversations")
    got = [dict(r) for r in service.cypher(load_questions()[number], workspace=source).results]
    if number in documented_empty(source):
        assert got == NO_ANSWER.get(number, []), f"Q{number} on {source} events: {got}"
        return
    CONVERSATION_CHECKS[number](got, answers[source])


@pytest.mark.parametrize("source", CONVERSATION_SOURCES)
def test_conversations_have_the_shapes_the_questions_need(
    source: str, conversations: tuple[IntelligenceService, dict[str, ConversationAnswers]]
) -> None:
    """Every question the doc does not call empty for a source has an answer there (the OTLP
    conversation has no cancelled run), and the doc notes every question."""
    assert sorted(conversation_notes()) == list(range(1, 21))
    service, _ = conversations
    for number in set(range(1, 21)) - documented_empty(source) - ({12} if source == "otlp" else set()):
        got = [dict(r) for r in service.cypher(load_questions()[number], workspace=source).results]
        assert got, f"Q{number} has no answer on {source} events"
        assert got != NO_ANSWER.get(number), f"Q{number} has no answer on {source} events"


def test_dataset_has_the_shapes_the_questions_need(data: Data) -> None:
    """The fixture really contains forks, parallel tools, self-delegations, cancellations,
    compactions, recipes, a lost start and a child whose events never arrived."""
    kinds = {k["kind"] for k in q1(data)}
    assert {"root", "forked", "incomplete", "stub"} <= kinds
    assert q10(data)["largest"] >= 2
    assert any(s["agent"] == "self" for s in data.spawned)
    assert q12(data)
    assert q13(data)[0]["compactions"] > 0
    assert q7(data)


# -- the rollup forms of the spec's §7.4 questions (docs/querying.md, "Workspace rollups") -------------


def load_rollup_questions() -> dict[str, str]:
    """``{"Q6": cypher, ...}``: the rollup block of docs/querying.md, one query per ``// Qn`` comment."""
    text = DOC.read_text(encoding="utf-8").split("## Workspace rollups", 1)[1]
    block = text.split("```cypher\n", 1)[1].split("```", 1)[0]
    parts = re.split(r"^// (Q\d+)[^\n]*\n(?://[^\n]*\n)*", block, flags=re.M)
    return {name: query.strip() for name, query in zip(parts[1::2], parts[2::2], strict=True)}


def hook_rollup_answers(d: Data) -> dict[str, Any]:
    calls = d.tool_calls()
    models: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for line in d.lines:
        if line["event"] == "llm:response" and line["data"].get("model"):
            usage = line["data"].get("usage") or {}
            row = models[line["data"]["model"]]
            row[0] += 1
            row[1] += usage.get("input_tokens", 0)
            row[2] += usage.get("output_tokens", 0)
    groups = Counter(c["group"] for c in calls.values() if c["group"])
    return {
        "Q6": Counter(c["name"] for c in calls.values()),
        "Q7": sorted(
            (c["end"] - c["start"] for c in calls.values() if "start" in c and "end" in c), reverse=True
        )[:10],
        "Q12": {m: tuple(v) for m, v in models.items()},
        "Q26": sorted(groups.values(), reverse=True)[:10],
    }


def conversation_rollup_answers(a: ConversationAnswers) -> dict[str, Any]:
    models: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for call in a.calls():
        if call.model is not None:
            row = models[call.model]
            row[0] += 1
            row[1] += call.tokens[0]
            row[2] += call.tokens[1]
    durations = [a.tool_end[c] - start for c, start in a.tool_start.items() if c in a.tool_end]
    return {
        "Q6": Counter(a.tool_names.values()),
        "Q7": sorted(durations, reverse=True)[:10],
        "Q12": {m: tuple(v) for m, v in models.items()},
        "Q26": sorted((len(g) for g in a.groups), reverse=True)[:10],
    }


ROLLUP_VIEWS: dict[str, Callable[[list[dict[str, Any]]], Any]] = {
    "Q6": lambda rows: Counter({r["tool"]: r["calls"] for r in rows}),
    "Q7": lambda rows: [r["ms"] for r in rows],
    "Q12": lambda rows: {r["model"]: (r["calls"], r["input"], r["output"]) for r in rows},
    "Q26": lambda rows: [r["width"] for r in rows],
}


@pytest.mark.parametrize("question", ["Q6", "Q7", "Q12", "Q26"])
@pytest.mark.parametrize("source", ["hook", *CONVERSATION_SOURCES])
def test_rollup_question(source: str, question: str, request: pytest.FixtureRequest) -> None:
    """Each rollup question of the doc, per source, against the raw events. The `Model` rollup
    counts model calls that name their model: none of the harness's (docs/querying.md)."""
    query = load_rollup_questions()[question]
    if source == "hook":
        data: Data = request.getfixturevalue("data")
        service: IntelligenceService = request.getfixturevalue("layered")
        workspace, expected = data.workspace, hook_rollup_answers(data)[question]
    else:
        service, answers = request.getfixturevalue("conversations")
        workspace, expected = source, conversation_rollup_answers(answers[source])[question]
    got = [dict(r) for r in service.cypher(query, workspace=workspace).results]
    assert ROLLUP_VIEWS[question](got) == expected
    if question == "Q26":  # the members' tools, from the graph's ToolCalls
        assert all(len(r["tools"]) == min(r["width"], 8) for r in got)
    assert bool(got) == (source != "harness" or question != "Q12"), f"{question} on {source}: {got}"
