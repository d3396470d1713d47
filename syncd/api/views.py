"""Records → JSON bodies of the control API (DESIGN.md §3).

Only the fields the contract names leave this module: internal state (``resume_cursor``,
``source_state``, document leases) never does, and secrets in a connector's configuration
are shown as ``"***"`` (``source.auth`` shows its shape: see
:func:`syncd.config.secrets.shown_auth`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import Enum
from typing import Any

import orjson

from syncd.config import secrets
from syncd.models import (
    Connector,
    ConnectorStatus,
    CrawlWindow,
    DocStatus,
    Document,
    Run,
    SyncStatus,
    WaitReason,
)
from syncd.observability.logs import MASK
from syncd.rules.steering import CrawlState

# The encoder ``web.json_response`` uses (``json.dumps`` with its defaults): the texts below
# are spliced from its output, so every body stays byte for byte what it was.
_ENCODE = json.JSONEncoder().encode
# How many masked configurations are kept: far more than the connectors a listing shows.
MASKED_CACHE_SIZE = 1024
# Configurations that are not plain JSON values (datetimes, str subclasses, dataclasses) make
# ``orjson.dumps`` refuse them: those are masked on every call instead of cached.
_KEY_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
)
_masked_texts: dict[bytes, str] = {}
#: Connectors' answers by the identity of the connector (see :func:`connector_text`).
CONNECTOR_TEXTS_SIZE = 1024
_connector_texts: dict[int, tuple[Connector, Mapping[DocStatus, int], str]] = {}
# ``member.value`` is a descriptor call each time; these are plain lookups.
_VALUES: dict[Enum, str] = {
    m: m.value for enum in (ConnectorStatus, SyncStatus, WaitReason) for m in enum
}
_DOC_STATUSES = tuple((status, status.value) for status in DocStatus)


def timestamp(value: datetime | None) -> str | None:
    """ISO-8601 in UTC with a ``Z`` suffix (a naive datetime is taken as UTC)."""
    if value is None:
        return None
    return _timestamp(value)


@functools.lru_cache(maxsize=4096)
def _timestamp(value: datetime) -> str:
    # Cached: a listing's rows share their timestamps (the store's decoder returns the same
    # datetimes), and equal datetimes are the same instant, so the same UTC text.
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _head(c: Connector) -> dict[str, Any]:
    """The fields of a connector's answer before ``source`` and ``indexer``."""
    return {
        "id": c.id,
        "name": c.name,
        "status": _VALUES[c.status],
        "sync_status": _VALUES[c.sync_status],
        "last_error": c.last_error,
        "run_id": c.run_id,
        "sync_started_at": timestamp(c.sync_started_at),
        "sync_queued_at": timestamp(c.sync_queued_at),
        "last_synced_at": timestamp(c.last_synced_at),
        "sync_schedule": c.sync_schedule,
        "sync_timezone": c.sync_timezone,
        "next_run_at": timestamp(c.next_run_at),
        "failures": c.failures,
        "retry_at": timestamp(c.retry_at),
        "created_at": timestamp(c.created_at),
        "updated_at": timestamp(c.updated_at),
    }


def _tail(c: Connector, counts: Mapping[DocStatus, int]) -> dict[str, Any]:
    """The fields of a connector's answer after ``source`` and ``indexer``."""
    return {
        "page_retries": c.page_retries,
        "page_retry_backoff": c.page_retry_backoff,
        "throttle_seconds": c.throttle_seconds,
        "retry_on_status": list(c.retry_on_status),
        "prune": c.prune,
        "prune_max_fraction": c.prune_max_fraction,
        "prune_confirmations": c.prune_confirmations,
        "full_crawl_schedule": c.full_crawl_schedule,
        "deletions_held": c.deletions_held,
        "documents_awaiting_confirmation": c.awaiting_confirmation,
        "hash_fields": None if c.hash_fields is None else list(c.hash_fields),
        "retry_attempts": c.retry_attempts,
        "retry_backoff": c.retry_backoff,
        "document": None if c.document is None else dict(c.document),
        "progress": {"pages": c.progress.pages, "documents": c.progress.documents},
        "waiting": (
            None
            if c.waiting is None
            else {"reason": _VALUES[c.waiting.reason], "until": timestamp(c.waiting.until)}
        ),
        "sync_owner": c.sync_owner,
        "sync_heartbeat_at": timestamp(c.sync_heartbeat_at),
        "documents": {value: int(counts.get(status, 0)) for status, value in _DOC_STATUSES},
    }


