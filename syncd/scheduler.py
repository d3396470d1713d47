"""The scheduler tick (DESIGN.md §5).

Every ``tick_seconds`` it asks the store for the connectors whose ``next_run_at`` is due (one
indexed query) and applies :func:`syncd.rules.scheduled` to each atomically. Because that
rule advances ``next_run_at`` inside the same compare-and-set, a tick fires once even when
several instances share the store: the second instance finds the connector no longer due.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from syncd import rules
from syncd.errors import NotFound, SyncdError
from syncd.models import Connector, RunTrigger, SyncStatus, Transition, new_id, utcnow
from syncd.store.base import Store

log = structlog.get_logger("syncd.scheduler")

StartRun = Callable[[Connector, RunTrigger], None]


class Scheduler:
    """Fires due schedules and takes over stale locks."""

    def __init__(
        self,
        *,
        store: Store,
        start_run: StartRun,
        owner: str,
        tick_seconds: float = 5.0,
        stale_lock_seconds: float = 3600.0,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._store = store
        self._start_run = start_run
        self._owner = owner
        self.tick_seconds = tick_seconds
        self.stale_lock_seconds = stale_lock_seconds
        self._clock = clock
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Tick until :meth:`stop`; the first tick runs at once (catch-up after downtime).

        Each wait is the interval minus the time the tick took, so ticks do not drift.
        """
        loop = asyncio.get_running_loop()
        self._stop.clear()
        while not self._stop.is_set():
            started = loop.time()
            try:
                await self.tick()
            except Exception as exc:
                # One failed tick never ends the scheduler; the next tick tries again.
                log.warning(
                    "scheduler.tick_failed",
                    error=str(exc),
                    exc_info=not isinstance(exc, SyncdError),
                )
            delay = max(0.0, self.tick_seconds - (loop.time() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current tick."""
        self._stop.set()

    async def tick(self) -> list[str]:
        """Handle every due connector once; returns the run ids started."""
        now = self._clock()
        stale_before = now - timedelta(seconds=self.stale_lock_seconds)
        started: list[str] = []
        for connector in await self._store.due_connectors(now):
            run_id = new_id()

            def change(c: Connector, run_id: str = run_id) -> Transition:
                return rules.scheduled(
                    c, run_id=run_id, owner=self._owner, now=now, stale_before=stale_before
                )

            try:
                before, after = await self._store.mutate_connector(connector.id, change)
            except (rules.NotDue, NotFound):
                continue
            if after.run_id != run_id:
                log.info(
                    "scheduler.sync_skipped",
                    connector_id=connector.id,
                    reason="sync already running",
                    run_id=before.run_id,
                )
                continue
            idle_before = before.sync_status is SyncStatus.IDLE
            trigger = RunTrigger.SCHEDULE if idle_before else RunTrigger.STALE_LOCK
            if trigger is RunTrigger.STALE_LOCK:
                log.warning(
                    "scheduler.stale_lock_taken_over",
                    connector_id=connector.id,
                    stale_run_id=before.run_id,
                    owner=before.sync_owner,
                )
            self._start_run(after, trigger)
            started.append(run_id)
        return started
