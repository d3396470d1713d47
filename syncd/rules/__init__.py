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
(:func:`crawl_of_run`), how many complete crawls must miss a document before it is deleted
(:func:`prune_confirmations`), what a completed full crawl deletes or holds (:func:`succeed`,
the guard in ``deletions.plan_prune``), applying held deletions (:func:`apply_held`), and which
records of an incremental source are tombstones (:func:`split_tombstones`).

One module per topic: ``runs`` (trigger, queue, end a run), ``admission`` (a tick's
decision), ``crawls`` (marks, full or not), ``marks`` (a mark read as a time, the
mark a completed crawl stores), ``deletions``, ``lifecycle`` (PATCH, delete),
``documents`` (what a page writes), ``records`` (what a record becomes: external id, content
hash, payload), ``steering`` (the mode a trigger asks for, the crawl a run makes, the crawl
state ``/connectors/{id}/state`` shows and changes), ``state`` (what they share), ``cron``
(when a schedule fires next). This namespace is the way in: callers write
``rules.trigger(...)``. What only the rules use among themselves (messages, limits, the steps
of a rule) stays in its topic's module.
"""

from __future__ import annotations

from syncd.rules.admission import NotDue, admit, scheduled
from syncd.rules.crawls import (
    crawl_of_run,
    crawl_states,
    full_crawl_due,
    is_incremental,
    page_state,
    reset_reason,
    settled_state,
    start_state,
)
from syncd.rules.deletions import (
    apply_held,
    default_prune_confirmations,
    deleted_field,
    deletes_at_once,
    is_tombstone,
    prune_confirmations,
    split_tombstones,
)
from syncd.rules.documents import (
    ExistingDocument,
    must_write,
    plan_page,
)
from syncd.rules.lifecycle import begin_delete, patch
from syncd.rules.runs import (
    NotQueued,
    abort,
    check_trigger,
    drop_queued,
    enqueue,
    fail,
    interrupt,
    succeed,
    trigger,
)
from syncd.rules.state import next_full_crawl_at, next_run_at
from syncd.rules.steering import (
    CrawlInProgress,
    CrawlPlan,
    CrawlState,
    MarkReader,
    Steer,
    begin_crawl,
    check_state_change,
    crawl_state,
    plain_mark,
    plan_crawl,
    reset_mark,
    set_mark,
)

__all__ = [
    "CrawlInProgress",
    "CrawlPlan",
    "CrawlState",
    "ExistingDocument",
    "MarkReader",
    "NotDue",
    "NotQueued",
    "Steer",
    "abort",
    "admit",
    "apply_held",
    "begin_crawl",
    "begin_delete",
    "check_state_change",
    "check_trigger",
    "crawl_of_run",
    "crawl_state",
    "crawl_states",
    "default_prune_confirmations",
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
    "plain_mark",
    "plan_crawl",
    "plan_page",
    "prune_confirmations",
    "reset_mark",
    "reset_reason",
    "scheduled",
    "set_mark",
    "settled_state",
    "split_tombstones",
    "start_state",
    "succeed",
    "trigger",
]
