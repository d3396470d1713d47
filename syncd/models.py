"""Records and enums shared by every layer.

Records are frozen dataclasses: a state change produces a new record (``dataclasses.replace``),
which the store writes back atomically. Timestamps are timezone-aware UTC datetimes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, NamedTuple

from syncd.jsontext import parse_json


class ConnectorStatus(StrEnum):
    """Operating state of a connector (DESIGN.md §2)."""

    ACTIVE = "active"
    PAUSED = "paused"
    ERROR = "error"
    DELETING = "deleting"


class SyncStatus(StrEnum):
    """Whether a sync run is executing now (``running``), or a manual trigger waits for an
    instance with a free run slot (``queued``, see ``[sync] max_concurrent_runs``)."""

    IDLE = "idle"
    RUNNING = "running"
    QUEUED = "queued"


class RunTrigger(StrEnum):
    """What started a run."""

    MANUAL = "manual"
    SCHEDULE = "schedule"
    STALE_LOCK = "stale_lock"
    RETRY = "retry"  # an automatic retry of a failed run (``retry_attempts``)


class RunOutcome(StrEnum):
    """How a run ended (``running`` while it executes)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"
    INTERRUPTED = "interrupted"


class DocStatus(StrEnum):
    """Indexing state of a document."""

    PENDING = "pending"
    RUNNING = "running"
    INDEXED = "indexed"
    FAILED = "failed"
    DELETED = "deleted"


class DocOp(StrEnum):
    """What a document's pending work does: index it, or delete it from the index (DESIGN.md
    §11). A deleted document keeps ``op = delete``."""

    INDEX = "index"
    DELETE = "delete"


class CrawlMode(StrEnum):
    """What a crawl reads (DESIGN.md §12, "Steering a crawl"): the changes since the mark
    (``incremental``), everything, pruning what it did not see (``full``), or a window of
    the incremental field, leaving the mark and every other document alone (``backfill``)."""

    INCREMENTAL = "incremental"
    FULL = "full"
    BACKFILL = "backfill"


class WaitReason(StrEnum):
    """Why a running sync is sleeping."""

    BACKOFF = "backoff"
    RETRY_AFTER = "retry_after"
    THROTTLE = "throttle"
    HOST_COOLDOWN = "host_cooldown"
    # The store or the queue cannot be reached: the run waits for it (``[sync] outage_seconds``).
    STORE_UNAVAILABLE = "store_unavailable"
    QUEUE_UNAVAILABLE = "queue_unavailable"


ABORTED_ERROR = "Aborted"
"""The ``error`` of documents failed by an abort; such documents are re-enqueued by the next run."""


@dataclass(frozen=True)
class Page:
    """One page of a cursor-paginated source: its records and the cursor of the next page
    (``None`` when this is the last page)."""

    records: list[dict[str, Any]]
    next_cursor: str | None = None
    # Records the source read and left out (a backfill's records at or after its ``until``):
    # counted on the run as filtered, not rejected.
    filtered: int = 0


@dataclass(frozen=True)
class Progress:
    """Pages and documents seen by the current or last run."""

    pages: int = 0
    documents: int = 0


@dataclass(frozen=True)
class Waiting:
    """What a running sync waits for, and until when."""

    reason: WaitReason
    until: datetime


@dataclass(frozen=True)
class PaginatorSettings:
    """A connector's four paginator keys (DESIGN.md §6), passed through to
    :class:`~syncd.http.paginator.AsyncCursorPaginator`. The field defaults are the built-in
    ones, the single place they are written; ``[sync]`` in the config may override them."""

    page_retries: int = 3
    page_retry_backoff: float = 2.0
    throttle_seconds: float = 0.0
    retry_on_status: tuple[int, ...] = (502, 503, 504)


DEFAULT_PAGINATOR = PaginatorSettings()
"""The built-in paginator defaults."""


