"""Fixtures shared by every suite: real PostgreSQL and Redis servers.

The servers are the ones ``.ci/run`` makes sure are running (or those named by
``SYNCD_TEST_POSTGRES_DSN`` / ``SYNCD_TEST_REDIS_URL``). A test that needs one and cannot reach
it fails: it is never skipped. Each test gets its own database and its own Redis key prefix,
so no test depends on what another left behind.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
import redis.asyncio as aioredis

POSTGRES_ADMIN_DSN = os.environ.get(
    "SYNCD_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("SYNCD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _dsn_for(database: str) -> str:
    base, _, _ = POSTGRES_ADMIN_DSN.rpartition("/")
    return f"{base}/{database}"


@pytest.fixture
async def postgres_dsn() -> AsyncIterator[str]:
    """A DSN to a fresh, empty PostgreSQL database, dropped after the test."""
    name = f"syncd_test_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(POSTGRES_ADMIN_DSN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    finally:
        await admin.close()
    try:
        yield _dsn_for(name)
    finally:
        admin = await asyncpg.connect(POSTGRES_ADMIN_DSN)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture
def redis_url() -> str:
    """The Redis server's URL (tests isolate themselves with ``redis_prefix``)."""
    return REDIS_URL


@pytest.fixture
async def redis_prefix(redis_url: str) -> AsyncIterator[str]:
    """A key prefix of this test's own; its keys are deleted after the test."""
    prefix = f"syncd-test-{uuid.uuid4().hex[:12]}"
    yield prefix
    client = aioredis.Redis.from_url(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
