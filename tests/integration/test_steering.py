"""Crawls the user steers (DESIGN.md §12), on both backend pairs, against a source that moves
(:mod:`tests.integration.movingsource`): a full crawl on demand of an incremental connector,
a backfill of a window, a failed full crawl that leaves everything as it was and resumes as
full (in another instance too), a queued trigger that keeps its mode, and the mark set and
reset. Each test ends with the documents equal to the source."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from syncd.daemon import Daemon
from syncd.errors import ValidationError
from syncd.models import CrawlMode, DocStatus, Run, RunOutcome, RunTrigger, SyncStatus
from tests.integration.conftest import DaemonFactory, http_source
from tests.integration.movingsource import MovingSource
from tests.integration.sourceserver import SourceServer

# Times after every record's (the records are stamped with the wall clock).
JAN1, JAN2, JAN3 = (f"2099-01-0{d}T00:00:00.000000Z" for d in (1, 2, 3))


@pytest.fixture
async def moving() -> AsyncIterator[MovingSource]:
    """25 records, pages of 10."""
    async with MovingSource(25, per_page=10) as server:
        yield server


def keyset(server: MovingSource, **incremental: Any) -> dict[str, Any]:
    """An incremental connector's source over the ``keyset`` route (``since`` = the mark)."""
    return {
        "type": "http",
        "url": f"{server.url}/keyset",
        "records": "data",
        "id_field": "id",
        "pagination": {"type": "cursor", "cursor_param": "after", "next_cursor": "next_cursor"},
        "incremental": {"field": "updated_at", "param": "since", **incremental},
    }


async def create(daemon: Daemon, server: MovingSource, **incremental: Any) -> str:
    c = await daemon.create_connector(
        {"name": "moving", "source": keyset(server, **incremental), "page_retries": 0}
    )
    return c.id


async def sync(daemon: Daemon, cid: str, server: MovingSource, **mode: Any) -> Run:
    """Trigger (asking for ``mode``), wait for the run's end; the run. The source's request
    log holds this run's requests only."""
    server.requests.clear()
    server.reset_pages()
    await daemon.trigger_sync(cid, **mode)
    await daemon.wait_run(cid)
    runs, _ = await daemon.list_runs(cid, limit=1)
    return runs[0]


async def documents(daemon: Daemon, cid: str) -> dict[str, Any]:
    """The connector's live documents: external id → payload."""
    docs, _ = await daemon.list_documents(cid, limit=1000)
    found = {}
    for d in docs:
        if d.status is not DocStatus.DELETED:
            found[d.external_id] = (await daemon.get_document(cid, d.external_id)).payload
    return found


def sent(server: MovingSource, name: str) -> list[str | None]:
    """The value of query parameter ``name`` in each request of the last run."""
    return [query.get(name) for _, query in server.requests]


def newest(server: MovingSource) -> str:
    return max(r["updated_at"] for r in server.records.values())


async def test_a_full_crawl_on_demand_deletes_what_is_gone_at_the_source(
    make_any_daemon: DaemonFactory, moving: MovingSource
) -> None:
    d = make_any_daemon()
    await d.start()
    cid = await create(d, moving)
    assert (await sync(d, cid, moving)).outcome is RunOutcome.SUCCEEDED
    assert await documents(d, cid) == moving.expected()
    mark = newest(moving)
    assert (await d.get_state(cid)).mark == mark

    # Gone at the source: an incremental crawl cannot see it.
    moving.delete(7)
    moving.edit(3)
    await sync(d, cid, moving)
    assert sent(moving, "since") == [mark]
    assert "7" in await documents(d, cid)

    # A full crawl asked for: no `since`, every page, and what it did not see is deleted.
    run = await sync(d, cid, moving, mode="full")
    assert run.outcome is RunOutcome.SUCCEEDED and run.deleted == 1
    assert sent(moving, "since") == [None, None, None]
    assert await documents(d, cid) == moving.expected()
    state = await d.get_state(cid)
    assert state.mark == newest(moving)
    assert state.mark_set_by == "crawl" and state.mark_run_id == run.id
    assert state.last_full_crawl_at is not None and state.crawl is None
    assert state.next_crawl.steer.mode is CrawlMode.INCREMENTAL

    # The next crawl is incremental again, from the full crawl's mark.
    await sync(d, cid, moving)
    assert sent(moving, "since") == [newest(moving)]


