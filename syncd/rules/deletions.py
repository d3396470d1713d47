"""Deletions (DESIGN.md §11, §12): how many complete crawls must miss a document before it is
deleted, what a completed full crawl prunes or holds (the guard), applying held deletions,
and the tombstones of an incremental source."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from syncd.errors import Conflict
from syncd.models import Connector, ConnectorStatus, PruneAction, PruneCounts, PrunePlan, Transition
from syncd.paths import MISSING, get_parts, parse_path
from syncd.rules.records import external_id_of
from syncd.rules.state import MSG_DELETING, MSG_NO_DELETIONS_HELD

PRUNE_GUARD_MIN = 10
"""The guard holds a completed crawl's deletions only when there are more than this many."""

SHIFTING_STYLES = frozenset({"offset", "page"})
"""The ``http`` pagination styles whose pages shift when a record before them is deleted: a
crawl may then miss a live record (DESIGN.md §12)."""

CONFIRMATIONS_WHEN_SHIFTING = 2
"""The default ``prune_confirmations`` of a list that shifts under deletions."""


class IndexerCapabilities(Protocol):
    """What an indexer kind declares that decides how its documents are deleted."""

    @property
    def indexed_on_commit(self) -> bool:
        """Its whole work is the store keeping the document."""

    @property
    def supports_delete(self) -> bool:
        """Its indexers have a ``delete`` to call for a document gone at the source."""


def deletes_at_once(kind: IndexerCapabilities) -> bool:
    """Whether documents deleted for a connector with an indexer of ``kind`` become ``deleted``
    at once, in the transaction that decides it (``delete_at_once``), rather than ``pending``
    with ``op = delete`` and through the queue: when the indexer has nothing to call — it is
    ``indexed_on_commit`` (the store is the index) or has no ``delete``."""
    return kind.indexed_on_commit or not kind.supports_delete


def default_prune_confirmations(source: Mapping[str, Any]) -> int:
    """How many complete full crawls in a row must miss a document of ``source`` before it is
    deleted, when the connector does not say (``prune_confirmations`` absent or null).

    2 for an ``http`` source whose pagination can shift under a deletion — the ``offset`` and
    ``page`` styles, and any style whose ``pagination.shifts`` is true — since one crawl that
    missed a record there does not show it is gone; 1 (the first complete crawl that misses it
    deletes it) for the keyset styles (``cursor``, ``next_url``, ``link_header``), a
    ``shifts: false`` pagination and plugin sources.
    """
    if source.get("type", "http") != "http":
        return 1
    pagination = source.get("pagination")
    if not isinstance(pagination, Mapping):
        return 1
    shifts = pagination.get("shifts")
    if not isinstance(shifts, bool):
        shifts = pagination.get("type", "cursor") in SHIFTING_STYLES
    return CONFIRMATIONS_WHEN_SHIFTING if shifts else 1


def prune_confirmations(c: Connector) -> int:
    """The connector's ``prune_confirmations``, or the default of its source
    (:func:`default_prune_confirmations`)."""
    if c.prune_confirmations is not None:
        return c.prune_confirmations
    return default_prune_confirmations(c.source)


def plan_prune(
    c: Connector,
    counts: PruneCounts | None,
    *,
    crawl_id: str,
    run_id: str,
    delete_at_once: bool,
) -> PrunePlan | None:
    """What a completed full crawl does with the live documents it did not see: nothing when
    ``prune`` is off or there are none. Otherwise each of them has been missed once more, and
    those now missed by :func:`prune_confirmations` complete crawls in a row (``due``) are
    confirmed gone: held (the guard) when they are more than ``prune_max_fraction`` of the
    live documents and more than :data:`PRUNE_GUARD_MIN`, deleted otherwise. The rest wait
    for confirmation (the plan's ``awaiting``)."""
    if not c.prune or counts is None or counts.unseen <= 0:
        return None
    due = counts.due
    guarded = due > c.prune_max_fraction * counts.live and due > PRUNE_GUARD_MIN
    action = PruneAction.HOLD_UNSEEN if guarded else PruneAction.DELETE_UNSEEN
    return PrunePlan(
        action,
        crawl_id=crawl_id,
        delete_at_once=delete_at_once,
        run_id=run_id,
        confirmations=prune_confirmations(c),
        awaiting=max(counts.unseen - due, 0),
    )


def apply_held(c: Connector, *, now: datetime, delete_at_once: bool) -> Transition:
    """``POST …/deletions/apply``: delete what the guard held; :class:`Conflict` (``No
    deletions held``) when nothing is held, or while the connector is being deleted."""
    if c.status is ConnectorStatus.DELETING:
        raise Conflict(MSG_DELETING)
    if c.deletions_held <= 0:
        raise Conflict(MSG_NO_DELETIONS_HELD)
    plan = PrunePlan(PruneAction.DELETE_HELD, delete_at_once=delete_at_once)
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
    value = get_parts(record, tuple(path)) if isinstance(record, Mapping) else MISSING
    return value is not MISSING and value is not None and value is not False


def split_tombstones(
    records: Sequence[Any], field: str, id_field: str
) -> tuple[list[Any], list[str]]:
    """A page's records without its tombstones, and the external ids the tombstones delete
    (a tombstone without a usable id is kept with the records, to be rejected as a record)."""
    path, id_path = parse_path(field), parse_path(id_field)
    live: list[Any] = []
    gone: list[str] = []
    for record in records:
        if is_tombstone(record, path):
            try:
                gone.append(external_id_of(record, id_path, id_field))
                continue
            except ValueError:
                pass
        live.append(record)
    return live, gone
