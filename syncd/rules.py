"""The connector state contract (DESIGN.md §2, §3, §5) as pure functions.

Each rule takes the connector's current record and returns a :class:`Transition` — or raises
:class:`Conflict` with the exact user-facing message, :class:`Fenced` when a run's write
arrives after the run stopped being current, or :class:`NotDue` when a scheduled tick finds
that another instance already handled the connector. No I/O; time is passed in. The store
applies a rule atomically (``Store.mutate_connector``), which is what makes each decision a
compare-and-set.

Decisions that differ from the system this design replaces, on purpose:
- completing a run does not undo a pause made during it;
- an abort changes no ``status`` and sets no ``last_synced_at``;
- ``last_error`` is cleared whenever ``status`` becomes anything other than ``error``;
- ``deleting`` rejects sync and PATCH.

Deletions (DESIGN.md §11) are rules too: which crawl a run belongs to and whether it is full
(:func:`crawl_of_run`), what a completed full crawl deletes or holds (:func:`succeed`, the
guard in :func:`plan_prune`), applying held deletions (:func:`apply_held`), and which records
of an incremental source are tombstones (:func:`split_tombstones`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from syncd import schedule
from syncd.errors import Conflict, Fenced, SyncdError
from syncd.models import (
    ABORTED_ERROR,
    Connector,
    ConnectorStatus,
    Crawl,
    DocOp,
    DocStatus,
    DocumentInput,
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
    external_id_of,
)

MSG_DELETING = "Connector is being deleted"
MSG_PAUSED = "Connector is paused"
MSG_RUNNING = "Sync already in progress"
MSG_QUEUED = "Sync already queued"
MSG_NOT_RUNNING = "No sync in progress"
MSG_DELETE_RUNNING = "Cannot delete connector while sync is running"
MSG_NO_DELETIONS_HELD = "No deletions held"
LAST_ERROR_MAX = 500

_PATCHABLE = frozenset(
    {
        "status",
        "name",
        "sync_schedule",
        "sync_timezone",
        "source",
        "indexer",
        "page_retries",
        "page_retry_backoff",
        "throttle_seconds",
        "retry_on_status",
        "prune",
        "prune_max_fraction",
        "full_crawl_schedule",
        "hash_fields",
    }
)


# --- crawl state: the source's marks (e.g. an incremental high-water mark) -------------
#
# ``Connector.source_state`` holds two states of the source: ``completed``, as of the last
# crawl that completed, and ``crawl``, the checkpoint of the crawl in progress (saved with
# each committed page). A fresh crawl starts from ``completed``; a resumed one from ``crawl``;
# only a completed crawl promotes ``crawl`` to ``completed``. So a crawl that fails and then
# starts over (its resume cursor rejected) never uses its own partial mark, which would skip
# the records it had not reached. ``reset`` says why the next run starts over.

STATE_COMPLETED = "completed"
STATE_CRAWL = "crawl"
STATE_RESET = "reset"
RESET_SOURCE_CHANGED = "source changed"


def crawl_states(c: Connector) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """``(completed, in_progress)`` source states of the connector.

    A state written before crawls were tracked (a flat mapping) is taken as both.
    """
    s = c.source_state
    if STATE_COMPLETED in s or STATE_CRAWL in s or STATE_RESET in s:
        return dict(s.get(STATE_COMPLETED) or {}), dict(s.get(STATE_CRAWL) or {})
    return dict(s), dict(s)


def start_state(c: Connector, *, resuming: bool, full: bool = False) -> Mapping[str, Any]:
    """The state a run's source starts from: the crawl's own when resuming, else the last
    completed crawl's — or none for a fresh full crawl of an incremental source, which must
    not send its ``since`` (a source without ``incremental`` keeps its state: a plugin's state
    may be about something else)."""
    completed, in_progress = crawl_states(c)
    if resuming:
        return in_progress
    return {} if full and is_incremental(c.source) else completed


def page_state(c: Connector, checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """``source_state`` to save with a committed page whose source checkpoint is
    ``checkpoint`` (``c`` is the connector as the run started)."""
    completed, _ = crawl_states(c)
    return {STATE_COMPLETED: completed, STATE_CRAWL: dict(checkpoint)}


def reset_reason(c: Connector) -> str | None:
    """Why the next run must start over instead of resuming (e.g. the source changed)."""
    reason = c.source_state.get(STATE_RESET)
    return reason if isinstance(reason, str) else None


def _promote_crawl(c: Connector) -> dict[str, Any]:
    _, in_progress = crawl_states(c)
    return {STATE_COMPLETED: in_progress}


class NotDue(SyncdError):
    """A scheduled tick has nothing to do for this connector (already advanced elsewhere)."""


def _with_status(c: Connector, status: ConnectorStatus, **changes: Any) -> Connector:
    """Set ``status``, clearing ``last_error`` unless the new status is ``error``."""
    if status is not ConnectorStatus.ERROR:
        changes["last_error"] = None
    return replace(c, status=status, **changes)


def _idle(c: Connector, now: datetime, **changes: Any) -> Connector:
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
    after ``now`` (``None`` without a schedule)."""
    fires = [
        schedule.next_fire(cron, now, c.sync_timezone)
        for cron in (c.sync_schedule, c.full_crawl_schedule)
        if cron
    ]
    return min(fires) if fires else None


