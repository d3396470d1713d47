"""Sync runs end to end (DESIGN.md §2, §4): a real daemon on SQLite and the in-process
queue against a real local source server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest

from syncd.daemon import Daemon
from syncd.errors import Conflict, NotFound
from syncd.indexers.base import IndexerContext
from syncd.models import ConnectorStatus, DocStatus, Document, RunOutcome, SyncStatus
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.sourceserver import SourceServer


def all_indexed(n: int) -> Any:
    return lambda counts: counts[DocStatus.INDEXED] == n


async def sync_and_wait(daemon: Daemon, connector_id: str) -> Any:
    run_id = await daemon.trigger_sync(connector_id)
    await daemon.wait_run(connector_id)
    runs, _ = await daemon.list_runs(connector_id, limit=1)
    assert runs[0].id == run_id
    return runs[0]


async def test_full_sync_indexes_every_record(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector({"name": "items", "source": http_source(source)})
    run = await sync_and_wait(daemon, c.id)
    assert run.outcome is RunOutcome.SUCCEEDED
    assert (run.pages, run.documents_seen, run.documents_enqueued) == (3, 25, 25)
    assert source.cursors == [None, "page-1", "page-2"]
    after = await daemon.get_connector(c.id)
    assert after.status is ConnectorStatus.ACTIVE and after.sync_status is SyncStatus.IDLE
    assert after.last_synced_at is not None and after.run_id is None
    assert (after.progress.pages, after.progress.documents) == (3, 25)
    counts = await daemon.wait_documents(c.id, all_indexed(25))
    assert counts[DocStatus.PENDING] == counts[DocStatus.FAILED] == 0
    doc = await daemon.get_document(c.id, "item-00007")
    assert doc.payload == source.records[7]
    assert doc.status is DocStatus.INDEXED and doc.indexed_at is not None


async def test_unchanged_documents_are_not_enqueued_again(
    daemon: Daemon, source: SourceServer
) -> None:
    c = await daemon.create_connector({"name": "items", "source": http_source(source)})
    await sync_and_wait(daemon, c.id)
    await daemon.wait_documents(c.id, all_indexed(25))
    second = await sync_and_wait(daemon, c.id)
    assert (second.documents_seen, second.documents_enqueued) == (25, 0)
    records = source.records
    records[3] = {**records[3], "title": "changed"}
    source.set_records(records)
    third = await sync_and_wait(daemon, c.id)
    assert third.documents_enqueued == 1
    await daemon.wait_documents(c.id, all_indexed(25))
    assert (await daemon.get_document(c.id, "item-00003")).payload["title"] == "changed"


async def test_failure_then_success(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "page_retries": 0}
    )
    source.fail_next(500)
    failed = await sync_and_wait(daemon, c.id)
    assert failed.outcome is RunOutcome.FAILED and "500" in (failed.error or "")
    after = await daemon.get_connector(c.id)
    assert after.status is ConnectorStatus.ERROR and "500" in (after.last_error or "")
    assert after.sync_status is SyncStatus.IDLE
    ok = await sync_and_wait(daemon, c.id)  # a previous failure never blocks the next attempt
    assert ok.outcome is RunOutcome.SUCCEEDED
    after = await daemon.get_connector(c.id)
    assert after.status is ConnectorStatus.ACTIVE and after.last_error is None


async def test_next_run_resumes_from_the_checkpoint(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "page_retries": 0}
    )
    # Page 0 and page 1 succeed, page 2 fails.
    source.hang_on("page-2")
    run_id = await daemon.trigger_sync(c.id)
    await source.requested("page-2").wait()
    source.fail_next(500)
    source.release()
    await daemon.wait_run(c.id)
    assert (await daemon.get_connector(c.id)).status is ConnectorStatus.ERROR
    before = len(source.cursors)
    resumed = await sync_and_wait(daemon, c.id)
    assert resumed.id != run_id and resumed.outcome is RunOutcome.SUCCEEDED
    assert source.cursors[before:] == ["page-2"]
    await daemon.wait_documents(c.id, all_indexed(25))


async def test_rejected_resume_cursor_starts_over(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "page_retries": 0}
    )
    source.hang_on("page-1")
    await daemon.trigger_sync(c.id)
    await source.requested("page-1").wait()
    source.fail_next(500)
    source.release()
    await daemon.wait_run(c.id)
    before = len(source.cursors)
    source.fail_next(400)  # the source no longer accepts the saved cursor
    run = await sync_and_wait(daemon, c.id)
    assert run.outcome is RunOutcome.SUCCEEDED
    assert source.cursors[before:] == ["page-1", None, "page-1", "page-2"]


async def test_pause_during_run_stays_paused(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector({"name": "items", "source": http_source(source)})
    source.hang_on("page-1")
    await daemon.trigger_sync(c.id)
    await source.requested("page-1").wait()
    paused = await daemon.update_connector(c.id, {"status": "paused"})
    assert paused.status is ConnectorStatus.PAUSED and paused.sync_status is SyncStatus.RUNNING
    source.release()
    await daemon.wait_run(c.id)
    after = await daemon.get_connector(c.id)
    assert after.status is ConnectorStatus.PAUSED  # completion does not undo the pause
    assert after.last_synced_at is not None
    runs, _ = await daemon.list_runs(c.id)
    assert runs[0].outcome is RunOutcome.SUCCEEDED
    with pytest.raises(Conflict, match="Connector is paused"):
        await daemon.trigger_sync(c.id)


async def test_abort_with_hung_request_stops_at_once(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector({"name": "items", "source": http_source(source)})
    source.hang_on("page-1")
    run_id = await daemon.trigger_sync(c.id)
    await source.requested("page-1").wait()
    started = time.perf_counter()
    assert await daemon.abort_sync(c.id) == run_id
    idle = await daemon.get_connector(c.id)
    await daemon.wait_run(c.id)
    elapsed = time.perf_counter() - started
    assert idle.sync_status is SyncStatus.IDLE and idle.run_id is None
    assert elapsed < 0.2, f"abort took {elapsed:.3f}s"
    source.release()
    # Let the server answer the cancelled request; the run must not issue another one.
    await asyncio.sleep(0)
    after = await daemon.get_connector(c.id)
    assert after.status is ConnectorStatus.ACTIVE and after.last_synced_at is None
    assert "page-2" not in source.cursors
    runs, _ = await daemon.list_runs(c.id)
    assert runs[0].outcome is RunOutcome.ABORTED
    with pytest.raises(Conflict, match="No sync in progress"):
        await daemon.abort_sync(c.id)


async def test_abort_during_backoff_and_visible_wait(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector(
        {
            "name": "items",
            "source": http_source(source),
            "page_retry_backoff": 30.0,
            "retry_on_status": [429],
        }
    )
    # 429 is not retried by the transport, only by the paginator (it is listed).
    source.fail_next(429, times=10)
    await daemon.trigger_sync(c.id)
    # The heartbeat reports the wait as soon as it starts.
    waiting = (await daemon.wait_connector(c.id, lambda c: c.waiting is not None)).waiting
    assert waiting is not None and waiting.reason == "backoff"
    started = time.perf_counter()
    await daemon.abort_sync(c.id)
    await daemon.wait_run(c.id)
    assert time.perf_counter() - started < 0.2
    assert (await daemon.get_connector(c.id)).waiting is None


class BlockingIndexer:
    """Never finishes on its own; counts how often it was cancelled."""

    cancelled = 0
    started: asyncio.Event

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        pass

    async def index(self, document: Document) -> None:
        BlockingIndexer.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            BlockingIndexer.cancelled += 1
            raise


async def test_abort_fails_queued_and_running_documents_and_resync_requeues_them(
    make_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_daemon(workers={"concurrency": 1, "batch_size": 5})
    BlockingIndexer.cancelled = 0
    BlockingIndexer.started = asyncio.Event()
    daemon.register_indexer("blocking", BlockingIndexer)
    await daemon.start()
    c = await daemon.create_connector(
        {"name": "items", "source": http_source(source), "indexer": {"type": "blocking"}}
    )
    source.hang_on("page-2")
    await daemon.trigger_sync(c.id)
    await source.requested("page-2").wait()
    await BlockingIndexer.started.wait()
    counts = await daemon.document_counts(c.id)
    assert counts[DocStatus.RUNNING] == 5 and counts[DocStatus.PENDING] == 15
    await daemon.abort_sync(c.id)
    counts = await daemon.document_counts(c.id)
    assert counts[DocStatus.FAILED] == 20
    assert counts[DocStatus.PENDING] == counts[DocStatus.RUNNING] == 0
    docs, _ = await daemon.list_documents(c.id, status=DocStatus.FAILED)
    assert {d.error for d in docs} == {"Aborted"}
    assert await daemon.queue.depth() == {}
    await daemon.wait_run(c.id)
    assert BlockingIndexer.cancelled == 1  # the running indexing task was cancelled
    source.release()
    await daemon.update_connector(c.id, {"indexer": {"type": "store"}})
    run = await sync_and_wait(daemon, c.id)
    # Unchanged content, but failed by the abort: enqueued again, and indexed.
    assert run.outcome is RunOutcome.SUCCEEDED
    await daemon.wait_documents(c.id, all_indexed(25))


async def test_fifty_concurrent_triggers_start_one_run(
    daemon: Daemon, source: SourceServer
) -> None:
    c = await daemon.create_connector({"name": "items", "source": http_source(source)})
    source.hang_on(None)
    results = await asyncio.gather(
        *(daemon.trigger_sync(c.id) for _ in range(50)), return_exceptions=True
    )
    started = [r for r in results if isinstance(r, str)]
    conflicts = [r for r in results if isinstance(r, Conflict)]
    assert len(started) == 1 and len(conflicts) == 49
    assert {e.message for e in conflicts} == {"Sync already in progress"}
    assert {e.extra["run_id"] for e in conflicts} == set(started)
    source.release()
    await daemon.wait_run(c.id)
    runs, _ = await daemon.list_runs(c.id)
    assert len(runs) == 1


async def test_delete_cascades(daemon: Daemon, source: SourceServer) -> None:
    c = await daemon.create_connector({"name": "items", "source": http_source(source)})
    await sync_and_wait(daemon, c.id)
    source.hang_on(None)
    await daemon.trigger_sync(c.id)
    with pytest.raises(Conflict, match="Cannot delete connector while sync is running"):
        await daemon.delete_connector(c.id)
    await daemon.abort_sync(c.id)
    source.release()
    await daemon.wait_run(c.id)
    await daemon.delete_connector(c.id)
    await daemon.delete_connector(c.id)  # idempotent while deleting, or already gone
    await daemon.wait_deleted(c.id)
    with pytest.raises(NotFound):
        await daemon.get_connector(c.id)
    assert await daemon.store.list_runs(c.id) == []
    assert await daemon.store.list_documents(c.id) == []
    assert c.id not in await daemon.queue.depth()


class FlakyIndexer:
    """Fails one document, indexes the rest."""

    def __init__(self, config: Mapping[str, Any], context: IndexerContext) -> None:
        self.bad = str(config["bad"])

    async def index(self, document: Document) -> None:
        if document.external_id == self.bad:
            raise RuntimeError("cannot index this one")


async def test_one_document_failure_is_not_a_sync_failure(
    make_daemon: DaemonFactory, source: SourceServer
) -> None:
    daemon = make_daemon()
    daemon.register_indexer("flaky", FlakyIndexer)
    await daemon.start()
    c = await daemon.create_connector(
        {
            "name": "items",
            "source": http_source(source),
            "indexer": {"type": "flaky", "bad": "item-00004"},
        }
    )
    run = await sync_and_wait(daemon, c.id)
    assert run.outcome is RunOutcome.SUCCEEDED
    counts = await daemon.wait_documents(
        c.id, lambda n: n[DocStatus.INDEXED] == 24 and n[DocStatus.FAILED] == 1
    )
    assert counts[DocStatus.PENDING] == 0
    doc = await daemon.get_document(c.id, "item-00004")
    assert doc.error == "cannot index this one" and doc.attempts == 1
    assert (await daemon.get_connector(c.id)).status is ConnectorStatus.ACTIVE
    assert await daemon.retry_failed(c.id) == 1
    await daemon.wait_documents(
        c.id,
        lambda n: (
            n[DocStatus.FAILED] == 1 and n[DocStatus.PENDING] == 0 and (n[DocStatus.RUNNING] == 0)
        ),
    )
    assert (await daemon.get_document(c.id, "item-00004")).attempts == 1


async def test_graceful_stop_interrupts_and_next_start_resumes(
    make_daemon: DaemonFactory, source: SourceServer
) -> None:
    first = make_daemon()
    await first.start()
    c = await first.create_connector({"name": "items", "source": http_source(source)})
    source.hang_on("page-2")
    await first.trigger_sync(c.id)
    await source.requested("page-2").wait()
    await first.stop()
    source.release()
    second = make_daemon()
    await second.start()
    after = await second.get_connector(c.id)
    assert after.sync_status is SyncStatus.IDLE and after.status is ConnectorStatus.ACTIVE
    runs, _ = await second.list_runs(c.id)
    assert runs[0].outcome is RunOutcome.INTERRUPTED
    before = len(source.cursors)
    run = await sync_and_wait(second, c.id)
    assert run.outcome is RunOutcome.SUCCEEDED
    assert source.cursors[before:] == ["page-2"]
    # Documents left pending by the first process are indexed by the second.
    await second.wait_documents(c.id, all_indexed(25))


@pytest.mark.parametrize(
    ("fields", "fail", "reason"),
    [
        ({"throttle_seconds": 30.0}, None, "throttle"),
        ({}, (503, "20"), "retry_after"),  # waited by the transport's own retries
    ],
)
async def test_every_wait_is_visible_and_abortable(
    daemon: Daemon,
    source: SourceServer,
    fields: dict[str, Any],
    fail: tuple[int, str] | None,
    reason: str,
) -> None:
    c = await daemon.create_connector({"name": "items", "source": http_source(source), **fields})
    if fail is not None:
        source.fail_next(fail[0], times=10, retry_after=fail[1])
    await daemon.trigger_sync(c.id)
    shown = await daemon.wait_connector(c.id, lambda c: c.waiting is not None)
    assert shown.waiting is not None and shown.waiting.reason == reason
    started = time.perf_counter()
    await daemon.abort_sync(c.id)
    await daemon.wait_run(c.id)
    assert time.perf_counter() - started < 0.2
    assert (await daemon.get_connector(c.id)).waiting is None
