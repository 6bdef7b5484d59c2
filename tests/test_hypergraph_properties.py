"""Property tests: interleavings of independent runs converge, duplicates change nothing, and every
reduce or operation leaves all earlier versions identical."""

from __future__ import annotations

from itertools import islice, pairwise
from typing import Any

import msgspec
from benchmarks.hypergraph_workload import chat_stream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convograph.events import Event, parse_event
from convograph.hypergraph import (
    OperationError,
    append_user_message,
    close_stream,
    create_conversation,
    default_active,
    edit_message,
    list_siblings,
    reduce_conversation,
    reduce_conversation_events,
    regenerate,
    summarize_range,
    switch_branch,
)
from convograph.hypergraph import queries as q
from convograph.hypergraph.model import BLOCK_HEAD, Conversation

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _event_key(event: Event) -> bytes:
    return msgspec.json.encode(event)


def tiers(conv: Conversation) -> dict[str, Any]:
    """Everything structural, keyed so that arrival numbers (chunk ids) do not matter."""
    messages = {}
    for message in q.iter_messages(conv):
        blocks = []
        for block in q.blocks_of(conv, message.id):
            events = tuple(_event_key(c.event) for c in q.chunks_of(conv, block.id))
            blocks.append((block.id, block.kind, block.run_id, events))
        messages[message.id] = (message.thread_id, message.role, message.parent_id, tuple(blocks))
    spawns = sorted(
        (s.trigger_block_id, s.run_id, s.kind, s.thread_id)
        for block in q.iter_blocks(conv)
        for s in q.spawns_from(conv, block.id)
    )
    threads = sorted(q.thread_ids(conv))
    return {
        "messages": messages,
        "spawns": spawns,
        "active": {t: default_active(conv, t).message_ids for t in threads},
        "status": {r: q.run_status(conv, r) for r in sorted(q.run_ids(conv))},
        "unresolved": q.unresolved_parents(conv),
        "calls": sorted(
            (b.id, q.tool_call_for_block(conv, b.id)) for b in q.iter_blocks(conv) if b.kind == "tool_call"
        ),
    }


def dump(conv: Conversation) -> Any:
    """Everything, arrival numbers included (for comparing a version with itself)."""
    return (
        conv.version,
        list(q.iter_chunks(conv)),
        list(q.iter_blocks(conv)),
        list(q.iter_messages(conv)),
        tiers(conv),
        q.diagnostics(conv),
        q.is_stream_closed(conv),
        q.relays(conv),
        q.usage_totals(conv),
    )


def reduce_all(events: list[Any]) -> Conversation:
    conv = create_conversation()
    for event in events:
        conv = reduce_conversation(conv, event)
    return conv


# --- interleavings ---------------------------------------------------------------------------------


def grandchild_run(k: int) -> list[Event]:
    """A REPL child of subagent ``S<k>`` (parented to its ``repl_input``)."""
    run = f"G{k}"
    out: list[dict[str, Any]] = [
        {"type": "harness_start", "runId": run, "parentId": f"S{k}:repl"},
        {"type": "text", "runId": run, "id": "g", "content": "deep"},
        {"type": "harness_end", "runId": run},
    ]
    return [parse_event(e) for e in out]


def child_run(k: int, steps: int) -> list[Event]:
    run = f"S{k}"
    out: list[dict[str, Any]] = [
        {"type": "harness_start", "runId": run, "parentId": f"R/spawn{k}"},
        {"type": "repl_input", "runId": run, "id": f"S{k}:repl", "code": "llm_query()"},
        {"type": "repl_output", "runId": run, "id": f"S{k}:repl", "stdout": "ok", "done": False},
    ]
    for i in range(steps):
        out.append({"type": "text", "runId": run, "id": f"{run}:t{i}", "content": f"s{k}-{i} "})
        out.append({"type": "text", "runId": run, "id": f"{run}:t{i}", "content": "more"})
        out.append(
            {"type": "tool_call", "runId": run, "id": f"{run}/c{i}", "name": "grep", "input": {"i": i}}
        )
        out.append({"type": "tool_result", "runId": run, "id": f"{run}/c{i}", "name": "grep", "output": i})
    out.append({"type": "usage", "runId": run, "inputTokens": k, "outputTokens": 1})
    out.append({"type": "harness_end", "runId": run})
    return [parse_event(e) for e in out]


