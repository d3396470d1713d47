"""What the rules share: the user-facing conflict messages, a status change, the return
to idle, the run fence, and when a connector's schedules fire next."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from syncd.errors import Fenced
from syncd.models import Connector, ConnectorStatus, SyncStatus
from syncd.rules.cron import next_fire

MSG_DELETING = "Connector is being deleted"
MSG_PAUSED = "Connector is paused"
MSG_RUNNING = "Sync already in progress"
MSG_QUEUED = "Sync already queued"
MSG_NOT_RUNNING = "No sync in progress"
MSG_DELETE_RUNNING = "Cannot delete connector while sync is running"
MSG_NO_DELETIONS_HELD = "No deletions held"


def with_status(c: Connector, status: ConnectorStatus, **changes: Any) -> Connector:
    """Set ``status``, clearing ``last_error`` unless the new status is ``error``."""
    if status is not ConnectorStatus.ERROR:
        changes["last_error"] = None
    return replace(c, status=status, **changes)


def idle(c: Connector, now: datetime, **changes: Any) -> Connector:
    """No run, no wait, no queued trigger (and ``changes``)."""
    return replace(
        c,
        sync_status=SyncStatus.IDLE,
        run_id=None,
        waiting=None,
        sync_queued_at=None,
        updated_at=now,
        **changes,
    )


def next_run_at(c: Connector, now: datetime) -> datetime | None:
    """When the connector's schedules (``sync_schedule``, ``full_crawl_schedule``) fire next
    after ``now``, or its retry of a failed run is due (``retry_at``) if that is sooner
    (``None`` without either)."""
    fires = [
        next_fire(cron, now, c.sync_timezone)
        for cron in (c.sync_schedule, c.full_crawl_schedule)
        if cron
    ]
    if c.retry_at is not None:
        fires.append(c.retry_at)
    return min(fires) if fires else None


def next_full_crawl_at(c: Connector, now: datetime) -> datetime | None:
    """When the full-crawl schedule fires next after ``now`` (``None`` without one)."""
    if not c.full_crawl_schedule:
        return None
    return next_fire(c.full_crawl_schedule, now, c.sync_timezone)


def fence(c: Connector, run_id: str) -> None:
    """:class:`Fenced` unless ``run_id`` is the connector's current, running run."""
    if c.run_id != run_id or c.sync_status is not SyncStatus.RUNNING:
        raise Fenced(f"run {run_id} is no longer the current run of connector {c.id}")
