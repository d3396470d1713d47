"""No live document is deleted because a crawl missed it (DESIGN.md §12).

A page-numbered list shifts when a record before the page being read is deleted: the record
at the boundary slides onto a page already read and the crawl misses it. A document that a
complete full crawl did not see is deleted only once ``prune_confirmations`` complete crawls
in a row missed it: by default 2 for the ``offset`` and ``page`` styles, so the next crawl,
which sees the record again, keeps it. The documents waiting show on the connector, the run
and the document. A failed or aborted crawl confirms nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from syncd.api import views
from syncd.daemon import Daemon
from syncd.models import Connector, DocStatus, Run, RunOutcome
from tests.integration.conftest import http_source
from tests.integration.movingsource import MovingSource
from tests.integration.sourceserver import SourceServer, make_records

RUN_END_TIMEOUT = 10.0


@pytest.fixture
async def moving() -> AsyncIterator[MovingSource]:
    """Records 1..25, 10 a page: pages 1-10, 11-20, 21-25."""
    async with MovingSource(25, per_page=10) as server:
        yield server


def wordpress(server: MovingSource, **fields: Any) -> dict[str, Any]:
    """A connector over the WordPress-shaped ``/pages`` route, as the recipe configures one."""
    return {
        "name": "posts",
        "source": {
            "type": "http",
            "url": f"{server.url}/pages",
            "id_field": "id",
            "pagination": {
                "type": "page",
                "size": server.per_page,
                "size_param": "per_page",
                "total_pages_header": "X-WP-TotalPages",
                "end_status": [400],
            },
        },
        "page_retries": 0,
        **fields,
    }


async def sync(daemon: Daemon, connector_id: str) -> Run:
    """A manual run, to its end; its run row."""
    run_id = await daemon.trigger_sync(connector_id)
    await asyncio.wait_for(daemon.wait_run(connector_id), RUN_END_TIMEOUT)
    runs, _ = await daemon.list_runs(connector_id, limit=1)
    assert runs[0].id == run_id
    return runs[0]


async def crawl(daemon: Daemon, server: MovingSource, connector_id: str) -> Run:
    """A crawl from the first page (the source counts its pages from zero again)."""
    server.reset_pages()
    run = await sync(daemon, connector_id)
    assert run.outcome is RunOutcome.SUCCEEDED, run.error
    return run


async def live(daemon: Daemon, connector_id: str) -> dict[str, Any]:
    """External id → payload of the connector's live (not deleted) documents."""
    docs, _ = await daemon.list_documents(connector_id, limit=1000)
    found = {}
    for d in docs:
        if d.status is not DocStatus.DELETED:
            found[d.external_id] = (await daemon.get_document(connector_id, d.external_id)).payload
    return found


async def missed(daemon: Daemon, connector_id: str) -> dict[str, int]:
    """External id → ``missed_crawls`` (as the API shows it) of the documents above 0."""
    docs, _ = await daemon.list_documents(connector_id, limit=1000)
    shown = (views.document_json(d) for d in docs)
    return {d["external_id"]: d["missed_crawls"] for d in shown if d["missed_crawls"]}


async def awaiting(daemon: Daemon, connector_id: str) -> int:
    """The connector's ``documents_awaiting_confirmation``, as the API shows it."""
    c = await daemon.get_connector(connector_id)
    shown = views.connector_json(c, await daemon.document_counts(connector_id))
    return int(shown["documents_awaiting_confirmation"])


def slide_eleven_onto_page_one(server: MovingSource) -> None:
    """Record 3 is deleted right after page 1 is served: record 11 slides onto page 1, so
    the crawl reads 12..21 as page 2 and never sees 11."""
    server.after_page("pages", 1, lambda: server.delete(3))


