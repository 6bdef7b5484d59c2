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

**Always allow.** An approval with ``always`` (the viewer's "Always allow", ``{"approved": true,
"always": true}`` through the API, or ``Decision(True, always=True)`` from the callback) stands
for later calls of the same tool in the conversation, subagents included, whose parameters match
the rule derived from the relay's (`derive_rule`, upstream's rule): each parameter's value as text;
a value with a space becomes its first word followed by `` **`` (any rest), any other value must be
equal. ``{"command": "cat /tmp/x"}`` gives ``{"command": "cat **"}``, which approves ``cat
/etc/hosts`` but not ``rm -rf /``. A call matches when it has the same parameter names and every
value matches. A tool may give its own rule (upstream's ``derivePermission``):
``@tool(policy="ask", always_allows=lambda granted, asked: ...)`` decides from the granted call's
parameters and the asked call's (`Tool.always_allows`). The grants are read from the
conversation's log before each "ask", so they hold for every agent serving it and across restarts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from convograph.events import Relay, RelayResolved
from convograph.harness.tools import AlwaysAllows, Policy, Tool

log = logging.getLogger(__name__)

__all__ = [
    "AskCallback",
    "Decision",
    "decision_event",
    "derive_rule",
    "granted",
    "resolve_policy",
    "rule_matches",
]


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to a permission relay."""

    approved: bool
    reason: str | None = None
    always: bool = False
    """With ``approved``: also approve later matching calls of the tool (module docstring)."""


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
        always=decision.approved and decision.always,
        run_id=relay.run_id,
        event_id=f"relay-decision:{relay.id}",
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def derive_rule(params: Mapping[str, Any]) -> dict[str, str]:
    """The rule an "always allow" of a call with ``params`` grants (module docstring). O(params)."""
    rule = {}
    for name, value in params.items():
        text = _text(value)
        rule[name] = f"{text.split(' ', 1)[0]} **" if " " in text else text
    return rule


def rule_matches(rule: Mapping[str, str], params: Mapping[str, Any]) -> bool:
    """Whether a call with ``params`` is approved by ``rule``: the same names, every value equal
    to its pattern, or starting with the pattern's first word and a space for ``word **``."""
    if set(rule) != set(params):
        return False
    for name, pattern in rule.items():
        text = _text(params[name])
        if pattern.endswith(" **"):
            if not text.startswith(pattern[:-2]):
                return False
        elif text != pattern:
            return False
    return True


def granted(
    grants: Iterable[Relay], tool: str, params: Mapping[str, Any], allows: AlwaysAllows | None = None
) -> Relay | None:
    """The first standing grant (an "always" approved relay) of ``tool`` that approves ``params``:
    by ``allows(granted, asked)``, the tool's own rule (`Tool.always_allows`), else by the rule
    `derive_rule` derives from the grant's parameters. A rule that raises approves nothing (the
    call is asked, and the error logged)."""
    for relay in grants:
        if relay.tool == tool and _approves(relay.params or {}, params, allows):
            return relay
    return None


def _approves(granted: Mapping[str, Any], asked: Mapping[str, Any], allows: AlwaysAllows | None) -> bool:
    if allows is None:
        return rule_matches(derive_rule(granted), asked)
    try:
        return bool(allows(granted, asked))
    except Exception:
        log.exception("a tool's always_allows rule failed: the call is asked instead")
        return False
