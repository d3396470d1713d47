"""One sync run (DESIGN.md §4): crawl → paginate → per-page commit → end.

:class:`SyncRun` is the body of a run the engine (:mod:`~syncd.pipeline.engine`) started: it
re-queues what an abort failed, pages through the connector's source (resuming, or starting
over when the source rejects the resume cursor), commits each page with its checkpoint in one
transaction, reports its liveness and waits in a heartbeat, and writes its final transition.
Every write is fenced by its run id; a refused write (the run was aborted or taken over
elsewhere) ends the run. An abort reaches it through its cancel token — set directly when the
abort arrives at this instance, by a broadcast from another instance, or by the heartbeat's
store poll when the broadcast was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import structlog

from syncd import rules
from syncd.errors import Aborted, Fenced, NotFound, StoreUnavailable, SyncdError
from syncd.http.paginator import CancelToken
from syncd.indexing.maintenance import Maintenance
from syncd.models import (
    ABORTED_ERROR,
    Connector,
    Crawl,
    CrawlEnd,
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
from syncd.pipeline.builder import SourceBuilder, paginator_for
from syncd.pipeline.pages import (
    CursorRejected,
    PreparedPage,
    checkpoint,
    crawl_end,
    guard_resume,
    read_ahead,
)
from syncd.pipeline.prepare import Preparer
from syncd.plugins import Registry
from syncd.queue.base import WorkQueue
from syncd.runtime.changes import Notify
from syncd.runtime.outage import DEFAULT_BACKOFF, OutagePolicy, ride_out
from syncd.runtime.pacing import Pacer
from syncd.runtime.tasks import cancel_and_wait
from syncd.sources.base import Source
from syncd.store.base import Store

log = structlog.get_logger("syncd.pipeline.run")

T = TypeVar("T")

#: The waits shown from this instance's memory when the store cannot record them.
_OUTAGE_REASONS = frozenset({WaitReason.STORE_UNAVAILABLE, WaitReason.QUEUE_UNAVAILABLE})


@dataclass(frozen=True)
class RunContext:
    """What the runs of one engine share."""

    store: Store
    queue: WorkQueue
    sources: SourceBuilder
    registry: Registry
    metrics: Metrics
    maintenance: Maintenance
    # Background steps wait for the API's requests in flight (bounded; see pacing).
    pacer: Pacer
    # One run's records become documents at a time, in slices of loop time.
    preparer: Preparer
    # How long, and how, a run waits for an unavailable store or queue (issue 23).
    outage: OutagePolicy
    heartbeat_seconds: float
    on_change: Notify | None


class SyncRun:
    """One run of a connector in this instance, from its claim to its final transition."""

    def __init__(self, connector: Connector, trigger: RunTrigger, context: RunContext) -> None:
        assert connector.run_id is not None
        self.connector_id = connector.id
        self.run_id = connector.run_id
        self.trigger = trigger
        #: Set by an abort, a takeover or a stop: the run ends at its next step.
        self.token = CancelToken()
        #: What the run waits for now (a rate limit, a retry, the store), shown by the heartbeat.
        self.waiting: Waiting | None = None
        self._connector = connector
        self._ctx = context
        # A stop: the run ends `interrupted`, and its final write is tried once.
        self._stopping = False
        # Wakes the heartbeat to show a wait (or its end) at once.
        self._wake = asyncio.Event()
        # Why this run starts over instead of resuming, recorded on the run with its first page.
        self._note: str | None = None
        # The crawl this run stamps (None: a crawl begun before crawls were stamped), and
        # whether its deletions are done at once (rules.deletes_at_once).
        self._crawl: Crawl | None = None
        self._delete_at_once = True
        # The connector as its page commits carry its state (rules.begin_crawl).
        self._begun = connector
        # How the crawl ended, once its last page is committed (recorded on success).
        self._crawl_end: CrawlEnd | None = None

    @property
    def outage(self) -> Waiting | None:
        """The store or queue outage the run waits out, if any: the store cannot record it."""
        waiting = self.waiting
        return waiting if waiting is not None and waiting.reason in _OUTAGE_REASONS else None

    def cancel(self) -> None:
        """End the run at its next step (an abort, a takeover): its writes are fenced."""
        self.token.cancel()

    def interrupt(self) -> None:
        """End the run at its next page boundary as ``interrupted`` (a stop). A run sleeping
        in a backoff or blocked on a hung request must not hold the shutdown: the token
        interrupts both."""
        self._stopping = True
        self.token.cancel()

    async def execute(self) -> None:
        """Run to the end and record it; the run's task."""
        cid, run_id = self.connector_id, self.run_id
        structlog.contextvars.bind_contextvars(
            connector_id=cid, connector=self._connector.name, run_id=run_id
        )
        self._ctx.metrics.run_started(run_id)
        heartbeat = asyncio.create_task(self._heartbeat(), name=f"heartbeat:{cid}")
        try:
            if self._ctx.on_change is not None:  # the run started (the claim wrote its row)
                await self._ctx.on_change(cid, run_id=run_id)
            await self._crawl_pages()
        except asyncio.CancelledError:
            self._stopping = True  # one attempt at the final write, no retry loop
            await self._end(RunOutcome.INTERRUPTED)
            raise
        except (Aborted, Fenced):
            if self._stopping:
                await self._end(RunOutcome.INTERRUPTED)
            else:
                await self._ended(RunOutcome.ABORTED)
        except Exception as exc:
            if self.token.cancelled and not self._stopping:
                # An abort already set the state; what the unwinding raised is logged only.
                log.warning("sync.abort_unwind_error", error=str(exc))
            else:
                log.error("sync.failed", error=str(exc), exc_type=type(exc).__name__)
                await self._end(RunOutcome.FAILED, describe_error(exc))
        else:
            await self._end(RunOutcome.SUCCEEDED)
        finally:
            try:
                await cancel_and_wait(heartbeat)
            finally:
                # Even when this task is cancelled again while the heartbeat stops.
                self._ctx.metrics.run_gone(run_id)
                structlog.contextvars.unbind_contextvars("connector_id", "connector", "run_id")

    # --- crawl → paginate → commit ------------------------------------------------------

    async def _crawl_pages(self) -> None:
        connector, cid = self._connector, self.connector_id
        # Documents failed by an abort are re-enqueued whether or not their pages come again.
        # Fenced by this run: a run aborted before it gets here re-queues nothing.
        requeued = await self._ride_out(
            lambda: self._ctx.store.requeue_documents(
                cid, error=ABORTED_ERROR, now=utcnow(), run_id=self.run_id
            ),
        )
        if requeued:
            with self._ctx.maintenance.rebuild_on_failure():
                await self._ride_out(lambda: self._ctx.queue.push(cid, requeued))
        # The crawl's mode (asked by the trigger, or the crawl in progress's) and whether the
        # run resumes it (rules.steering).
        plan = rules.plan_crawl(connector, utcnow())
        resuming = plan.resume
        # Why the run starts over (e.g. a PATCH changed the source, another mode was asked).
        self._note = plan.note or (None if resuming else rules.reset_reason(connector))
        trigger, mode = str(self.trigger), str(plan.steer.mode)
        log.info("sync.started", trigger=trigger, mode=mode, resuming=resuming, note=self._note)
        if resuming:
            try:
                await self._paginate(plan, connector.resume_cursor)
                return
            except CursorRejected as exc:
                log.warning("sync.resume_rejected", status=exc.status)
                self._note = f"resume cursor rejected with HTTP {exc.status}; started over"
        await self._paginate(plan, None)

    async def _paginate(self, plan: rules.CrawlPlan, start: str | None) -> None:
        connector = self._connector
        resuming = start is not None
        now = utcnow()
        crawl = rules.crawl_of_run(
            connector, resuming=resuming, now=now, new_crawl_id=new_id(), mode=plan.steer.mode
        )
        self._crawl = crawl
        # What each page commit saves with the source's checkpoint: the crawl's mode and start.
        self._begun = rules.begin_crawl(connector, plan, resuming=resuming, now=now)
        source = self._ctx.sources.build(
            connector,
            resuming=resuming,
            full=plan.ignores_mark,
            window=plan.steer.window,
            on_wait=self._on_wait,
        )
        kind = self._ctx.registry.indexer(connector.indexer)
        self._delete_at_once = rules.deletes_at_once(kind)
        reader = read_ahead(self._prepared(source, start), name=f"fetch:{connector.id}")
        async with contextlib.aclosing(reader):
            await self._commit_pages(reader, kind.indexed_on_commit)

    async def _prepared(self, source: Source, start: str | None) -> AsyncIterator[PreparedPage]:
        """The source's pages ready to commit. Runs in the read-ahead task: records become
        documents, and the source's state is taken right after its page, while the previous
        page is being committed."""
        connector, ctx = self._connector, self._ctx
        id_field = str(connector.source.get("id_field", "id"))
        tombstones = rules.deleted_field(connector.source)
        pages = paginator_for(
            connector,
            guard_resume(source, start, connector.retry_on_status),
            cancel_token=self.token,
            start_cursor=start,
            on_wait=self._on_wait,
            on_retry=lambda exc, attempt: ctx.metrics.page_retries.inc(),
        )
        async for page in pages:
            # The wait (if any) that preceded this page is over; the next one, for the page
            # after, may start while this one commits.
            # (A wait for the store or queue belongs to the commit, not to the fetch.)
            if self.waiting is not None and self.waiting.reason not in _OUTAGE_REASONS:
                self.waiting = None
                self._wake.set()  # show it at once, not at the next heartbeat
            records: list[Any] = page.records
            gone: list[str] = []
            if tombstones is not None:
                records, gone = rules.split_tombstones(records, tombstones, id_field)
            docs, rejected = await ctx.preparer.document_inputs(
                records, id_field, connector.hash_fields
            )
            if rejected:
                ctx.metrics.records_rejected.inc(len(rejected))
                log.warning("sync.records_rejected", count=len(rejected), reason=rejected[0].reason)
            # Read right after the last page, as the checkpoint is.
            end = None if page.next_cursor else crawl_end(source)
            yield PreparedPage(
                page.next_cursor,
                docs,
                checkpoint(source),
                tuple(rejected),
                tuple(gone),
                end,
                filtered=page.filtered,
            )
            await ctx.pacer.turn()  # before the next fetch (and its decoding)

    async def _commit_pages(
        self, items: AsyncIterator[PreparedPage], indexed_on_commit: bool
    ) -> None:
        ctx, cid = self._ctx, self.connector_id
        async for item in items:
            ctx.metrics.pages.inc()
            await ctx.pacer.turn()
            # The page and its checkpoint in one transaction: retried as a whole while the
            # store is unavailable (the upserts are idempotent, the checkpoint is fenced).
            ids = await self._ride_out(functools.partial(self._commit, item, indexed_on_commit))
            self._note = None
            if item.end is not None:
                self._crawl_end = item.end
            if ids and not indexed_on_commit:
                # Committed as pending: if not queued, the queue is rebuilt from the store, or
                # a re-sync would leave these unchanged documents unqueued; the run fails once
                # the queue stays unavailable beyond the outage budget.
                with ctx.maintenance.rebuild_on_failure():
                    await self._ride_out(functools.partial(ctx.queue.push, cid, ids))
            if ctx.on_change is not None:
                await ctx.on_change(cid)
            # On a graceful stop the token is set: the next fetch raises Aborted, but pages
            # already fetched are still committed first, so the run resumes after them.

    async def _commit(self, item: PreparedPage, indexed_on_commit: bool) -> list[str]:
        """One page's documents and checkpoint, in one store transaction (fenced)."""
        return await self._ctx.store.commit_page(
            self.connector_id,
            self.run_id,
            item.documents,
            next_cursor=item.next_cursor,
            source_state=rules.page_state(self._begun, item.state),
            now=utcnow(),
            indexed=indexed_on_commit,
            rejected=item.rejected,
            note=self._note,
            crawl=self._crawl,
            deletions=item.deletions,
            delete_at_once=self._delete_at_once,
            filtered=item.filtered,
        )

    # --- waits and the heartbeat ----------------------------------------------------------

    async def _ride_out(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, waiting out an unavailable store or queue (see
        :mod:`syncd.runtime.outage`); the run's cancel token ends the wait at once."""
        token = self.token

        async def sleep(seconds: float) -> None:
            if not token.cancelled:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(token.wait(), seconds)
            if token.cancelled:
                raise Aborted()

        reasons: set[WaitReason] = set()  # logged once per call and backend

        def waiting(reason: WaitReason, seconds: float) -> None:
            if reason not in reasons:
                reasons.add(reason)
                log.warning("sync.backend_unavailable", waiting=str(reason))
            self._on_wait(reason, seconds)

        def recovered(lasted: float) -> None:
            log.info("sync.backend_back", outage_seconds=round(lasted, 3))
            if self.outage is not None:
                self.waiting = None
                self._wake.set()  # the heartbeat writes the end of the wait at once

        return await ride_out(
            call, policy=self._ctx.outage, sleep=sleep, on_wait=waiting, on_recovered=recovered
        )

    def _on_wait(self, reason: WaitReason, seconds: float) -> None:
        self.waiting = Waiting(reason, utcnow() + timedelta(seconds=seconds))
        self._ctx.metrics.backoff_seconds.labels(reason=str(reason)).inc(seconds)
        # Show the wait at once rather than at the next heartbeat.
        self._wake.set()

    async def _heartbeat(self) -> None:
        """Report liveness and waits; a refused report means the run was aborted elsewhere."""
        ctx = self._ctx
        failing = False
        while not self.token.cancelled:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), ctx.heartbeat_seconds)
            self._wake.clear()
            try:
                current = await ctx.store.report(
                    self.connector_id, self.run_id, now=utcnow(), waiting=self.waiting
                )
            except SyncdError as exc:
                # Tried again every period; an outage is logged once, not once a period.
                if not (failing and isinstance(exc, StoreUnavailable)):
                    log.warning("sync.heartbeat_failed", error=str(exc))
                failing = True
            else:
                failing = False
                if not current:
                    self.token.cancel()
                if ctx.on_change is not None:
                    await ctx.on_change(self.connector_id)

    # --- the end ------------------------------------------------------------------------

    async def _end(self, outcome: RunOutcome, error: str | None = None) -> None:
        """Write the run's final transition (fenced); a refused write is only logged."""
        cid, run_id, crawl = self.connector_id, self.run_id, self._crawl
        now = utcnow()

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
                delete_at_once=self._delete_at_once,
                end=self._crawl_end,
            )

        store = self._ctx.store
        attempt = 0
        pruned = PruneResult()
        while True:
            try:
                # Shielded: the final write must land even if shutdown cancels the run task.
                if outcome is RunOutcome.SUCCEEDED:
                    unseen_by = crawl.id if crawl is not None and crawl.full else None
                    _, _, pruned = await asyncio.shield(
                        store.mutate_with_prune(cid, succeed, unseen_by=unseen_by)
                    )
                else:
                    await asyncio.shield(store.mutate_connector(cid, change))
                break
            except (Fenced, NotFound):
                log.info("sync.end_fenced", outcome=outcome)
                return
            except SyncdError as exc:
                # Giving up would leave the connector `running` until a stale-lock takeover:
                # keep trying while the store is away. A shutdown gives up (the next start
                # finds the run orphaned: abort or the scheduler clears it).
                if self._stopping:
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
        self._ctx.metrics.runs.labels(trigger=str(self.trigger), outcome=str(outcome)).inc()
        if outcome is RunOutcome.SUCCEEDED and self._crawl_end is not None:
            for warning in self._crawl_end.warnings:
                log.warning("sync.crawl_warning", warning=warning, end=self._crawl_end.reason)
        await self._ended(outcome)
        await self._pruned(pruned)
        if self._ctx.on_change is not None:
            await self._ctx.on_change(cid, run_id=run_id)

    async def _pruned(self, result: PruneResult) -> None:
        """Enqueue the deletes a completed crawl decided; count and log what it did (and what
        it left waiting for confirmation)."""
        metrics = self._ctx.metrics
        if result.held:
            metrics.deletions_held.inc(result.held)
            log.warning(
                "sync.deletions_held",
                deletions_held=result.held,
                hint="the crawl would delete too many documents; apply them with "
                "POST /connectors/{id}/deletions/apply",
            )
        if result.deleted:
            metrics.documents_deleted.inc(result.deleted)
        if result.deleting:
            log.info("sync.documents_gone", deleting=result.deleting)
        if result.awaiting:
            # Missed by this crawl, not yet by enough crawls in a row to be deleted.
            log.info("sync.deletions_awaiting_confirmation", awaiting=result.awaiting)
        if result.queued:
            with self._ctx.maintenance.rebuild_on_failure("sync.delete_push_failed"):
                await self._ctx.queue.push(self.connector_id, list(result.queued))

    async def _ended(self, outcome: RunOutcome) -> None:
        """Observe the run's duration and log its end with its counts, read once from its
        run row (whose outcome wins if it was recorded); without them if the store does not
        answer."""
        counts: dict[str, Any] = {}
        try:
            run = await self._ctx.store.get_run(self.run_id)
        except SyncdError as exc:
            counts["counts_error"] = str(exc)
        else:
            if run is not None:
                if run.outcome is not RunOutcome.RUNNING:
                    outcome = run.outcome
                counts = _counts(run)
        seconds = self._ctx.metrics.run_ended(self.run_id, self.trigger, outcome)
        log.info(
            "sync.ended",
            trigger=str(self.trigger),
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
        "documents_filtered": run.documents_filtered,
        "documents_deleted": run.deleted,
        "deletions_held": run.deletions_held,
        "end_reason": run.end_reason,
        "awaiting_confirmation": run.awaiting_confirmation,
    }
