from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convograph.intelligence.labels import derive_labels

SEED_TABLE = [
    ("session:start", "SessionEvent", "SessionStartEvent"),
    ("session:fork", "SessionEvent", "SessionForkEvent"),
    ("session:end", "SessionEvent", "SessionEndEvent"),
    ("session:resume", "SessionEvent", "SessionResumeEvent"),
    ("execution:start", "ExecutionEvent", "ExecutionStartEvent"),
    ("execution:end", "ExecutionEvent", "ExecutionEndEvent"),
    ("orchestrator:complete", "OrchestratorEvent", "OrchestratorCompleteEvent"),
    ("prompt:submit", "PromptEvent", "PromptSubmitEvent"),
    ("prompt:complete", "PromptEvent", "PromptCompleteEvent"),
    ("provider:request", "ProviderEvent", "ProviderRequestEvent"),
    ("provider:response", "ProviderEvent", "ProviderResponseEvent"),
    ("llm:request", "LlmEvent", "LlmRequestEvent"),
    ("llm:response", "LlmEvent", "LlmResponseEvent"),
    ("tool:pre", "ToolEvent", "ToolPreEvent"),
    ("tool:post", "ToolEvent", "ToolPostEvent"),
    ("tool:error", "ToolEvent", "ToolErrorEvent"),
    ("delegate:start", "DelegateEvent", "DelegateStartEvent"),
    ("delegate:agent_spawned", "DelegateEvent", "DelegateAgentSpawnedEvent"),
    ("delegate:complete", "DelegateEvent", "DelegateCompleteEvent"),
    ("recipe:start", "RecipeEvent", "RecipeStartEvent"),
    ("recipe:step", "RecipeEvent", "RecipeStepEvent"),
    ("recipe:complete", "RecipeEvent", "RecipeCompleteEvent"),
    ("recipe:loop_iteration", "RecipeEvent", "RecipeLoopIterationEvent"),
    ("skill:load", "SkillEvent", "SkillLoadEvent"),
]


def test_seed_table_has_24_names() -> None:
    assert len(SEED_TABLE) == 24


@pytest.mark.parametrize(("name", "category", "specific"), SEED_TABLE)
def test_every_seed_event_gets_the_three_labels(name: str, category: str, specific: str) -> None:
    assert derive_labels(name) == ("Event", category, specific)


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        ("content_block:start", ("Event", "ContentBlockEvent", "ContentBlockStartEvent")),
        ("delegate:agent_completed", ("Event", "DelegateEvent", "DelegateAgentCompletedEvent")),
        ("skill:loaded", ("Event", "SkillEvent", "SkillLoadedEvent")),
        ("context:pre_compact", ("Event", "ContextEvent", "ContextPreCompactEvent")),
        ("a:b:c", ("Event", "ABEvent", "ABCEvent")),
        ("LLM:CacheHIT", ("Event", "LlmEvent", "LlmCachehitEvent")),
        ("my_event", ("Event", "MyEventEvent")),
        ("ping", ("Event", "PingEvent")),
    ],
)
def test_unknown_names_follow_the_same_derivation(name: str, labels: tuple[str, ...]) -> None:
    assert derive_labels(name) == labels


@given(st.text(min_size=1, max_size=40))
def test_labels_are_always_safe_identifiers_and_start_with_event(name: str) -> None:
    labels = derive_labels(name)
    assert labels[0] == "Event"
    assert 1 <= len(labels) <= 3
    assert len(set(labels)) == len(labels)
    for label in labels:
        assert label.isascii()
        assert label.isalnum()
        assert label[0].isalpha()
        assert label.endswith("Event")
