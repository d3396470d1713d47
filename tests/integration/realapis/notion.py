"""A local server following Notion's documented contract for querying a database.

Usage::

    async with NotionServer(records=237) as api:
        url = f"{api.url}/v1/databases/{api.database_id}/query"
        # POST, JSON body; headers Authorization: Bearer <api.token>, Notion-Version

Written from Notion's reference pages (API versions up to 2022-06-28):

- https://developers.notion.com/reference/post-database-query — ``POST
  /v1/databases/{database_id}/query`` with ``filter``, ``sorts``, ``start_cursor``,
  ``page_size``; 404 for a database the integration cannot see.
- https://developers.notion.com/reference/pagination — ``start_cursor`` (opaque, from a
  previous ``next_cursor``) and ``page_size`` (default 100, maximum 100) in the body of
  POST endpoints; answers ``{"object": "list", "results", "next_cursor", "has_more",
  "type": "page_or_database", "page_or_database": {}}``, ``next_cursor`` null at the end.
- https://developers.notion.com/reference/post-database-query-filter — timestamp filters
  (``{"timestamp": "last_edited_time", "last_edited_time": {"on_or_after": ISO 8601}}``),
  date conditions, compound ``and`` / ``or``.
- https://developers.notion.com/reference/post-database-query-sort — property and
  timestamp sorts, the first taking precedence.
- https://developers.notion.com/reference/status-codes — error objects ``{"object":
  "error", "status", "code", "message"}``: 400 ``invalid_json``, ``validation_error``,
  ``missing_version`` (no ``Notion-Version`` header), 401 ``unauthorized``, 404
  ``object_not_found``.

Like Notion's, ``next_cursor`` is the id of the first page of the next page of results,
and ``last_edited_time`` has minute precision. Without ``sorts`` results come newest
created first (Notion's observed default, makenotion/notion-sdk-js#388). Error messages
are written in Notion's style (``body failed validation: body.page_size should be ≤
`100`, instead was `101`.``); a ``page_size`` above 100 is refused, not clamped, as
Notion is reported to answer it. A null ``start_cursor`` / ``page_size`` is read as absent.

Tests can make requests fail (:meth:`NotionServer.fail_next`, a stand-in for an outage):
answered with Notion's error object, code ``internal_server_error`` (``service_unavailable``
for 502-504).

Left out: property filters other than on the title property ``Name`` (answered 400
``validation_error`` saying so), ``filter_properties``, the 2025-09-03 data-source API,
rate limiting (429 ``rate_limited``), databases other than the one served.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from aiohttp import web

from tests.integration.loopback import LoopbackServer
from tests.integration.realapis.faults import Faults

__all__ = ["NotionServer", "RecordedRequest", "page_id"]

BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
DEFAULT_DATABASE_ID = "d9824bdc-8445-4327-be8b-5b47500af6ce"
_USER = {"object": "user", "id": "6794760a-1f15-45cd-9c65-0dfe42f5135a"}
_BODY_KEYS = {"start_cursor", "page_size", "filter", "sorts", "archived", "in_trash"}
_UUID = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$", re.I)
_DATE_CONDITIONS = ("equals", "before", "after", "on_or_before", "on_or_after")


def page_id(index: int) -> str:
    """The UUIDv4 id of generated page ``index``."""
    digest = hashlib.sha256(f"notion-page-{index}".encode()).digest()[:16]
    return str(uuid.UUID(bytes=digest, version=4))


def iso(moment: datetime) -> str:
    """Notion's timestamp form, e.g. ``2024-01-01T00:05:00.000Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received (``body``: the decoded JSON, or ``None``)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: Any = None


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _validation(message: str) -> _Refused:
    return _Refused(400, "validation_error", message)


def _shown(value: Any) -> str:
    return "`undefined`" if value is None else f"`{json.dumps(value, ensure_ascii=False)}`"


