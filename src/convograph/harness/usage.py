"""Token usage summed over a run: its own model calls plus the totals of its child runs."""

from __future__ import annotations

from convograph.events import TotalUsage, Usage

__all__ = ["UsageTotals"]


class UsageTotals:
    """A running sum of ``usage`` events and child totals. O(1) per addition."""

    __slots__ = ("cache_creation", "cache_read", "input", "output")

    def __init__(self) -> None:
        self.input = 0
        self.output = 0
        self.cache_read = 0
        self.cache_creation = 0

    @property
    def tokens(self) -> int:
        """Input plus output tokens (what a token budget counts)."""
        return self.input + self.output

    def add(self, usage: Usage | TotalUsage) -> None:
        self.input += usage.input_tokens
        self.output += usage.output_tokens
        self.cache_read += usage.cache_read_tokens or 0
        self.cache_creation += usage.cache_creation_tokens or 0

    def add_total(self, total: TotalUsage) -> None:
        """Add a child run's ``totalUsage`` (rolled up into this run's)."""
        self.add(total)

    def total(self) -> TotalUsage:
        """The sum as a ``totalUsage`` value (cache fields only when non-zero)."""
        return TotalUsage(
            input_tokens=self.input,
            output_tokens=self.output,
            cache_read_tokens=self.cache_read or None,
            cache_creation_tokens=self.cache_creation or None,
        )
