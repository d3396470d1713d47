"""Admission control (``[sync] max_concurrent_runs``) on both backend pairs: a tick starts at
most the free slots, oldest first; a manual trigger without a free slot is queued, starts
when a slot frees (here or in another instance), survives a restart, and can be aborted,
deleted or paused away. Runs are held by a hanging source; nothing sleeps."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from syncd import scheduler as scheduler_module
from syncd.daemon import Daemon
from syncd.errors import Conflict
from syncd.models import (
    Connector,
    ConnectorStatus,
    RunOutcome,
    RunTrigger,
    SyncStatus,
    Transition,
    utcnow,
)
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.sourceserver import SourceServer


def slots(n: int) -> dict[str, dict[str, object]]:
    return {"sync": {"max_concurrent_runs": n}}


async def make_due(daemon: Daemon, connector_id: str, at: datetime) -> None:
    """Put ``next_run_at`` at ``at`` (in the past), as if the daemon had been down."""

    def change(c: Connector) -> Transition:
        return Transition(replace(c, next_run_at=at))

    await daemon.store.mutate_connector(connector_id, change)


async def add(daemon: Daemon, source: SourceServer, name: str, **extra: object) -> Connector:
    return await daemon.create_connector(
        {"name": name, "source": http_source(source), **extra}  # type: ignore[dict-item]
    )


async def synced(daemon: Daemon, connector_id: str) -> Connector:
    """Wait until the connector's last run succeeded and it is idle again."""
    return await daemon.wait_connector(
        connector_id, lambda c: c.last_synced_at is not None and c.sync_status is SyncStatus.IDLE
    )


async def runs_of(daemon: Daemon, connector_id: str) -> list[tuple[RunTrigger, RunOutcome]]:
    runs, _ = await daemon.list_runs(connector_id)
    return [(r.trigger, r.outcome) for r in runs]


async def first_started_at(daemon: Daemon, connector_id: str) -> datetime:
    runs, _ = await daemon.list_runs(connector_id)
    return runs[-1].started_at


