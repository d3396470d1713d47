"""Losing PostgreSQL or Redis in the middle of a sync (DESIGN.md §1, issue "Faults"): the run
fails cleanly with a ``last_error`` that says what (or completes), the daemon reconnects, a
new sync completes, nothing is left ``running``, and every source record ends up a document,
indexed."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import asyncpg
import pytest

from syncd import rules
from syncd.daemon import Daemon
from syncd.errors import NotFound
from syncd.indexers.base import IndexerContext
from syncd.models import (
    Connector,
    ConnectorStatus,
    DocStatus,
    Document,
    Run,
    RunOutcome,
    SyncStatus,
    utcnow,
)
from tests.conftest import POSTGRES_ADMIN_DSN
from tests.integration.conftest import http_source
from tests.integration.multi import (
    RedisServer,
    document_ids,
    free_port,
    poll_until,
    shared_config,
    wait_indexed,
)
from tests.integration.sourceserver import SourceServer

#: How long the database refuses every connection in the outage test.
OUTAGE_SECONDS = 1.0
#: Bound for a run to end once its source answers again (covers the queue's retry budget).
RUN_END_TIMEOUT = 15.0

StartDaemon = Callable[..., Awaitable[Daemon]]

#: An indexer that does nothing, but through the queue and the workers (the built-in store
#: indexer marks documents indexed as they are committed, so it would bypass the queue).
QUEUED = {"type": "queued"}


class QueuedIndexer:
    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        pass

    async def index(self, document: Document) -> None:
        return None


class HeldIndexer:
    """Indexes nothing, ever: its documents stay in a worker's hands until cancelled."""

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        pass

    async def index(self, document: Document) -> None:
        await asyncio.Event().wait()


@pytest.fixture
async def start_daemon(postgres_dsn: str) -> AsyncIterator[StartDaemon]:
    """Start a daemon on this test's database and the given queue; stopped at the end."""
    started: list[Daemon] = []

    async def start(queue_url: str, prefix: str, **sections: dict[str, Any]) -> Daemon:
        daemon = Daemon(
            shared_config(postgres_dsn, queue_url, prefix, "instance-a", **sections),
            serve_api=False,
        )
        daemon.register_indexer("queued", QueuedIndexer)
        await daemon.start()
        started.append(daemon)
        return daemon

    yield start
    for daemon in reversed(started):
        await daemon.stop()


@pytest.fixture
async def source() -> AsyncIterator[SourceServer]:
    """25 records in pages of 10."""
    async with SourceServer(25, page_size=10) as server:
        yield server


async def _sync_hung_on_page_1(daemon: Daemon, source: SourceServer) -> tuple[Connector, str]:
    """A connector whose run has committed page 0 and hangs on page 1."""
    c = await daemon.create_connector(
        {"name": "items", "indexer": QUEUED, "source": http_source(source), "page_retries": 0}
    )
    source.hang_on("page-1")
    run_id = await daemon.trigger_sync(c.id)
    await source.requested("page-1").wait()
    return c, run_id


async def _last_run(daemon: Daemon, connector_id: str) -> Run:
    runs, _ = await daemon.list_runs(connector_id, limit=1)
    return runs[0]


async def _sync(daemon: Daemon, connector_id: str) -> Run:
    run_id = await daemon.trigger_sync(connector_id)
    await asyncio.wait_for(daemon.wait_run(connector_id), RUN_END_TIMEOUT)
    run = await _last_run(daemon, connector_id)
    assert run.id == run_id
    return run


async def _assert_recovered(daemon: Daemon, connector_id: str, source: SourceServer) -> None:
    """A new sync completes, nothing is stuck, every record is a document, all indexed."""
    run = await _sync(daemon, connector_id)
    assert (run.outcome, run.error) == (RunOutcome.SUCCEEDED, None)
    after = await daemon.get_connector(connector_id)
    assert after.sync_status is SyncStatus.IDLE and after.run_id is None
    assert after.status is ConnectorStatus.ACTIVE and after.last_error is None
    docs, _ = await daemon.list_documents(connector_id, limit=100)
    assert sorted(d.external_id for d in docs) == document_ids(source.records)
    await wait_indexed(daemon, connector_id, len(source.records), timeout=10.0)


