"""The lease sweeper and the tombstone purge (DESIGN.md §7, §11).

A document whose lease expired lost its worker (a crash, a stop that could not record it):
:class:`Sweeper` returns it to ``pending`` and queues it again, so that another worker
delivers it. In the same sweep it purges tombstones (``deleted`` documents) older than the
retention (``[documents] deleted_retention_days``). The worker pool runs it beside its
workers (:meth:`syncd.indexing.workers.Workers.start`).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta

import structlog

from syncd.config.sections import WorkersConfig
from syncd.indexing.maintenance import Maintenance
from syncd.models import utcnow
from syncd.store.base import Store

log = structlog.get_logger("syncd.indexing.sweeper")


class Sweeper:
    """Expired leases back to pending, and old tombstones purged."""

    def __init__(
        self,
        *,
        store: Store,
        maintenance: Maintenance,
        settings: WorkersConfig,
        deleted_retention: timedelta | None = None,
    ) -> None:
        self._store = store
        self._maintenance = maintenance
        self._deleted_retention = deleted_retention
        # Often enough for leases and for documents waiting to be retried.
        self._interval = max(
            0.05, min(settings.lease_seconds / 4, 30.0, settings.retry_backoff_seconds)
        )

    async def run(self, stopping: asyncio.Event) -> None:
        """Sweep until ``stopping`` is set: every quarter of the lease, 30 s or the retry
        backoff, whichever is shortest."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self._interval)
            if stopping.is_set():
                return
            await self.sweep()

    async def sweep(self) -> None:
        """Return documents whose lease expired to pending and queue them again; purge old
        tombstones. A failure is logged, and the queue rebuilt: one bad sweep never ends the
        sweeper."""
        # Released but maybe not queued: the rebuild re-pushes pending documents.
        maintenance = self._maintenance
        with maintenance.rebuild_on_failure("worker.sweep_failed", catch=Exception):
            released = await self._store.release_expired_leases(utcnow())
            if released:
                log.info("worker.leases_expired", documents=len(released))
                await maintenance.requeue(released)
            await self.purge_tombstones()

    async def purge_tombstones(self, now: datetime | None = None) -> int:
        """Remove ``deleted`` documents older than the retention (none without one); how
        many. ``now`` is for tests; a sweep passes the current time."""
        if self._deleted_retention is None:
            return 0
        purged = await self._store.purge_deleted((now or utcnow()) - self._deleted_retention)
        if purged:
            log.info("worker.tombstones_purged", documents=purged)
        return purged