async def test_tick_starts_the_free_slots_earliest_first_and_freed_slots_refill(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    d = make_any_daemon(**slots(2))
    await d.start()
    source.hang_on(None)
    now = utcnow()
    made = [await add(d, source, f"c{i}", sync_schedule="*/5 * * * *") for i in range(4)]
    # Due in the order c2, c0, c3, c1.
    for c, hours in zip(made, (3, 1, 4, 2), strict=True):
        await make_due(d, c.id, now - timedelta(hours=hours))
    started = await d.tick()
    assert len(started) == 2
    assert sorted(d.running_syncs) == sorted([made[2].id, made[0].id])
    assert await d.tick() == []  # no free slot: the others wait, still due
    waiting = await d.get_connector(made[3].id)
    assert waiting.sync_status is SyncStatus.IDLE and waiting.next_run_at is not None
    assert waiting.next_run_at < now
    source.release()
    # Each freed slot is filled at once (no tick is called here; the interval is an hour).
    for c in made:
        await synced(d, c.id)
        assert await runs_of(d, c.id) == [(RunTrigger.SCHEDULE, RunOutcome.SUCCEEDED)]
    starts = [await first_started_at(d, c.id) for c in made]
    assert max(starts[0], starts[2]) <= min(starts[1], starts[3])


async def test_a_tick_claims_in_batches_and_young_runs_take_no_slot(
    make_any_daemon: DaemonFactory, source: SourceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_module, "CLAIM_BATCH", 2)
    d = make_any_daemon(**slots(4))
    await d.start()
    source.hang_on(None)
    now = utcnow()
    busy = await add(d, source, "busy", sync_schedule="*/5 * * * *")
    assert await d.trigger_sync(busy.id) is not None
    await make_due(d, busy.id, now - timedelta(hours=9))  # the oldest due, but running
    made = [await add(d, source, f"c{i}", sync_schedule="*/5 * * * *") for i in range(5)]
    for i, c in enumerate(made):
        await make_due(d, c.id, now - timedelta(hours=5 - i))
    started = await d.tick()
    assert len(started) == 3  # the free slots, over several batches
    assert sorted(d.running_syncs) == sorted([busy.id, *(c.id for c in made[:3])])
    advanced = await d.get_connector(busy.id)
    assert advanced.next_run_at is not None and advanced.next_run_at > now
    source.release()
    for c in made:
        await synced(d, c.id)


async def test_queued_trigger_waits_for_a_slot_and_then_runs(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    d = make_any_daemon(**slots(1))
    await d.start()
    source.hang_on(None)
    first = await add(d, source, "first")
    second = await add(d, source, "second")
    run_id = await d.trigger_sync(first.id)
    assert run_id is not None
    assert await d.trigger_sync(second.id) is None
    queued = await d.get_connector(second.id)
    assert (queued.sync_status, queued.run_id) == (SyncStatus.QUEUED, None)
    assert queued.sync_queued_at is not None
    assert await runs_of(d, second.id) == []  # no run until it really starts
    with pytest.raises(Conflict, match="Sync already queued"):
        await d.trigger_sync(second.id)
    with pytest.raises(Conflict, match="Sync already in progress"):
        await d.trigger_sync(first.id)
    assert list(d.running_syncs) == [first.id]
    source.release()
    await synced(d, second.id)
    assert await runs_of(d, second.id) == [(RunTrigger.MANUAL, RunOutcome.SUCCEEDED)]
    after = await d.get_connector(second.id)
    assert after.sync_queued_at is None


async def test_concurrent_triggers_never_exceed_the_slots(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    d = make_any_daemon(**slots(2))
    await d.start()
    source.hang_on(None)
    made = [await add(d, source, f"c{i}") for i in range(5)]
    answers = await asyncio.gather(*(d.trigger_sync(c.id) for c in made))
    assert sum(a is not None for a in answers) == 2
    assert len(d.running_syncs) == 2
    states = [(await d.get_connector(c.id)).sync_status for c in made]
    assert states.count(SyncStatus.RUNNING) == 2
    assert states.count(SyncStatus.QUEUED) == 3
    source.release()
    for c in made:
        await synced(d, c.id)


async def test_queued_and_due_are_served_by_age(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    d = make_any_daemon(**slots(1))
    await d.start()
    source.hang_on(None)
    busy = await add(d, source, "busy")
    queued_first = await add(d, source, "queued-first")
    due_older = await add(d, source, "due-older", sync_schedule="0 0 1 1 *")
    queued_last = await add(d, source, "queued-last")
    assert await d.trigger_sync(busy.id) is not None
    assert await d.trigger_sync(queued_first.id) is None
    await make_due(d, due_older.id, utcnow() - timedelta(hours=3))
    assert await d.trigger_sync(queued_last.id) is None
    source.release()
    for c in (busy, due_older, queued_first, queued_last):
        await synced(d, c.id)
    order = [await first_started_at(d, c.id) for c in (due_older, queued_first, queued_last)]
    assert order == sorted(order)
    assert await runs_of(d, due_older.id) == [(RunTrigger.SCHEDULE, RunOutcome.SUCCEEDED)]


async def test_abort_delete_and_pause_drop_a_queued_trigger(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    d = make_any_daemon(**slots(1))
    await d.start()
    source.hang_on(None)
    busy = await add(d, source, "busy")
    aborted, paused, deleted = [await add(d, source, n) for n in ("a", "p", "d")]
    assert await d.trigger_sync(busy.id) is not None
    for c in (aborted, paused, deleted):
        assert await d.trigger_sync(c.id) is None

    assert await d.abort_sync(aborted.id) is None  # no run was created
    after = await d.get_connector(aborted.id)
    assert (after.sync_status, after.sync_queued_at, after.run_id) == (SyncStatus.IDLE, None, None)
    with pytest.raises(Conflict, match="No sync in progress"):
        await d.abort_sync(aborted.id)

    after = await d.update_connector(paused.id, {"status": "paused"})
    assert (after.status, after.sync_status) == (ConnectorStatus.PAUSED, SyncStatus.IDLE)
    assert after.sync_queued_at is None

    await d.delete_connector(deleted.id)
    await d.wait_deleted(deleted.id)

    source.release()
    await synced(d, busy.id)
    assert await d.tick() == []
    for c in (aborted, paused):
        assert await runs_of(d, c.id) == []
        assert (await d.get_connector(c.id)).sync_status is SyncStatus.IDLE


async def test_a_queued_trigger_survives_a_restart(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    first = make_any_daemon(**slots(1))
    await first.start()
    source.hang_on(None)
    busy = await add(first, source, "busy")
    waiting = await add(first, source, "waiting")
    assert await first.trigger_sync(busy.id) is not None
    assert await first.trigger_sync(waiting.id) is None
    await first.stop()  # the busy run is interrupted; the request stays stored
    source.release()
    again = make_any_daemon(**slots(1))
    await again.start()  # its first tick starts what is queued
    await synced(again, waiting.id)
    assert await runs_of(again, waiting.id) == [(RunTrigger.MANUAL, RunOutcome.SUCCEEDED)]
    assert await runs_of(again, busy.id) == [(RunTrigger.MANUAL, RunOutcome.INTERRUPTED)]


async def test_another_instance_with_a_free_slot_starts_a_queued_trigger(
    make_any_daemon: DaemonFactory, source: SourceServer
) -> None:
    full = make_any_daemon(**slots(1))
    spare = make_any_daemon(**slots(4))
    await full.start()
    await spare.start()
    source.hang_on(None)
    busy = await add(full, source, "busy")
    waiting = await add(full, source, "waiting")
    assert await full.trigger_sync(busy.id) is not None
    assert await full.trigger_sync(waiting.id) is None
    # With Redis the broadcast wakes the spare instance already; its tick is harmless then.
    await spare.tick()
    running = await spare.wait_connector(waiting.id, lambda c: c.sync_status is SyncStatus.RUNNING)
    assert running.sync_owner == spare.owner
    source.release()
    await synced(spare, waiting.id)
