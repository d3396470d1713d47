"""The PostgreSQL plumbing under :class:`~syncd.store.postgres.PostgresStore`: an asyncpg pool,
the migrations of :mod:`syncd.store.postgres.migrations` applied when it opens, and a handful
of verbs over the named statements of :mod:`syncd.store.postgres.sql`.

Reads that need no transaction and answer a client (the API's connector reads, the metrics'
totals) go to :attr:`PostgresDatabase.reader`: a small pool of their own, so that they never
wait for a connection behind the page commits, claims and finishes of twenty syncs.

Driver and network errors become :class:`~syncd.errors.StoreError` (or
:class:`~syncd.errors.NameConflict`) here and nowhere else, with messages that name the server
and the statement but never the DSN's password.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias
from urllib.parse import unquote, urlsplit

import asyncpg
import orjson

from syncd.errors import NameConflict, StoreError, StoreUnavailable
from syncd.observability.logs import MASK
from syncd.store import codec
from syncd.store.postgres import migrations as schema
from syncd.store.postgres import sql

__all__ = ["READ_POOL_SIZE", "PostgresDatabase", "PostgresReader", "PostgresTransaction", "Record"]

#: Connections of the read pool (see :attr:`PostgresDatabase.reader`), beside the main pool.
READ_POOL_SIZE = 4

Record: TypeAlias = asyncpg.Record

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    _Conn: TypeAlias = PoolConnectionProxy[Record]

# Errors that mean the session is gone (SQLSTATE classes 08 and 57P0x): the pool replaces
# such a connection on its next acquire.
_CONNECTION_LOST = (
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.IdleInTransactionSessionTimeoutError,
    ConnectionError,
)
_CLOSE_GRACE_SECONDS = 10.0
_DRIVER_ERRORS: tuple[type[Exception], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,  # includes TimeoutError and ConnectionError
)

# What an error message calls a statement: its name in sql.py, e.g. "get connector".
_STATEMENT_NAMES: Final = {
    text: name.lower().replace("_", " ")
    for name, text in vars(sql).items()
    if name.isupper() and not name.startswith("_") and isinstance(text, str)
}


def _unavailable(action: str, exc: BaseException) -> bool:
    """Whether ``exc`` means the server cannot be reached now, so that the same call may go
    through later: refused, lost or timed-out connections, a server starting or shutting down,
    and the driver's state errors on a connection cut in the middle of an operation."""
    if action == "connect" or isinstance(exc, (*_CONNECTION_LOST, OSError)):
        return True
    if isinstance(exc, asyncpg.InternalClientError):
        return True  # "cannot switch to state …": a connection cut mid-operation
    return isinstance(exc, asyncpg.InterfaceError) and "closed" in str(exc)


def _statement_name(query: str) -> str:
    return _STATEMENT_NAMES.get(query, "query")


def _dumps(value: Any) -> str:
    # The same text rules as every backend (codec.dump_json); read-only Mapping views in a
    # connector's config become objects rather than strings.
    return codec.dump_json(_plain(value))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping) and not isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


async def _init_connection(conn: asyncpg.Connection[Record]) -> None:
    # jsonb travels as the text codec.dump_json produced once: no double encoding, and rows come
    # back as Python values.
    await conn.set_type_codec(
        "jsonb", schema="pg_catalog", encoder=_dumps, decoder=orjson.loads, format="text"
    )


class _Connection(asyncpg.Connection):
    """A pooled connection released without asyncpg's reset query.

    The pool sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`` on
    every release by default: a round trip per store call, for session state this store never
    creates (its advisory lock is transaction-level, it declares no cursor outside a
    transaction, listens to nothing and sets no session variable; the session settings are
    startup parameters, which ``RESET ALL`` would keep anyway). A transaction still open at
    release is rolled back all the same: asyncpg does that apart from the reset query.
    """

    def get_reset_query(self) -> str:
        """Nothing to reset (see the class)."""
        return ""


def _describe_dsn(dsn: str) -> tuple[str | None, str]:
    """The DSN's password (to scrub it from messages) and ``host:port/database``."""
    parts = urlsplit(dsn)
    password = unquote(parts.password) if parts.password else None
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # malformed: asyncpg says what is wrong when connecting
        port = ""
    return password, f"{parts.hostname or 'localhost'}{port}{parts.path or '/'}"


def _milliseconds(seconds: float) -> str:
    return str(max(0, round(seconds * 1000)))


def _rows_written(status: str) -> int:
    # asyncpg returns the command tag, e.g. "UPDATE 3" (or "SET", which writes no row).
    tail = status.rpartition(" ")[2]
    return int(tail) if tail.isdigit() else 0


