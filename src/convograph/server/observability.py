"""Health and metrics: ``/healthz`` and ``/metrics`` (Prometheus text exposition format 0.0.4).

`Metrics` is a handful of counters and gauges updated on the request path in O(1).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

__all__ = ["Metrics"]


class Metrics:
    """Process-wide counters; rendered on demand."""

    def __init__(self) -> None:
        self.started = time.time()
        self.events_accepted = 0
        self.events_duplicate = 0
        self.events_rejected = 0
        self.sse_events_sent = 0
        self.requests: Counter[tuple[str, int]] = Counter()
        self.gauges: dict[str, Callable[[], float]] = {}
        self.counters: dict[str, Callable[[], float]] = {}
        """Counters kept by other parts (read when rendered), by metric name."""

    def observe_request(self, method: str, status: int) -> None:
        self.requests[(method, status)] += 1

    def render(self) -> str:
        lines = [
            "# HELP convograph_events_accepted_total Events stored by conversation ingest.",
            "# TYPE convograph_events_accepted_total counter",
            f"convograph_events_accepted_total {self.events_accepted}",
            "# HELP convograph_events_duplicate_total Events skipped because their eventId was stored.",
            "# TYPE convograph_events_duplicate_total counter",
            f"convograph_events_duplicate_total {self.events_duplicate}",
            "# HELP convograph_events_rejected_total Events in batches refused as invalid.",
            "# TYPE convograph_events_rejected_total counter",
            f"convograph_events_rejected_total {self.events_rejected}",
            "# HELP convograph_sse_events_sent_total Events written to SSE subscribers.",
            "# TYPE convograph_sse_events_sent_total counter",
            f"convograph_sse_events_sent_total {self.sse_events_sent}",
            "# HELP convograph_http_requests_total HTTP requests by method and status.",
            "# TYPE convograph_http_requests_total counter",
        ]
        for (method, status), count in sorted(self.requests.items()):
            lines.append(f'convograph_http_requests_total{{method="{method}",status="{status}"}} {count}')
        lines += [
            "# HELP convograph_uptime_seconds Seconds since the server started.",
            "# TYPE convograph_uptime_seconds gauge",
            f"convograph_uptime_seconds {time.time() - self.started:.3f}",
        ]
        for name, read in sorted(self.gauges.items()):
            lines += [f"# TYPE {name} gauge", f"{name} {read()}"]
        for name, read in sorted(self.counters.items()):
            lines += [f"# TYPE {name} counter", f"{name} {read()}"]
        return "\n".join(lines) + "\n"
