"""FieldLifters: expose payload fields as top-level ``:Event`` properties (seed 004).

A lifter is a small same-shaped value: an fnmatch ``pattern`` over the event name, the top-level
``keys`` it lifts, and optionally keys lifted from a nested mapping (``SessionLifter`` lifts from
``data["metadata"]``). **All** matching lifters fire, in `DEFAULT_LIFTERS` order, so a specific
lifter overrides ``UniversalLifter``. ``None`` values and missing keys are never written.

Property values are normalised for the graph by `graph_value`: scalars stay, lists of scalars
stay, anything else becomes a compact JSON string. A lifted key that would shadow a reserved
property (``node_id``, ``workspace``, ``event_name``, ``occurred_at`` ...) is written as
``data_<key>`` instead. Lifting is O(number of lifted keys) per event.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

import msgspec

__all__ = [
    "DEFAULT_LIFTERS",
    "RESERVED_PROPERTIES",
    "FieldLifter",
    "graph_value",
    "lift_fields",
    "lift_steps",
    "lifters_for",
]

RESERVED_PROPERTIES = frozenset(
    {
        "node_id",
        "workspace",
        "event_name",
        "occurred_at",
        "occurred_at_ms",
        "data",
        "labels",
        "fingerprint",
        "created_by",
    }
)

_json = msgspec.json.Encoder(order="sorted")  # canonical: live payloads and journal replays encode alike


class FieldLifter(msgspec.Struct, frozen=True):
    """Lift ``keys`` from ``data`` (and ``nested_keys`` from ``data[nested]``) for matching events."""

    name: str
    pattern: str
    keys: tuple[str, ...] = ()
    nested: str | None = None
    nested_keys: tuple[str, ...] = ()

    def matches(self, event_name: str) -> bool:
        """fnmatch (case-sensitive) of the event name against ``pattern``."""
        return fnmatchcase(event_name, self.pattern)

    def lift(self, data: Mapping[str, Any], out: dict[str, Any]) -> None:
        """Write every present, non-None key into ``out`` (overwriting earlier lifters)."""
        for key in self.keys:
            value = data.get(key)
            if value is not None:
                out[key] = value
        if self.nested is not None:
            inner = data.get(self.nested)
            if isinstance(inner, Mapping):
                for key in self.nested_keys:
                    value = inner.get(key)
                    if value is not None:
                        out[key] = value


DEFAULT_LIFTERS: tuple[FieldLifter, ...] = (
    FieldLifter("UniversalLifter", "*", ("session_id", "parent_id")),
    FieldLifter("ToolLifter", "tool:*", ("tool_name", "tool_input", "tool_call_id", "parallel_group_id")),
    FieldLifter("LlmLifter", "llm:*", ("model", "provider")),
    FieldLifter(
        "DelegateLifter",
        "delegate:*",
        ("agent", "sub_session_id", "parent_session_id", "tool_call_id", "parallel_group_id"),
    ),
    FieldLifter("PromptLifter", "prompt:*", ("prompt", "response_preview")),
    FieldLifter(
        "RecipeLifter",
        "recipe:*",
        ("recipe_name", "current_step", "description", "status", "step_id", "total_steps"),
    ),
    FieldLifter(
        "SessionLifter",
        "session:*",
        ("parent",),
        nested="metadata",
        nested_keys=(
            "agent_name",
            "tool_call_id",
            "parallel_group_id",
            "recipe_name",
            "recipe_step",
            "recipe_step_index",
        ),
    ),
    FieldLifter("SkillLifter", "skill:*", ("skill_directory", "skill_name")),
    FieldLifter("ArtifactLifter", "artifact:*", ("bytes", "path")),
)


@lru_cache(maxsize=4096)
def lifters_for(
    event_name: str, lifters: tuple[FieldLifter, ...] = DEFAULT_LIFTERS
) -> tuple[FieldLifter, ...]:
    """The lifters whose pattern matches ``event_name``, in order (cached per name)."""
    return tuple(lifter for lifter in lifters if lifter.matches(event_name))


_SCALAR_TYPES = frozenset({str, bool, int})
"""Kept as they are by `lift_fields` without a call (floats go through `graph_value`)."""
_SMALLEST_NORMAL = sys.float_info.min


def _normal(value: float) -> float:
    """``value``, or a zero of its sign when it is subnormal: FalkorDB's parser refuses subnormal
    literals ("Float overflow"), and `engine.cypher_literal` writes the same zero."""
    return math.copysign(0.0, value) if 0.0 < abs(value) < _SMALLEST_NORMAL else value


def graph_value(value: Any) -> Any:
    """A property value FalkorDB stores: scalars and lists of scalars as is (subnormal floats as a
    zero of their sign, so the writer's rows hold none: `engine.NormalFloatList`), the rest as
    JSON text."""
    if type(value) in _SCALAR_TYPES:  # the common case, without isinstance's union walk
        return value
    if isinstance(value, float):
        return _normal(value)
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str | bool | int | float) for v in value):
        return [_normal(v) if isinstance(v, float) else v for v in value]
    return _json.encode(value).decode()


def lift_fields(
    event_name: str, data: Mapping[str, Any], lifters: Sequence[FieldLifter] | None = None
) -> dict[str, Any]:
    """All matching lifters' fields, graph-normalised, reserved names prefixed with ``data_``.

    Runs the event name's `lift_steps` (every matching lifter's keys, in lifter order): a later
    lifter's value overwrites an earlier one's and keeps the first one's position, exactly as
    running the lifters one after another. O(number of lifted keys)."""
    steps = lift_steps(event_name) if lifters is None else _steps(event_name, tuple(lifters))
    out: dict[str, Any] = {}
    scalar = _SCALAR_TYPES
    for nested, key, out_key in steps:
        if nested is None:
            value = data.get(key)
        else:
            inner = data.get(nested)
            value = inner.get(key) if isinstance(inner, Mapping) else None
        if value is not None:
            # `graph_value`, its common case inline (no call per lifted scalar)
            out[out_key] = value if type(value) in scalar else graph_value(value)
    return out


LiftStep = tuple[str | None, str, str]
"""``(nested mapping key or None, key, property name)``."""


def _steps(event_name: str, lifters: tuple[FieldLifter, ...]) -> tuple[LiftStep, ...]:
    steps: list[LiftStep] = []
    for lifter in lifters:
        if not lifter.matches(event_name):
            continue
        steps.extend((None, key, _property_name(key)) for key in lifter.keys)
        if lifter.nested is not None:
            steps.extend((lifter.nested, key, _property_name(key)) for key in lifter.nested_keys)
    return tuple(steps)


def _property_name(key: str) -> str:
    return f"data_{key}" if key in RESERVED_PROPERTIES else key


@lru_cache(maxsize=4096)
def lift_steps(event_name: str) -> tuple[LiftStep, ...]:
    """The `DEFAULT_LIFTERS` steps for ``event_name`` (cached per name)."""
    return _steps(event_name, DEFAULT_LIFTERS)
