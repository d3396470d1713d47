"""Indexing workers (DESIGN.md §7).

Each worker takes a batch of one connector's documents from the queue (the queue is fair
across connectors), claims the pending ones in the store with a lease (compare-and-set
``pending → running``) and runs the connector's indexer over them in a task of its own:
document by document, or in batch calls for an indexer that takes batches, each call with a
timeout (:mod:`syncd.indexing.batch`). Meanwhile the worker keeps the batch: it records results as
they come (in small groups, at least every :data:`FLUSH_SECONDS`) and renews the lease every
third of ``lease_seconds``, so a lease expires only when its worker is gone, whatever the
speed of the indexer. A result written after an abort or a delete (the document is no longer
``running`` under this lease) is refused by the store; a renewal that finds none of the
batch's documents still held cancels the indexing. A sweeper returns documents whose lease
expired (their worker died) to ``pending`` and re-enqueues them, and purges tombstones
(``deleted`` documents) older than the retention.

A document whose ``op`` is ``delete`` (DESIGN.md §11) travels the same way — claimed, leased,
fenced — and is deleted through the indexer's ``delete(document)`` (or ``delete_batch``); it
then reads ``deleted``. An indexer without ``delete`` (its kind does not support it) is not
called: the document is marked ``deleted``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog

from syncd.errors import QueueError, QueueUnavailable, StoreUnavailable, SyncdError
from syncd.indexers.base import Indexer, IndexerKind
from syncd.indexing.batch import Result, Tally, run_indexer
from syncd.indexing.maintenance import Maintenance
from syncd.models import Connector, ConnectorStatus, DocStatus, new_id, utcnow
from syncd.observability.metrics import Metrics
from syncd.queue.base import Batch, WorkQueue
from syncd.rules.documents import split_retries
from syncd.rules.shape import is_costly, shaped
from syncd.runtime.outage import UNAVAILABLE, Outage, OutagePolicy, ride_out
from syncd.runtime.pacing import Pacer
from syncd.runtime.tasks import cancel_and_wait
from syncd.service.changes import Notify
from syncd.store.base import Store

log = structlog.get_logger("syncd.indexing.workers")

IndexerResolver = Callable[[Connector], tuple[Indexer, IndexerKind]]

#: Connectors a pool keeps for the batches to come (all forgotten past it: a new read each).
_KNOWN_MAX = 4096


def _with_payload(connector: Connector, kind: IndexerKind | None) -> bool:
    """Whether a claim for ``connector`` reads the payloads: the indexer needs them, or the
    document shape is read from them (a mapping loads them for any indexer)."""
    return kind is not None and (kind.needs_payload or connector.document is not None)


"""The connector's indexer and its kind (:class:`syncd.plugins.Indexers`)."""

#: Longest a finished document waits before its result is written to the store.
FLUSH_SECONDS = 0.2


@dataclass(eq=False)
class _Job:
    """One claimed batch being indexed: its lease, its indexing task, and the results that
    the task produced and the worker has not recorded yet (``tally``)."""

    connector_id: str
    token: str
    total: int
    # How many times each document has been claimed, this claim included (its retries).
    attempts: dict[str, int] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    task: asyncio.Task[None] = field(init=False)

    @property
    def results(self) -> list[Result]:
        """Results produced and not recorded yet."""
        return self.tally.results

    @property
    def indexing(self) -> bool:
        """Whether documents of the batch are still being (or waiting to be) indexed."""
        return not self.task.done() and self.tally.produced < self.total