async def test_a_record_a_shifted_page_hid_is_kept_and_seen_again(
    any_daemon: Daemon, moving: MovingSource
) -> None:
    daemon = any_daemon
    c = await daemon.create_connector(wordpress(moving))
    shown = views.connector_json(c, {})
    assert shown["prune_confirmations"] is None  # the default of the `page` style: 2
    await crawl(daemon, moving, c.id)
    assert await live(daemon, c.id) == moving.expected()

    moving.delete(25)  # really gone before the crawl
    slide_eleven_onto_page_one(moving)  # and 3 once page 1 (which holds it) was read
    first = await crawl(daemon, moving, c.id)

    # Neither 11 (live) nor 25 (gone) is deleted: each was missed once. (3 was read before
    # it went: no crawl has missed it yet.)
    found = await live(daemon, c.id)
    assert {k: v for k, v in found.items() if k not in ("3", "25")} == moving.expected()
    assert await missed(daemon, c.id) == {"11": 1, "25": 1}
    assert (first.deleted, first.awaiting_confirmation) == (0, 2)
    assert views.run_json(first)["awaiting_confirmation"] == 2
    assert await awaiting(daemon, c.id) == 2

    second = await crawl(daemon, moving, c.id)

    # 11 was seen again: back to 0. 25 was missed a second time: confirmed gone, deleted.
    # 3, read on page 1 by the first crawl, is missed for the first time.
    assert (second.deleted, second.awaiting_confirmation) == (1, 1)
    assert await missed(daemon, c.id) == {"3": 1}
    assert await awaiting(daemon, c.id) == 1
    assert {k: v for k, v in (await live(daemon, c.id)).items() if k != "3"} == moving.expected()
    gone = await daemon.get_document(c.id, "25")
    assert (gone.status, gone.missed) == (DocStatus.DELETED, 0)

    third = await crawl(daemon, moving, c.id)

    assert (third.deleted, third.awaiting_confirmation) == (1, 0)
    assert await missed(daemon, c.id) == {}
    assert await awaiting(daemon, c.id) == 0
    assert await live(daemon, c.id) == moving.expected()


async def test_one_confirmation_deletes_what_the_first_crawl_missed(
    any_daemon: Daemon, moving: MovingSource
) -> None:
    # Today's rule, asked for: the shifted crawl deletes 11, the next one brings it back (and
    # deletes 3, which the first crawl read on page 1 before it went).
    daemon = any_daemon
    c = await daemon.create_connector(wordpress(moving, prune_confirmations=1))
    await crawl(daemon, moving, c.id)

    slide_eleven_onto_page_one(moving)
    first = await crawl(daemon, moving, c.id)

    assert (first.deleted, first.awaiting_confirmation) == (1, 0)
    found = await live(daemon, c.id)
    assert "11" not in found
    assert {k: v for k, v in found.items() if k != "3"} == {
        k: v for k, v in moving.expected().items() if k != "11"
    }
    assert await awaiting(daemon, c.id) == 0

    second = await crawl(daemon, moving, c.id)

    assert (second.deleted, second.awaiting_confirmation) == (1, 0)
    assert await live(daemon, c.id) == moving.expected()
    back = await daemon.get_document(c.id, "11")
    assert (back.status, back.missed) == (DocStatus.INDEXED, 0)


async def test_a_patch_sets_and_resets_prune_confirmations(
    any_daemon: Daemon, moving: MovingSource
) -> None:
    daemon = any_daemon
    c = await daemon.create_connector(wordpress(moving))
    await crawl(daemon, moving, c.id)
    # Three crawls in a row must miss a document: two are not enough.
    patched = await daemon.update_connector(c.id, {"prune_confirmations": 3})
    assert views.connector_json(patched, {})["prune_confirmations"] == 3
    moving.delete(25)
    await crawl(daemon, moving, c.id)
    second = await crawl(daemon, moving, c.id)
    assert (second.deleted, second.awaiting_confirmation) == (0, 1)
    assert await missed(daemon, c.id) == {"25": 2}
    # Back to the style's default (2): the next crawl, the third to miss 25, deletes it.
    reset = await daemon.update_connector(c.id, {"prune_confirmations": None})
    assert reset.prune_confirmations is None
    third = await crawl(daemon, moving, c.id)
    assert (third.deleted, third.awaiting_confirmation) == (1, 0)
    assert await live(daemon, c.id) == moving.expected()


