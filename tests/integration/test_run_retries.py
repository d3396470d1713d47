"""A failed run retried automatically, on both backend pairs: from its checkpoint, counted,
shown, and ended by a success; an abort is never retried."""

from __future__ import annotations

from syncd.daemon import Daemon
from syncd.models import ConnectorStatus, RunOutcome, RunTrigger
from tests.integration.conftest import http_source
from tests.integration.sourceserver import SourceServer


async def create(daemon: Daemon, source: SourceServer, **fields: object) -> str:
    c = await daemon.create_connector(
        {
            "name": "items",
            "source": http_source(source),
            "page_retries": 0,
            "retry_backoff": 0,
            **fields,
        }
    )
    return c.id


async def test_a_failed_run_is_retried_from_its_checkpoint(
    any_daemon: Daemon, source: SourceServer
) -> None:
    cid = await create(any_daemon, source)
    source.hang_on("page-1")
    await any_daemon.trigger_sync(cid)
    await source.requested("page-1").wait()
    source.fail_next(500)  # page 2 fails once; page_retries 0: the run fails
    source.release()
    await any_daemon.wait_run(cid)
    failed = await any_daemon.get_connector(cid)
    assert (failed.status, failed.failures) == (ConnectorStatus.ERROR, 1)
    assert failed.retry_at is not None and failed.next_run_at == failed.retry_at
    assert "HTTP 500" in (failed.last_error or "")

    await any_daemon.tick()  # the retry is due at once (retry_backoff 0)
    await any_daemon.wait_run(cid)
    done = await any_daemon.get_connector(cid)
    assert (done.status, done.failures, done.retry_at, done.last_error) == (
        ConnectorStatus.ACTIVE,
        0,
        None,
        None,
    )
    runs, _ = await any_daemon.list_runs(cid)
    assert [(r.trigger, r.attempt, r.outcome) for r in runs] == [
        (RunTrigger.RETRY, 2, RunOutcome.SUCCEEDED),
        (RunTrigger.MANUAL, 1, RunOutcome.FAILED),
    ]
    # The retry resumed at the page that failed: page 1 was fetched once.
    assert source.cursors == [None, "page-1", "page-1", "page-2"]


async def test_the_retries_end_with_the_budget(any_daemon: Daemon, source: SourceServer) -> None:
    cid = await create(any_daemon, source, retry_attempts=1)
    source.fail_next(500, times=2)
    await any_daemon.trigger_sync(cid)
    await any_daemon.wait_run(cid)
    await any_daemon.tick()
    await any_daemon.wait_run(cid)
    c = await any_daemon.get_connector(cid)
    assert (c.status, c.failures, c.retry_at, c.next_run_at) == (
        ConnectorStatus.ERROR,
        2,
        None,
        None,
    )
    assert await any_daemon.tick() == []  # nothing more is due
    runs, _ = await any_daemon.list_runs(cid)
    assert [(r.trigger, r.attempt) for r in runs] == [
        (RunTrigger.RETRY, 2),
        (RunTrigger.MANUAL, 1),
    ]


async def test_an_aborted_run_is_not_retried(any_daemon: Daemon, source: SourceServer) -> None:
    cid = await create(any_daemon, source)
    source.hang_on("page-1")
    await any_daemon.trigger_sync(cid)
    await source.requested("page-1").wait()
    await any_daemon.abort_sync(cid)
    await any_daemon.wait_run(cid)
    source.release()
    c = await any_daemon.get_connector(cid)
    assert (c.status, c.failures, c.retry_at) == (ConnectorStatus.ACTIVE, 0, None)
    assert await any_daemon.tick() == []
