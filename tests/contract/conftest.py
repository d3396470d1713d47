"""The ``store`` fixture: every contract test runs once per store backend. For the
PostgreSQL-only modules: ``postgres_store`` and ``admin`` (a plain connection beside it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from syncd.store.base import Store
from syncd.store.postgres import PostgresStore

STORES = ["sqlite", "postgres"]


@pytest.fixture(params=STORES)
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """An unopened store of the parametrised backend, on its own fresh database."""
    if request.param == "sqlite":
        from syncd.store.sqlite import SQLiteStore

        return SQLiteStore(tmp_path / "syncd.db")
    # Requested only here, so the SQLite cases never need a PostgreSQL server.
    dsn: str = request.getfixturevalue("postgres_dsn")
    from syncd.store.postgres import PostgresStore

    return PostgresStore(dsn)


@pytest.fixture
async def store(store_backend: Store) -> AsyncIterator[Store]:
    """The parametrised store, opened (migrated) for the test and closed after it."""
    await store_backend.open()
    try:
        yield store_backend
    finally:
        await store_backend.close()


@pytest.fixture
async def postgres_store(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    """A PostgreSQL store on its own fresh database, opened for the test."""
    s = PostgresStore(postgres_dsn)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def admin(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection[asyncpg.Record]]:
    """A plain connection to the store's database, to look at or lock rows beside it."""
    conn: asyncpg.Connection[asyncpg.Record] = await asyncpg.connect(postgres_dsn)
    try:
        yield conn
    finally:
        await conn.close()
