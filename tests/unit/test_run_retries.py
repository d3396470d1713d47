"""Automatic retries of failed runs (syncd.rules.runs.fail and the scheduler's rules): the
failures counted, the doubling wait, the retry started by a tick, the budget's end, and what
resets it — all with the time passed in."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from syncd import rules
from syncd.models import (
    Connector,
    ConnectorStatus,
    RunOutcome,
    RunTrigger,
    SyncStatus,
    Transition,
)
from syncd.rules.runs import RETRY_BACKOFF_MAX, retry_delay
from tests.unit.test_rules import T0, make


def start(c: Connector, run_id: str, now: datetime = T0) -> Connector:
    return rules.trigger(c, run_id=run_id, owner="i1", now=now).connector


def failed(c: Connector, now: datetime = T0) -> Connector:
    assert c.run_id is not None
    return rules.fail(c, run_id=c.run_id, error="HTTP 503", now=now).connector


def tick(c: Connector, now: datetime, run_id: str = "retry") -> Transition:
    return rules.scheduled(
        c, run_id=run_id, owner="i2", now=now, stale_before=now - timedelta(hours=1)
    )


def test_a_failed_run_is_retried_after_the_backoff_then_doubling() -> None:
    c = failed(start(make(retry_attempts=3, retry_backoff=10.0), "r1"))
    assert (c.status, c.failures, c.last_error) == (ConnectorStatus.ERROR, 1, "HTTP 503")
    assert c.retry_at == T0 + timedelta(seconds=10)
    assert c.next_run_at == c.retry_at  # what the scheduler finds due
    with pytest.raises(rules.NotDue):
        tick(c, T0 + timedelta(seconds=9))
    t = tick(c, T0 + timedelta(seconds=10), "r2")
    assert t.start is not None
    assert (t.start.trigger, t.start.attempt) == (RunTrigger.RETRY, 2)
    assert t.connector.sync_status is SyncStatus.RUNNING
    assert (t.connector.retry_at, t.connector.next_run_at) == (None, None)  # no schedule
    # The retry fails too: the next wait is twice as long.
    later = T0 + timedelta(seconds=10)
    c = failed(t.connector, later)
    assert (c.failures, c.retry_at) == (2, later + timedelta(seconds=20))


def test_the_budget_ends_the_retries_and_the_connector_stays_in_error() -> None:
    c = make(retry_attempts=2, retry_backoff=0.0)
    now = T0
    attempts = []
    c = failed(start(c, "r1"))
    while c.retry_at is not None:
        t = tick(c, now, f"r{len(attempts) + 2}")
        assert t.start is not None
        attempts.append(t.start.attempt)
        c = failed(t.connector, now)
    assert attempts == [2, 3]
    assert (c.status, c.failures, c.retry_at, c.next_run_at) == (
        ConnectorStatus.ERROR,
        3,
        None,
        None,
    )
    with pytest.raises(rules.NotDue):
        tick(c, now + timedelta(days=1))


def test_success_makes_the_connector_active_and_clears_the_count() -> None:
    c = failed(start(make(retry_backoff=0.0), "r1"))
    t = tick(c, T0, "r2")
    done = rules.succeed(t.connector, run_id="r2", now=T0).connector
    assert (done.status, done.failures, done.retry_at, done.last_error) == (
        ConnectorStatus.ACTIVE,
        0,
        None,
        None,
    )


def test_an_abort_is_never_retried() -> None:
    c = failed(start(make(retry_backoff=0.0), "r1"))
    retry = tick(c, T0, "r2").connector
    aborted = rules.abort(retry, now=T0)
    assert aborted.ends[0].outcome is RunOutcome.ABORTED
    assert (aborted.connector.retry_at, aborted.connector.next_run_at) == (None, None)
    assert aborted.connector.status is ConnectorStatus.ERROR  # an abort changes no status


def test_a_manual_trigger_serves_the_pending_retry_and_counts_from_one() -> None:
    c = failed(start(make(retry_backoff=60.0), "r1"))
    t = rules.trigger(c, run_id="r2", owner="i1", now=T0)
    assert t.start is not None and t.start.attempt == 1
    assert (t.connector.failures, t.connector.retry_at, t.connector.next_run_at) == (0, None, None)


def test_a_retry_comes_before_a_later_schedule_and_the_schedule_after_it() -> None:
    c = make(sync_schedule="0 * * * *", retry_backoff=60.0)  # hourly; T0 is 12:00
    c = failed(start(c, "r1"))
    assert c.next_run_at == T0 + timedelta(seconds=60)
    t = tick(c, T0 + timedelta(seconds=60), "r2")
    assert t.start is not None and t.start.trigger is RunTrigger.RETRY
    assert t.connector.next_run_at == T0 + timedelta(hours=1)


def test_a_schedule_due_before_the_retry_serves_it() -> None:
    c = make(sync_schedule="* * * * *", retry_backoff=600.0)  # every minute
    c = failed(start(c, "r1"))
    assert c.next_run_at == T0 + timedelta(minutes=1)
    t = tick(c, T0 + timedelta(minutes=1), "r2")
    assert t.start is not None
    assert (t.start.trigger, t.start.attempt) == (RunTrigger.SCHEDULE, 2)
    assert t.connector.retry_at is None
    assert t.connector.next_run_at == T0 + timedelta(minutes=2)


def test_no_retry_when_the_budget_is_zero() -> None:
    c = failed(start(make(retry_attempts=0), "r1"))
    assert (c.status, c.failures, c.retry_at, c.next_run_at) == (
        ConnectorStatus.ERROR,
        1,
        None,
        None,
    )


def test_a_paused_connector_waits_and_its_resume_runs_the_due_retry() -> None:
    c = failed(start(make(retry_backoff=5.0), "r1"))
    paused = rules.patch(c, {"status": ConnectorStatus.PAUSED}, now=T0).connector
    with pytest.raises(rules.NotDue):
        tick(paused, T0 + timedelta(seconds=10))
    resumed = rules.patch(
        paused, {"status": ConnectorStatus.ACTIVE}, now=T0 + timedelta(seconds=10)
    ).connector
    assert resumed.next_run_at == T0 + timedelta(seconds=5)  # overdue: the next tick runs it
    t = tick(resumed, T0 + timedelta(seconds=10), "r2")
    assert t.start is not None and t.start.trigger is RunTrigger.RETRY


@pytest.mark.parametrize(
    ("backoff", "failures", "seconds"),
    [
        (30.0, 1, 30.0),
        (30.0, 2, 60.0),
        (30.0, 4, 240.0),
        (30.0, 20, RETRY_BACKOFF_MAX),
        (0.0, 5, 0.0),
        (3600.0, 1000, RETRY_BACKOFF_MAX),
    ],
)
def test_retry_delay(backoff: float, failures: int, seconds: float) -> None:
    assert retry_delay(backoff, failures) == seconds
