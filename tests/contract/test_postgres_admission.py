"""The PostgreSQL side of the bulk claim that the shared contract cannot show: the queries
use the indexes, and a claim skips rows another transaction holds instead of waiting."""

from __future__ import annotations

import asyncpg
import pytest

from syncd import rules
from syncd.models import Connector, SyncStatus, Transition, new_id
from syncd.store.postgres import PostgresStore, sql

from .factories import at, make_connector


@pytest.fixture
def store(postgres_store: PostgresStore) -> PostgresStore:
    return postgres_store  # this module's tests are PostgreSQL's alone


def admit(c: Connector) -> Transition:
    now = at(0)
    return rules.admit(c, run_id=new_id(), owner="b", now=now, stale_before=at(-3600))


@pytest.mark.parametrize("query", ["COUNT_ADMISSIBLE", "LOCK_ADMISSIBLE"])
async def test_the_tick_queries_use_the_indexes(
    store: PostgresStore, admin: asyncpg.Connection[asyncpg.Record], query: str
) -> None:
    await admin.execute("SET enable_seqscan = off")
    rows = await admin.fetch(f"EXPLAIN {getattr(sql, query)}", at(0), 100)
    plan = "\n".join(r[0] for r in rows)
    assert "connectors_next_run_at_idx" in plan
    assert "connectors_sync_queued_at_idx" in plan


async def test_a_claim_skips_rows_locked_elsewhere_without_waiting(
    store: PostgresStore, admin: asyncpg.Connection[asyncpg.Record]
) -> None:
    held = await store.create_connector(
        make_connector(sync_schedule="* * * * *", next_run_at=at(-60))
    )
    free = await store.create_connector(
        make_connector(sync_schedule="* * * * *", next_run_at=at(-30))
    )
    async with admin.transaction():
        # Another instance's claim in flight: its row is locked.
        await admin.execute("SELECT 1 FROM connectors WHERE id = $1 FOR UPDATE", held.id)
        results = await store.claim_due(at(0), admit, limit=5)
        assert [b.id for b, _ in results] == [free.id]
    after = await store.get_connector(held.id)
    assert after is not None and after.sync_status is SyncStatus.IDLE
    assert [b.id for b, _ in await store.claim_due(at(0), admit, limit=5)] == [held.id]