def root_run(children: int) -> list[Event]:
    out: list[dict[str, Any]] = [
        {"type": "user", "runId": "u", "content": "go"},
        {"type": "harness_start", "runId": "R", "parentId": "u:user"},
    ]
    for k in range(children):
        out.append({"type": "text", "runId": "R", "id": f"R:t{k}", "content": f"spawning {k}"})
        out.append(
            {"type": "tool_call", "runId": "R", "id": f"R/spawn{k}", "name": "agent", "input": {"k": k}}
        )
    for k in range(children):
        out.append({"type": "tool_result", "runId": "R", "id": f"R/spawn{k}", "name": "agent", "output": k})
    out.append({"type": "text", "runId": "R", "id": "R:final", "content": "all done"})
    out.append({"type": "harness_end", "runId": "R"})
    return [parse_event(e) for e in out]


@st.composite
def interleavings(draw: st.DrawFn) -> tuple[list[list[Event]], list[Event]]:
    children = draw(st.integers(min_value=1, max_value=3))
    runs = [root_run(children)]
    runs += [child_run(k, draw(st.integers(min_value=0, max_value=3))) for k in range(children)]
    runs += [grandchild_run(k) for k in range(children) if draw(st.booleans())]
    cursors = [0] * len(runs)
    merged: list[Event] = []
    while any(c < len(r) for c, r in zip(cursors, runs, strict=True)):
        live = [i for i, r in enumerate(runs) if cursors[i] < len(r)]
        pick = draw(st.sampled_from(live))
        merged.append(runs[pick][cursors[pick]])
        cursors[pick] += 1
    return runs, merged


@SETTINGS
@given(interleavings())
def test_independent_runs_converge_under_any_interleaving(
    case: tuple[list[list[Event]], list[Event]],
) -> None:
    runs, merged = case
    in_order = [event for run in runs for event in run]  # every child after the root: late parents
    sequential = reduce_all([runs[0][0], runs[0][1], *runs[0][2:], *[e for r in runs[1:] for e in r]])
    assert tiers(reduce_all(merged)) == tiers(reduce_all(in_order)) == tiers(sequential)
    assert q.unresolved_parents(reduce_all(merged)) == {}


# --- duplicates ------------------------------------------------------------------------------------

CHAT = list(islice(chat_stream(), 400))


@SETTINGS
@given(
    st.integers(min_value=20, max_value=len(CHAT)),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0)), max_size=40),
)
def test_duplicates_change_nothing(length: int, duplicates: list[tuple[int, int]]) -> None:
    after: dict[int, list[bytes]] = {}
    for which, where in duplicates:
        original = which % length
        position = original + where % (length - original)  # redelivered at or after the original
        after.setdefault(position, []).append(msgspec.json.encode(CHAT[original]))  # as wire bytes
    events: list[Any] = []
    for index in range(length):
        events.append(CHAT[index])
        events.extend(after.get(index, ()))
    clean = reduce_all(CHAT[:length])
    noisy = reduce_all(events)
    assert dump(noisy)[1:] == dump(clean)[1:]


# --- persistence ----------------------------------------------------------------------------------


def _random_step(conv: Conversation, choice: int, pick: int) -> Conversation:
    active = default_active(conv).message_ids
    try:
        if choice == 0 and active:
            return edit_message(conv, active[pick % len(active)], f"edited {pick}")
        if choice == 1 and active:
            assistants = [m for m in active if q.get_message(conv, m).role == "assistant"]
            if assistants:
                return regenerate(conv, assistants[pick % len(assistants)])
        if choice == 2 and active:
            siblings = list_siblings(conv, active[pick % len(active)])
            return switch_branch(conv, siblings[pick % len(siblings)].id)
        if choice == 3 and len(active) >= 2:
            first = pick % (len(active) - 1)
            return summarize_range(conv, active[first], active[first + 1], f"summary {pick}")
        if choice == 4:
            return close_stream(conv)
        if choice == 5:
            return append_user_message(conv, f"note {pick}")
    except OperationError:
        return conv
    return conv


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=9), st.integers(min_value=0, max_value=50), st.booleans()
        ),
        min_size=1,
        max_size=25,
    )
)
def test_every_reduce_and_operation_leaves_earlier_versions_identical(
    steps: list[tuple[int, int, bool]],
) -> None:
    feed = iter(CHAT)
    versions = [create_conversation()]
    snapshots = [dump(versions[0])]
    for choice, pick, from_old in steps:
        base = versions[pick % len(versions)] if from_old else versions[-1]
        if choice >= 6:  # a few events
            conv = base
            for event in islice(feed, 1 + pick % 20):
                conv = reduce_conversation(conv, event)
        else:
            conv = _random_step(base, choice, pick)
        versions.append(conv)
        snapshots.append(dump(conv))
    assert [dump(v) for v in versions] == snapshots
    for lineage in {id(v._store): v for v in versions}.values():  # each lineage once
        check_store_columns(lineage)


