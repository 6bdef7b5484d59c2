"""Provider harnesses: one model call each, over the official SDKs, as convograph events.

- `OpenAIChatProvider`: OpenAI Chat Completions (and any OpenAI-compatible server).

The shared call loop (retries, time limits, cancellation) is `convograph.harness.providers.base`;
docs/harness.md describes the events a call yields.
"""

from convograph.harness.providers.base import Failure, ProviderCall, StreamingProvider
from convograph.harness.providers.openai_chat import OpenAIChatProvider

__all__ = ["Failure", "OpenAIChatProvider", "ProviderCall", "StreamingProvider"]
