"""The connectors of the SQLite store: created, read, listed with their counts, changed by
the state rules (with their run rows, and the prunes of their documents), claimed in bulk by
the scheduler, deleted; their secret state and their totals. Every statement lives in
:mod:`syncd.store.sqlite.sql`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from syncd.errors import NotFound
from syncd.models import (
    Connector,
    ConnectorStatus,
    DocStatus,
    PruneAction,
    PruneCounts,
    PrunePlan,
    PruneResult,
    RunEnd,
    SyncStatus,
    Transition,
)
from syncd.rules.deletions import prune_confirmations
from syncd.store.base import PruneRule, StateRule
from syncd.store.claims import plan_claims
from syncd.store.codec import (
    DecodedRows,
    claim_values,
    connector_from_row,
    connector_to_row,
    dump_json,
    encode_dt,
    load_json,
    status_counts,
    warnings_text,
)
from syncd.store.sqlite import sql
from syncd.store.sqlite.connection import SQLiteDatabase, SQLiteSession

__all__ = ["SQLiteConnectors"]

#: Largest page of connectors read on the event loop's thread (the API's default page + 1).
QUICK_LIST_LIMIT = 101


class SQLiteConnectors:
    """The connector verbs of the SQLite store, on the database it is given."""

    def __init__(self, db: SQLiteDatabase) -> None:
        self._db = db
        # The counted reads (the API's, the event stream's): unchanged rows decode once.
        self._counted_one = DecodedRows(_counted)
        self._counted_page = DecodedRows(_counted)

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
        self, connector_id: str, rule: StateRule, *, fail_documents: str | None = None
    ) -> tuple[Connector, Connector]:
        """Atomically read the connector, apply ``rule`` and write the result with its
        run rows (see :meth:`syncd.store.Store.mutate_connector`)."""
        async with self._db.transaction() as tx:
            row = await tx.fetch_one(sql.GET_CONNECTOR, connector_id)
            if row is None:
                raise NotFound()
            before = connector_from_row(row)
            after = await self._write_transition(tx, before, rule(before))
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
        self, connector_id: str, rule: PruneRule, *, unseen_by: str | None = None
    ) -> tuple[Connector, Connector, PruneResult]:
        """:meth:`mutate_connector` whose rule also sees the prune counts of crawl
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
                missed_before = prune_confirmations(before) - 1
                found = await tx.fetch_one(sql.PRUNE_COUNTS, connector_id, unseen_by, missed_before)
                assert found is not None  # an aggregate always has a row
                unseen = int(found[1])
                due = unseen if found[2] is None else int(found[2])
                counts = PruneCounts(int(found[0]), unseen, due)
            transition = rule(before, counts)
            after = await self._write_transition(tx, before, transition)
            plan = transition.prune
            if completing:
                # The crawls that missed each document: counted only when the plan prunes.
                counting = plan is not None and plan.action is not PruneAction.DELETE_HELD
                await tx.execute(sql.RESET_MISSED, connector_id, unseen_by, counting)
                if counting:
                    await tx.execute(sql.COUNT_MISSED, connector_id, unseen_by)
                if before.deletions_held:
                    # The crawl recomputes what is held (documents are held only while the
                    # connector's deletions_held says so: applying them unmarks the rest).
                    await tx.execute(sql.CLEAR_HELD, connector_id)
            result = PruneResult()
            if plan is not None and (completing or plan.action is PruneAction.DELETE_HELD):
                result = await self._prune(tx, connector_id, plan, after.updated_at)
            if completing:
                await tx.execute(sql.FORGET_CRAWLS, connector_id)
        return before, after, result

    async def _prune(
        self, tx: SQLiteSession, connector_id: str, plan: PrunePlan, now: datetime
    ) -> PruneResult:
        at = encode_dt(now)
        if plan.action is PruneAction.HOLD_UNSEEN:
            held = await tx.execute(sql.HOLD_CONFIRMED, connector_id, plan.confirmations)
            result = PruneResult(held=held, awaiting=plan.awaiting)
        else:
            status = DocStatus.DELETED if plan.delete_at_once else DocStatus.PENDING
            if plan.action is PruneAction.DELETE_UNSEEN:
                query, args = sql.DELETE_CONFIRMED, [plan.confirmations]
            else:
                query, args = sql.DELETE_HELD, []
            rows = await tx.fetch_all(query, status.value, at, connector_id, *args)
            ids = sorted(r[0] for r in rows)
            if plan.action is PruneAction.DELETE_HELD:
                # Those seen again since are no longer held.
                await tx.execute(sql.CLEAR_HELD, connector_id)
            awaiting = plan.awaiting
            result = (
                PruneResult(deleted=len(ids), awaiting=awaiting)
                if plan.delete_at_once
                else PruneResult(tuple(ids), awaiting=awaiting)
            )
        if plan.run_id is not None:
            await tx.execute(
                sql.RUN_PRUNED, result.deleting, result.held, result.awaiting, plan.run_id
            )
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
                start.attempt,
            )
        if transition.ends:
            await tx.executemany(
                sql.END_RUN,
                [_end_values(end) for end in transition.ends],
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

    async def count_admissible(self, now: datetime, *, limit: int) -> int:
        """Connectors due or queued at ``now``, at most ``limit``."""
        found = await self._db.reader.fetch_value(
            sql.COUNT_ADMISSIBLE, now=encode_dt(now), limit=limit
        )
        return int(found or 0)

    async def claim_due(
        self, now: datetime, rule: StateRule, *, limit: int
    ) -> list[tuple[Connector, Connector]]:
        """The bulk claim in one ``BEGIN IMMEDIATE`` transaction (see
        :meth:`syncd.store.Store.claim_due`): the write lock makes it exclusive."""
        if limit <= 0:
            return []
        async with self._db.transaction() as tx:
            rows = await tx.fetch_all(sql.ADMISSIBLE_CONNECTORS, now=encode_dt(now), limit=limit)
            plan = plan_claims([connector_from_row(r) for r in rows], rule)
            if plan.written:
                await tx.executemany(
                    sql.CLAIM_CONNECTOR,
                    [_claim_values(c) for c in plan.written],
                )
            if plan.starts:
                await tx.executemany(
                    sql.INSERT_RUN,
                    [
                        (
                            s.id,
                            s.connector_id,
                            s.trigger.value,
                            encode_dt(s.started_at),
                            s.owner,
                            s.attempt,
                        )
                        for s in plan.starts
                    ],
                )
            if plan.ends:
                await tx.executemany(
                    sql.END_RUN,
                    [_end_values(e) for e in plan.ends],
                )
        return plan.results

    async def connector_totals(self) -> dict[tuple[ConnectorStatus, SyncStatus], int]:
        """Connectors per ``(status, sync_status)`` (every pair present, zero if none)."""
        totals = {(s, y): 0 for s in ConnectorStatus for y in SyncStatus}
        for r in await self._db.reader.fetch_all(sql.CONNECTOR_TOTALS):
            totals[ConnectorStatus(r[0]), SyncStatus(r[1])] = int(r[2])
        return totals

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


def _claim_values(c: Connector) -> tuple[Any, ...]:
    """Parameters of ``sql.CLAIM_CONNECTOR``: the claim columns, then the id."""
    return (*claim_values(c), c.id)


def _counted(row: Any) -> tuple[Connector, dict[DocStatus, int]]:
    return connector_from_row(row), _counts(row)


def _counts(row: Any) -> dict[DocStatus, int]:
    """Every status's count from a row's ``document_counts`` JSON object (zero if absent)."""
    return status_counts(load_json(row["document_counts"]) or {})


def _end_values(end: RunEnd) -> tuple[Any, ...]:
    """The parameters of ``END_RUN`` for ``end``."""
    return (
        end.outcome.value,
        encode_dt(end.finished_at),
        end.error,
        end.end_reason,
        warnings_text(end.warnings),
        end.id,
    )
