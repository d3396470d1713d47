"""Sync runs (DESIGN.md §4): the runs of this instance.

:class:`SyncEngine` owns the sync tasks of this instance, one per running connector, each the
body of one run (:class:`~syncd.pipeline.run.SyncRun`: claim → paginate → per-page commit →
enqueue). It starts a run claimed in a run slot (:mod:`~syncd.pipeline.admission`), shows the
outage a run waits out, ends a run on abort or takeover, and stops them all on shutdown.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from syncd.indexing.maintenance import Maintenance
from syncd.models import Connector, RunTrigger, Waiting
from syncd.observability.metrics import Metrics
from syncd.pipeline.builder import SourceBuilder
from syncd.pipeline.prepare import Preparer
from syncd.pipeline.run import RunContext, SyncRun
from syncd.plugins import Registry
from syncd.queue.base import WorkQueue
from syncd.runtime.changes import Notify
from syncd.runtime.outage import OutagePolicy
from syncd.runtime.pacing import Pacer
from syncd.store.base import Store


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
        pacer = pacer or Pacer()
        self._context = RunContext(
            store=store,
            queue=queue,
            sources=sources,
            registry=registry,
            metrics=metrics,
            maintenance=maintenance,
            pacer=pacer,
            preparer=Preparer(pacer=pacer),
            outage=outage or OutagePolicy(),
            heartbeat_seconds=heartbeat_seconds,
            on_change=on_change,
        )
        # The current run of each connector running here.
        self._runs: dict[str, SyncRun] = {}
        # Every run task of this instance, including runs replaced by a stale-lock takeover
        # (no longer in ``_runs``), so that a stop waits for all of them.
        self._tasks: dict[SyncRun, asyncio.Task[None]] = {}
        self._closed = False

    @property
    def running(self) -> dict[str, str]:
        """``{connector_id: run_id}`` of the runs executing in this instance."""
        return {cid: run.run_id for cid, run in self._runs.items()}

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
        run = SyncRun(connector, trigger, self._context)
        previous = self._runs.get(connector.id)
        if previous is not None:
            # Taken over (stale lock): the old run's writes are fenced already; stop it too.
            previous.cancel()
        self._runs[connector.id] = run
        if self._closed:
            # Claimed while the daemon stops (a tick or a trigger already in flight): the run
            # ends at once as interrupted instead of running unowned.
            run.interrupt()
        self._tasks[run] = asyncio.create_task(
            self._own(run, on_end), name=f"sync:{connector.id}:{run.run_id}"
        )

    def outage_wait(self, connector_id: str) -> Waiting | None:
        """The store or queue outage this instance's run of the connector waits out, if any.

        A wait for the store cannot be written to the store: this instance shows it from
        memory (its API overlays it on the stored connector) until the store is back."""
        run = self._runs.get(connector_id)
        return None if run is None else run.outage

    def overlay(self, connector: Connector) -> Connector:
        """``connector`` as read from the store, with the outage wait of this instance's run
        of it (see :meth:`outage_wait`), which the store may not have been able to record."""
        waiting = self.outage_wait(connector.id)
        if waiting is None or connector.run_id != self._runs[connector.id].run_id:
            return connector
        return dataclasses.replace(connector, waiting=waiting)

    def abort_local(self, connector_id: str, run_id: str | None = None) -> bool:
        """Set the cancel token of this instance's run of the connector, if it runs here."""
        run = self._runs.get(connector_id)
        if run is None or (run_id is not None and run.run_id != run_id):
            return False
        run.cancel()
        return True

    async def wait(self, connector_id: str) -> None:
        """Wait until this instance's run of the connector (if any) has ended."""
        run = self._runs.get(connector_id)
        task = None if run is None else self._tasks.get(run)
        if task is not None:
            await asyncio.wait({task})

    async def stop(self, grace: float) -> None:
        """Graceful stop: each run ends at its next page boundary and is marked
        ``interrupted``; runs still going after ``grace`` seconds are cancelled. Runs claimed
        while stopping end at once."""
        self._closed = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self._tasks:
            owned = dict(self._tasks)
            for run in owned:
                run.interrupt()
            _, pending = await asyncio.wait(
                owned.values(), timeout=max(0.0, deadline - loop.time())
            )
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)
            for run in owned:
                self._tasks.pop(run, None)

    async def _own(self, run: SyncRun, on_end: Callable[[], None] | None) -> None:
        """The run's task: the run, then its place here given up (its slot frees)."""
        try:
            await run.execute()
        finally:
            if self._runs.get(run.connector_id) is run:
                del self._runs[run.connector_id]
            self._tasks.pop(run, None)
            if on_end is not None:
                on_end()
