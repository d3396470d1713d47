"""A real local HTTP source for tests: an ``aiohttp.web`` server on 127.0.0.1, port 0.

Usage::

    async with SourceServer(25, page_size=10) as server:
        source = {"type": "http", "url": server.items_url, "records": "data"}
        ...
        assert server.cursors == [None, "page-1", "page-2"]

Routes (records are served in order; ``limit`` defaults to ``page_size``):

- ``GET /items?cursor=&limit=&updated_since=`` — cursor style: ``{"data": [...],
  "next_cursor": "page-<n>" | null}``. Page *n* (0-based) has cursor :meth:`cursor_for` *n*
  (``None`` for the first page). ``updated_since`` keeps records with ``updated_at >=`` it.
- ``GET /offset?offset=&limit=`` — ``{"items": [...], "total": n}``.
- ``GET /pages?page=&per_page=`` (first page 1) — ``{"results": [...]}``, empty past the end.
- ``GET /next?page=&limit=`` — ``{"data": [...], "links": {"next": "/next?page=..." | null}}``
  (a relative URL).
- ``GET /link?page=&limit=`` — the bare record array, with an RFC 8288 ``Link`` header
  carrying ``rel="next"`` (absent on the last page) and ``rel="first"``.
- ``GET /loop?cursor=`` — cursor style that loops: none → ``a`` → ``b`` → ``a``.

Scripting: :meth:`fail_next` answers the next requests (any route) with an error status;
:meth:`hang_on` holds ``/items`` requests for a cursor until :meth:`release`;
:meth:`requested` gives an :class:`asyncio.Event` set when ``/items`` is asked for a cursor;
:meth:`set_records` changes the content. Every request is kept in :attr:`requests`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from aiohttp import web

__all__ = ["RecordedRequest", "SourceServer", "make_records"]

_BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)


def make_records(count: int, *, start: int = 0, prefix: str = "item") -> list[dict[str, Any]]:
    """``count`` records ``{"id", "title", "updated_at"}``; ``updated_at`` grows by one
    minute per record (ISO-8601, ``Z``), so string order is time order."""
    return [
        {
            "id": f"{prefix}-{i:05d}",
            "title": f"Item {i}",
            "updated_at": (_BASE_TIME + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        for i in range(start, start + count)
    ]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)

    @property
    def cursor(self) -> str | None:
        """The ``cursor`` query parameter (``None`` when absent or empty)."""
        return self.query.get("cursor") or None


@dataclass
class _Failure:
    status: int
    remaining: int
    retry_after: str | None


class SourceServer:
    """A scriptable fake source served by a real ``aiohttp.web`` server (see module doc)."""

    def __init__(
        self, records: int | Sequence[Mapping[str, Any]] = 0, *, page_size: int = 10
    ) -> None:
        self.page_size = page_size
        self.requests: list[RecordedRequest] = []
        self._records: list[Mapping[str, Any]] = []
        self.set_records(records)
        self._failures: list[_Failure] = []
        self._hung: set[str | None] = set()
        self._release = asyncio.Event()
        self._requested: dict[str | None, asyncio.Event] = {}
        self._runner: web.AppRunner | None = None
        self._port = 0

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Start serving on 127.0.0.1 on a free port."""
        app = web.Application()
        app.router.add_get("/items", self._items)
        app.router.add_get("/offset", self._offset)
        app.router.add_get("/pages", self._pages)
        app.router.add_get("/next", self._next)
        app.router.add_get("/link", self._link)
        app.router.add_get("/loop", self._loop)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Release hung requests and stop the server."""
        self.release()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SourceServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- addresses --------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def items_url(self) -> str:
        """URL of the cursor-paginated ``/items`` route."""
        return f"{self.url}/items"

    @staticmethod
    def cursor_for(page: int) -> str | None:
        """The cursor of ``/items`` page ``page`` (0-based; ``None`` for the first)."""
        return None if page == 0 else f"page-{page}"

    # --- observation ------------------------------------------------------------------

    @property
    def cursors(self) -> list[str | None]:
        """Cursors of the ``/items`` requests received, in order (``None``: first page)."""
        return [r.cursor for r in self.requests if r.path == "/items"]

    def requested(self, cursor: str | None) -> asyncio.Event:
        """An event set once ``/items`` has been asked for ``cursor`` (already set if it
        was)."""
        event = self._requested.get(cursor)
        if event is None:
            event = self._requested[cursor] = asyncio.Event()
            if cursor in self.cursors:
                event.set()
        return event

    # --- scripting --------------------------------------------------------------------

    @property
    def records(self) -> list[Mapping[str, Any]]:
        """The records served (a copy)."""
        return list(self._records)

    def set_records(self, records: int | Sequence[Mapping[str, Any]]) -> None:
        """Serve ``records`` from now on (an int generates that many with
        :func:`make_records`)."""
        generated: Sequence[Mapping[str, Any]] = (
            make_records(records) if isinstance(records, int) else records
        )
        self._records = list(generated)

    def fail_next(
        self, status: int, times: int = 1, *, retry_after: str | float | None = None
    ) -> None:
        """Answer the next ``times`` requests (after those already scripted) with ``status``
        and ``{"detail": "scripted failure"}``, plus ``Retry-After`` when given."""
        value = None if retry_after is None else str(retry_after)
        self._failures.append(_Failure(status, times, value))

    def hang_on(self, cursor: str | None) -> None:
        """Hold ``/items`` requests for ``cursor`` (``None``: the first page) unanswered until
        :meth:`release`."""
        if self._release.is_set():
            self._release = asyncio.Event()
        self._hung.add(cursor)

    def release(self) -> None:
        """Let every held request be answered normally, and stop holding."""
        self._hung.clear()
        self._release.set()

    # --- handlers ---------------------------------------------------------------------

    def _record(self, request: web.Request) -> RecordedRequest:
        recorded = RecordedRequest(
            request.method, request.path, dict(request.query), dict(request.headers)
        )
        self.requests.append(recorded)
        return recorded

    def _scripted_failure(self) -> web.Response | None:
        while self._failures and self._failures[0].remaining <= 0:
            self._failures.pop(0)
        if not self._failures:
            return None
        failure = self._failures[0]
        failure.remaining -= 1
        headers = {"Retry-After": failure.retry_after} if failure.retry_after else None
        return web.json_response(
            {"detail": "scripted failure"}, status=failure.status, headers=headers
        )

    def _limit(self, request: web.Request, name: str = "limit") -> int:
        return int(request.query.get(name, self.page_size))

    async def _items(self, request: web.Request) -> web.StreamResponse:
        recorded = self._record(request)
        cursor = recorded.cursor
        event = self._requested.get(cursor)
        if event is not None:
            event.set()
        if cursor in self._hung:
            await self._release.wait()
        if (failure := self._scripted_failure()) is not None:
            return failure
        limit = self._limit(request)
        page = 0 if cursor is None else int(cursor.removeprefix("page-"))
        records = self._records
        since = request.query.get("updated_since")
        if since:
            records = [r for r in records if str(r.get("updated_at", "")) >= since]
        chunk = records[page * limit : (page + 1) * limit]
        more = (page + 1) * limit < len(records)
        return web.json_response(
            {"data": chunk, "next_cursor": self.cursor_for(page + 1) if more else None}
        )

    async def _offset(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        if (failure := self._scripted_failure()) is not None:
            return failure
        offset, limit = int(request.query.get("offset", 0)), self._limit(request)
        chunk = self._records[offset : offset + limit]
        return web.json_response({"items": chunk, "total": len(self._records)})

    async def _pages(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        if (failure := self._scripted_failure()) is not None:
            return failure
        page, limit = int(request.query.get("page", 1)), self._limit(request, "per_page")
        chunk = self._records[(page - 1) * limit : page * limit]
        return web.json_response({"results": chunk})

    async def _next(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        if (failure := self._scripted_failure()) is not None:
            return failure
        page, limit = int(request.query.get("page", 0)), self._limit(request)
        chunk = self._records[page * limit : (page + 1) * limit]
        more = (page + 1) * limit < len(self._records)
        following = f"/next?page={page + 1}&limit={limit}" if more else None
        return web.json_response({"data": chunk, "links": {"next": following}})

    async def _link(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        if (failure := self._scripted_failure()) is not None:
            return failure
        page, limit = int(request.query.get("page", 0)), self._limit(request)
        chunk = self._records[page * limit : (page + 1) * limit]
        links = [f'<{self.url}/link?page=0&limit={limit}>; rel="first"']
        if (page + 1) * limit < len(self._records):
            links.insert(0, f'<{self.url}/link?page={page + 1}&limit={limit}>; rel="next"')
        return web.json_response(chunk, headers={"Link": ", ".join(links)})

    async def _loop(self, request: web.Request) -> web.StreamResponse:
        recorded = self._record(request)
        following = {None: "a", "a": "b", "b": "a"}[recorded.cursor]
        return web.json_response({"data": [], "next_cursor": following})