async def _migrate(conn: _Conn) -> None:
    # A transaction-level lock (not a session one) so that it also holds behind a
    # transaction-mode pooler; DDL is transactional, so a failed migration leaves nothing.
    async with conn.transaction():
        await conn.execute(schema.LOCK_MIGRATIONS, schema.MIGRATION_LOCK_KEY)
        await conn.execute(schema.CREATE_VERSION_TABLE)
        current: int = await conn.fetchval(schema.CURRENT_VERSION)
        latest = schema.MIGRATIONS[-1][0]
        if current > latest:
            raise StoreError(
                f"database schema version {current} is newer than this syncd "
                f"supports ({latest}): upgrade syncd"
            )
        for version, statements in schema.MIGRATIONS:
            if version > current:
                await conn.execute(statements)
                await conn.execute(schema.RECORD_VERSION, version)


class PostgresTransaction:
    """The verbs on one pooled connection, inside its transaction (errors are translated by
    the :meth:`PostgresDatabase.transaction` block around them)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: _Conn) -> None:
        self._conn = conn

    async def fetch_one(self, query: str, *args: Any) -> Record | None:
        """The first row, or ``None``."""
        return await self._conn.fetchrow(query, *args)

    async def fetch_all(self, query: str, *args: Any) -> list[Record]:
        """Every row."""
        return await self._conn.fetch(query, *args)

    async def fetch_value(self, query: str, *args: Any) -> Any:
        """The first column of the first row (``None`` without a row)."""
        return await self._conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> int:
        """Run a statement; the number of rows it wrote."""
        return _rows_written(await self._conn.execute(query, *args))


class PostgresReader:
    """The read verbs on the read pool's connections, each statement in autocommit. Only for
    reads that need no transaction with a write. ``acquire`` takes a connection of the read
    pool; ``translate`` turns the driver's errors into syncd's (both the database's)."""

    __slots__ = ("_acquire", "_translate")

    def __init__(
        self,
        acquire: Callable[[], asyncpg.pool.PoolAcquireContext[Record]],
        translate: Callable[[str], contextlib.AbstractContextManager[None]],
    ) -> None:
        self._acquire = acquire
        self._translate = translate

    async def fetch_one(self, query: str, *args: Any) -> Record | None:
        """The first row, or ``None``."""
        with self._translate(_statement_name(query)):
            async with self._acquire() as conn:
                return await conn.fetchrow(query, *args)

    async def fetch_all(self, query: str, *args: Any) -> list[Record]:
        """Every row."""
        with self._translate(_statement_name(query)):
            async with self._acquire() as conn:
                return await conn.fetch(query, *args)


class PostgresDatabase:
    """An asyncpg pool with the same verbs as :class:`PostgresTransaction`, each on a pooled
    connection of its own in autocommit, and :meth:`transaction` for several in one.

    ``statement_cache_size=0`` disables prepared-statement caching, which a transaction-mode
    pooler (PgBouncer) needs. The three timeouts, in seconds, are sent as the session's
    ``statement_timeout``, ``lock_timeout`` and ``idle_in_transaction_session_timeout``:
    ``0`` disables one, ``None`` leaves the server's (or role's) value alone — for a pooler
    that refuses those startup parameters, where they are set with ``ALTER ROLE … SET``.
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
        self._dsn = dsn
        self._statement_cache_size = statement_cache_size
        self._min_size = min_size
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._server_settings = {"application_name": application_name, "TimeZone": "UTC"}
        for name, seconds in (
            ("statement_timeout", statement_timeout),
            ("lock_timeout", lock_timeout),
            ("idle_in_transaction_session_timeout", idle_in_transaction_timeout),
        ):
            if seconds is not None:
                self._server_settings[name] = _milliseconds(seconds)
        self._password, self._target = _describe_dsn(dsn)
        self._pool: asyncpg.Pool[Record] | None = None
        self._read_pool: asyncpg.Pool[Record] | None = None
        self.reader = PostgresReader(self._acquire_reader, self._translate)
        """Read verbs on a pool of their own (see :class:`PostgresReader`)."""

    @property
    def target(self) -> str:
        """``host:port/database``, for messages (no credentials)."""
        return self._target

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Create the pool and apply pending migrations under an advisory lock (a no-op
        when open)."""
        if self._pool is not None:
            return
        options: dict[str, Any] = {}
        if self._statement_cache_size is not None:
            options["statement_cache_size"] = self._statement_cache_size
        # A malformed DSN surfaces as a plain ValueError from the driver.
        with self._translate("connect", ValueError):
            pool = await self._create_pool(self._min_size, self._max_size, options)
        try:
            with self._translate("migrate"):
                async with pool.acquire() as conn:
                    await _migrate(conn)
            # After the migrations: a reader never sees a half-built schema.
            with self._translate("connect"):
                read_pool = await self._create_pool(min(self._min_size, 1), READ_POOL_SIZE, options)
        except BaseException:
            pool.terminate()
            raise
        self._pool, self._read_pool = pool, read_pool

    async def _create_pool(
        self, min_size: int, max_size: int, options: Mapping[str, Any]
    ) -> asyncpg.Pool[Record]:
        return await asyncpg.create_pool(
            self._dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=self._connect_timeout,
            server_settings=self._server_settings,
            init=_init_connection,
            connection_class=_Connection,
            **options,
        )

    async def close(self) -> None:
        """Close the pools: wait a while for connections in use, then cut them."""
        pools = [p for p in (self._read_pool, self._pool) if p is not None]
        self._pool = self._read_pool = None
        try:
            # Both at once: one grace period in all.
            async with asyncio.timeout(_CLOSE_GRACE_SECONDS):
                await asyncio.gather(*(pool.close() for pool in pools))
        except TimeoutError:
            pass
        except _DRIVER_ERRORS:
            pass  # closing is best effort: a connection already gone needs no goodbye
        finally:
            # Whatever did not close in time (or at all, if cancelled) is cut.
            for pool in pools:
                pool.terminate()

    def acquire(self) -> asyncpg.pool.PoolAcquireContext[Record]:
        """A raw pooled connection (errors untranslated): for the verbs, and for tests."""
        if self._pool is None:
            raise StoreError("PostgreSQL store is not open")
        return self._pool.acquire()

    def _acquire_reader(self) -> asyncpg.pool.PoolAcquireContext[Record]:
        if self._read_pool is None:
            raise StoreError("PostgreSQL store is not open")
        return self._read_pool.acquire()

    # --- verbs ----------------------------------------------------------------------------

    async def fetch_one(self, query: str, *args: Any) -> Record | None:
        """The first row, or ``None``."""
        with self._translate(_statement_name(query)):
            async with self.acquire() as conn:
                return await conn.fetchrow(query, *args)

    async def fetch_all(self, query: str, *args: Any) -> list[Record]:
        """Every row."""
        with self._translate(_statement_name(query)):
            async with self.acquire() as conn:
                return await conn.fetch(query, *args)

    async def fetch_value(self, query: str, *args: Any) -> Any:
        """The first column of the first row (``None`` without a row)."""
        with self._translate(_statement_name(query)):
            async with self.acquire() as conn:
                return await conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> int:
        """Run a statement; the number of rows it wrote."""
        with self._translate(_statement_name(query)):
            async with self.acquire() as conn:
                return _rows_written(await conn.execute(query, *args))

    @contextlib.asynccontextmanager
    async def transaction(self, action: str) -> AsyncIterator[PostgresTransaction]:
        """The verbs on one pooled connection inside a transaction, committed unless the
        block raises. ``action`` names the whole block in error messages."""
        with self._translate(action):
            async with self.acquire() as conn:
                tx = conn.transaction()
                await tx.start()
                try:
                    yield PostgresTransaction(conn)
                except BaseException:
                    # A failed rollback (the connection died) must not hide why the block
                    # failed; the server rolls back a lost session's transaction by itself.
                    with contextlib.suppress(*_DRIVER_ERRORS):
                        await tx.rollback()
                    raise
                await tx.commit()

    # --- errors ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _translate(self, action: str, *also: type[Exception]) -> Iterator[None]:
        """Turn driver errors (and ``also``) raised inside the block into syncd's own."""
        try:
            yield
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name == "connectors_name_key":
                raise NameConflict("Connector name already exists") from exc
            raise StoreError(self._describe(action, exc)) from exc
        except _DRIVER_ERRORS + also as exc:
            error = StoreUnavailable if _unavailable(action, exc) else StoreError
            raise error(self._describe(action, exc)) from exc

    def _describe(self, action: str, exc: BaseException) -> str:
        detail = str(exc) or type(exc).__name__
        if action == "connect":
            text = f"cannot connect to PostgreSQL at {self._target}: {detail}"
        elif isinstance(exc, _CONNECTION_LOST):
            text = f"lost connection to PostgreSQL at {self._target} ({action}): {detail}"
        elif isinstance(exc, asyncpg.QueryCanceledError):
            text = f"PostgreSQL statement timed out or was cancelled ({action}): {detail}"
        elif isinstance(exc, asyncpg.LockNotAvailableError):
            text = f"PostgreSQL lock wait timed out ({action}): {detail}"
        elif isinstance(exc, TimeoutError):
            text = f"PostgreSQL at {self._target} did not answer in time ({action})"
        else:
            text = f"PostgreSQL error ({action}): {type(exc).__name__}: {detail}"
        if self._password:
            text = text.replace(self._password, MASK)
        return text
