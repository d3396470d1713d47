"""Store and queue outages ridden out (issue 23): a private PostgreSQL or Redis restarted under a
running sync. Within ``[sync] outage_seconds`` the run waits (``waiting.reason`` says for what)
and goes on where it was, nothing lost and nothing delivered twice; beyond it, the run fails
with an error naming the outage, written as soon as the store answers; an abort or a stop
during the wait takes effect at once.

The only sleeps are the outages themselves; everything else waits on events, or polls this
process's own state (bounded).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import structlog

from syncd.daemon import Daemon
from syncd.models import ConnectorStatus, RunOutcome, SyncStatus, WaitReason
from tests.integration.conftest import http_source
from tests.integration.multi import (
    HoldingReceiver,
    RedisServer,
    document_ids,
    free_port,
    poll_until,
    shared_config,
    wait_indexed,
)
from tests.integration.pgserver import PostgresServer
from tests.integration.sourceserver import SourceServer

#: How long the server is down in the outages that the run rides out.
OUTAGE_SECONDS = 2.0
#: Bound for a run to end once its backends answer again.
RUN_END_TIMEOUT = 20.0

StartDaemon = Callable[..., Awaitable[Daemon]]


@pytest.fixture
async def private_postgres() -> AsyncIterator[PostgresServer]:
    """A PostgreSQL cluster of this test's own, that the test may stop and start."""
    server = PostgresServer(free_port())
    await server.init()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def private_redis() -> AsyncIterator[RedisServer]:
    """A ``redis-server`` of this test's own (no persistence), stopped at the end."""
    server = RedisServer(free_port())
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def receiver() -> AsyncIterator[HoldingReceiver]:
    """A webhook endpoint answering 200 at once and recording every delivery."""
    server = HoldingReceiver()
    server.hold = False
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def source() -> AsyncIterator[SourceServer]:
    """50 records in pages of 10."""
    async with SourceServer(50, page_size=10) as server:
        yield server


@pytest.fixture
async def start_daemon() -> AsyncIterator[StartDaemon]:
    """Start a daemon on the given store and queue; stopped at the end."""
    started: list[Daemon] = []

    async def start(store_url: str, queue_url: str, **sections: dict[str, Any]) -> Daemon:
        config = shared_config(store_url, queue_url, "syncd-outages", "instance-a", **sections)
        daemon = Daemon(config, serve_api=False)
        await daemon.start()
        started.append(daemon)
        return daemon

    yield start
    for daemon in reversed(started):
        await daemon.stop()


async def _start_hung_sync(
    daemon: Daemon, source: SourceServer, receiver: HoldingReceiver, hung: str = "page-2"
) -> tuple[str, str]:
    """A webhook connector whose run has committed the pages before ``hung`` and waits for
    it; ``(connector id, run id)``."""
    c = await daemon.create_connector(
        {
            "name": "items",
            "source": http_source(source),
            "indexer": {"type": "webhook", "url": receiver.url},
            "page_retries": 0,
        }
    )
    source.hang_on(hung)
    run_id = await daemon.trigger_sync(c.id)
    assert run_id is not None
    await source.requested(hung).wait()
    return c.id, run_id


async def _wait_outage(daemon: Daemon, connector_id: str, reason: WaitReason) -> None:
    """Until this instance's run of the connector waits for its store or queue."""

    async def waiting() -> bool:
        wait = daemon.engine.outage_wait(connector_id)
        return wait is not None and wait.reason is reason

    await poll_until(waiting, f"the run to wait ({reason})", timeout=10.0)


async def _assert_complete(
    daemon: Daemon, connector_id: str, run_id: str, source: SourceServer, receiver: HoldingReceiver
) -> None:
    """The run succeeded, fetched each page once, and every record was delivered once."""
    run = (await daemon.list_runs(connector_id, limit=1))[0][0]
    assert (run.id, run.outcome, run.error) == (run_id, RunOutcome.SUCCEEDED, None)
    after = await daemon.get_connector(connector_id)
    assert after.status is ConnectorStatus.ACTIVE and after.last_error is None
    assert after.sync_status is SyncStatus.IDLE and after.waiting is None
    # Resumed where it was: no page requested twice.
    assert source.cursors == [None, *(f"page-{n}" for n in range(1, 5))]
    await wait_indexed(daemon, connector_id, len(source.records), timeout=RUN_END_TIMEOUT)
    delivered = collections.Counter(receiver.answered)
    assert sorted(delivered) == document_ids(source.records)
    assert set(delivered.values()) == {1}, delivered.most_common(3)


@pytest.mark.parametrize("queue", ["memory", "redis"])
async def test_a_postgres_restart_under_a_sync_is_ridden_out(
    queue: str,
    private_postgres: PostgresServer,
    private_redis: RedisServer,
    start_daemon: StartDaemon,
    source: SourceServer,
    receiver: HoldingReceiver,
) -> None:
    queue_url = private_redis.url if queue == "redis" else "memory://"
    daemon = await start_daemon(private_postgres.dsn, queue_url)
    cid, run_id = await _start_hung_sync(daemon, source, receiver)

    await private_postgres.stop()
    source.release()  # page 2 arrives while PostgreSQL is down: its commit waits
    await _wait_outage(daemon, cid, WaitReason.STORE_UNAVAILABLE)
    await asyncio.sleep(OUTAGE_SECONDS)  # the outage
    await private_postgres.start()

    await asyncio.wait_for(daemon.wait_run(cid), RUN_END_TIMEOUT)
    await _assert_complete(daemon, cid, run_id, source, receiver)


