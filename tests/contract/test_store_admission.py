"""The store contract of admission control: counting and bulk-claiming what a scheduler tick
may start (due schedules and queued manual triggers), oldest first, on every backend.

Time is fixed (``T0`` and offsets); nothing sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from syncd import rules
from syncd.models import (
    Connector,
    ConnectorStatus,
    RunOutcome,
    RunTrigger,
    SyncStatus,
    Transition,
    new_id,
)
from syncd.store.base import StateRule, Store
from syncd.store.sqlite import SQLiteStore

from .factories import at, make_connector, start_run

CRON = "*/5 * * * *"


async def add(store: Store, **fields: Any) -> Connector:
    fields.setdefault("sync_schedule", CRON)
    return await store.create_connector(make_connector(**fields))


def admit(now: datetime, owner: str = "instance-a", stale_seconds: float = 3600) -> StateRule:
    """The scheduler's rule, with a fresh run id per connector."""
    stale_before = now - timedelta(seconds=stale_seconds)

    def change(c: Connector) -> Transition:
        return rules.admit(c, run_id=new_id(), owner=owner, now=now, stale_before=stale_before)

    return change


def started(results: list[tuple[Connector, Connector]]) -> list[str]:
    """Ids of the connectors whose claim started a run."""
    return [
        b.id for b, a in results if a.sync_status is SyncStatus.RUNNING and a.run_id != b.run_id
    ]


async def test_sync_queued_at_round_trips(store: Store) -> None:
    c = await add(store, sync_status=SyncStatus.QUEUED, sync_queued_at=at(-5))
    assert await store.get_connector(c.id) == c


async def test_count_admissible_counts_due_and_queued(store: Store) -> None:
    now = at(0)
    assert await store.count_admissible(now, limit=10) == 0
    await add(store, next_run_at=at(-60))
    await add(store, next_run_at=now, status=ConnectorStatus.ERROR)
    await add(store, sync_status=SyncStatus.QUEUED, sync_queued_at=at(-1), next_run_at=at(600))
    # Due and queued at once: counted once.
    await add(store, sync_status=SyncStatus.QUEUED, sync_queued_at=at(-1), next_run_at=at(-9))
    await add(store, next_run_at=at(-60), status=ConnectorStatus.PAUSED)
    await add(store, next_run_at=at(-60), status=ConnectorStatus.DELETING)
    await add(store, next_run_at=at(1))
    await add(store, next_run_at=None, sync_schedule=None)
    assert await store.count_admissible(now, limit=10) == 4
    assert await store.count_admissible(now, limit=3) == 3
    assert await store.count_admissible(at(-61), limit=10) == 2  # the queued ones


async def test_claim_due_serves_due_and_queued_by_age(store: Store) -> None:
    now = at(0)
    queued_late = await add(store, sync_status=SyncStatus.QUEUED, sync_queued_at=at(-5))
    due_early = await add(store, next_run_at=at(-30))
    queued_early = await add(store, sync_status=SyncStatus.QUEUED, sync_queued_at=at(-40))
    due_late = await add(store, next_run_at=at(-2))
    # Queued at -20 but due since -50: its age is the earlier of the two.
    both = await add(
        store, sync_status=SyncStatus.QUEUED, sync_queued_at=at(-20), next_run_at=at(-50)
    )
    await add(store, next_run_at=at(60))

    first = await store.claim_due(now, admit(now), limit=3)
    assert [b.id for b, _ in first] == [both.id, queued_early.id, due_early.id]
    assert started(first) == [both.id, queued_early.id, due_early.id]
    second = await store.claim_due(now, admit(now), limit=10)
    assert [b.id for b, _ in second] == [queued_late.id, due_late.id]
    assert await store.claim_due(now, admit(now), limit=10) == []
    assert await store.count_admissible(now, limit=10) == 0


