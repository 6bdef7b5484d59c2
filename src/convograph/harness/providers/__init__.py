"""Provider harnesses: one model call each, over the official SDKs, as convograph events.

- `OpenAIChatProvider`: OpenAI Chat Completions (and any OpenAI-compatible server);
- `OpenAIResponsesProvider`: the OpenAI Responses API;
- `AnthropicProvider`: Anthropic Messages, with extended thinking.

`make_provider("anthropic:claude-...")` picks one from a model spec. The shared call loop (retries,
time limits, cancellation) is `convograph.harness.providers.base`; docs/harness.md describes the
events a call yields.
"""

from convograph.harness.providers.anthropic_messages import AnthropicProvider
from convograph.harness.providers.base import Failure, ProviderCall, StreamingProvider
from convograph.harness.providers.openai_chat import OpenAIChatProvider
from convograph.harness.providers.openai_responses import OpenAIResponsesProvider
from convograph.harness.providers.spec import API_NAMES, ModelSpec, make_provider, parse_model_spec

__all__ = [
    "API_NAMES",
    "AnthropicProvider",
    "Failure",
    "ModelSpec",
    "OpenAIChatProvider",
    "OpenAIResponsesProvider",
    "ProviderCall",
    "StreamingProvider",
    "make_provider",
    "parse_model_spec",
]
