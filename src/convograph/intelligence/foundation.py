"""Foundation layer: Delegations, Agents, SkillLoads, RecipeRuns, RecipeSteps, Recipes.

Same contract as `convograph.intelligence.kernel`: a pure step of the per-session fold over the
journal in event-time order (`layer_semantic.fold_key`), ids from the ordered log:

- Delegation ``{parent_session_id}::delegation::{tool_call_id or sub_session_id}`` — created by
  *any* ``delegate:*`` event that names it (a lifecycle event that overtook ``agent_spawned``
  still lands on the same node). The child Session is merged (a stub until its own events
  arrive), so a child whose events came first is joined, not duplicated.
- Agent ``agent:{name}`` (namespaced concept, shared in the workspace). ``self`` is resolved to
  the delegating session's own agent (its ``session:fork`` metadata) or to ``root``; the
  outcome is the Delegation's ``resolved_agent`` property, and markers (``self``, ``root``,
  ``unresolved``, blanks) never become Agent nodes (upstream §10 B6).
- SkillLoad ``{sid}::skill_load::{n}``; RecipeRun ``{sid}::recipe_run::{n}``; Recipe
  ``recipe:{name}``; RecipeStep ``{run_id}::step::{current_step}`` (loop:
  ``{run_id}::step::{step_id}::loop::{iteration}``, approval: ``{run_id}::step::{stage_name}``).

Complexity: O(1) amortised per event (parallel groups: O(group size)).
"""

from __future__ import annotations

from typing import Any

from convograph.intelligence.kernel import PSEUDO_AGENTS, Derived, Fact, SessionFold, stamp
from convograph.intelligence.layer1 import tool_call_node_id

__all__ = ["fold_foundation", "resolve_agent"]

_DELEGATION_STATUS = {
    "delegate:agent_completed": ("completed", True),
    "delegate:complete": ("completed", True),
    "delegate:agent_cancelled": ("cancelled", False),
    "delegate:agent_failed": ("failed", False),
    "delegate:error": ("failed", False),
}


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def resolve_agent(agent: str | None, state: SessionFold) -> str:
    """The real agent behind ``agent``: itself, or for ``self`` the delegating session's agent
    (``root`` for a root session, ``unresolved`` when that is a marker too)."""
    if agent and agent not in PSEUDO_AGENTS:
        return agent
    if agent == "self":
        own = state.agent_name
        if own and own not in PSEUDO_AGENTS:
            return own
        return "unresolved" if state.forked else "root"
    return "unresolved"


