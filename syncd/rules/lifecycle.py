"""A connector's configuration and lifecycle: PATCH (pause, resume, a new schedule or source)
and the start of its deletion."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from syncd.errors import Conflict
from syncd.models import Connector, ConnectorStatus, SyncStatus, Transition
from syncd.rules.crawls import RESET_SOURCE_CHANGED, STATE_COMPLETED, STATE_RESET, crawl_states
from syncd.rules.state import (
    MSG_DELETE_RUNNING,
    MSG_DELETING,
    idle,
    next_full_crawl_at,
    next_run_at,
    with_status,
)
from syncd.rules.steering import drop_request, kept_on_source_change

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
        "prune_confirmations",
        "full_crawl_schedule",
        "hash_fields",
        "document",
        "retry_attempts",
        "retry_backoff",
    }
)


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
        fields["source_state"] = {
            **kept_on_source_change(c),
            STATE_COMPLETED: completed,
            STATE_RESET: RESET_SOURCE_CHANGED,
        }
    updated = replace(c, updated_at=now, **fields)
    status = changes.get("status")
    if status is not None:
        status = ConnectorStatus(status)
        if status not in (ConnectorStatus.ACTIVE, ConnectorStatus.PAUSED):
            raise ValueError(f"status cannot be set to {status}")
        updated = with_status(updated, status)
        if status is ConnectorStatus.PAUSED and c.sync_status is SyncStatus.QUEUED:
            updated = idle(drop_request(updated), now)  # a pause drops a queued trigger
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
    gone = idle(c, now) if c.sync_status is SyncStatus.QUEUED else c
    return Transition(with_status(gone, ConnectorStatus.DELETING, next_run_at=None, updated_at=now))