async def test_postgres_connections_terminated_mid_sync(
    start_daemon: StartDaemon,
    postgres_dsn: str,
    redis_url: str,
    redis_prefix: str,
    source: SourceServer,
) -> None:
    daemon = await start_daemon(redis_url, redis_prefix)
    c, run_id = await _sync_hung_on_page_1(daemon, source)
    # Page 0 is committed and indexed: every pooled connection is idle when cut (a cut
    # during a worker's claim is the next test).
    await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 10)
    admin = await asyncpg.connect(postgres_dsn)
    try:
        terminated = await admin.fetch(
            "SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await admin.close()
    assert terminated and all(r["done"] for r in terminated)
    source.release()
    await asyncio.wait_for(daemon.wait_run(c.id), RUN_END_TIMEOUT)

    run = await _last_run(daemon, c.id)
    after = await daemon.get_connector(c.id)
    assert run.id == run_id
    assert after.sync_status is SyncStatus.IDLE and after.run_id is None
    if run.outcome is RunOutcome.FAILED:
        assert after.status is ConnectorStatus.ERROR
        assert after.last_error == run.error
        assert run.error is not None and "PostgreSQL" in run.error, run.error
    else:
        assert run.outcome is RunOutcome.SUCCEEDED, run
    assert await daemon.readiness() == {"store": "ok", "queue": "ok"}
    await _assert_recovered(daemon, c.id, source)


async def test_postgres_outage_across_the_end_of_a_run(
    start_daemon: StartDaemon,
    postgres_dsn: str,
    redis_url: str,
    redis_prefix: str,
    source: SourceServer,
) -> None:
    daemon = await start_daemon(redis_url, redis_prefix)
    c, run_id = await _sync_hung_on_page_1(daemon, source)
    await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 10)
    database = postgres_dsn.rpartition("/")[2]
    admin = await asyncpg.connect(POSTGRES_ADMIN_DSN)
    try:
        # An outage: every session cut, no new one accepted.
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            database,
        )
        ready = await daemon.readiness()
        assert ready["queue"] == "ok" and "PostgreSQL" in ready["store"], ready
        # Page 1 arrives during the outage; the outage lasts this long whatever happens.
        source.release()
        await asyncio.sleep(OUTAGE_SECONDS)
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await admin.close()
    await asyncio.wait_for(daemon.wait_run(c.id), RUN_END_TIMEOUT)

    after = await daemon.get_connector(c.id)
    assert after.sync_status is SyncStatus.IDLE and after.run_id is None, after
    run = await _last_run(daemon, c.id)
    assert run.id == run_id
    if run.outcome is RunOutcome.FAILED:
        assert after.status is ConnectorStatus.ERROR and after.last_error == run.error
        assert run.error is not None and "PostgreSQL" in run.error, run.error
    else:
        assert run.outcome is RunOutcome.SUCCEEDED, run
    assert await daemon.readiness() == {"store": "ok", "queue": "ok"}
    await _assert_recovered(daemon, c.id, source)


async def test_postgres_connection_terminated_during_a_claim(
    start_daemon: StartDaemon,
    postgres_dsn: str,
    redis_url: str,
    redis_prefix: str,
    source: SourceServer,
) -> None:
    daemon = await start_daemon(
        redis_url, redis_prefix, workers={"concurrency": 1, "batch_size": 10}
    )
    c = await daemon.create_connector(
        {"name": "items", "indexer": QUEUED, "source": http_source(source)}
    )
    first = await _sync(daemon, c.id)
    assert first.outcome is RunOutcome.SUCCEEDED
    await wait_indexed(daemon, c.id, 25)
    source.set_records([{**r, "title": "changed"} for r in source.records])
    admin = await asyncpg.connect(postgres_dsn)
    try:
        async with admin.transaction():
            # A KEY SHARE lock lets the crawl's upserts through but holds the worker's claim
            # (it locks the rows FOR UPDATE) in flight, where the test can cut it.
            await admin.execute(
                "SELECT 1 FROM documents WHERE connector_id = $1 FOR KEY SHARE", c.id
            )
            second = await _sync(daemon, c.id)
            assert (second.outcome, second.documents_enqueued) == (RunOutcome.SUCCEEDED, 25)
            claiming: list[int] = []

            async def claim_waits() -> bool:
                claiming[:] = (
                    await admin.fetchval(
                        "SELECT array_agg(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                        " AND query LIKE '%lease_token%'"
                    )
                    or []
                )
                return bool(claiming)

            await poll_until(claim_waits, "a worker's claim to wait for the row locks")
            assert len(claiming) == 1
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", claiming[0])
    finally:
        await admin.close()
    # The claim was cut before it changed anything: those documents are still pending, and
    # must still reach a worker.
    await wait_indexed(daemon, c.id, 25, timeout=10.0)
    docs, _ = await daemon.list_documents(c.id, limit=100)
    assert {d.external_id for d in docs} == set(document_ids(source.records))
    assert all(d.status is DocStatus.INDEXED for d in docs)


@pytest.fixture
async def private_redis() -> AsyncIterator[RedisServer]:
    """A ``redis-server`` of this test's own (never the shared one), stopped at the end."""
    server = RedisServer(free_port())
    await server.start()
    yield server
    await server.stop()


