"""Workers meeting an unavailable store back off (capped, exponential) instead of spinning or
failing documents; the queue answering in between does not reset the store's backoff."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import structlog

from syncd.config.sections import WorkersConfig
from syncd.errors import StoreUnavailable
from syncd.indexing.lease import Leases
from syncd.indexing.maintenance import Maintenance
from syncd.indexing.sweeper import Sweeper
from syncd.indexing.workers import Workers
from syncd.models import Connector
from syncd.observability.metrics import Metrics
from syncd.queue.memory import MemoryQueue
from syncd.runtime.outage import Backoff, OutagePolicy
from syncd.store.base import Store

BACKOFF = Backoff(first=0.01, factor=2.0, cap=0.04)


class StoreAway:
    """A store whose reads fail as unavailable ``failures`` times; then the connector is gone
    (the worker acknowledges the batch and is done with it)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[float] = []
        self.done = asyncio.Event()

    async def get_connector(self, connector_id: str) -> Connector | None:
        self.calls.append(asyncio.get_running_loop().time())
        if len(self.calls) <= self.failures:
            raise StoreUnavailable("lost connection to PostgreSQL at db:5432 (get connector)")
        self.done.set()
        return None

    async def pending_documents(self, **_: Any) -> list[tuple[str, str]]:
        raise StoreUnavailable("lost connection to PostgreSQL at db:5432 (pending documents)")


async def test_a_worker_backs_off_while_the_store_is_away() -> None:
    store = StoreAway(failures=6)
    queue = MemoryQueue()
    await queue.open()
    maintenance = Maintenance(store=cast(Store, store), queue=queue)
    settings = WorkersConfig(concurrency=1)
    outage = OutagePolicy(budget=60, backoff=BACKOFF)
    leases = Leases(
        store=cast(Store, store),
        queue=queue,
        indexer_for=lambda c: (_ for _ in ()).throw(AssertionError("no indexing")),
        metrics=Metrics(process_metrics=False),
        settings=settings,
        maintenance=maintenance,
        outage=outage,
    )
    sweeper = Sweeper(store=cast(Store, store), maintenance=maintenance, settings=settings)
    workers = Workers(
        queue=queue,
        leases=leases,
        sweeper=sweeper,
        settings=settings,
        poll_timeout=5.0,
        outage=outage,
    )
    await queue.push("c1", ["a", "b"])
    with structlog.testing.capture_logs() as logs:
        workers.start()
        try:
            await asyncio.wait_for(store.done.wait(), 10.0)
        finally:
            await workers.stop(grace=1.0)
            await queue.close()
    # Each attempt waits at least the backoff of its rank: 0.01, 0.02, 0.04, 0.04, ...
    gaps = [b - a for a, b in zip(store.calls, store.calls[1:], strict=False)]
    assert len(gaps) == 6
    for attempt, gap in enumerate(gaps):
        assert gap >= BACKOFF.delay(attempt) * 0.9, (attempt, gaps)
    events = [e["event"] for e in logs]
    # One warning for the outage, one line when it is over; the batch was never failed.
    assert events.count("worker.backend_unavailable") == 1, events
    assert events.count("worker.backend_back") == 1, events
    assert "worker.batch_failed" not in events
