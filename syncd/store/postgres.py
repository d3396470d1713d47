"""The PostgreSQL state store (asyncpg), for production and several instances.

Every statement lives in :mod:`syncd.store.postgres_sql`. Driver and network errors are
translated into :class:`~syncd.errors.StoreError` here, with messages that name the server but
never the DSN's password.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import unquote, urlsplit

import asyncpg
import orjson

from syncd.errors import Fenced, NameConflict, NotFound, StoreError
from syncd.models import (
    ABORTED_ERROR,
    Connector,
    ConnectorStatus,
    DocStatus,
    Document,
    DocumentInput,
    Rejection,
    Run,
    Transition,
    Waiting,
)
from syncd.store import codec
from syncd.store import postgres_sql as sql
from syncd.store.base import Change

__all__ = ["PostgresStore"]

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    _Conn: TypeAlias = PoolConnectionProxy[asyncpg.Record]

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


def _dumps(value: Any) -> str:
    # The same text rules as every backend (codec.dump_json); read-only Mapping views in a
    # connector's config become objects rather than strings.
    return codec.dump_json(_plain(value))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping) and not isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


async def _init_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    # jsonb travels as the text codec.dump_json produced once: no double encoding, and rows come
    # back as Python values.
    await conn.set_type_codec(
        "jsonb", schema="pg_catalog", encoder=_dumps, decoder=orjson.loads, format="text"
    )


def _describe_dsn(dsn: str) -> tuple[str | None, str]:
    """The DSN's password (to scrub it from messages) and ``host:port/database``."""
    parts = urlsplit(dsn)
    password = unquote(parts.password) if parts.password else None
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # malformed: asyncpg says what is wrong when connecting
        port = ""
    return password, f"{parts.hostname or 'localhost'}{port}{parts.path or '/'}"


def _ms(seconds: float) -> str:
    return str(max(0, round(seconds * 1000)))


def _count(status: str) -> int:
    # asyncpg returns the command tag, e.g. "UPDATE 3".
    return int(status.rsplit(" ", 1)[-1])


