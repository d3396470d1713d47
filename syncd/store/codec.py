"""Row <-> record conversions shared by the store backends (no SQL, no driver).

Column names are the same in every backend; how a value is represented (ISO text or a native
timestamp, JSON text or a native JSON column) differs, so the converters for datetimes and
JSON are parameters. The defaults are the text forms the SQLite store uses; a backend whose
driver returns native values passes :func:`identity`.

Two columns are JSON text on every backend: a document's ``payload`` (its canonical JSON
text, :func:`syncd.jsontext.canonical_json`, stored and returned as it is so that integers of
any size and ``\u0000`` survive) and a run's ``rejections`` and ``warnings`` (ASCII JSON
text).

Which documents of a crawled page are written and enqueued is a rule, not a conversion:
:func:`syncd.rules.plan_page`. Rows decoded once while their values do not change:
:class:`~syncd.store.decoded.DecodedRows` (re-exported here).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Protocol, TypeVar

import orjson

from syncd.jsontext import canonical_json
from syncd.models import (
    MAX_REJECTIONS,
    PARSE_ON_READ,
    Connector,
    ConnectorStatus,
    DocOp,
    DocStatus,
    Document,
    DocumentInput,
    Progress,
    Rejection,
    Run,
    RunOutcome,
    RunTrigger,
    SyncStatus,
    Waiting,
    WaitReason,
)
from syncd.store.decoded import DecodedRows

__all__ = [
    "CLAIM_COLUMNS",
    "CONNECTOR_COLUMNS",
    "DOCUMENT_COLUMNS",
    "RUN_COLUMNS",
    "DecodedRows",
    "Row",
    "claim_values",
    "connector_from_row",
    "connector_to_row",
    "decode_dt",
    "document_from_row",
    "dump_json",
    "encode_dt",
    "identity",
    "load_json",
    "merge_rejections",
    "payload_text",
    "rejections_from_text",
    "run_from_row",
    "status_counts",
    "waiting_from_columns",
    "warnings_from_text",
    "warnings_text",
]


class Row(Protocol):
    """Anything indexable by column name (``sqlite3.Row``, ``asyncpg.Record``, a dict)."""

    def __getitem__(self, key: str, /) -> Any: ...


Encoder = Callable[[Any], Any]

# Fixed width (microseconds always present, "Z" suffix) so that text comparison in SQL is
# chronological comparison.
_DT_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def identity(value: Any) -> Any:
    """Pass a value through unchanged (for drivers that speak native types)."""
    return value


def encode_dt(value: datetime | None) -> str | None:
    """An aware datetime as fixed-width, sortable ISO-8601 UTC text."""
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: syncd stores aware UTC datetimes only")
    return value.astimezone(UTC).strftime(_DT_FORMAT)


def decode_dt(value: str | datetime | None) -> datetime | None:
    """Text written by :func:`encode_dt` (or a datetime) as an aware UTC datetime."""
    if value is None:
        return None
    if isinstance(value, str):
        return _parse_dt(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@functools.lru_cache(maxsize=4096)
def _parse_dt(text: str) -> datetime:
    # Cached: the rows of one claim or listing mostly share their timestamps (a page's
    # creation time, the claim's time and lease), and datetimes are immutable.
    dt = datetime.fromisoformat(text)
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


# One encoder for every call: ``json.dumps`` with options builds a new encoder each time,
# which is measurable when a page of documents is written.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def dump_json(value: Any) -> str:
    """Compact JSON text. Values JSON cannot represent are written as strings, the same
    rule :func:`syncd.jsontext.content_hash` uses."""
    return _ENCODER.encode(value)


def load_json(value: str | bytes | None) -> Any:
    """Parse JSON text (``None`` stays ``None``)."""
    if value is None:
        return None
    return orjson.loads(value)


def payload_text(document: DocumentInput) -> str:
    """A document's payload as stored: the crawl's canonical JSON text when it has one,
    else the payload's (:class:`~syncd.jsontext.PayloadError` if it cannot be JSON)."""
    if document.payload_json is not None:
        return document.payload_json
    return canonical_json(document.payload).decode()