def connector_json(connector: Connector, counts: Mapping[DocStatus, int]) -> dict[str, Any]:
    """A connector as the API returns it, with its document counts per status."""
    c = connector
    return {
        **_head(c),
        "source": redact_source(c.source),
        "indexer": redact_indexer(c.indexer),
        **_tail(c, counts),
    }


def connector_text(connector: Connector, counts: Mapping[DocStatus, int]) -> str:
    """``json.dumps(connector_json(connector, counts))``, byte for byte, for less CPU.

    The masked ``source`` and ``indexer`` are encoded once per configuration
    (:func:`masked_config_text`): a connector's configuration changes rarely, its state on
    every page of a run. The rest is encoded as two objects, spliced around them.
    """
    c = connector
    # The rule: an entry answers the very objects it was made from (`is`), never equal ones.
    # Equal is not the same text: `==` ignores key order and takes 1, 1.0 and True for one
    # another, which the text does not (tests/unit/test_connector_text.py), and an exact
    # comparison would cost about what encoding does. The objects are read-only (a frozen
    # Connector, the counts the store answered), so the same objects write the same text:
    # the identity is a version. Hits come from the store answering an unchanged row with
    # the objects it answered before (codec.DecodedRows), which the same test file checks;
    # objects built afresh only miss. The entry holds both objects, so their ids cannot be
    # reused by others while it exists.
    known = _connector_texts.get(id(c))
    if known is not None and known[0] is c and known[1] is counts:
        return known[2]
    head, tail = _ENCODE(_head(c)), _ENCODE(_tail(c, counts))
    source = masked_config_text(c.source, source=True)
    indexer = masked_config_text(c.indexer, source=False)
    text = f'{head[:-1]}, "source": {source}, "indexer": {indexer}, {tail[1:]}'
    if len(_connector_texts) >= CONNECTOR_TEXTS_SIZE:
        _connector_texts.clear()
    _connector_texts[id(c)] = (c, counts, text)
    return text


def connectors_page_text(connectors: Iterable[str], next_cursor: str | None) -> str:
    """``json.dumps({"data": [...], "next_cursor": ...})`` of connectors already encoded by
    :func:`connector_text`."""
    return f'{{"data": [{", ".join(connectors)}], "next_cursor": {_ENCODE(next_cursor)}}}'


def masked_config_text(config: Mapping[str, Any], *, source: bool) -> str:
    """The JSON text of a source (``source``) or indexer configuration with its secrets
    masked, as :func:`redact_source` or :func:`redact_indexer` mask it.

    Cached by the configuration's own JSON text and its kind, so a changed configuration is a
    new key and never answered from an old entry. Key order is part of the key, as it is of
    the answer. (``orjson`` writes NaN as ``null``: a configuration is parsed JSON and holds
    none.)
    """
    redact = redact_source if source else redact_indexer
    try:
        key = (b"s" if source else b"i") + orjson.dumps(config, option=_KEY_OPTIONS)
    except TypeError:  # not plain JSON (see _KEY_OPTIONS): mask it every time
        return _ENCODE(redact(config))
    text = _masked_texts.get(key)
    if text is None:
        text = _ENCODE(redact(config))
        if len(_masked_texts) >= MASKED_CACHE_SIZE:
            _masked_texts.clear()  # configurations rarely change: a rebuild is cheap
        _masked_texts[key] = text
    return text