@dataclass(frozen=True)
class Connector:
    """A connector: its configuration and its state (DESIGN.md §2, §3)."""

    id: str
    name: str
    source: Mapping[str, Any]
    indexer: Mapping[str, Any]
    created_at: datetime
    updated_at: datetime
    sync_schedule: str | None = None
    sync_timezone: str | None = None
    page_retries: int = DEFAULT_PAGINATOR.page_retries
    page_retry_backoff: float = DEFAULT_PAGINATOR.page_retry_backoff
    throttle_seconds: float = DEFAULT_PAGINATOR.throttle_seconds
    retry_on_status: tuple[int, ...] = DEFAULT_PAGINATOR.retry_on_status
    # Dotted paths the content hash covers (None: the whole record), see syncd.rules.records.
    hash_fields: tuple[str, ...] | None = None
    # The document shape (DESIGN.md §7) as its user wrote it (None: none), see
    # syncd.rules.shape.
    document: Mapping[str, Any] | None = None
    # Failed runs retried automatically (syncd.rules.runs.fail): how many times, the first
    # wait (doubling), the failed runs in a row so far and when the next retry is due.
    retry_attempts: int = 3
    retry_backoff: float = 30.0
    failures: int = 0
    retry_at: datetime | None = None
    status: ConnectorStatus = ConnectorStatus.ACTIVE
    sync_status: SyncStatus = SyncStatus.IDLE
    last_error: str | None = None
    run_id: str | None = None
    sync_started_at: datetime | None = None
    last_synced_at: datetime | None = None
    next_run_at: datetime | None = None
    sync_owner: str | None = None
    sync_heartbeat_at: datetime | None = None
    progress: Progress = field(default_factory=Progress)
    waiting: Waiting | None = None
    # When a manual trigger found no free run slot and was stored instead (``sync_status =
    # queued``); any instance with a free slot starts it, earliest first.
    sync_queued_at: datetime | None = None
    # Deletions (DESIGN.md §11): whether a completed full crawl deletes the documents it did
    # not see, the largest share of live documents it may delete without holding them, the
    # cron of full crawls of an incremental source, and the deletions held by the guard.
    prune: bool = True
    prune_max_fraction: float = 0.5
    full_crawl_schedule: str | None = None
    deletions_held: int = 0
    # How many complete full crawls in a row must miss a document before it is deleted (None:
    # the default of the source's pagination, syncd.rules.deletions.prune_confirmations), and
    # the live documents the last complete full crawl missed that wait for more (DESIGN.md §12).
    prune_confirmations: int | None = None
    awaiting_confirmation: int = 0
    # Internal, not part of the API: the cursor of the first page that was not committed
    # (resume point after a failed, aborted or interrupted run) and the source's own state
    # (e.g. the incremental high-water mark).
    resume_cursor: str | None = None
    source_state: Mapping[str, Any] = field(default_factory=dict)
    # Internal: values a source must keep across runs and restarts whatever its crawl does
    # (an OAuth2 refresh token the token endpoint rotated), written only by
    # ``Store.save_secret_state``.
    secret_state: Mapping[str, Any] = field(default_factory=dict)
    # The crawl in progress or last completed (set by the first page commit of a fresh run),
    # whether it is a full crawl, and when the full-crawl schedule is next due.
    crawl_id: str | None = None
    crawl_full: bool = False
    next_full_crawl_at: datetime | None = None


@dataclass(frozen=True)
class RunStart:
    """A run row to insert when a sync is claimed."""

    id: str
    connector_id: str
    trigger: RunTrigger
    started_at: datetime
    owner: str | None
    attempt: int = 1


@dataclass(frozen=True)
class RunEnd:
    """How to close a run row; applied only while the row's outcome is still ``running``."""

    id: str
    outcome: RunOutcome
    finished_at: datetime
    error: str | None = None
    # How the run's crawl ended, for a run that completed it (:class:`CrawlEnd`).
    end_reason: str | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class CrawlEnd:
    """How a crawl ended: the rule that ended it (``reason``: "no next cursor at 'next'",
    "'has_more' is false", "short page (3 of 100), no total configured", …, worded by the
    source) and what looks wrong about that end (``warnings``: a configured path absent
    from every page, which is what a misspelt path looks like)."""

    reason: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class CrawlWindow:
    """The window ``[since, until)`` of a backfill, in the values of the source's incremental
    field (``until`` ``None``: open-ended)."""

    since: Any
    until: Any = None