class NotionServer(LoopbackServer):
    """One Notion database whose pages can be queried (see the module doc).

    ``records`` pages are generated (page ``i`` created and last edited ``i`` minutes after
    2024-01-01, titled ``Page i``). :meth:`add` and :meth:`edit` change the database
    between requests; edits move ``last_edited_time`` forward, a minute at a time.
    """

    def __init__(
        self,
        records: int = 0,
        *,
        token: str = "secret_fixture",
        database_id: str = DEFAULT_DATABASE_ID,
    ) -> None:
        self.token = token
        self.database_id = database_id
        self.requests: list[RecordedRequest] = []
        self._pages: list[dict[str, Any]] = []  # creation order
        self._clock = BASE_TIME - timedelta(minutes=1)
        self._request_ids = itertools.count(1)
        self._faults = Faults()
        self.add(records)

    # --- lifecycle --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/databases/{database_id}/query", self._query)

    @property
    def query_url(self) -> str:
        """The URL of this database's query endpoint."""
        return f"{self.url}/v1/databases/{self.database_id}/query"

    # --- content ----------------------------------------------------------------------

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every page, in the default order (newest created first); deep copies."""
        return [json.loads(json.dumps(p)) for p in reversed(self._pages)]

    def add(self, count: int) -> list[dict[str, Any]]:
        """Create ``count`` pages, a minute apart, after everything so far."""
        made = []
        for _ in range(count):
            index = len(self._pages)
            self._clock += timedelta(minutes=1)
            ident, name = page_id(index), f"Page {index}"
            made.append(
                {
                    "object": "page",
                    "id": ident,
                    "created_time": iso(self._clock),
                    "last_edited_time": iso(self._clock),
                    "created_by": dict(_USER),
                    "last_edited_by": dict(_USER),
                    "cover": None,
                    "icon": None,
                    "parent": {"type": "database_id", "database_id": self.database_id},
                    "archived": False,
                    "in_trash": False,
                    "properties": {"Name": _title(name)},
                    "url": f"https://www.notion.so/Page-{index}-{ident.replace('-', '')}",
                    "public_url": None,
                }
            )
            self._pages.append(made[-1])
        return json.loads(json.dumps(made))  # type: ignore[no-any-return]

    def edit(self, page: str, *, title: str | None = None) -> dict[str, Any]:
        """Edit a page (optionally renaming it): ``last_edited_time`` becomes a minute
        after the latest time so far."""
        found = next((p for p in self._pages if p["id"] == page), None)
        if found is None:
            raise KeyError(page)
        self._clock += timedelta(minutes=1)
        found["last_edited_time"] = iso(self._clock)
        if title is not None:
            found["properties"]["Name"] = _title(title)
        return json.loads(json.dumps(found))  # type: ignore[no-any-return]

    def fail_next(self, status: int = 500, times: int = 1, *, after: int = 0) -> None:
        """A test hook, no part of the API: answer ``times`` requests with ``status`` and
        Notion's error object, after serving the next ``after`` (see :mod:`.faults`)."""
        self._faults.arm(status, times, after=after)

    # --- handler ----------------------------------------------------------------------

    async def _query(self, request: web.Request) -> web.StreamResponse:
        raw = await request.text()
        try:
            body: Any = json.loads(raw) if raw.strip() else {}
            decoded = True
        except ValueError:
            body, decoded = None, False
        self.requests.append(
            RecordedRequest(
                request.method, request.path, dict(request.query), dict(request.headers), body
            )
        )
        request_id = str(uuid.UUID(int=next(self._request_ids)))
        try:
            if (status := self._faults.take()) is not None:
                unavailable = status in (502, 503, 504)
                code = "service_unavailable" if unavailable else "internal_server_error"
                raise _Refused(status, code, "Unexpected error occurred (scripted).")
            answer = self._answer(request, body, decoded)
        except _Refused as refused:
            error = {
                "object": "error",
                "status": refused.status,
                "code": refused.code,
                "message": refused.message,
                "request_id": request_id,
            }
            return web.json_response(error, status=refused.status)
        answer["request_id"] = request_id
        return web.json_response(answer)

    def _answer(self, request: web.Request, body: Any, decoded: bool) -> dict[str, Any]:
        authorization = request.headers.get("Authorization", "")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or token.strip() != self.token:
            raise _Refused(401, "unauthorized", "API token is invalid.")
        if not request.headers.get("Notion-Version"):
            raise _Refused(
                400,
                "missing_version",
                "Notion-Version header failed validation: Notion-Version header should be"
                " defined, instead was `undefined`.",
            )
        wanted = request.match_info["database_id"]
        if not _UUID.match(wanted):
            raise _validation(
                f"path failed validation: path.database_id should be a valid uuid, instead"
                f" was {_shown(wanted)}."
            )
        if wanted.replace("-", "").lower() != self.database_id.replace("-", "").lower():
            raise _Refused(
                404,
                "object_not_found",
                f"Could not find database with ID: {wanted}. Make sure the relevant pages and"
                " databases are shared with your integration.",
            )
        if not decoded:
            raise _Refused(400, "invalid_json", "Error parsing JSON body.")
        if not isinstance(body, dict):
            raise _validation(
                f"body failed validation: body should be an object, instead was {_shown(body)}."
            )
        for key in body:
            if key not in _BODY_KEYS:
                raise _validation(
                    f"body failed validation: body.{key} should be not present, instead was"
                    f" {_shown(body[key])}."
                )
        size = body.get("page_size")
        if size is None:
            size = 100
        if not isinstance(size, int) or isinstance(size, bool):
            raise _validation(
                f"body failed validation: body.page_size should be a number or `undefined`,"
                f" instead was {_shown(size)}."
            )
        if size < 1:
            raise _validation(
                f"body failed validation: body.page_size should be ≥ `1`, instead was `{size}`."
            )
        if size > 100:
            raise _validation(
                f"body failed validation: body.page_size should be ≤ `100`, instead was `{size}`."
            )
        ordered = self._sorted(body.get("sorts"))
        keep = _filter(body.get("filter"))
        start = 0
        cursor = body.get("start_cursor")
        if cursor is not None:
            if not isinstance(cursor, str) or not _UUID.match(cursor):
                raise _validation(
                    f"body failed validation: body.start_cursor should be a valid uuid or"
                    f" `undefined`, instead was {_shown(cursor)}."
                )
            ids = [p["id"] for p in ordered]
            if cursor not in ids:
                raise _validation(f"The start_cursor provided is invalid: {cursor}")
            start = ids.index(cursor)
        matching = (p for p in ordered[start:] if keep(p))
        results = list(itertools.islice(matching, size + 1))
        following = results[size]["id"] if len(results) > size else None
        return {
            "object": "list",
            "results": json.loads(json.dumps(results[:size])),
            "next_cursor": following,
            "has_more": following is not None,
            "type": "page_or_database",
            "page_or_database": {},
        }

    def _sorted(self, sorts: Any) -> list[dict[str, Any]]:
        pages = list(reversed(self._pages))  # newest created first, the default
        if sorts is None:
            return pages
        if not isinstance(sorts, list):
            raise _validation(
                f"body failed validation: body.sorts should be an array or `undefined`,"
                f" instead was {_shown(sorts)}."
            )
        pages = list(self._pages)  # explicit sorts tie-break in creation order
        # Stable sorts, last key first, so that the first sort takes precedence.
        for at, sort in reversed(list(enumerate(sorts))):
            where = f"body failed validation: body.sorts[{at}]"
            if not isinstance(sort, dict):
                raise _validation(f"{where} should be an object, instead was {_shown(sort)}.")
            direction = sort.get("direction", "ascending")
            if direction not in ("ascending", "descending"):
                raise _validation(
                    f'{where}.direction should be `"ascending"` or `"descending"`, instead was'
                    f" {_shown(direction)}."
                )
            key: Callable[[dict[str, Any]], str]
            if "timestamp" in sort:
                stamp = sort["timestamp"]
                if stamp not in ("created_time", "last_edited_time"):
                    raise _validation(
                        f'{where}.timestamp should be `"created_time"` or `"last_edited_time"`,'
                        f" instead was {_shown(stamp)}."
                    )
                key = _stamp_key(stamp)
            elif sort.get("property") in ("Name", "title"):
                key = _plain_title
            else:
                raise _validation(
                    f"Could not find sort property with name or id: {sort.get('property', '')}"
                )
            pages.sort(key=key, reverse=direction == "descending")
        return pages