async def test_redis_down_longer_than_the_outage_budget(
    private_redis: RedisServer, start_daemon: StartDaemon, source: SourceServer
) -> None:
    """A queue outage within ``[sync] outage_seconds`` is waited out (test_outages.py); beyond
    it the run fails with an error naming the outage, and the next run resumes."""
    daemon = await start_daemon(private_redis.url, "syncd-faults", sync={"outage_seconds": 0.5})
    c, run_id = await _sync_hung_on_page_1(daemon, source)
    await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 10)

    await private_redis.stop()
    ready = await daemon.readiness()
    assert ready["store"] == "ok"
    where = f"Redis queue at redis://127.0.0.1:{private_redis.port}/0"
    assert ready["queue"].startswith(f"{where}: ping failed"), ready

    # Page 1 arrives while Redis is down: it is committed, but cannot be enqueued; the run
    # waits for the queue longer than its budget.
    source.release()
    await asyncio.wait_for(daemon.wait_run(c.id), RUN_END_TIMEOUT)
    run = await _last_run(daemon, c.id)
    assert (run.id, run.outcome) == (run_id, RunOutcome.FAILED)
    assert run.error is not None
    # One attempt may outlast the budget (the Redis client retries a command for about 1 s).
    budget = r"queue unavailable for \d+\.\ds, longer than \[sync\] outage_seconds \(0\.5s\): "
    assert re.match(budget + re.escape(f"{where}: push failed"), run.error), run.error
    after = await daemon.get_connector(c.id)
    assert after.status is ConnectorStatus.ERROR and after.last_error == run.error
    assert after.sync_status is SyncStatus.IDLE and after.run_id is None

    # Back on the same port, empty: whatever the queue held is gone.
    await private_redis.start()
    assert await daemon.readiness() == {"store": "ok", "queue": "ok"}
    cursors_before = len(source.cursors)
    await _assert_recovered(daemon, c.id, source)
    # The new run resumed after the last committed page.
    assert source.cursors[cursors_before:] == ["page-2"]


async def test_abort_and_delete_do_not_wait_for_an_unreachable_queue(
    private_redis: RedisServer, start_daemon: StartDaemon, source: SourceServer
) -> None:
    """The store is the truth (DESIGN.md §4): with Redis down an abort still answers, the run
    stops at once, its documents are failed; the purge waits for the queue to answer."""
    daemon = await start_daemon(
        private_redis.url, "syncd-faults", workers={"concurrency": 1, "batch_size": 5}
    )
    daemon.register_indexer("held", HeldIndexer)
    c = await daemon.create_connector(
        {"name": "items", "indexer": {"type": "held"}, "source": http_source(source)}
    )
    source.hang_on("page-1")
    run_id = await daemon.trigger_sync(c.id)
    await source.requested("page-1").wait()
    # Five documents in the worker's hands, five still queued.
    counts = await daemon.wait_documents(c.id, lambda n: n[DocStatus.RUNNING] == 5)
    assert counts[DocStatus.PENDING] == 5

    await private_redis.stop()
    assert await asyncio.wait_for(daemon.abort_sync(c.id), 5.0) == run_id
    await asyncio.wait_for(daemon.wait_run(c.id), 1.0)
    after = await daemon.get_connector(c.id)
    assert after.sync_status is SyncStatus.IDLE and after.run_id is None
    counts = await daemon.document_counts(c.id)
    assert (counts[DocStatus.FAILED], counts[DocStatus.PENDING]) == (10, 0)
    assert (await _last_run(daemon, c.id)).outcome is RunOutcome.ABORTED
    assert source.cursors == [None, "page-1"]
    source.release()

    # A delete does not wait for the queue either.
    other = await daemon.create_connector({"name": "other", "source": http_source(source)})
    await asyncio.wait_for(daemon.delete_connector(other.id), 5.0)
    await daemon.wait_deleted(other.id)
    with pytest.raises(NotFound):
        await daemon.get_connector(other.id)

    # Back (empty, as after a crash): the owed purge and the rebuild leave nothing of the
    # aborted connector queued; a new sync completes.
    await private_redis.start()

    async def purged() -> bool:
        # The rebuild retries once a second until the queue answers.
        return c.id not in daemon.maintenance.owed_purges and c.id not in await daemon.queue.depth()

    await poll_until(purged, "the owed purge")
    await daemon.update_connector(c.id, {"indexer": QUEUED})
    await _assert_recovered(daemon, c.id, source)


async def test_an_orphaned_run_shows_its_dead_incarnation(
    start_daemon: StartDaemon, source: SourceServer, redis_url: str, redis_prefix: str
) -> None:
    """With a fixed instance id, the owner of a run names the process incarnation, so an
    operator can tell a run orphaned by a crash from one the restarted process runs."""
    first = await start_daemon(redis_url, redis_prefix)
    c, _ = await _sync_hung_on_page_1(first, source)
    dead_owner = (await first.get_connector(c.id)).sync_owner
    assert dead_owner == first.owner and dead_owner.startswith("instance-a/")
    await first.stop(grace=0)  # interrupted: idle again
    # The crash: the store still says running, owned by the first incarnation.
    await first.store.open()
    await first.store.mutate_connector(
        c.id, lambda x: rules.trigger(x, run_id="orphan", owner=dead_owner, now=utcnow())
    )
    await first.store.close()
    source.release()
    second = await start_daemon(redis_url, redis_prefix)
    assert second.instance_id == first.instance_id and second.owner != dead_owner
    orphaned = await second.get_connector(c.id)
    assert orphaned.sync_owner == dead_owner != second.owner
