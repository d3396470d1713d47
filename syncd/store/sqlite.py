"""The embedded state store: one SQLite file (DESIGN.md §1).

Each method is its domain steps over the verbs of :class:`SQLiteDatabase`
(:mod:`syncd.store.sqlite_conn`: one connection in WAL mode, its lock, migrations and the
translation of driver errors); every statement lives in :mod:`syncd.store.sqlite_sql`.
"""

from __future__ import annotations

import sqlite3
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
    Crawl,
    DocOp,
    DocStatus,
    Document,
    DocumentInput,
    PruneAction,
    PruneCounts,
    PrunePlan,
    PruneResult,
    Rejection,
    Run,
    SyncStatus,
    Transition,
    Waiting,
)
from syncd.rules import ExistingDocument, plan_page
from syncd.store import sqlite_sql as sql
from syncd.store.base import Change, InstanceBeat, PruneChange
from syncd.store.claims import plan_claims
from syncd.store.codec import (
    DecodedRows,
    claim_values,
    connector_from_row,
    connector_to_row,
    decode_dt,
    document_from_row,
    dump_json,
    encode_dt,
    load_json,
    merge_rejections,
    payload_text,
    run_from_row,
)
from syncd.store.sqlite_conn import SQLiteDatabase, SQLiteSession

__all__ = ["SQLiteStore"]

_FINISHED = frozenset({DocStatus.INDEXED, DocStatus.FAILED, DocStatus.DELETED})


#: Largest page of connectors read on the event loop's thread (the API's default page + 1).
QUICK_LIST_LIMIT = 101