# --- connectors -------------------------------------------------------------------------

CONNECTOR_COLUMNS: tuple[str, ...] = (
    "id",
    "name",
    "source",
    "indexer",
    "created_at",
    "updated_at",
    "sync_schedule",
    "sync_timezone",
    "page_retries",
    "page_retry_backoff",
    "throttle_seconds",
    "retry_on_status",
    "status",
    "sync_status",
    "last_error",
    "run_id",
    "sync_started_at",
    "last_synced_at",
    "next_run_at",
    "sync_owner",
    "sync_heartbeat_at",
    "progress_pages",
    "progress_documents",
    "waiting_reason",
    "waiting_until",
    "resume_cursor",
    "source_state",
    "prune",
    "prune_max_fraction",
    "full_crawl_schedule",
    "deletions_held",
    "crawl_id",
    "crawl_full",
    "next_full_crawl_at",
    "hash_fields",
    "secret_state",
    "sync_queued_at",
    "document",
    "retry_attempts",
    "retry_backoff",
    "failures",
    "retry_at",
    "prune_confirmations",
    "awaiting_confirmation",
)
"""Every column of the connectors table, in the order :func:`connector_to_row` yields them."""

CLAIM_COLUMNS: tuple[str, ...] = (
    "sync_status",
    "run_id",
    "sync_started_at",
    "sync_owner",
    "sync_heartbeat_at",
    "progress_pages",
    "progress_documents",
    "waiting_reason",
    "waiting_until",
    "next_run_at",
    "sync_queued_at",
    "updated_at",
    "failures",
    "retry_at",
)
"""What a scheduler claim (``Store.claim_due``) may change: the run, the schedule and the
queued trigger. The bulk claim writes only these columns."""


def claim_values(c: Connector, *, dt: Encoder = encode_dt) -> tuple[Any, ...]:
    """The connector's :data:`CLAIM_COLUMNS` values, in order (what a bulk claim writes;
    no JSON encoded)."""
    waiting = c.waiting
    return (
        c.sync_status.value,
        c.run_id,
        dt(c.sync_started_at),
        c.sync_owner,
        dt(c.sync_heartbeat_at),
        c.progress.pages,
        c.progress.documents,
        waiting.reason.value if waiting else None,
        dt(waiting.until) if waiting else None,
        dt(c.next_run_at),
        dt(c.sync_queued_at),
        dt(c.updated_at),
        c.failures,
        dt(c.retry_at),
    )


def connector_to_row(
    c: Connector, *, dt: Encoder = encode_dt, js: Encoder = dump_json
) -> dict[str, Any]:
    """The connector's column values (keys in :data:`CONNECTOR_COLUMNS` order)."""
    waiting = c.waiting
    return {
        "id": c.id,
        "name": c.name,
        "source": js(dict(c.source)),
        "indexer": js(dict(c.indexer)),
        "created_at": dt(c.created_at),
        "updated_at": dt(c.updated_at),
        "sync_schedule": c.sync_schedule,
        "sync_timezone": c.sync_timezone,
        "page_retries": c.page_retries,
        "page_retry_backoff": c.page_retry_backoff,
        "throttle_seconds": c.throttle_seconds,
        "retry_on_status": js(list(c.retry_on_status)),
        "status": c.status.value,
        "sync_status": c.sync_status.value,
        "last_error": c.last_error,
        "run_id": c.run_id,
        "sync_started_at": dt(c.sync_started_at),
        "last_synced_at": dt(c.last_synced_at),
        "next_run_at": dt(c.next_run_at),
        "sync_owner": c.sync_owner,
        "sync_heartbeat_at": dt(c.sync_heartbeat_at),
        "progress_pages": c.progress.pages,
        "progress_documents": c.progress.documents,
        "waiting_reason": waiting.reason.value if waiting else None,
        "waiting_until": dt(waiting.until) if waiting else None,
        "resume_cursor": c.resume_cursor,
        "source_state": js(dict(c.source_state)),
        "prune": c.prune,
        "prune_max_fraction": c.prune_max_fraction,
        "full_crawl_schedule": c.full_crawl_schedule,
        "deletions_held": c.deletions_held,
        "crawl_id": c.crawl_id,
        "crawl_full": c.crawl_full,
        "next_full_crawl_at": dt(c.next_full_crawl_at),
        "hash_fields": None if c.hash_fields is None else js(list(c.hash_fields)),
        "secret_state": js(dict(c.secret_state)),
        "sync_queued_at": dt(c.sync_queued_at),
        "document": None if c.document is None else js(dict(c.document)),
        "retry_attempts": c.retry_attempts,
        "retry_backoff": c.retry_backoff,
        "failures": c.failures,
        "retry_at": dt(c.retry_at),
        "prune_confirmations": c.prune_confirmations,
        "awaiting_confirmation": c.awaiting_confirmation,
    }


