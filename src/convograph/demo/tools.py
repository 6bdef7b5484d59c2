"""The demo's tools, built from a scenario's data (`convograph.demo.scenario`).

- A **canned** tool answers from its ``answers``: the first whose ``when`` substrings all occur in
  the call's arguments (case-insensitive), else ``default``. It streams its ``progress`` entries
  as ``tool_progress`` events and takes its ``delay`` (both divided by the demo's speed), then
  returns ``{context, result}``; ``{param}`` in the context is replaced by that argument. The
  demo's tools touch nothing: ``write_file`` says what it would have written.
- A **delegate** tool runs another agent of the scenario as a subagent on the call's ``task``
  (`convograph.harness.ToolContext.spawn`), streaming into the same conversation.

Every parameter is a required string; unknown arguments are refused (a clear error result).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable
from typing import Any

import msgspec

from convograph.demo.scenario import Answer, Scenario, ToolSpecData
from convograph.harness import Agent, Tool, ToolContext, ToolOutput

__all__ = ["build_tools"]

AgentFactory = Callable[[str, str], Agent]
"""``(agent key in the scenario, the run's agent name) -> Agent``."""


def build_tools(scenario: Scenario, agent: str, *, speed: float, make_agent: AgentFactory) -> list[Tool]:
    """The tools of ``agent`` (a key of ``scenario.agents``)."""
    tools = []
    for name in scenario.agents[agent].tools:
        spec = scenario.tools[name]
        if spec.delegate is not None:
            tools.append(_delegate(name, spec, make_agent))
        else:
            tools.append(_canned(name, spec, speed))
    return tools


def _schema(spec: ToolSpecData) -> tuple[dict[str, Any], Any]:
    """The JSON schema of the tool's arguments and the msgspec type that checks them."""
    properties = {param: {"type": "string", "description": text} for param, text in spec.params.items()}
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(spec.params),
        "additionalProperties": False,
    }
    fields = [(param, str) for param in spec.params]
    return schema, msgspec.defstruct("Arguments", fields, kw_only=True, forbid_unknown_fields=True)


def _pick(spec: ToolSpecData, arguments: dict[str, str]) -> Answer:
    for answer in spec.answers:
        if all(needle.lower() in arguments.get(param, "").lower() for param, needle in answer.when.items()):
            return answer
    if spec.default is not None:
        return spec.default
    return Answer(context="(demo) no canned answer for these arguments")


def _pause(seconds: float, speed: float) -> Any:
    return asyncio.sleep(0 if math.isinf(speed) else seconds / speed)


def _canned(name: str, spec: ToolSpecData, speed: float) -> Tool:
    schema, arguments_type = _schema(spec)

    async def run(ctx: ToolContext, **arguments: str) -> ToolOutput:
        answer = _pick(spec, arguments)
        for step in answer.progress:
            await _pause(step.delay, speed)
            await ctx.progress(step.content)
        await _pause(answer.delay if answer.delay is not None else spec.delay, speed)
        context = re.sub(r"\{(\w+)\}", lambda m: arguments.get(m.group(1), m.group(0)), answer.context)
        return ToolOutput(context=context, result=answer.result if answer.result is not None else context)

    return Tool(
        name=name,
        description=spec.description,
        parameters=schema,
        function=run,
        policy=spec.policy,
        context_parameter="ctx",
        _arguments=arguments_type,
    )


def _delegate(name: str, spec: ToolSpecData, make_agent: AgentFactory) -> Tool:
    assert spec.delegate is not None
    delegate = spec.delegate
    schema, arguments_type = _schema(spec)

    async def run(ctx: ToolContext, **arguments: str) -> ToolOutput:
        suffix = arguments.get(delegate.name_param or "", "")
        slug = re.sub(r"[^a-z0-9]+", "-", suffix.lower()).strip("-")[:32]
        agent_name = f"{delegate.agent}-{slug}" if slug else delegate.agent
        result = await ctx.spawn(make_agent(delegate.agent, agent_name), arguments["task"])
        if not result.ok:
            detail = f": {result.error}" if result.error else ""
            raise RuntimeError(f"the {agent_name} agent ended without an answer ({result.reason}{detail})")
        return ToolOutput(context=result.text, result=result.text)

    return Tool(
        name=name,
        description=spec.description,
        parameters=schema,
        function=run,
        policy=spec.policy,
        timeout=math.inf,
        context_parameter="ctx",
        _arguments=arguments_type,
    )