def _delegation(state: SessionFold, fact: Fact, out: Derived) -> None:
    data = fact.data
    parent = _text(data.get("parent_session_id")) or state.session_id
    tool_call_id = _text(data.get("tool_call_id"))
    child = _text(data.get("sub_session_id"))
    key = tool_call_id or child
    if key is None:
        return
    delegation_id = f"{parent}::delegation::{key}"
    out.node("Delegation", delegation_id, {"parent_session_id": parent, "sub_session_id": child})
    out.edge("HAS_DELEGATION", "Session", parent, "Delegation", delegation_id)
    out.session(parent)
    out.sourced("Delegation", delegation_id, fact)
    if tool_call_id is not None:
        out.node("Delegation", delegation_id, {"tool_call_id": tool_call_id})
        out.edge(
            "TRIGGERED", "ToolCall", tool_call_node_id(parent, tool_call_id), "Delegation", delegation_id
        )
    agent = _text(data.get("agent"))
    resolved = resolve_agent(agent, state) if agent is not None else None
    if child is not None:
        flags = out.session(child)
        flags.parent = parent
        out.edge("ENCOMPASSES", "Delegation", delegation_id, "Session", child)
        if resolved is not None and resolved not in PSEUDO_AGENTS:
            out.node("Agent", f"agent:{resolved}", {"name": resolved})
            out.edge("HAS_AGENT", "Session", child, "Agent", f"agent:{resolved}")
    event = fact.event
    if event == "delegate:agent_spawned" or event == "delegate:start":
        props: dict[str, Any] = {
            "agent": agent,
            "resolved_agent": resolved,
            "parallel_group_id": _text(data.get("parallel_group_id")),
            "context_depth": _text(data.get("context_depth")),
            "context_scope": _text(data.get("context_scope")),
            "model_role": _text(data.get("model_role")),
            "status": "running",
        }
        stamp(props, "started_at", fact.epoch_ms)
        out.node("Delegation", delegation_id, props)
        state.delegation_started[delegation_id] = fact.epoch_ms
        if state.step is not None:
            out.edge("TRIGGERED", "RecipeStep", state.step[0], "Delegation", delegation_id)
        group = props["parallel_group_id"]
        if group is not None:
            members = state.delegation_groups.setdefault(group, [])
            if delegation_id not in members:
                for earlier in members:
                    out.edge("PARALLEL_AGENT", "Delegation", delegation_id, "Delegation", earlier)
                members.append(delegation_id)
    elif event in _DELEGATION_STATUS:
        status, success = _DELEGATION_STATUS[event]
        error = data.get("error")
        props = {
            "status": status,
            "success": success,
            "error": (error if isinstance(error, str) else str(error))[:1000] if error is not None else None,
            "turn_count": data.get("turn_count") if isinstance(data.get("turn_count"), int) else None,
        }
        stamp(props, "ended_at", fact.epoch_ms)
        started = state.delegation_started.get(delegation_id)
        if started is not None:
            props["duration_ms"] = fact.epoch_ms - started
        out.node("Delegation", delegation_id, props)
    elif event == "delegate:agent_resumed":
        props = {}
        stamp(props, "resumed_at", fact.epoch_ms)
        out.node("Delegation", delegation_id, props)


def _skill(state: SessionFold, fact: Fact, out: Derived) -> None:
    data = fact.data
    name = _text(data.get("skill_name"))
    if name is None:
        return
    sid = state.session_id
    if fact.event == "skill:loaded" or fact.event == "skill:load":
        state.skill_loads += 1
        load_id = f"{sid}::skill_load::{state.skill_loads}"
        props: dict[str, Any] = {
            "session_id": sid,
            "skill_name": name,
            "source": _text(data.get("source")),
            "version": _text(data.get("version")),
            "context": _text(data.get("context")),
            "content_length": data.get("content_length")
            if isinstance(data.get("content_length"), int)
            else None,
            "auto_loaded": data.get("auto_loaded") if isinstance(data.get("auto_loaded"), bool) else None,
            "iteration_id": state.iteration_id,
        }
        stamp(props, "loaded_at", fact.epoch_ms)
        out.node("SkillLoad", load_id, props)
        out.edge("HAS_SKILL_LOAD", "Session", sid, "SkillLoad", load_id)
        if state.iteration_id is not None:
            out.edge("HAS_SKILL_LOAD", "Iteration", state.iteration_id, "SkillLoad", load_id)
        out.sourced("SkillLoad", load_id, fact)
        state.active_skills[name] = (load_id, fact.epoch_ms)
    elif fact.event == "skill:unloaded":
        active = state.active_skills.pop(name, None)
        if active is not None:
            props = {"duration_ms": fact.epoch_ms - active[1]}
            stamp(props, "unloaded_at", fact.epoch_ms)
            out.node("SkillLoad", active[0], props)
            out.sourced("SkillLoad", active[0], fact)


def _end_step(state: SessionFold, fact: Fact, out: Derived) -> None:
    if state.step is not None:
        step_id, started = state.step
        props: dict[str, Any] = {"duration_ms": fact.epoch_ms - started}
        stamp(props, "ended_at", fact.epoch_ms)
        out.node("RecipeStep", step_id, props)
        state.step = None


