"""The PostgreSQL state store, for production and several instances.

Each method is its domain steps over the verbs of :class:`PostgresDatabase`
(:mod:`syncd.store.postgres_conn`, which owns the pool, the migrations and the translation of
driver errors); every statement lives in :mod:`syncd.store.postgres_sql`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from syncd import rules
from syncd.errors import Fenced, NotFound
from syncd.models import (
    Connector,
    ConnectorStatus,
    Crawl,
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
from syncd.store import codec
from syncd.store import postgres_sql as sql
from syncd.store.base import Change, InstanceBeat, PruneChange
from syncd.store.claims import plan_claims
from syncd.store.postgres_conn import PostgresDatabase, PostgresTransaction, Record

__all__ = ["PostgresStore"]


class PostgresStore:
    """The :class:`~syncd.store.base.Store` on PostgreSQL, through an asyncpg pool.

    The options are those of :class:`~syncd.store.postgres_conn.PostgresDatabase`:
    ``statement_cache_size=0`` for a transaction-mode pooler, and the session's
    ``statement_timeout``, ``lock_timeout`` and ``idle_in_transaction_session_timeout`` in
    seconds (``0`` disables one, ``None`` leaves the server's value alone).
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
        self._db = PostgresDatabase(
            dsn,
            statement_cache_size=statement_cache_size,
            min_size=min_size,
            max_size=max_size,
            statement_timeout=statement_timeout,
            lock_timeout=lock_timeout,
            idle_in_transaction_timeout=idle_in_transaction_timeout,
            connect_timeout=connect_timeout,
            application_name=application_name,
        )
        # The counted reads (the API's, the event stream's): unchanged rows decode once.
        self._counted_one = codec.DecodedRows(_counted)
        self._counted_page = codec.DecodedRows(_counted)

    def __repr__(self) -> str:
        return f"PostgresStore({self._db.target!r})"

    # --- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Create the pool and apply pending migrations under an advisory lock."""
        await self._db.open()

    async def close(self) -> None:
        """Close the pool: wait a while for connections in use, then cut them."""
        await self._db.close()

    async def ping(self) -> None:
        """Raise :class:`StoreError` unless PostgreSQL answers."""
        await self._db.fetch_value(sql.PING)

    # --- connectors ---------------------------------------------------------------------

    async def create_connector(self, connector: Connector) -> Connector:
        """Insert a new connector; :class:`NameConflict` if the name is taken."""
        await self._db.execute(sql.INSERT_CONNECTOR, *_connector_args(connector))
        return connector

    async def get_connector(self, connector_id: str) -> Connector | None:
        """The connector, or ``None``."""
        row = await self._db.fetch_one(sql.GET_CONNECTOR, connector_id)
        return None if row is None else _connector(row)

    async def get_connector_with_counts(
        self, connector_id: str
    ) -> tuple[Connector, dict[DocStatus, int]] | None:
        """The connector and its document counts (one statement), or ``None``."""
        row = await self._db.reader.fetch_one(sql.GET_CONNECTOR_COUNTED, connector_id)
        return None if row is None else self._counted_one(row)

    async def list_connectors(
        self, *, status: ConnectorStatus | None = None, limit: int = 100, after: str | None = None
    ) -> list[Connector]:
        """Connectors ordered by id, ids greater than ``after``, optionally of one status."""
        rows = await self._db.fetch_all(
            sql.LIST_CONNECTORS, None if status is None else status.value, after, limit
        )
        return [_connector(row) for row in rows]

    async def list_connectors_with_counts(
        self, *, status: ConnectorStatus | None = None, limit: int = 100, after: str | None = None
    ) -> list[tuple[Connector, dict[DocStatus, int]]]:
        """:meth:`list_connectors`, each with its document counts (one statement)."""
        rows = await self._db.reader.fetch_all(
            sql.LIST_CONNECTORS_COUNTED, None if status is None else status.value, after, limit
        )
        return [self._counted_page(row) for row in rows]

    async def mutate_connector(
        self, connector_id: str, change: Change, *, fail_documents: str | None = None
    ) -> tuple[Connector, Connector]:
        """Row-lock the connector, apply ``change``, write it and its run rows: one
        transaction. :class:`NotFound` if missing; :class:`NameConflict` on a rename
        collision; whatever ``change`` raises propagates and nothing is written."""
        async with self._db.transaction("update connector") as tx:
            row = await tx.fetch_one(sql.LOCK_CONNECTOR, connector_id)
            if row is None:
                raise NotFound()
            before = _connector(row)
            after = await self._write_transition(tx, connector_id, change(before))
            if fail_documents is not None:
                await tx.execute(
                    sql.FAIL_DOCUMENTS,
                    connector_id,
                    [DocStatus.PENDING.value, DocStatus.RUNNING.value],
                    fail_documents,
                    after.updated_at,
                )
        return before, after

    async def mutate_with_prune(
        self, connector_id: str, change: PruneChange, *, unseen_by: str | None = None
    ) -> tuple[Connector, Connector, PruneResult]:
        """:meth:`mutate_connector` whose change also sees the prune counts of crawl
        ``unseen_by`` and whose prune plan is applied in the same transaction."""
        async with self._db.transaction("prune documents") as tx:
            row = await tx.fetch_one(sql.LOCK_CONNECTOR, connector_id)
            if row is None:
                raise NotFound()
            before = _connector(row)
            # Only the completion of the connector's own crawl counts, and forgets the crawl.
            completing = unseen_by is not None and before.crawl_id == unseen_by
            counts = None
            if completing:
                found = await tx.fetch_one(sql.PRUNE_COUNTS, connector_id, unseen_by)
                assert found is not None  # an aggregate always has a row
                counts = PruneCounts(int(found["live"]), int(found["unseen"]))
            transition = change(before, counts)
            after = await self._write_transition(tx, connector_id, transition)
            unmark = completing and before.deletions_held > 0
            if (lock := _prune_lock(transition.prune, unmark=unmark)) is not None:
                await tx.execute(lock[0], connector_id, *lock[1])
            if unmark:
                # The crawl recomputes what is held (documents are held only while the
                # connector's deletions_held says so: applying them unmarks the rest).
                await tx.execute(sql.CLEAR_HELD, connector_id)
            result = PruneResult()
            if transition.prune is not None:
                result = await _prune(tx, connector_id, transition.prune, after.updated_at)
            if completing:
                await tx.execute(sql.FORGET_CRAWLS, connector_id)
        return before, after, result

    async def _write_transition(
        self, tx: PostgresTransaction, connector_id: str, transition: Transition
    ) -> Connector:
        """Write a transition's connector (always the locked row, whatever id the change put
        in the record) and run rows; the connector as given."""
        after = transition.connector
        values = codec.connector_to_row(after, dt=codec.identity, js=codec.identity)
        await tx.execute(
            sql.UPDATE_CONNECTOR,
            connector_id,
            *(values[c] for c in sql.MUTABLE_CONNECTOR_COLUMNS),
        )
        if (start := transition.start) is not None:
            await tx.execute(
                sql.INSERT_RUN,
                start.id,
                start.connector_id,
                start.trigger.value,
                start.started_at,
                start.owner,
            )
        for end in transition.ends:
            await tx.execute(sql.END_RUN, end.id, end.outcome.value, end.finished_at, end.error)
        return after

    async def delete_connector(self, connector_id: str) -> None:
        """Delete the connector with all its documents and runs (no-op if missing)."""
        async with self._db.transaction("delete connector") as tx:
            # The connector's row first, like every other writer of it and its documents
            # (a page commit, a mutation): the same lock order, and no page commit in between.
            await tx.execute(sql.LOCK_CONNECTOR, connector_id)
            await tx.execute(sql.DELETE_CONNECTOR_DOCUMENTS, connector_id)
            # After the documents: every delta their writers committed is visible by now.
            await tx.execute(sql.DELETE_CONNECTOR_COUNTS, connector_id)
            await tx.execute(sql.DELETE_CONNECTOR, connector_id)

    async def due_connectors(self, now: datetime, *, limit: int = 100) -> list[Connector]:
        """Active or errored connectors with ``next_run_at <= now``, earliest first (an index
        range scan on ``next_run_at``)."""
        rows = await self._db.fetch_all(sql.DUE_CONNECTORS, now, limit)
        return [_connector(row) for row in rows]

    async def count_admissible(self, now: datetime, *, limit: int) -> int:
        """Connectors due or queued at ``now``, at most ``limit``."""
        return int(await self._db.fetch_value(sql.COUNT_ADMISSIBLE, now, limit) or 0)

    async def claim_due(
        self, now: datetime, change: Change, *, limit: int
    ) -> list[tuple[Connector, Connector]]:
        """The bulk claim in one transaction (see :meth:`syncd.store.Store.claim_due`):
        ``FOR UPDATE SKIP LOCKED`` rows, the rule applied in Python, then one statement
        each for the connectors, the new runs and the ended runs."""
        if limit <= 0:
            return []
        async with self._db.transaction("claim due connectors") as tx:
            rows = await tx.fetch_all(sql.LOCK_ADMISSIBLE, now, limit)
            plan = plan_claims([_connector(r) for r in rows], change)
            if plan.written:
                values = [codec.claim_values(c, dt=codec.identity) for c in plan.written]
                await tx.execute(
                    sql.CLAIM_CONNECTORS,
                    [c.id for c in plan.written],
                    *(list(column) for column in zip(*values, strict=True)),
                )
            if plan.starts:
                await tx.execute(
                    sql.INSERT_RUNS,
                    [s.id for s in plan.starts],
                    [s.connector_id for s in plan.starts],
                    [s.trigger.value for s in plan.starts],
                    [s.started_at for s in plan.starts],
                    [s.owner for s in plan.starts],
                )
            if plan.ends:
                await tx.execute(
                    sql.END_RUNS,
                    [e.id for e in plan.ends],
                    [e.outcome.value for e in plan.ends],
                    [e.finished_at for e in plan.ends],
                    [e.error for e in plan.ends],
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
        """Upsert one page and checkpoint it in one transaction fenced by ``run_id``
        (:class:`Fenced` otherwise); the external ids to enqueue."""
        # Last one wins for duplicate ids; sorted so that concurrent writers lock rows in the
        # same order (see postgres_sql).
        latest = {doc.external_id: doc for doc in documents}
        ids = sorted(latest)
        crawl_id = crawl.id if crawl is not None else None
        async with self._db.transaction("commit page") as tx:
            fenced = await tx.fetch_value(
                sql.FENCE_PAGE,
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
                    rules.REQUEUE_ERROR,
                    DocStatus.INDEXED.value if indexed else DocStatus.PENDING.value,
                    rules.REQUEUE_STATUS.value,
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

    # --- runs ---------------------------------------------------------------------------

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

    # --- documents ----------------------------------------------------------------------

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
        return _counts({row["status"]: row["n"] for row in rows})

    async def pending_documents(
        self, *, after: tuple[str, str] | None = None, limit: int = 1000
    ) -> list[tuple[str, str]]:
        """``(connector_id, external_id)`` of pending documents after ``after``, in order."""
        if after is None:
            rows = await self._db.fetch_all(sql.PENDING_DOCUMENTS, limit)
        else:
            rows = await self._db.fetch_all(sql.PENDING_DOCUMENTS_AFTER, limit, *after)
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
        rows = await self._db.fetch_all(
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

    async def extend_leases(self, connector_id: str, lease_token: str, until: datetime) -> int:
        """Push back the lease of documents running under ``lease_token``."""
        return await self._db.execute(sql.EXTEND_LEASES, connector_id, lease_token, until)

    async def release_expired_leases(self, now: datetime) -> list[tuple[str, str]]:
        """Return running documents whose lease expired to ``pending``; their ids."""
        rows = await self._db.fetch_all(sql.RELEASE_EXPIRED_LEASES, now)
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
        return await self._db.execute(
            sql.FAIL_DOCUMENTS, connector_id, [s.value for s in statuses], error, now
        )

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
        return _counts({row["status"]: row["n"] for row in rows})

    async def connector_totals(self) -> dict[tuple[ConnectorStatus, SyncStatus], int]:
        """Connectors per ``(status, sync_status)`` (every pair present)."""
        totals = {(s, y): 0 for s in ConnectorStatus for y in SyncStatus}
        for row in await self._db.reader.fetch_all(sql.CONNECTOR_TOTALS):
            totals[ConnectorStatus(row["status"]), SyncStatus(row["sync_status"])] = row["n"]
        return totals

    # --- instances (GET /status) --------------------------------------------------------

    async def heartbeat_instance(self, owner: str, info: Mapping[str, Any], now: datetime) -> None:
        """Upsert the instance's heartbeat row."""
        await self._db.execute(sql.HEARTBEAT_INSTANCE, owner, codec.dump_json(dict(info)), now)

    async def list_instances(self, since: datetime) -> list[InstanceBeat]:
        """Instances whose heartbeat is newer than ``since``, by owner."""
        rows = await self._db.fetch_all(sql.LIST_INSTANCES, since)
        return [
            InstanceBeat(row["owner"], codec.load_json(row["info"]), row["heartbeat_at"])
            for row in rows
        ]

    async def save_secret_state(
        self, connector_id: str, key: str, value: Mapping[str, Any] | None
    ) -> None:
        """Set or remove one key of the connector's ``secret_state`` (row-locked)."""
        async with self._db.transaction("save secret state") as tx:
            current = await tx.fetch_value(sql.GET_SECRET_STATE, connector_id)
            if current is None:
                return
            state = dict(current)
            if value is None:
                state.pop(key, None)
            else:
                state[key] = dict(value)
            await tx.execute(sql.SET_SECRET_STATE, connector_id, state)

    async def remove_instance(self, owner: str) -> None:
        """Delete the instance's heartbeat row."""
        await self._db.execute(sql.REMOVE_INSTANCE, owner)


def _prune_lock(plan: PrunePlan | None, *, unmark: bool) -> tuple[str, list[Any]] | None:
    """The statement (and its parameters after the connector id) that locks up front, in id
    order, the documents a prune writes in more than one statement (see
    ``sql.LOCK_HELD``); ``None`` when it writes them in one statement or none. ``unmark``:
    the held documents are unmarked before ``plan`` is applied."""
    if plan is None:
        return None
    if plan.action is PruneAction.DELETE_HELD:
        # Deletes some held documents, then unmarks the others.
        return sql.LOCK_HELD, []
    if unmark:
        return sql.LOCK_HELD_OR_UNSEEN, [plan.crawl_id]
    return None


async def _prune(
    tx: PostgresTransaction, connector_id: str, plan: PrunePlan, now: datetime
) -> PruneResult:
    """Apply a prune plan to the connector's documents (see ``Store.mutate_with_prune``)."""
    if plan.action is PruneAction.HOLD_UNSEEN:
        held = await tx.execute(sql.HOLD_UNSEEN, connector_id, plan.crawl_id)
        result = PruneResult(held=held)
    else:
        status = DocStatus.DELETED if plan.delete_at_once else DocStatus.PENDING
        if plan.action is PruneAction.DELETE_UNSEEN:
            query, args = sql.DELETE_UNSEEN, [plan.crawl_id]
        else:
            query, args = sql.DELETE_HELD, []
        rows = await tx.fetch_all(query, connector_id, status.value, now, *args)
        ids = sorted(row[0] for row in rows)
        if plan.action is PruneAction.DELETE_HELD:
            # Those seen again since are no longer held.
            await tx.execute(sql.CLEAR_HELD, connector_id)
        result = PruneResult(deleted=len(ids)) if plan.delete_at_once else PruneResult(tuple(ids))
    if plan.run_id is not None:
        await tx.execute(sql.RUN_PRUNED, plan.run_id, result.deleting, result.held)
    return result


def _connector_args(c: Connector) -> list[Any]:
    """Parameters of ``sql.INSERT_CONNECTOR``: asyncpg takes native datetimes and, through
    the jsonb codec, Python values."""
    return list(codec.connector_to_row(c, dt=codec.identity, js=codec.identity).values())


def _counts(found: Mapping[str, Any]) -> dict[DocStatus, int]:
    """Every status's count from sums by status value (zero if absent)."""
    return {s: int(found.get(s.value, 0)) for s in DocStatus}


def _counted(row: Record) -> tuple[Connector, dict[DocStatus, int]]:
    return _connector(row), _counts(row["document_counts"])


def _connector(row: Record) -> Connector:
    return codec.connector_from_row(row, dt=codec.identity, js=codec.identity)


def _run(row: Record) -> Run:
    return codec.run_from_row(row, dt=codec.identity)


def _document(row: Record, *, with_payload: bool = False) -> Document:
    return codec.document_from_row(row, with_payload=with_payload, dt=codec.identity)
