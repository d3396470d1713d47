"""A leased batch (DESIGN.md §7): claim → index → renew → hand back.

:class:`Leases` takes the batch a worker popped from the queue (one connector's documents),
claims its pending documents in the store with a lease (compare-and-set ``pending →
running``) and runs the connector's indexer over them in a task of its own
(:mod:`syncd.indexing.batch`). Meanwhile it keeps the batch: it records results as they come
(in small groups, at least every :data:`FLUSH_SECONDS`) and renews the lease every third of
``lease_seconds``, so a lease expires only when its worker is gone, whatever the speed of the
indexer. A result written after an abort or a delete (the document is no longer ``running``
under this lease) is refused by the store; a renewal that finds none of the batch's documents
still held cancels the indexing. A batch that cannot be indexed (a stop, the store lost) is
handed back: what is done is recorded, the rest released and queued again.

A document whose ``op`` is ``delete`` (DESIGN.md §11) travels the same way — claimed, leased,
fenced — and is deleted through the indexer's ``delete(document)`` (or ``delete_batch``); it
then reads ``deleted``. An indexer without ``delete`` (its kind does not support it) is not
called: the document is marked ``deleted``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import structlog

from syncd.config.sections import WorkersConfig
from syncd.errors import QueueError, SyncdError
from syncd.indexers.base import Indexer, IndexerKind
from syncd.indexing.batch import Result, Tally, run_indexer
from syncd.indexing.maintenance import Maintenance
from syncd.models import Connector, ConnectorStatus, DocStatus, new_id, utcnow
from syncd.observability.metrics import Metrics
from syncd.queue.base import Batch, WorkQueue
from syncd.rules.documents import split_retries
from syncd.rules.shape import is_costly, shaped
from syncd.runtime.changes import Notify
from syncd.runtime.outage import OutagePolicy, ride_out
from syncd.runtime.tasks import cancel_and_wait
from syncd.store.base import Store

log = structlog.get_logger("syncd.indexing.lease")

IndexerResolver = Callable[[Connector], tuple[Indexer, IndexerKind]]
"""The connector's indexer and its kind (:class:`syncd.plugins.Indexers`)."""

#: Longest a finished document waits before its result is written to the store.
FLUSH_SECONDS = 0.2

#: Connectors kept for the batches to come (all forgotten past it: a new read each).
_KNOWN_MAX = 4096


def _with_payload(connector: Connector, kind: IndexerKind | None) -> bool:
    """Whether a claim for ``connector`` reads the payloads: the indexer needs them, or the
    document shape is read from them (a mapping loads them for any indexer)."""
    return kind is not None and (kind.needs_payload or connector.document is not None)


@dataclass(eq=False)
class _Lease:
    """One claimed batch being indexed: its lease, its indexing task, and the results that
    the task produced and have not been recorded yet (``tally``)."""

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


