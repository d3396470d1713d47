"""Incremental crawls keep their marks apart (DESIGN.md §11): the ``since`` sent on a fresh
start comes only from completed crawls, a failed crawl's partial mark is never used to start
over, and a ``PATCH`` of the source discards the resume cursor and the in-progress mark."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.models import DocStatus, RunOutcome
from tests.integration.conftest import DaemonFactory
from tests.integration.loopback import LoopbackServer


class NewestFirst(LoopbackServer):
    """An incremental source: records ``{"id", "v"}`` newest first, filtered by ``since``
    (``v >= since``), pages of ``page_size`` addressed by an opaque cursor. It can fail one
    page, and expire every cursor it has handed out (then answered 400)."""

    path = "/items"

    def __init__(self, page_size: int = 10) -> None:
        self.records: list[dict[str, Any]] = []
        self.page_size = page_size
        self.fail_page: int | None = None
        self.generation = 0
        self.requests: list[dict[str, str]] = []

    def add(self, first: int, last: int) -> None:
        self.records.extend({"id": f"r{v}", "v": v} for v in range(first, last + 1))

    async def _items(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        self.requests.append(query)
        since = int(query["since"]) if "since" in query else None
        rows = sorted(
            (r for r in self.records if since is None or r["v"] >= since),
            key=lambda r: -r["v"],
        )
        cursor = query.get("cursor")
        page = 0
        if cursor is not None:
            generation, _, number = cursor.partition(":")
            if int(generation) != self.generation:
                return web.json_response({"error": "cursor expired"}, status=400)
            page = int(number)
        if page == self.fail_page:
            return web.json_response({"error": "boom"}, status=500)
        chunk = rows[page * self.page_size : (page + 1) * self.page_size]
        more = (page + 1) * self.page_size < len(rows)
        following = f"{self.generation}:{page + 1}" if more else None
        return web.json_response({"data": chunk, "next": following})

    def expire_cursors(self) -> None:
        self.generation += 1

    def routes(self, app: web.Application) -> None:
        app.router.add_get(self.path, self._items)


@pytest.fixture
async def newest_first() -> AsyncIterator[NewestFirst]:
    async with NewestFirst() as server:
        yield server


def incremental_source(server: NewestFirst, **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "url": server.url,
        "records": "data",
        "id_field": "id",
        "pagination": {"type": "cursor", "cursor_param": "cursor", "next_cursor": "next"},
        "incremental": {"field": "v", "param": "since"},
        **extra,
    }


async def _sync(daemon: Daemon, connector_id: str) -> None:
    await daemon.trigger_sync(connector_id)
    await daemon.wait_run(connector_id)


async def test_restart_after_rejected_cursor_uses_the_completed_mark(
    make_any_daemon: DaemonFactory, newest_first: NewestFirst
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    newest_first.add(1, 50)
    c = await daemon.create_connector(
        {"name": "inc", "source": incremental_source(newest_first), "page_retries": 0}
    )
    await _sync(daemon, c.id)  # completes: the completed mark is 50
    assert newest_first.requests[0].get("since") is None

    newest_first.add(51, 100)
    newest_first.fail_page = 2  # the third page of the second crawl fails
    newest_first.requests.clear()
    await _sync(daemon, c.id)
    failed = await daemon.get_connector(c.id)
    assert failed.last_error is not None and "500" in failed.last_error
    assert [r.get("since") for r in newest_first.requests] == ["50", "50", "50"]

    # Its cursor expired: the crawl starts over, from the completed crawl's mark (50), not
    # the failed crawl's partial one (100), which would skip records 51..80.
    newest_first.fail_page = None
    newest_first.expire_cursors()
    newest_first.requests.clear()
    await _sync(daemon, c.id)
    assert newest_first.requests[0] == {"since": "50", "cursor": "0:2"}
    assert newest_first.requests[1] == {"since": "50"}
    done = await daemon.get_connector(c.id)
    assert done.last_error is None and done.last_synced_at is not None
    counts = await daemon.document_counts(c.id)
    assert counts[DocStatus.INDEXED] == 100
    runs, _ = await daemon.list_runs(c.id, limit=1)
    assert runs[0].outcome is RunOutcome.SUCCEEDED
    assert runs[0].note is not None and "rejected" in runs[0].note

    # That crawl completed: the next one starts from its mark.
    newest_first.requests.clear()
    await _sync(daemon, c.id)
    assert newest_first.requests[0] == {"since": "100"}


async def test_patching_the_source_discards_the_resume_cursor_and_mark(
    make_any_daemon: DaemonFactory, newest_first: NewestFirst
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    newest_first.add(1, 30)
    source = incremental_source(newest_first)
    c = await daemon.create_connector({"name": "inc", "source": source, "page_retries": 0})
    await _sync(daemon, c.id)  # completed mark: 30
    newest_first.add(31, 60)
    newest_first.fail_page = 1
    await _sync(daemon, c.id)  # fails after one page: resume cursor "1", partial mark 60
    assert (await daemon.get_connector(c.id)).last_error is not None

    await daemon.update_connector(c.id, {"source": {**source, "params": {"limit": 10}}})
    newest_first.fail_page = None
    newest_first.requests.clear()
    await _sync(daemon, c.id)
    # No cursor of the old source is replayed, and the mark is the completed crawl's.
    assert newest_first.requests[0] == {"since": "30", "limit": "10"}
    runs, _ = await daemon.list_runs(c.id, limit=1)
    assert runs[0].outcome is RunOutcome.SUCCEEDED
    assert runs[0].note == "source changed"


async def test_a_patch_that_keeps_the_source_keeps_the_resume_cursor(
    daemon: Daemon, newest_first: NewestFirst
) -> None:
    newest_first.add(1, 30)
    source = incremental_source(newest_first)
    c = await daemon.create_connector({"name": "inc", "source": source, "page_retries": 0})
    newest_first.fail_page = 1
    await _sync(daemon, c.id)
    await daemon.update_connector(c.id, {"source": source, "throttle_seconds": 0.0})
    newest_first.fail_page = None
    newest_first.requests.clear()
    await _sync(daemon, c.id)
    assert newest_first.requests[0] == {"cursor": "0:1"}
    runs, _ = await daemon.list_runs(c.id, limit=1)
    assert runs[0].note is None