async def test_a_keyset_list_deletes_at_once_unless_it_says_it_shifts(
    any_daemon: Daemon, moving: MovingSource
) -> None:
    # The `cursor` style's default is 1; `shifts: true` on its pagination asks for 2.
    daemon = any_daemon
    source = {
        "type": "http",
        "url": f"{moving.url}/keyset",
        "records": "data",
        "id_field": "id",
        "params": {"per_page": moving.per_page},
        "pagination": {"type": "cursor", "cursor_param": "after", "next_cursor": "next_cursor"},
    }
    plain = await daemon.create_connector({"name": "keyset", "source": source})
    shifting = await daemon.create_connector(
        {
            "name": "said",
            "source": {**source, "pagination": {**source["pagination"], "shifts": True}},
        }
    )
    for c in (plain, shifting):
        await crawl(daemon, moving, c.id)
    moving.delete(7)
    first_plain = await crawl(daemon, moving, plain.id)
    first_shifting = await crawl(daemon, moving, shifting.id)

    assert (first_plain.deleted, first_plain.awaiting_confirmation) == (1, 0)
    assert (first_shifting.deleted, first_shifting.awaiting_confirmation) == (0, 1)
    assert await live(daemon, plain.id) == moving.expected()
    assert await missed(daemon, shifting.id) == {"7": 1}


# --- crawls that do not complete confirm nothing -------------------------------------------


@pytest.fixture
async def items() -> AsyncIterator[SourceServer]:
    """30 records in pages of 10, on a source that can fail or hold a page."""
    async with SourceServer(30, page_size=10) as server:
        yield server


async def test_a_failed_or_aborted_crawl_confirms_nothing(
    any_daemon: Daemon, items: SourceServer
) -> None:
    daemon = any_daemon
    body = {"name": "items", "source": http_source(items), "page_retries": 0}
    c = await daemon.create_connector({**body, "prune_confirmations": 2})
    await sync(daemon, c.id)
    items.set_records(20)
    gone = [r["id"] for r in make_records(10, start=20)]

    first = await sync(daemon, c.id)  # the first complete crawl to miss 21-30
    assert (first.deleted, first.awaiting_confirmation) == (0, 10)

    items.fail_next(500)
    failed = await sync(daemon, c.id)
    assert (failed.outcome, failed.deleted, failed.awaiting_confirmation) == (
        RunOutcome.FAILED,
        0,
        0,
    )
    await still_awaiting(daemon, c, gone)

    items.hang_on("page-1")
    await daemon.trigger_sync(c.id)
    await items.requested("page-1").wait()
    await daemon.abort_sync(c.id)
    await asyncio.wait_for(daemon.wait_run(c.id), RUN_END_TIMEOUT)
    items.release()
    runs, _ = await daemon.list_runs(c.id, limit=1)
    assert (runs[0].outcome, runs[0].deleted) == (RunOutcome.ABORTED, 0)
    await still_awaiting(daemon, c, gone)

    # The run that completes the crawl is the second complete crawl to miss them.
    completed = await sync(daemon, c.id)
    assert (completed.outcome, completed.deleted) == (RunOutcome.SUCCEEDED, 10)
    assert await missed(daemon, c.id) == {}
    assert await awaiting(daemon, c.id) == 0
    assert sorted(await live(daemon, c.id)) == sorted(r["id"] for r in make_records(20))


async def still_awaiting(daemon: Daemon, c: Connector, gone: list[str]) -> None:
    """Nothing deleted, and each of ``gone`` missed once, as after the first crawl."""
    assert await missed(daemon, c.id) == dict.fromkeys(gone, 1)
    assert await awaiting(daemon, c.id) == len(gone)
    assert len(await live(daemon, c.id)) == 30


async def test_the_guard_counts_what_is_about_to_be_deleted(
    any_daemon: Daemon, items: SourceServer
) -> None:
    # 20 of 30 missed once: more than half and more than ten, but none confirmed gone, so
    # nothing is held. The next crawl confirms them: now the guard holds them.
    daemon = any_daemon
    body = {"name": "items", "source": http_source(items), "page_retries": 0}
    c = await daemon.create_connector({**body, "prune_confirmations": 2})
    await sync(daemon, c.id)
    items.set_records(10)

    first = await sync(daemon, c.id)
    assert (first.deleted, first.deletions_held, first.awaiting_confirmation) == (0, 0, 20)

    second = await sync(daemon, c.id)
    assert (second.deleted, second.deletions_held, second.awaiting_confirmation) == (0, 20, 0)
    assert (await daemon.get_connector(c.id)).deletions_held == 20
    assert await daemon.apply_deletions(c.id) == 20
    assert sorted(await live(daemon, c.id)) == sorted(r["id"] for r in make_records(10))
