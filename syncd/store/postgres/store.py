"""The PostgreSQL store: its database (:mod:`syncd.store.postgres.connection`: the asyncpg
pools, the migrations and the translation of driver errors) and the four parts of the protocol
built on it — the connectors (:mod:`~syncd.store.postgres.connectors`), a running crawl's
writes and the runs' history (:mod:`~syncd.store.postgres.runs`), the documents
(:mod:`~syncd.store.postgres.documents`) and the instances
(:mod:`~syncd.store.postgres.instances`). Every statement lives in
:mod:`syncd.store.postgres.sql`.
"""

from __future__ import annotations

from syncd.store.composite import CompositeStore
from syncd.store.postgres import sql
from syncd.store.postgres.connection import PostgresDatabase
from syncd.store.postgres.connectors import PostgresConnectors
from syncd.store.postgres.documents import PostgresDocuments
from syncd.store.postgres.instances import PostgresInstances
from syncd.store.postgres.runs import PostgresRuns

__all__ = ["PostgresStore"]


class PostgresStore(CompositeStore):
    """The :class:`~syncd.store.base.Store` on PostgreSQL, through an asyncpg pool.

    The options are those of :class:`~syncd.store.postgres.connection.PostgresDatabase`:
    ``statement_cache_size=0`` for a transaction-mode pooler, and the session's
    ``statement_timeout``, ``lock_timeout`` and ``idle_in_transaction_session_timeout`` in
    seconds (``0`` disables one, ``None`` leaves the server's value alone).
    """

    def __init__(
        self,
        dsn: str,
        *,
        statement_cache_size: int | None = None,
        min_size: int = 1,
        max_size: int = 10,
        statement_timeout: float | None = 30.0,
        lock_timeout: float | None = 10.0,
        idle_in_transaction_timeout: float | None = 60.0,
        connect_timeout: float = 10.0,
        application_name: str = "syncd",
    ) -> None:
        self._db = PostgresDatabase(
            dsn,
            statement_cache_size=statement_cache_size,
            min_size=min_size,
            max_size=max_size,
            statement_timeout=statement_timeout,
            lock_timeout=lock_timeout,
            idle_in_transaction_timeout=idle_in_transaction_timeout,
            connect_timeout=connect_timeout,
            application_name=application_name,
        )
        super().__init__(
            connectors=PostgresConnectors(self._db),
            runs=PostgresRuns(self._db),
            documents=PostgresDocuments(self._db),
            instances=PostgresInstances(self._db),
        )

    def __repr__(self) -> str:
        return f"PostgresStore({self._db.target!r})"

    async def open(self) -> None:
        """Create the pool and apply pending migrations under an advisory lock."""
        await self._db.open()

    async def close(self) -> None:
        """Close the pool: wait a while for connections in use, then cut them."""
        await self._db.close()

    async def ping(self) -> None:
        """Raise :class:`StoreError` unless PostgreSQL answers."""
        await self._db.fetch_value(sql.PING)
