"""Failure paths that must never leave a connector stuck or a document unqueued."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from typing import Any

import pytest

from syncd.daemon import Daemon
from syncd.errors import ConfigError, QueueError, StoreError
from syncd.indexers.base import IndexerContext
from syncd.models import ConnectorStatus, DocStatus, Document, RunOutcome, SyncStatus
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.sourceserver import SourceServer

QUEUED = {"type": "queued"}


class QueuedIndexer:
    """A no-op indexer that goes through the queue and the workers."""

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        pass

    async def index(self, document: Document) -> None:
        return None


class BrokenFactory:
    """An indexer whose construction fails with an error that is not syncd's own."""

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        raise ConnectionRefusedError("index backend down")

    async def index(self, document: Document) -> None:  # pragma: no cover - never built
        return None


async def started(make_daemon: DaemonFactory, **sections: dict[str, Any]) -> Daemon:
    daemon = make_daemon(**sections)
    daemon.register_indexer("queued", QueuedIndexer)
    daemon.register_indexer("broken", BrokenFactory)
    await daemon.start()
    return daemon


async def test_an_indexer_that_cannot_be_built_fails_its_documents_and_spares_the_workers(
    make_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = await started(make_daemon, workers={"concurrency": 1})
    bad = await daemon.create_connector(
        {"name": "bad", "source": http_source(source), "indexer": {"type": "broken"}}
    )
    await daemon.trigger_sync(bad.id)
    await daemon.wait_run(bad.id)
    await daemon.wait_documents(bad.id, lambda n: n[DocStatus.FAILED] == 25)
    doc = await daemon.get_document(bad.id, "item-00000")
    assert doc.error == "Indexer unavailable: index backend down"
    # The only worker is still alive: another connector gets indexed.
    good = await daemon.create_connector(
        {"name": "good", "source": http_source(source), "indexer": QUEUED}
    )
    await daemon.trigger_sync(good.id)
    await daemon.wait_run(good.id)
    await daemon.wait_documents(good.id, lambda n: n[DocStatus.INDEXED] == 25)


async def test_a_failed_push_after_a_commit_is_repaired_by_a_rebuild(
    make_daemon: DaemonFactory, source: SourceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = await started(make_daemon)
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "indexer": QUEUED}
    )
    real_push = daemon.queue.push
    failures = [QueueError("queue unavailable")]

    async def flaky_push(connector_id: str, ids: Any) -> None:
        if failures:
            raise failures.pop()
        await real_push(connector_id, ids)

    monkeypatch.setattr(daemon.queue, "push", flaky_push)
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    after = await daemon.get_connector(c.id)
    assert after.status is ConnectorStatus.ERROR and after.last_error == "queue unavailable"
    # The page committed before the failed push is queued again by the rebuild.
    await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 10)
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 25)


async def test_a_store_error_before_the_claim_hands_the_batch_back(
    make_daemon: DaemonFactory, source: SourceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = await started(make_daemon, workers={"concurrency": 1})
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "indexer": QUEUED}
    )
    real_get = daemon.store.get_connector
    failures = [StoreError("database is locked")]

    async def flaky_get(connector_id: str) -> Any:
        if failures:
            raise failures.pop()
        return await real_get(connector_id)

    monkeypatch.setattr(daemon.store, "get_connector", flaky_get)
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    await daemon.wait_documents(c.id, lambda n: n[DocStatus.INDEXED] == 25)
    assert failures == []


async def test_a_cancelled_trigger_never_leaves_an_orphaned_run(
    daemon: Daemon, source: SourceServer
) -> None:
    c = await daemon.create_connector({"name": "items", "source": http_source(source)})
    source.hang_on(None)
    for yields in range(12):
        task = asyncio.create_task(daemon.trigger_sync(c.id))
        for _ in range(yields):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # The claim is shielded and may still be committing: reads do not wait for a write
        # in flight (they have connections of their own), so wait for the writer first.
        await daemon.store.ping()
        stored = await daemon.get_connector(c.id)
        if stored.sync_status is SyncStatus.RUNNING:
            # Claimed: then it runs here, and an abort stops it.
            assert daemon.running_syncs == {c.id: stored.run_id}
            await daemon.abort_sync(c.id)
            await daemon.wait_run(c.id)
        assert (await daemon.get_connector(c.id)).sync_status is SyncStatus.IDLE


async def test_a_failed_start_leaves_nothing_running(make_daemon: DaemonFactory) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        daemon = make_daemon(api={"listen": f"127.0.0.1:{port}"})
        daemon._serve_api = True
        before = {t.get_name() for t in asyncio.all_tasks()}
        with pytest.raises(ConfigError):
            await daemon.start()
        left = {t.get_name() for t in asyncio.all_tasks()} - before
        assert left == set()
    finally:
        taken.close()


async def test_a_rate_limited_resume_is_retried_not_restarted(
    daemon: Daemon, source: SourceServer
) -> None:
    c = await daemon.create_connector(
        {
            "name": "items",
            "source": http_source(source),
            "page_retries": 2,
            "page_retry_backoff": 0.01,
            "retry_on_status": [429, 502, 503, 504],
        }
    )
    source.hang_on("page-1")
    await daemon.trigger_sync(c.id)
    await source.requested("page-1").wait()
    source.fail_next(500)
    source.release()
    await daemon.wait_run(c.id)
    assert (await daemon.get_connector(c.id)).status is ConnectorStatus.ERROR
    before = len(source.cursors)
    source.fail_next(429)
    runs_before = len((await daemon.list_runs(c.id))[0])
    await daemon.trigger_sync(c.id)
    await daemon.wait_run(c.id)
    runs, _ = await daemon.list_runs(c.id)
    assert len(runs) == runs_before + 1 and runs[0].outcome is RunOutcome.SUCCEEDED
    # The 429 was retried on the resume cursor; the crawl did not start over.
    assert source.cursors[before:] == ["page-1", "page-1", "page-2"]