def next_full_crawl_at(c: Connector, now: datetime) -> datetime | None:
    """When the full-crawl schedule fires next after ``now`` (``None`` without one)."""
    if not c.full_crawl_schedule:
        return None
    return schedule.next_fire(c.full_crawl_schedule, now, c.sync_timezone)


def _fence(c: Connector, run_id: str) -> None:
    if c.run_id != run_id or c.sync_status is not SyncStatus.RUNNING:
        raise Fenced(f"run {run_id} is no longer the current run of connector {c.id}")


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


def _claim(
    c: Connector,
    *,
    run_id: str,
    owner: str | None,
    now: datetime,
    trigger: RunTrigger,
    **changes: Any,
) -> Transition:
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
        **changes,
    )
    return Transition(claimed, start=RunStart(run_id, c.id, trigger, now, owner))


def trigger(c: Connector, *, run_id: str, owner: str | None, now: datetime) -> Transition:
    """Manual trigger: ``idle → running`` for an ``active`` or ``error`` connector."""
    check_trigger(c)
    return _claim(c, run_id=run_id, owner=owner, now=now, trigger=RunTrigger.MANUAL)


def enqueue(c: Connector, *, now: datetime) -> Transition:
    """Manual trigger with no free run slot in this instance: ``idle → queued``, the request
    stored with its time (``sync_queued_at``) so that any instance with a free slot starts it
    (:func:`admit`), earliest first. Conflicts as :func:`trigger`, and ``Sync already queued``.
    """
    check_trigger(c)
    return Transition(replace(c, sync_status=SyncStatus.QUEUED, sync_queued_at=now, updated_at=now))


class NotQueued(SyncdError):
    """The connector is no longer queued (its run started, or the request was dropped)."""


