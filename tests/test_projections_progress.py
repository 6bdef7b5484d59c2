"""Progress accumulator registry: built-ins, user extension, fallback."""

from __future__ import annotations

from typing import Any

from convograph import create_graph, reduce_events
from convograph.projections import (
    CollectAll,
    ExecAccumulator,
    KeepLatest,
    ProgressRegistry,
    default_registry,
    project_thread,
    register_accumulator,
)


def test_exec_accumulator_rules() -> None:
    acc = ExecAccumulator()
    state = acc.init()
    assert state == {"stdout": "", "stderr": "", "metrics": None}
    state = acc.reduce(state, {"channel": "stdout", "data": "a"})
    state = acc.reduce(state, {"channel": "other", "data": "ignored"})
    state = acc.reduce(state, "not a dict")
    state = acc.reduce(state, {"pid": True})  # a bool is not a pid
    assert state == {"stdout": "a", "stderr": "", "metrics": None}
    before = dict(state)
    acc.reduce(state, {"channel": "stderr", "data": "x"})
    assert state == before  # reducers never mutate


def test_fallback_and_registry_copy() -> None:
    registry = ProgressRegistry(fallback=KeepLatest())
    assert registry.accumulate("anything", [1, 2, 3]) == 3
    assert ProgressRegistry().accumulate("anything", [1]) is None
    copy = registry.copy()
    copy.register("x", CollectAll())
    assert "x" in copy
    assert "x" not in registry


def test_register_accumulator_extends_the_default_registry() -> None:
    class Counter:
        def init(self) -> int:
            return 0

        def reduce(self, state: int, content: Any) -> int:
            return state + 1

    events = [
        {"type": "tool_call", "runId": "a", "id": "c", "name": "count-me", "input": {}},
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p1",
            "toolCallId": "c",
            "name": "count-me",
            "content": {},
        },
        {
            "type": "tool_progress",
            "runId": "a",
            "id": "p2",
            "toolCallId": "c",
            "name": "count-me",
            "content": {},
        },
    ]
    register_accumulator("count-me", Counter())
    try:
        views = project_thread(reduce_events(create_graph(), events))
        assert views[0].content.progress == 2  # type: ignore[union-attr]
    finally:
        default_registry.unregister("count-me")
    assert "count-me" not in default_registry
