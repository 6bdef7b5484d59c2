"""Harnesses: the producers of convograph events (seed 003).

Providers stream one model call each (`convograph.harness.providers`); the agent harness runs the
tool loop on a provider; the REPL harness runs the recursive-LM loop. See docs/harness.md.
"""

from convograph.harness.base import ConversationPort, MessageFormat, ModelRequest, Provider, ToolSpec
from convograph.harness.ids import new_id

__all__ = ["ConversationPort", "MessageFormat", "ModelRequest", "Provider", "ToolSpec", "new_id"]
