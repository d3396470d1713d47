"""The ``store`` fixture: every contract test runs once per store backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from syncd.store.base import Store

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