@dataclass(frozen=True)
class Crawl:
    """The crawl a run belongs to (DESIGN.md §11): documents it sees are stamped with ``id``;
    a ``full`` crawl that completes deletes the live documents it did not see."""

    id: str
    full: bool


class PruneAction(StrEnum):
    """What a :class:`PrunePlan` does to a connector's documents: delete (or hold) those a
    completed crawl confirmed gone, or delete those the guard held."""

    DELETE_UNSEEN = "delete_unseen"
    HOLD_UNSEEN = "hold_unseen"
    DELETE_HELD = "delete_held"


@dataclass(frozen=True)
class PrunePlan:
    """Documents to delete (or hold), decided by a rule and applied by the store in the
    transition's transaction.

    ``*_UNSEEN``: the live documents not stamped with ``crawl_id`` (and not already being
    deleted) that have now been missed by ``confirmations`` complete crawls in a row (the
    others wait for confirmation: ``awaiting`` of them); ``DELETE_HELD``: those the guard held.
    ``delete_at_once``: they become ``deleted`` at once (the indexer has nothing to call:
    :func:`syncd.rules.deletes_at_once`); otherwise ``pending`` with ``op = delete``, to be
    enqueued. ``run_id``: the run whose ``deleted`` / ``deletions_held`` /
    ``awaiting_confirmation`` counts them.
    """

    action: PruneAction
    crawl_id: str | None = None
    delete_at_once: bool = False
    run_id: str | None = None
    confirmations: int = 1
    awaiting: int = 0


@dataclass(frozen=True)
class PruneCounts:
    """The connector's live documents (not ``deleted``); of them, those a completed crawl
    did not see (and that are not already being deleted); and of those, the ones this crawl
    confirms gone: missed by as many complete crawls in a row, this one included, as the
    connector's ``prune_confirmations`` asks."""

    live: int
    unseen: int
    due: int


@dataclass(frozen=True)
class PruneResult:
    """What a prune plan did: the ids to enqueue (pending deletes), how many documents became
    ``deleted`` at once, how many deletions were held, and how many missed documents wait for
    confirmation."""

    queued: tuple[str, ...] = ()
    deleted: int = 0
    held: int = 0
    awaiting: int = 0

    @property
    def deleting(self) -> int:
        """Documents deleted or on their way to be."""
        return len(self.queued) + self.deleted


@dataclass(frozen=True)
class Transition:
    """The result of a state rule: the connector's new record plus run rows to write, and the
    documents to prune.

    The store applies all of it in one transaction.
    """

    connector: Connector
    start: RunStart | None = None
    ends: tuple[RunEnd, ...] = ()
    prune: PrunePlan | None = None


@dataclass(frozen=True)
class Run:
    """One sync run, as kept in the runs history."""

    id: str
    connector_id: str
    trigger: RunTrigger
    outcome: RunOutcome
    started_at: datetime
    finished_at: datetime | None = None
    pages: int = 0
    documents_seen: int = 0
    documents_enqueued: int = 0
    error: str | None = None
    owner: str | None = None
    documents_rejected: int = 0
    rejections: tuple[Rejection, ...] = ()
    note: str | None = None
    deleted: int = 0
    deletions_held: int = 0
    # 1 for a first try; n for the n-th run in a row after failures (manual runs count from 1).
    attempt: int = 1
    # Records read and left out by the source (a backfill's records past its window).
    documents_filtered: int = 0
    # How the crawl ended (a succeeded run: CrawlEnd.reason; None for any other outcome) and
    # the warnings about that end.
    end_reason: str | None = None
    warnings: tuple[str, ...] = ()
    # The live documents its completed full crawl missed that wait for confirmation.
    awaiting_confirmation: int = 0


@dataclass(frozen=True)
class Rejection:
    """A record of a crawled page that did not become a document, and why.

    ``record`` is the record's index in its page; ``page`` is the run's page number (from 1),
    set by the store when it keeps the rejection in the run's sample.
    """

    record: int | str
    reason: str
    page: int | None = None


