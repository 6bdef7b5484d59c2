from __future__ import annotations

import math
from typing import Any

import pytest

from convograph.intelligence.lifters import (
    DEFAULT_LIFTERS,
    FieldLifter,
    graph_value,
    lift_fields,
    lifters_for,
)


def test_all_nine_seed_lifters_exist_in_order() -> None:
    assert [lifter.name for lifter in DEFAULT_LIFTERS] == [
        "UniversalLifter",
        "ToolLifter",
        "LlmLifter",
        "DelegateLifter",
        "PromptLifter",
        "RecipeLifter",
        "SessionLifter",
        "SkillLifter",
        "ArtifactLifter",
    ]


@pytest.mark.parametrize(
    ("event", "data", "expected"),
    [
        (
            "tool:pre",
            {
                "session_id": "S",
                "parent_id": "P",
                "tool_name": "bash",
                "tool_input": {"command": "ls"},
                "tool_call_id": "c1",
                "parallel_group_id": "g",
            },
            {
                "session_id": "S",
                "parent_id": "P",
                "tool_name": "bash",
                "tool_input": '{"command":"ls"}',
                "tool_call_id": "c1",
                "parallel_group_id": "g",
            },
        ),
        (
            "llm:response",
            {"session_id": "S", "model": "m", "provider": "p", "usage": {"x": 1}},
            {"session_id": "S", "model": "m", "provider": "p"},
        ),
        (
            "delegate:agent_spawned",
            {
                "session_id": "S",
                "agent": "a",
                "sub_session_id": "C",
                "parent_session_id": "S",
                "tool_call_id": "c",
                "parallel_group_id": "g",
            },
            {
                "session_id": "S",
                "agent": "a",
                "sub_session_id": "C",
                "parent_session_id": "S",
                "tool_call_id": "c",
                "parallel_group_id": "g",
            },
        ),
        (
            "prompt:submit",
            {"session_id": "S", "prompt": "hi", "response_preview": "yo"},
            {"session_id": "S", "prompt": "hi", "response_preview": "yo"},
        ),
        (
            "recipe:step",
            {
                "session_id": "S",
                "recipe_name": "r",
                "current_step": 1,
                "description": "d",
                "status": "running",
                "step_id": "plan",
                "total_steps": 3,
            },
            {
                "session_id": "S",
                "recipe_name": "r",
                "current_step": 1,
                "description": "d",
                "status": "running",
                "step_id": "plan",
                "total_steps": 3,
            },
        ),
        (
            "session:fork",
            {
                "session_id": "C",
                "parent": "S",
                "metadata": {
                    "agent_name": "a",
                    "tool_call_id": "c",
                    "parallel_group_id": "g",
                    "recipe_name": "r",
                    "recipe_step": "s",
                    "recipe_step_index": 0,
                },
            },
            {
                "session_id": "C",
                "parent": "S",
                "agent_name": "a",
                "tool_call_id": "c",
                "parallel_group_id": "g",
                "recipe_name": "r",
                "recipe_step": "s",
                "recipe_step_index": 0,
            },
        ),
        (
            "skill:load",
            {"session_id": "S", "skill_name": "k", "skill_directory": "/d"},
            {"session_id": "S", "skill_name": "k", "skill_directory": "/d"},
        ),
        (
            "artifact:write",
            {"session_id": "S", "bytes": 12, "path": "/p"},
            {"session_id": "S", "bytes": 12, "path": "/p"},
        ),
        ("custom:thing", {"session_id": "S", "other": 1}, {"session_id": "S"}),
    ],
)
def test_each_lifter_lifts_its_fields(event: str, data: dict[str, Any], expected: dict[str, Any]) -> None:
    assert lift_fields(event, data) == expected


def test_none_values_and_missing_keys_are_never_written() -> None:
    lifted = lift_fields("tool:pre", {"session_id": "S", "parent_id": None, "tool_name": None})
    assert lifted == {"session_id": "S"}


def test_session_metadata_must_be_a_mapping() -> None:
    assert lift_fields("session:fork", {"session_id": "S", "metadata": "nope"}) == {"session_id": "S"}


def test_all_matching_lifters_fire_and_later_ones_override() -> None:
    custom = (
        FieldLifter("A", "*", ("x",)),
        FieldLifter("B", "tool:*", ("y",)),
        FieldLifter("C", "tool:pre", ("x",), nested="inner", nested_keys=("x",)),
    )
    lifted = lift_fields("tool:pre", {"x": 1, "y": 2, "inner": {"x": 3}}, custom)
    assert lifted == {"x": 3, "y": 2}
    assert [f.name for f in lifters_for("tool:pre")] == ["UniversalLifter", "ToolLifter"]


def test_reserved_names_are_prefixed_instead_of_shadowing() -> None:
    custom = (FieldLifter("R", "*", ("event_name", "data", "ok")),)
    assert lift_fields("x:y", {"event_name": "evil", "data": {"a": 1}, "ok": [1, 2]}, custom) == {
        "data_event_name": "evil",
        "data_data": '{"a":1}',
        "ok": [1, 2],
    }


def test_subnormal_floats_are_lifted_as_zeros_of_their_sign() -> None:
    """The writer's Event rows then hold no subnormal (`engine.NormalFloatList` skips that scan)."""
    lifted = lift_fields("artifact:write", {"bytes": -5e-324, "path": [5e-324, 1.5, "x"]})
    assert lifted == {"bytes": 0.0, "path": [0.0, 1.5, "x"]}
    assert math.copysign(1.0, lifted["bytes"]) == -1.0
    assert graph_value(2.2250738585072014e-308) == 2.2250738585072014e-308  # the smallest normal stays
    assert graph_value(1e-300) == 1e-300
