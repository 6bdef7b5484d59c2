"""``GET /status`` in the shape of Amplifier's context-intelligence server (its deployment profile
waits for it before it counts the server ready; its dashboard reads it).

Upstream's keys, all present: ``status``, ``uptime_seconds``, ``active_sessions``, ``sessions``,
``recent_events``, ``completed_sessions``, ``error_count_last_hour``, ``server_version``,
``orphaned_sessions``, ``neo4j_connected``, ``neo4j_query_connected``, ``neo4j_url``,
``neo4j_browser_url``, ``metrics`` and ``auth``. The ``neo4j_*`` names are kept for drop-in
clients and describe the FalkorDB graph engine (``graph_engine`` says which).

Deliberate difference: upstream answers session ids, workspaces, event names and errors to
anyone (its spec lists it as a leak). Here the route needs no key, but ``sessions``,
``recent_events`` and ``completed_sessions`` are filled only for a caller whose key may read
(or when the server has no keys), and only with the workspaces that key may see; everyone else
gets them empty, with the aggregate counts. Everything is read from the journal: the newest
`WINDOW` records, O(`WINDOW`) per call.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from convograph.intelligence.journal import RecentRecord
from convograph.intelligence.service import IntelligenceService

__all__ = ["COMPLETED", "INACTIVE_AFTER_S", "RECENT_EVENTS", "WINDOW", "StatusContext", "build_status"]

WINDOW = 10_000
"""Newest journal records the page is built from."""
INACTIVE_AFTER_S = 1800.0
"""Sessions idle longer than this are not listed (upstream's ``status_inactive_timeout``)."""
RECENT_EVENTS = 50
COMPLETED = 100
MAX_SESSIONS = 200
"""Most sessions listed (the most recently active)."""


class StatusContext(msgspec.Struct, frozen=True, kw_only=True):
    """What the server knows that the service does not."""

    started_at: float
    """Server start, epoch seconds."""
    version: str
    auth_mode: str
    """``"static"`` (API keys) or ``"none"`` (no keys: local mode)."""
    admin_api_enabled: bool
    detail: bool
    """The caller may see sessions and events."""
    allowed_workspaces: frozenset[str] | None = None
    graph_url: str | None = None


def _seconds(ms: int) -> float:
    return ms / 1000.0


def _sessions(records: list[RecentRecord]) -> list[dict[str, Any]]:
    """Per session of the window, newest first: last event, its time, and the window's span."""
    by_session: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:  # newest first: the first record seen of a session is its newest
        key = (record.workspace, record.session_id)
        entry = by_session.get(key)
        if entry is None:
            entry = by_session[key] = {
                "session_id": record.session_id,
                "workspace": record.workspace,
                "last_event": record.event,
                "last_event_time": _seconds(record.received_ms),
                "last_seq": record.seq,
                "first_time": _seconds(record.received_ms),
                "errors": 0,
            }
        entry["first_time"] = _seconds(record.received_ms)
        entry["errors"] += record.error is not None
    return list(by_session.values())


def _visible(record: RecentRecord, allowed: frozenset[str] | None) -> bool:
    return allowed is None or record.workspace in allowed


def build_status(service: IntelligenceService | None, context: StatusContext) -> dict[str, Any]:
    """The status body. Blocking (journal reads, an engine ping): call it on a worker thread."""
    now = time.time()
    counts = service.status() if service is not None else None
    connected = service is not None and service.engine.reachable()
    records = service.journal.recent(WINDOW) if service is not None else []
    sessions = _sessions(records)
    active = [s for s in sessions if now - s["last_event_time"] <= INACTIVE_AFTER_S]
    applied = counts["applied_seq"] if counts is not None else 0
    listed: list[dict[str, Any]] = []
    completed: list[dict[str, Any]] = []
    recent: list[dict[str, Any]] = []
    if context.detail and service is not None:
        allowed = context.allowed_workspaces
        for entry in [s for s in active if allowed is None or s["workspace"] in allowed][:MAX_SESSIONS]:
            listed.append(
                {
                    "session_id": entry["session_id"],
                    "workspace": entry["workspace"],
                    "last_event": entry["last_event"],
                    "last_event_time": entry["last_event_time"],
                    "events_processed": service.journal.session_count(
                        entry["workspace"], entry["session_id"]
                    ),
                    "orphaned": False,
                    "last_successful_flush": entry["last_event_time"]
                    if entry["last_seq"] <= applied
                    else None,
                }
            )
        for entry in sessions:
            if entry["last_event"] == "session:end" and (allowed is None or entry["workspace"] in allowed):
                completed.append(
                    {
                        "session_id": entry["session_id"],
                        "workspace": entry["workspace"],
                        "started_at": entry["first_time"],
                        "ended_at": entry["last_event_time"],
                        "events_processed": service.journal.session_count(
                            entry["workspace"], entry["session_id"]
                        ),
                        "error_count": entry["errors"],
                        "duration_seconds": entry["last_event_time"] - entry["first_time"],
                    }
                )
                if len(completed) >= COMPLETED:
                    break
        recent = [
            {
                "timestamp": _seconds(r.received_ms),
                "event": r.event,
                "session_id": r.session_id,
                "workspace": r.workspace,
                "result": "error" if r.error is not None else "ok",
                "error": r.error or "",
            }
            for r in records
            if _visible(r, allowed)
        ][:RECENT_EVENTS]
    return {
        "status": "ok",
        "uptime_seconds": max(0.0, now - context.started_at),
        "active_sessions": len(active),
        "sessions": listed,
        "recent_events": recent,
        "completed_sessions": completed,
        "error_count_last_hour": service.journal.dead_letters_since(now - 3600) if service is not None else 0,
        "server_version": context.version,
        "orphaned_sessions": 0,
        "neo4j_connected": connected,
        "neo4j_query_connected": connected,
        "neo4j_url": _public_url(context.graph_url) if service is not None else None,
        "neo4j_browser_url": None,
        "graph_engine": counts["engine"] if counts is not None else None,
        "metrics": _metrics(counts),
        "auth": {"mode": context.auth_mode, "admin_api_enabled": context.admin_api_enabled},
    }


def _metrics(counts: dict[str, Any] | None) -> dict[str, Any]:
    """Upstream's conservation block from the journal positions: every accepted event is written
    (applied), still queued (the backlog) or dead-lettered, so the residual is 0 by construction."""
    if counts is None:
        counts = {"journal_seq": 0, "applied_seq": 0, "backlog": 0, "dead_letters": 0, "last_error": None}
    accepted, queued, dead = counts["journal_seq"], counts["backlog"], counts["dead_letters"]
    written = max(0, accepted - queued - dead)
    return {
        "accepted_total": accepted,
        "written_total": written,
        "replayed_total": 0,
        "write_retries_total": 0,
        "in_queue_total": queued,
        "dead_letter_total": dead,
        "residual": accepted - written - queued - dead,
        "degraded": dead > 0 or counts["last_error"] is not None,
    }


def _public_url(url: str | None) -> str:
    """The graph URL without its password (``embedded`` for the embedded engine); each URL of a
    comma-separated list of servers."""
    if url is None:
        return "embedded"
    from urllib.parse import urlsplit, urlunsplit

    shown = []
    for each in url.split(","):
        parts = urlsplit(each.strip())
        if parts.password is None:
            shown.append(each.strip())
            continue
        host = parts.hostname or ""
        netloc = f"{parts.username}:***@{host}" if parts.username else f"***@{host}"
        if parts.port is not None:
            netloc += f":{parts.port}"
        shown.append(urlunsplit(parts._replace(netloc=netloc)))
    return ",".join(shown)
