"""Harnesses: the producers of convograph events (seed 003).

Providers stream one model call each (`convograph.harness.providers`); the agent harness
(`Agent`) runs the tool loop on a provider; the REPL harness runs the recursive-LM loop. Events go
to a `ConversationPort`: `LogPort` (an event log in this process) or `RemotePort` (a ``convograph
serve``). `serve` keeps a harness attached to a conversation, answering each message, edit and
regenerate (steering from the viewer). See docs/harness.md.
"""

from convograph.harness.agent import Agent, AgentResult, AgentRun, Budget
from convograph.harness.base import ConversationPort, MessageFormat, ModelRequest, Provider, ToolSpec
from convograph.harness.context import ToolContext
from convograph.harness.ids import new_id
from convograph.harness.permissions import AskCallback, Decision
from convograph.harness.ports import ConversationState, LogPort, SubagentPort
from convograph.harness.repl import ReplHarness, ReplResult, ReplRun
from convograph.harness.runs import RunHandle
from convograph.harness.sandbox import ExecResult, Sandbox, SandboxLimits
from convograph.harness.serving import Servable, ServingPort, serve
from convograph.harness.tools import AlwaysAllows, Policy, Tool, ToolArgumentError, ToolOutput, tool

__all__ = [
    "Agent",
    "AgentResult",
    "AgentRun",
    "AlwaysAllows",
    "AskCallback",
    "Budget",
    "ConversationPort",
    "ConversationState",
    "Decision",
    "ExecResult",
    "LogPort",
    "MessageFormat",
    "ModelRequest",
    "Policy",
    "Provider",
    "ReplHarness",
    "ReplResult",
    "ReplRun",
    "RunHandle",
    "Sandbox",
    "SandboxLimits",
    "Servable",
    "ServingPort",
    "SubagentPort",
    "Tool",
    "ToolArgumentError",
    "ToolContext",
    "ToolOutput",
    "ToolSpec",
    "new_id",
    "serve",
    "tool",
]
