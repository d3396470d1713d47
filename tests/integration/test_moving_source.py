"""A source that changes while a crawl reads it (DESIGN.md §12; docs/syncs.md, "When the
source changes during a crawl"), on both backend pairs.

For each pagination style of the ``http`` source — a keyset cursor, ``next_url``,
``link_header``, ``offset`` (by id with a total, and Jira's ``ORDER BY updated ASC`` with a
short last page) and ``page`` (WordPress) — a record is inserted, updated or deleted on a page
the crawl already read and on a page still ahead, between two pages of run 2
(:class:`~tests.integration.movingsource.MovingSource`'s ``after_page``). After run 2 no record
that is live at the source is missing or deleted, and what changed ahead is synced; after
run 3 the connector's documents are the source's, payloads and the set of live documents.
Full crawls and incremental ones (``incremental: {field: updated_at, param: since}``) alike;
deletions only for full crawls (an incremental source deletes through tombstones).

The issue's two cases, exactly: a keyset crawl whose run 2 sees record 5 (read) and then
record 25 (ahead) edited syncs both by run 3 (the mark never passes the crawl's start); a
WordPress crawl whose record 3 is removed after page 1 does not delete record 11, which slid
onto page 1 (the crawl reads page 1 again when the total falls). Neither depends on
``prune_confirmations``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from syncd.daemon import Daemon
from syncd.models import DocStatus, Run, RunOutcome
from tests.integration.movingsource import MovingSource

RUN_TIMEOUT = 15.0

# The records live at the start: ids 1..32 less 6 and 26, which the inserts bring back (6 on
# page 1, 26 on page 3), ten a page.
COUNT = 32
HOLES = (6, 26)


def source_for(server: MovingSource, style: str, **extra: Any) -> dict[str, Any]:
    """A connector ``source`` for one of the server's routes, as its contract reads."""
    url = server.url
    configs: dict[str, dict[str, Any]] = {
        "keyset": {
            "url": f"{url}/keyset",
            "records": "data",
            "pagination": {"type": "cursor", "cursor_param": "after", "next_cursor": "next_cursor"},
        },
        "next": {
            "url": f"{url}/next",
            "records": "data",
            "pagination": {"type": "next_url", "next_url": "links.next"},
        },
        "link": {"url": f"{url}/link", "pagination": {"type": "link_header"}},
        # Jira's search: startAt/maxResults and a total.
        "offset": {
            "url": f"{url}/offset",
            "records": "items",
            "pagination": {"type": "offset", "limit": 10, "total": "total"},
        },
        # ORDER BY updated ASC: an edited record moves to the end; no total, a short page ends.
        "offset_updated": {
            "url": f"{url}/offset",
            "params": {"order": "updated"},
            "records": "items",
            "pagination": {"type": "offset", "limit": 10},
        },
        # WordPress: page numbers, X-WP-Total and X-WP-TotalPages, 400 past the last page.
        "pages": {
            "url": f"{url}/pages",
            "pagination": {
                "type": "page",
                "size": 10,
                "size_param": "per_page",
                "total_header": "X-WP-Total",
                "total_pages_header": "X-WP-TotalPages",
                "end_status": [400],
            },
        },
    }
    return {"type": "http", "id_field": "id", **configs[style], **extra}


ROUTE = {"offset_updated": "offset"}
STYLES = ("keyset", "next", "link", "offset", "offset_updated", "pages")
INCREMENTAL = {"field": "updated_at", "param": "since"}

Change = Callable[[MovingSource], None]
CHANGES: dict[str, Change] = {
    "insert_read": lambda s: s.insert(6),
    "insert_ahead": lambda s: s.insert(26),
    "update_read": lambda s: s.edit(5),
    "update_ahead": lambda s: s.edit(25),
    "delete_read": lambda s: s.delete(3),
    "delete_ahead": lambda s: s.delete(24),
}
#: The record each change is about.
SUBJECT = {
    "insert_read": 6,
    "insert_ahead": 26,
    "update_read": 5,
    "update_ahead": 25,
    "delete_read": 3,
    "delete_ahead": 24,
}


