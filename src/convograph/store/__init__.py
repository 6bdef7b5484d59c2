"""Durable event logs: one `EventLog` protocol, several backends, resumable live tails.

Backends: `MemoryEventLog` (``memory://``), `SQLiteEventLog` (``sqlite:///``, the embedded default),
`PostgresEventLog` (``postgresql://``), `RedisEventLog` (``redis://``, in-flight streams finalised into
Postgres; on a Redis Cluster `RedisClusterEventLog`, ``redis+cluster://``). `open_event_log(url)` picks one by URL. Snapshots and rebuild: `convograph.store.snapshots`.
"""

from convograph.store.base import (
    CONVERSATION_ID_PATTERN,
    MAX_SEQ,
    AppendResult,
    BackendUnavailable,
    ConversationInfo,
    EventLog,
    EventsExpired,
    InvalidConversationId,
    Snapshot,
    StoredEvent,
    StoreError,
    validate_conversation_id,
)
from convograph.store.memory import MemoryEventLog
from convograph.store.status import RunTally, fold_status
from convograph.store.url import DATA_DIR_ENV, DATABASE_URL_ENV, default_url, open_event_log

__all__ = [
    "CONVERSATION_ID_PATTERN",
    "DATABASE_URL_ENV",
    "DATA_DIR_ENV",
    "MAX_SEQ",
    "AppendResult",
    "BackendUnavailable",
    "ConversationInfo",
    "EventLog",
    "EventsExpired",
    "InvalidConversationId",
    "MemoryEventLog",
    "RunTally",
    "Snapshot",
    "StoreError",
    "StoredEvent",
    "default_url",
    "fold_status",
    "open_event_log",
    "validate_conversation_id",
]
