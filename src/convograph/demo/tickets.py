"""The RLM demo's context: 1,200 support tickets, generated deterministically (no randomness between
runs, no data file): ``{"id", "subject", "body", "createdAt", "resolvedAt"}`` (``resolvedAt`` is
None for open tickets). Some ask for a refund in so many words; nine ask for their money back
without saying refund (``IMPLICIT_REFUNDS``), which the demo's model finds with ``llm_query``.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any, Final

__all__ = ["IMPLICIT_REFUNDS", "tickets"]

COUNT: Final = 1200
IMPLICIT_REFUNDS: Final = tuple(f"T-{10001 + i}" for i in range(5, COUNT, 133))
_START: Final = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
_TOPICS: Final = (
    ("Cannot log in", "The login page keeps saying my password is wrong after the reset."),
    ("Export is slow", "Exporting the monthly report takes more than ten minutes."),
    ("Charged twice for March", "I was charged twice this month, please refund the second payment."),
    ("Invoice address", "Please change the billing address on our invoices."),
    ("Feature request: dark mode", "Would love a dark mode for the dashboard."),
    ("Cancel my plan", "We are moving to another tool; please cancel and refund the unused months."),
    ("API rate limit", "We hit the API rate limit during our nightly sync."),
    ("Wrong VAT on invoice", "The invoice shows the wrong VAT rate for Germany."),
)
_IMPLICIT: Final = "I was charged for a plan we never used; please return what you charged us."


def tickets() -> list[dict[str, Any]]:
    """The 1,200 tickets (a fresh list on every call)."""
    rng = random.Random(1200)
    out: list[dict[str, Any]] = []
    for i in range(COUNT):
        ticket_id = f"T-{10001 + i}"
        subject, body = _TOPICS[rng.randrange(len(_TOPICS))]
        if ticket_id in IMPLICIT_REFUNDS:
            subject, body = "Billing question", _IMPLICIT
        created = _START + timedelta(minutes=37 * i + rng.randrange(30))
        open_ticket = rng.random() < 0.06
        resolved = None if open_ticket else created + timedelta(hours=rng.choice((2, 5, 9, 20, 30, 52, 75)))
        out.append(
            {
                "id": ticket_id,
                "subject": subject,
                "body": body,
                "createdAt": created.isoformat(),
                "resolvedAt": resolved.isoformat() if resolved else None,
            }
        )
    return out
