"""What the two OpenAI providers share: the SDK client (keys, base URL, no SDK retries, the connect
limit) and the mapping of the SDK's exceptions to `Failure`."""

from __future__ import annotations

import os
from typing import Final

import openai

from convograph.harness.providers.base import (
    Failure,
    classify_status,
    classify_transport,
    detail_of,
    retryable_kind,
)
from convograph.harness.retry import Timeouts

__all__ = ["OPENAI_KEY_ENV", "classify_openai", "make_openai_client"]

OPENAI_KEY_ENV: Final = "OPENAI_API_KEY"
NO_KEY: Final = "no-key-set"
"""Sent to an OpenAI-compatible server at a custom base URL when no key is set (local servers such
as Ollama, vLLM, llama.cpp and LM Studio ignore it; a server that checks keys answers 401, and the
error then names the variable to set)."""


def make_openai_client(api_key: str | None, base_url: str | None, timeouts: Timeouts) -> openai.AsyncOpenAI:
    """An async client with the SDK's own retries off (the provider retries) and its connect limit;
    read limits are the provider's (first token, idle, total)."""
    key = api_key or os.environ.get(OPENAI_KEY_ENV)
    if not key and (base_url or os.environ.get("OPENAI_BASE_URL")):
        key = NO_KEY
    if not key:
        raise Failure(f"no API key: set {OPENAI_KEY_ENV} (or pass api_key=...)", retryable=False)
    limit = openai.Timeout(connect=timeouts.connect, read=None, write=timeouts.connect, pool=timeouts.connect)
    return openai.AsyncOpenAI(api_key=key, base_url=base_url, max_retries=0, timeout=limit)


def classify_openai(exc: Exception, base_url: str) -> Failure:
    if isinstance(exc, openai.APIStatusError):
        detail = detail_of(exc.body, exc.message)
        return classify_status(exc.status_code, detail, exc.response.headers, OPENAI_KEY_ENV)
    transport = classify_transport(exc, openai, base_url)
    if transport is not None:
        return transport
    if isinstance(exc, openai.APIError):  # an error object inside the stream
        detail = detail_of(exc.body, exc.message)
        kind = str(getattr(exc, "type", None) or getattr(exc, "code", None) or "error")
        return Failure(f"error in the stream ({kind}: {detail})", retryable=retryable_kind(kind))
    if isinstance(exc, openai.OpenAIError):
        return Failure(str(exc), retryable=False)
    return Failure(f"unexpected {type(exc).__name__}: {exc}", retryable=False)