@pytest.mark.parametrize("until_param", [None, "until"])
async def test_a_backfill_syncs_its_window_only_and_leaves_the_mark(
    make_any_daemon: DaemonFactory, moving: MovingSource, until_param: str | None
) -> None:
    d = make_any_daemon()
    await d.start()
    extra = {"until_param": until_param} if until_param else {}
    cid = await create(d, moving, **extra)
    await sync(d, cid, moving)
    mark = newest(moving)
    # Changes at three times: before, inside and at the end of the window [JAN1, JAN3).
    moving.records[3].update(version=2, updated_at=JAN1)
    moving.records[12].update(version=2, updated_at=JAN2)
    moving.records[25].update(version=2, updated_at=JAN3)
    moving.delete(8)  # a backfill never prunes

    run = await sync(d, cid, moving, mode="backfill", since="2098-12-31T00:00:00Z", until=JAN3)
    assert run.outcome is RunOutcome.SUCCEEDED
    assert sent(moving, "since") == ["2098-12-31T00:00:00Z"]
    assert sent(moving, "until") == ([JAN3] if until_param else [None])
    # Record 25 is at the window's end: the source left it out, or syncd did.
    assert run.documents_filtered == (0 if until_param else 1)
    assert (run.documents_seen, run.deleted) == (2, 0)
    stored = await documents(d, cid)
    assert (stored["3"]["version"], stored["12"]["version"], stored["25"]["version"]) == (2, 2, 1)
    assert "8" in stored
    state = await d.get_state(cid)
    assert state.mark == mark and state.crawl is None
    assert state.last_full_crawl_at is None

    # The mark did not move: the next incremental crawl asks from it and finds all three.
    run = await sync(d, cid, moving)
    assert sent(moving, "since") == [mark]
    assert run.documents_seen == 3
    expected = moving.expected()
    assert {k: v for k, v in (await documents(d, cid)).items() if k != "8"} == expected
    # And a full crawl deletes what the backfill left.
    await sync(d, cid, moving, mode="full")
    assert await documents(d, cid) == expected


async def test_a_failed_full_crawl_changes_nothing_and_resumes_as_full_anywhere(
    make_any_daemon: DaemonFactory, moving: MovingSource
) -> None:
    first, second = make_any_daemon(), make_any_daemon()
    await first.start()
    await second.start()
    cid = await create(first, moving)
    await sync(first, cid, moving)
    before = await documents(first, cid)
    mark = (await first.get_state(cid)).mark
    moving.delete(22)  # on the last page
    moving.after_page("keyset", 1, lambda: moving.fail("keyset"))

    run = await sync(first, cid, moving, mode="full")
    assert run.outcome is RunOutcome.FAILED
    assert await documents(first, cid) == before  # nothing deleted
    state = await first.get_state(cid)
    assert state.mark == mark and state.mark_set_by == "crawl"
    assert state.crawl is not None
    assert (state.crawl.mode, state.crawl.resume_cursor_held) == (CrawlMode.FULL, True)
    assert state.crawl.started_at is not None
    assert (state.next_crawl.steer.mode, state.next_crawl.resume) == (CrawlMode.FULL, True)

    # A trigger without a mode, in another instance: the full crawl resumes where it failed.
    moving.recover("keyset")
    run = await sync(second, cid, moving)
    assert run.outcome is RunOutcome.SUCCEEDED and run.deleted == 1
    assert [q for _, q in moving.requests] == [{"after": "10"}, {"after": "20"}]
    assert await documents(second, cid) == moving.expected()
    state = await second.get_state(cid)
    assert state.crawl is None and state.last_full_crawl_at is not None
    assert state.mark == newest(moving)


