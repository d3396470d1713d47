"""The metrics read from the store and the queue: the daemon polls them into the gauges of
:class:`~syncd.observability.metrics.Metrics` (``syncd_documents``, ``syncd_connectors``,
``syncd_queue_depth`` and, with ``[metrics] per_connector``, each connector's last success).

It lives here, with the daemon that owns both backends, so that the metrics themselves need
neither. The number of series does not grow with the number of connectors: the store figures
are totals from one aggregate query each (:meth:`Store.document_totals`,
:meth:`Store.connector_totals`) and the queue depth is one total.
"""

from __future__ import annotations

import asyncio

import structlog

from syncd.errors import SyncdError
from syncd.observability.metrics import Metrics
from syncd.queue.base import WorkQueue
from syncd.store.base import Store

log = structlog.get_logger("syncd.daemon.metrics_poller")

__all__ = ["REFRESH_SECONDS", "refresh", "refresh_forever"]

#: Seconds between two refreshes of the gauges read from the store and the queue.
REFRESH_SECONDS = 5.0
#: Connectors read per store call when the per-connector series are refreshed.
_CONNECTOR_PAGE = 1000


async def refresh(metrics: Metrics, store: Store, queue: WorkQueue) -> None:
    """Refresh the store and queue gauges once: one aggregate query for the documents, one
    for the connectors, one call for the queue depth (and, with ``per_connector``, a walk
    over every connector). The store and the queue are refreshed independently: one being
    down leaves only its own figures as they were. Raises the first failure."""
    failure: Exception | None = None
    try:
        documents = await store.document_totals()
        connectors = await store.connector_totals()
        metrics.set_document_counts(documents)
        metrics.set_connector_counts(connectors)
        if metrics.per_connector:
            metrics.set_last_successes(await _last_successes(store))
    except Exception as exc:
        failure = exc
    try:
        metrics.set_queue_depth(sum((await queue.depth()).values()))
    except Exception as exc:
        failure = failure or exc
    if failure is not None:
        raise failure


async def _last_successes(store: Store) -> list[tuple[str, str, float]]:
    """``(id, name, unix time)`` of every connector that has succeeded once, all pages."""
    out: list[tuple[str, str, float]] = []
    after: str | None = None
    while True:
        page = await store.list_connectors(limit=_CONNECTOR_PAGE, after=after)
        out.extend(
            (c.id, c.name, c.last_synced_at.timestamp())
            for c in page
            if c.last_synced_at is not None
        )
        if len(page) < _CONNECTOR_PAGE:
            return out
        after = page[-1].id


async def refresh_forever(metrics: Metrics, store: Store, queue: WorkQueue) -> None:
    """Run forever: :func:`refresh` every :data:`REFRESH_SECONDS`. A refresh that fails
    leaves the previous figures; it never ends the refreshes."""
    while True:
        try:
            await refresh(metrics, store, queue)
        except Exception as exc:
            log.warning(
                "metrics.refresh_failed", error=str(exc), exc_info=not isinstance(exc, SyncdError)
            )
        await asyncio.sleep(REFRESH_SECONDS)