def _recipe(state: SessionFold, fact: Fact, out: Derived) -> None:
    data = fact.data
    sid = state.session_id
    event = fact.event
    if event == "recipe:start":
        state.recipe_runs += 1
        run_id = f"{sid}::recipe_run::{state.recipe_runs}"
        name = _text(data.get("name")) or _text(data.get("recipe_name"))
        parent = _text(data.get("parent_session_id"))
        props: dict[str, Any] = {
            "session_id": sid,
            "name": name,
            "total_steps": data.get("total_steps") if isinstance(data.get("total_steps"), int) else None,
            "status": "running",
            "parent_session_id": parent,
            "is_sub_recipe": parent is not None,
        }
        stamp(props, "started_at", fact.epoch_ms)
        out.node("RecipeRun", run_id, props)
        out.edge("HAS_RECIPE_RUN", "Session", sid, "RecipeRun", run_id)
        if name is not None:
            out.node("Recipe", f"recipe:{name}", {"name": name})
            out.edge("HAS_RECIPE", "RecipeRun", run_id, "Recipe", f"recipe:{name}")
        if state.step is not None:
            out.edge("SPAWNED", "RecipeStep", state.step[0], "RecipeRun", run_id)
        out.sourced("RecipeRun", run_id, fact)
        state.recipe_stack.append((run_id, fact.epoch_ms))
        state.recipe_steps[run_id] = 0
        state.step = None
        return
    if not state.recipe_stack:
        return
    run_id, started = state.recipe_stack[-1]
    if event in ("recipe:step", "recipe:loop_iteration", "recipe:approval"):
        _end_step(state, fact, out)
        if event == "recipe:step":
            index = data.get("current_step")
            steps = data.get("steps")
            name = None
            if isinstance(index, int) and isinstance(steps, list) and 0 <= index < len(steps):
                entry = steps[index]
                name = _text(entry.get("name")) if isinstance(entry, dict) else None
            name = name or _text(data.get("step_id")) or str(index)
            step_id = f"{run_id}::step::{index}"
            props = {"name": name, "step_index": index if isinstance(index, int) else None, "kind": "step"}
        elif event == "recipe:loop_iteration":
            iteration = data.get("iteration")
            step_id = f"{run_id}::step::{data.get('step_id')}::loop::{iteration}"
            props = {"name": f"loop iteration {iteration}", "kind": "loop", "iteration": iteration}
        else:
            stage = _text(data.get("stage_name")) or "approval"
            step_id = f"{run_id}::step::{stage}"
            props = {"name": stage, "kind": "approval"}
        props["recipe_run_id"] = run_id
        stamp(props, "started_at", fact.epoch_ms)
        out.node("RecipeStep", step_id, props)
        out.edge("HAS_STEP", "RecipeRun", run_id, "RecipeStep", step_id)
        out.sourced("RecipeStep", step_id, fact)
        state.recipe_steps[run_id] = state.recipe_steps.get(run_id, 0) + 1
        out.node("RecipeRun", run_id, {"steps_started": state.recipe_steps[run_id]})
        state.step = (step_id, fact.epoch_ms)
    elif event == "recipe:complete":
        _end_step(state, fact, out)
        success = data.get("success")
        final = _text(data.get("final_status"))
        props = {
            "success": success if isinstance(success, bool) else None,
            "final_status": final,
            "status": final or ("completed" if success is not False else "failed"),
            "duration_ms": fact.epoch_ms - started,
        }
        stamp(props, "ended_at", fact.epoch_ms)
        out.node("RecipeRun", run_id, props)
        out.sourced("RecipeRun", run_id, fact)
        state.recipe_stack.pop()


def fold_foundation(state: SessionFold, fact: Fact, out: Derived) -> None:
    """Advance ``state`` by one hook event and add its foundation entities to ``out``."""
    event = fact.event
    if event.startswith("delegate:"):
        _delegation(state, fact, out)
    elif event.startswith("skill:"):
        _skill(state, fact, out)
    elif event.startswith("recipe:"):
        _recipe(state, fact, out)
    elif event == "tool:pre" and state.step is not None:
        tool_call_id = fact.data.get("tool_call_id")
        if isinstance(tool_call_id, str) and tool_call_id:
            node_id = tool_call_node_id(state.session_id, tool_call_id)
            out.edge("TRIGGERED", "RecipeStep", state.step[0], "ToolCall", node_id)
