"""The ``postgres`` indexer: documents written to a table in any PostgreSQL, with full-text
search on it (the table, its shape and its statements: :mod:`syncd.indexers.postgres.table`).

Its config is :class:`~syncd.indexers.postgres.config.PostgresIndexerConfig`: ``dsn`` (a secret;
``${env:}``/``${file:}`` resolved when the pool opens), ``table``, ``schema``, ``full_text``,
``text_search_config``, ``create_table`` (default true) and ``batch_size`` (default 500).

- A batch of documents is one ``INSERT … SELECT … FROM unnest(…) ON CONFLICT DO UPDATE``
  statement; a batch of deletions one ``DELETE … USING unnest(…)`` (a row already gone counts
  as deleted). Rows are keyed by ``(connector_id, external_id)``: connectors share a table.
- Per-document results: what PostgreSQL is known to refuse (``\\u0000`` in JSON, NUL in
  text) fails its document before the statement is sent. When the statement is refused for
  its data anyway (SQLSTATE classes 22 data exception, 23 integrity, 54 program limit — a
  text too long for a ``tsvector``, say), the batch is written again one row per statement,
  and only the rows refused fail, each with PostgreSQL's reason. Any other error (the server
  unreachable, a privilege missing) fails the documents of the call.
- Before its first write the indexer reads the table's shape from ``pg_catalog``: a missing
  table is created (``create_table: true``; under an advisory lock, so two instances do not
  race) or refused; an existing table of the wrong shape is refused, never altered. A refusal
  fails the documents of the call and is looked at again on the next call, so a fixed table
  is picked up without a restart.
- The pool comes from the daemon's :class:`~syncd.indexers.postgres.pool.PostgresPools` (one per
  DSN, shared by connectors) and is released by :meth:`PostgresIndexer.aclose`.

:meth:`PostgresIndexer.check` runs the same inspection without creating anything, for
``syncd validate --connect``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

import structlog

from syncd.config.secrets import connector_secrets, resolve_refs
from syncd.errors import SyncdError
from syncd.indexers.base import BatchFailures, IndexerContext
from syncd.indexers.postgres.pool import PostgresPools, require_asyncpg
from syncd.indexers.postgres.table import (
    MAX_ERROR,
    PRIVILEGES_SQL,
    REGCONFIG_SQL,
    SHAPE_SQL,
    Row,
    RowError,
    TableShape,
    TableSpec,
    create_statements,
    delete_sql,
    document_row,
    lock_key,
    row_arrays,
    shape_problems,
    upsert_sql,
)
from syncd.jsontext import PayloadError
from syncd.models import Document
from syncd.observability.logs import redact, register_secret

if TYPE_CHECKING:
    import asyncpg

__all__ = ["DEFAULT_BATCH_SIZE", "PostgresIndexer", "PostgresIndexerError", "postgres_secrets"]

log = structlog.get_logger("syncd.indexers.postgres")

DEFAULT_BATCH_SIZE = 500


class PostgresIndexerError(SyncdError):
    """The database refused a statement, or the table cannot take the documents;
    ``transient`` when the server could not be reached or the connection was lost."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


def postgres_secrets(config: Mapping[str, Any]) -> set[str]:
    """The secrets of a ``postgres`` config for the log redaction: the DSN (as written and
    resolved, when it resolves now) and the password and secret query values inside it."""
    found = connector_secrets({}, config)
    dsn = config.get("dsn")
    if isinstance(dsn, str):
        with contextlib.suppress(SyncdError):
            found.update(_dsn_secrets(resolve_refs(dsn)))
    return found


def _dsn_secrets(dsn: str) -> set[str]:
    found = {dsn}
    try:
        parts = urlsplit(dsn)
        password = parts.password
    except ValueError:
        return found
    if password:
        found.update((password, unquote(password)))
    for name, value in parse_qsl(parts.query):
        if value and name.lower() in ("password", "passfile", "sslpassword"):
            found.add(value)
    return {v for v in found if v.strip()}