class Leases:
    """The leased batches of one worker pool, from their claim to their last result."""

    def __init__(
        self,
        *,
        store: Store,
        queue: WorkQueue,
        indexer_for: IndexerResolver,
        metrics: Metrics,
        settings: WorkersConfig,
        maintenance: Maintenance,
        on_change: Notify | None = None,
        outage: OutagePolicy | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._indexer_for = indexer_for
        self._metrics = metrics
        self._index_timeout = settings.index_timeout_seconds
        self._lease_seconds = settings.lease_seconds
        self._max_attempts = settings.max_attempts
        self._retry_backoff = settings.retry_backoff_seconds
        self._maintenance = maintenance
        self._on_change = on_change
        # Results of delivered documents wait out an unavailable store (up to its budget).
        self._outage = outage or OutagePolicy()
        # connector id -> batches being indexed now, so an abort can cancel them.
        self._active: dict[str, set[_Lease]] = {}
        # The connectors batches were last delivered for, kept while each claim's stamp says
        # they are current: a batch then costs the store no read of its connector.
        self._known: dict[str, Connector] = {}

    @property
    def busy(self) -> int:
        """Batches being indexed now."""
        return sum(len(v) for v in self._active.values())

    async def cancel_connector(self, connector_id: str) -> int:
        """Cancel the indexing of the connector's batches whose documents were taken away
        in the store (abort step 3, delete); how many batches were cancelled.

        Only batches none of whose unfinished documents is still ``running`` under their
        lease are cancelled: an abort fails the documents in the store before it is
        broadcast, so a broadcast that arrives late never cancels a batch claimed after it.
        """
        cancelled = 0
        for lease in list(self._active.get(connector_id, ())):
            try:
                cancelled += await self._renew(lease)
            except SyncdError as exc:
                # The lease heartbeat asks again.
                log.warning("worker.lease_check_failed", connector_id=connector_id, error=str(exc))
        return cancelled

    async def deliver(self, batch: Batch) -> None:
        """Claim the batch's pending documents, index them and record their results; the
        batch is acknowledged, or handed back when nothing of it could be indexed. Raises
        what ended it (a stop, the store or the queue lost) after handing back the rest."""
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
        lease = _Lease(cid, token, len(docs), {d.external_id: d.attempts for d in docs})
        # Registered before any further await, so that an abort can always find it.
        lease.task = asyncio.create_task(
            run_indexer(
                indexer,
                docs,
                lease.tally,
                deletes=deletes,
                timeout=self._index_timeout,
                metrics=self._metrics,
                kind=kind.name,
            ),
            name=f"index:{cid}",
        )
        active = self._active.setdefault(cid, set())
        active.add(lease)
        try:
            try:
                await self._queue.ack(batch)
            except QueueError as exc:
                # Harmless: the queue hands an unacknowledged batch back after its deadline,
                # and claiming its documents then finds none pending. Cancelling the indexing
                # instead would deliver documents a second time.
                log.warning("worker.ack_failed", connector_id=cid, error=str(exc))
            await self._keep(lease)
        except BaseException:
            # Shutdown, or the store lost: keep what is done, give back the rest. Forgotten
            # first, so that no abort check renews the lease being released.
            self._forget(lease)
            await cancel_and_wait(lease.task)
            try:
                await asyncio.shield(self._record(lease))
            except SyncdError as exc:
                log.warning("worker.results_not_recorded", connector_id=cid, error=str(exc))
            await self._release(cid, token)
            raise
        finally:
            self._forget(lease)
            _log_failures(lease)
        if lease.task.cancelled():
            log.info(
                "worker.index_cancelled",
                connector_id=cid,
                documents=lease.total - lease.tally.produced,
            )

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

    def _forget(self, lease: _Lease) -> None:
        active = self._active.get(lease.connector_id)
        if active is not None:
            active.discard(lease)
            if not active:
                del self._active[lease.connector_id]

    async def _keep(self, lease: _Lease) -> None:
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
            await asyncio.wait({lease.task}, timeout=tick)
            if lease.task.done():
                break
            try:
                await self._record(lease)
                if loop.time() >= renew_at:
                    await self._renew(lease)
                    renew_at = loop.time() + renew_every
            except SyncdError as exc:
                # Tried again at the next tick: renewals are due well before the lease ends.
                # An outage is logged once, not once a tick.
                if not failing:
                    log.warning(
                        "worker.record_failed", connector_id=lease.connector_id, error=str(exc)
                    )
                failing = True
            else:
                failing = False
        if lease.task.cancelled():
            return  # taken away: its results would be refused
        lease.task.result()  # re-raise what the indexing task did not catch
        # The documents were delivered: their results wait for an unavailable store (up to the
        # outage budget) rather than leave them `running` until the lease expires and have
        # them delivered again.
        await ride_out(lambda: self._record(lease), policy=self._outage)

    async def _record(self, lease: _Lease) -> None:
        """Write the results produced so far (refused for documents no longer held)."""
        if not lease.results:
            return
        group = lease.results[:]
        now = utcnow()
        final, retries = split_retries(
            group,
            lease.tally.transient,
            lease.attempts,
            max_attempts=self._max_attempts,
            backoff=self._retry_backoff,
            now=now,
        )
        if retries:
            await self._store.retry_documents(
                lease.connector_id,
                lease.token,
                [(r.external_id, r.error, r.not_before) for r in retries],
                now=now,
            )
            self._metrics.document_retries.inc(len(retries))
        if final:
            await self._store.finish_documents(lease.connector_id, lease.token, final, now=now)
        # The indexing task may have added results meanwhile.
        del lease.results[: len(group)]
        if self._on_change is not None:
            await self._on_change(lease.connector_id)

    async def _renew(self, lease: _Lease) -> int:
        """Renew the batch's lease; cancel its indexing when none of its documents is held
        any more (aborted or deleted elsewhere, the broadcast lost). 1 if it was cancelled."""
        until = utcnow() + timedelta(seconds=self._lease_seconds)
        held = await self._store.extend_leases(lease.connector_id, lease.token, until)
        # Documents still to be indexed are `running` under the token unless taken away; the
        # others were recorded, or are being recorded (then there is nothing left to stop).
        if held or not lease.indexing:
            return 0
        lease.task.cancel()
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
            await self._maintenance.requeue(released)


def _log_failures(lease: _Lease) -> None:
    """One warning for the documents of a batch that failed to index: how many, and the
    first one with its error (a webhook that is down fails every document the same way)."""
    if lease.tally.first_failure is not None:
        document, error = lease.tally.first_failure
        log.warning(
            "worker.index_failed",
            connector_id=lease.connector_id,
            count=lease.tally.failed,
            batch=lease.total,
            first_document=document,
            first_error=error,
        )