class DocumentInput(NamedTuple):
    """A document produced by a crawl, before it reaches the store.

    ``payload_json`` is the payload's canonical JSON text
    (:func:`syncd.jsontext.canonical_json`), computed once for the hash and stored as it is,
    so that a page is serialised exactly once.
    A named tuple rather than a frozen dataclass: as immutable, and built several times
    faster (one per crawled record).
    """

    external_id: str
    payload: Any
    content_hash: str
    payload_json: str | None = None


@dataclass(frozen=True)
class DocumentFields:
    """The shape of a document (DESIGN.md §7): what a connector's ``document`` mapping reads
    from the record. Every indexer receives it beside the payload; a field the mapping does
    not name, or that the record lacks, is ``None``."""

    title: str | None = None
    text: str | None = None
    url: str | None = None
    updated_at: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


class _ParseOnRead:
    """The value of a stored document's ``payload`` before it is first read: its
    ``payload_json``, parsed then (:func:`~syncd.jsontext.parse_json`)."""

    def __repr__(self) -> str:
        return "PARSE_ON_READ"

    def __reduce__(self) -> str:
        return "PARSE_ON_READ"  # one object, across pickling too


PARSE_ON_READ = _ParseOnRead()


class _Payload:
    """``Document.payload``: the value given, or, given :data:`PARSE_ON_READ`, the document's
    ``payload_json`` parsed on first read and kept. Most indexers send the stored text as it
    is (webhook, OpenSearch, PostgreSQL table), so a claim parses nothing for them."""

    def __get__(self, document: Document | None, owner: type | None = None) -> Any:
        if document is None:
            return None  # the field's default (dataclasses reads it from the class)
        state = document.__dict__
        value = state["_payload"]
        if value is PARSE_ON_READ:
            value = state["_payload"] = parse_json(state["payload_json"])
        return value

    def __set__(self, document: Document, value: Any) -> None:
        document.__dict__["_payload"] = value


@dataclass(frozen=True)
class Document:
    """A document as kept in the store. ``payload`` is ``None`` unless it was asked for.

    ``payload_json`` is the stored JSON text of the payload (with ``payload``): the API
    embeds it as it is, so that nothing is lost to a re-encoding. A store gives ``payload``
    as :data:`PARSE_ON_READ` with its text: it is parsed when first read. ``fields`` is the
    document's shape (DESIGN.md §7) as the connector's ``document`` mapping reads it from the
    payload, set for the indexer that receives it; ``None`` without a mapping.
    """

    connector_id: str
    external_id: str
    status: DocStatus
    content_hash: str
    created_at: datetime
    updated_at: datetime
    error: str | None = None
    attempts: int = 0
    indexed_at: datetime | None = None
    payload: Any = _Payload()
    lease_token: str | None = None
    lease_until: datetime | None = None
    payload_json: str | None = field(default=None, compare=False, repr=False)
    op: DocOp = DocOp.INDEX
    fields: DocumentFields | None = field(default=None, compare=False)
    # Complete full crawls in a row that did not see it (DESIGN.md §12): 0 once seen again.
    missed: int = 0

    @classmethod
    def stored(cls, values: dict[str, Any]) -> Document:
        """A document from ``values``, one per field (a store's row, decoded), without the
        generated ``__init__``: its fifteen frozen-field assignments cost more than a claim's
        whole decoding of a row. ``values`` becomes the document's state; ``payload`` may be
        :data:`PARSE_ON_READ`."""
        document = object.__new__(cls)
        values["_payload"] = values.pop("payload")
        document.__dict__.update(values)
        return document


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


_last_id = [0, 0]


def new_id() -> str:
    """A 26-character, time-ordered identifier: 12 hex digits of milliseconds, then 14 of a
    random value that is incremented, not redrawn, within one millisecond (as ULIDs do), so
    ids made by one process sort by creation even within a millisecond."""
    ms = time.time_ns() // 1_000_000
    if ms <= _last_id[0]:
        ms = _last_id[0]
        tail = _last_id[1] + 1
    else:
        tail = int.from_bytes(os.urandom(7)) >> 1  # headroom for increments
    _last_id[0], _last_id[1] = ms, tail
    return f"{ms:012x}{tail:014x}"


MAX_REJECTIONS = 10
"""How many rejected records a run keeps as a sample (all of them are counted)."""