def _where(dsn: str) -> str:
    """``host:port/database`` of a DSN, for messages (never its user or password)."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "the database"
    return f"{host}{port}{parts.path or '/'}"


def _describe(exc: BaseException) -> str:
    """``<SQLSTATE> <message> (<detail>)`` of a server error; the type and text otherwise."""
    state = getattr(exc, "sqlstate", None)
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    detail = getattr(exc, "detail", None)
    text = f"{state} {message}" if state else f"{type(exc).__name__}: {message}"
    # A driver's message may quote what it was given: masked like every error shown.
    return redact(f"{text} ({detail})" if detail else text)[:MAX_ERROR]


class PostgresIndexer:
    """Writes a connector's documents to a PostgreSQL table (see the module docstring)."""

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        require_asyncpg()
        self.spec = TableSpec.from_config(config)
        self._dsn_config = str(config["dsn"])
        self._create = bool(config.get("create_table", True))
        #: Most documents per call; at 1 the workers call ``index``/``delete`` per document.
        self.batch_size = int(config.get("batch_size", DEFAULT_BATCH_SIZE))
        shared = context.pools
        self._pools = shared if shared is not None else PostgresPools(max_size=2)
        self._own_pools = shared is None
        self._dsn: str | None = None  # resolved, while this indexer holds its pool
        self._where: str | None = None  # host:port/database, once resolved (for messages)
        self._pool: asyncpg.Pool[Any] | None = None
        self._pool_lock = asyncio.Lock()
        self._ready = False
        self._lock = asyncio.Lock()
        self._upsert = upsert_sql(self.spec)
        self._delete = delete_sql(self.spec)
        for value in postgres_secrets(config):
            register_secret(value)

    # --- the indexer protocol ---------------------------------------------------------------

    async def index(self, document: Document) -> None:
        """Upsert one document's row; raise :class:`PostgresIndexerError` with its error."""
        failures = await self.index_batch([document])
        if failures:
            raise PostgresIndexerError(next(iter(failures.values())))

    async def delete(self, document: Document) -> None:
        """Delete one document's row (already gone: deleted as well)."""
        await self.delete_batch([document])

    async def index_batch(self, documents: Sequence[Document]) -> BatchFailures:
        """Upsert the documents' rows in one statement; the failed ones, with their errors."""
        if not documents:
            return None
        await self._ensure_table()
        failures: dict[str, str] = {}
        # One row per document; a document given twice is written once, as given last (one
        # statement cannot update a row twice).
        rows: dict[tuple[str, str], Row] = {}
        for doc in documents:
            try:
                rows[(doc.connector_id, doc.external_id)] = document_row(doc)
            except (RowError, PayloadError) as exc:
                failures[doc.external_id] = f"cannot be stored in PostgreSQL: {exc}"[:MAX_ERROR]
        if rows:
            failures.update(await self._upsert_rows(list(rows.values())))
        return failures

    async def delete_batch(self, documents: Sequence[Document]) -> BatchFailures:
        """Delete the documents' rows in one statement. The table is not inspected (nor
        created) for it: a missing table fails the call with PostgreSQL's error."""
        if not documents:
            return None
        cids = [d.connector_id for d in documents]
        eids = [d.external_id for d in documents]
        async with self._connection() as conn:
            await conn.fetch(self._delete, cids, eids)
        return None

    async def aclose(self) -> None:
        """Release the pool (the last user closes it); a later call opens it again."""
        async with self._pool_lock:
            dsn, self._dsn, self._pool = self._dsn, None, None
            self._ready = False
            if dsn is not None:
                await self._pools.release(dsn)
            if self._own_pools:
                await self._pools.aclose()

    # --- validate --connect ---------------------------------------------------------------

    @classmethod
    async def check(cls, config: Mapping[str, Any], context: IndexerContext) -> list[str]:
        """What keeps ``config`` from working against its database (``[]``: nothing): it
        cannot be reached, the text search configuration does not exist, the table does not
        exist with ``create_table: false``, has the wrong shape or cannot be written by this
        user. Nothing is created or changed."""
        try:
            indexer = cls(config, context)
        except SyncdError as exc:
            return [str(exc)]
        try:
            return [f"{indexer._target()}: {p}" for p in await indexer._inspect(create=False)]
        except SyncdError as exc:  # its message names the table
            return [str(exc)]
        finally:
            await indexer.aclose()

    # --- the table ------------------------------------------------------------------------

    def _target(self) -> str:
        where = f" at {self._where}" if self._where is not None else ""
        return f"table {self.spec.display}{where}"

    async def _ensure_table(self) -> None:
        if self._ready:
            return
        async with self._lock:
            if self._ready:
                return
            problems = await self._inspect(create=True)
            if problems:
                raise PostgresIndexerError(
                    f"{self._target()} cannot be used: {'; '.join(problems)}"
                )
            self._ready = True

    async def _inspect(self, *, create: bool) -> list[str]:
        """The problems of the table (after creating it when missing, if ``create`` and
        ``create_table``)."""
        import asyncpg

        spec = self.spec
        async with self._connection() as conn:
            config = spec.text_search_config
            if spec.full_text:
                try:
                    config = await conn.fetchval(REGCONFIG_SQL, spec.text_search_config)
                except asyncpg.UndefinedObjectError:
                    return [f"text search configuration {config!r} does not exist on the server"]
            shape = TableShape.from_rows(await conn.fetch(SHAPE_SQL, spec.schema, spec.table))
            if shape is None:
                if not self._create:
                    return ["it does not exist and create_table is false"]
                if not create:
                    return []  # created at first use
                async with conn.transaction():
                    # Two instances may get here at once: the second waits, then finds it.
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(spec))
                    for statement in create_statements(spec):
                        await conn.execute(statement)
                log.info("postgres.table_ready", table=spec.display)
                shape = TableShape.from_rows(await conn.fetch(SHAPE_SQL, spec.schema, spec.table))
                if shape is None:  # pragma: no cover - dropped meanwhile
                    return ["it could not be created"]
            problems = shape_problems(shape, spec, config)
            if problems:
                return [f"wrong shape (an existing table is never altered): {'; '.join(problems)}"]
            missing = [r[0] for r in await conn.fetch(PRIVILEGES_SQL, spec.qualified)]
            if missing:
                return [f"this user lacks the {', '.join(missing)} privilege on it"]
        return []

    # --- statements -------------------------------------------------------------------------

    async def _upsert_rows(self, rows: list[Row]) -> dict[str, str]:
        """Write ``rows`` in one statement, or row by row when their data is refused; the
        failures, external id → error."""
        import asyncpg

        refused = (
            asyncpg.DataError,
            asyncpg.IntegrityConstraintViolationError,
            asyncpg.ProgramLimitExceededError,
        )
        failures: dict[str, str] = {}
        async with self._connection() as conn:
            try:
                written = await conn.fetch(self._upsert, *row_arrays(rows))
            except refused as exc:
                if len(rows) == 1:
                    return {rows[0].external_id: _describe(exc)}
                log.info(
                    "postgres.rows_refused",
                    table=self.spec.display,
                    rows=len(rows),
                    error=_describe(exc),
                )
                written = []
                for row in rows:
                    try:
                        written += await conn.fetch(self._upsert, *row_arrays([row]))
                    except refused as row_exc:
                        failures[row.external_id] = _describe(row_exc)
        done = {r[0] for r in written}
        for row in rows:
            if row.external_id not in done and row.external_id not in failures:
                failures[row.external_id] = "not written (no row returned)"
        return failures

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.pool.PoolConnectionProxy[Any]]:
        """A connection of the pool; driver and network errors become
        :class:`PostgresIndexerError` naming the table and the server (never the DSN)."""
        import asyncpg

        pool = await self._get_pool()
        try:
            async with pool.acquire() as conn:
                yield conn
        except (asyncpg.UndefinedTableError, asyncpg.UndefinedColumnError) as exc:
            self._ready = False  # looked at again on the next call
            raise PostgresIndexerError(f"{self._target()}: {_describe(exc)}") from None
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            lost = isinstance(
                exc,
                OSError
                | asyncpg.InterfaceError
                | asyncpg.PostgresConnectionError
                | asyncpg.CannotConnectNowError
                | asyncpg.AdminShutdownError,
            )
            raise PostgresIndexerError(
                f"{self._target()}: {_describe(exc)}", transient=lost
            ) from None

    async def _get_pool(self) -> asyncpg.Pool[Any]:
        import asyncpg

        if self._pool is not None:
            return self._pool
        async with self._pool_lock:
            if self._pool is not None:
                return self._pool
            try:
                dsn = resolve_refs(self._dsn_config).strip()
            except SyncdError as exc:
                raise PostgresIndexerError(f"{self._target()}: dsn: {exc}") from None
            if not dsn.startswith(("postgresql://", "postgres://")):
                message = "dsn: must resolve to a postgresql:// or postgres:// URL"
                raise PostgresIndexerError(f"{self._target()}: {message}")
            self._where = _where(dsn)
            for value in _dsn_secrets(dsn):
                register_secret(value)  # a ${file:} DSN may have been rotated
            try:
                pool = await self._pools.acquire(dsn)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, ValueError) as exc:
                raise PostgresIndexerError(
                    f"table {self.spec.display} at {_where(dsn)}: cannot connect: {_describe(exc)}"
                ) from None
            self._dsn, self._pool = dsn, pool
            return pool