class SQLiteStore:
    """:class:`syncd.store.Store` on a SQLite file.

    ``path`` is a file path (its parent directory is created) or ``":memory:"``.
    ``busy_timeout`` is how many seconds a write waits for another process's write lock.
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = 10.0) -> None:
        self._db = SQLiteDatabase(path, busy_timeout=busy_timeout)
        # The counted reads (the API's, the event stream's): unchanged rows decode once.
        self._counted_one = DecodedRows(_counted)
        self._counted_page = DecodedRows(_counted)

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
        row = await self._db.reader.fetch_one(sql.GET_CONNECTOR, connector_id)
        return None if row is None else connector_from_row(row)

    async def get_connector_with_counts(
        self, connector_id: str
    ) -> tuple[Connector, dict[DocStatus, int]] | None:
        """The connector and its document counts (one statement), or ``None``."""
        row = await self._db.quick.fetch_one(sql.GET_CONNECTOR_COUNTED, connector_id)
        return None if row is None else self._counted_one(row)

    async def list_connectors(
        self, *, status: ConnectorStatus | None = None, limit: int = 100, after: str | None = None
    ) -> list[Connector]:
        """Connectors ordered by id, ids greater than ``after``, optionally of one status."""
        rows = await self._list_connectors(status, limit, after, counted=False)
        return [connector_from_row(r) for r in rows]

    async def list_connectors_with_counts(
        self, *, status: ConnectorStatus | None = None, limit: int = 100, after: str | None = None
    ) -> list[tuple[Connector, dict[DocStatus, int]]]:
        """:meth:`list_connectors`, each with its document counts (one statement)."""
        rows = await self._list_connectors(status, limit, after, counted=True)
        return [self._counted_page(r) for r in rows]

    async def _list_connectors(
        self, status: ConnectorStatus | None, limit: int, after: str | None, *, counted: bool
    ) -> list[Any]:
        params: list[Any] = []
        if status is not None:
            params.append(status.value)
        if after is not None:
            params.append(after)
        params.append(limit)
        query = sql.list_connectors(
            by_status=status is not None, after=after is not None, counted=counted
        )
        if counted and status is None and limit <= QUICK_LIST_LIMIT:
            # The API's page: a range of the primary key, bounded, read on the loop's thread.
            # (Other callers may walk every connector page after page: not on the loop.)
            return await self._db.quick.fetch_all(query, *params)
        return await self._db.reader.fetch_all(query, *params)

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
            after = await self._write_transition(tx, before, change(before))
            if fail_documents is not None:
                await tx.execute(
                    sql.FAIL_DOCUMENTS,
                    fail_documents,
                    encode_dt(after.updated_at),
                    dump_json([DocStatus.PENDING.value, DocStatus.RUNNING.value]),
                    connector_id,
                )
        return before, after

    async def mutate_with_prune(
        self, connector_id: str, change: PruneChange, *, unseen_by: str | None = None
    ) -> tuple[Connector, Connector, PruneResult]:
        """:meth:`mutate_connector` whose change also sees the prune counts of crawl
        ``unseen_by`` and whose transition's prune plan is applied in the same transaction
        (see :meth:`syncd.store.Store.mutate_with_prune`)."""
        async with self._db.transaction() as tx:
            row = await tx.fetch_one(sql.GET_CONNECTOR, connector_id)
            if row is None:
                raise NotFound()
            before = connector_from_row(row)
            # Only the completion of the connector's own crawl counts, and forgets the crawl.
            completing = unseen_by is not None and before.crawl_id == unseen_by
            counts = None
            if completing:
                found = await tx.fetch_one(sql.PRUNE_COUNTS, connector_id, unseen_by)
                assert found is not None  # an aggregate always has a row
                counts = PruneCounts(int(found[0]), int(found[1]))
            transition = change(before, counts)
            after = await self._write_transition(tx, before, transition)
            if completing and before.deletions_held:
                # The crawl recomputes what is held (documents are held only while the
                # connector's deletions_held says so: applying them unmarks the rest).
                await tx.execute(sql.CLEAR_HELD, connector_id)
            result = PruneResult()
            if transition.prune is not None:
                result = await self._prune(tx, connector_id, transition.prune, after.updated_at)
            if completing:
                await tx.execute(sql.FORGET_CRAWLS, connector_id)
        return before, after, result

    async def _prune(
        self, tx: SQLiteSession, connector_id: str, plan: PrunePlan, now: datetime
    ) -> PruneResult:
        at = encode_dt(now)
        if plan.action is PruneAction.HOLD_UNSEEN:
            held = await tx.execute(sql.HOLD_UNSEEN, connector_id, plan.crawl_id)
            result = PruneResult(held=held)
        else:
            status = DocStatus.DELETED if plan.delete_at_once else DocStatus.PENDING
            if plan.action is PruneAction.DELETE_UNSEEN:
                query, args = sql.DELETE_UNSEEN, [plan.crawl_id]
            else:
                query, args = sql.DELETE_HELD, []
            rows = await tx.fetch_all(query, status.value, at, connector_id, *args)
            ids = sorted(r[0] for r in rows)
            if plan.action is PruneAction.DELETE_HELD:
                # Those seen again since are no longer held.
                await tx.execute(sql.CLEAR_HELD, connector_id)
            result = (
                PruneResult(deleted=len(ids)) if plan.delete_at_once else PruneResult(tuple(ids))
            )
        if plan.run_id is not None:
            await tx.execute(sql.RUN_PRUNED, result.deleting, result.held, plan.run_id)
        return result

    async def _write_transition(
        self, tx: SQLiteSession, before: Connector, transition: Transition
    ) -> Connector:
        """Write a transition's connector and run rows; the connector as written."""
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
        return after

    async def delete_connector(self, connector_id: str) -> None:
        """Delete the connector with all its documents and runs (no-op if missing)."""
        async with self._db.transaction() as tx:
            await tx.execute(sql.DELETE_CONNECTOR_DOCUMENTS, connector_id)
            await tx.execute(sql.DELETE_CONNECTOR_RUNS, connector_id)
            # After the documents: their triggers count the deletions down first.
            await tx.execute(sql.DELETE_CONNECTOR_COUNTS, connector_id)
            await tx.execute(sql.DELETE_CONNECTOR, connector_id)

    async def due_connectors(self, now: datetime, *, limit: int = 100) -> list[Connector]:
        """Connectors with ``next_run_at <= now`` whose status is ``active`` or ``error``,
        earliest first."""
        rows = await self._db.fetch_all(sql.DUE_CONNECTORS, encode_dt(now), limit)
        return [connector_from_row(r) for r in rows]

    async def count_admissible(self, now: datetime, *, limit: int) -> int:
        """Connectors due or queued at ``now``, at most ``limit``."""
        found = await self._db.reader.fetch_value(
            sql.COUNT_ADMISSIBLE, now=encode_dt(now), limit=limit
        )
        return int(found or 0)

    async def claim_due(
        self, now: datetime, change: Change, *, limit: int
    ) -> list[tuple[Connector, Connector]]:
        """The bulk claim in one ``BEGIN IMMEDIATE`` transaction (see
        :meth:`syncd.store.Store.claim_due`): the write lock makes it exclusive."""
        if limit <= 0:
            return []
        async with self._db.transaction() as tx:
            rows = await tx.fetch_all(sql.ADMISSIBLE_CONNECTORS, now=encode_dt(now), limit=limit)
            plan = plan_claims([connector_from_row(r) for r in rows], change)
            if plan.written:
                await tx.executemany(
                    sql.CLAIM_CONNECTOR,
                    [_claim_values(c) for c in plan.written],
                )
            if plan.starts:
                await tx.executemany(
                    sql.INSERT_RUN,
                    [
                        (s.id, s.connector_id, s.trigger.value, encode_dt(s.started_at), s.owner)
                        for s in plan.starts
                    ],
                )
            if plan.ends:
                await tx.executemany(
                    sql.END_RUN,
                    [(e.outcome.value, encode_dt(e.finished_at), e.error, e.id) for e in plan.ends],
                )
        return plan.results

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
        crawl: Crawl | None = None,
        deletions: Sequence[str] = (),
        delete_at_once: bool = False,
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
            if enqueue:
                # Each payload is serialised exactly once, and only when it is written.
                conn.executemany(
                    sql.UPSERT_DOCUMENT,
                    [
                        (connector_id, d.external_id, d.content_hash, payload_text(d), at, status)
                        for d in enqueue
                    ],
                )
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
                sql.COUNT_PAGE,
                (len(documents), len(enqueue), len(rejected), sample, note, len(gone), run_id),
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

    # --- runs ---------------------------------------------------------------------------

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

    # --- documents ----------------------------------------------------------------------

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
        counts = {r[0]: int(r[1]) for r in rows}
        return {s: counts.get(s.value, 0) for s in DocStatus}

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
        # One statement, atomic on its own (RETURNING's rows are the rows it wrote): one trip
        # to the writer's thread, where a transaction would take three (BEGIN, the
        # statement, COMMIT), each waiting for a turn of a busy loop while holding the writer.
        rows = await self._db.fetch_all(
            sql.CLAIM_DOCUMENTS if with_payload else sql.CLAIM_DOCUMENTS_NO_PAYLOAD,
            lease_token,
            encode_dt(lease_until),
            encode_dt(now),
            connector_id,
            dump_json(list(external_ids)),
        )
        documents = (document_from_row(r, with_payload=with_payload) for r in rows)
        claimed = {d.external_id: d for d in documents}
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

    async def purge_deleted(self, before: datetime) -> int:
        """Remove ``deleted`` documents (tombstones) deleted before ``before``; how many."""
        async with self._db.transaction() as tx:
            return await tx.execute(sql.PURGE_DELETED, encode_dt(before))

    async def document_totals(self) -> dict[DocStatus, int]:
        """Documents of every connector per status (every status present, zero if none),
        summed from the counters."""
        rows = await self._db.reader.fetch_all(sql.DOCUMENT_TOTALS)
        counts = {r[0]: int(r[1]) for r in rows}
        return {s: counts.get(s.value, 0) for s in DocStatus}

    async def connector_totals(self) -> dict[tuple[ConnectorStatus, SyncStatus], int]:
        """Connectors per ``(status, sync_status)`` (every pair present, zero if none)."""
        totals = {(s, y): 0 for s in ConnectorStatus for y in SyncStatus}
        for r in await self._db.reader.fetch_all(sql.CONNECTOR_TOTALS):
            totals[ConnectorStatus(r[0]), SyncStatus(r[1])] = int(r[2])
        return totals

    # --- instances (GET /status) --------------------------------------------------------

    async def heartbeat_instance(self, owner: str, info: Mapping[str, Any], now: datetime) -> None:
        """Upsert the instance's heartbeat row."""
        async with self._db.transaction() as tx:
            await tx.execute(sql.HEARTBEAT_INSTANCE, owner, dump_json(dict(info)), encode_dt(now))

    async def list_instances(self, since: datetime) -> list[InstanceBeat]:
        """Instances whose heartbeat is newer than ``since``, by owner."""
        rows = await self._db.reader.fetch_all(sql.LIST_INSTANCES, encode_dt(since))
        return [
            InstanceBeat(owner, load_json(info), heartbeat_at)
            for owner, info, at in rows
            if (heartbeat_at := decode_dt(at)) is not None  # always: a NOT NULL column
        ]

    async def save_secret_state(
        self, connector_id: str, key: str, value: Mapping[str, Any] | None
    ) -> None:
        """Set or remove one key of the connector's ``secret_state``."""
        async with self._db.transaction() as tx:
            row = await tx.fetch_one(sql.GET_SECRET_STATE, connector_id)
            if row is None:
                return
            state = dict(load_json(row[0]) or {})
            if value is None:
                state.pop(key, None)
            else:
                state[key] = dict(value)
            await tx.execute(sql.SET_SECRET_STATE, dump_json(state), connector_id)

    async def remove_instance(self, owner: str) -> None:
        """Delete the instance's heartbeat row."""
        async with self._db.transaction() as tx:
            await tx.execute(sql.REMOVE_INSTANCE, owner)


def _claim_values(c: Connector) -> tuple[Any, ...]:
    """Parameters of ``sql.CLAIM_CONNECTOR``: the claim columns, then the id."""
    return (*claim_values(c), c.id)


def _counted(row: Any) -> tuple[Connector, dict[DocStatus, int]]:
    return connector_from_row(row), _counts(row)


def _counts(row: Any) -> dict[DocStatus, int]:
    """Every status's count from a row's ``document_counts`` JSON object (zero if absent)."""
    found = load_json(row["document_counts"]) or {}
    return {s: int(found.get(s.value, 0)) for s in DocStatus}
