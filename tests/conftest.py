"""Fixtures shared by every suite: real PostgreSQL and Redis servers.

The servers are the ones ``.ci/run`` makes sure are running (or those named by
``SYNCD_TEST_POSTGRES_DSN`` / ``SYNCD_TEST_REDIS_URL``). A test that needs one and cannot reach
it fails: it is never skipped. Each test gets its own database and its own Redis key prefix,
so no test depends on what another left behind.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import redis.asyncio as aioredis

from tests import prerequisites

POSTGRES_ADMIN_DSN = os.environ.get(
    "SYNCD_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("SYNCD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Stop at once, in one line, when the selected tests need a tool or server that is not
    there (``tests/prerequisites.py``)."""
    if session.config.option.collectonly:
        return
    tools, servers = prerequisites.needed(session.items)
    line = prerequisites.missing_line(tools, servers, POSTGRES_ADMIN_DSN, REDIS_URL)
    if line:
        pytest.exit(line, returncode=pytest.ExitCode.USAGE_ERROR)


def _dsn_for(database: str) -> str:
    base, _, _ = POSTGRES_ADMIN_DSN.rpartition("/")
    return f"{base}/{database}"


async def _create_database(name: str, template: str) -> None:
    admin = await asyncpg.connect(POSTGRES_ADMIN_DSN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await admin.close()


async def _drop_database(name: str) -> None:
    admin = await asyncpg.connect(POSTGRES_ADMIN_DSN)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def _build_template(name: str) -> None:
    from syncd.store.postgres import PostgresStore

    await _create_database(name, "template0")
    store = PostgresStore(_dsn_for(name), min_size=1, max_size=1)
    await store.open()  # every migration, once per test session
    await store.close()


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A database migrated once per test session, cloned by :func:`postgres_dsn` (cloning
    a template is much cheaper than migrating a new database in every test)."""
    name = f"syncd_tpl_{uuid.uuid4().hex[:16]}"
    asyncio.run(_build_template(name))
    try:
        yield name
    finally:
        asyncio.run(_drop_database(name))


@pytest.fixture
async def postgres_dsn(postgres_template: str) -> AsyncIterator[str]:
    """A DSN to a PostgreSQL database of this test's own, already migrated; dropped after
    the test."""
    name = f"syncd_test_{uuid.uuid4().hex[:16]}"
    await _create_database(name, postgres_template)
    try:
        yield _dsn_for(name)
    finally:
        await _drop_database(name)


@pytest.fixture
async def fresh_postgres_dsn() -> AsyncIterator[str]:
    """A DSN to a fresh, empty PostgreSQL database (for tests of the migrations themselves),
    dropped after the test."""
    name = f"syncd_test_{uuid.uuid4().hex[:16]}"
    await _create_database(name, "template0")
    try:
        yield _dsn_for(name)
    finally:
        await _drop_database(name)


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
