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

One module per topic: ``runs`` (trigger, queue, end a run), ``admission`` (a tick's
decision), ``crawls`` (marks, full or not), ``deletions``, ``lifecycle`` (PATCH, delete),
``documents`` (what a page writes), ``state`` (what they share), ``cron`` (when a schedule
fires next). This namespace is the way in: callers write ``rules.trigger(...)``.
"""

from __future__ import annotations

from syncd.rules.admission import NotDue, admit, scheduled, stale_takeover
from syncd.rules.crawls import (
    RESET_SOURCE_CHANGED,
    STATE_COMPLETED,
    STATE_CRAWL,
    STATE_RESET,
    crawl_of_run,
    crawl_states,
    full_crawl_due,
    is_incremental,
    page_state,
    reset_reason,
    start_state,
)
from syncd.rules.deletions import (
    PRUNE_GUARD_MIN,
    apply_held,
    deleted_field,
    deletes_at_once,
    is_tombstone,
    plan_prune,
    split_tombstones,
)
from syncd.rules.documents import (
    REQUEUE_ERROR,
    REQUEUE_STATUS,
    ExistingDocument,
    must_write,
    plan_page,
)
from syncd.rules.lifecycle import begin_delete, patch
from syncd.rules.runs import (
    LAST_ERROR_MAX,
    NotQueued,
    abort,
    check_abort,
    check_trigger,
    drop_queued,
    enqueue,
    fail,
    interrupt,
    succeed,
    trigger,
)
from syncd.rules.state import (
    MSG_DELETE_RUNNING,
    MSG_DELETING,
    MSG_NO_DELETIONS_HELD,
    MSG_NOT_RUNNING,
    MSG_PAUSED,
    MSG_QUEUED,
    MSG_RUNNING,
    next_full_crawl_at,
    next_run_at,
)

__all__ = [
    "LAST_ERROR_MAX",
    "MSG_DELETE_RUNNING",
    "MSG_DELETING",
    "MSG_NOT_RUNNING",
    "MSG_NO_DELETIONS_HELD",
    "MSG_PAUSED",
    "MSG_QUEUED",
    "MSG_RUNNING",
    "PRUNE_GUARD_MIN",
    "REQUEUE_ERROR",
    "REQUEUE_STATUS",
    "RESET_SOURCE_CHANGED",
    "STATE_COMPLETED",
    "STATE_CRAWL",
    "STATE_RESET",
    "ExistingDocument",
    "NotDue",
    "NotQueued",
    "abort",
    "admit",
    "apply_held",
    "begin_delete",
    "check_abort",
    "check_trigger",
    "crawl_of_run",
    "crawl_states",
    "deleted_field",
    "deletes_at_once",
    "drop_queued",
    "enqueue",
    "fail",
    "full_crawl_due",
    "interrupt",
    "is_incremental",
    "is_tombstone",
    "must_write",
    "next_full_crawl_at",
    "next_run_at",
    "page_state",
    "patch",
    "plan_page",
    "plan_prune",
    "reset_reason",
    "scheduled",
    "split_tombstones",
    "stale_takeover",
    "start_state",
    "succeed",
    "trigger",
]
