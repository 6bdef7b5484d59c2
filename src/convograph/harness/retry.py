"""Retry and time-limit policy for model calls.

`RetryPolicy` decides how long to wait before attempt ``n + 1``: exponential backoff
(``base_delay * 2**(n-1)``, capped at ``max_delay``) with jitter, or the server's own
``retry-after-ms`` / ``Retry-After`` when it sent one (waited at least that long, plus a little
jitter so that many clients told the same thing do not return in lockstep). A server asking for
more than ``max_retry_after`` seconds ends the call instead: waiting that long inside one model
call would stall its agent.

`Timeouts` bounds one call: ``connect`` (TCP + TLS), ``first_token`` (request sent to first streamed
event), ``idle`` (longest silence between two streamed events) and ``total`` (the whole call,
retries and waits included).
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["RetryPolicy", "Timeouts", "retry_after_seconds"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 4
    """Attempts in all (the first one included); 1 disables retries."""
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: float = 0.25
    """Fraction of the computed delay drawn at random (0 = none)."""
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0 or not 0 <= self.jitter <= 1:
            raise ValueError("base_delay and max_delay must be >= 0 and jitter within [0, 1]")

    def delay(
        self, attempt: int, retry_after: float | None, rand: Callable[[], float] = random.random
    ) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based). With ``retry_after`` the
        result is at least ``retry_after``."""
        if retry_after is not None:
            return retry_after + rand() * self.jitter * min(1.0, retry_after)
        backoff = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return backoff * (1 - self.jitter * rand())


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float = 10.0
    first_token: float = 120.0
    idle: float = 120.0
    total: float = 900.0

    def __post_init__(self) -> None:
        for name in ("connect", "first_token", "idle", "total"):
            if getattr(self, name) <= 0:
                raise ValueError(f"timeout {name} must be positive, got {getattr(self, name)}")


def retry_after_seconds(
    headers: Mapping[str, str] | None, now: Callable[[], float] = time.time
) -> float | None:
    """The wait a response asks for: ``retry-after-ms`` (milliseconds), else ``Retry-After``
    (seconds, or an HTTP date). None when absent or unreadable; never negative."""
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())