@SETTINGS
@given(st.integers(min_value=0, max_value=200), st.integers(min_value=1, max_value=50))
def test_extending_an_old_version_equals_building_fresh(cut: int, extra: int) -> None:
    head = reduce_all(CHAT[:250])
    old = reduce_all(CHAT[:cut])  # a separate lineage, extended at its head
    del head
    versions = [create_conversation()]
    for event in CHAT[:250]:
        versions.append(reduce_conversation(versions[-1], event))
    forked = versions[cut]
    for event in CHAT[cut : cut + extra]:
        forked = reduce_conversation(forked, event)
    for event in CHAT[cut : cut + extra]:
        old = reduce_conversation(old, event)
    assert dump(forked)[1:] == dump(old)[1:]


# --- arbitrary streams ------------------------------------------------------------------------------

RUNS = ["A", "B", "P1", "P2", "S", "u"]
IDS = ["x", "y", "A/x", "A/y", "r1", "t"]


@st.composite
def wire_events(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(
            [
                "harness_start",
                "harness_end",
                "text",
                "reasoning",
                "tool_call",
                "tool_result",
                "tool_progress",
                "user",
                "error",
                "usage",
                "relay",
                "relay_resolved",
                "repl_input",
                "repl_progress",
                "repl_output",
                "connected",
            ]
        )
    )
    run = draw(st.sampled_from(RUNS))
    ident = draw(st.sampled_from(IDS))
    event: dict[str, Any] = {"type": kind, "runId": run}
    if draw(st.booleans()):
        event["parentId"] = draw(st.sampled_from(RUNS + IDS + ["u:user", "ghost"]))
    if draw(st.integers(0, 3)) == 0:
        event["eventId"] = f"e{draw(st.integers(0, 30))}"
    extra: dict[str, dict[str, Any]] = {
        "text": {"id": ident, "content": "c"},
        "reasoning": {"id": ident, "content": "r"},
        "tool_call": {"id": ident, "name": "bash", "input": {}},
        "tool_result": {
            "id": ident,
            "name": "bash",
            "output": draw(st.sampled_from([1, {"status": "denied"}])),
        },
        "tool_progress": {"id": f"p{ident}", "toolCallId": ident, "name": "exec", "content": {}},
        "user": {"content": "hi"},
        "error": {"message": "boom"},
        "usage": {"inputTokens": 1, "outputTokens": 2},
        "relay": {"id": ident, "kind": "permission", "toolCallId": ident, "tool": "bash"},
        "relay_resolved": {"relayId": ident, "approved": draw(st.booleans())},
        "repl_input": {"id": ident, "code": "1"},
        "repl_progress": {"id": ident, "chunk": "o"},
        "repl_output": {"id": ident, "stdout": "o"},
        "connected": {"sessionId": "s"},
    }
    event.update(extra.get(kind, {}))
    if kind in ("relay_resolved", "connected"):
        event.pop("runId")
    if kind == "error" and draw(st.booleans()):
        event.pop("runId")
    return event


def check_invariants(conv: Conversation) -> None:
    chunk_ids = [c.id for c in q.iter_chunks(conv)]
    blocks = list(q.iter_blocks(conv))
    messages = list(q.iter_messages(conv))
    assert len({b.id for b in blocks}) == len(blocks)
    assert len({m.id for m in messages}) == len(messages)
    # every chunk in exactly one block, every block in exactly one message
    in_blocks = [cid for b in blocks for cid in b.chunk_ids]
    assert sorted(in_blocks) == sorted(chunk_ids)
    in_messages = [bid for m in messages for bid in m.block_ids]
    assert sorted(in_messages) == sorted(b.id for b in blocks)
    ids = {m.id for m in messages}
    for message in messages:
        assert message.parent_id is None or message.parent_id in ids
    for thread in q.thread_ids(conv):
        path = default_active(conv, thread).message_ids
        assert len(set(path)) == len(path)
        for earlier, later in pairwise(path):
            parent = q.get_message(conv, later).parent_id
            summary = q.get_message(conv, earlier).summary
            assert parent == earlier or summary is not None or q.get_message(conv, later).summary
    for run in q.run_ids(conv):
        assert q.run_status(conv, run) in ("streaming", "complete", "error", "aborted")
    check_bulk_readers(conv)
    check_store_columns(conv)


