"""Incremental projector: equal to the one-shot projection after every event, O(delta) updates."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convograph import EventError, to_jsonable
from convograph.projections import ThreadProjector, ViewOptions, project_dag, project_messages, project_thread
from tests.test_projections_messages import agent_streams


def check_every_prefix(events: list[dict[str, Any]], options: ViewOptions | None = None) -> ThreadProjector:
    projector = ThreadProjector(options=options)
    for event in events:
        projector.apply(event)
        assert projector.views == project_thread(projector.graph, options=options)
    return projector


@settings(max_examples=120, deadline=None)
@given(agent_streams())
def test_projector_equals_one_shot_after_every_event(events: list[dict[str, Any]]) -> None:
    projector = check_every_prefix(events)
    assert projector.messages("anthropic") == project_messages(projector.graph, format="anthropic")
    assert to_jsonable(projector.dag()) == to_jsonable(project_dag(projector.graph))


@settings(max_examples=60, deadline=None)
@given(agent_streams(), st.randoms(use_true_random=False))
def test_projector_equals_one_shot_for_reordered_streams(events: list[dict[str, Any]], rnd: Any) -> None:
    """Results before calls, children before their parents, duplicates: still equal."""
    shuffled = list(events)
    rnd.shuffle(shuffled)
    shuffled += shuffled[: len(shuffled) // 3]  # redelivery
    check_every_prefix(shuffled)


@settings(max_examples=40, deadline=None)
@given(
    agent_streams(),
    st.sampled_from(
        [
            ViewOptions(hide_reasoning=True),
            ViewOptions(collapse_tools=True),
            ViewOptions(hide_subagents=True),
        ]
    ),
)
def test_projector_honours_view_options(events: list[dict[str, Any]], options: ViewOptions) -> None:
    check_every_prefix(events, options)


def test_apply_reports_the_changed_views() -> None:
    projector = ThreadProjector()
    assert projector.apply({"type": "harness_start", "runId": "a"}) == {"a:harness_start"}
    assert projector.apply({"type": "text", "runId": "a", "id": "t", "content": "he"}) == {
        "a:harness_start",
        "t",
    }
    assert projector.apply({"type": "text", "runId": "a", "id": "t", "content": "llo"}) == {"t"}
    assert projector.views[0].content.text == "hello"  # type: ignore[union-attr]
    assert projector.apply({"type": "tool_call", "runId": "a", "id": "c", "name": "f", "input": {}}) == {"c"}
    assert projector.apply({"type": "tool_result", "runId": "a", "id": "c", "name": "f", "output": 1}) == {
        "c"
    }
    assert projector.apply({"type": "harness_end", "runId": "a"}) == {"t", "c"}
    assert {v.status for v in projector.views} == {"complete"}
    assert projector.apply({"type": "connected", "sessionId": "s"}) == set()
    assert projector.rebuilds == 0


def test_snapshot_is_frozen_while_views_are_live() -> None:
    projector = ThreadProjector()
    projector.apply({"type": "text", "runId": "a", "id": "t", "content": "a"})
    snapshot = projector.snapshot()
    projector.apply({"type": "text", "runId": "a", "id": "t", "content": "b"})
    assert snapshot[0].content.text == "a"  # type: ignore[union-attr]
    assert projector.views[0].content.text == "ab"  # type: ignore[union-attr]
    assert projector.to_jsonable()[0]["content"] == {"kind": "text", "text": "ab"}


def test_late_parent_rebuilds_once() -> None:
    projector = ThreadProjector()
    projector.apply({"type": "text", "runId": "s", "parentId": "tc", "id": "x", "content": "early"})
    projector.apply({"type": "harness_start", "runId": "a"})
    projector.apply({"type": "tool_call", "runId": "a", "id": "tc", "name": "agent", "input": {}})
    assert projector.rebuilds == 1
    assert [v.content.kind for v in projector.views] == ["tool_call"]


def test_bad_event_changes_nothing() -> None:
    projector = ThreadProjector()
    projector.apply({"type": "text", "runId": "a", "id": "t", "content": "a"})
    with pytest.raises(EventError):
        projector.apply({"type": "text", "runId": "a"})
    assert len(projector.graph) == 1
