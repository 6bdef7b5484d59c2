"""Ids are the producers': one id may name a text block of one run and a tool call of another. The
incremental projectors stay equal to the one-shot projection (they rebuild where an update would
land on another kind's view) instead of failing (an AssertionError / KeyError in the live server's
fold before)."""

from __future__ import annotations

from typing import Any

import pytest

from convograph.events import parse_event
from convograph.hypergraph import default_active
from convograph.projections import ConversationProjector, ThreadProjector, project_thread

COLLIDING: list[dict[str, Any]] = [
    {"type": "harness_start", "runId": "A"},
    {"type": "text", "runId": "A", "id": "x", "content": "hi "},
    {"type": "harness_start", "runId": "B", "parentId": "A"},
    {"type": "tool_call", "runId": "B", "id": "x", "name": "t", "input": {}},
    {"type": "text", "runId": "A", "id": "x", "content": "again"},
    {"type": "tool_result", "runId": "B", "id": "x", "name": "t", "output": {"result": 1}},
    {"type": "reasoning", "runId": "B", "id": "x", "content": "hm", "signature": "s"},
    {"type": "text", "runId": "A", "id": "x", "content": " and again"},
]


@pytest.mark.parametrize("cut", range(1, len(COLLIDING) + 1))
def test_a_reused_id_keeps_the_conversation_projector_equal_to_one_shot(cut: int) -> None:
    projector = ConversationProjector()
    for wire in COLLIDING[:cut]:
        projector.apply(parse_event(wire))
        conversation = projector.conversation
        assert projector.views == project_thread(conversation, default_active(conversation))


@pytest.mark.parametrize("cut", range(1, len(COLLIDING) + 1))
def test_a_reused_id_keeps_the_flat_projector_equal_to_one_shot(cut: int) -> None:
    projector = ThreadProjector()
    for wire in COLLIDING[:cut]:
        projector.apply(parse_event(wire))
        assert projector.views == project_thread(projector.graph)
