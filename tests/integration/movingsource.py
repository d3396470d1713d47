"""A source that changes while it is read: list routes over one live set of records, and hooks
the test runs between pages (DESIGN.md §12).

Each route follows the shape of a documented public list contract:

- ``GET /keyset?since=&until=&after=&per_page=`` — ids ascending, filtered by ``updated_at >
  since`` (and ``updated_at < until``), the next page asked for with the last id read
  (``{"data": [...], "next_cursor": "<id>" | null, "has_more": bool}``). The shape of keyset
  lists such as Zendesk's cursor-based incremental exports
  (https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/)
  and GitHub's ``since``-filtered lists (``until`` as in GitHub's list of commits,
  https://docs.github.com/en/rest/commits/commits#list-commits): a deletion or an edit never
  shifts what is ahead. ``has_more`` is Stripe's end signal for the same shape, where the last
  id read is sent back as ``starting_after`` (https://docs.stripe.com/api/pagination).
- ``GET /next?since=&after=&per_page=`` — the same list, the next page as a relative URL in
  ``links.next`` (``null`` at the end).
- ``GET /link?since=&after=&per_page=`` — the same list as a bare array, the next page in an
  RFC 8288 ``Link: <…>; rel="next"`` header.
- ``GET /offset?offset=&limit=&since=&order=`` — ``{"items": [...], "total": n}`` over the
  live list, by id, or by ``updated_at`` then id with ``order=updated`` (Jira's ``ORDER BY
  updated ASC``: an edited record moves to the end). A deletion shifts the records after it
  back by one.
- ``GET /pages?page=&per_page=&since=`` — the WordPress REST API's page numbers
  (https://developer.wordpress.org/rest-api/using-the-rest-api/pagination/): the bare array
  of posts, ``X-WP-Total`` and ``X-WP-TotalPages`` headers, and a 400
  ``rest_post_invalid_page_number`` for a page past the last.

Records are ``{"id": n, "title", "version", "updated_at"}``; ``updated_at`` is ISO 8601 UTC
with microseconds (``Z``), set from the wall clock when a record is created or edited, so it
compares with the time a crawl starts. :meth:`after_page` runs a change once ``n`` pages of a
route have been served (counted since :meth:`reset_pages`), before the next request is read.
:meth:`fail` makes a route answer 500 (an outage of the source) until :meth:`recover`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tests.integration.loopback import LoopbackServer

__all__ = ["MovingSource", "now_text"]

ROUTES = ("keyset", "next", "link", "offset", "pages")


def now_text() -> str:
    """The wall clock as the source writes ``updated_at``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class MovingSource(LoopbackServer):
    """The live records and the routes over them."""

    def __init__(self, count: int, *, per_page: int = 10) -> None:
        self.per_page = per_page
        stamp = now_text()
        self.records: dict[int, dict[str, Any]] = {
            i: {"id": i, "title": f"Record {i}", "version": 1, "updated_at": stamp}
            for i in range(1, count + 1)
        }
        self.served: dict[str, int] = dict.fromkeys(ROUTES, 0)
        self._hooks: list[tuple[str, int, Callable[[], None]]] = []
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.failing: set[str] = set()

    # --- changes ---------------------------------------------------------------------

    def edit(self, record_id: int) -> None:
        """A new version of a record, updated now."""
        record = self.records[record_id]
        record.update(version=record["version"] + 1, updated_at=now_text())

    def delete(self, record_id: int) -> None:
        """The record is gone."""
        del self.records[record_id]

    def insert(self, record_id: int) -> None:
        """A new record, updated now."""
        self.records[record_id] = {
            "id": record_id,
            "title": f"Record {record_id}",
            "version": 1,
            "updated_at": now_text(),
        }

    def after_page(self, route: str, pages: int, change: Callable[[], None]) -> None:
        """Run ``change`` once ``pages`` pages of ``route`` have been served."""
        assert route in ROUTES, route
        self._hooks.append((route, pages, change))

    def fail(self, route: str) -> None:
        """Answer every request of ``route`` with a 500 until :meth:`recover`."""
        assert route in ROUTES, route
        self.failing.add(route)

    def recover(self, route: str) -> None:
        """Serve ``route`` again."""
        self.failing.discard(route)

    def reset_pages(self) -> None:
        """Count served pages from zero again (a new crawl)."""
        self.served = dict.fromkeys(ROUTES, 0)

    def expected(self) -> dict[str, dict[str, Any]]:
        """What an index that mirrors the source holds: external id → record."""
        return {str(i): dict(r) for i, r in self.records.items()}

    # --- serving ---------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/keyset", self._keyset)
        app.router.add_get("/next", self._keyset)
        app.router.add_get("/link", self._keyset)
        app.router.add_get("/offset", self._offset)
        app.router.add_get("/pages", self._pages)

    def _served(self, route: str, response: web.Response) -> web.Response:
        self.served[route] += 1
        due = [h for h in self._hooks if h[0] == route and h[1] == self.served[route]]
        for hook in due:
            self._hooks.remove(hook)
            hook[2]()
        return response

    def _live(self, request: web.Request, *, order: str = "id") -> list[dict[str, Any]]:
        since, until = request.query.get("since"), request.query.get("until")
        rows = [
            dict(r)
            for r in self.records.values()
            if (since is None or r["updated_at"] > since)
            and (until is None or r["updated_at"] < until)
        ]
        if order == "updated":
            return sorted(rows, key=lambda r: (r["updated_at"], r["id"]))
        return sorted(rows, key=lambda r: r["id"])

    async def _keyset(self, request: web.Request) -> web.Response:
        route = request.path.strip("/")
        self.requests.append((route, dict(request.query)))
        if route in self.failing:
            return web.json_response({"error": "unavailable"}, status=500)
        per_page = int(request.query.get("per_page", self.per_page))
        after = int(request.query.get("after", "0"))
        rows = [r for r in self._live(request) if r["id"] > after][:per_page]
        last = str(rows[-1]["id"]) if len(rows) == per_page else None
        if route == "keyset":
            body = {"data": rows, "next_cursor": last, "has_more": last is not None}
            return self._served(route, web.json_response(body))
        query = {k: v for k, v in request.query.items() if k != "after"}
        follow = None
        if last is not None:
            rest = "&".join(f"{k}={v}" for k, v in {**query, "after": last}.items())
            follow = f"/{route}?{rest}"
        if route == "next":
            body = {"data": rows, "links": {"next": follow}}
            return self._served(route, web.json_response(body))
        headers = {"Link": f'<{follow}>; rel="next"'} if follow else {}
        return self._served(route, web.json_response(rows, headers=headers))

    async def _offset(self, request: web.Request) -> web.Response:
        self.requests.append(("offset", dict(request.query)))
        if "offset" in self.failing:
            return web.json_response({"error": "unavailable"}, status=500)
        rows = self._live(request, order=request.query.get("order", "id"))
        offset = int(request.query.get("offset", "0"))
        limit = int(request.query.get("limit", self.per_page))
        body = {"items": rows[offset : offset + limit], "total": len(rows)}
        return self._served("offset", web.json_response(body))

    async def _pages(self, request: web.Request) -> web.Response:
        self.requests.append(("pages", dict(request.query)))
        if "pages" in self.failing:
            return web.json_response({"error": "unavailable"}, status=500)
        rows = self._live(request)
        page = int(request.query.get("page", "1"))
        per_page = int(request.query.get("per_page", self.per_page))
        pages = -(-len(rows) // per_page)
        headers = {"X-WP-Total": str(len(rows)), "X-WP-TotalPages": str(pages)}
        if page > max(pages, 1):
            error = {
                "code": "rest_post_invalid_page_number",
                "message": "The page number requested is larger than the number of pages "
                "available.",
                "data": {"status": 400},
            }
            return self._served(
                "pages",
                web.Response(status=400, text=json.dumps(error), content_type="application/json"),
            )
        chunk = rows[(page - 1) * per_page : page * per_page]
        return self._served("pages", web.json_response(chunk, headers=headers))
