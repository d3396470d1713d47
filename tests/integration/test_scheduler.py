"""Scheduler ticks (DESIGN.md §5) against a real store, driven tick by tick."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from datetime import timedelta

from syncd.daemon import Daemon
from syncd.models import (
    Connector,
    ConnectorStatus,
    RunOutcome,
    RunTrigger,
    SyncStatus,
    Transition,
    utcnow,
)
from tests.integration.conftest import http_source
from tests.integration.sourceserver import SourceServer


def set_stale_lock(daemon: Daemon, seconds: float) -> None:
    """Apply ``scheduler.stale_lock_seconds`` as a reload would."""
    cfg = daemon.config
    daemon.apply_settings(
        dataclasses.replace(
            cfg, scheduler=dataclasses.replace(cfg.scheduler, stale_lock_seconds=seconds)
        )
    )


async def make_due(daemon: Daemon, connector_id: str, **fields: object) -> None:
    """Put ``next_run_at`` in the past, as if the daemon had been down over a tick."""
    past = utcnow() - timedelta(hours=3)

    def change(c: Connector) -> Transition:
        return Transition(replace(c, next_run_at=past, **fields))  # type: ignore[arg-type]

    await daemon.store.mutate_connector(connector_id, change)


async def test_schedule_sets_next_run_at(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "sync_schedule": "*/15 * * * *"}
    )
    assert c.next_run_at is not None
    assert timedelta(0) < c.next_run_at - utcnow() <= timedelta(minutes=15)
    assert c.next_run_at.minute % 15 == 0


async def test_due_connector_runs_once_after_downtime(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "sync_schedule": "*/5 * * * *"}
    )
    await make_due(daemon, c.id)
    started = await daemon.tick()
    assert len(started) == 1
    assert await daemon.tick() == []  # missed ticks run once, not once each
    await daemon.wait_run(c.id)
    runs, _ = await daemon.list_runs(c.id)
    assert [(r.trigger, r.outcome) for r in runs] == [(RunTrigger.SCHEDULE, RunOutcome.SUCCEEDED)]
    after = await daemon.get_connector(c.id)
    assert after.next_run_at is not None and after.next_run_at > utcnow()


async def test_paused_and_unscheduled_connectors_are_skipped(
    daemon: Daemon, source: SourceServer
) -> None:
    paused = await daemon.create_connector(
        {"name": "paused", "source": http_source(source), "sync_schedule": "* * * * *"}
    )
    await daemon.update_connector(paused.id, {"status": "paused"})
    await make_due(daemon, paused.id)
    await daemon.create_connector({"name": "manual", "source": http_source(source)})
    assert await daemon.tick() == []
    assert source.cursors == []


async def test_error_connectors_are_scheduled(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "sync_schedule": "* * * * *"}
    )
    await make_due(daemon, c.id, status=ConnectorStatus.ERROR, last_error="earlier failure")
    assert len(await daemon.tick()) == 1
    await daemon.wait_run(c.id)
    after = await daemon.get_connector(c.id)
    assert after.status is ConnectorStatus.ACTIVE and after.last_error is None


async def test_young_run_is_skipped_and_stale_lock_is_taken_over(
    daemon: Daemon, source: SourceServer
) -> None:
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "sync_schedule": "* * * * *"}
    )
    # An orphan: the store says running, but no process runs it.
    orphan = "0" * 26
    await make_due(
        daemon,
        c.id,
        sync_status=SyncStatus.RUNNING,
        run_id=orphan,
        sync_started_at=utcnow() - timedelta(minutes=5),
        sync_owner="dead-instance",
    )
    assert await daemon.tick() == []  # younger than stale_lock_seconds: skipped
    assert (await daemon.get_connector(c.id)).run_id == orphan

    set_stale_lock(daemon, 60)
    await make_due(daemon, c.id)
    started = await daemon.tick()
    assert len(started) == 1
    await daemon.wait_run(c.id)
    runs, _ = await daemon.list_runs(c.id)
    assert [(r.trigger, r.outcome) for r in runs] == [(RunTrigger.STALE_LOCK, RunOutcome.SUCCEEDED)]
    after = await daemon.get_connector(c.id)
    assert after.sync_status is SyncStatus.IDLE and after.sync_owner == daemon.owner


async def test_stale_takeover_marks_the_old_run_interrupted(
    daemon: Daemon, source: SourceServer
) -> None:
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "sync_schedule": "* * * * *"}
    )
    source.hang_on(None)
    old = await daemon.trigger_sync(c.id)
    await source.requested(None).wait()
    set_stale_lock(daemon, 0)
    await make_due(daemon, c.id, sync_started_at=utcnow() - timedelta(seconds=5))
    new = await daemon.tick()
    assert len(new) == 1 and new[0] != old
    source.release()
    await daemon.wait_run(c.id)
    runs = {r.id: r for r in (await daemon.list_runs(c.id))[0]}
    assert runs[old].outcome is RunOutcome.INTERRUPTED
    # The old run's late writes were fenced; the new one completed.
    assert runs[new[0]].trigger is RunTrigger.STALE_LOCK