def run_json(run: Run) -> dict[str, Any]:
    """A run of a connector's history."""
    return {
        "id": run.id,
        "connector_id": run.connector_id,
        "trigger": run.trigger.value,
        "outcome": run.outcome.value,
        "started_at": timestamp(run.started_at),
        "finished_at": timestamp(run.finished_at),
        "pages": run.pages,
        "documents_seen": run.documents_seen,
        "documents_enqueued": run.documents_enqueued,
        "error": run.error,
        "owner": run.owner,
        "documents_rejected": run.documents_rejected,
        "rejections": [
            {"page": r.page, "record": r.record, "reason": r.reason} for r in run.rejections
        ],
        "note": run.note,
        "deleted": run.deleted,
        "deletions_held": run.deletions_held,
        "awaiting_confirmation": run.awaiting_confirmation,
        "attempt": run.attempt,
        "documents_filtered": run.documents_filtered,
        "end_reason": run.end_reason,
        "warnings": list(run.warnings),
    }


def state_json(connector_id: str, state: CrawlState) -> dict[str, Any]:
    """A connector's crawl state (``GET /connectors/{id}/state``, DESIGN.md §12)."""
    crawl = state.crawl
    plan = state.next_crawl
    return {
        "connector_id": connector_id,
        "incremental": state.incremental,
        "mark": state.mark,
        "mark_set_at": timestamp(state.mark_set_at),
        "mark_set_by": state.mark_set_by,
        "mark_crawl_id": state.mark_crawl_id,
        "mark_run_id": state.mark_run_id,
        "crawl": None
        if crawl is None
        else {
            "id": crawl.id,
            "mode": crawl.mode.value,
            **_window_json(crawl.window),
            "started_at": timestamp(crawl.started_at),
            "resume_cursor_held": crawl.resume_cursor_held,
        },
        "next_crawl": {
            "mode": plan.steer.mode.value,
            **_window_json(plan.steer.window),
            "resumes": plan.resume,
        },
        "last_full_crawl_at": timestamp(state.last_full_crawl_at),
        "documents_awaiting_confirmation": state.awaiting_confirmation,
    }


def _window_json(window: CrawlWindow | None) -> dict[str, Any]:
    return {
        "since": None if window is None else window.since,
        "until": None if window is None else window.until,
    }


def document_json(document: Document, *, with_payload: bool = False) -> dict[str, Any]:
    """A document; its payload only when asked for (the single-document route).

    The payload is the stored JSON text as an ``orjson.Fragment``, embedded as it is (no
    re-encoding loses an integer's digits): serialise the result with ``orjson.dumps``.
    """
    d = document
    out: dict[str, Any] = {
        "external_id": d.external_id,
        "status": d.status.value,
        "error": d.error,
        "content_hash": d.content_hash,
        "attempts": d.attempts,
        "created_at": timestamp(d.created_at),
        "updated_at": timestamp(d.updated_at),
        "indexed_at": timestamp(d.indexed_at),
        "missed_crawls": d.missed,
    }
    if with_payload:
        out["payload"] = d.payload if d.payload_json is None else orjson.Fragment(d.payload_json)
    return out


def redact_source(source: Mapping[str, Any]) -> dict[str, Any]:
    """The source's configuration with its secrets masked; ``auth`` shows its shape.

    The source layer knows which values are secret; header values are masked here as well
    so that a header can never leak, whatever that layer decides.
    """
    return _mask_headers(secrets.redact_source(source))


def redact_indexer(indexer: Mapping[str, Any]) -> dict[str, Any]:
    """The indexer's configuration masked like a source's (webhook headers, plugin tokens;
    an ``auth`` of a plugin's own is masked whole)."""
    return _mask_headers(secrets.redact_config(indexer))


def _mask_headers(config: dict[str, Any]) -> dict[str, Any]:
    headers = config.get("headers")
    if isinstance(headers, Mapping):
        config["headers"] = dict.fromkeys(headers, MASK)
    return config