def waiting_from_columns(reason: str | None, until: datetime | None) -> Waiting | None:
    """The ``waiting`` value kept as two columns (both null when not waiting)."""
    if reason is None or until is None:
        return None
    return Waiting(_enum(WaitReason, reason), until)


def connector_from_row(
    row: Row,
    *,
    dt: Callable[[Any], datetime | None] = decode_dt,
    js: Callable[[Any], Any] = load_json,
) -> Connector:
    """Build a :class:`Connector` from a row holding :data:`CONNECTOR_COLUMNS`."""
    if isinstance(row, sqlite3.Row):
        # sqlite3.Row finds a column by comparing names one by one, ~1 µs per lookup at the
        # end of a connector row: one dict of it costs 2 µs, its 40 lookups then next to
        # nothing. (asyncpg's Record looks names up in a hash table: converting it costs more.)
        row = dict(zip(row.keys(), row, strict=True))
    created_at = dt(row["created_at"])
    updated_at = dt(row["updated_at"])
    assert created_at is not None and updated_at is not None  # NOT NULL columns
    return Connector(
        id=row["id"],
        name=row["name"],
        source=js(row["source"]),
        indexer=js(row["indexer"]),
        created_at=created_at,
        updated_at=updated_at,
        sync_schedule=row["sync_schedule"],
        sync_timezone=row["sync_timezone"],
        page_retries=int(row["page_retries"]),
        page_retry_backoff=float(row["page_retry_backoff"]),
        throttle_seconds=float(row["throttle_seconds"]),
        retry_on_status=_statuses(row["retry_on_status"], js),
        status=_enum(ConnectorStatus, row["status"]),
        sync_status=_enum(SyncStatus, row["sync_status"]),
        last_error=row["last_error"],
        run_id=row["run_id"],
        sync_started_at=dt(row["sync_started_at"]),
        last_synced_at=dt(row["last_synced_at"]),
        next_run_at=dt(row["next_run_at"]),
        sync_owner=row["sync_owner"],
        sync_heartbeat_at=dt(row["sync_heartbeat_at"]),
        progress=Progress(int(row["progress_pages"]), int(row["progress_documents"])),
        waiting=waiting_from_columns(row["waiting_reason"], dt(row["waiting_until"])),
        resume_cursor=row["resume_cursor"],
        source_state=js(row["source_state"]),
        prune=bool(row["prune"]),
        prune_max_fraction=float(row["prune_max_fraction"]),
        full_crawl_schedule=row["full_crawl_schedule"],
        deletions_held=int(row["deletions_held"]),
        crawl_id=row["crawl_id"],
        crawl_full=bool(row["crawl_full"]),
        next_full_crawl_at=dt(row["next_full_crawl_at"]),
        hash_fields=_hash_fields(row["hash_fields"], js),
        secret_state=js(row["secret_state"]),
        sync_queued_at=dt(row["sync_queued_at"]),
        document=None if row["document"] is None else js(row["document"]),
        retry_attempts=int(row["retry_attempts"]),
        retry_backoff=float(row["retry_backoff"]),
        failures=int(row["failures"]),
        retry_at=dt(row["retry_at"]),
        prune_confirmations=_optional_int(row["prune_confirmations"]),
        awaiting_confirmation=int(row["awaiting_confirmation"]),
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


_E = TypeVar("_E", bound=Enum)
# Enum(value) walks Enum.__call__ and __new__; a dict lookup is a tenth of that.
_MEMBERS: dict[type[Enum], dict[Any, Enum]] = {
    enum: {m.value: m for m in enum} for enum in (ConnectorStatus, SyncStatus, WaitReason)
}


def _enum(enum: type[_E], value: Any) -> _E:
    member = _MEMBERS[enum].get(value)
    # An unknown value raises the enum's own ValueError, as Enum(value) always did.
    return enum(value) if member is None else member  # type: ignore[return-value]


def _statuses(value: Any, js: Callable[[Any], Any]) -> tuple[int, ...]:
    if isinstance(value, str):
        return _statuses_text(value, js)
    return tuple(int(s) for s in js(value))


def _hash_fields(value: Any, js: Callable[[Any], Any]) -> tuple[str, ...] | None:
    # NULL (the whole record) stays None: an empty list would hash nothing.
    if value is None:
        return None
    if isinstance(value, str):
        return _hash_fields_text(value, js)
    return tuple(str(f) for f in js(value))


# Cached by the column's JSON text (SQLite's form): the tuples are immutable, and the
# connectors of an instance share a few such lists.
@functools.lru_cache(maxsize=256)
def _statuses_text(text: str, js: Callable[[Any], Any]) -> tuple[int, ...]:
    return tuple(int(s) for s in js(text))


@functools.lru_cache(maxsize=256)
def _hash_fields_text(text: str, js: Callable[[Any], Any]) -> tuple[str, ...]:
    return tuple(str(f) for f in js(text))


# --- runs -------------------------------------------------------------------------------

RUN_COLUMNS: tuple[str, ...] = (
    "id",
    "connector_id",
    "trigger",
    "outcome",
    "started_at",
    "finished_at",
    "pages",
    "documents_seen",
    "documents_enqueued",
    "error",
    "owner",
    "documents_rejected",
    "rejections",
    "note",
    "deleted",
    "deletions_held",
    "attempt",
    "documents_filtered",
    "end_reason",
    "warnings",
    "awaiting_confirmation",
)
"""Every column of the runs table."""


def rejections_from_text(text: str | None) -> tuple[Rejection, ...]:
    """The run's sample of rejected records from its ``rejections`` column."""
    if not text:
        return ()
    return tuple(
        Rejection(item.get("record", ""), str(item.get("reason", "")), item.get("page"))
        for item in json.loads(text)
        if isinstance(item, dict)
    )


def merge_rejections(current: str | None, page: int, rejected: Sequence[Rejection]) -> str | None:
    """The new ``rejections`` column after a page (number ``page``) rejected ``rejected``:
    the first :data:`~syncd.models.MAX_REJECTIONS` of the run are kept. ``None`` when the
    column does not change."""
    sample: list[Any] = json.loads(current) if current else []
    room = MAX_REJECTIONS - len(sample)
    if room <= 0 or not rejected:
        return None
    sample.extend({"page": page, "record": r.record, "reason": r.reason} for r in rejected[:room])
    # ASCII: a reason may quote text from the source, which must fit any text column.
    return json.dumps(sample, ensure_ascii=True, separators=(",", ":"))


def warnings_text(warnings: Sequence[str]) -> str:
    """A run's ``warnings`` column: a JSON array of texts, ASCII like ``rejections``."""
    return json.dumps(list(warnings), ensure_ascii=True, separators=(",", ":"))


def warnings_from_text(text: str | None) -> tuple[str, ...]:
    """The run's warnings from its ``warnings`` column."""
    if not text:
        return ()
    return tuple(str(w) for w in json.loads(text))


def run_from_row(row: Row, *, dt: Callable[[Any], datetime | None] = decode_dt) -> Run:
    """Build a :class:`Run` from a row holding :data:`RUN_COLUMNS`."""
    started_at = dt(row["started_at"])
    assert started_at is not None  # NOT NULL column
    return Run(
        id=row["id"],
        connector_id=row["connector_id"],
        trigger=RunTrigger(row["trigger"]),
        outcome=RunOutcome(row["outcome"]),
        started_at=started_at,
        finished_at=dt(row["finished_at"]),
        pages=int(row["pages"]),
        documents_seen=int(row["documents_seen"]),
        documents_enqueued=int(row["documents_enqueued"]),
        error=row["error"],
        owner=row["owner"],
        documents_rejected=int(row["documents_rejected"]),
        rejections=rejections_from_text(row["rejections"]),
        note=row["note"],
        deleted=int(row["deleted"]),
        deletions_held=int(row["deletions_held"]),
        attempt=int(row["attempt"]),
        documents_filtered=int(row["documents_filtered"]),
        end_reason=row["end_reason"],
        warnings=warnings_from_text(row["warnings"]),
        awaiting_confirmation=int(row["awaiting_confirmation"]),
    )


# --- documents --------------------------------------------------------------------------

DOCUMENT_COLUMNS: tuple[str, ...] = (
    "connector_id",
    "external_id",
    "status",
    "content_hash",
    "created_at",
    "updated_at",
    "error",
    "attempts",
    "indexed_at",
    "lease_token",
    "lease_until",
    "op",
    "missed",
)
"""The columns of a document without its payload (listings never read the payload)."""


# Enum lookups by value without the enum call's machinery (a claim builds 100s of documents).
_STATUSES: dict[str, DocStatus] = {s.value: s for s in DocStatus}
_OPS: dict[str, DocOp] = {o.value: o for o in DocOp}


def document_from_row(
    row: Iterable[Any],
    *,
    with_payload: bool = False,
    dt: Callable[[Any], datetime | None] = decode_dt,
) -> Document:
    """Build a :class:`Document` from a row of :data:`DOCUMENT_COLUMNS` in that order (then
    ``payload``, JSON text, when ``with_payload``: kept as text, and parsed exactly when the
    document's ``payload`` is first read).

    Read by position, not by name: a ``sqlite3.Row`` finds a name by comparing it with each
    column's in turn, which was most of the cost of a claim's rows."""
    (
        connector_id,
        external_id,
        status,
        content_hash,
        created,
        updated,
        error,
        attempts,
        indexed,
        lease_token,
        lease_until,
        op,
        missed,
        *rest,
    ) = row
    text: str | None = rest[0] if with_payload else None
    created_at = dt(created)
    updated_at = dt(updated)
    assert created_at is not None and updated_at is not None  # NOT NULL columns
    # Every field of Document, in its order (tests/unit/test_stored_documents.py checks them).
    return Document.stored(
        {
            "connector_id": connector_id,
            "external_id": external_id,
            "status": _STATUSES[status],
            "content_hash": content_hash,
            "created_at": created_at,
            "updated_at": updated_at,
            "error": error,
            "attempts": int(attempts),
            "indexed_at": dt(indexed),
            # Parsed when an indexer reads it: most send the stored text as it is.
            "payload": None if text is None else PARSE_ON_READ,
            "lease_token": lease_token,
            "lease_until": dt(lease_until),
            "payload_json": text,
            "op": _OPS[op],
            "fields": None,
            "missed": int(missed),
        }
    )


def status_counts(found: Mapping[str, Any]) -> dict[DocStatus, int]:
    """Every document status's count, from counts by status value (zero if absent): the
    answer of :meth:`~syncd.store.base.Store.document_counts`."""
    return {s: int(found.get(s.value, 0)) for s in DocStatus}
