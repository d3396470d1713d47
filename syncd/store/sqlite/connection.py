"""The SQLite plumbing under :class:`~syncd.store.sqlite.SQLiteStore`: aiosqlite connections
in WAL mode, the migrations of :mod:`syncd.store.sqlite.migrations` applied when it opens,
and a handful of verbs over the named statements of :mod:`syncd.store.sqlite.sql`.

One connection writes, on a thread of its own (:class:`~syncd.store.sqlite.writer.Writer`).
Writes are handed to it under an ``asyncio.Lock``: a statement, or a whole transaction
(:meth:`SQLiteDatabase.run_transaction`), is queued on the thread in one trip and awaited
after the lock is released, so the next write is queued while this one runs; a transaction
of several trips (:meth:`SQLiteDatabase.transaction`) holds the lock throughout. A transaction
takes the database's write lock up front (``BEGIN IMMEDIATE``), so a read-modify-write is
atomic even when another process (a restarted daemon while the old one is still exiting) opens
the same file. Such a second writer waits up to ``busy_timeout`` seconds for the lock.

Reads that need no transaction (the API's, the metrics') go to :attr:`SQLiteDatabase.reader`:
a few read-only connections of their own, so that they never queue behind a page commit or a
WAL checkpoint on the writer. A WAL reader sees every transaction committed before its
statement started. A ``":memory:"`` database exists only on its one connection, so there the
reader is the writer.

The API's reads bounded by a key or a small limit (a connector by id, a page of connectors,
with their counts) go to
:attr:`SQLiteDatabase.quick`: one more read-only connection, used synchronously on the event
loop's thread. Such a read takes tens of µs; handing it to a connection's thread costs more,
and while other threads run Python (the writer binding a page of documents) a thread gets the
GIL only every few ms, so under a sync's load a handed-over read waited hundreds of ms. A WAL
reader does not wait for the writer; in the rare case the database is busy for a reader
(a checkpoint resetting the WAL) the read goes to :attr:`SQLiteDatabase.reader` instead of
waiting on the loop.

Driver errors become :class:`~syncd.errors.StoreError` (or :class:`~syncd.errors.NameConflict`)
here and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from syncd.errors import NameConflict, StoreError, StoreUnavailable
from syncd.store.sqlite import migrations as schema
from syncd.store.sqlite import sql
from syncd.store.sqlite.writer import Writer, changed_rows, fetch_rows

__all__ = ["SQLiteDatabase", "SQLiteQuickReader", "SQLiteReader", "SQLiteSession"]

T = TypeVar("T")

_MEMORY = ":memory:"
#: Read connections of a file database: a long read (a count over many documents) leaves
#: another free for the next request.
READERS = 2
# A read connection's page cache is dropped whenever the writer commits (WAL), so a large one
# buys nothing; the writer keeps the large cache of PRAGMAS_PER_CONNECTION.
_READER_PRAGMAS = ("PRAGMA query_only = ON", "PRAGMA cache_size = -8192")


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
        raise _store_error(exc) from exc


async def _rollback(db: Writer) -> None:
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

    def __init__(self, db: aiosqlite.Connection | Writer) -> None:
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


class SQLiteReader:
    """The read verbs of :class:`SQLiteSession` on the database's read connections: each
    statement on a free one, in autocommit, seeing every transaction committed before it
    started. Only for reads that need no transaction with a write."""

    __slots__ = ("_database",)

    def __init__(self, database: SQLiteDatabase) -> None:
        self._database = database

    async def fetch_all(self, query: str, *args: Any, **named: Any) -> list[sqlite3.Row]:
        """Every row."""
        async with self._database.read() as s:
            return await s.fetch_all(query, *args, **named)

    async def fetch_one(self, query: str, *args: Any, **named: Any) -> sqlite3.Row | None:
        """The first row, or ``None``."""
        async with self._database.read() as s:
            return await s.fetch_one(query, *args, **named)

    async def fetch_value(self, query: str, *args: Any, **named: Any) -> Any:
        """The first column of the first row (``None`` without a row)."""
        async with self._database.read() as s:
            return await s.fetch_value(query, *args, **named)


class SQLiteQuickReader:
    """Reads bounded by a key or a small limit, run at once on the event loop's thread (see
    the module's docstring) on the connection it is given (:meth:`attach`); ``fallback``, the
    threaded :class:`SQLiteReader`, when the database is busy for a reader, or without a
    connection (closed, or ``":memory:"``)."""

    __slots__ = ("_connection", "_fallback")

    def __init__(self, fallback: SQLiteReader) -> None:
        self._fallback = fallback
        self._connection: sqlite3.Connection | None = None

    def attach(self, connection: sqlite3.Connection | None) -> sqlite3.Connection | None:
        """Read on ``connection`` from now on (``None``: every read goes to the fallback);
        the connection it read on before, for the caller to close."""
        previous, self._connection = self._connection, connection
        return previous

    async def fetch_all(self, query: str, *args: Any, **named: Any) -> list[sqlite3.Row]:
        """Every row."""
        db = self._connection
        if db is not None:
            try:
                return db.execute(query, named or args).fetchall()
            except sqlite3.OperationalError as exc:
                # Extended codes too (SQLITE_BUSY_RECOVERY, _BUSY_SNAPSHOT, ...): the primary
                # code is the low byte.
                if exc.sqlite_errorcode & 0xFF not in _BUSY:
                    raise _store_error(exc) from exc
            except sqlite3.Error as exc:
                raise _store_error(exc) from exc
        return await self._fallback.fetch_all(query, *args, **named)

    async def fetch_one(self, query: str, *args: Any, **named: Any) -> sqlite3.Row | None:
        """The first row, or ``None``."""
        rows = await self.fetch_all(query, *args, **named)
        return rows[0] if rows else None


_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


# Primary result codes of a database that may answer later: locked by another connection
# beyond busy_timeout, or made read-only (a file or directory whose permissions changed).
_UNAVAILABLE = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_READONLY})


def _store_error(exc: sqlite3.Error) -> StoreError:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _UNAVAILABLE:
        return StoreUnavailable(f"SQLite error: {exc}")
    return StoreError(f"SQLite error: {exc}")


class SQLiteDatabase:
    """One SQLite file (or ``":memory:"``) with the verbs of :class:`SQLiteSession`, each a
    statement of its own in autocommit on the writer, :meth:`transaction` for several in one,
    and :attr:`reader` for reads on connections of their own."""

    def __init__(
        self, path: str | Path, *, busy_timeout: float = 10.0, readers: int = READERS
    ) -> None:
        self.path = path if str(path) == _MEMORY else Path(path)
        """The database file (or ``":memory:"``)."""
        self._busy_timeout = busy_timeout
        self._db: Writer | None = None
        self._lock = asyncio.Lock()
        self._reader_count = readers if isinstance(self.path, Path) else 0
        # The read connections not in use; None while closed (and always for ":memory:",
        # whose reads go to the writer).
        self._idle: asyncio.Queue[aiosqlite.Connection] | None = None
        self._readers: list[aiosqlite.Connection] = []
        self.reader = SQLiteReader(self)
        """Read verbs on the read connections (see :class:`SQLiteReader`)."""
        self.quick = SQLiteQuickReader(self.reader)
        """Bounded reads on the event loop's thread (see :class:`SQLiteQuickReader`)."""

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, configure the connections and apply pending migrations (idempotent)."""
        async with self._lock:
            if self._db is not None:
                return
            db = await self._connect()
            try:
                # After the migrations: a reader never sees a half-built schema.
                readers = [await self._connect_reader() for _ in range(self._reader_count)]
                quick = self._connect_quick() if readers else None
            except BaseException:
                await _close_all(self._readers)
                self._readers = []
                await db.close()
                raise
            self._db = db
            self.quick.attach(quick)
            if readers:
                self._readers = readers
                self._idle = asyncio.Queue()
                for reader in readers:
                    self._idle.put_nowait(reader)

    async def close(self) -> None:
        """Close the connections (idempotent)."""
        db, self._db = self._db, None
        readers, self._readers, self._idle = self._readers, [], None
        quick = self.quick.attach(None)
        if quick is not None:
            quick.close()
        with _translated():
            await _close_all(readers)
        if db is not None:
            async with self._lock:
                with _translated():
                    await db.close()

    async def _connect(self) -> Writer:
        if isinstance(self.path, Path):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create {self.path.parent}: {exc}") from exc
        with _translated():
            db = await Writer.open(self.path, timeout=self._busy_timeout)
            try:
                await self._enable_wal(db)
                for pragma in sql.PRAGMAS_PER_CONNECTION:
                    await db.execute(pragma)
                await _migrate(db)
            except BaseException:
                await db.close()
                raise
        return db

    async def _connect_reader(self) -> aiosqlite.Connection:
        with _translated():
            db = await aiosqlite.connect(
                self.path, timeout=self._busy_timeout, isolation_level=None
            )
            # Appended before configuring it, so that a failure below closes it too.
            self._readers.append(db)
            db.row_factory = sqlite3.Row
            for pragma in (*sql.PRAGMAS_PER_CONNECTION, *_READER_PRAGMAS):
                await db.execute(pragma)
        return db

    def _connect_quick(self) -> sqlite3.Connection:
        """The loop thread's read connection, with no busy timeout (``timeout=0``): a read
        that finds the database busy fails at once and goes to the read threads (SQLite may
        still retry briefly inside a WAL read's start)."""
        with _translated():
            db = sqlite3.connect(self.path, timeout=0, isolation_level=None)
            try:
                db.row_factory = sqlite3.Row
                for pragma in (*sql.PRAGMAS_PER_CONNECTION, *_READER_PRAGMAS):
                    db.execute(pragma)
            except BaseException:
                db.close()
                raise
        return db

    async def _enable_wal(self, db: Writer) -> None:
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

    def _connection(self) -> Writer:
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

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[SQLiteSession]:
        """A read connection for a few statements, each in autocommit (the writer, under its
        lock, for a ``":memory:"`` database). Only reads belong here: a file database's read
        connections are ``query_only``."""
        idle = self._idle
        if idle is None:
            async with self._autocommit() as s:
                yield s
            return
        db = await idle.get()
        try:
            with _translated():
                yield SQLiteSession(db)
        finally:
            # A statement whose awaiting task was cancelled still runs on the connection's
            # thread: the next one queues behind it there, so the connection can go back now.
            idle.put_nowait(db)

    async def _one_trip(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work`` queued on the writer's thread under the lock (so never inside another
        caller's transaction), awaited after it (so the next write queues meanwhile)."""
        async with self._lock:
            trip = self._connection().submit(work)
        with _translated():
            return await trip

    async def fetch_all(self, query: str, *args: Any, **named: Any) -> list[sqlite3.Row]:
        """Every row."""
        return await self._one_trip(functools.partial(fetch_rows, query, named or args))

    async def fetch_one(self, query: str, *args: Any, **named: Any) -> sqlite3.Row | None:
        """The first row, or ``None``."""
        rows = await self.fetch_all(query, *args, **named)
        return rows[0] if rows else None

    async def fetch_value(self, query: str, *args: Any, **named: Any) -> Any:
        """The first column of the first row (``None`` without a row)."""
        row = await self.fetch_one(query, *args, **named)
        return None if row is None else row[0]

    async def execute(self, query: str, *args: Any, **named: Any) -> int:
        """Run one statement (atomic on its own); the number of rows it wrote."""
        return await self._one_trip(functools.partial(changed_rows, query, named or args))

    async def run_transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(connection)`` in one write transaction (``BEGIN IMMEDIATE``, then ``COMMIT``,
        or ``ROLLBACK`` if it raises), all of it in one trip to the writer's thread.

        For the hot writes (a page commit): :meth:`transaction` takes a trip per statement.
        ``work`` runs on the writer's thread: it must use nothing but the connection and pure
        functions. Cancelled, it returns only once the transaction has ended: rolled back,
        unless its ``COMMIT`` had already begun (as with :meth:`transaction`).
        """
        cancelled = threading.Event()
        async with self._lock:
            trip = self._connection().submit(functools.partial(_in_transaction, work, cancelled))
        with _translated():
            try:
                return await asyncio.shield(trip)
            except asyncio.CancelledError:
                cancelled.set()
                with contextlib.suppress(Exception):
                    await trip
                raise

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


async def _close_all(connections: Iterable[aiosqlite.Connection]) -> None:
    for db in connections:
        await db.close()


async def _migrate(db: Writer) -> None:
    # Under the write lock, so that two processes opening a new file migrate it once.
    try:
        await db.execute(sql.BEGIN_IMMEDIATE)
        rows = list(await db.execute_fetchall(schema.GET_USER_VERSION))
        current = int(rows[0][0])
        for step in schema.MIGRATIONS:
            if step.version > current:
                for statement in step.statements:
                    await db.execute(statement)
                await db.execute(schema.set_user_version(step.version))
        await db.commit()
    except BaseException:
        await _rollback(db)
        raise


class _Abandoned(Exception):
    """The caller of a one-trip transaction was cancelled before its ``COMMIT``."""


def _in_transaction(
    work: Callable[[sqlite3.Connection], T],
    cancelled: threading.Event,
    connection: sqlite3.Connection,
) -> T:
    """On the writer's thread: ``work`` between ``BEGIN IMMEDIATE`` and ``COMMIT``; rolled
    back if it raises or its caller was cancelled meanwhile."""
    connection.execute(sql.BEGIN_IMMEDIATE)
    try:
        out = work(connection)
        if cancelled.is_set():
            raise _Abandoned
        connection.execute(sql.COMMIT)
    except BaseException:
        # A failed rollback must not hide the error that caused it (SQLite may have rolled
        # back already: after some errors it does).
        with contextlib.suppress(sqlite3.Error):
            connection.execute(sql.ROLLBACK)
        raise
    return out
