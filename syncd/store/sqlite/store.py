"""The SQLite store: its database (:mod:`syncd.store.sqlite.connection`: one writer in WAL mode,
read connections, migrations and the translation of driver errors) and the four parts of the
protocol built on it — the connectors (:mod:`~syncd.store.sqlite.connectors`), a running
crawl's writes and the runs' history (:mod:`~syncd.store.sqlite.runs`), the documents
(:mod:`~syncd.store.sqlite.documents`) and the instances
(:mod:`~syncd.store.sqlite.instances`). Every statement lives in
:mod:`syncd.store.sqlite.sql`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote

from syncd.errors import ConfigError
from syncd.store.composite import CompositeStore
from syncd.store.sqlite import sql
from syncd.store.sqlite.connection import SQLiteDatabase
from syncd.store.sqlite.connectors import SQLiteConnectors
from syncd.store.sqlite.documents import SQLiteDocuments
from syncd.store.sqlite.instances import SQLiteInstances
from syncd.store.sqlite.runs import SQLiteRuns

__all__ = ["SQLiteStore"]


class SQLiteStore(CompositeStore):
    """:class:`syncd.store.Store` on a SQLite file.

    ``path`` is a file path (its parent directory is created) or ``":memory:"``.
    ``busy_timeout`` is how many seconds a write waits for another process's write lock.
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = 10.0) -> None:
        self._db = SQLiteDatabase(path, busy_timeout=busy_timeout)
        super().__init__(
            connectors=SQLiteConnectors(self._db),
            runs=SQLiteRuns(self._db),
            documents=SQLiteDocuments(self._db),
            instances=SQLiteInstances(self._db),
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteStore:
        """Build a store from ``sqlite:///relative/path.db`` (relative to the working
        directory), ``sqlite:////absolute/path.db`` or ``sqlite:///:memory:``."""
        prefix = "sqlite:///"
        if not url.startswith(prefix) or len(url) == len(prefix) or "?" in url:
            raise ConfigError(
                "store.url",
                f"expected sqlite:///relative/path.db or sqlite:////absolute/path.db, got {url!r}",
            )
        return cls(unquote(url[len(prefix) :]), **options)

    @property
    def path(self) -> str | Path:
        """The database file (or ``":memory:"``)."""
        return self._db.path

    async def open(self) -> None:
        """Connect, configure the connection and apply pending migrations (idempotent)."""
        await self._db.open()

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        await self._db.close()

    async def ping(self) -> None:
        """Raise :class:`StoreError` unless the database answers."""
        await self._db.fetch_all(sql.PING)
