"""Progress accumulator registry: built-ins, user extension, fallback."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

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
from convograph.projections.progress import fold_step


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


_values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3))
_contents = st.one_of(
    _values,
    st.fixed_dictionaries(
        {},
        optional={
            "channel": st.one_of(st.sampled_from(["stdout", "stderr", "other"]), _values),
            "data": _values,
            "pid": _values,
            "cpuPercent": _values,
            "rssKb": _values,
            "wallMs": _values,
        },
    ),
)


@given(st.lists(_contents, max_size=12))
def test_exec_accumulator_matches_its_rules(contents: list[Any]) -> None:
    """Folding any contents equals the rules stated plainly, and no state is mutated."""
    acc = ExecAccumulator()
    state = acc.init()
    folded = acc.init()  # the same contents through `fold_step`, in place (a thread build's path)
    step = fold_step(acc)
    expected: dict[str, Any] = {"stdout": "", "stderr": "", "metrics": None}
    for content in contents:
        before = dict(state)
        new = acc.reduce(state, content)
        assert state == before
        state = new
        assert step(folded, content) is folded
        assert folded == state
        if not isinstance(content, dict):
            continue
        channel, data, pid = content.get("channel"), content.get("data"), content.get("pid")
        if channel in ("stdout", "stderr") and isinstance(data, str):
            expected[channel] += data
        elif isinstance(pid, int | float) and not isinstance(pid, bool):
            keys = ("cpuPercent", "rssKb", "wallMs")
            expected["metrics"] = {"pid": pid, **{key: content.get(key) for key in keys}}
        assert state == expected


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
