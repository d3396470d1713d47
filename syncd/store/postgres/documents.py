"""The documents of the PostgreSQL store: a connector's documents read, listed and counted,
the pending ones listed to rebuild the queue, the indexing workers' writes (claims under a
lease, results, retries, lease renewals and sweeps, requeues), the purge of tombstones and the
totals. Every statement lives in :mod:`syncd.store.postgres.sql`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from syncd.errors import Fenced
from syncd.models import ConnectorStatus, DocStatus, Document
from syncd.store import codec
from syncd.store.base import Claim
from syncd.store.postgres import sql
from syncd.store.postgres.connection import PostgresDatabase, Record

__all__ = ["PostgresDocuments"]


class PostgresDocuments:
    """The document verbs of the PostgreSQL store, on the database it is given."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def get_document(self, connector_id: str, external_id: str) -> Document | None:
        """The document with its payload, or ``None``."""
        row = await self._db.reader.fetch_one(sql.GET_DOCUMENT, connector_id, external_id)
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
        rows = await self._db.reader.fetch_all(query, *args)
        return [_document(row) for row in rows]

    async def document_counts(self, connector_id: str) -> dict[DocStatus, int]:
        """Number of documents per status (every status present), summed from the count
        deltas the documents' triggers append, not counted from the documents."""
        rows = await self._db.reader.fetch_all(sql.DOCUMENT_COUNTS, connector_id)
        return codec.status_counts({row["status"]: row["n"] for row in rows})

    async def pending_documents(
        self, *, after: tuple[str, str] | None = None, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """``(connector_id, external_id)`` of pending documents after ``after``, in order."""
        if after is None:
            rows = await self._db.fetch_all(sql.PENDING_DOCUMENTS, limit)
        else:
            rows = await self._db.fetch_all(sql.PENDING_DOCUMENTS_AFTER, limit, *after)
        return [(row[0], row[1]) for row in rows]

    async def claim_for_delivery(
        self,
        connector_id: str,
        external_ids: Sequence[str],
        *,
        lease_token: str,
        lease_until: datetime,
        now: datetime,
        with_payload: bool = True,
    ) -> Claim:
        """``pending → running`` under a lease for those still pending; them, with their
        payload unless ``with_payload`` is false, and the connector's stamp read by the same
        statement."""
        if not external_ids:
            return Claim([], None)
        rows = await self._db.fetch_all(
            sql.CLAIM_DOCUMENTS if with_payload else sql.CLAIM_DOCUMENTS_NO_PAYLOAD,
            connector_id,
            list(external_ids),
            lease_token,
            lease_until,
            now,
        )
        if not rows:
            return Claim([], None)
        status, updated_at = rows[0][-2], rows[0][-1]
        stamp = None if status is None else (ConnectorStatus(status), updated_at)
        return Claim([_document(row, with_payload=with_payload) for row in rows], stamp)

    async def finish_documents(
        self,
        connector_id: str,
        lease_token: str,
        results: Sequence[tuple[str, DocStatus, str | None]],
        *,
        now: datetime,
    ) -> int:
        """Record indexing results of documents still running under ``lease_token``."""
        # The last result of an id wins; ids in order, as every multi-row write locks them.
        latest = {external_id: (status, error) for external_id, status, error in results}
        if not latest:
            return 0
        ids = sorted(latest)
        return await self._db.execute(
            sql.FINISH_DOCUMENTS,
            connector_id,
            lease_token,
            now,
            ids,
            [latest[i][0].value for i in ids],
            [latest[i][1] for i in ids],
        )

    async def retry_documents(
        self,
        connector_id: str,
        lease_token: str,
        retries: Sequence[tuple[str, str, datetime]],
        *,
        now: datetime,
    ) -> int:
        """Transient failures back to pending, waiting (see ``Store.retry_documents``)."""
        latest = {external_id: (error, until) for external_id, error, until in retries}
        if not latest:
            return 0
        ids = sorted(latest)
        return await self._db.execute(
            sql.RETRY_DOCUMENTS,
            connector_id,
            lease_token,
            now,
            ids,
            [latest[i][0] for i in ids],
            [latest[i][1] for i in ids],
        )

    async def extend_leases(self, connector_id: str, lease_token: str, until: datetime) -> int:
        """Push back the lease of documents running under ``lease_token``."""
        return await self._db.execute(sql.EXTEND_LEASES, connector_id, lease_token, until)

    async def release_expired_leases(self, now: datetime) -> list[tuple[str, str]]:
        """Return running documents whose lease expired to ``pending``; their ids."""
        rows = await self._db.fetch_all(sql.RELEASE_EXPIRED_LEASES, now)
        rows += await self._db.fetch_all(sql.RELEASE_DUE_RETRIES, now)
        return sorted((row[0], row[1]) for row in rows)

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
        if run_id is None:
            rows = await self._db.fetch_all(sql.REQUEUE_DOCUMENTS, connector_id, error, now)
        else:
            async with self._db.transaction("requeue documents") as tx:
                if await tx.fetch_value(sql.LOCK_CURRENT_RUN, connector_id, run_id) is None:
                    raise Fenced(f"run {run_id} is not the current run of connector {connector_id}")
                rows = await tx.fetch_all(sql.REQUEUE_DOCUMENTS, connector_id, error, now)
        return sorted(row[0] for row in rows)

    async def purge_deleted(self, before: datetime) -> int:
        """Remove ``deleted`` documents (tombstones) deleted before ``before``; how many."""
        return await self._db.execute(sql.PURGE_DELETED, before)

    async def document_totals(self) -> dict[DocStatus, int]:
        """Documents of every connector per status (every status present), summed from the
        count deltas."""
        rows = await self._db.reader.fetch_all(sql.DOCUMENT_TOTALS)
        return codec.status_counts({row["status"]: row["n"] for row in rows})


def _document(row: Record, *, with_payload: bool = False) -> Document:
    return codec.document_from_row(row, with_payload=with_payload, dt=codec.identity)
