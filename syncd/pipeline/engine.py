"""Sync runs (DESIGN.md §4): claim → paginate → per-page commit → enqueue.

:class:`SyncEngine` owns the sync tasks of this instance, one per running connector. A run
writes nothing that is not fenced by its run id; when a write is refused (the run was aborted
or taken over elsewhere) the run stops. An abort reaches a run through its cancel token — set
directly when the abort arrives at this instance, by a broadcast from another instance, or by
the heartbeat's store poll when the broadcast was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import structlog

from syncd import rules
from syncd.errors import Aborted, Fenced, NotFound, StoreUnavailable, SyncdError
from syncd.http.paginator import AsyncCursorPaginator, CancelToken
from syncd.indexing.maintenance import Maintenance
from syncd.models import (
    ABORTED_ERROR,
    Connector,
    Crawl,
    PruneResult,
    Run,
    RunOutcome,
    RunTrigger,
    Waiting,
    WaitReason,
    new_id,
    utcnow,
)
from syncd.observability.logs import describe_error
from syncd.observability.metrics import Metrics
from syncd.pipeline.builder import SourceBuilder
from syncd.pipeline.pages import CursorRejected, PreparedPage, checkpoint, guard_resume, read_ahead
from syncd.pipeline.prepare import Preparer
from syncd.plugins import Registry
from syncd.queue.base import WorkQueue
from syncd.runtime.changes import Notify
from syncd.runtime.outage import DEFAULT_BACKOFF, OutagePolicy, ride_out
from syncd.runtime.pacing import Pacer
from syncd.runtime.tasks import cancel_and_wait
from syncd.store.base import Store

log = structlog.get_logger("syncd.pipeline.engine")

T = TypeVar("T")

#: The waits shown from this instance's memory when the store cannot record them.
_OUTAGE_REASONS = frozenset({WaitReason.STORE_UNAVAILABLE, WaitReason.QUEUE_UNAVAILABLE})


@dataclass(eq=False)
class _Handle:
    """A run executing in this instance."""

    connector_id: str
    run_id: str
    token: CancelToken
    task: asyncio.Task[None] | None = None
    trigger: RunTrigger = RunTrigger.MANUAL
    waiting: Waiting | None = None
    stopping: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    note: str | None = None
    # The crawl this run stamps (None: a crawl begun before crawls were stamped), and whether
    # its deletions are done at once (rules.deletes_at_once).
    crawl: Crawl | None = None
    delete_at_once: bool = True
    # Called when the run's task ends (its admission slot frees).
    on_end: Callable[[], None] | None = None


class SyncEngine:
    """Runs syncs of this instance and stops them on abort or shutdown."""

    def __init__(
        self,
        *,
        store: Store,
        queue: WorkQueue,
        sources: SourceBuilder,
        registry: Registry,
        metrics: Metrics,
        heartbeat_seconds: float = 1.0,
        maintenance: Maintenance,
        on_change: Notify | None = None,
        pacer: Pacer | None = None,
        outage: OutagePolicy | None = None,
    ) -> None:
        self._store = store
        # How long, and how, a run waits for an unavailable store or queue (issue 23).
        self._outage = outage or OutagePolicy()
        self._queue = queue
        self._sources = sources
        self._registry = registry
        self._on_change = on_change
        self._metrics = metrics
        self._heartbeat_seconds = heartbeat_seconds
        self._maintenance = maintenance
        self._runs: dict[str, _Handle] = {}
        # Background steps wait for the API's requests in flight (bounded; see pacing).
        self._pacer = pacer or Pacer()
        # One run's records become documents at a time, in slices of loop time.
        self._preparer = Preparer(pacer=self._pacer)
        # Every run task of this instance, including runs replaced by a stale-lock takeover
        # (no longer in ``_runs``), so that a stop waits for all of them.
        self._handles: set[_Handle] = set()
        self._closed = False

    @property
    def running(self) -> dict[str, str]:
        """``{connector_id: run_id}`` of the runs executing in this instance."""
        return {cid: h.run_id for cid, h in self._runs.items()}

    def start(
        self,
        connector: Connector,
        trigger: RunTrigger,
        *,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        """Start the run just claimed for ``connector`` (its ``run_id`` is set); ``on_end`` is
        called when the run's task ends. Runs start through
        :meth:`syncd.pipeline.admission.Admission.claim_and_start`, in a run slot."""
        assert connector.run_id is not None
        handle = _Handle(
            connector.id, connector.run_id, CancelToken(), trigger=trigger, on_end=on_end
        )
        previous = self._runs.get(connector.id)
        if previous is not None:
            # Taken over (stale lock): the old run's writes are fenced already; stop it too.
            previous.token.cancel()
        self._runs[connector.id] = handle
        self._handles.add(handle)
        if self._closed:
            # Claimed while the daemon stops (a tick or a trigger already in flight): the run
            # ends at once as interrupted instead of running unowned.
            handle.stopping = True
            handle.token.cancel()
        handle.task = asyncio.create_task(
            self._run(connector, handle), name=f"sync:{connector.id}:{connector.run_id}"
        )

    def outage_wait(self, connector_id: str) -> Waiting | None:
        """The store or queue outage this instance's run of the connector waits out, if any.

        A wait for the store cannot be written to the store: this instance shows it from
        memory (its API overlays it on the stored connector) until the store is back."""
        handle = self._runs.get(connector_id)
        waiting = None if handle is None else handle.waiting
        return waiting if waiting is not None and waiting.reason in _OUTAGE_REASONS else None

    def overlay(self, connector: Connector) -> Connector:
        """``connector`` as read from the store, with the outage wait of this instance's run
        of it (see :meth:`outage_wait`), which the store may not have been able to record."""
        waiting = self.outage_wait(connector.id)
        if waiting is None or connector.run_id != self._runs[connector.id].run_id:
            return connector
        return dataclasses.replace(connector, waiting=waiting)

    def abort_local(self, connector_id: str, run_id: str | None = None) -> bool:
        """Set the cancel token of this instance's run of the connector, if it runs here."""
        handle = self._runs.get(connector_id)
        if handle is None or (run_id is not None and handle.run_id != run_id):
            return False
        handle.token.cancel()
        return True

    async def wait(self, connector_id: str) -> None:
        """Wait until this instance's run of the connector (if any) has ended."""
        handle = self._runs.get(connector_id)
        if handle is not None:
            await handle.done.wait()

    async def stop(self, grace: float) -> None:
        """Graceful stop: each run ends at its next page boundary and is marked
        ``interrupted``; runs still going after ``grace`` seconds are cancelled. Runs claimed
        while stopping end at once."""
        self._closed = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self._handles:
            handles = list(self._handles)
            for h in handles:
                h.stopping = True
                # A run sleeping in a backoff or blocked on a hung request must not hold the
                # shutdown: the token interrupts both; the run is then marked interrupted.
                h.token.cancel()
            tasks = [h.task for h in handles if h.task is not None]
            _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()))
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)
            for h in handles:
                self._handles.discard(h)

    # --- the run --------------------------------------------------------------------

    async def _run(self, connector: Connector, handle: _Handle) -> None:
        run_id = handle.run_id
        cid = connector.id
        structlog.contextvars.bind_contextvars(
            connector_id=cid, connector=connector.name, run_id=run_id
        )
        self._metrics.run_started(run_id)
        heartbeat = asyncio.create_task(self._heartbeat(handle), name=f"heartbeat:{cid}")
        try:
            if self._on_change is not None:  # the run started (the claim wrote its row)
                await self._on_change(cid, run_id=run_id)
            await self._crawl(connector, handle)
        except asyncio.CancelledError:
            handle.stopping = True  # one attempt at the final write, no retry loop
            await self._end(handle, RunOutcome.INTERRUPTED)
            raise
        except (Aborted, Fenced):
            if handle.stopping:
                await self._end(handle, RunOutcome.INTERRUPTED)
            else:
                await self._ended(handle, RunOutcome.ABORTED)
        except Exception as exc:
            if handle.token.cancelled and not handle.stopping:
                # An abort already set the state; what the unwinding raised is logged only.
                log.warning("sync.abort_unwind_error", error=str(exc))
            else:
                log.error("sync.failed", error=str(exc), exc_type=type(exc).__name__)
                await self._end(handle, RunOutcome.FAILED, describe_error(exc))
        else:
            await self._end(handle, RunOutcome.SUCCEEDED)
        finally:
            try:
                await cancel_and_wait(heartbeat)
            finally:
                # Even when this task is cancelled again while the heartbeat stops.
                if self._runs.get(cid) is handle:
                    del self._runs[cid]
                self._handles.discard(handle)
                handle.done.set()
                if handle.on_end is not None:
                    handle.on_end()
                self._metrics.run_gone(run_id)
                structlog.contextvars.unbind_contextvars("connector_id", "connector", "run_id")

    async def _crawl(self, connector: Connector, handle: _Handle) -> None:
        cid = connector.id
        # Documents failed by an abort are re-enqueued whether or not their pages come again.
        # Fenced by this run: a run aborted before it gets here re-queues nothing.
        requeued = await self._ride_out(
            handle,
            lambda: self._store.requeue_documents(
                cid, error=ABORTED_ERROR, now=utcnow(), run_id=handle.run_id
            ),
        )
        if requeued:
            with self._maintenance.rebuild_on_failure():
                await self._ride_out(handle, lambda: self._queue.push(cid, requeued))
        resuming = connector.resume_cursor is not None
        # Why this run starts over instead of resuming, recorded on the run with its first
        # page (e.g. a PATCH changed the source).
        handle.note = None if resuming else rules.reset_reason(connector)
        log.info("sync.started", trigger=str(handle.trigger), resuming=resuming, note=handle.note)
        if resuming:
            try:
                await self._paginate(connector, handle, connector.resume_cursor)
                return
            except CursorRejected as exc:
                log.warning("sync.resume_rejected", status=exc.status)
                handle.note = f"resume cursor rejected with HTTP {exc.status}; started over"
        await self._paginate(connector, handle, None)

    async def _paginate(self, connector: Connector, handle: _Handle, start: str | None) -> None:
        cid = connector.id
        resuming = start is not None
        crawl = rules.crawl_of_run(
            connector, resuming=resuming, now=utcnow(), new_crawl_id=new_id()
        )
        handle.crawl = crawl
        source = self._sources.build(
            connector,
            resuming=resuming,
            full=crawl is not None and crawl.full,
            on_wait=lambda reason, seconds: self._on_wait(handle, reason, seconds),
        )
        id_field = str(connector.source.get("id_field", "id"))
        tombstones = rules.deleted_field(connector.source)
        kind = self._registry.indexer(connector.indexer)
        indexed_on_commit = kind.indexed_on_commit
        handle.delete_at_once = rules.deletes_at_once(kind)
        pages = AsyncCursorPaginator(
            guard_resume(source, start, connector.retry_on_status),
            max_retries=connector.page_retries,
            backoff_factor=connector.page_retry_backoff,
            retry_on_status=tuple(connector.retry_on_status),
            throttle_seconds=connector.throttle_seconds,
            cancel_token=handle.token,
            start_cursor=start,
            on_wait=lambda reason, seconds: self._on_wait(handle, reason, seconds),
            on_retry=lambda exc, attempt: self._metrics.page_retries.inc(),
        )

        async def prepared() -> AsyncIterator[PreparedPage]:
            # Runs in the read-ahead task: records become documents, and the source's state
            # is taken right after its page, while the previous page is being committed.
            async for page in pages:
                # The wait (if any) that preceded this page is over; the next one, for the
                # page after, may start while this one commits.
                # (A wait for the store or queue belongs to the commit, not to the fetch.)
                if handle.waiting is not None and handle.waiting.reason not in _OUTAGE_REASONS:
                    handle.waiting = None
                    handle.wake.set()  # show it at once, not at the next heartbeat
                records: list[Any] = page.records
                gone: list[str] = []
                if tombstones is not None:
                    records, gone = rules.split_tombstones(records, tombstones, id_field)
                docs, rejected = await self._preparer.document_inputs(
                    records, id_field, connector.hash_fields
                )
                if rejected:
                    self._metrics.records_rejected.inc(len(rejected))
                    log.warning(
                        "sync.records_rejected", count=len(rejected), reason=rejected[0].reason
                    )
                yield PreparedPage(
                    page.next_cursor, docs, checkpoint(source), tuple(rejected), tuple(gone)
                )
                await self._pacer.turn()  # before the next fetch (and its decoding)

        reader = read_ahead(prepared(), name=f"fetch:{cid}")
        async with contextlib.aclosing(reader):
            await self._commit_pages(connector, handle, reader, indexed_on_commit)

    async def _commit_pages(
        self,
        connector: Connector,
        handle: _Handle,
        items: AsyncIterator[PreparedPage],
        indexed_on_commit: bool,
    ) -> None:
        cid = connector.id
        async for item in items:
            self._metrics.pages.inc()
            await self._pacer.turn()
            # The page and its checkpoint in one transaction: retried as a whole while the
            # store is unavailable (the upserts are idempotent, the checkpoint is fenced).
            ids = await self._ride_out(
                handle, functools.partial(self._commit, connector, handle, item, indexed_on_commit)
            )
            handle.note = None
            if ids and not indexed_on_commit:
                # Committed as pending: if not queued, the queue is rebuilt from the store, or
                # a re-sync would leave these unchanged documents unqueued; the run fails once
                # the queue stays unavailable beyond the outage budget.
                with self._maintenance.rebuild_on_failure():
                    await self._ride_out(handle, functools.partial(self._queue.push, cid, ids))
            if self._on_change is not None:
                await self._on_change(cid)
            # On a graceful stop the token is set: the next fetch raises Aborted, but pages
            # already fetched are still committed first, so the run resumes after them.

    async def _commit(
        self, connector: Connector, handle: _Handle, item: PreparedPage, indexed_on_commit: bool
    ) -> list[str]:
        """One page's documents and checkpoint, in one store transaction (fenced)."""
        return await self._store.commit_page(
            connector.id,
            handle.run_id,
            item.documents,
            next_cursor=item.next_cursor,
            source_state=rules.page_state(connector, item.state),
            now=utcnow(),
            indexed=indexed_on_commit,
            rejected=item.rejected,
            note=handle.note,
            crawl=handle.crawl,
            deletions=item.deletions,
            delete_at_once=handle.delete_at_once,
        )

    async def _ride_out(self, handle: _Handle, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, waiting out an unavailable store or queue (see
        :mod:`syncd.runtime.outage`); the run's cancel token ends the wait at once."""

        async def sleep(seconds: float) -> None:
            if not handle.token.cancelled:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(handle.token.wait(), seconds)
            if handle.token.cancelled:
                raise Aborted()

        reasons: set[WaitReason] = set()  # logged once per call and backend

        def waiting(reason: WaitReason, seconds: float) -> None:
            if reason not in reasons:
                reasons.add(reason)
                log.warning("sync.backend_unavailable", waiting=str(reason))
            self._on_wait(handle, reason, seconds)

        def recovered(lasted: float) -> None:
            log.info("sync.backend_back", outage_seconds=round(lasted, 3))
            if handle.waiting is not None and handle.waiting.reason in _OUTAGE_REASONS:
                handle.waiting = None
                handle.wake.set()  # the heartbeat writes the end of the wait at once

        return await ride_out(
            call, policy=self._outage, sleep=sleep, on_wait=waiting, on_recovered=recovered
        )

    def _on_wait(self, handle: _Handle, reason: WaitReason, seconds: float) -> None:
        handle.waiting = Waiting(reason, utcnow() + timedelta(seconds=seconds))
        self._metrics.backoff_seconds.labels(reason=str(reason)).inc(seconds)
        # Show the wait at once rather than at the next heartbeat.
        handle.wake.set()

    async def _report(self, handle: _Handle) -> None:
        current = await self._store.report(
            handle.connector_id, handle.run_id, now=utcnow(), waiting=handle.waiting
        )
        if not current:
            handle.token.cancel()

    async def _heartbeat(self, handle: _Handle) -> None:
        """Report liveness and waits; a refused report means the run was aborted elsewhere."""
        failing = False
        while not handle.token.cancelled:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(handle.wake.wait(), self._heartbeat_seconds)
            handle.wake.clear()
            try:
                await self._report(handle)
            except SyncdError as exc:
                # Tried again every period; an outage is logged once, not once a period.
                if not (failing and isinstance(exc, StoreUnavailable)):
                    log.warning("sync.heartbeat_failed", error=str(exc))
                failing = True
            else:
                failing = False
                if self._on_change is not None:
                    await self._on_change(handle.connector_id)

    async def _end(self, handle: _Handle, outcome: RunOutcome, error: str | None = None) -> None:
        """Write the run's final transition (fenced); a refused write is only logged."""
        cid, run_id = handle.connector_id, handle.run_id
        now = utcnow()
        crawl = handle.crawl

        def change(c: Connector) -> Any:
            if outcome is RunOutcome.FAILED:
                return rules.fail(c, run_id=run_id, error=error or "failed", now=now)
            return rules.interrupt(c, run_id=run_id, now=now)

        def succeed(c: Connector, counts: Any) -> Any:
            # A completed full crawl prunes in the success transition's own transaction.
            return rules.succeed(
                c,
                run_id=run_id,
                now=now,
                crawl=crawl,
                counts=counts,
                delete_at_once=handle.delete_at_once,
            )

        attempt = 0
        pruned = PruneResult()
        while True:
            try:
                # Shielded: the final write must land even if shutdown cancels the run task.
                if outcome is RunOutcome.SUCCEEDED:
                    unseen_by = crawl.id if crawl is not None and crawl.full else None
                    _, _, pruned = await asyncio.shield(
                        self._store.mutate_with_prune(cid, succeed, unseen_by=unseen_by)
                    )
                else:
                    await asyncio.shield(self._store.mutate_connector(cid, change))
                break
            except (Fenced, NotFound):
                log.info("sync.end_fenced", outcome=outcome)
                return
            except SyncdError as exc:
                # Giving up would leave the connector `running` until a stale-lock takeover:
                # keep trying while the store is away. A shutdown gives up (the next start
                # finds the run orphaned: abort or the scheduler clears it).
                if handle.stopping:
                    log.error("sync.end_not_recorded", outcome=outcome, error=str(exc))
                    return
                if attempt == 0:
                    log.warning("sync.end_retry", outcome=outcome, error=str(exc))
                # Capped at 0.5 s: the end state lands at most that long after the store is
                # back, so a dead run does not read `running` for seconds.
                await asyncio.sleep(DEFAULT_BACKOFF.delay(attempt))
                attempt += 1
        if attempt:
            log.info("sync.end_recorded", outcome=outcome, attempts=attempt + 1)
        self._metrics.runs.labels(trigger=str(handle.trigger), outcome=str(outcome)).inc()
        await self._ended(handle, outcome)
        await self._pruned(cid, pruned)
        if self._on_change is not None:
            await self._on_change(cid, run_id=run_id)

    async def _pruned(self, connector_id: str, result: PruneResult) -> None:
        """Enqueue the deletes a completed crawl decided; count and log what it did."""
        if result.held:
            self._metrics.deletions_held.inc(result.held)
            log.warning(
                "sync.deletions_held",
                deletions_held=result.held,
                hint="the crawl would delete too many documents; apply them with "
                "POST /connectors/{id}/deletions/apply",
            )
        if result.deleted:
            self._metrics.documents_deleted.inc(result.deleted)
        if result.deleting:
            log.info("sync.documents_gone", deleting=result.deleting)
        if result.queued:
            with self._maintenance.rebuild_on_failure("sync.delete_push_failed"):
                await self._queue.push(connector_id, list(result.queued))

    async def _ended(self, handle: _Handle, outcome: RunOutcome) -> None:
        """Observe the run's duration and log its end with its counts, read once from its
        run row (whose outcome wins if it was recorded); without them if the store does not
        answer."""
        counts: dict[str, Any] = {}
        try:
            run = await self._store.get_run(handle.run_id)
        except SyncdError as exc:
            counts["counts_error"] = str(exc)
        else:
            if run is not None:
                if run.outcome is not RunOutcome.RUNNING:
                    outcome = run.outcome
                counts = _counts(run)
        seconds = self._metrics.run_ended(handle.run_id, handle.trigger, outcome)
        log.info(
            "sync.ended",
            trigger=str(handle.trigger),
            outcome=str(outcome),
            duration_seconds=round(seconds, 3),
            **counts,
        )


def _counts(run: Run) -> dict[str, Any]:
    """What ``sync.ended`` logs of a run's row."""
    return {
        "pages": run.pages,
        "documents_seen": run.documents_seen,
        "documents_enqueued": run.documents_enqueued,
        "documents_rejected": run.documents_rejected,
        "documents_deleted": run.deleted,
        "deletions_held": run.deletions_held,
    }
