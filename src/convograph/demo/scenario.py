"""The demo's live scenarios: what the agents are, what their tools answer, what the scripted model says.

Each scenario is a data file, ``data/live-<name>.json`` (camelCase keys), run by
`convograph.demo.live` with the real harness:

- ``conversationId``, ``title``, ``task`` (the first user message), ``api`` (the wire format the
  scripted model server speaks for it: ``anthropic``, ``openai`` or ``openai-responses``);
- ``agents``: by name, each with its ``model`` (the scripted model's name, which the script's
  replies ``match`` on), ``system``, ``tools``, ``maxTurns``, ``maxTokens`` and ``options`` (passed
  to the SDK call, e.g. Anthropic ``thinking``); ``serve`` names the one serving the conversation;
  ``harness: "repl"`` makes it a `ReplHarness` (``subModel`` answers ``llm_query``; ``context``
  names the REPL's context, see `convograph.demo.tickets`);
- ``tools``: by name, canned tools (``params``, ``answers`` chosen by argument substrings, a
  ``delay``, streamed ``progress``) or ``delegate`` tools that run another agent as a subagent;
- ``reviewer``: automatic decisions on permission requests by tool (a teammate who answers after
  ``after`` seconds); a tool with policy ``ask`` and no reviewer waits for a person;
- ``model``: the scripted model server's script (`convograph.testing.model_script`: ``replies``
  with ``match``, ``default``, ``pace``).

With ``convograph demo --model PROVIDER:MODEL`` the same agents, tools and tasks run on that model
instead of the script.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from convograph.testing.model_script import Script

__all__ = ["SCENARIOS", "AgentSpec", "Answer", "Delegate", "Scenario", "ToolSpecData", "load_scenario"]

DATA_DIR: Final = Path(__file__).resolve().parent / "data"
SCENARIOS: Final = ("research", "rlm", "retry-policies")
"""The live scenarios, in the order the demo starts them."""


class _Data(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    pass


class AgentSpec(_Data, frozen=True, kw_only=True):
    model: str
    system: str | None = None
    tools: list[str] = msgspec.field(default_factory=list)
    max_turns: int = 10
    max_tokens: int | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    harness: Literal["agent", "repl"] = "agent"
    sub_model: str | None = None
    context: str | None = None
    max_iterations: int = 10


class Progress(_Data, frozen=True, kw_only=True):
    delay: float
    content: Any


class Answer(_Data, frozen=True, kw_only=True):
    """What a canned tool answers when every ``when`` substring is in its argument."""

    when: dict[str, str] = msgspec.field(default_factory=dict)
    context: str
    result: Any = None
    delay: float | None = None
    progress: list[Progress] = msgspec.field(default_factory=list)


class Delegate(_Data, frozen=True, kw_only=True):
    """A tool that runs ``agent`` as a subagent on the call's ``task``; its name is the agent's,
    suffixed with the ``nameParam`` argument when given (``researcher-qdrant``)."""

    agent: str
    name_param: str | None = None


class ToolSpecData(_Data, frozen=True, kw_only=True):
    description: str
    params: dict[str, str]
    """Parameter name -> its description (every parameter is a required string)."""
    policy: Literal["allow", "deny", "ask"] = "allow"
    delay: float = 0.5
    answers: list[Answer] = msgspec.field(default_factory=list)
    default: Answer | None = None
    delegate: Delegate | None = None


class Decision(_Data, frozen=True, kw_only=True):
    approved: bool
    reason: str | None = None
    after: float = 1.0


class Scenario(_Data, frozen=True, kw_only=True):
    conversation_id: str
    title: str
    api: Literal["anthropic", "openai", "openai-responses"]
    task: str
    serve: str
    agents: dict[str, AgentSpec]
    tools: dict[str, ToolSpecData] = msgspec.field(default_factory=dict)
    reviewer: dict[str, Decision] = msgspec.field(default_factory=dict)
    model: Script = msgspec.field(default_factory=Script)

    def __post_init__(self) -> None:
        if self.serve not in self.agents:
            raise ValueError(f"serve names {self.serve!r}, which is not one of the agents")
        for name, agent in self.agents.items():
            for tool_name in agent.tools:
                if tool_name not in self.tools:
                    raise ValueError(
                        f"agent {name!r} has tool {tool_name!r}, which the scenario does not define"
                    )
        for tool_name, spec in self.tools.items():
            if spec.delegate is not None and spec.delegate.agent not in self.agents:
                raise ValueError(f"tool {tool_name!r} delegates to unknown agent {spec.delegate.agent!r}")


def load_scenario(name: str) -> Scenario:
    """The scenario ``data/live-<name>.json``; `ValueError` naming the file and the problem."""
    path = DATA_DIR / f"live-{name}.json"
    try:
        return msgspec.convert(json.loads(path.read_text(encoding="utf-8")), Scenario)
    except (OSError, ValueError, msgspec.ValidationError) as exc:
        raise ValueError(f"demo scenario {path.name}: {exc}") from None
