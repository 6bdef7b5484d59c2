"""``convograph.instrument``: record existing ``openai`` / ``anthropic`` clients' calls as convograph
events (`convograph.integrations.instrument`; docs/integrations.md)."""

from convograph.integrations.instrument import Instrumentation, conversation, instrument, uninstrument

__all__ = ["Instrumentation", "conversation", "instrument", "uninstrument"]