async def test_an_outage_longer_than_the_budget_fails_the_run_promptly(
    private_postgres: PostgresServer,
    start_daemon: StartDaemon,
    source: SourceServer,
    receiver: HoldingReceiver,
) -> None:
    daemon = await start_daemon(private_postgres.dsn, "memory://", sync={"outage_seconds": 1})
    cid, run_id = await _start_hung_sync(daemon, source, receiver)
    with structlog.testing.capture_logs() as logs:
        await private_postgres.stop()
        source.release()

        async def gave_up() -> bool:
            return any(e["event"] == "sync.failed" for e in logs)

        # The budget passes while the server is down; the failure waits for the store.
        await poll_until(gave_up, "the run to give up on the store", timeout=10.0)
        assert daemon.engine.running == {cid: run_id}
        await private_postgres.start()
        back = time.monotonic()
        await asyncio.wait_for(daemon.wait_run(cid), RUN_END_TIMEOUT)
        # Written at most one backoff cap (0.5 s) after the store answered (plus a reconnect).
        assert time.monotonic() - back < 1.5

    run = (await daemon.list_runs(cid, limit=1))[0][0]
    assert (run.id, run.outcome) == (run_id, RunOutcome.FAILED)
    assert run.error is not None
    assert run.error.startswith("store unavailable for 1."), run.error
    assert "longer than [sync] outage_seconds (1s): " in run.error
    assert "PostgreSQL" in run.error and "(commit page)" in run.error
    after = await daemon.get_connector(cid)
    assert after.status is ConnectorStatus.ERROR and after.last_error == run.error
    assert after.sync_status is SyncStatus.IDLE and after.run_id is None


async def test_a_stop_during_a_store_wait_is_instant(
    private_postgres: PostgresServer,
    start_daemon: StartDaemon,
    source: SourceServer,
    receiver: HoldingReceiver,
) -> None:
    daemon = await start_daemon(private_postgres.dsn, "memory://")
    cid, _ = await _start_hung_sync(daemon, source, receiver)
    await private_postgres.stop()
    source.release()
    await _wait_outage(daemon, cid, WaitReason.STORE_UNAVAILABLE)
    began = time.monotonic()
    await daemon.engine.stop(grace=30)
    assert time.monotonic() - began < 1.0
    assert daemon.engine.running == {}
    await private_postgres.start()


async def test_a_redis_restart_under_a_sync_is_ridden_out(
    postgres_dsn: str,
    private_redis: RedisServer,
    start_daemon: StartDaemon,
    source: SourceServer,
    receiver: HoldingReceiver,
) -> None:
    daemon = await start_daemon(postgres_dsn, private_redis.url)
    cid, run_id = await _start_hung_sync(daemon, source, receiver)

    await private_redis.stop()
    source.release()  # page 2 is committed, but cannot be queued: the run waits
    await _wait_outage(daemon, cid, WaitReason.QUEUE_UNAVAILABLE)

    async def shown() -> bool:
        # The store answers: the wait is recorded there too (the heartbeat writes it).
        waiting = (await daemon.get_connector(cid)).waiting
        return waiting is not None and waiting.reason is WaitReason.QUEUE_UNAVAILABLE

    await poll_until(shown, "the stored connector to show the wait")
    await asyncio.sleep(OUTAGE_SECONDS)  # the outage
    await private_redis.start()  # empty: whatever the queue held is gone, rebuilt from the store

    await asyncio.wait_for(daemon.wait_run(cid), RUN_END_TIMEOUT)
    await _assert_complete(daemon, cid, run_id, source, receiver)


async def test_an_abort_during_a_queue_wait_is_instant(
    postgres_dsn: str,
    private_redis: RedisServer,
    start_daemon: StartDaemon,
    source: SourceServer,
    receiver: HoldingReceiver,
) -> None:
    daemon = await start_daemon(postgres_dsn, private_redis.url)
    cid, run_id = await _start_hung_sync(daemon, source, receiver)
    await private_redis.stop()
    source.release()
    await _wait_outage(daemon, cid, WaitReason.QUEUE_UNAVAILABLE)

    # The abort answers once its queue calls have timed out (bounded, DESIGN.md §4); the run
    # is stopped by then: its wait for the queue ended with the cancel token.
    assert await asyncio.wait_for(daemon.abort_sync(cid), 5.0) == run_id
    await asyncio.wait_for(daemon.wait_run(cid), 0.5)
    run = (await daemon.list_runs(cid, limit=1))[0][0]
    assert run.outcome is RunOutcome.ABORTED
    after = await daemon.get_connector(cid)
    assert after.sync_status is SyncStatus.IDLE and after.status is ConnectorStatus.ACTIVE
    await private_redis.start()
