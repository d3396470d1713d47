"""The scheduler tick (DESIGN.md §5).

Every ``tick_seconds`` — and at once when a run slot frees while work waits — a tick asks
the store how many connectors it could act on (due schedules and queued manual triggers,
one indexed query), reserves that many of this instance's free run slots
(:class:`~syncd.pipeline.admission.Admission`, ``[sync] max_concurrent_runs``), and claims
them in bulk (``Store.claim_due``): one transaction locks the oldest rows, applies the pure rule
:func:`syncd.rules.admit` to each, and writes every result. Because the rule advances
``next_run_at`` (and clears a queued trigger) in that transaction, a tick fires once even
when several instances share the store; on PostgreSQL ``SKIP LOCKED`` lets them share the
due work without waiting for each other. What finds no slot stays due (or queued) and is
served by age when slots free: the earliest due or requested first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from syncd import rules
from syncd.errors import SyncdError
from syncd.models import Connector, RunTrigger, SyncStatus, Transition, new_id, utcnow
from syncd.pipeline.admission import Admission, Claimed
from syncd.store.base import Store

log = structlog.get_logger("syncd.scheduler")

CLAIM_BATCH = 500
"""Connectors claimed per transaction: a tick with thousands to start claims them in a few
short transactions, so that no transaction holds the store (SQLite's one writer) for seconds
and other writes interleave."""


class Scheduler:
    """Fires due schedules, starts queued triggers and takes over stale locks."""

    def __init__(
        self,
        *,
        store: Store,
        admission: Admission,
        owner: str,
        tick_seconds: float = 5.0,
        stale_lock_seconds: float = 3600.0,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._store = store
        self._admission = admission
        self._owner = owner
        self.tick_seconds = tick_seconds
        self.stale_lock_seconds = stale_lock_seconds
        self._clock = clock
        self._stop = asyncio.Event()
        self._nudge = asyncio.Event()
        # Whether the last tick left work it had no slot for: then a freed slot wakes the
        # scheduler at once instead of waiting for the next tick.
        self._backlog = False
        #: Ticks of :meth:`run` completed (a caller driving :meth:`tick` itself can wait for
        #: the loop's catch-up tick first).
        self.loop_ticks = 0

    async def run(self) -> None:
        """Tick until :meth:`stop`; the first tick runs at once (catch-up after downtime).

        Each wait is the interval minus the time the tick took, so ticks do not drift; a
        :meth:`wake` ends the wait early.
        """
        loop = asyncio.get_running_loop()
        self._stop.clear()
        while not self._stop.is_set():
            started = loop.time()
            self._nudge.clear()
            try:
                await self.tick()
            except Exception as exc:
                # One failed tick never ends the scheduler; the next tick tries again.
                log.warning(
                    "scheduler.tick_failed",
                    error=str(exc),
                    exc_info=not isinstance(exc, SyncdError),
                )
            self.loop_ticks += 1
            delay = max(0.0, self.tick_seconds - (loop.time() - started))
            if not self._nudge.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._nudge.wait(), delay)

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current tick."""
        self._stop.set()
        self._nudge.set()

    def wake(self) -> None:
        """Tick now (e.g. a manual trigger was queued somewhere: this instance may have a
        free slot for it)."""
        self._nudge.set()

    def slot_freed(self) -> None:
        """A run slot of this instance freed: tick now if work is waiting for one."""
        if self._backlog:
            self._nudge.set()

    async def tick(self) -> list[str]:
        """Start what is due or queued, oldest first, in the free run slots; returns the
        run ids started."""
        now = self._clock()
        free = self._admission.free_slots
        # One indexed count: a tick with nothing to do ends here. It asks for one more than
        # the free slots, to know whether work will be left waiting.
        admissible = await self._store.count_admissible(now, limit=free + 1)
        self._backlog = admissible > free
        if admissible == 0 or free == 0:
            return []

        async def claim(slots: int, claimed: list[Claimed]) -> None:
            await self._claim(now, slots, claimed)

        # The runs start once every batch is claimed: on SQLite's one connection, runs started
        # earlier would queue their writes ahead of the next batch's claim.
        started = await self._admission.claim_and_start(
            claim, wanted=min(admissible, free), notify=False
        )
        return [after.run_id for after, _ in started or () if after.run_id is not None]

    async def _claim(self, now: datetime, reserved: int, claimed: list[Claimed]) -> None:
        stale_before = now - timedelta(seconds=self.stale_lock_seconds)

        def change(c: Connector) -> Transition:
            return rules.admit(
                c, run_id=new_id(), owner=self._owner, now=now, stale_before=stale_before
            )

        # Rows whose run is young only get their schedule advanced and take no slot: claim
        # again (in batches) until the slots are used or nothing is left.
        while (limit := min(reserved - len(claimed), CLAIM_BATCH)) > 0:
            rows = await self._store.claim_due(now, change, limit=limit)
            written = 0
            for before, after in rows:
                if after is before:
                    continue
                written += 1
                if after.sync_status is not SyncStatus.RUNNING or after.run_id == before.run_id:
                    log.info(
                        "scheduler.sync_skipped",
                        connector_id=before.id,
                        reason="sync already running",
                        run_id=before.run_id,
                    )
                    continue
                trigger = _trigger_of(before)
                if trigger is RunTrigger.STALE_LOCK:
                    log.warning(
                        "scheduler.stale_lock_taken_over",
                        connector_id=before.id,
                        stale_run_id=before.run_id,
                        owner=before.sync_owner,
                    )
                claimed.append((after, trigger))
            if len(rows) < limit or written == 0:
                return


def _trigger_of(before: Connector) -> RunTrigger:
    """What started a run claimed from ``before`` (as recorded by :func:`rules.admit`)."""
    if before.sync_status is SyncStatus.QUEUED:
        return RunTrigger.MANUAL
    if before.sync_status is SyncStatus.IDLE:
        return RunTrigger.SCHEDULE
    return RunTrigger.STALE_LOCK
