"""`ToolContext`: what a running tool may know and do besides its arguments.

A tool function declares a parameter annotated ``ToolContext`` to receive it (it is not part of
the tool's schema). Through it a tool reports progress (``tool_progress`` events, live in the
viewer) and runs subagents as child runs of its call (`spawn`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convograph.harness.agent import Agent, AgentResult

__all__ = ["ToolContext"]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """One tool call's context. ``tool_call_id`` is the namespaced id (``{agentRunId}/{rawId}``)
    that the call's events carry and that a subagent's ``parentId`` points to."""

    tool_call_id: str
    tool_name: str
    run_id: str
    """The calling agent's run id."""
    conversation_id: str
    _progress: Callable[[Any], Awaitable[None]]
    _spawn: Callable[[Agent, str], Awaitable[AgentResult]]

    async def progress(self, content: Any) -> None:
        """Emit a ``tool_progress`` event for this call (``content``: any JSON-able value)."""
        await self._progress(content)

    async def spawn(self, agent: Agent, task: str) -> AgentResult:
        """Run ``agent`` on ``task`` as a child run of this call (its ``harness_start`` has
        ``parentId`` = `tool_call_id`), streaming into the same conversation; its history is its
        own run (the task, then its own turns). Its token usage is added to the calling run's
        ``totalUsage``. Cancelling the caller cancels the child (which then ends "cancelled")."""
        return await self._spawn(agent, task)
