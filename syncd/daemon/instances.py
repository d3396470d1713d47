"""The instances sharing a store: this one's heartbeat, and ``GET /status``.

Every instance writes a heartbeat row (its owner, version, start time, workers and running
syncs) every ``heartbeat_seconds``; ``GET /status`` lists the instances heard from within the
last :data:`INSTANCES_SEEN_BEATS` heartbeats, this one with its live figures. A clean stop
removes this instance's row at once, so that the others stop listing it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import structlog

from syncd.api import views
from syncd.errors import SyncdError
from syncd.indexing.workers import Workers
from syncd.models import utcnow
from syncd.pipeline.engine import SyncEngine
from syncd.queue.base import WorkQueue
from syncd.store.base import Store
from syncd.version import VERSION

log = structlog.get_logger("syncd.daemon.instances")

INSTANCES_SEEN_BEATS = 3  # GET /status lists instances heard from within 3 heartbeats


class Instances:
    """This instance's heartbeat in the store, and the status of every instance."""

    def __init__(
        self,
        *,
        store: Store,
        queue: WorkQueue,
        engine: SyncEngine,
        workers: Workers,
        instance_id: str,
        owner: str,
        started_at: datetime | None,
        concurrency: int,
        heartbeat_seconds: float,
        loop_lag: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self._store = store
        self._queue = queue
        self._engine = engine
        self._workers = workers
        self._instance_id = instance_id
        self._owner = owner
        self._started_at = started_at
        self._concurrency = concurrency
        self._heartbeat_seconds = heartbeat_seconds
        self._loop_lag = loop_lag
        self._heartbeat_at: datetime | None = None
        self._beat_write: asyncio.Task[None] | None = None

    async def status(self) -> dict[str, Any]:
        """``GET /status``: this instance (version, owner, workers, running syncs), the
        queue's depth, and every instance heard from within the last few heartbeats (this
        one with its live figures)."""
        now = utcnow()
        mine = self._info()
        since = now - timedelta(seconds=INSTANCES_SEEN_BEATS * self._heartbeat_seconds)
        instances = {
            beat.owner: {
                **beat.info,
                "owner": beat.owner,
                "heartbeat_at": views.timestamp(beat.heartbeat_at),
            }
            for beat in await self._store.list_instances(since)
        }
        instances[self._owner] = {
            **mine,
            "owner": self._owner,
            "heartbeat_at": views.timestamp(self._heartbeat_at),
        }
        return {
            "version": VERSION,
            "instance_id": self._instance_id,
            "owner": self._owner,
            "started_at": mine["started_at"],
            "workers": mine["workers"],
            "queue": {"depth": sum((await self._queue.depth()).values())},
            "running_syncs": mine["running_syncs"],
            "loop_lag_seconds": mine["loop_lag_seconds"],
            "instances": [instances[owner] for owner in sorted(instances)],
        }

    def _info(self) -> dict[str, Any]:
        """What this instance reports in its heartbeat."""
        return {
            "instance_id": self._instance_id,
            "version": VERSION,
            "started_at": views.timestamp(self._started_at),
            "running_syncs": len(self._engine.running),
            "workers": {"concurrency": self._concurrency, "busy": self._workers.busy},
            # The worst lag of this instance's event loop lately, as the metric
            # syncd_event_loop_lag_seconds holds it: what every request and run waited too.
            "loop_lag_seconds": round(self._loop_lag(), 4),
        }

    async def heartbeat(self) -> None:
        """Record this instance's heartbeat in the store now (:meth:`beat_forever` does it
        every ``heartbeat_seconds``)."""
        now = utcnow()
        # Shielded and kept: a stop that cancels the beat mid-write waits for the write before
        # it removes the instance, or the row could come back after the removal.
        self._beat_write = asyncio.create_task(
            self._store.heartbeat_instance(self._owner, self._info(), now),
            name="instance-heartbeat-write",
        )
        await asyncio.shield(self._beat_write)
        self._heartbeat_at = now

    async def beat_forever(self) -> None:
        """Run forever: a heartbeat every ``heartbeat_seconds``."""
        # The period is measured from the start of each beat, so it does not drift. A failed
        # beat is logged and tried at the next one: a store outage must not stop the daemon.
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            try:
                await self.heartbeat()
            except SyncdError as exc:
                log.warning("daemon.heartbeat_failed", error=str(exc))
            await asyncio.sleep(max(0.0, self._heartbeat_seconds - (loop.time() - began)))

    async def forget(self) -> None:
        """Remove this instance from ``GET /status`` of the others (a clean stop)."""
        if self._beat_write is not None:
            await asyncio.wait({self._beat_write})
            if not self._beat_write.cancelled():
                self._beat_write.exception()  # a failed last beat changes nothing here
        try:
            await self._store.remove_instance(self._owner)
        except SyncdError as exc:
            log.warning("daemon.forget_instance_failed", error=str(exc))