def check_bulk_readers(conv: Conversation) -> None:
    """The bulk readers say, for this version, what the per-chunk and per-run record queries say."""
    chunks = list(q.iter_chunks(conv))
    for chunk in chunks:
        message = q.get_message(conv, q.get_block(conv, chunk.block_id).message_id)
        assert q.chunk_message(conv, chunk.seq) == (message.id, message.thread_id, message.parent_id)
    for start in {0, 1, len(chunks) // 2, len(chunks)}:
        columns = q.chunk_columns(conv, start)
        rows = [
            (event, columns.block_ids[b], columns.block_kinds[b], columns.block_runs[b])
            for event, b in zip(columns.events, columns.blocks, strict=True)
        ]
        records = [(c, q.get_block(conv, c.block_id)) for c in chunks[start:]]
        assert rows == [(c.event, block.id, block.kind, block.run_id) for c, block in records]
    table = q.run_event_table(conv)
    assert table.run_ids == list(q.run_ids(conv))
    for run, events, blocks in zip(table.run_ids, table.events, table.blocks, strict=True):
        assert events == [chunk.event for chunk in q.run_chunks(conv, run)]
        run_records = q.run_blocks(conv, run)
        assert [table.block_ids[b] for b in blocks] == [block.id for block in run_records]
        assert [table.block_kinds[b] for b in blocks] == [block.kind for block in run_records]
    assert len(table.block_ids) == len(table.block_kinds) == conv.block_count


def check_store_columns(conv: Conversation) -> None:
    """The store's block and spawn columns and the blocks' text heads say what the records say
    (for the store's head: every version reads a prefix of the columns)."""
    s = conv._store
    n = s.n_blocks
    records = [s.blocks[b] for b in range(n)]
    assert list(s.block_names.head(n)) == [r.id for r in records]
    assert list(s.block_kinds.head(n)) == [r.kind for r in records]
    assert list(s.block_runs.head(n)) == [r.run for r in records]
    assert s.block_first_chunks.tolist() == [r.chunks[0] for r in records]
    previous = []
    for r in records:
        run_blocks = list(s.runs[r.run].blocks)
        k = run_blocks.index(r.index)
        previous.append(run_blocks[k - 1] if k else -1)
    assert s.block_run_previous.tolist() == previous
    stamps = s.spawn_stamps.tolist()
    assert stamps == sorted(stamps)
    columns = sorted(zip(s.spawn_triggers.tolist(), s.spawn_first_blocks.tolist(), stamps, strict=True))
    assert columns == sorted(
        (trigger, s.runs[spawn.run].blocks[0], stamp)
        for trigger, spawns in s.spawn_lists.items()
        for stamp, spawn in spawns
    )
    events = [s.events[i] for i in range(s.n_chunks)]
    for r in records:
        if r.kind not in ("text", "reasoning"):
            assert r.head is None
            continue
        assert r.head is not None
        text = "".join(events[c].content for c in r.chunks)
        if len(r.head) < BLOCK_HEAD:
            assert r.head == text
        else:  # its first chunk whole, then cut at BLOCK_HEAD
            assert r.head == text[: max(BLOCK_HEAD, len(events[r.chunks[0]].content))]


@SETTINGS
@given(st.lists(wire_events(), max_size=40), st.lists(st.integers(0, 6), max_size=6))
def test_any_stream_keeps_the_invariants(events: list[dict[str, Any]], ops: list[int]) -> None:
    conv = create_conversation()
    versions = []
    for i, event in enumerate(events):
        conv = reduce_conversation(conv, event)
        if ops and i % 7 == 0:
            conv = _random_step(conv, ops[i % len(ops)], i)
        versions.append((conv, dump(conv)))
    check_invariants(close_stream(conv))
    for version, snapshot in versions:
        check_invariants(version)
        assert dump(version) == snapshot


@SETTINGS
@given(st.lists(wire_events(), max_size=40), st.integers(0, 40), st.integers(0, 40))
def test_batch_reduce_equals_one_by_one(events: list[dict[str, Any]], cut: int, fork_at: int) -> None:
    one_by_one = reduce_all(events)
    first = reduce_conversation_events(create_conversation(), events[:cut])
    batched = reduce_conversation_events(first, events[cut:])
    assert dump(batched) == dump(one_by_one)  # version numbers included
    # from an older version (forks the lineage once, then batches)
    versions = [create_conversation()]
    for event in events:
        versions.append(reduce_conversation(versions[-1], event))
    base = versions[min(fork_at, len(events))]
    snapshot = dump(base)
    forked = reduce_conversation_events(base, events[min(fork_at, len(events)) :])
    assert dump(forked) == dump(versions[-1])
    assert dump(base) == snapshot


# --- any schema-valid stream, commands and odd values included: reducers and projections never raise --

_IDS = ["x", "y", "A", "A:user", "msg:0", "msg:1", "msg:2", "u:user", "A:error", "A:harness_start"]
_id_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")  # EventErrors by design
_any_id = st.sampled_from(_IDS) | st.text(_id_chars, max_size=4)
_any_run = st.sampled_from(["A", "B", "u", "A:user", "x"]) | st.text(_id_chars, max_size=3)
_big = st.integers(0, 2**53 - 1)  # counts and durations: what the event codec accepts
_value = st.recursive(
    st.none() | st.booleans() | _big | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)
_parts = st.lists(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=5))
    | st.builds(lambda d: {"type": "image", "mediaType": "image/png", "data": d}, st.text(max_size=4))
    | st.builds(
        lambda d: {"type": "document", "mediaType": "application/pdf", "data": d}, st.text(max_size=4)
    ),
    max_size=3,
)
_FIELDS: dict[str, dict[str, Any]] = {
    "connected": {"sessionId": _any_id},
    "harness_start": {"runId": _any_run, "depth": _big},
    "harness_end": {"runId": _any_run, "reason": st.sampled_from(["final", "error", "aborted", ""])},
    "text": {"runId": _any_run, "id": _any_id, "content": st.text(max_size=5)},
    "reasoning": {"runId": _any_run, "id": _any_id, "content": st.text(max_size=5)},
    "tool_call": {
        "runId": _any_run,
        "id": _any_id,
        "name": st.sampled_from(["bash", "task", ""]),
        "input": _value,
    },
    "tool_result": {
        "runId": _any_run,
        "id": _any_id,
        "name": st.sampled_from(["bash", "task"]),
        "output": _value,
    },
    "tool_progress": {
        "runId": _any_run,
        "id": _any_id,
        "toolCallId": _any_id,
        "name": st.just("exec"),
        "content": _value,
    },
    "user": {"runId": _any_run, "content": st.text(max_size=5) | _parts},
    "error": {"message": st.text(max_size=5)},
    "usage": {"runId": _any_run, "inputTokens": _big, "outputTokens": _big},
    "relay": {
        "runId": _any_run,
        "id": _any_id,
        "kind": st.just("permission"),
        "toolCallId": _any_id,
        "tool": st.text(max_size=3),
    },
    "relay_resolved": {"relayId": _any_id, "approved": st.booleans()},
    "repl_input": {"runId": _any_run, "id": _any_id, "code": st.text(max_size=4), "iteration": _big},
    "repl_progress": {
        "runId": _any_run,
        "id": _any_id,
        "chunk": st.text(max_size=4),
        "stream": st.just("stderr"),
    },
    "repl_output": {"runId": _any_run, "id": _any_id, "done": st.booleans(), "durationMs": _big},
    "edit": {"messageId": _any_id, "content": st.text(max_size=5) | _parts},
    "regenerate": {"messageId": _any_id},
    "switch_branch": {"messageId": _any_id},
    "summarize": {"firstId": _any_id, "lastId": _any_id, "text": st.text(max_size=4)},
}


