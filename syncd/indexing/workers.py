"""Indexing workers (DESIGN.md §7): the pool.

Each worker takes a batch of one connector's documents from the queue (the queue is fair
across connectors) once the API's requests in flight are served, and delivers it as a leased
batch (:mod:`syncd.indexing.lease`: claim → index → renew → hand back). A worker never gives
up on its backends: an unavailable queue or store is waited out with a capped exponential
backoff, and one failed batch never ends a worker. Beside the workers runs the lease sweeper
(:mod:`syncd.indexing.sweeper`), which also purges old tombstones.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from syncd.config.sections import WorkersConfig
from syncd.errors import QueueUnavailable, StoreUnavailable, SyncdError
from syncd.indexing.lease import Leases
from syncd.indexing.sweeper import Sweeper
from syncd.queue.base import WorkQueue
from syncd.runtime.outage import UNAVAILABLE, Outage, OutagePolicy
from syncd.runtime.pacing import Pacer

log = structlog.get_logger("syncd.indexing.workers")


class Workers:
    """A pool of indexing workers plus the lease sweeper."""

    def __init__(
        self,
        *,
        queue: WorkQueue,
        leases: Leases,
        sweeper: Sweeper,
        settings: WorkersConfig,
        pacer: Pacer | None = None,
        outage: OutagePolicy | None = None,
        poll_timeout: float = 1.0,
    ) -> None:
        self._queue = queue
        self._leases = leases
        self._sweeper = sweeper
        self._concurrency = settings.concurrency
        self._batch_size = settings.batch_size
        # A worker takes its next batch once the API's requests in flight are served.
        self._pacer = pacer or Pacer()
        # A store or queue outage is waited out with the runs' backoff, never spun on.
        self._outage = outage or OutagePolicy()
        self._poll_timeout = poll_timeout
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._waiting: set[asyncio.Task[Any]] = set()

    def start(self) -> None:
        """Start the workers and the sweeper."""
        self._stopping.clear()
        for i in range(self._concurrency):
            self._tasks.append(asyncio.create_task(self._worker(), name=f"worker:{i}"))
        self._tasks.append(
            asyncio.create_task(self._sweeper.run(self._stopping), name="lease-sweeper")
        )

    async def cancel_connector(self, connector_id: str) -> int:
        """Cancel this instance's indexing of the connector's documents that were taken away
        in the store (abort step 3, delete); how many batches were cancelled
        (:meth:`Leases.cancel_connector <syncd.indexing.lease.Leases.cancel_connector>`)."""
        return await self._leases.cancel_connector(connector_id)

    @property
    def busy(self) -> int:
        """Batches being indexed now."""
        return self._leases.busy

    async def stop(self, grace: float) -> None:
        """Stop taking work, let batches in progress finish within ``grace`` seconds, then
        cancel the rest and release their leases so that they are redone."""
        self._stopping.set()
        if not self._tasks:
            return
        # Workers waiting for work hold nothing: stop them now rather than after their poll.
        for t in self._waiting:
            t.cancel()
        _, pending = await asyncio.wait(self._tasks, timeout=grace)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)
        self._tasks.clear()

    async def _worker(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        # This worker's view of an outage of the queue and of the store, each its own: the
        # queue answering a pop says nothing of the store.
        queue_outage, store_outage = Outage(self._outage), Outage(self._outage)
        deliver = self._leases.deliver
        while not self._stopping.is_set():
            await self._pacer.turn()
            if self._stopping.is_set():
                break  # stopped while waiting for the turn: take no new batch
            self._waiting.add(me)
            try:
                batch = await self._queue.pop(self._batch_size, self._poll_timeout)
            except UNAVAILABLE as exc:
                await self._back_off(queue_outage, exc)
                continue
            except SyncdError as exc:
                log.warning("worker.queue_unavailable", error=str(exc))
                await self._pause()
                continue
            finally:
                self._waiting.discard(me)
            self._recovered(queue_outage)
            if batch is None:
                continue
            try:
                await deliver(batch)
            except StoreUnavailable as exc:
                # The batch was handed back (or is rebuilt from the store): wait for the
                # store instead of taking the next batch into the same outage.
                await self._back_off(store_outage, exc)
            except QueueUnavailable as exc:
                await self._back_off(queue_outage, exc)
            except Exception as exc:
                # One batch never ends a worker. The store is the truth: the batch was handed
                # back, and documents not recorded come back through the lease sweeper.
                log.warning(
                    "worker.batch_failed",
                    connector_id=batch.connector_id,
                    error=str(exc),
                    exc_info=not isinstance(exc, SyncdError),
                )
                await self._pause()
            else:
                self._recovered(store_outage)

    async def _pause(self, seconds: float | None = None) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self._stopping.wait(), self._poll_timeout if seconds is None else seconds
            )

    async def _back_off(self, outage: Outage, exc: Exception) -> None:
        """Wait before the next attempt at a backend that is unavailable (capped exponential
        backoff, interrupted by a stop); a worker never gives up on its backends."""
        if not outage.active:
            log.warning("worker.backend_unavailable", error=str(exc))
        try:
            delay = outage.failed(exc)
        except SyncdError:
            # Past the budget: keep waiting at the cap (a worker has nothing to fail).
            delay = self._outage.backoff.cap
        await self._pause(delay)

    def _recovered(self, outage: Outage) -> None:
        lasted = outage.recovered()
        if lasted is not None:
            log.info("worker.backend_back", outage_seconds=round(lasted, 3))
