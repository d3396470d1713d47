"""A run's life: a manual trigger starts or queues it, a queued trigger can be dropped,
and it ends succeeded, failed, interrupted (all fenced by run id) or aborted."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from syncd.errors import Conflict, SyncdError
from syncd.models import (
    Connector,
    ConnectorStatus,
    Crawl,
    CrawlEnd,
    Progress,
    PruneAction,
    PruneCounts,
    PrunePlan,
    RunEnd,
    RunOutcome,
    RunStart,
    RunTrigger,
    SyncStatus,
    Transition,
)
from syncd.rules.deletions import plan_prune
from syncd.rules.state import (
    MSG_DELETING,
    MSG_NOT_RUNNING,
    MSG_PAUSED,
    MSG_QUEUED,
    MSG_RUNNING,
    fence,
    idle,
    next_full_crawl_at,
    next_run_at,
    with_status,
)
from syncd.rules.steering import Steer, complete_crawl, drop_request, with_request

LAST_ERROR_MAX = 500
RETRY_BACKOFF_MAX = 3600.0
"""Longest wait before an automatic retry of a failed run (seconds)."""


# --- starting a run ---------------------------------------------------------------------


def check_trigger(c: Connector) -> None:
    """Raise the §3 conflict that forbids a manual sync now, if any (in the table's order)."""
    if c.status is ConnectorStatus.DELETING:
        raise Conflict(MSG_DELETING)
    if c.status is ConnectorStatus.PAUSED:
        raise Conflict(MSG_PAUSED)
    if c.sync_status is SyncStatus.RUNNING:
        raise Conflict(MSG_RUNNING, run_id=c.run_id)
    if c.sync_status is SyncStatus.QUEUED:
        raise Conflict(MSG_QUEUED)


def claim(
    c: Connector,
    *,
    run_id: str,
    owner: str | None,
    now: datetime,
    trigger: RunTrigger,
    **changes: Any,
) -> Transition:
    """Start run ``run_id`` (``trigger``) now, owned by ``owner``, with ``changes``.

    Any run serves a pending retry (``retry_at`` is cleared); a manual one starts a new count
    of failures, so that a person's trigger gets the whole retry budget again."""
    failures = 0 if trigger is RunTrigger.MANUAL else c.failures
    if c.retry_at is not None and "next_run_at" not in changes:
        changes["next_run_at"] = next_run_at(replace(c, retry_at=None), now)
    claimed = replace(
        c,
        sync_status=SyncStatus.RUNNING,
        run_id=run_id,
        sync_started_at=now,
        sync_owner=owner,
        sync_heartbeat_at=now,
        progress=Progress(),
        waiting=None,
        sync_queued_at=None,
        updated_at=now,
        failures=failures,
        retry_at=None,
        **changes,
    )
    start = RunStart(run_id, c.id, trigger, now, owner, attempt=failures + 1)
    return Transition(claimed, start=start)


def trigger(
    c: Connector, *, run_id: str, owner: str | None, now: datetime, steer: Steer | None = None
) -> Transition:
    """Manual trigger: ``idle → running`` for an ``active`` or ``error`` connector; the mode
    it asks for (``steer``, :mod:`syncd.rules.steering`) is recorded for the run."""
    check_trigger(c)
    asked = with_request(c, steer, queued_at=None)
    return claim(asked, run_id=run_id, owner=owner, now=now, trigger=RunTrigger.MANUAL)


def enqueue(c: Connector, *, now: datetime, steer: Steer | None = None) -> Transition:
    """Manual trigger with no free run slot in this instance: ``idle → queued``, the request
    stored with its time (``sync_queued_at``) and its mode (``steer``) so that any instance
    with a free slot starts it (:func:`admit`), earliest first. Conflicts as
    :func:`trigger`, and ``Sync already queued``.
    """
    check_trigger(c)
    asked = with_request(c, steer, queued_at=now)
    return Transition(
        replace(asked, sync_status=SyncStatus.QUEUED, sync_queued_at=now, updated_at=now)
    )


class NotQueued(SyncdError):
    """The connector is no longer queued (its run started, or the request was dropped)."""


def drop_queued(c: Connector, *, now: datetime) -> Transition:
    """Abort of a queued trigger: ``queued → idle``; no run was created, so none ends.
    :class:`NotQueued` when the connector is not queued (any more)."""
    if c.sync_status is not SyncStatus.QUEUED:
        raise NotQueued("not queued")
    return Transition(idle(drop_request(c), now))


# --- ending a run (all fenced by run id) ---------------------------------------------------


def succeed(
    c: Connector,
    *,
    run_id: str,
    now: datetime,
    crawl: Crawl | None = None,
    counts: PruneCounts | None = None,
    delete_at_once: bool = False,
    end: CrawlEnd | None = None,
) -> Transition:
    """The crawl loop finished: ``error``/``active`` → ``active``; ``paused`` stays paused.
    The run records how its crawl ended (``end``: the rule, and the warnings about it).

    When the run completed a full crawl (``crawl``, the one whose documents it stamped, is
    the connector's and ``full``), the live documents it did not see are pruned as
    :func:`plan_prune` decides from ``counts``, ``deletions_held`` and
    ``awaiting_confirmation`` are recomputed, and a full-crawl schedule is due again at its
    next fire.
    """
    fence(c, run_id)
    status = (
        ConnectorStatus.PAUSED if c.status is ConnectorStatus.PAUSED else ConnectorStatus.ACTIVE
    )
    changes: dict[str, Any] = {}
    plan: PrunePlan | None = None
    if crawl is not None and crawl.full and c.crawl_id == crawl.id:
        changes["next_full_crawl_at"] = next_full_crawl_at(c, now)
        plan = plan_prune(
            c, counts, crawl_id=crawl.id, run_id=run_id, delete_at_once=delete_at_once
        )
        held = plan is not None and plan.action is PruneAction.HOLD_UNSEEN
        changes["deletions_held"] = counts.due if held and counts is not None else 0
        changes["awaiting_confirmation"] = 0 if plan is None else plan.awaiting
    done = with_status(
        idle(
            c,
            now,
            last_synced_at=now,
            resume_cursor=None,
            source_state=complete_crawl(c, crawl=crawl, run_id=run_id, now=now),
            failures=0,
            retry_at=None,
            **changes,
        ),
        status,
    )
    ended = RunEnd(
        run_id,
        RunOutcome.SUCCEEDED,
        now,
        end_reason=end.reason if end is not None else None,
        warnings=end.warnings if end is not None else (),
    )
    return Transition(done, ends=(ended,), prune=plan)


def fail(c: Connector, *, run_id: str, error: str, now: datetime) -> Transition:
    """The crawl loop raised: → ``error`` with ``last_error`` (500 characters at most).

    One more failure in a row; while they are at most ``retry_attempts``, a retry is due
    after ``retry_backoff * 2**(failures - 1)`` seconds (at most :data:`RETRY_BACKOFF_MAX`),
    which ``next_run_at`` shows. It resumes from the run's checkpoint, as any run does."""
    fence(c, run_id)
    message = error[:LAST_ERROR_MAX]
    failures = c.failures + 1
    retry_at = None
    if failures <= c.retry_attempts:
        retry_at = now + timedelta(seconds=retry_delay(c.retry_backoff, failures))
    done = replace(
        idle(c, now),
        status=ConnectorStatus.ERROR,
        last_error=message,
        failures=failures,
        retry_at=retry_at,
    )
    done = replace(done, next_run_at=next_run_at(done, now))
    return Transition(done, ends=(RunEnd(run_id, RunOutcome.FAILED, now, message),))


def retry_delay(backoff: float, failures: int) -> float:
    """Seconds before the retry that follows the ``failures``-th failure in a row."""
    return min(RETRY_BACKOFF_MAX, backoff * 2.0 ** min(failures - 1, 32))


def interrupt(c: Connector, *, run_id: str, now: datetime) -> Transition:
    """Graceful stop: idle, run ``interrupted``, ``status`` unchanged (the next run resumes)."""
    fence(c, run_id)
    return Transition(idle(c, now), ends=(RunEnd(run_id, RunOutcome.INTERRUPTED, now),))


def check_abort(c: Connector) -> None:
    """Raise the §3 conflict that forbids an abort now, if any."""
    if c.sync_status is not SyncStatus.RUNNING:
        raise Conflict(MSG_NOT_RUNNING)


def abort(c: Connector, *, now: datetime) -> Transition:
    """``running → idle`` at once, clearing the run id (which fences the run's later writes).

    ``status`` is not changed and ``last_synced_at`` is not set.
    """
    check_abort(c)
    ends = (RunEnd(c.run_id, RunOutcome.ABORTED, now, "Aborted"),) if c.run_id else ()
    return Transition(idle(c, now), ends=ends)
