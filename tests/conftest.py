"""Shared service fixtures: real PostgreSQL and Redis on 127.0.0.1.

Each test gets its own Postgres database and its own Redis key prefix, removed afterwards. When a
service does not answer, the test is skipped locally, but FAILS when ``CI=true`` (a missing service
in CI is a broken pipeline, not a reason to pass). Run ``scripts/ensure-services`` to start them.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from tests.support.redis_cluster import LocalRedisCluster

# No timed assertions in tests: hypothesis's default 200 ms deadline and its too-slow health check
# measure the machine, not the code (this suite runs on shared 2-core machines), so both are off
# for every property test; a failure prints the blob that reproduces it.
settings.register_profile(
    "convograph", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("convograph")

PG_HOST = os.environ.get("CONVOGRAPH_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("CONVOGRAPH_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("CONVOGRAPH_TEST_PG_USER", "postgres")
REDIS_HOST = os.environ.get("CONVOGRAPH_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("CONVOGRAPH_TEST_REDIS_PORT", "6379"))


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip (locally) or fail (``CI=true``) when ``host:port`` does not answer."""
    if _answers(host, port):
        return
    message = f"{name} is not reachable on {host}:{port} (run scripts/ensure-services)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def pg_admin_url() -> str:
    return f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/postgres"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """URL of a fresh, empty database, dropped after the test."""
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    import psycopg

    name = f"convograph_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        with psycopg.connect(pg_admin_url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_url() -> str:
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/0"


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A unique key prefix; every key under it is deleted after the test."""
    import redis

    prefix = f"cgtest-{uuid.uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalRedisCluster]:
    """A local 3-master Redis Cluster for the whole session (free ports, no persistence), torn down
    after. Skipped locally / failed in CI when ``redis-server`` is missing."""
    import shutil

    from tests.support.redis_cluster import LocalRedisCluster

    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        message = "redis-server / redis-cli are not installed (run scripts/ensure-services)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    cluster = LocalRedisCluster(masters=3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_cluster_url(redis_cluster: LocalRedisCluster) -> str:
    """``redis+cluster://`` seed URL of the session's cluster (tests keep apart by a unique prefix)."""
    return redis_cluster.url