class PostgresStore:
    """The :class:`~syncd.store.base.Store` on PostgreSQL, through an asyncpg pool.

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
                self._server_settings[name] = _ms(seconds)
        self._password, self._target = _describe_dsn(dsn)
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None

    def __repr__(self) -> str:
        return f"PostgresStore({self._target!r})"

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Create the pool and apply pending migrations under an advisory lock."""
        if self._pool is not None:
            return
        options: dict[str, Any] = {}
        if self._statement_cache_size is not None:
            options["statement_cache_size"] = self._statement_cache_size
        # A malformed DSN surfaces as a plain ValueError from the driver.
        with self._translate("connect", ValueError):
            pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_size,
                max_size=self._max_size,
                timeout=self._connect_timeout,
                server_settings=self._server_settings,
                init=_init_connection,
                **options,
            )
        try:
            with self._translate("migrate"):
                async with pool.acquire() as conn:
                    await self._migrate(conn)
        except BaseException:
            pool.terminate()
            raise
        self._pool = pool

    @staticmethod
    async def _migrate(conn: _Conn) -> None:
        # A transaction-level lock (not a session one) so that it also holds behind a
        # transaction-mode pooler; DDL is transactional, so a failed migration leaves nothing.
        async with conn.transaction():
            await conn.execute(sql.LOCK_MIGRATIONS, sql.MIGRATION_LOCK_KEY)
            await conn.execute(sql.CREATE_VERSION_TABLE)
            current: int = await conn.fetchval(sql.CURRENT_VERSION)
            latest = sql.MIGRATIONS[-1][0]
            if current > latest:
                raise StoreError(
                    f"database schema version {current} is newer than this syncd "
                    f"supports ({latest}): upgrade syncd"
                )
            for version, statements in sql.MIGRATIONS:
                if version > current:
                    await conn.execute(statements)
                    await conn.execute(sql.RECORD_VERSION, version)

    async def close(self) -> None:
        """Close the pool: wait a while for connections in use, then cut them."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            async with asyncio.timeout(_CLOSE_GRACE_SECONDS):
                await pool.close()
        except TimeoutError:
            pool.terminate()
        except _DRIVER_ERRORS:
            # Closing is best effort: a connection that is already gone needs no goodbye.
            pool.terminate()

    async def ping(self) -> None:
        """Raise :class:`StoreError` unless PostgreSQL answers."""
        with self._translate("ping"):
            async with self._acquire() as conn:
                await conn.fetchval(sql.PING)

    # --- connectors ---------------------------------------------------------------------

    async def create_connector(self, connector: Connector) -> Connector:
        """Insert a new connector; :class:`NameConflict` if the name is taken."""
        with self._translate("create connector"):
            async with self._acquire() as conn:
                await conn.execute(sql.INSERT_CONNECTOR, *_connector_args(connector))
        return connector

    async def get_connector(self, connector_id: str) -> Connector | None:
        """The connector, or ``None``."""
        with self._translate("get connector"):
            async with self._acquire() as conn:
                row = await conn.fetchrow(sql.GET_CONNECTOR, connector_id)
        return None if row is None else _connector(row)

    async def list_connectors(
        self, *, status: ConnectorStatus | None = None, limit: int = 100, after: str | None = None
    ) -> list[Connector]:
        """Connectors ordered by id, ids greater than ``after``, optionally of one status."""
        with self._translate("list connectors"):
            async with self._acquire() as conn:
                rows = await conn.fetch(
                    sql.LIST_CONNECTORS, None if status is None else status.value, after, limit
                )
        return [_connector(row) for row in rows]

    async def mutate_connector(
        self, connector_id: str, change: Change, *, fail_documents: str | None = None
    ) -> tuple[Connector, Connector]:
        """Row-lock the connector, apply ``change``, write it and its run rows: one
        transaction. :class:`NotFound` if missing; :class:`NameConflict` on a rename
        collision; whatever ``change`` raises propagates and nothing is written."""
        with self._translate("update connector"):
            async with self._transaction() as conn:
                row = await conn.fetchrow(sql.LOCK_CONNECTOR, connector_id)
                if row is None:
                    raise NotFound()
                before = _connector(row)
                transition: Transition = change(before)
                after = transition.connector
                values = codec.connector_to_row(after, dt=codec.identity, js=codec.identity)
                # Always the locked row, whatever id the change put in the record.
                await conn.execute(
                    sql.UPDATE_CONNECTOR,
                    connector_id,
                    *(values[c] for c in sql.MUTABLE_CONNECTOR_COLUMNS),
                )
                if transition.start is not None:
                    start = transition.start
                    await conn.execute(
                        sql.INSERT_RUN,
                        start.id,
                        start.connector_id,
                        start.trigger.value,
                        start.started_at,
                        start.owner,
                    )
                for end in transition.ends:
                    await conn.execute(
                        sql.END_RUN, end.id, end.outcome.value, end.finished_at, end.error
                    )
                if fail_documents is not None:
                    await conn.execute(
                        sql.FAIL_DOCUMENTS,
                        connector_id,
                        [DocStatus.PENDING.value, DocStatus.RUNNING.value],
                        fail_documents,
                        after.updated_at,
                    )
        return before, after

    async def delete_connector(self, connector_id: str) -> None:
        """Delete the connector with all its documents and runs (no-op if missing)."""
        with self._translate("delete connector"):
            async with self._transaction() as conn:
                await conn.execute(sql.DELETE_CONNECTOR_DOCUMENTS, connector_id)
                await conn.execute(sql.DELETE_CONNECTOR, connector_id)

    async def due_connectors(self, now: datetime, *, limit: int = 100) -> list[Connector]:
        """Active or errored connectors with ``next_run_at <= now``, earliest first (an index
        range scan on ``next_run_at``)."""
        with self._translate("list due connectors"):
            async with self._acquire() as conn:
                rows = await conn.fetch(sql.DUE_CONNECTORS, now, limit)
        return [_connector(row) for row in rows]

    # --- run writes, fenced by run id ---------------------------------------------------

    async def commit_page(
        self,
        connector_id: str,
        run_id: str,
        documents: Sequence[DocumentInput],
        *,
        next_cursor: str | None,
        source_state: Mapping[str, Any],
        now: datetime,
        indexed: bool = False,
        rejected: Sequence[Rejection] = (),
        note: str | None = None,
    ) -> list[str]:
        """Upsert one page and checkpoint it in one transaction fenced by ``run_id``
        (:class:`Fenced` otherwise); the external ids to enqueue."""
        # Last one wins for duplicate ids; sorted so that concurrent writers lock rows in the
        # same order (see postgres_sql).
        latest = {doc.external_id: doc for doc in documents}
        ids = sorted(latest)
        with self._translate("commit page"):
            async with self._transaction() as conn:
                fenced = await conn.fetchval(
                    sql.FENCE_PAGE,
                    connector_id,
                    run_id,
                    next_cursor,
                    source_state,
                    len(documents),
                    now,
                )
                if fenced is None:
                    raise Fenced(f"run {run_id} is not the current run of connector {connector_id}")
                enqueued: list[str] = []
                if ids:
                    rows = await conn.fetch(
                        sql.UPSERT_DOCUMENTS,
                        connector_id,
                        ids,
                        [latest[i].content_hash for i in ids],
                        [codec.payload_text(latest[i]) for i in ids],
                        now,
                        ABORTED_ERROR,
                        DocStatus.INDEXED.value if indexed else DocStatus.PENDING.value,
                    )
                    enqueued = [row[0] for row in rows]
                sample = None
                if rejected:
                    run = await conn.fetchrow(sql.RUN_REJECTIONS, run_id)
                    if run is not None:
                        sample = codec.merge_rejections(run[1], int(run[0]) + 1, rejected)
                await conn.execute(
                    sql.RUN_PAGE,
                    run_id,
                    len(documents),
                    len(enqueued),
                    len(rejected),
                    sample,
                    note,
                )
        return enqueued

    async def report(
        self, connector_id: str, run_id: str, *, now: datetime, waiting: Waiting | None
    ) -> bool:
        """Heartbeat and waiting state of a running run; ``False`` if it is no longer current."""
        with self._translate("report progress"):
            async with self._acquire() as conn:
                status = await conn.execute(
                    sql.REPORT,
                    connector_id,
                    run_id,
                    now,
                    None if waiting is None else waiting.reason.value,
                    None if waiting is None else waiting.until,
                )
        return _count(status) > 0

    # --- runs ---------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or ``None``."""
        with self._translate("get run"):
            async with self._acquire() as conn:
                row = await conn.fetchrow(sql.GET_RUN, run_id)
        return None if row is None else _run(row)

    async def list_runs(
        self, connector_id: str, *, limit: int = 100, before: str | None = None
    ) -> list[Run]:
        """A connector's runs, newest first, ids smaller than ``before``."""
        with self._translate("list runs"):
            async with self._acquire() as conn:
                rows = await conn.fetch(sql.LIST_RUNS, connector_id, before, limit)
        return [_run(row) for row in rows]

    # --- documents ----------------------------------------------------------------------

    async def get_document(self, connector_id: str, external_id: str) -> Document | None:
        """The document with its payload, or ``None``."""
        with self._translate("get document"):
            async with self._acquire() as conn:
                row = await conn.fetchrow(sql.GET_DOCUMENT, connector_id, external_id)
        return None if row is None else _document(row, with_payload=True)

    async def list_documents(
        self,
        connector_id: str,
        *,
        status: DocStatus | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[Document]:
        """Documents (without payload) ordered by external id, greater than ``after``."""
        args: list[Any] = [connector_id, limit]
        if status is None:
            query = sql.LIST_DOCUMENTS if after is None else sql.LIST_DOCUMENTS_AFTER
        else:
            query = sql.LIST_DOCUMENTS_BY_STATUS
            if after is not None:
                query = sql.LIST_DOCUMENTS_BY_STATUS_AFTER
            args.append(status.value)
        if after is not None:
            args.append(after)
        with self._translate("list documents"):
            async with self._acquire() as conn:
                rows = await conn.fetch(query, *args)
        return [_document(row) for row in rows]

    async def document_counts(self, connector_id: str) -> dict[DocStatus, int]:
        """Number of documents per status (every status present)."""
        with self._translate("count documents"):
            async with self._acquire() as conn:
                rows = await conn.fetch(sql.DOCUMENT_COUNTS, connector_id)
        counts = dict.fromkeys(DocStatus, 0)
        for row in rows:
            counts[DocStatus(row["status"])] = row["n"]
        return counts

    async def pending_documents(
        self, *, after: tuple[str, str] | None = None, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """``(connector_id, external_id)`` of pending documents after ``after``, in order."""
        with self._translate("list pending documents"):
            async with self._acquire() as conn:
                if after is None:
                    rows = await conn.fetch(sql.PENDING_DOCUMENTS, limit)
                else:
                    rows = await conn.fetch(sql.PENDING_DOCUMENTS_AFTER, limit, *after)
        return [(row[0], row[1]) for row in rows]

    async def claim_documents(
        self,
        connector_id: str,
        external_ids: Sequence[str],
        *,
        lease_token: str,
        lease_until: datetime,
        now: datetime,
        with_payload: bool = True,
    ) -> list[Document]:
        """``pending → running`` under a lease for those still pending; them, with their
        payload unless ``with_payload`` is false."""
        if not external_ids:
            return []
        with self._translate("claim documents"):
            async with self._acquire() as conn:
                rows = await conn.fetch(
                    sql.CLAIM_DOCUMENTS if with_payload else sql.CLAIM_DOCUMENTS_NO_PAYLOAD,
                    connector_id,
                    list(external_ids),
                    lease_token,
                    lease_until,
                    now,
                )
        return [_document(row, with_payload=with_payload) for row in rows]

    async def finish_documents(
        self,
        connector_id: str,
        lease_token: str,
        results: Sequence[tuple[str, DocStatus, str | None]],
        *,
        now: datetime,
    ) -> int:
        """Record indexing results of documents still running under ``lease_token``."""
        latest = {external_id: (status, error) for external_id, status, error in results}
        if not latest:
            return 0
        ids = list(latest)
        with self._translate("finish documents"):
            async with self._acquire() as conn:
                status = await conn.execute(
                    sql.FINISH_DOCUMENTS,
                    connector_id,
                    lease_token,
                    now,
                    ids,
                    [latest[i][0].value for i in ids],
                    [latest[i][1] for i in ids],
                )
        return _count(status)

    async def extend_leases(self, connector_id: str, lease_token: str, until: datetime) -> int:
        """Push back the lease of documents running under ``lease_token``."""
        with self._translate("extend leases"):
            async with self._acquire() as conn:
                status = await conn.execute(sql.EXTEND_LEASES, connector_id, lease_token, until)
        return _count(status)

    async def release_expired_leases(self, now: datetime) -> list[tuple[str, str]]:
        """Return running documents whose lease expired to ``pending``; their ids."""
        with self._translate("release expired leases"):
            async with self._acquire() as conn:
                rows = await conn.fetch(sql.RELEASE_EXPIRED_LEASES, now)
        return sorted((row[0], row[1]) for row in rows)

    async def fail_documents(
        self,
        connector_id: str,
        statuses: Sequence[DocStatus],
        error: str,
        *,
        now: datetime,
    ) -> int:
        """Mark the connector's documents in ``statuses`` as ``failed`` with ``error``."""
        if not statuses:
            return 0
        with self._translate("fail documents"):
            async with self._acquire() as conn:
                status = await conn.execute(
                    sql.FAIL_DOCUMENTS, connector_id, [s.value for s in statuses], error, now
                )
        return _count(status)

    async def requeue_documents(
        self,
        connector_id: str,
        *,
        error: str | None = None,
        now: datetime,
        run_id: str | None = None,
    ) -> list[str]:
        """``failed → pending`` (attempts reset), only those with ``error`` when given. With
        ``run_id``, fenced: :class:`Fenced` (nothing written) unless it is the current run."""
        with self._translate("requeue documents"):
            if run_id is None:
                async with self._acquire() as conn:
                    rows = await conn.fetch(sql.REQUEUE_DOCUMENTS, connector_id, error, now)
            else:
                async with self._transaction() as conn:
                    current = await conn.fetchval(sql.LOCK_CURRENT_RUN, connector_id, run_id)
                    if current is None:
                        raise Fenced(
                            f"run {run_id} is not the current run of connector {connector_id}"
                        )
                    rows = await conn.fetch(sql.REQUEUE_DOCUMENTS, connector_id, error, now)
        return sorted(row[0] for row in rows)

    # --- plumbing -----------------------------------------------------------------------

    def _acquire(self) -> asyncpg.pool.PoolAcquireContext[asyncpg.Record]:
        if self._pool is None:
            raise StoreError("PostgreSQL store is not open")
        return self._pool.acquire()

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[_Conn]:
        """A pooled connection inside a transaction, committed unless the block raises."""
        async with self._acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                yield conn
            except BaseException:
                # A failed rollback (the connection died) must not hide why the block failed;
                # the server rolls back a lost session's transaction by itself.
                with contextlib.suppress(*_DRIVER_ERRORS):
                    await tx.rollback()
                raise
            await tx.commit()

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
            raise StoreError(self._describe(action, exc)) from exc

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
            text = text.replace(self._password, "***")
        return text


def _connector_args(c: Connector) -> list[Any]:
    """Parameters of ``sql.INSERT_CONNECTOR``: asyncpg takes native datetimes and, through
    the jsonb codec, Python values."""
    return list(codec.connector_to_row(c, dt=codec.identity, js=codec.identity).values())


def _connector(row: asyncpg.Record) -> Connector:
    return codec.connector_from_row(row, dt=codec.identity, js=codec.identity)


def _run(row: asyncpg.Record) -> Run:
    return codec.run_from_row(row, dt=codec.identity)


def _document(row: asyncpg.Record, *, with_payload: bool = False) -> Document:
    return codec.document_from_row(row, with_payload=with_payload, dt=codec.identity)
