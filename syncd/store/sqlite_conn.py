"""The SQLite plumbing under :class:`~syncd.store.sqlite.SQLiteStore`: one aiosqlite
connection in WAL mode, its migrations, and a handful of verbs over the named statements of
:mod:`syncd.store.sqlite_sql`.

Statements of this process are serialised by an ``asyncio.Lock``; a transaction takes the
database's write lock up front (``BEGIN IMMEDIATE``), so a read-modify-write is atomic even
when another process (a restarted daemon while the old one is still exiting) opens the same
file. Such a second writer waits up to ``busy_timeout`` seconds for the lock. Driver errors
become :class:`~syncd.errors.StoreError` (or :class:`~syncd.errors.NameConflict`) here and
nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from syncd.errors import NameConflict, StoreError
from syncd.store import sqlite_sql as sql

__all__ = ["SQLiteDatabase", "SQLiteSession"]

_MEMORY = ":memory:"


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """Driver errors become syncd's own; everything else passes through unchanged."""
    try:
        yield
    except sqlite3.IntegrityError as exc:
        if "connectors.name" in str(exc):
            raise NameConflict("Connector name already exists") from exc
        raise StoreError(f"SQLite integrity error: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"SQLite error: {exc}") from exc


async def _rollback(db: aiosqlite.Connection) -> None:
    # Queued behind whatever the connection's thread is still running (a statement whose
    # awaiting task was cancelled), so it always sees the real transaction state; a no-op
    # when no transaction is open.
    with contextlib.suppress(sqlite3.Error):
        # A failed rollback must not hide the error that caused it.
        await db.rollback()


class SQLiteSession:
    """The verbs on the store's connection, held under its lock: inside a transaction
    (:meth:`SQLiteDatabase.transaction`) or for one autocommit statement. Parameters are
    positional (``?``) or, as keywords, named (``:name``)."""

    __slots__ = ("_db",)

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def fetch_all(self, query: str, *args: Any, **named: Any) -> list[sqlite3.Row]:
        """Every row."""
        return list(await self._db.execute_fetchall(query, named or args))

    async def fetch_one(self, query: str, *args: Any, **named: Any) -> sqlite3.Row | None:
        """The first row, or ``None``."""
        rows = await self.fetch_all(query, *args, **named)
        return rows[0] if rows else None

    async def fetch_value(self, query: str, *args: Any, **named: Any) -> Any:
        """The first column of the first row (``None`` without a row)."""
        row = await self.fetch_one(query, *args, **named)
        return None if row is None else row[0]

    async def execute(self, query: str, *args: Any, **named: Any) -> int:
        """Run a statement; the number of rows it wrote."""
        cursor = await self._db.execute(query, named or args)
        return cursor.rowcount

    async def executemany(self, query: str, rows: Iterable[Sequence[Any]]) -> int:
        """Run a statement once per parameter row; the number of rows written in all."""
        cursor = await self._db.executemany(query, rows)
        return cursor.rowcount


class SQLiteDatabase:
    """One SQLite file (or ``":memory:"``) with the verbs of :class:`SQLiteSession`, each a
    statement of its own in autocommit, and :meth:`transaction` for several in one."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 10.0) -> None:
        self.path = path if str(path) == _MEMORY else Path(path)
        """The database file (or ``":memory:"``)."""
        self._busy_timeout = busy_timeout
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, configure the connection and apply pending migrations (idempotent)."""
        async with self._lock:
            if self._db is None:
                self._db = await self._connect()

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        db, self._db = self._db, None
        if db is not None:
            async with self._lock:
                with _translated():
                    await db.close()

    async def _connect(self) -> aiosqlite.Connection:
        if isinstance(self.path, Path):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create {self.path.parent}: {exc}") from exc
        with _translated():
            # isolation_level=None: the store issues BEGIN itself, sqlite3 never does.
            db = await aiosqlite.connect(
                self.path, timeout=self._busy_timeout, isolation_level=None
            )
            try:
                db.row_factory = sqlite3.Row
                await self._enable_wal(db)
                for pragma in sql.PRAGMAS_PER_CONNECTION:
                    await db.execute(pragma)
                await _migrate(db)
            except BaseException:
                await db.close()
                raise
        return db

    async def _enable_wal(self, db: aiosqlite.Connection) -> None:
        # Switching a new file to WAL needs an exclusive lock and SQLite does not wait for
        # it through the busy handler: when several processes open a new file at once, the
        # losers retry until busy_timeout.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._busy_timeout
        delay = 0.002
        while True:
            try:
                await db.execute(sql.JOURNAL_MODE_WAL)
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or loop.time() >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _connection(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("the SQLite store is not open")
        return self._db

    # --- verbs ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _autocommit(self) -> AsyncIterator[SQLiteSession]:
        async with self._lock:
            db = self._connection()
            with _translated():
                yield SQLiteSession(db)

    async def fetch_all(self, query: str, *args: Any, **named: Any) -> list[sqlite3.Row]:
        """Every row."""
        async with self._autocommit() as s:
            return await s.fetch_all(query, *args, **named)

    async def fetch_one(self, query: str, *args: Any, **named: Any) -> sqlite3.Row | None:
        """The first row, or ``None``."""
        async with self._autocommit() as s:
            return await s.fetch_one(query, *args, **named)

    async def fetch_value(self, query: str, *args: Any, **named: Any) -> Any:
        """The first column of the first row (``None`` without a row)."""
        async with self._autocommit() as s:
            return await s.fetch_value(query, *args, **named)

    async def execute(self, query: str, *args: Any, **named: Any) -> int:
        """Run one statement (atomic on its own); the number of rows it wrote."""
        async with self._autocommit() as s:
            return await s.execute(query, *args, **named)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[SQLiteSession]:
        """A write transaction: committed on success, rolled back on any exception."""
        async with self._lock:
            db = self._connection()
            with _translated():
                try:
                    # Inside the try: a cancelled BEGIN still runs on the connection's
                    # thread, so it must be rolled back too.
                    await db.execute(sql.BEGIN_IMMEDIATE)
                    yield SQLiteSession(db)
                    await db.commit()
                except BaseException:
                    await _rollback(db)
                    raise


async def _migrate(db: aiosqlite.Connection) -> None:
    # Under the write lock, so that two processes opening a new file migrate it once.
    try:
        await db.execute(sql.BEGIN_IMMEDIATE)
        rows = list(await db.execute_fetchall(sql.GET_USER_VERSION))
        current = int(rows[0][0])
        for step in sql.MIGRATIONS:
            if step.version > current:
                for statement in step.statements:
                    await db.execute(statement)
                await db.execute(sql.set_user_version(step.version))
        await db.commit()
    except BaseException:
        await _rollback(db)
        raise