@pytest.fixture
async def server() -> AsyncIterator[MovingSource]:
    async with MovingSource(COUNT, per_page=10) as moving:
        for hole in HOLES:
            moving.delete(hole)
        yield moving


async def sync(daemon: Daemon, connector_id: str) -> Run:
    run_id = await daemon.trigger_sync(connector_id)
    assert run_id is not None
    await asyncio.wait_for(daemon.wait_run(connector_id), RUN_TIMEOUT)
    runs, _ = await daemon.list_runs(connector_id, limit=1)
    assert runs[0].id == run_id
    assert (runs[0].outcome, runs[0].error) == (RunOutcome.SUCCEEDED, None)
    return runs[0]


async def documents(daemon: Daemon, connector_id: str) -> dict[str, Any]:
    """The connector's live documents: external id → stored payload."""
    docs, cursor = await daemon.list_documents(connector_id, limit=1000)
    assert cursor is None
    live = [d.external_id for d in docs if d.status is not DocStatus.DELETED]
    return {e: (await daemon.get_document(connector_id, e)).payload for e in live}


async def start(daemon: Daemon, server: MovingSource, style: str, **extra: Any) -> str:
    """A connector over ``style`` whose first crawl read everything."""
    body = {"name": f"moving-{style}", "source": source_for(server, style, **extra)}
    # One crawl's word deletes (prune_confirmations 1): what these tests show is that the crawl
    # itself misses nothing, whatever the confirmations a shifting style defaults to.
    c = await daemon.create_connector({**body, "page_retries": 0, "prune_confirmations": 1})
    await sync(daemon, c.id)
    assert await documents(daemon, c.id) == server.expected()
    return c.id


def assert_nothing_live_lost(
    found: dict[str, Any], expected: dict[str, Any], change: str | None = None
) -> None:
    """Every record live at the source is a live document (whatever its version) — but one
    inserted on a page the crawl had read, which the next crawl brings."""
    missing = set(expected) - set(found)
    if change == "insert_read":
        missing.discard(str(SUBJECT[change]))
    assert sorted(missing, key=int) == []


# --- every style, every change -------------------------------------------------------------


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("style", STYLES)
async def test_a_full_crawl_follows_a_change_between_its_pages(
    any_daemon: Daemon, server: MovingSource, style: str, change: str
) -> None:
    cid = await start(any_daemon, server, style)
    server.reset_pages()
    server.after_page(ROUTE.get(style, style), 1, lambda: CHANGES[change](server))

    await sync(any_daemon, cid)

    after_two = await documents(any_daemon, cid)
    expected = server.expected()
    # A live record is never deleted: for offset and page, the one that slid over the
    # boundary when record 3 went is read again, not skipped and pruned.
    assert_nothing_live_lost(after_two, expected, change)
    subject = str(SUBJECT[change])
    if change.endswith("_ahead") and change != "delete_ahead":
        assert after_two[subject] == expected[subject]  # a page ahead: this crawl saw it
    if style == "offset_updated" and change == "update_read":
        # The edit moved the record to the end of the list: read again there, at once.
        assert after_two[subject] == expected[subject]

    await sync(any_daemon, cid)

    assert await documents(any_daemon, cid) == server.expected()


@pytest.mark.parametrize("change", ["insert_read", "insert_ahead", "update_read", "update_ahead"])
@pytest.mark.parametrize("style", STYLES)
async def test_an_incremental_crawl_follows_a_change_between_its_pages(
    any_daemon: Daemon, server: MovingSource, style: str, change: str
) -> None:
    cid = await start(any_daemon, server, style, incremental=INCREMENTAL)
    # Every record changes after the first crawl: run 2 has three pages to read.
    for record_id in sorted(server.records):
        server.edit(record_id)
    server.reset_pages()
    route = ROUTE.get(style, style)
    server.after_page(route, 1, lambda: CHANGES[change](server))
    # Then a later edit on the last page: the largest time run 2 sees is after the change.
    server.after_page(route, 2, lambda: server.edit(30))

    await sync(any_daemon, cid)

    after_two = await documents(any_daemon, cid)
    expected = server.expected()
    assert_nothing_live_lost(after_two, expected, change)
    subject = str(SUBJECT[change])
    if change.endswith("_ahead"):
        assert after_two[subject] == expected[subject]
    assert after_two["30"] == expected["30"]

    third = await sync(any_daemon, cid)

    assert await documents(any_daemon, cid) == server.expected()
    # Run 3 asked only for what changed since run 2 started: the change and record 30.
    assert third.documents_seen == 2


