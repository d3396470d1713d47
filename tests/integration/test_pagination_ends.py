"""Cursor crawls in a real daemon against a local server: a token carried in headers resumes
a failed page from the checkpoint on both backend pairs (and the resumed run records how the
crawl ended, without a warning about the header its last page lacks), and a cursor path the
records lack fails the run instead of ending the crawl after its first page (nothing is
deleted)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from syncd.daemon import Daemon
from syncd.models import RunOutcome
from tests.integration.conftest import DaemonFactory
from tests.integration.loopback import LoopbackServer
from tests.integration.realapis.recipes import doc_ids, sync
from tests.integration.sourceserver import make_records

SUCCEEDED, FAILED = RunOutcome.SUCCEEDED, RunOutcome.FAILED
PAGE = 10


class CursorServer(LoopbackServer):
    """25 records in pages of 10, two ways:

    - ``GET /headers``: the token is asked for in the ``X-Cursor`` request header and
      answered in the ``X-Next-Cursor`` response header (absent on the last page);
    - ``GET /after?after=<id>``: the records after the one with that id (Stripe's
      ``starting_after``), an empty page past the end; no end signal.

    :meth:`fail` answers the request for one cursor with a status, once. Every request's
    cursor is kept in :attr:`cursors`.
    """

    def __init__(self) -> None:
        self.records = make_records(25)
        self.cursors: list[str | None] = []
        self._failing: dict[str, int] = {}

    def fail(self, cursor: str, status: int) -> None:
        """Answer the next request for ``cursor`` with ``status``."""
        self._failing[cursor] = status

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/headers", self._headers)
        app.router.add_get("/after", self._after)

    def _asked(self, cursor: str | None) -> web.Response | None:
        self.cursors.append(cursor)
        status = self._failing.pop(cursor, None) if cursor is not None else None
        return web.json_response({"error": "unavailable"}, status=status) if status else None

    async def _headers(self, request: web.Request) -> web.Response:
        cursor = request.headers.get("X-Cursor")
        if (failed := self._asked(cursor)) is not None:
            return failed
        start = int(cursor.removeprefix("t-")) if cursor else 0
        headers = {"X-Next-Cursor": f"t-{start + PAGE}"} if start + PAGE < len(self.records) else {}
        return web.json_response({"data": self.records[start : start + PAGE]}, headers=headers)

    async def _after(self, request: web.Request) -> web.Response:
        after = request.query.get("after")
        if (failed := self._asked(after)) is not None:
            return failed
        ids = [r["id"] for r in self.records]
        start = ids.index(after) + 1 if after else 0
        return web.json_response({"data": self.records[start : start + PAGE]})


@pytest.fixture
async def server() -> AsyncIterator[CursorServer]:
    async with CursorServer() as s:
        yield s


def connector(url: str, pagination: dict[str, Any]) -> dict[str, Any]:
    """A connector without page or run retries: one failure fails the run, once."""
    return {
        "name": "cursors",
        "page_retries": 0,
        "retry_attempts": 0,
        "source": {"type": "http", "url": url, "records": "data", "pagination": pagination},
    }


async def test_a_header_cursor_resumes_the_failed_page(
    make_any_daemon: DaemonFactory, server: CursorServer
) -> None:
    daemon = make_any_daemon()
    await daemon.start()
    pagination = {
        "in": "header",
        "cursor_param": "X-Cursor",
        "next_from": "header",
        "next_cursor": "X-Next-Cursor",
    }
    server.fail("t-20", 500)  # the third page
    c = await daemon.create_connector(connector(f"{server.url}/headers", pagination))
    failed = await sync(daemon, c.id)
    assert (failed.outcome, failed.pages) == (FAILED, 2)
    assert failed.error is not None and "500" in failed.error
    assert (failed.end_reason, failed.warnings) == (None, ())
    resumed = await sync(daemon, c.id)
    assert (resumed.outcome, resumed.error, resumed.pages) == (SUCCEEDED, None, 1)
    # The API leaves the header out of its last page, the only page this run read: the
    # crawl's earlier pages had it (the resume cursor came from there), so no warning.
    assert (resumed.end_reason, resumed.warnings) == ("no next cursor at header X-Next-Cursor", ())
    # The resumed run asks again for the page that failed, with the token it failed with.
    assert server.cursors == [None, "t-10", "t-20", "t-20"]
    assert await doc_ids(daemon, c.id) == sorted(r["id"] for r in server.records)


async def test_a_cursor_path_the_last_record_lacks_fails_the_run_and_deletes_nothing(
    daemon: Daemon, server: CursorServer
) -> None:
    pagination = {"cursor_param": "after", "next_from": "last_record", "next_cursor": "id"}
    c = await daemon.create_connector(connector(f"{server.url}/after", pagination))
    complete = await sync(daemon, c.id)
    # The crawl ends on the empty page after the last record, the only end it has.
    assert (complete.outcome, complete.pages, complete.end_reason) == (SUCCEEDED, 4, "empty page")
    everything = sorted(r["id"] for r in server.records)
    assert await doc_ids(daemon, c.id) == everything
    # A mistyped path: the first page cannot say where the next one starts.
    typo = {**pagination, "next_cursor": "idd"}
    await daemon.update_connector(
        c.id, {"source": connector(f"{server.url}/after", typo)["source"]}
    )
    preview = await daemon.preview({"connector_id": c.id})
    assert preview.error is not None and "next cursor 'idd' not in the last record" in preview.error
    server.cursors.clear()
    broken = await sync(daemon, c.id)
    assert broken.outcome is FAILED and broken.error is not None
    assert "next cursor 'idd' not in the last record" in broken.error
    assert (broken.pages, broken.deleted, broken.deletions_held) == (0, 0, 0)
    assert server.cursors == [None]
    # The crawl did not complete, so nothing it did not see is deleted.
    assert await doc_ids(daemon, c.id) == everything
