"""Permissions: a policy per tool (allow, deny, ask) and the decision on an "ask".

Resolution order for a call of tool ``t``: the agent's ``permissions[t]``, else its
``permissions["*"]``, else the tool's own `Tool.policy` (default ``"allow"``: the developer wrote
the function; mark the dangerous ones ``"ask"``).

"ask" emits a ``relay`` event (``kind: "permission"``) and the run waits for its decision: a
``relay_resolved`` event in the conversation, recorded by the viewer, by ``POST
/v1/conversations/{cid}/relays/{id}``, or by the agent's ``ask`` callback (whose decision is
recorded as that same event, with the server's ``eventId`` ``relay-decision:{id}``, so whichever
decides first wins and a second decision is a duplicate). Because the decision is an event in the
log, the wait survives a server restart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from convograph.events import Relay, RelayResolved
from convograph.harness.tools import Policy, Tool

__all__ = ["AskCallback", "Decision", "decision_event", "resolve_policy"]


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to a permission relay."""

    approved: bool
    reason: str | None = None


AskCallback = Callable[[Relay], Awaitable[Decision | bool | None]]
"""Decides a relay in code: a `Decision`, a bool, or None to leave it to a human."""


def resolve_policy(tool: Tool, permissions: Mapping[str, Policy] | None) -> Policy:
    """The policy for a call of ``tool`` (module docstring)."""
    if permissions:
        policy = permissions.get(tool.name) or permissions.get("*")
        if policy is not None:
            return policy
    return tool.policy


def decision_event(relay: Relay, decision: Decision | bool) -> RelayResolved:
    """The ``relay_resolved`` event recording ``decision`` on ``relay`` (the same ``eventId`` the
    server gives a decision, so a decision is stored once whoever makes it)."""
    if isinstance(decision, bool):
        decision = Decision(decision)
    return RelayResolved(
        relay_id=relay.id,
        approved=decision.approved,
        tool=relay.tool,
        reason=decision.reason,
        run_id=relay.run_id,
        event_id=f"relay-decision:{relay.id}",
    )
