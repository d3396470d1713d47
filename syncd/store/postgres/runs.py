"""The runs of the PostgreSQL store: the writes of a running crawl, fenced by its run id (each
page committed: documents upserted, tombstones marked, the checkpoint and the run's counts, in
one transaction; the run's heartbeat), and the runs' history. Every statement lives in
:mod:`syncd.store.postgres.sql`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from syncd.errors import Fenced
from syncd.models import Crawl, DocStatus, DocumentInput, Rejection, Run, Waiting
from syncd.rules.documents import REQUEUE_ERROR, REQUEUE_STATUS
from syncd.store import codec
from syncd.store.postgres import sql
from syncd.store.postgres.connection import PostgresDatabase, Record

__all__ = ["PostgresRuns"]


class PostgresRuns:
    """The run verbs of the PostgreSQL store, on the database it is given."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

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
        crawl: Crawl | None = None,
        deletions: Sequence[str] = (),
        delete_at_once: bool = False,
        filtered: int = 0,
    ) -> list[str]:
        """Upsert one page and checkpoint it in one transaction fenced by ``run_id``
        (:class:`Fenced` otherwise); the external ids to enqueue."""
        # Last one wins for duplicate ids; sorted so that concurrent writers lock rows in the
        # same order (see sql.py).
        latest = {doc.external_id: doc for doc in documents}
        ids = sorted(latest)
        crawl_id = crawl.id if crawl is not None else None
        async with self._db.transaction("commit page") as tx:
            fenced = await tx.fetch_value(
                sql.CHECKPOINT_PAGE,
                connector_id,
                run_id,
                next_cursor,
                source_state,
                len(documents),
                now,
                crawl_id,
                None if crawl is None else crawl.full,
            )
            if fenced is None:
                raise Fenced(f"run {run_id} is not the current run of connector {connector_id}")
            # A tombstone for an id the page also holds as a record is not a deletion.
            doomed = sorted(set(deletions) - set(latest))
            if doomed and ids:
                await tx.execute(sql.LOCK_PAGE_DOCUMENTS, connector_id, sorted({*ids, *doomed}))
            enqueued: list[str] = []
            if ids:
                # The upsert's WHERE is rules.must_write, fed with the rule's own values.
                rows = await tx.fetch_all(
                    sql.UPSERT_DOCUMENTS,
                    connector_id,
                    ids,
                    [latest[i].content_hash for i in ids],
                    [codec.payload_text(latest[i]) for i in ids],
                    now,
                    REQUEUE_ERROR,
                    DocStatus.INDEXED.value if indexed else DocStatus.PENDING.value,
                    REQUEUE_STATUS.value,
                )
                enqueued = [row[0] for row in rows]
                # What a full crawl saw, for its prune: one row for the page. An incremental
                # crawl never prunes and keeps nothing.
                if crawl is not None and crawl.full:
                    await tx.execute(sql.SEEN_PAGE, connector_id, crawl.id, ids)
            gone: list[str] = []
            if doomed:
                target = DocStatus.DELETED if delete_at_once else DocStatus.PENDING
                rows = await tx.fetch_all(sql.DELETE_IDS, connector_id, target.value, now, doomed)
                gone = sorted(row[0] for row in rows)
            sample = None
            if rejected:
                run = await tx.fetch_one(sql.RUN_REJECTIONS, run_id)
                if run is not None:
                    sample = codec.merge_rejections(run[1], int(run[0]) + 1, rejected)
            await tx.execute(
                sql.RUN_PAGE,
                run_id,
                len(documents),
                len(enqueued),
                len(rejected),
                sample,
                note,
                len(gone),
                filtered,
            )
        return enqueued + ([] if delete_at_once else gone)

    async def report(
        self, connector_id: str, run_id: str, *, now: datetime, waiting: Waiting | None
    ) -> bool:
        """Heartbeat and waiting state of a running run; ``False`` if it is no longer current."""
        written = await self._db.execute(
            sql.REPORT,
            connector_id,
            run_id,
            now,
            None if waiting is None else waiting.reason.value,
            None if waiting is None else waiting.until,
        )
        return written > 0

    # --- history -------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or ``None``."""
        row = await self._db.reader.fetch_one(sql.GET_RUN, run_id)
        return None if row is None else _run(row)

    async def list_runs(
        self, connector_id: str, *, limit: int = 100, before: str | None = None
    ) -> list[Run]:
        """A connector's runs, newest first, ids smaller than ``before``."""
        rows = await self._db.reader.fetch_all(sql.LIST_RUNS, connector_id, before, limit)
        return [_run(row) for row in rows]


def _run(row: Record) -> Run:
    return codec.run_from_row(row, dt=codec.identity)
