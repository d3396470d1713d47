"""A local Zendesk Support API serving the cursor-based incremental ticket export.

Written from Zendesk's public documentation, not from what syncd does:

- https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/
  — ``GET /api/v2/incremental/tickets/cursor.json?start_time=<unix>``, then ``?cursor=``;
  the cursor-based JSON format (``after_url``, ``after_cursor``, ``before_url``,
  ``before_cursor``) and ``end_of_stream`` ("true if the current request has returned all
  the results up to the current time"); "up to 10 requests per minute", answered with 429 and
  ``Retry-After``.
- https://developer.zendesk.com/documentation/ticketing/managing-tickets/using-the-incremental-export-api/
  — the workflow: a start time once, then "each page of results includes a cursor pointer to
  use as the starting point for the next page or the next export"; items "created or changed
  on or after the start time"; ``exclude_deleted``; ``per_page`` (up to 1000, the default).
- https://support.zendesk.com/hc/en-us/articles/4408831452954 — ``Authorization: Basic
  base64("{email}/token:{api_token}")`` or ``Authorization: Bearer <oauth token>``.

Usage::

    async with ZendeskServer(records=237, page_size=100) as api:
        # GET f"{api.url}/api/v2/incremental/tickets/cursor.json?start_time=0"
        ...
        api.touch([5, 9])  # tickets 5 and 9 change: the saved after_cursor returns them

Behaviour:

- Tickets come in ``(generated_timestamp, id)`` order; the cursor encodes that position (as
  Zendesk's do: base64 of ``"<timestamp>.0||<id>|"``), so a ticket that changes after an
  export sorts after the cursor that export ended with and is returned by the next one.
- The last page has ``end_of_stream: true`` and still carries ``after_url`` and
  ``after_cursor``: they are where the next export starts. Following them returns no tickets
  (again ``end_of_stream: true``, the same cursor) until something changes.
- ``after_url`` keeps ``per_page`` and ``exclude_deleted`` when the request had them.
  ``before_url``/``before_cursor`` are ``null``: backward paging is not modelled.
- ``per_page`` above 1000 is clamped to 1000; ``page_size`` is the default when the request
  names none (1000, the documented default; tests pass a smaller one).
- A bad credential answers ``401 {"error": "Couldn't authenticate you"}``. A cursor that is
  not one of ours answers ``400 {"error": "InvalidPaginationParameter", ...}`` (the error
  name clients report; the reference page gives no body). With ``rate_limit`` set, the
  requests past it within ``rate_window`` seconds answer ``429`` with ``Retry-After``.
- Deleted tickets (:meth:`delete`) stay in the export with ``status: "deleted"`` unless
  ``exclude_deleted=true``.

Not modelled: the exclusion of items changed in the minute before the request, sideloads
(``include=``), the time-based export (``/incremental/tickets.json``).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from tests.integration.loopback import LoopbackServer

__all__ = ["EXPORT_PATH", "RecordedRequest", "ZendeskServer", "make_tickets"]

EXPORT_PATH = "/api/v2/incremental/tickets/cursor.json"
MAX_PER_PAGE = 1000
_BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
_STATUSES = ("new", "open", "pending", "hold", "solved", "closed")
_PRIORITIES = ("low", "normal", "high", "urgent")


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def make_tickets(count: int, *, start: int = 0, subdomain: str = "example") -> list[dict[str, Any]]:
    """``count`` tickets with ids ``start + 1`` on, one minute apart; ``generated_timestamp``
    is ``updated_at`` in Unix seconds."""
    tickets = []
    for i in range(start, start + count):
        ident = i + 1
        moment = _BASE_TIME + timedelta(minutes=i)
        tickets.append(
            {
                "id": ident,
                "url": f"https://{subdomain}.zendesk.com/api/v2/tickets/{ident}.json",
                "subject": f"Ticket {ident}",
                "description": f"Description of ticket {ident}.",
                "status": _STATUSES[i % len(_STATUSES)],
                "priority": _PRIORITIES[i % len(_PRIORITIES)],
                "requester_id": 20978392 + i % 5,
                "created_at": _iso(moment),
                "updated_at": _iso(moment),
                "generated_timestamp": int(moment.timestamp()),
            }
        )
    return tickets


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received (``body``: always ``None`` for these GETs)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: Any = None


def encode_cursor(timestamp: int, ident: int) -> str:
    """The cursor for the position just after ticket ``ident`` stamped ``timestamp``."""
    return base64.b64encode(f"{timestamp}.0||{ident}|".encode()).decode()


def _decode_cursor(cursor: str) -> tuple[int, int] | None:
    try:
        text = base64.b64decode(cursor, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    match = re.fullmatch(r"(\d+)\.0\|\|(\d+)\|", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


class ZendeskServer(LoopbackServer):
    """A Zendesk account's incremental ticket export (see module doc)."""

    def __init__(
        self,
        records: int | Sequence[Mapping[str, Any]] = 0,
        *,
        page_size: int = MAX_PER_PAGE,
        subdomain: str = "example",
        email: str = "agent@example.com",
        api_token: str = "6wiIBWbGkBMo1mRDMuVwkw1EPsNkeUj95PIz2akv",
        oauth_token: str | None = None,
        rate_limit: int | None = None,
        rate_window: float = 60.0,
    ) -> None:
        self.page_size = page_size
        self.subdomain = subdomain
        self.email = email
        self.api_token = api_token
        self.oauth_token = oauth_token
        self.rate_limit = rate_limit
        self.rate_window = rate_window
        self.requests: list[RecordedRequest] = []
        self._records: list[dict[str, Any]] = []
        self.set_records(records)
        self._window_start = 0.0
        self._window_calls = 0

    # --- lifecycle ---------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_get(EXPORT_PATH, self._export)
        app.router.add_get(EXPORT_PATH.removesuffix(".json"), self._export)

    #: Base URL, e.g. ``http://127.0.0.1:41234`` (stands for
    #: ``https://{subdomain}.zendesk.com``).
    url: str

    @property
    def export_url(self) -> str:
        """The cursor-based ticket export URL."""
        return self.url + EXPORT_PATH

    @property
    def basic_auth(self) -> str:
        """The ``Authorization`` value for API-token basic authentication."""
        raw = f"{self.email}/token:{self.api_token}".encode()
        return "Basic " + base64.b64encode(raw).decode()

    # --- records -----------------------------------------------------------------------

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every ticket served, deleted ones included, in id order (copies)."""
        return [dict(r) for r in sorted(self._records, key=lambda r: int(r["id"]))]

    def set_records(self, records: int | Sequence[Mapping[str, Any]]) -> None:
        """Serve ``records`` from now on (an int generates that many with
        :func:`make_tickets`)."""
        if isinstance(records, int):
            self._records = make_tickets(records, subdomain=self.subdomain)
        else:
            self._records = [dict(r) for r in records]

    def add(self, count: int) -> list[dict[str, Any]]:
        """Create ``count`` tickets, stamped after every existing change."""
        start = max((int(r["id"]) for r in self._records), default=0)
        added = make_tickets(count, start=start, subdomain=self.subdomain)
        latest = self._latest()
        for offset, ticket in enumerate(added, start=1):
            self._stamp(ticket, latest + timedelta(minutes=offset), created=True)
        self._records.extend(added)
        return [dict(t) for t in added]

    def touch(self, ids: Iterable[int]) -> list[dict[str, Any]]:
        """Change the tickets ``ids``: each is stamped one minute after the latest change,
        in the order given."""
        return self._change(ids, status=None)

    def delete(self, ids: Iterable[int]) -> list[dict[str, Any]]:
        """Delete the tickets ``ids``: they stay in the export with ``status: "deleted"``."""
        return self._change(ids, status="deleted")

    def _change(self, ids: Iterable[int], status: str | None) -> list[dict[str, Any]]:
        wanted = list(ids)
        by_id = {int(r["id"]): r for r in self._records}
        latest = self._latest()
        for offset, ident in enumerate(wanted, start=1):
            ticket = by_id[ident]
            self._stamp(ticket, latest + timedelta(minutes=offset))
            if status is not None:
                ticket["status"] = status
        return [dict(by_id[i]) for i in wanted]

    @staticmethod
    def _stamp(ticket: dict[str, Any], moment: datetime, *, created: bool = False) -> None:
        ticket["updated_at"] = _iso(moment)
        ticket["generated_timestamp"] = int(moment.timestamp())
        if created:
            ticket["created_at"] = _iso(moment)

    def _latest(self) -> datetime:
        stamp = max((int(r["generated_timestamp"]) for r in self._records), default=0)
        return max(datetime.fromtimestamp(stamp, UTC), _BASE_TIME)

    # --- handler -----------------------------------------------------------------------

    def _authorized(self, header: str) -> bool:
        scheme, _, credential = header.partition(" ")
        if scheme.lower() == "bearer":
            return self.oauth_token is not None and credential.strip() == self.oauth_token
        return scheme.lower() == "basic" and header.strip() == self.basic_auth

    def _rate_limited(self) -> int | None:
        """Seconds to wait when this request is past the limit, else ``None``."""
        if self.rate_limit is None:
            return None
        now = time.monotonic()
        if now - self._window_start >= self.rate_window:
            self._window_start, self._window_calls = now, 0
        self._window_calls += 1
        if self._window_calls <= self.rate_limit:
            return None
        return max(1, math.ceil(self._window_start + self.rate_window - now))

    async def _export(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(
            RecordedRequest(request.method, request.path, query, dict(request.headers))
        )
        if not self._authorized(request.headers.get("Authorization", "")):
            return web.json_response({"error": "Couldn't authenticate you"}, status=401)
        if (wait := self._rate_limited()) is not None:
            return web.json_response(
                {
                    "error": "APIRateLimitExceeded",
                    "description": "Number of allowed incremental export API requests per "
                    "minute exceeded",
                },
                status=429,
                headers={"Retry-After": str(wait)},
            )

        position: tuple[int, int]
        if "cursor" in query:
            decoded = _decode_cursor(query["cursor"])
            if decoded is None:
                return _invalid("InvalidPaginationParameter", "Invalid cursor.")
            position = decoded
        elif "start_time" in query:
            if not re.fullmatch(r"\d+", query["start_time"]):
                return _invalid("InvalidValue", "start_time must be a Unix epoch time.")
            # "on or after the start time": just before the first id stamped start_time.
            position = (int(query["start_time"]), 0)
        else:
            return _invalid("InvalidValue", "start_time or cursor is required.")
        per_page = self.page_size
        if "per_page" in query:
            if not re.fullmatch(r"\d+", query["per_page"]) or int(query["per_page"]) < 1:
                return _invalid("InvalidValue", "per_page must be a positive integer.")
            per_page = int(query["per_page"])
        per_page = min(per_page, MAX_PER_PAGE)
        exclude_deleted = query.get("exclude_deleted", "").lower() == "true"

        def key(ticket: Mapping[str, Any]) -> tuple[int, int]:
            return int(ticket["generated_timestamp"]), int(ticket["id"])

        following = sorted((t for t in self._records if key(t) > position), key=key)
        if exclude_deleted:
            following = [t for t in following if t["status"] != "deleted"]
        page = following[:per_page]
        after = key(page[-1]) if page else position
        after_cursor = encode_cursor(*after)
        params = {"cursor": after_cursor}
        for kept in ("per_page", "exclude_deleted"):
            if kept in query:
                params[kept] = query[kept]
        return web.json_response(
            {
                "tickets": [dict(t) for t in page],
                "after_url": f"{self.export_url}?{urlencode(params)}",
                "after_cursor": after_cursor,
                "before_url": None,
                "before_cursor": None,
                "end_of_stream": len(following) <= per_page,
            }
        )


def _invalid(error: str, description: str) -> web.Response:
    return web.json_response({"error": error, "description": description}, status=400)
