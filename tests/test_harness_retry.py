"""Retry delays and Retry-After parsing."""

from __future__ import annotations

import email.utils

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convograph.harness.retry import RetryPolicy, Timeouts, retry_after_seconds


@given(attempt=st.integers(1, 30), rand=st.floats(0, 1))
def test_backoff_grows_and_stays_within_its_cap(attempt: int, rand: float) -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=30.0, jitter=0.25)
    delay = policy.delay(attempt, None, rand=lambda: rand)
    ceiling = min(30.0, 0.5 * 2 ** (attempt - 1))
    assert 0.75 * ceiling <= delay <= ceiling


@given(wait=st.floats(0, 120), rand=st.floats(0, 1))
def test_a_server_wait_is_honoured_at_least(wait: float, rand: float) -> None:
    delay = RetryPolicy().delay(3, wait, rand=lambda: rand)
    assert wait <= delay <= wait + 0.25


def test_retry_after_headers() -> None:
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_seconds({"retry-after": date}, now=lambda: now) == 30.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({"retry-after": "-4"}) == 0.0
    assert retry_after_seconds({}) is None
    assert retry_after_seconds(None) is None


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=2)
    with pytest.raises(ValueError, match="timeout idle"):
        Timeouts(idle=0)
