"""The connectors of the PostgreSQL store: created, read, listed with their counts, changed by
the state rules (with their run rows, and the prunes of their documents), claimed in bulk by
the scheduler, deleted; their secret state and their totals. Every statement lives in
:mod:`syncd.store.postgres.sql`.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    SyncStatus,
    Transition,
)
from syncd.rules.deletions import prune_confirmations
from syncd.store import codec
from syncd.store.base import PruneRule, StateRule
from syncd.store.claims import plan_claims
from syncd.store.postgres import sql
from syncd.store.postgres.connection import PostgresDatabase, PostgresTransaction, Record

__all__ = ["PostgresConnectors"]


class PostgresConnectors:
    """The connector verbs of the PostgreSQL store, on the database it is given."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db
        # The counted reads (the API's, the event stream's): unchanged rows decode once.
        self._counted_one = codec.DecodedRows(_counted)
        self._counted_page = codec.DecodedRows(_counted)

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
        self, connector_id: str, rule: StateRule, *, fail_documents: str | None = None
    ) -> tuple[Connector, Connector]:
        """Row-lock the connector, apply ``rule``, write it and its run rows: one
        transaction. :class:`NotFound` if missing; :class:`NameConflict` on a rename
        collision; whatever ``rule`` raises propagates and nothing is written."""
        async with self._db.transaction("update connector") as tx:
            row = await tx.fetch_one(sql.LOCK_CONNECTOR, connector_id)
            if row is None:
                raise NotFound()
            before = _connector(row)
            after = await self._write_transition(tx, connector_id, rule(before))
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
        self, connector_id: str, rule: PruneRule, *, unseen_by: str | None = None
    ) -> tuple[Connector, Connector, PruneResult]:
        """:meth:`mutate_connector` whose rule also sees the prune counts of crawl
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
                missed_before = prune_confirmations(before) - 1
                found = await tx.fetch_one(sql.PRUNE_COUNTS, connector_id, unseen_by, missed_before)
                assert found is not None  # an aggregate always has a row
                counts = PruneCounts(int(found["live"]), int(found["unseen"]), int(found["due"]))
            transition = rule(before, counts)
            after = await self._write_transition(tx, connector_id, transition)
            plan = transition.prune
            if completing:
                # The crawls that missed each document: counted only when the plan prunes.
                # One statement locks (in id order) and writes every document the crawl's end
                # writes: no document stays held but those the plan holds.
                counting = plan is not None and plan.action is not PruneAction.DELETE_HELD
                if counting or before.deletions_held > 0:
                    await tx.execute(sql.TALLY_MISSED, connector_id, unseen_by, counting)
                else:
                    await tx.execute(sql.RESET_MISSED, connector_id)
            elif plan is not None and plan.action is PruneAction.DELETE_HELD:
                # Deletes some held documents, then unmarks the others: both sets locked first.
                await tx.execute(sql.LOCK_HELD, connector_id)
            result = PruneResult()
            if plan is not None and (completing or plan.action is PruneAction.DELETE_HELD):
                result = await _prune(tx, connector_id, plan, after.updated_at)
            if completing:
                await tx.execute(sql.FORGET_CRAWLS, connector_id)
        return before, after, result

    async def _write_transition(
        self, tx: PostgresTransaction, connector_id: str, transition: Transition
    ) -> Connector:
        """Write a transition's connector (always the locked row, whatever id the rule put
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
                start.attempt,
            )
        for end in transition.ends:
            await tx.execute(
                sql.END_RUN,
                end.id,
                end.outcome.value,
                end.finished_at,
                end.error,
                end.end_reason,
                codec.warnings_text(end.warnings),
            )
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

    async def count_admissible(self, now: datetime, *, limit: int) -> int:
        """Connectors due or queued at ``now``, at most ``limit``."""
        return int(await self._db.fetch_value(sql.COUNT_ADMISSIBLE, now, limit) or 0)

    async def claim_due(
        self, now: datetime, rule: StateRule, *, limit: int
    ) -> list[tuple[Connector, Connector]]:
        """The bulk claim in one transaction (see :meth:`syncd.store.Store.claim_due`):
        ``FOR UPDATE SKIP LOCKED`` rows, the rule applied in Python, then one statement
        each for the connectors, the new runs and the ended runs."""
        if limit <= 0:
            return []
        async with self._db.transaction("claim due connectors") as tx:
            rows = await tx.fetch_all(sql.LOCK_ADMISSIBLE, now, limit)
            plan = plan_claims([_connector(r) for r in rows], rule)
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
                    [s.attempt for s in plan.starts],
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

    async def connector_totals(self) -> dict[tuple[ConnectorStatus, SyncStatus], int]:
        """Connectors per ``(status, sync_status)`` (every pair present)."""
        totals = {(s, y): 0 for s in ConnectorStatus for y in SyncStatus}
        for row in await self._db.reader.fetch_all(sql.CONNECTOR_TOTALS):
            totals[ConnectorStatus(row["status"]), SyncStatus(row["sync_status"])] = row["n"]
        return totals

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


async def _prune(
    tx: PostgresTransaction, connector_id: str, plan: PrunePlan, now: datetime
) -> PruneResult:
    """Apply a prune plan to the connector's documents (see ``Store.mutate_with_prune``)."""
    if plan.action is PruneAction.HOLD_UNSEEN:
        held = await tx.execute(sql.HOLD_CONFIRMED, connector_id, plan.confirmations)
        result = PruneResult(held=held, awaiting=plan.awaiting)
    else:
        status = DocStatus.DELETED if plan.delete_at_once else DocStatus.PENDING
        if plan.action is PruneAction.DELETE_UNSEEN:
            query, args = sql.DELETE_CONFIRMED, [plan.confirmations]
        else:
            query, args = sql.DELETE_HELD, []
        rows = await tx.fetch_all(query, connector_id, status.value, now, *args)
        ids = sorted(row[0] for row in rows)
        if plan.action is PruneAction.DELETE_HELD:
            # Those seen again since are no longer held.
            await tx.execute(sql.CLEAR_HELD, connector_id)
        if plan.delete_at_once:
            result = PruneResult(deleted=len(ids), awaiting=plan.awaiting)
        else:
            result = PruneResult(tuple(ids), awaiting=plan.awaiting)
    if plan.run_id is not None:
        await tx.execute(sql.RUN_PRUNED, plan.run_id, result.deleting, result.held, result.awaiting)
    return result


def _connector_args(c: Connector) -> list[Any]:
    """Parameters of ``sql.INSERT_CONNECTOR``: asyncpg takes native datetimes and, through
    the jsonb codec, Python values."""
    return list(codec.connector_to_row(c, dt=codec.identity, js=codec.identity).values())


def _counted(row: Record) -> tuple[Connector, dict[DocStatus, int]]:
    return _connector(row), codec.status_counts(row["document_counts"])


def _connector(row: Record) -> Connector:
    return codec.connector_from_row(row, dt=codec.identity, js=codec.identity)
