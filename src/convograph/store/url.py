"""`open_event_log(url)`: pick and open a backend from a URL (or the environment).

| URL | Backend |
| --- | --- |
| ``memory://`` | `MemoryEventLog` |
| ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` | `SQLiteEventLog` (``?synchronous=full|normal``) |
| ``postgresql://user@host:port/db`` | `PostgresEventLog` (``?pool_max=``, ``?connect_timeout=`` seconds) |
| ``redis://host:port/0?finalize=postgresql://...`` | `RedisEventLog` (``?maxlen=``, ``?ttl=``, ``?finalized_ttl=``, ``?prefix=``) |
| ``redis+cluster://host:port,host:port?...`` | `RedisClusterEventLog` (a Redis Cluster; the same options) |

Any server backend also takes ``?spool=/path/spool.db``: appends made while it is unreachable go to
that local file and drain when it returns (`convograph.store.spool`). Options not in the table are
an error, so a typo never silently changes behaviour.

Environment: ``CONVOGRAPH_DATABASE_URL`` (the URL when none is given) and ``CONVOGRAPH_DATA_DIR``
(where the default ``events.db`` lives; default ``./.convograph``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from convograph.store.base import EventLog

if TYPE_CHECKING:
    from convograph.store.postgres import PostgresEventLog

_REDIS_SCHEMES: Final = ("redis", "rediss", "redis+cluster", "rediss+cluster")
_SCHEMES_HINT: Final = "expected memory://, sqlite:///, postgresql://, redis:// or redis+cluster://"

__all__ = [
    "DATABASE_URL_ENV",
    "DATA_DIR_ENV",
    "check_event_log_url",
    "default_url",
    "open_event_log",
    "redis_presence_url",
    "shared_postgres",
]

DATABASE_URL_ENV: Final = "CONVOGRAPH_DATABASE_URL"
DATA_DIR_ENV: Final = "CONVOGRAPH_DATA_DIR"


def default_url(data_dir: str | os.PathLike[str] | None = None) -> str:
    """``$CONVOGRAPH_DATABASE_URL``, else SQLite at ``<data_dir>/events.db``."""
    env = os.environ.get(DATABASE_URL_ENV)
    if env:
        return env
    base = Path(data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV, ".convograph"))
    return f"sqlite:///{base.resolve() / 'events.db'}"


def _split(url: str) -> tuple[str, dict[str, str], str]:
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    bare = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return parts.scheme.lower(), options, bare


def _take(options: dict[str, str], name: str, kind: type[int] | type[float]) -> int | float | None:
    raw = options.pop(name, None)
    if raw is None:
        return None
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"event log URL option {name}={raw!r} is not a valid {kind.__name__}") from None


def _reject_unknown(scheme: str, options: dict[str, str]) -> None:
    if options:
        raise ValueError(f"unknown {scheme} event log URL option(s): {', '.join(sorted(options))}")


def _postgres_settings(url: str) -> tuple[str, int, float]:
    """``(conninfo, pool_max, connect_timeout)`` of a postgresql:// URL; other options go to libpq,
    which must know them (ValueError naming the one it does not)."""
    import psycopg.conninfo

    _, options, bare = _split(url)
    options.pop("spool", None)
    pool_max = _take(options, "pool_max", int)
    timeout = _take(options, "connect_timeout", float)
    conninfo = urlunsplit(("postgresql", *urlsplit(bare)[1:3], urlencode(options), ""))
    try:
        psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        raise ValueError(f"postgres event log URL: {str(exc).strip()}") from None
    return conninfo, int(pool_max or 8), float(timeout or 5.0)


def _redis_settings(scheme: str, options: dict[str, str], bare: str) -> dict[str, Any]:
    """The `RedisEventLog.open` keywords a redis:// or redis+cluster:// URL's options name (all of
    them consumed, unknown ones refused); ValueError naming a bad one. No I/O."""
    finalize_url = options.pop("finalize", None)
    maxlen = _take(options, "maxlen", int)
    ttl = _take(options, "ttl", float)
    finalized_ttl = _take(options, "finalized_ttl", float)
    prefix = options.pop("prefix", "convograph")
    _reject_unknown(scheme.split("+", 1)[0], options)
    if finalize_url:
        if not finalize_url.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"redis finalize= must be a postgresql:// URL, got {finalize_url!r}")
        _postgres_settings(finalize_url)
    if scheme.endswith("+cluster"):
        from convograph.store.redis_cluster import check_cluster_prefix, parse_cluster_url

        parse_cluster_url(bare)
        check_cluster_prefix(prefix)
    return {
        "finalize": finalize_url,
        "maxlen": int(maxlen or 100_000),
        "ttl": float(ttl or 86_400.0),
        "finalized_ttl": float(finalized_ttl or 600.0),
        "prefix": prefix,
    }


async def _open_redis(scheme: str, options: dict[str, str], bare: str, *, lazy: bool) -> EventLog:
    from convograph.store.redis import RedisEventLog
    from convograph.store.redis_cluster import RedisClusterEventLog

    settings = _redis_settings(scheme, options, bare)
    finalize_url = settings.pop("finalize")
    # Lazy: finalisation retries until Postgres answers, so it need not be up at start.
    archive = await _open_postgres(finalize_url, lazy=True) if finalize_url else None
    if scheme.endswith("+cluster"):
        return await RedisClusterEventLog.open_cluster(bare, archive=archive, lazy=lazy, **settings)
    return await RedisEventLog.open(bare, archive=archive, lazy=lazy, **settings)


def shared_postgres(url: str | None) -> str | None:
    """The libpq conninfo of the PostgreSQL database an event log URL names (``postgresql://``,
    or the ``finalize=`` archive of a ``redis://`` / ``redis+cluster://`` log), else None: where state that every
    instance of a deployment shares (the context-intelligence journal, blobs, API keys) lives."""
    if not url:
        return None
    scheme, options, _ = _split(url)
    if scheme in ("postgresql", "postgres"):
        return _postgres_settings(url)[0]
    finalize_url = options.get("finalize") if scheme in _REDIS_SCHEMES else None
    if finalize_url and finalize_url.startswith(("postgresql://", "postgres://")):
        return _postgres_settings(finalize_url)[0]
    return None


def redis_presence_url(url: str | None) -> tuple[str, str] | None:
    """``(redis URL, key prefix)`` of a log on one Redis (``redis://`` or ``rediss://``), for state
    the instances on it share (attached agents, `convograph.server.presence_share`); None for any
    other log, a Redis Cluster included. No I/O."""
    if not url:
        return None
    scheme, options, bare = _split(url)
    if scheme not in ("redis", "rediss"):
        return None
    return bare, options.get("prefix", "convograph") + ":"


async def _open_postgres(url: str, *, lazy: bool) -> PostgresEventLog:
    from convograph.store.postgres import PostgresEventLog

    conninfo, pool_max, timeout = _postgres_settings(url)
    return await PostgresEventLog.open(conninfo, pool_max=pool_max, connect_timeout=timeout, lazy=lazy)


def check_event_log_url(url: str) -> None:
    """Raise ValueError naming the problem when `open_event_log` would refuse ``url`` before
    connecting (scheme, options, a missing sqlite path). No I/O: for validating a setting up front."""
    scheme, options, bare = _split(url)
    spool = options.pop("spool", None)
    if scheme == "memory":
        _reject_unknown(scheme, options)
    elif scheme == "sqlite":
        sync = options.pop("synchronous", "full").upper()
        if sync not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(f"sqlite synchronous must be full, normal or extra, got {sync.lower()!r}")
        _reject_unknown(scheme, options)
        if not url.startswith("sqlite:///") or not url.split("?", 1)[0][len("sqlite:///") :]:
            raise ValueError(
                f"sqlite URL needs a path: sqlite:///relative.db or sqlite:////abs.db, got {url!r}"
            )
    elif scheme in ("postgresql", "postgres"):
        _postgres_settings(url)
    elif scheme in _REDIS_SCHEMES:
        _redis_settings(scheme, options, bare)
    else:
        raise ValueError(f"unsupported event log URL scheme {scheme!r} in {url!r}; {_SCHEMES_HINT}")
    if spool and scheme in ("memory", "sqlite"):
        raise ValueError("spool= only applies to server backends (postgresql://, redis://)")


async def open_event_log(
    url: str | None = None, *, data_dir: str | os.PathLike[str] | None = None
) -> EventLog:
    """Open the event log ``url`` names (default: `default_url`). Raises ValueError on a bad URL."""
    url = url or default_url(data_dir)
    scheme, options, bare = _split(url)
    spool = options.pop("spool", None)
    log: EventLog
    if scheme == "memory":
        _reject_unknown(scheme, options)
        from convograph.store.memory import MemoryEventLog

        log = MemoryEventLog()
    elif scheme == "sqlite":
        from convograph.store.sqlite import SQLiteEventLog

        sync = options.pop("synchronous", "full").upper()
        if sync not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(f"sqlite synchronous must be full, normal or extra, got {sync.lower()!r}")
        _reject_unknown(scheme, options)
        path = url.split("?", 1)[0][len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not path:
            raise ValueError(
                f"sqlite URL needs a path: sqlite:///relative.db or sqlite:////abs.db, got {url!r}"
            )
        log = await SQLiteEventLog.open(path, synchronous=sync)  # type: ignore[arg-type]
    elif scheme in ("postgresql", "postgres"):
        log = await _open_postgres(url, lazy=bool(spool))
    elif scheme in _REDIS_SCHEMES:
        log = await _open_redis(scheme, options, bare, lazy=bool(spool))
    else:
        raise ValueError(f"unsupported event log URL scheme {scheme!r} in {url!r}; {_SCHEMES_HINT}")
    if spool:
        if scheme in ("memory", "sqlite"):
            raise ValueError("spool= only applies to server backends (postgresql://, redis://)")
        from convograph.store.spool import SpoolingEventLog

        log = await SpoolingEventLog.open(log, spool)
    return log