async def test_a_queued_trigger_keeps_its_mode(
    make_any_daemon: DaemonFactory, moving: MovingSource, source: SourceServer
) -> None:
    d = make_any_daemon(sync={"max_concurrent_runs": 1})
    await d.start()
    cid = await create(d, moving)
    await sync(d, cid, moving)
    moving.delete(4)
    busy = await d.create_connector({"name": "busy", "source": http_source(source)})
    source.hang_on(None)
    await d.trigger_sync(busy.id)
    await source.requested(None).wait()

    moving.requests.clear()
    assert await d.trigger_sync(cid, mode="full") is None  # no free slot: queued
    assert (await d.get_connector(cid)).sync_status is SyncStatus.QUEUED
    assert (await d.get_state(cid)).next_crawl.steer.mode is CrawlMode.FULL
    source.release()
    await d.wait_connector(cid, lambda c: c.sync_status is SyncStatus.IDLE and c.run_id is None)
    runs, _ = await d.list_runs(cid, limit=1)
    assert (runs[0].trigger, runs[0].outcome, runs[0].deleted) == (
        RunTrigger.MANUAL,
        RunOutcome.SUCCEEDED,
        1,
    )
    assert sent(moving, "since") == [None, None, None]
    assert await documents(d, cid) == moving.expected()


async def test_an_aborted_queued_trigger_drops_its_mode(
    make_any_daemon: DaemonFactory, moving: MovingSource, source: SourceServer
) -> None:
    d = make_any_daemon(sync={"max_concurrent_runs": 1})
    await d.start()
    cid = await create(d, moving)
    await sync(d, cid, moving)
    busy = await d.create_connector({"name": "busy", "source": http_source(source)})
    source.hang_on(None)
    await d.trigger_sync(busy.id)
    await source.requested(None).wait()
    assert await d.trigger_sync(cid, mode="full") is None
    assert await d.abort_sync(cid) is None
    assert (await d.get_state(cid)).next_crawl.steer.mode is CrawlMode.INCREMENTAL
    source.release()
    await d.wait_run(busy.id)
    moving.edit(2)
    await sync(d, cid, moving)
    assert len(sent(moving, "since")) == 1 and sent(moving, "since")[0] is not None
    assert await documents(d, cid) == moving.expected()


async def test_setting_and_resetting_the_mark_change_what_the_next_crawl_sends(
    make_any_daemon: DaemonFactory, moving: MovingSource
) -> None:
    d = make_any_daemon()
    await d.start()
    cid = await create(d, moving, format="iso8601")
    await sync(d, cid, moving)

    # A mark set by hand: shown as given, sent (in the connector's format) by the next crawl.
    state = await d.set_state(cid, "2020-05-01T10:00:00Z")
    assert (state.mark, state.mark_set_by, state.mark_crawl_id) == (
        "2020-05-01T10:00:00Z",
        "user",
        None,
    )
    assert (await d.get_state(cid)).mark == "2020-05-01T10:00:00Z"
    run = await sync(d, cid, moving)
    assert sent(moving, "since") == ["2020-05-01T10:00:00Z"] * 3
    assert run.documents_seen == 25
    with pytest.raises(ValidationError) as refused:
        await d.set_state(cid, "last tuesday")
    assert list(refused.value.errors) == ["mark"]

    # Reset: no mark, and the next crawl is a full one, which prunes and sets the mark.
    moving.delete(11)
    state = await d.reset_state(cid)
    assert state.mark is None and state.mark_set_by is None
    assert (state.next_crawl.steer.mode, state.next_crawl.resume) == (CrawlMode.FULL, False)
    run = await sync(d, cid, moving)
    assert sent(moving, "since") == [None, None, None]
    assert run.deleted == 1 and run.note == "mark reset"
    assert await documents(d, cid) == moving.expected()
    state = await d.get_state(cid)
    assert state.mark == newest(moving) and state.mark_set_by == "crawl"


async def test_setting_the_mark_drops_an_incremental_crawl_in_progress(
    make_any_daemon: DaemonFactory, moving: MovingSource
) -> None:
    d = make_any_daemon()
    await d.start()
    cid = await create(d, moving)
    moving.after_page("keyset", 1, lambda: moving.fail("keyset"))
    assert (await sync(d, cid, moving)).outcome is RunOutcome.FAILED
    assert (await d.get_state(cid)).crawl is not None
    moving.recover("keyset")
    state = await d.set_state(cid, "2000-01-01T00:00:00.000000Z")
    assert state.crawl is None and state.next_crawl.resume is False
    run = await sync(d, cid, moving)
    assert sent(moving, "since") == ["2000-01-01T00:00:00.000000Z"] * 3
    assert run.note == "mark set"
    assert await documents(d, cid) == moving.expected()
