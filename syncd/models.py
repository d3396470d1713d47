"""Records and enums shared by every layer.

Records are frozen dataclasses: a state change produces a new record (``dataclasses.replace``),
which the store writes back atomically. Timestamps are timezone-aware UTC datetimes.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import orjson

from syncd.errors import SourceError


class ConnectorStatus(StrEnum):
    """Operating state of a connector (DESIGN.md §2)."""

    ACTIVE = "active"
    PAUSED = "paused"
    ERROR = "error"
    DELETING = "deleting"


class SyncStatus(StrEnum):
    """Whether a sync run is executing now."""

    IDLE = "idle"
    RUNNING = "running"


class RunTrigger(StrEnum):
    """What started a run."""

    MANUAL = "manual"
    SCHEDULE = "schedule"
    STALE_LOCK = "stale_lock"


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


class WaitReason(StrEnum):
    """Why a running sync is sleeping."""

    BACKOFF = "backoff"
    RETRY_AFTER = "retry_after"
    THROTTLE = "throttle"


ABORTED_ERROR = "Aborted"
"""The ``error`` of documents failed by an abort; such documents are re-enqueued by the next run."""


@dataclass(frozen=True)
class Page:
    """One page of a cursor-paginated source: its records and the cursor of the next page
    (``None`` when this is the last page)."""

    records: list[dict[str, Any]]
    next_cursor: str | None = None


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
    page_retries: int = 3
    page_retry_backoff: float = 2.0
    throttle_seconds: float = 0.0
    retry_on_status: tuple[int, ...] = (502, 503, 504)
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
    # Internal, not part of the API: the cursor of the first page that was not committed
    # (resume point after a failed, aborted or interrupted run) and the source's own state
    # (e.g. the incremental high-water mark).
    resume_cursor: str | None = None
    source_state: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunStart:
    """A run row to insert when a sync is claimed."""

    id: str
    connector_id: str
    trigger: RunTrigger
    started_at: datetime
    owner: str | None


@dataclass(frozen=True)
class RunEnd:
    """How to close a run row; applied only while the row's outcome is still ``running``."""

    id: str
    outcome: RunOutcome
    finished_at: datetime
    error: str | None = None


@dataclass(frozen=True)
class Transition:
    """The result of a state rule: the connector's new record plus run rows to write.

    The store applies all of it in one transaction.
    """

    connector: Connector
    start: RunStart | None = None
    ends: tuple[RunEnd, ...] = ()


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


@dataclass(frozen=True)
class DocumentInput:
    """A document produced by a crawl, before it reaches the store.

    ``payload_json`` is the payload's canonical JSON text, computed once for the hash and
    reused by the store so that a page is serialised exactly once.
    """

    external_id: str
    payload: Any
    content_hash: str
    payload_json: str | None = None


@dataclass(frozen=True)
class Document:
    """A document as kept in the store. ``payload`` is ``None`` unless it was asked for."""

    connector_id: str
    external_id: str
    status: DocStatus
    content_hash: str
    created_at: datetime
    updated_at: datetime
    error: str | None = None
    attempts: int = 0
    indexed_at: datetime | None = None
    payload: Any = None
    lease_token: str | None = None
    lease_until: datetime | None = None


DocumentCounts = Mapping[DocStatus, int]


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


_JSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def _default(value: Any) -> str:
    return str(value)


def canonical_json(payload: Any) -> bytes:
    """The payload as compact JSON with sorted keys (values JSON cannot represent are
    written as strings)."""
    return orjson.dumps(payload, option=_JSON_OPTIONS, default=_default)


def content_hash(payload: Any) -> str:
    """A stable hash of a JSON-serialisable payload (key order does not matter)."""
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def document_inputs(
    records: Sequence[Mapping[str, Any]], id_field: str = "id"
) -> list[DocumentInput]:
    """Turn records into documents keyed by ``id_field`` (dotted path allowed)."""
    path = id_field.split(".")
    sha256 = hashlib.sha256
    out: list[DocumentInput] = []
    for rec in records:
        value: Any = rec
        for part in path:
            if not isinstance(value, Mapping) or part not in value:
                raise SourceError(f"record has no id field {id_field!r}")
            value = value[part]
        blob = canonical_json(rec)
        out.append(DocumentInput(str(value), rec, sha256(blob).hexdigest(), blob.decode()))
    return out
