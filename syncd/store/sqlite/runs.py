"""The runs of the SQLite store: the writes of a running crawl, fenced by its run id (each
page committed: the checkpoint, the documents the page's plan writes, tombstones marked and
the run's counts, in one transaction on the writer's thread; the run's heartbeat), and the
runs' history. Every statement lives in :mod:`syncd.store.sqlite.sql`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from syncd.errors import Fenced
from syncd.models import Crawl, DocOp, DocStatus, DocumentInput, Rejection, Run, Waiting
from syncd.rules import ExistingDocument, plan_page
from syncd.store.codec import dump_json, encode_dt, merge_rejections, payload_text, run_from_row
from syncd.store.sqlite import sql
from syncd.store.sqlite.connection import SQLiteDatabase

__all__ = ["SQLiteRuns"]


class SQLiteRuns:
    """The run verbs of the SQLite store, on the database it is given."""

    def __init__(self, db: SQLiteDatabase) -> None:
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
        """Upsert a crawled page and checkpoint the run in one transaction, fenced by
        ``run_id`` (see :meth:`syncd.store.Store.commit_page`). Returns the external ids to
        enqueue."""
        at = encode_dt(now)
        status = DocStatus.INDEXED.value if indexed else DocStatus.PENDING.value
        state = dump_json(dict(source_state))
        page_ids = [d.external_id for d in documents]
        ids = dump_json(page_ids)
        crawl_id = crawl.id if crawl is not None else None

        # The whole transaction runs on the writer's thread in one trip, the page's plan
        # (pure) included: a page commit is the store's hottest write, and it shares the
        # writer with the workers' claims and finishes.
        def write(conn: sqlite3.Connection) -> tuple[list[DocumentInput], list[str]]:
            checkpointed = conn.execute(
                sql.CHECKPOINT_PAGE,
                (
                    next_cursor,
                    state,
                    len(documents),
                    at,
                    crawl_id,
                    None if crawl is None else crawl.full,
                    connector_id,
                    run_id,
                ),
            ).rowcount
            if checkpointed != 1:
                raise Fenced(f"run {run_id} is no longer the current run of {connector_id}")
            existing = {
                r[0]: ExistingDocument(r[1], DocStatus(r[2]), r[3], DocOp(r[4]))
                for r in conn.execute(sql.EXISTING_DOCUMENTS, (connector_id, ids))
            }
            enqueue = plan_page(documents, existing)
            # One writer: what was read above is what the table holds, so the new documents
            # are inserted (and counted here, not by a trigger: migration 12) and the others
            # upserted. Each payload is serialised exactly once, and only when it is written.
            fresh = [d for d in enqueue if d.external_id not in existing]
            again = [d for d in enqueue if d.external_id in existing] if existing else []
            for statement, docs in ((sql.INSERT_DOCUMENT, fresh), (sql.UPSERT_DOCUMENT, again)):
                if docs:
                    conn.executemany(
                        statement,
                        [
                            (
                                connector_id,
                                d.external_id,
                                d.content_hash,
                                payload_text(d),
                                at,
                                status,
                            )
                            for d in docs
                        ],
                    )
            if fresh:
                conn.execute(sql.COUNT_INSERTED, (connector_id, status, len(fresh)))
            # What a full crawl saw, for its prune: one row for the page. An incremental
            # crawl never prunes and keeps nothing.
            if crawl is not None and crawl.full and page_ids:
                conn.execute(sql.SEEN_PAGE, (connector_id, crawl.id, ids))
            gone: list[str] = []
            if deletions:
                # A tombstone for an id the page also holds as a record is not a deletion.
                seen = set(page_ids)
                doomed = dump_json([e for e in dict.fromkeys(deletions) if e not in seen])
                target = DocStatus.DELETED if delete_at_once else DocStatus.PENDING
                rows = conn.execute(
                    sql.DELETE_IDS, (target.value, at, connector_id, doomed)
                ).fetchall()
                gone = sorted(r[0] for r in rows)
            sample = None
            if rejected:
                run = conn.execute(sql.RUN_REJECTIONS, (run_id,)).fetchone()
                if run is not None:
                    sample = merge_rejections(run[1], int(run[0]) + 1, rejected)
            conn.execute(
                sql.RUN_PAGE,
                (
                    len(documents),
                    len(enqueue),
                    len(rejected),
                    sample,
                    note,
                    len(gone),
                    filtered,
                    run_id,
                ),
            )
            return enqueue, gone

        enqueue, gone = await self._db.run_transaction(write)
        queued = [] if delete_at_once else gone
        return [d.external_id for d in enqueue] + queued

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

    # --- history -------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or ``None``."""
        row = await self._db.reader.fetch_one(sql.GET_RUN, run_id)
        return None if row is None else run_from_row(row)

    async def list_runs(
        self, connector_id: str, *, limit: int = 100, before: str | None = None
    ) -> list[Run]:
        """A connector's runs, newest first, ids smaller than ``before``."""
        if before is None:
            rows = await self._db.reader.fetch_all(sql.LIST_RUNS, connector_id, limit)
        else:
            rows = await self._db.reader.fetch_all(
                sql.LIST_RUNS_BEFORE, connector_id, before, limit
            )
        return [run_from_row(r) for r in rows]
