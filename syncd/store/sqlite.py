"""The embedded state store: one SQLite file through aiosqlite (DESIGN.md §1).

Each method is its domain steps over the verbs of :class:`SQLiteDatabase`
(:mod:`syncd.store.sqlite_conn`: one connection in WAL mode, its lock, migrations and the
translation of driver errors); every statement lives in :mod:`syncd.store.sqlite_sql`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from syncd.errors import ConfigError, Fenced, NotFound
from syncd.models import (
    Connector,
    ConnectorStatus,
    DocStatus,
    Document,
    DocumentInput,
    Rejection,
    Run,
    Waiting,
)
from syncd.rules import ExistingDocument, plan_page
from syncd.store import sqlite_sql as sql
from syncd.store.base import Change
from syncd.store.codec import (
    connector_from_row,
    connector_to_row,
    document_from_row,
    dump_json,
    encode_dt,
    merge_rejections,
    payload_text,
    run_from_row,
)
from syncd.store.sqlite_conn import SQLiteDatabase

__all__ = ["SQLiteStore"]

_FINISHED = frozenset({DocStatus.INDEXED, DocStatus.FAILED})


class SQLiteStore:
    """:class:`syncd.store.Store` on a SQLite file.

    ``path`` is a file path (its parent directory is created) or ``":memory:"``.
    ``busy_timeout`` is how many seconds a write waits for another process's write lock.
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = 10.0) -> None:
        self._db = SQLiteDatabase(path, busy_timeout=busy_timeout)

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

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, configure the connection and apply pending migrations (idempotent)."""
        await self._db.open()

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        await self._db.close()

    async def ping(self) -> None:
        """Raise :class:`StoreError` unless the database answers."""
        await self._db.fetch_all(sql.PING)

    # --- connectors ---------------------------------------------------------------------

    async def create_connector(self, connector: Connector) -> Connector:
        """Insert a new connector; :class:`NameConflict` if the name is taken."""
        row = connector_to_row(connector)
        async with self._db.transaction() as tx:
            await tx.execute(sql.INSERT_CONNECTOR, **row)
        return connector

    async def get_connector(self, connector_id: str) -> Connector | None:
        """The connector, or ``None``."""
        row = await self._db.fetch_one(sql.GET_CONNECTOR, connector_id)
        return None if row is None else connector_from_row(row)

    async def list_connectors(
        self, *, status: ConnectorStatus | None = None, limit: int = 100, after: str | None = None
    ) -> list[Connector]:
        """Connectors ordered by id, ids greater than ``after``, optionally of one status."""
        params: list[Any] = []
        if status is not None:
            params.append(status.value)
        if after is not None:
            params.append(after)
        params.append(limit)
        query = sql.list_connectors(by_status=status is not None, after=after is not None)
        rows = await self._db.fetch_all(query, *params)
        return [connector_from_row(r) for r in rows]

    async def mutate_connector(
        self, connector_id: str, change: Change, *, fail_documents: str | None = None
    ) -> tuple[Connector, Connector]:
        """Atomically read the connector, apply ``change`` and write the result with its
        run rows (see :meth:`syncd.store.Store.mutate_connector`)."""
        async with self._db.transaction() as tx:
            row = await tx.fetch_one(sql.GET_CONNECTOR, connector_id)
            if row is None:
                raise NotFound()
            before = connector_from_row(row)
            transition = change(before)
            after = transition.connector
            if (after.id, after.created_at) != (before.id, before.created_at):
                # Neither is ever rewritten; return what the store now holds.
                after = replace(after, id=before.id, created_at=before.created_at)
            await tx.execute(sql.UPDATE_CONNECTOR, **connector_to_row(after))
            if (start := transition.start) is not None:
                await tx.execute(
                    sql.INSERT_RUN,
                    start.id,
                    start.connector_id,
                    start.trigger.value,
                    encode_dt(start.started_at),
                    start.owner,
                )
            if transition.ends:
                await tx.executemany(
                    sql.END_RUN,
                    [
                        (end.outcome.value, encode_dt(end.finished_at), end.error, end.id)
                        for end in transition.ends
                    ],
                )
            if fail_documents is not None:
                await tx.execute(
                    sql.FAIL_DOCUMENTS,
                    fail_documents,
                    encode_dt(after.updated_at),
                    dump_json([DocStatus.PENDING.value, DocStatus.RUNNING.value]),
                    connector_id,
                )
        return before, after

    async def delete_connector(self, connector_id: str) -> None:
        """Delete the connector with all its documents and runs (no-op if missing)."""
        async with self._db.transaction() as tx:
            await tx.execute(sql.DELETE_CONNECTOR_DOCUMENTS, connector_id)
            await tx.execute(sql.DELETE_CONNECTOR_RUNS, connector_id)
            await tx.execute(sql.DELETE_CONNECTOR, connector_id)

    async def due_connectors(self, now: datetime, *, limit: int = 100) -> list[Connector]:
        """Connectors with ``next_run_at <= now`` whose status is ``active`` or ``error``,
        earliest first."""
        rows = await self._db.fetch_all(sql.DUE_CONNECTORS, encode_dt(now), limit)
        return [connector_from_row(r) for r in rows]

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
        """Upsert a crawled page and checkpoint the run in one transaction, fenced by
        ``run_id`` (see :meth:`syncd.store.Store.commit_page`). Returns the external ids to
        enqueue."""
        at = encode_dt(now)
        status = DocStatus.INDEXED.value if indexed else DocStatus.PENDING.value
        state = dump_json(dict(source_state))
        ids = dump_json([d.external_id for d in documents])
        async with self._db.transaction() as tx:
            checkpointed = await tx.execute(
                sql.CHECKPOINT_PAGE, next_cursor, state, len(documents), at, connector_id, run_id
            )
            if checkpointed != 1:
                raise Fenced(f"run {run_id} is no longer the current run of {connector_id}")
            existing = {
                r[0]: ExistingDocument(r[1], DocStatus(r[2]), r[3])
                for r in await tx.fetch_all(sql.EXISTING_DOCUMENTS, connector_id, ids)
            }
            enqueue = plan_page(documents, existing)
            if enqueue:
                # Each payload is serialised exactly once, and only when it is written.
                await tx.executemany(
                    sql.UPSERT_DOCUMENT,
                    [
                        (connector_id, d.external_id, d.content_hash, payload_text(d), at, status)
                        for d in enqueue
                    ],
                )
            sample = None
            if rejected:
                run = await tx.fetch_one(sql.RUN_REJECTIONS, run_id)
                if run is not None:
                    sample = merge_rejections(run[1], int(run[0]) + 1, rejected)
            await tx.execute(
                sql.COUNT_PAGE, len(documents), len(enqueue), len(rejected), sample, note, run_id
            )
        return [d.external_id for d in enqueue]

    async def report(
        self, connector_id: str, run_id: str, *, now: datetime, waiting: Waiting | None
    ) -> bool:
        """Heartbeat of a running run; ``False`` (nothing written) if it is not current."""
        # One autocommit statement: atomic on its own.
        written = await self._db.execute(
            sql.REPORT,
            encode_dt(now),
            waiting.reason.value if waiting else None,
            encode_dt(waiting.until) if waiting else None,
            connector_id,
            run_id,
        )
        return written == 1

    # --- runs ---------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or ``None``."""
        row = await self._db.fetch_one(sql.GET_RUN, run_id)
        return None if row is None else run_from_row(row)

    async def list_runs(
        self, connector_id: str, *, limit: int = 100, before: str | None = None
    ) -> list[Run]:
        """A connector's runs, newest first, ids smaller than ``before``."""
        if before is None:
            rows = await self._db.fetch_all(sql.LIST_RUNS, connector_id, limit)
        else:
            rows = await self._db.fetch_all(sql.LIST_RUNS_BEFORE, connector_id, before, limit)
        return [run_from_row(r) for r in rows]

    # --- documents ----------------------------------------------------------------------

    async def get_document(self, connector_id: str, external_id: str) -> Document | None:
        """The document with its payload, or ``None``."""
        row = await self._db.fetch_one(sql.GET_DOCUMENT, connector_id, external_id)
        return None if row is None else document_from_row(row, with_payload=True)

    async def list_documents(
        self,
        connector_id: str,
        *,
        status: DocStatus | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[Document]:
        """Documents (without payload) ordered by external id, greater than ``after``."""
        params: list[Any] = []
        if status is not None:
            params.append(status.value)
        params.append(connector_id)
        if after is not None:
            params.append(after)
        params.append(limit)
        query = sql.list_documents(by_status=status is not None, after=after is not None)
        rows = await self._db.fetch_all(query, *params)
        return [document_from_row(r) for r in rows]

    async def document_counts(self, connector_id: str) -> dict[DocStatus, int]:
        """Number of documents per status (every status present, zero if none)."""
        statuses = dump_json([s.value for s in DocStatus])
        rows = await self._db.fetch_all(sql.DOCUMENT_COUNTS, connector_id, statuses)
        counts = {DocStatus(r[0]): int(r[1]) for r in rows}
        return {s: counts.get(s, 0) for s in DocStatus}

    async def pending_documents(
        self, *, after: tuple[str, str] | None = None, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """``(connector_id, external_id)`` of pending documents, ordered by that pair,
        greater than ``after``."""
        if after is None:
            rows = await self._db.fetch_all(sql.PENDING_DOCUMENTS, limit)
        else:
            rows = await self._db.fetch_all(sql.PENDING_DOCUMENTS_AFTER, *after, limit)
        return [(r[0], r[1]) for r in rows]

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
        """Compare-and-set ``pending → running`` under a lease; the claimed documents (with
        their payload unless ``with_payload`` is false), in the order of ``external_ids``."""
        if not external_ids:
            return []
        async with self._db.transaction() as tx:
            rows = await tx.fetch_all(
                sql.CLAIM_DOCUMENTS if with_payload else sql.CLAIM_DOCUMENTS_NO_PAYLOAD,
                lease_token,
                encode_dt(lease_until),
                encode_dt(now),
                connector_id,
                dump_json(list(external_ids)),
            )
        claimed = {r["external_id"]: document_from_row(r, with_payload=with_payload) for r in rows}
        return [claimed[e] for e in dict.fromkeys(external_ids) if e in claimed]

    async def finish_documents(
        self,
        connector_id: str,
        lease_token: str,
        results: Sequence[tuple[str, DocStatus, str | None]],
        *,
        now: datetime,
    ) -> int:
        """Record ``(external_id, indexed|failed, error)`` for documents still running under
        ``lease_token``; how many were written."""
        at = encode_dt(now)
        params: list[tuple[Any, ...]] = []
        for external_id, status, error in results:
            if status not in _FINISHED:
                raise ValueError(f"a finished document is indexed or failed, not {status}")
            params.append((status.value, error, at, connector_id, external_id, lease_token))
        if not params:
            return 0
        async with self._db.transaction() as tx:
            return await tx.executemany(sql.FINISH_DOCUMENT, params)

    async def extend_leases(self, connector_id: str, lease_token: str, until: datetime) -> int:
        """Push back the lease of documents running under ``lease_token``."""
        return await self._db.execute(
            sql.EXTEND_LEASES, encode_dt(until), connector_id, lease_token
        )

    async def release_expired_leases(self, now: datetime) -> list[tuple[str, str]]:
        """Return ``running`` documents whose lease ended at or before ``now`` to
        ``pending``; their ``(connector_id, external_id)``, sorted."""
        at = encode_dt(now)
        async with self._db.transaction() as tx:
            rows = await tx.fetch_all(sql.RELEASE_EXPIRED_LEASES, at, at)
        return sorted((r[0], r[1]) for r in rows)

    async def fail_documents(
        self,
        connector_id: str,
        statuses: Sequence[DocStatus],
        error: str,
        *,
        now: datetime,
    ) -> int:
        """Mark the connector's documents in ``statuses`` as ``failed`` with ``error``
        (their leases are dropped, so a worker still indexing one cannot finish it)."""
        if not statuses:
            return 0
        values = dump_json([s.value for s in statuses])
        return await self._db.execute(
            sql.FAIL_DOCUMENTS, error, encode_dt(now), values, connector_id
        )

    async def requeue_documents(
        self,
        connector_id: str,
        *,
        error: str | None = None,
        now: datetime,
        run_id: str | None = None,
    ) -> list[str]:
        """``failed → pending`` (attempts reset) for the connector's failed documents, only
        those with this ``error`` when given; their external ids, sorted. With ``run_id``,
        fenced: :class:`Fenced` (nothing written) unless it is the current run."""
        at = encode_dt(now)
        async with self._db.transaction() as tx:
            if run_id is not None:
                current = await tx.fetch_one(sql.IS_CURRENT_RUN, connector_id, run_id)
                if current is None:
                    raise Fenced(f"run {run_id} is no longer the current run of {connector_id}")
            if error is None:
                rows = await tx.fetch_all(sql.REQUEUE_DOCUMENTS, at, connector_id)
            else:
                rows = await tx.fetch_all(sql.REQUEUE_DOCUMENTS_WITH_ERROR, at, connector_id, error)
        return sorted(r[0] for r in rows)