def drop_queued(c: Connector, *, now: datetime) -> Transition:
    """Abort of a queued trigger: ``queued → idle``; no run was created, so none ends.
    :class:`NotQueued` when the connector is not queued (any more)."""
    if c.sync_status is not SyncStatus.QUEUED:
        raise NotQueued("not queued")
    return Transition(_idle(c, now))


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
        if nxt is not None and nxt <= now:
            nxt = next_run_at(c, now)
        return _claim(
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
    if not (c.sync_schedule or c.full_crawl_schedule):
        raise NotDue("not due")
    nxt = next_run_at(c, now)
    if c.status in (ConnectorStatus.PAUSED, ConnectorStatus.DELETING):
        raise NotDue(str(c.status))
    if c.sync_status is not SyncStatus.RUNNING:
        # A queued manual trigger is served by the same run (stale locks concern runs only).
        queued = c.sync_status is SyncStatus.QUEUED
        trigger = RunTrigger.MANUAL if queued else RunTrigger.SCHEDULE
        return _claim(c, run_id=run_id, owner=owner, now=now, trigger=trigger, next_run_at=nxt)
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
    t = _claim(
        c,
        run_id=run_id,
        owner=owner,
        now=now,
        trigger=RunTrigger.STALE_LOCK,
        next_run_at=next_run_at,
    )
    ends = (RunEnd(c.run_id, RunOutcome.INTERRUPTED, now, "stale lock"),) if c.run_id else ()
    return replace(t, ends=ends)


# --- ending a run (all fenced by run id) ---------------------------------------------------


def succeed(
    c: Connector,
    *,
    run_id: str,
    now: datetime,
    crawl: Crawl | None = None,
    counts: PruneCounts | None = None,
    immediate: bool = False,
) -> Transition:
    """The crawl loop finished: ``error``/``active`` → ``active``; ``paused`` stays paused.

    When the run completed a full crawl (``crawl``, the one whose documents it stamped, is
    the connector's and ``full``), the live documents it did not see are pruned as
    :func:`plan_prune` decides from ``counts``, ``deletions_held`` is recomputed, and a
    full-crawl schedule is due again at its next fire.
    """
    _fence(c, run_id)
    status = (
        ConnectorStatus.PAUSED if c.status is ConnectorStatus.PAUSED else ConnectorStatus.ACTIVE
    )
    changes: dict[str, Any] = {}
    plan: PrunePlan | None = None
    if crawl is not None and crawl.full and c.crawl_id == crawl.id:
        changes["next_full_crawl_at"] = next_full_crawl_at(c, now)
        plan = plan_prune(c, counts, crawl_id=crawl.id, run_id=run_id, immediate=immediate)
        held = plan is not None and plan.action is PruneAction.HOLD_UNSEEN
        changes["deletions_held"] = counts.unseen if held and counts is not None else 0
    done = _with_status(
        _idle(
            c,
            now,
            last_synced_at=now,
            resume_cursor=None,
            source_state=_promote_crawl(c),
            **changes,
        ),
        status,
    )
    return Transition(done, ends=(RunEnd(run_id, RunOutcome.SUCCEEDED, now),), prune=plan)


def fail(c: Connector, *, run_id: str, error: str, now: datetime) -> Transition:
    """The crawl loop raised: → ``error`` with ``last_error`` (500 characters at most)."""
    _fence(c, run_id)
    message = error[:LAST_ERROR_MAX]
    done = replace(_idle(c, now), status=ConnectorStatus.ERROR, last_error=message)
    return Transition(done, ends=(RunEnd(run_id, RunOutcome.FAILED, now, message),))


def interrupt(c: Connector, *, run_id: str, now: datetime) -> Transition:
    """Graceful stop: idle, run ``interrupted``, ``status`` unchanged (the next run resumes)."""
    _fence(c, run_id)
    return Transition(_idle(c, now), ends=(RunEnd(run_id, RunOutcome.INTERRUPTED, now),))


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
    return Transition(_idle(c, now), ends=ends)


# --- crawls and deletions (DESIGN.md §11) ------------------------------------------------

PRUNE_GUARD_MIN = 10
"""The guard holds a completed crawl's deletions only when there are more than this many."""


def is_incremental(source: Mapping[str, Any]) -> bool:
    """Whether a source config crawls incrementally (``incremental`` set). A source without
    it (a plugin too) is crawled in full: a plugin that crawls incrementally on its own must
    declare ``incremental`` or set ``prune: false``."""
    return isinstance(source.get("incremental"), Mapping)


def full_crawl_due(c: Connector, now: datetime) -> bool:
    """Whether a crawl starting fresh at ``now`` is a full crawl: always for a source that is
    not incremental; for an incremental one, once its ``full_crawl_schedule`` has fired and
    until a full crawl completes. Never for a source with ``max_pages``: a crawl it cut short
    looks complete, and what it did not reach must not be taken as gone."""
    if c.source.get("max_pages") is not None:
        return False
    if not is_incremental(c.source):
        return True
    return c.next_full_crawl_at is not None and c.next_full_crawl_at <= now


def crawl_of_run(c: Connector, *, resuming: bool, now: datetime, new_crawl_id: str) -> Crawl | None:
    """The crawl a run continues (``resuming``: the connector's current one) or starts (as
    ``new_crawl_id``). ``None`` for a resumed crawl begun before crawls were stamped: it
    cannot prune."""
    if resuming:
        return Crawl(c.crawl_id, c.crawl_full) if c.crawl_id is not None else None
    return Crawl(new_crawl_id, full_crawl_due(c, now))


def plan_prune(
    c: Connector,
    counts: PruneCounts | None,
    *,
    crawl_id: str,
    run_id: str,
    immediate: bool,
) -> PrunePlan | None:
    """What a completed full crawl does with the live documents it did not see: nothing when
    ``prune`` is off or there are none; hold them (the guard) when they are more than
    ``prune_max_fraction`` of the live documents and more than :data:`PRUNE_GUARD_MIN`;
    delete them otherwise."""
    if not c.prune or counts is None or counts.unseen <= 0:
        return None
    guarded = counts.unseen > c.prune_max_fraction * counts.live and counts.unseen > PRUNE_GUARD_MIN
    action = PruneAction.HOLD_UNSEEN if guarded else PruneAction.DELETE_UNSEEN
    return PrunePlan(action, crawl_id=crawl_id, immediate=immediate, run_id=run_id)


def apply_held(c: Connector, *, now: datetime, immediate: bool) -> Transition:
    """``POST …/deletions/apply``: delete what the guard held; :class:`Conflict` (``No
    deletions held``) when nothing is held, or while the connector is being deleted."""
    if c.status is ConnectorStatus.DELETING:
        raise Conflict(MSG_DELETING)
    if c.deletions_held <= 0:
        raise Conflict(MSG_NO_DELETIONS_HELD)
    plan = PrunePlan(PruneAction.DELETE_HELD, immediate=immediate)
    return Transition(replace(c, deletions_held=0, updated_at=now), prune=plan)


def deleted_field(source: Mapping[str, Any]) -> str | None:
    """The dotted path of an incremental source's tombstone flag, if it has one."""
    incremental = source.get("incremental")
    if not isinstance(incremental, Mapping):
        return None
    path = incremental.get("deleted_field")
    return path if isinstance(path, str) and path else None


def is_tombstone(record: Any, path: Sequence[str]) -> bool:
    """Whether ``record``'s field at ``path`` marks it deleted: any value but a missing one,
    ``null`` or ``false`` (``true``, a ``deleted_at`` timestamp, …)."""
    value: Any = record
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return False
        value = value[part]
    return value is not None and value is not False


def split_tombstones(
    records: Sequence[Any], field: str, id_field: str
) -> tuple[list[Any], list[str]]:
    """A page's records without its tombstones, and the external ids the tombstones delete
    (a tombstone without a usable id is kept with the records, to be rejected as a record)."""
    path, id_path = field.split("."), id_field.split(".")
    live: list[Any] = []
    gone: list[str] = []
    for record in records:
        if is_tombstone(record, path):
            try:
                gone.append(external_id_of(record, id_path))
                continue
            except ValueError:
                pass
        live.append(record)
    return live, gone


# --- configuration and lifecycle --------------------------------------------------------


def patch(c: Connector, changes: Mapping[str, Any], *, now: datetime) -> Transition:
    """PATCH: refused while ``deleting``; ``status`` may become ``active`` or ``paused``.

    A schedule change, or a connector becoming active again, recomputes ``next_run_at`` from
    ``now`` so that a resumed connector does not fire for ticks missed while paused.
    """
    if c.status is ConnectorStatus.DELETING:
        raise Conflict(MSG_DELETING)
    unknown = set(changes) - _PATCHABLE
    if unknown:
        raise ValueError(f"not patchable: {sorted(unknown)}")
    fields = {k: v for k, v in changes.items() if k != "status"}
    if "source" in changes and changes["source"] != c.source:
        # A cursor or a mark of the old source must not be replayed against the new one:
        # the next run starts over, from the last completed crawl's mark, and says why.
        completed, _ = crawl_states(c)
        fields["resume_cursor"] = None
        fields["source_state"] = {STATE_COMPLETED: completed, STATE_RESET: RESET_SOURCE_CHANGED}
    updated = replace(c, updated_at=now, **fields)
    status = changes.get("status")
    if status is not None:
        status = ConnectorStatus(status)
        if status not in (ConnectorStatus.ACTIVE, ConnectorStatus.PAUSED):
            raise ValueError(f"status cannot be set to {status}")
        updated = _with_status(updated, status)
        if status is ConnectorStatus.PAUSED and c.sync_status is SyncStatus.QUEUED:
            updated = _idle(updated, now)  # a pause drops a queued trigger
    reschedule = (
        "sync_schedule" in changes
        or "sync_timezone" in changes
        or "full_crawl_schedule" in changes
        or (status is ConnectorStatus.ACTIVE and c.status is not ConnectorStatus.ACTIVE)
    )
    if reschedule:
        updated = replace(updated, next_run_at=next_run_at(updated, now))
    if "full_crawl_schedule" in changes or "sync_timezone" in changes:
        updated = replace(updated, next_full_crawl_at=next_full_crawl_at(updated, now))
    return Transition(updated)


def begin_delete(c: Connector, *, now: datetime) -> Transition:
    """``DELETE``: refused while a sync runs; idempotent when already ``deleting``."""
    if c.sync_status is SyncStatus.RUNNING:
        raise Conflict(MSG_DELETE_RUNNING)
    if c.status is ConnectorStatus.DELETING:
        return Transition(c)
    # A queued trigger is dropped with the connector.
    gone = _idle(c, now) if c.sync_status is SyncStatus.QUEUED else c
    return Transition(
        _with_status(gone, ConnectorStatus.DELETING, next_run_at=None, updated_at=now)
    )


# --- crawled documents: which ones a page writes and enqueues (DESIGN.md §4, §7) ---------
#
# The one statement of this rule. The SQLite store applies plan_page; the PostgreSQL store's
# page upsert (postgres_sql.UPSERT_DOCUMENTS) evaluates must_write in SQL, with
# REQUEUE_STATUS and REQUEUE_ERROR passed as parameters.

REQUEUE_STATUS = DocStatus.FAILED
REQUEUE_ERROR = ABORTED_ERROR
"""A stored document in ``REQUEUE_STATUS`` with ``REQUEUE_ERROR`` was failed by an abort, not
by its indexer: a crawl writes and enqueues it again even when its content is unchanged."""


@dataclass(frozen=True)
class ExistingDocument:
    """What the rule needs to know about a stored document."""

    content_hash: str
    status: DocStatus
    error: str | None
    op: DocOp = DocOp.INDEX


def must_write(existing: ExistingDocument | None, content_hash: str) -> bool:
    """Whether a crawled document with ``content_hash`` is written (``pending`` with ``op =
    index``, attempts and error reset) and enqueued: when it is new, when its content hash
    changed, when it was failed by an abort, or when it is deleted or being deleted (it
    reappeared at the source). Any other stored document is left as it is: an unchanged
    indexed, pending, running or failed document is not enqueued again."""
    return (
        existing is None
        or existing.content_hash != content_hash
        or (existing.status is REQUEUE_STATUS and existing.error == REQUEUE_ERROR)
        or existing.status is DocStatus.DELETED
        or existing.op is DocOp.DELETE
    )


def plan_page(
    documents: Sequence[DocumentInput], existing: Mapping[str, ExistingDocument]
) -> list[DocumentInput]:
    """The documents of a page that :func:`must_write`, in page order.

    Duplicate external ids within the page: the last one wins (at the first occurrence's
    position). ``existing`` maps the page's external ids that are already stored.
    """
    latest: dict[str, DocumentInput] = {}
    for doc in documents:
        latest[doc.external_id] = doc
    return [
        doc
        for external_id, doc in latest.items()
        if must_write(existing.get(external_id), doc.content_hash)
    ]