class Workers:
    """A pool of indexing workers plus the lease sweeper."""

    def __init__(
        self,
        *,
        store: Store,
        queue: WorkQueue,
        indexer_for: IndexerResolver,
        metrics: Metrics,
        concurrency: int = 4,
        batch_size: int = 100,
        index_timeout: float = 30.0,
        lease_seconds: float = 300.0,
        max_attempts: int = 5,
        retry_backoff: float = 10.0,
        poll_timeout: float = 1.0,
        maintenance: Maintenance,
        on_change: Notify | None = None,
        deleted_retention: timedelta | None = None,
        pacer: Pacer | None = None,
        outage: OutagePolicy | None = None,
    ) -> None:
        self._store = store
        # A store or queue outage is waited out with the runs' backoff, never spun on.
        self._outage = outage or OutagePolicy()
        # A worker takes its next batch once the API's requests in flight are served.
        self._pacer = pacer or Pacer()
        self._deleted_retention = deleted_retention
        self._queue = queue
        self._indexer_for = indexer_for
        self._metrics = metrics
        self._concurrency = concurrency
        self._batch_size = batch_size
        self._index_timeout = index_timeout
        self._lease_seconds = lease_seconds
        self._max_attempts = max_attempts
        self._retry_backoff = retry_backoff
        self._poll_timeout = poll_timeout
        self._on_change = on_change
        self._maintenance = maintenance
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        # connector id -> batches being indexed now, so an abort can cancel them.
        self._active: dict[str, set[_Job]] = {}
        self._waiting: set[asyncio.Task[Any]] = set()
        # The connectors batches were last delivered for, kept while each claim's stamp says
        # they are current: a batch then costs the store no read of its connector.
        self._known: dict[str, Connector] = {}

    def start(self) -> None:
        """Start the workers and the sweeper."""
        self._stopping.clear()
        for i in range(self._concurrency):
            self._tasks.append(asyncio.create_task(self._worker(), name=f"worker:{i}"))
        self._tasks.append(asyncio.create_task(self._sweeper(), name="lease-sweeper"))

    async def cancel_connector(self, connector_id: str) -> int:
        """Cancel this instance's indexing of the connector's documents that were taken away
        in the store (abort step 3, delete); how many batches were cancelled.

        Only batches none of whose unfinished documents is still ``running`` under their
        lease are cancelled: an abort fails the documents in the store before it is
        broadcast, so a broadcast that arrives late never cancels a batch claimed after it.
        """
        cancelled = 0
        for job in list(self._active.get(connector_id, ())):
            try:
                cancelled += await self._renew(job)
            except SyncdError as exc:
                # The lease heartbeat asks again.
                log.warning("worker.lease_check_failed", connector_id=connector_id, error=str(exc))
        return cancelled

    @property
    def busy(self) -> int:
        """Batches being indexed now."""
        return sum(len(v) for v in self._active.values())

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

    # --- loops ------------------------------------------------------------------------

    async def _worker(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        # This worker's view of an outage of the queue and of the store, each its own: the
        # queue answering a pop says nothing of the store.
        queue_outage, store_outage = Outage(self._outage), Outage(self._outage)
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
                await self._handle(batch)
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

    def _resolve(
        self, connector: Connector
    ) -> tuple[Indexer | None, IndexerKind | None, str | None]:
        """The connector's indexer and its kind, or why there is none: an unknown type (a
        plugin gone) or a factory that raised fails the documents with the reason, visible
        and re-queueable once it is fixed."""
        try:
            indexer, kind = self._indexer_for(connector)
        except Exception as exc:
            return None, None, f"Indexer unavailable: {exc}"[:500]
        return indexer, kind, None

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

    async def _handle(self, batch: Batch) -> None:
        cid = batch.connector_id
        token = new_id()
        indexer: Indexer | None = None
        problem: str | None = None
        deletes = False
        claiming = False
        try:
            connector = self._known.get(cid) or await self._store.get_connector(cid)
            if connector is None or connector.status is ConnectorStatus.DELETING:
                self._known.pop(cid, None)
                await self._queue.ack(batch)
                return
            indexer, kind, problem = self._resolve(connector)
            with_payload = _with_payload(connector, kind)
            now = utcnow()
            claiming = True
            claim = await self._store.claim_for_delivery(
                cid,
                batch.external_ids,
                lease_token=token,
                lease_until=now + timedelta(seconds=self._lease_seconds),
                now=now,
                with_payload=with_payload,
            )
            docs = claim.documents
            if claim.stamp is not None and claim.stamp != (connector.status, connector.updated_at):
                # The connector changed since it was read (its config, its status): read it
                # again. Documents claimed for a copy that no longer holds -- deleting, gone, or
                # now needing the payloads this claim did not read -- go back, to be delivered
                # under the current one.
                self._known.pop(cid, None)
                fresh = await self._store.get_connector(cid)
                if fresh is None or fresh.status is ConnectorStatus.DELETING:
                    await self._hand_back(batch, token)
                    return
                indexer, kind, problem = self._resolve(fresh)
                if _with_payload(fresh, kind) and not with_payload:
                    await self._hand_back(batch, token)
                    return
                connector = fresh
            if len(self._known) >= _KNOWN_MAX:
                self._known.clear()
            self._known[cid] = connector
            deletes = kind is not None and kind.supports_delete
        except Exception:
            # Nothing was indexed: give back what this token may hold (a claim can commit
            # with its answer lost) and the batch, or its documents would stay pending with
            # no queue entry until the next start. Before the claim this token holds nothing
            # (and a store that is away could not release anything anyway).
            await self._hand_back(batch, token, claimed=claiming)
            raise
        if indexer is None or kind is None:
            await self._queue.ack(batch)
            if docs:
                log.error("worker.no_indexer", connector_id=cid, error=problem)
                failed = [(d.external_id, DocStatus.FAILED, problem) for d in docs]
                await self._store.finish_documents(cid, token, failed, now=utcnow())
                if self._on_change is not None:
                    await self._on_change(cid)
            return
        if not docs:
            await self._queue.ack(batch)
            return
        if connector.document is not None:
            if is_costly(connector.document):  # HTML to text: off the loop the API shares
                docs = await asyncio.to_thread(shaped, connector.document, docs)
            else:
                docs = shaped(connector.document, docs)
        job = _Job(cid, token, len(docs), {d.external_id: d.attempts for d in docs})
        # Registered before any further await, so that an abort can always find it.
        job.task = asyncio.create_task(
            run_indexer(
                indexer,
                docs,
                job.tally,
                deletes=deletes,
                timeout=self._index_timeout,
                metrics=self._metrics,
                kind=kind.name,
            ),
            name=f"index:{cid}",
        )
        active = self._active.setdefault(cid, set())
        active.add(job)
        try:
            try:
                await self._queue.ack(batch)
            except QueueError as exc:
                # Harmless: the queue hands an unacknowledged batch back after its deadline,
                # and claiming its documents then finds none pending. Cancelling the indexing
                # instead would deliver documents a second time.
                log.warning("worker.ack_failed", connector_id=cid, error=str(exc))
            await self._keep(job)
        except BaseException:
            # Shutdown, or the store lost: keep what is done, give back the rest. Forgotten
            # first, so that no abort check renews the lease being released.
            self._forget(job)
            await cancel_and_wait(job.task)
            try:
                await asyncio.shield(self._record(job))
            except SyncdError as exc:
                log.warning("worker.results_not_recorded", connector_id=cid, error=str(exc))
            await self._release(cid, token)
            raise
        finally:
            self._forget(job)
            _log_failures(job)
        if job.task.cancelled():
            log.info(
                "worker.index_cancelled",
                connector_id=cid,
                documents=job.total - job.tally.produced,
            )

    def _forget(self, job: _Job) -> None:
        active = self._active.get(job.connector_id)
        if active is not None:
            active.discard(job)
            if not active:
                del self._active[job.connector_id]

    async def _keep(self, job: _Job) -> None:
        """While the batch is indexed, record its results as they come and renew its lease;
        return when the indexing task has ended and every result is recorded."""
        loop = asyncio.get_running_loop()
        renew_every = self._lease_seconds / 3
        tick = min(FLUSH_SECONDS, renew_every)
        renew_at = loop.time() + renew_every
        failing = False
        while True:
            # asyncio.wait does not propagate the task's own cancellation (an abort), only
            # this worker's.
            await asyncio.wait({job.task}, timeout=tick)
            if job.task.done():
                break
            try:
                await self._record(job)
                if loop.time() >= renew_at:
                    await self._renew(job)
                    renew_at = loop.time() + renew_every
            except SyncdError as exc:
                # Tried again at the next tick: renewals are due well before the lease ends.
                # An outage is logged once, not once a tick.
                if not failing:
                    log.warning(
                        "worker.record_failed", connector_id=job.connector_id, error=str(exc)
                    )
                failing = True
            else:
                failing = False
        if job.task.cancelled():
            return  # taken away: its results would be refused
        job.task.result()  # re-raise what the indexing task did not catch
        # The documents were delivered: their results wait for an unavailable store (up to the
        # outage budget) rather than leave them `running` until the lease expires and have
        # them delivered again.
        await ride_out(lambda: self._record(job), policy=self._outage)

    async def _record(self, job: _Job) -> None:
        """Write the results produced so far (refused for documents no longer held)."""
        if not job.results:
            return
        group = job.results[:]
        now = utcnow()
        final, retries = split_retries(
            group,
            job.tally.transient,
            job.attempts,
            max_attempts=self._max_attempts,
            backoff=self._retry_backoff,
            now=now,
        )
        if retries:
            await self._store.retry_documents(
                job.connector_id,
                job.token,
                [(r.external_id, r.error, r.not_before) for r in retries],
                now=now,
            )
            self._metrics.document_retries.inc(len(retries))
        if final:
            await self._store.finish_documents(job.connector_id, job.token, final, now=now)
        # The indexing task may have added results meanwhile.
        del job.results[: len(group)]
        if self._on_change is not None:
            await self._on_change(job.connector_id)

    async def _renew(self, job: _Job) -> int:
        """Renew the batch's lease; cancel its indexing when none of its documents is held
        any more (aborted or deleted elsewhere, the broadcast lost). 1 if it was cancelled."""
        until = utcnow() + timedelta(seconds=self._lease_seconds)
        held = await self._store.extend_leases(job.connector_id, job.token, until)
        # Documents still to be indexed are `running` under the token unless taken away; the
        # others were recorded, or are being recorded (then there is nothing left to stop).
        if held or not job.indexing:
            return 0
        job.task.cancel()
        return 1

    async def _hand_back(self, batch: Batch, token: str, *, claimed: bool = True) -> None:
        cid = batch.connector_id
        if claimed:
            await self._release(cid, token)
        with self._maintenance.rebuild_on_failure("worker.handback_failed", connector_id=cid):
            await self._queue.push(cid, batch.external_ids)
            await self._queue.ack(batch)

    async def _release(self, connector_id: str, token: str) -> None:
        """Give back documents claimed under ``token`` (shutdown): expire the lease now, and
        let the sweep return them to pending."""
        failed = "worker.release_failed"
        with self._maintenance.rebuild_on_failure(failed, connector_id=connector_id):
            now = utcnow()
            await asyncio.shield(self._store.extend_leases(connector_id, token, now))
            released = await asyncio.shield(self._store.release_expired_leases(now))
            await self._push(released)

    async def _push(self, pairs: list[tuple[str, str]]) -> None:
        by_connector: dict[str, list[str]] = {}
        for cid, ext in pairs:
            by_connector.setdefault(cid, []).append(ext)
        for cid, ids in by_connector.items():
            await self._queue.push(cid, ids)

    async def purge_tombstones(self, now: datetime | None = None) -> int:
        """Remove ``deleted`` documents older than the retention (none without one); how
        many. ``now`` is for tests; the sweeper passes the current time."""
        if self._deleted_retention is None:
            return 0
        purged = await self._store.purge_deleted((now or utcnow()) - self._deleted_retention)
        if purged:
            log.info("worker.tombstones_purged", documents=purged)
        return purged

    async def _sweeper(self) -> None:
        """Return documents whose lease expired to pending and re-enqueue them."""
        # Often enough for leases and for documents waiting to be retried.
        interval = max(0.05, min(self._lease_seconds / 4, 30.0, self._retry_backoff))
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)
            if self._stopping.is_set():
                return
            # Released but maybe not queued: the rebuild re-pushes pending documents. Any
            # failure, so that one bad sweep never ends the sweeper.
            with self._maintenance.rebuild_on_failure("worker.sweep_failed", catch=Exception):
                released = await self._store.release_expired_leases(utcnow())
                if released:
                    log.info("worker.leases_expired", documents=len(released))
                    await self._push(released)
                await self.purge_tombstones()


def _log_failures(job: _Job) -> None:
    """One warning for the documents of a batch that failed to index: how many, and the
    first one with its error (a webhook that is down fails every document the same way)."""
    if job.tally.first_failure is not None:
        document, error = job.tally.first_failure
        log.warning(
            "worker.index_failed",
            connector_id=job.connector_id,
            count=job.tally.failed,
            batch=job.total,
            first_document=document,
            first_error=error,
        )
