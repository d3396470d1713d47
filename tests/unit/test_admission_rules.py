"""Admission control as pure rules: a queued manual trigger (DESIGN.md §3 codes kept)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from syncd import rules
from syncd.errors import Conflict
from syncd.models import Connector, ConnectorStatus, RunTrigger, SyncStatus

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
STALE = T0 - timedelta(hours=1)


def make(**fields: object) -> Connector:
    base = Connector(
        id="c1",
        name="tickets",
        source={"type": "http", "url": "http://127.0.0.1:9/items"},
        indexer={"type": "store"},
        created_at=T0,
        updated_at=T0,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def queued(**fields: object) -> Connector:
    return rules.enqueue(make(**fields), now=T0).connector


def test_enqueue_stores_the_request_without_a_run() -> None:
    t = rules.enqueue(make(status=ConnectorStatus.ERROR), now=T0)
    c = t.connector
    assert (c.sync_status, c.sync_queued_at, c.run_id) == (SyncStatus.QUEUED, T0, None)
    assert t.start is None and t.ends == ()
    assert c.status is ConnectorStatus.ERROR


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"status": ConnectorStatus.DELETING}, "Connector is being deleted"),
        ({"status": ConnectorStatus.PAUSED}, "Connector is paused"),
        ({"sync_status": SyncStatus.RUNNING, "run_id": "r0"}, "Sync already in progress"),
        ({"sync_status": SyncStatus.QUEUED, "sync_queued_at": T0}, "Sync already queued"),
    ],
)
def test_enqueue_and_trigger_conflicts(fields: dict[str, object], message: str) -> None:
    with pytest.raises(Conflict, match=message):
        rules.enqueue(make(**fields), now=T0)
    with pytest.raises(Conflict, match=message):
        rules.trigger(make(**fields), run_id="r1", owner="i1", now=T0)


def test_admit_starts_a_queued_trigger_as_manual() -> None:
    later = T0 + timedelta(seconds=5)
    t = rules.admit(queued(), run_id="r1", owner="i1", now=later, stale_before=STALE)
    c = t.connector
    assert (c.sync_status, c.run_id, c.sync_queued_at) == (SyncStatus.RUNNING, "r1", None)
    assert t.start is not None and t.start.trigger is RunTrigger.MANUAL


def test_admit_serves_a_due_schedule_and_a_queued_trigger_with_one_run() -> None:
    c = queued(sync_schedule="*/5 * * * *", next_run_at=T0 - timedelta(hours=2))
    t = rules.admit(c, run_id="r1", owner="i1", now=T0, stale_before=STALE)
    assert t.start is not None and t.start.trigger is RunTrigger.MANUAL
    assert t.connector.next_run_at is not None and t.connector.next_run_at > T0


def test_admit_of_a_queued_connector_never_takes_over_a_stale_lock() -> None:
    # A queued connector's old sync_started_at is from a finished run: no run ends.
    c = queued(sync_started_at=T0 - timedelta(days=3))
    t = rules.admit(c, run_id="r1", owner="i1", now=T0, stale_before=STALE)
    assert t.ends == () and t.start is not None


def test_drop_queued_returns_to_idle() -> None:
    t = rules.drop_queued(queued(), now=T0)
    assert (t.connector.sync_status, t.connector.sync_queued_at) == (SyncStatus.IDLE, None)
    assert t.start is None and t.ends == ()
    with pytest.raises(rules.NotQueued):
        rules.drop_queued(make(), now=T0)


def test_pause_and_delete_drop_a_queued_trigger() -> None:
    paused = rules.patch(queued(), {"status": "paused"}, now=T0).connector
    assert (paused.sync_status, paused.sync_queued_at) == (SyncStatus.IDLE, None)
    deleting = rules.begin_delete(queued(), now=T0).connector
    assert deleting.status is ConnectorStatus.DELETING
    assert (deleting.sync_status, deleting.sync_queued_at) == (SyncStatus.IDLE, None)
    renamed = rules.patch(queued(), {"name": "other"}, now=T0).connector
    assert renamed.sync_status is SyncStatus.QUEUED  # other changes keep the request


def test_abort_of_queued_is_not_an_abort_of_a_run() -> None:
    with pytest.raises(Conflict, match="No sync in progress"):
        rules.abort(queued(), now=T0)
