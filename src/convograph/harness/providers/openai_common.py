"""What the two OpenAI providers share: the SDK client (keys, base URL, no SDK retries, the connect
limit) and the mapping of the SDK's exceptions to `Failure`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

import openai

from convograph.harness.providers.base import Failure, detail_of
from convograph.harness.retry import Timeouts, retry_after_seconds

__all__ = ["OPENAI_KEY_ENV", "classify_openai", "classify_status", "make_openai_client"]

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


def classify_status(status: int, detail: str, headers: Mapping[str, str] | None, key_env: str) -> Failure:
    """A failed HTTP status as a `Failure` (shared by every provider)."""
    where = f"HTTP {status}: {detail}"
    if status == 401:
        return Failure(f"the API key was rejected ({where}); set {key_env} to a valid key", retryable=False)
    if status == 403:
        return Failure(
            f"permission denied ({where}); check that {key_env} may use this model", retryable=False
        )
    retry_after = retry_after_seconds(headers)
    if status == 429:
        return Failure(f"rate limited ({where})", retryable=True, retry_after=retry_after)
    if status == 529:
        return Failure(f"overloaded ({where})", retryable=True, retry_after=retry_after)
    if status >= 500 or status in (408, 409):
        return Failure(f"server error ({where})", retryable=True, retry_after=retry_after)
    return Failure(f"request rejected ({where})", retryable=False)


def classify_openai(exc: Exception, base_url: str) -> Failure:
    if isinstance(exc, openai.APIStatusError):
        detail = detail_of(exc.body, exc.message)
        return classify_status(exc.status_code, detail, exc.response.headers, OPENAI_KEY_ENV)
    if isinstance(exc, openai.APITimeoutError):
        return Failure(f"timed out connecting to {base_url}", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        reason = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return Failure(f"connection to {base_url} failed or was dropped{reason}", retryable=True)
    if isinstance(exc, openai.APIError):  # an error object inside the stream
        detail = detail_of(exc.body, exc.message)
        kind = str(getattr(exc, "type", None) or getattr(exc, "code", None) or "error")
        return Failure(f"error in the stream ({kind}: {detail})", retryable=_retryable_kind(kind))
    if isinstance(exc, openai.OpenAIError):
        return Failure(str(exc), retryable=False)
    return Failure(f"unexpected {type(exc).__name__}: {exc}", retryable=False)


def _retryable_kind(kind: str) -> bool:
    """Mid-stream error types worth another attempt: server-side trouble, not a bad request."""
    lowered = kind.lower()
    return not any(
        word in lowered for word in ("invalid", "context_length", "not_found", "permission", "auth")
    )


def base_url_of(client: Any) -> str:
    return str(getattr(client, "base_url", "") or "the API")
