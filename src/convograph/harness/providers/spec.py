"""Model specs: ``openai:MODEL``, ``openai-responses:MODEL`` and ``anthropic:MODEL`` as a provider
and a model name (what ``convograph run --model`` takes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from convograph.harness.providers.anthropic_messages import AnthropicProvider
from convograph.harness.providers.base import StreamingProvider
from convograph.harness.providers.openai_chat import OpenAIChatProvider
from convograph.harness.providers.openai_responses import OpenAIResponsesProvider
from convograph.harness.retry import RetryPolicy, Timeouts

__all__ = ["API_NAMES", "ModelSpec", "make_provider", "parse_model_spec"]

ApiName = Literal["openai", "openai-responses", "anthropic"]
API_NAMES: Final[tuple[ApiName, ...]] = ("openai", "openai-responses", "anthropic")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    api: ApiName
    model: str

    def __str__(self) -> str:
        return f"{self.api}:{self.model}"


def parse_model_spec(text: str) -> ModelSpec:
    """``"API:MODEL"`` split at the first colon (model names may hold colons, e.g.
    ``openai:llama3.1:8b`` on Ollama). Raises ValueError naming the accepted forms."""
    api, sep, model = text.strip().partition(":")
    forms = ", ".join(f"{name}:MODEL" for name in API_NAMES)
    if not sep or not model:
        raise ValueError(f"model spec {text!r} must be API:MODEL, one of {forms}")
    if api not in API_NAMES:
        raise ValueError(f"unknown API {api!r} in model spec {text!r}; expected one of {forms}")
    return ModelSpec(api, model)


def make_provider(
    spec: ModelSpec | str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    retry: RetryPolicy | None = None,
    timeouts: Timeouts | None = None,
) -> tuple[StreamingProvider, str]:
    """The provider for ``spec`` and the model name to put in its requests. Keys and base URLs
    default to the SDKs' environment variables (``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``,
    ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``)."""
    parsed = parse_model_spec(spec) if isinstance(spec, str) else spec
    provider: StreamingProvider
    if parsed.api == "anthropic":
        provider = AnthropicProvider(api_key=api_key, base_url=base_url, retry=retry, timeouts=timeouts)
    elif parsed.api == "openai-responses":
        provider = OpenAIResponsesProvider(api_key=api_key, base_url=base_url, retry=retry, timeouts=timeouts)
    else:
        provider = OpenAIChatProvider(api_key=api_key, base_url=base_url, retry=retry, timeouts=timeouts)
    return provider, parsed.model
