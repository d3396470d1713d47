"""Admission: what a scheduler tick does with a connector it found due or queued and has a
run slot for — start it, serve a queued trigger, take over a stale run, or nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from syncd.errors import SyncdError
from syncd.models import (
    Connector,
    ConnectorStatus,
    RunEnd,
    RunOutcome,
    RunTrigger,
    SyncStatus,
    Transition,
)
from syncd.rules.runs import claim
from syncd.rules.state import next_run_at


class NotDue(SyncdError):
    """A scheduled tick has nothing to do for this connector (already advanced elsewhere)."""


def admit(
    c: Connector,
    *,
    run_id: str,
    owner: str | None,
    now: datetime,
    stale_before: datetime,
) -> Transition:
    """What a tick does with a connector it found due or queued (and has a run slot for).

    A queued trigger starts (trigger ``manual``); if the schedule is due too, the same run
    serves it and ``next_run_at`` advances. Anything else is :func:`scheduled`.
    """
    if c.sync_status is SyncStatus.QUEUED:
        if c.status not in (ConnectorStatus.ACTIVE, ConnectorStatus.ERROR):
            raise NotDue(str(c.status))
        nxt = c.next_run_at
        if c.retry_at is not None or (nxt is not None and nxt <= now):
            nxt = next_run_at(replace(c, retry_at=None), now)  # this run serves a retry
        return claim(
            c, run_id=run_id, owner=owner, now=now, trigger=RunTrigger.MANUAL, next_run_at=nxt
        )
    return scheduled(c, run_id=run_id, owner=owner, now=now, stale_before=stale_before)


def scheduled(
    c: Connector,
    *,
    run_id: str,
    owner: str | None,
    now: datetime,
    stale_before: datetime,
) -> Transition:
    """A scheduler tick for a connector found due.

    Advances ``next_run_at`` past ``now`` in every case (missed ticks run once, not once
    each). Starts a run (trigger ``schedule``) when idle; takes over a run older than
    ``stale_before`` or without a start time (trigger ``stale_lock``, the old run becomes
    ``interrupted``); leaves a younger run alone. ``NotDue`` if another instance already
    advanced the schedule, or the connector is paused, deleting or unscheduled.
    """
    if c.next_run_at is None or c.next_run_at > now:
        raise NotDue("not due")
    if not (c.sync_schedule or c.full_crawl_schedule or c.retry_at is not None):
        raise NotDue("not due")
    retry_due = c.retry_at is not None and c.retry_at <= now
    # A run started here serves a pending retry (claim clears it): the next is the schedule's.
    nxt = next_run_at(replace(c, retry_at=None), now)
    if c.status in (ConnectorStatus.PAUSED, ConnectorStatus.DELETING):
        raise NotDue(str(c.status))
    if c.sync_status is not SyncStatus.RUNNING:
        # A queued manual trigger is served by the same run (stale locks concern runs only).
        queued = c.sync_status is SyncStatus.QUEUED
        trigger = (
            RunTrigger.MANUAL if queued else RunTrigger.RETRY if retry_due else RunTrigger.SCHEDULE
        )
        return claim(c, run_id=run_id, owner=owner, now=now, trigger=trigger, next_run_at=nxt)
    if c.sync_started_at is not None and c.sync_started_at >= stale_before:
        return Transition(replace(c, next_run_at=nxt, updated_at=now))
    return stale_takeover(c, run_id=run_id, owner=owner, now=now, next_run_at=nxt)


def stale_takeover(
    c: Connector,
    *,
    run_id: str,
    owner: str | None,
    now: datetime,
    next_run_at: datetime | None,
) -> Transition:
    """Replace an orphaned run: the old run becomes ``interrupted``, a new one starts."""
    t = claim(
        c,
        run_id=run_id,
        owner=owner,
        now=now,
        trigger=RunTrigger.STALE_LOCK,
        next_run_at=next_run_at,
    )
    ends = (RunEnd(c.run_id, RunOutcome.INTERRUPTED, now, "stale lock"),) if c.run_id else ()
    return replace(t, ends=ends)