# --- the two cases ----------------------------------------------------------------


async def test_an_edit_on_a_page_read_is_not_lost_behind_a_later_one(
    any_daemon: Daemon,
) -> None:
    async with MovingSource(30, per_page=10) as server:
        cid = await start(any_daemon, server, "keyset", incremental=INCREMENTAL)
        for record_id in sorted(server.records):
            server.edit(record_id)
        server.reset_pages()
        # While run 2 reads: record 5 (page 1, read) is edited, then record 25 (page 3, ahead).
        server.after_page("keyset", 1, lambda: server.edit(5))
        server.after_page("keyset", 2, lambda: server.edit(25))

        second = await sync(any_daemon, cid)

        assert second.documents_seen == 30
        assert (await documents(any_daemon, cid))["5"]["version"] == 2  # read before the edit
        state = (await any_daemon.get_connector(cid)).source_state["completed"]
        # Not record 25's time, the largest seen: run 2's start, before record 5's edit.
        assert server.records[5]["updated_at"] > state["high_water"]
        assert state["high_water"] < server.records[25]["updated_at"]
        assert state["high_water"] == state["started"]  # both written as the records are

        third = await sync(any_daemon, cid)

        docs = await documents(any_daemon, cid)
        assert (docs["5"]["version"], docs["25"]["version"]) == (3, 3)
        assert docs == server.expected()
        assert third.documents_seen == 2
        assert server.requests[-1] == ("keyset", {"since": state["high_water"]})


async def test_a_record_that_slides_onto_a_page_read_is_not_deleted(
    any_daemon: Daemon,
) -> None:
    async with MovingSource(25, per_page=10) as server:
        cid = await start(any_daemon, server, "pages")
        server.reset_pages()
        # Record 3 goes just after page 1 was read: record 11 slides onto page 1.
        server.after_page("pages", 1, lambda: server.delete(3))
        server.requests.clear()

        second = await sync(any_daemon, cid)

        docs = await documents(any_daemon, cid)
        assert docs["11"] == server.records[11]
        assert_nothing_live_lost(docs, server.expected())
        # Page 2 answered a total of 24 instead of 25: page 1 was read again, then 2 and 3.
        pages = [q["page"] for route, q in server.requests if route == "pages"]
        assert pages == ["1", "2", "1", "2", "3"]
        assert second.documents_seen == 10 + 10 + 10 + 10 + 4

        await sync(any_daemon, cid)

        assert await documents(any_daemon, cid) == server.expected()


async def test_an_offset_crawl_reads_again_what_moved_back_past_its_overlap(
    any_daemon: Daemon,
) -> None:
    async with MovingSource(40, per_page=10) as server:
        cid = await start(any_daemon, server, "offset")
        server.reset_pages()
        # Five records of page 1 go: more than the overlap (3) of the next request.
        server.after_page("offset", 1, lambda: [server.delete(i) for i in range(2, 7)])
        server.requests.clear()

        await sync(any_daemon, cid)

        docs = await documents(any_daemon, cid)
        assert_nothing_live_lost(docs, server.expected())
        offsets = [q["offset"] for route, q in server.requests if route == "offset"]
        # 7 (3 early): none of 8, 9, 10 there (they moved back by 5); back to 0, then on.
        assert offsets[:3] == ["0", "7", "0"]
        assert offsets[3:] == ["7", "14", "21", "28"]  # 28: 35 of 35 records (total)

        await sync(any_daemon, cid)  # records 2-6 were seen on page 1: the next crawl prunes

        assert await documents(any_daemon, cid) == server.expected()
