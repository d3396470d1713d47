"""A local WordPress REST API serving ``GET /wp-json/wp/v2/posts``.

Written from the WordPress REST API Handbook (and the posts controller it documents), not
from what syncd does:

- https://developer.wordpress.org/rest-api/using-the-rest-api/pagination/ — ``page``,
  ``per_page`` ("an integer from 1 to 100"; default 10, as archive pages), ``offset``;
  ``X-WP-Total`` and ``X-WP-TotalPages`` on every paginated response; ``order`` and
  ``orderby``.
- https://developer.wordpress.org/rest-api/reference/posts/ — the list arguments
  (``after``, ``before``, ``modified_after``, ``modified_before``: "ISO8601 compliant date";
  ``order``: ``asc``/``desc``, default ``desc``; ``orderby``: ``author, date, id, include,
  modified, parent, relevance, slug, include_slugs, title``, default ``date``; ``include``,
  ``exclude``, ``search``) and the post schema (``id``, ``date_gmt``, ``modified_gmt``,
  ``link``, ``title.rendered``, ``content.rendered``).
- https://developer.wordpress.org/rest-api/using-the-rest-api/global-parameters/ —
  ``_fields``.
- https://core.trac.wordpress.org/changeset/39967 — a page past the last answers ``400``
  ``{"code": "rest_post_invalid_page_number", "message": "The page number requested is
  larger than the number of pages available.", "data": {"status": 400}}`` (only when the
  collection is not empty: an empty collection answers ``[]`` with ``X-WP-TotalPages: 0``).

Usage::

    async with WordPressServer(records=237) as api:
        # GET f"{api.url}/wp-json/wp/v2/posts?per_page=100&orderby=modified&order=asc"
        ...
        api.touch([api.records[0]["id"]])  # modified_gmt moves past every other post

Behaviour:

- Invalid arguments answer ``400`` ``{"code": "rest_invalid_param", "message": "Invalid
  parameter(s): per_page", "data": {"status": 400, "params": {"per_page": "per_page must
  be between 1 (inclusive) and 100 (inclusive)"}, "details": {"per_page": {"code":
  "rest_out_of_bounds", ...}}}}``: ``per_page`` is refused out of range, never clamped.
- ``Link`` carries ``rel="prev"`` and ``rel="next"`` as two separate header lines (WordPress
  adds one ``Link`` header per relation), each URL repeating every query argument of the
  request with ``page`` changed.
- The site's timezone is UTC, so ``date == date_gmt`` and ``modified == modified_gmt``;
  ``after``/``modified_after`` are exclusive (WordPress date queries use ``>``), and a
  date-time without an offset is site time.
- Posts are public: no authentication is asked for (``context=edit`` answers ``401``
  ``rest_forbidden_context``).

Not modelled: ``_embed``, ``_envelope``, ``status`` other than ``publish``, taxonomy filters
(``categories``, ``tags``), ``sticky``, the ``?rest_route=`` form of the URL.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from multidict import CIMultiDict

from tests.integration.loopback import LoopbackServer

__all__ = ["POSTS_PATH", "RecordedRequest", "WordPressServer", "make_posts"]

POSTS_PATH = "/wp-json/wp/v2/posts"
MAX_PER_PAGE = 100
DEFAULT_PER_PAGE = 10
_BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
_SITE = "https://blog.example.org"
_ORDERBY = (
    "author",
    "date",
    "id",
    "include",
    "modified",
    "parent",
    "relevance",
    "slug",
    "include_slugs",
    "title",
)
_DATE_TIME = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|z|[+-]\d{2}(?::?\d{2})?)?$"
)


def _wp_time(moment: datetime) -> str:
    # WordPress renders dates without an offset: "2024-01-01T00:00:00".
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


def post_id(index: int) -> int:
    """The id of the ``index``-th generated post: ids are not contiguous in WordPress
    (revisions and attachments share the posts table), so neither are these."""
    return 101 + 7 * index


def make_posts(count: int, *, start: int = 0) -> list[dict[str, Any]]:
    """``count`` published posts, one minute apart (``date_gmt == modified_gmt``)."""
    posts = []
    for i in range(start, start + count):
        moment = _wp_time(_BASE_TIME + timedelta(minutes=i))
        ident = post_id(i)
        slug = f"post-{i + 1}"
        posts.append(
            {
                "id": ident,
                "date": moment,
                "date_gmt": moment,
                "guid": {"rendered": f"{_SITE}/?p={ident}"},
                "modified": moment,
                "modified_gmt": moment,
                "slug": slug,
                "status": "publish",
                "type": "post",
                "link": f"{_SITE}/{moment[:4]}/{moment[5:7]}/{moment[8:10]}/{slug}/",
                # Titles are rendered through wptexturize: the dash arrives as an entity.
                "title": {"rendered": f"Post {i + 1} &#8211; notes"},
                "content": {
                    "rendered": f"<p>Body of post {i + 1}, with "
                    f'<a href="{_SITE}/about/">a link</a>.</p>\n',
                    "protected": False,
                },
                "author": 1 + i % 3,
            }
        )
    return posts


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received (``body``: always ``None`` for these GETs)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(repr=False)
    body: Any = None


def _parse_site_time(value: str) -> datetime | None:
    """An ISO 8601 date-time as WordPress accepts it; without an offset it is site time."""
    if not _DATE_TIME.match(value):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z").replace(" ", "T"))
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _gmt(value: Any) -> datetime:
    return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)


class WordPressServer(LoopbackServer):
    """A WordPress site's posts collection (see module doc)."""

    def __init__(self, records: int | Sequence[Mapping[str, Any]] = 0) -> None:
        self.requests: list[RecordedRequest] = []
        self._records: list[dict[str, Any]] = []
        self.set_records(records)

    # --- lifecycle ---------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        app.router.add_get(POSTS_PATH, self._posts)

    #: Base URL, e.g. ``http://127.0.0.1:41234`` (posts are at ``{url}{POSTS_PATH}``).
    url: str

    @property
    def posts_url(self) -> str:
        """The posts collection URL."""
        return self.url + POSTS_PATH

    # --- records -----------------------------------------------------------------------

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every post served, oldest first (copies)."""
        return [dict(r) for r in sorted(self._records, key=lambda r: (r["date_gmt"], r["id"]))]

    def set_records(self, records: int | Sequence[Mapping[str, Any]]) -> None:
        """Serve ``records`` from now on (an int generates that many with
        :func:`make_posts`)."""
        generated = make_posts(records) if isinstance(records, int) else records
        self._records = [dict(r) for r in generated]

    def add(self, count: int) -> list[dict[str, Any]]:
        """Publish ``count`` new posts, dated after every existing date and modification."""
        start = len(self._records)
        while any(r["id"] == post_id(start) for r in self._records):
            start += 1
        added = make_posts(count, start=start)
        latest = self._latest()
        for offset, post in enumerate(added, start=1):
            moment = _wp_time(latest + timedelta(minutes=offset))
            post.update(date=moment, date_gmt=moment, modified=moment, modified_gmt=moment)
        self._records.extend(added)
        return [dict(p) for p in added]

    def touch(self, ids: Iterable[int]) -> list[dict[str, Any]]:
        """Edit the posts ``ids``: each gets a ``modified_gmt`` one minute after the latest
        date served, in the order given, and a changed body."""
        wanted = list(ids)
        by_id = {int(r["id"]): r for r in self._records}
        latest = self._latest()
        for offset, ident in enumerate(wanted, start=1):
            post = by_id[ident]
            moment = _wp_time(latest + timedelta(minutes=offset))
            post.update(modified=moment, modified_gmt=moment)
            post["content"] = {
                "rendered": post["content"]["rendered"].replace("</p>", " (updated)</p>"),
                "protected": False,
            }
        return [dict(by_id[i]) for i in wanted]

    def _latest(self) -> datetime:
        stamps = [str(r[k]) for r in self._records for k in ("date_gmt", "modified_gmt")]
        return _gmt(max(stamps, default=_wp_time(_BASE_TIME)))

    # --- handler -----------------------------------------------------------------------

    async def _posts(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(
            RecordedRequest(request.method, request.path, query, dict(request.headers))
        )
        args, invalid = _validate(query)
        if invalid:
            names = ", ".join(invalid)
            return _error(
                400,
                "rest_invalid_param",
                f"Invalid parameter(s): {names}",
                params={name: message for name, (_, message) in invalid.items()},
                details={
                    name: {"code": code, "message": message, "data": None}
                    for name, (code, message) in invalid.items()
                },
            )
        if args["context"] == "edit":
            return _error(
                401,
                "rest_forbidden_context",
                "Sorry, you are not allowed to edit posts in this post type.",
            )
        if args["orderby"] == "relevance" and not args["search"]:
            return _error(
                400,
                "rest_no_search_term_defined",
                "You need to define a search term to order by relevance.",
            )
        if args["orderby"] == "include" and not args["include"]:
            return _error(
                400,
                "rest_orderby_include_missing_include",
                "You need to define an include parameter to order by include.",
            )

        rows = [r for r in self._records if _matches(r, args)]
        rows.sort(key=_sort_key(args), reverse=args["order"] == "desc")
        per_page, page = int(args["per_page"]), int(args["page"])
        total = len(rows)
        max_pages = math.ceil(total / per_page)
        if page > max_pages and total > 0:
            return _error(
                400,
                "rest_post_invalid_page_number",
                "The page number requested is larger than the number of pages available.",
            )
        start = int(args["offset"]) if args["offset"] is not None else (page - 1) * per_page
        chunk = [_fields(r, args["_fields"]) for r in rows[start : start + per_page]]

        headers: CIMultiDict[str] = CIMultiDict()
        headers["X-WP-Total"] = str(total)
        headers["X-WP-TotalPages"] = str(max_pages)
        if page > 1:
            headers.add("Link", f'<{self._page_url(query, min(page - 1, max_pages))}>; rel="prev"')
        if max_pages > page:
            headers.add("Link", f'<{self._page_url(query, page + 1)}>; rel="next"')
        return web.json_response(chunk, headers=headers)

    def _page_url(self, query: Mapping[str, str], page: int) -> str:
        params = dict(query)
        params["page"] = str(page)
        return f"{self.posts_url}?{urlencode(params)}"


def _error(
    status: int,
    code: str,
    message: str,
    *,
    params: dict[str, str] | None = None,
    details: dict[str, Any] | None = None,
) -> web.Response:
    data: dict[str, Any] = {"status": status}
    if params is not None:
        data["params"] = params
    if details is not None:
        data["details"] = details
    return web.json_response({"code": code, "message": message, "data": data}, status=status)


def _validate(query: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
    """The arguments with their defaults, and the invalid ones as ``name: (code, message)``
    (WordPress checks every argument before answering, and names all the bad ones)."""
    invalid: dict[str, tuple[str, str]] = {}
    args: dict[str, Any] = {}

    def integer(name: str, default: int | None) -> int | None:
        raw = query.get(name)
        if raw is None:
            return default
        if not re.fullmatch(r"[+-]?\d+", raw.strip()):
            invalid[name] = ("rest_invalid_type", f"{name} is not of type integer.")
            return default
        return int(raw)

    def one_of(name: str, choices: Sequence[str], default: str) -> str:
        raw = query.get(name, default)
        if raw not in choices:
            listed = ", ".join(choices[:-1]) + (", and " if len(choices) > 2 else " and ")
            listed += choices[-1]
            invalid[name] = ("rest_not_in_enum", f"{name} is not one of {listed}.")
            return default
        return raw

    def id_list(name: str) -> list[int]:
        raw = query.get(name, "")
        items = [part.strip() for part in raw.split(",") if part.strip()]
        if not all(re.fullmatch(r"\d+", item) for item in items):
            invalid[name] = ("rest_invalid_type", f"{name}[0] is not of type integer.")
            return []
        return [int(item) for item in items]

    args["context"] = one_of("context", ("view", "embed", "edit"), "view")
    page = integer("page", 1)
    if page is not None and page < 1:
        invalid["page"] = ("rest_out_of_bounds", "page must be greater than or equal to 1")
    args["page"] = page if page is not None and page >= 1 else 1
    per_page = integer("per_page", DEFAULT_PER_PAGE)
    if per_page is not None and not 1 <= per_page <= MAX_PER_PAGE:
        invalid["per_page"] = (
            "rest_out_of_bounds",
            f"per_page must be between 1 (inclusive) and {MAX_PER_PAGE} (inclusive)",
        )
    args["per_page"] = per_page if "per_page" not in invalid else DEFAULT_PER_PAGE
    offset = integer("offset", None)
    args["offset"] = offset if offset is None or offset >= 0 else 0
    args["order"] = one_of("order", ("asc", "desc"), "desc")
    args["orderby"] = one_of("orderby", _ORDERBY, "date")
    for name in ("after", "before", "modified_after", "modified_before"):
        raw = query.get(name)
        moment = None if raw is None else _parse_site_time(raw)
        if raw is not None and moment is None:
            invalid[name] = ("rest_invalid_date", "Invalid date.")
        args[name] = moment
    args["include"] = id_list("include")
    args["exclude"] = id_list("exclude")
    args["search"] = query.get("search", "")
    args["slug"] = [s for s in query.get("slug", "").split(",") if s]
    fields = query.get("_fields")
    args["_fields"] = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
    return args, invalid


def _matches(post: Mapping[str, Any], args: Mapping[str, Any]) -> bool:
    date, modified = _gmt(post["date_gmt"]), _gmt(post["modified_gmt"])
    checks = [
        args["after"] is None or date > args["after"],
        args["before"] is None or date < args["before"],
        args["modified_after"] is None or modified > args["modified_after"],
        args["modified_before"] is None or modified < args["modified_before"],
        not args["include"] or post["id"] in args["include"],
        post["id"] not in args["exclude"],
        not args["slug"] or post["slug"] in args["slug"],
    ]
    if args["search"]:
        needle = str(args["search"]).lower()
        text = (post["title"]["rendered"] + " " + post["content"]["rendered"]).lower()
        checks.append(needle in text)
    return all(checks)


def _sort_key(args: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    orderby = args["orderby"]
    if orderby == "include":
        positions = {ident: n for n, ident in enumerate(args["include"])}
        return lambda p: (positions.get(p["id"], len(positions)),)
    if orderby == "include_slugs":
        slugs = {slug: n for n, slug in enumerate(args["slug"])}
        return lambda p: (slugs.get(p["slug"], len(slugs)),)
    column: dict[str, Callable[[Mapping[str, Any]], Any]] = {
        "author": lambda p: p["author"],
        "date": lambda p: p["date_gmt"],
        "relevance": lambda p: p["date_gmt"],  # only with search; relevance is not modelled
        "id": lambda p: p["id"],
        "modified": lambda p: p["modified_gmt"],
        "parent": lambda p: 0,
        "slug": lambda p: p["slug"],
        "title": lambda p: p["title"]["rendered"],
    }
    value = column[orderby]
    # Ties (same author, say) fall back to the id, so pages never overlap.
    return lambda p: (value(p), p["id"])


def _fields(post: Mapping[str, Any], fields: list[str] | None) -> dict[str, Any]:
    """``_fields=id,title.rendered``: keep the named top-level or nested fields only."""
    if fields is None:
        return dict(post)
    kept: dict[str, Any] = {}
    for name in fields:
        head, _, rest = name.partition(".")
        if head not in post:
            continue
        value = post[head]
        if rest and isinstance(value, dict):
            if rest in value:
                kept.setdefault(head, {})[rest] = value[rest]
        else:
            kept[head] = value
    return kept