@st.composite
def any_wire_event(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(_FIELDS)))
    event: dict[str, Any] = {"type": kind, **{k: draw(s) for k, s in _FIELDS[kind].items()}}
    if draw(st.booleans()):
        event["parentId"] = draw(_any_id)
    if draw(st.integers(0, 3)) == 0:
        event["eventId"] = draw(st.sampled_from(["e1", "e2"]))
    return event


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_wire_event(), max_size=25))
def test_any_valid_stream_reduces_and_projects_without_raising(wires: list[dict[str, Any]]) -> None:
    from convograph import create_graph, reduce_events
    from convograph.projections import project_dag, project_messages, project_repl, project_thread
    from convograph.projections.dag import _check_parent_table, graph_layout_input
    from convograph.projections.sources import conversation_layout_input

    events = [parse_event(wire) for wire in wires]
    graph = reduce_events(create_graph(), events)
    sources: list[Any] = [graph]
    try:
        conversation = reduce_conversation_events(create_conversation(), events)
    except OperationError:  # a command naming a message that cannot take it: documented refusal
        conversation = None
    if conversation is not None:
        sources += [conversation, close_stream(conversation)]
    for source in sources:
        project_thread(source)
        project_dag(source).to_svg()
        # project_dag skips the parent-table check: the producers' tables are valid by construction
        _check_parent_table(
            graph_layout_input(source) if source is graph else conversation_layout_input(source)
        )
        for fmt in ("openai", "anthropic", "gateway"):
            project_messages(source, format=fmt)
        if source is not graph:
            project_repl(source)