def _title(text: str) -> dict[str, Any]:
    return {
        "id": "title",
        "type": "title",
        "title": [
            {
                "type": "text",
                "text": {"content": text, "link": None},
                "plain_text": text,
                "href": None,
            }
        ],
    }


def _stamp_key(stamp: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda page: str(page[stamp])  # the fixed-width ISO form sorts as time


def _plain_title(page: Mapping[str, Any]) -> str:
    return "".join(part["plain_text"] for part in page["properties"]["Name"]["title"])


def _filter(spec: Any) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate for a filter object (``None``: every page)."""
    if spec is None:
        return lambda page: True
    if not isinstance(spec, dict):
        raise _validation(
            f"body failed validation: body.filter should be an object or `undefined`, instead"
            f" was {_shown(spec)}."
        )
    for compound in ("and", "or"):
        if compound in spec:
            parts = spec[compound]
            if not isinstance(parts, list):
                raise _validation(
                    f"body failed validation: body.filter.{compound} should be an array."
                )
            tests = [_filter(part) for part in parts]
            if compound == "and":
                return lambda page: all(test(page) for test in tests)
            return lambda page: any(test(page) for test in tests)
    if "timestamp" in spec:
        stamp = spec["timestamp"]
        if stamp not in ("created_time", "last_edited_time") or not isinstance(
            spec.get(stamp), dict
        ):
            raise _validation(
                f"body failed validation: body.filter.{stamp} should be defined, instead was"
                " `undefined`."
            )
        return _date_test(stamp, spec[stamp])
    if spec.get("property") in ("Name", "title") and isinstance(spec.get("title"), dict):
        return _title_test(spec["title"])
    if "property" in spec and spec["property"] not in ("Name", "title"):
        raise _validation(f"Could not find property with name or id: {spec['property']}")
    raise _validation(
        f"body failed validation: this fixture models timestamp filters and title filters on"
        f" Name only, not {_shown(spec)}."
    )


def _date_test(stamp: str, condition: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    if "is_not_empty" in condition:
        return lambda page: True  # page timestamps always exist
    if "is_empty" in condition:
        return lambda page: False
    names = [name for name in _DATE_CONDITIONS if name in condition]
    if len(names) != 1:
        raise _validation(
            f"body failed validation: body.filter.{stamp} should have one of"
            f" {', '.join(_DATE_CONDITIONS)}, is_empty, is_not_empty."
        )
    name, raw = names[0], condition[names[0]]
    try:
        if not isinstance(raw, str):
            raise ValueError(raw)
        low, high = _interval(raw)
    except ValueError:
        raise _validation(
            f"body failed validation: body.filter.{stamp}.{name} should be a valid ISO 8601"
            f" date string, instead was {_shown(raw)}."
        ) from None

    def test(page: Mapping[str, Any]) -> bool:
        moment = datetime.fromisoformat(str(page[stamp]))
        return {
            "equals": low <= moment <= high if low == high else low <= moment < high,
            "before": moment < low,
            "after": moment > high if low == high else moment >= high,
            "on_or_before": moment <= high if low == high else moment < high,
            "on_or_after": moment >= low,
        }[name]

    return test


def _interval(raw: str) -> tuple[datetime, datetime]:
    """A date (``2024-01-01``: that whole UTC day, as ``[start, next day)``) or an instant
    (``low == high``)."""
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):
        day = date.fromisoformat(raw)
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        return start, start + timedelta(days=1)
    moment = datetime.fromisoformat(raw)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment, moment


def _title_test(condition: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    checks: dict[str, Callable[[str, str], bool]] = {
        "equals": lambda text, value: text == value,
        "does_not_equal": lambda text, value: text != value,
        "contains": lambda text, value: value.lower() in text.lower(),
        "does_not_contain": lambda text, value: value.lower() not in text.lower(),
        "starts_with": lambda text, value: text.lower().startswith(value.lower()),
        "ends_with": lambda text, value: text.lower().endswith(value.lower()),
        "is_empty": lambda text, value: not text,
        "is_not_empty": lambda text, value: bool(text),
    }
    for name, check in checks.items():
        if name in condition:
            value = str(condition[name])
            return lambda page: check(_plain_title(page), value)
    raise _validation("body failed validation: body.filter.title should have a condition.")
