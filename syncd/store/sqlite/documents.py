"""The documents of the SQLite store: a connector's documents read, listed and counted, the
pending ones listed to rebuild the queue, the indexing workers' writes (claims under a lease,
results, retries, lease renewals and sweeps, requeues), the purge of tombstones and the
totals. Every statement lives in :mod:`syncd.store.sqlite.sql`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from syncd.errors import Fenced
from syncd.models import ConnectorStatus, DocStatus, Document
from syncd.store.base import Claim
from syncd.store.codec import (
    decode_dt,
    document_from_row,
    dump_json,
    encode_dt,
    status_counts,
)
from syncd.store.sqlite import sql
from syncd.store.sqlite.connection import SQLiteDatabase

__all__ = ["SQLiteDocuments"]

_FINISHED = frozenset({DocStatus.INDEXED, DocStatus.FAILED, DocStatus.DELETED})


class SQLiteDocuments:
    """The document verbs of the SQLite store, on the database it is given."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self._db = db

    async def get_document(self, connector_id: str, external_id: str) -> Document | None:
        """The document with its payload, or ``None``."""
        row = await self._db.reader.fetch_one(sql.GET_DOCUMENT, connector_id, external_id)
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
        rows = await self._db.reader.fetch_all(query, *params)
        return [document_from_row(r) for r in rows]

    async def document_counts(self, connector_id: str) -> dict[DocStatus, int]:
        """Number of documents per status (every status present, zero if none): the
        counters the documents' triggers keep, not a count of the documents."""
        rows = await self._db.reader.fetch_all(sql.DOCUMENT_COUNTS, connector_id)
        return status_counts({r[0]: r[1] for r in rows})

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
        """Compare-and-set ``pending → running`` under a lease; the claimed documents (with
        their payload unless ``with_payload`` is false), in the order of ``external_ids``,
        with the connector's stamp read in the same transaction."""
        if not external_ids:
            return Claim([], None)
        query = sql.CLAIM_DOCUMENTS if with_payload else sql.CLAIM_DOCUMENTS_NO_PAYLOAD
        params = (
            lease_token,
            encode_dt(lease_until),
            encode_dt(now),
            connector_id,
            dump_json(list(external_ids)),
            encode_dt(now),
        )

        # The claim and the connector's stamp in one transaction, in one trip to the
        # writer's thread (RETURNING's rows are the rows the claim wrote).
        # Plain tuples, not the connection's sqlite3.Row: document_from_row reads by position,
        # and each Row is built on the writer's thread holding the interpreter lock.
        def claim(conn: sqlite3.Connection) -> tuple[list[Any], sqlite3.Row | None]:
            cursor = conn.cursor()
            cursor.row_factory = None
            rows = cursor.execute(query, params).fetchall()
            found = conn.execute(sql.CONNECTOR_STAMP, (connector_id,)).fetchone() if rows else None
            return rows, found

        rows, found = await self._db.run_transaction(claim)
        if not rows:
            return Claim([], None)
        status, updated_at = (None, None) if found is None else (found[0], decode_dt(found[1]))
        stamp = (
            None if status is None or updated_at is None else (ConnectorStatus(status), updated_at)
        )
        documents = (document_from_row(r, with_payload=with_payload) for r in rows)
        claimed = {d.external_id: d for d in documents}
        return Claim([claimed[e] for e in dict.fromkeys(external_ids) if e in claimed], stamp)

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
        # The last result of an id wins, as on PostgreSQL (the first write would clear the
        # lease and fence out the others).
        latest = {external_id: (status, error) for external_id, status, error in results}
        groups: dict[tuple[DocStatus, str | None], list[str]] = {}
        for external_id, outcome in latest.items():
            if outcome[0] not in _FINISHED:
                raise ValueError(
                    f"a finished document is indexed, failed or deleted, not {outcome[0]}"
                )
            groups.setdefault(outcome, []).append(external_id)
        params = [
            (status.value, error, at, connector_id, dump_json(ids), lease_token)
            for (status, error), ids in groups.items()
        ]
        if not params:
            return 0
        if len(params) == 1:
            # The usual batch (every document indexed): one statement, atomic on its own.
            return await self._db.execute(sql.FINISH_DOCUMENTS, *params[0])
        written = 0
        async with self._db.transaction() as tx:
            for args in params:
                written += await tx.execute(sql.FINISH_DOCUMENTS, *args)
        return written

    async def retry_documents(
        self,
        connector_id: str,
        lease_token: str,
        retries: Sequence[tuple[str, str, datetime]],
        *,
        now: datetime,
    ) -> int:
        """Transient failures back to pending, waiting (see ``Store.retry_documents``)."""
        groups: dict[tuple[str, str | None], list[str]] = {}
        for external_id, error, not_before in retries:
            groups.setdefault((error, encode_dt(not_before)), []).append(external_id)
        at = encode_dt(now)
        written = 0
        async with self._db.transaction() as tx:
            for (error, until), ids in groups.items():
                written += await tx.execute(
                    sql.RETRY_DOCUMENTS, error, until, at, connector_id, dump_json(ids), lease_token
                )
        return written

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
            rows += await tx.fetch_all(sql.RELEASE_DUE_RETRIES, at, at)
        return sorted((r[0], r[1]) for r in rows)

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

    async def purge_deleted(self, before: datetime) -> int:
        """Remove ``deleted`` documents (tombstones) deleted before ``before``; how many."""
        async with self._db.transaction() as tx:
            return await tx.execute(sql.PURGE_DELETED, encode_dt(before))

    async def document_totals(self) -> dict[DocStatus, int]:
        """Documents of every connector per status (every status present, zero if none),
        summed from the counters."""
        rows = await self._db.reader.fetch_all(sql.DOCUMENT_TOTALS)
        return status_counts({r[0]: r[1] for r in rows})