async def test_claim_due_writes_the_claims_and_their_runs(store: Store) -> None:
    now = at(0)
    due = await add(store, next_run_at=at(-3600))
    queued = await add(store, sync_status=SyncStatus.QUEUED, sync_queued_at=at(-1))
    results = {b.id: a for b, a in await store.claim_due(now, admit(now), limit=5)}
    for c, trigger in ((due, RunTrigger.SCHEDULE), (queued, RunTrigger.MANUAL)):
        stored = await store.get_connector(c.id)
        assert stored == results[c.id]
        assert stored is not None and stored.run_id is not None
        assert stored.sync_status is SyncStatus.RUNNING
        assert stored.sync_queued_at is None
        assert (stored.sync_started_at, stored.sync_owner) == (now, "instance-a")
        run = await store.get_run(stored.run_id)
        assert run is not None
        assert (run.trigger, run.outcome, run.started_at) == (trigger, RunOutcome.RUNNING, now)
    stored_due = await store.get_connector(due.id)
    assert stored_due is not None and stored_due.next_run_at is not None
    assert stored_due.next_run_at > now  # missed fires run once


async def test_claim_due_young_run_advances_and_stale_run_is_taken_over(store: Store) -> None:
    now = at(0)
    young = await add(store, next_run_at=at(-10))
    young_run = await start_run(store, young.id, now=at(-100))
    stale = await add(store, next_run_at=at(-10))
    stale_run = await start_run(store, stale.id, now=at(-7200))
    results = await store.claim_due(now, admit(now), limit=5)
    assert started(results) == [stale.id]
    after_young = await store.get_connector(young.id)
    assert after_young is not None
    assert (after_young.run_id, after_young.sync_status) == (young_run, SyncStatus.RUNNING)
    assert after_young.next_run_at is not None and after_young.next_run_at > now
    old = await store.get_run(stale_run)
    assert old is not None and old.outcome is RunOutcome.INTERRUPTED
    after_stale = await store.get_connector(stale.id)
    assert after_stale is not None and after_stale.run_id not in (None, stale_run)
    new = await store.get_run(after_stale.run_id or "")
    assert new is not None and new.trigger is RunTrigger.STALE_LOCK


async def test_claim_due_not_due_rows_are_left_alone(store: Store) -> None:
    now = at(0)
    c = await add(store, next_run_at=at(-10))

    def refuse(_: Connector) -> Transition:
        raise rules.NotDue("no")

    assert await store.claim_due(now, refuse, limit=5) == [(c, c)]
    assert await store.get_connector(c.id) == c


async def test_claim_due_refuses_a_change_beyond_the_claim(store: Store) -> None:
    now = at(0)
    first = await add(store, next_run_at=at(-20))
    second = await add(store, next_run_at=at(-10))

    def rename(c: Connector) -> Transition:
        if c.id == second.id:
            return Transition(replace(c, name="renamed"))
        return admit(now)(c)

    with pytest.raises(ValueError):
        await store.claim_due(now, rename, limit=5)
    assert await store.get_connector(first.id) == first  # nothing written
    assert await store.get_connector(second.id) == second


async def test_claim_due_with_no_room_claims_nothing(store: Store) -> None:
    await add(store, next_run_at=at(-10))
    assert await store.claim_due(at(0), admit(at(0)), limit=0) == []


# --- two stores (two instances) claiming at once ---------------------------------------


@pytest.fixture
async def other_store(store: Store, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """A second store on the same database: another instance."""
    other: Store
    if isinstance(store, SQLiteStore):
        other = SQLiteStore(store.path)
    else:
        from syncd.store.postgres import PostgresStore

        other = PostgresStore(request.getfixturevalue("postgres_dsn"))
    await other.open()
    try:
        yield other
    finally:
        await other.close()


async def test_concurrent_claims_never_start_a_connector_twice(
    store: Store, other_store: Store
) -> None:
    now = at(0)
    ids = {(await add(store, next_run_at=at(-i), name=f"due-{i}")).id for i in range(1, 41)}
    ids |= {
        (await add(store, sync_status=SyncStatus.QUEUED, sync_queued_at=at(-i))).id
        for i in range(1, 11)
    }
    claims: list[list[str]] = []

    async def claim(s: Store, owner: str) -> None:
        mine: list[str] = []
        for _ in range(10):
            mine += started(await s.claim_due(now, admit(now, owner), limit=3))
        claims.append(mine)

    await asyncio.gather(
        claim(store, "a"), claim(other_store, "b"), claim(store, "a"), claim(other_store, "b")
    )
    everything = [cid for mine in claims for cid in mine]
    assert sorted(everything) == sorted(ids)  # each started exactly once
    for cid in ids:
        c = await store.get_connector(cid)
        assert c is not None and c.sync_status is SyncStatus.RUNNING
