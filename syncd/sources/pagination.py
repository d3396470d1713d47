"""The five pagination styles of the ``http`` source (DESIGN.md §8).

A style turns a cursor into a request (URL and query parameters) and a response into the next
cursor. Cursors are opaque strings to the rest of syncd: a token for ``cursor``, an absolute
URL for ``next_url`` and ``link_header``, a number for ``offset`` and ``page``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from syncd.errors import SourceError
from syncd.http.paginator import describe_cursor
from syncd.http.transport import Response, safe_url

__all__ = [
    "MISSING",
    "PAGINATION_TYPES",
    "Pagination",
    "build_pagination",
    "get_path",
    "parse_link_header",
]

PAGINATION_TYPES = ("cursor", "next_url", "link_header", "offset", "page")

QueryParams = dict[str, str | int | float]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Returned by :func:`get_path` when the path does not exist."""


def get_path(data: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``data`` (list indices allowed), or :data:`MISSING`."""
    value = data
    for part in path.split("."):
        # type() first: JSON objects are dicts, and the Mapping ABC check is slow.
        if type(value) is dict or isinstance(value, Mapping):
            if part not in value:
                return MISSING
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value


class Pagination(Protocol):
    """One pagination style."""

    def request(self, cursor: str | None, url: str, params: QueryParams) -> tuple[str, QueryParams]:
        """The URL and query parameters for the page at ``cursor`` (``None``: first page);
        ``url``/``params`` are the source's own (with the incremental parameter)."""
        ...

    def next_cursor(
        self, cursor: str | None, response: Response, body: Any, records: list[dict[str, Any]]
    ) -> str | None:
        """The cursor of the page after this one, or ``None`` when this was the last."""
        ...


@dataclass(frozen=True)
class CursorPagination:
    """A token in the body, sent back as a query parameter; null/missing/empty ends."""

    cursor_param: str = "cursor"
    next_cursor_path: str = "next_cursor"

    def request(self, cursor: str | None, url: str, params: QueryParams) -> tuple[str, QueryParams]:
        """See :class:`Pagination`."""
        if cursor is None:
            return url, params
        return url, {**params, self.cursor_param: cursor}

    def next_cursor(
        self, cursor: str | None, response: Response, body: Any, records: list[dict[str, Any]]
    ) -> str | None:
        """See :class:`Pagination`."""
        value = get_path(body, self.next_cursor_path)
        if value is MISSING or value is None or value == "":
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise SourceError(
                f"next cursor at {self.next_cursor_path!r} is a {type(value).__name__}, "
                "expected a string or number"
            )
        return str(value)


@dataclass(frozen=True)
class _UrlPagination:
    """Shared by ``next_url`` and ``link_header``: the cursor is the next page's URL."""

    def request(self, cursor: str | None, url: str, params: QueryParams) -> tuple[str, QueryParams]:
        """See :class:`Pagination`. A next URL is used as given: it carries its own query."""
        if cursor is None:
            return url, params
        return cursor, {}

    @staticmethod
    def _absolute(response: Response, link: str) -> str:
        absolute = urljoin(response.url, link)
        # The source's headers hold credentials: never hand them to another origin. The
        # origin is the one the source asked (a redirect elsewhere does not move it).
        requested = response.requested_url or response.url
        there = _origin(absolute)
        if there is None or there != _origin(requested):
            raise SourceError(
                f"next page URL {safe_url(absolute)} is on another origin than "
                f"{safe_url(requested)}; refusing to follow it"
            )
        return absolute


@dataclass(frozen=True)
class NextUrlPagination(_UrlPagination):
    """An absolute or relative URL in the body."""

    next_url_path: str = "next"

    def next_cursor(
        self, cursor: str | None, response: Response, body: Any, records: list[dict[str, Any]]
    ) -> str | None:
        """See :class:`Pagination`."""
        value = get_path(body, self.next_url_path)
        if value is MISSING or value is None or value == "":
            return None
        if not isinstance(value, str):
            raise SourceError(
                f"next URL at {self.next_url_path!r} is a {type(value).__name__}, expected a string"
            )
        return self._absolute(response, value)


@dataclass(frozen=True)
class LinkHeaderPagination(_UrlPagination):
    """RFC 8288 ``Link: <…>; rel="next"``."""

    def next_cursor(
        self, cursor: str | None, response: Response, body: Any, records: list[dict[str, Any]]
    ) -> str | None:
        """See :class:`Pagination`."""
        headers = response.headers
        getall = getattr(headers, "getall", None)
        values: list[str] = (
            list(getall("Link", [])) if callable(getall) else [headers.get("Link", "")]
        )
        links = parse_link_header(", ".join(v for v in values if v))
        link = links.get("next")
        return self._absolute(response, link) if link else None


@dataclass(frozen=True)
class OffsetPagination:
    """``offset``/``limit`` query parameters; a short or empty page ends."""

    offset_param: str = "offset"
    limit_param: str = "limit"
    limit: int = 100

    def request(self, cursor: str | None, url: str, params: QueryParams) -> tuple[str, QueryParams]:
        """See :class:`Pagination`."""
        offset = _number_cursor(cursor, 0)
        return url, {**params, self.offset_param: offset, self.limit_param: self.limit}

    def next_cursor(
        self, cursor: str | None, response: Response, body: Any, records: list[dict[str, Any]]
    ) -> str | None:
        """See :class:`Pagination`."""
        if len(records) < self.limit:
            return None
        return str(_number_cursor(cursor, 0) + len(records))


@dataclass(frozen=True)
class PagePagination:
    """A page-number query parameter; an empty page ends."""

    page_param: str = "page"
    start: int = 1

    def request(self, cursor: str | None, url: str, params: QueryParams) -> tuple[str, QueryParams]:
        """See :class:`Pagination`."""
        return url, {**params, self.page_param: _number_cursor(cursor, self.start)}

    def next_cursor(
        self, cursor: str | None, response: Response, body: Any, records: list[dict[str, Any]]
    ) -> str | None:
        """See :class:`Pagination`."""
        if not records:
            return None
        return str(_number_cursor(cursor, self.start) + 1)


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of ``url``, default ports filled in; credentials ignored."""
    try:
        parts = urlsplit(url)
        scheme, port = parts.scheme.lower(), parts.port
    except ValueError:
        return None
    port = port if port is not None else {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").rstrip("."), port


def _number_cursor(cursor: str | None, default: int) -> int:
    if cursor is None:
        return default
    try:
        number = int(cursor)
    except ValueError:
        # A resumed cursor may be a next-page URL (the style changed): never quote its query.
        raise SourceError(
            f"invalid cursor {describe_cursor(cursor)}: expected a page number or offset"
        ) from None
    if number < 0:
        raise SourceError(f"invalid cursor {cursor!r}: expected a number >= 0")
    return number


def build_pagination(config: Mapping[str, Any] | None) -> Pagination:
    """The style described by a (validated) ``pagination`` config; cursor by default."""
    cfg = dict(config or {})
    kind = cfg.get("type", "cursor")
    if kind == "cursor":
        return CursorPagination(
            cursor_param=cfg.get("cursor_param", "cursor"),
            next_cursor_path=cfg.get("next_cursor", "next_cursor"),
        )
    if kind == "next_url":
        return NextUrlPagination(next_url_path=cfg.get("next_url", "next"))
    if kind == "link_header":
        return LinkHeaderPagination()
    if kind == "offset":
        return OffsetPagination(
            offset_param=cfg.get("offset_param", "offset"),
            limit_param=cfg.get("limit_param", "limit"),
            limit=int(cfg.get("limit", 100)),
        )
    if kind == "page":
        return PagePagination(
            page_param=cfg.get("page_param", "page"), start=int(cfg.get("start", 1))
        )
    raise SourceError(f"unknown pagination type {kind!r}")


def parse_link_header(value: str) -> dict[str, str]:
    """``{rel: target}`` from an RFC 8288 ``Link`` header value (first target per rel wins).

    Parameters may be quoted strings holding commas or semicolons; a ``rel`` may list several
    space-separated relation types.
    """
    links: dict[str, str] = {}
    i, n = 0, len(value)
    while i < n:
        start = value.find("<", i)
        if start < 0:
            break
        end = value.find(">", start + 1)
        if end < 0:
            break
        target = value[start + 1 : end].strip()
        i = end + 1
        rels: list[str] = []
        # Parameters: ;name[=token|"quoted"] until the next comma outside quotes.
        while i < n:
            while i < n and value[i] in " \t":
                i += 1
            if i >= n or value[i] != ";":
                break
            i += 1
            eq = i
            while eq < n and value[eq] not in "=;,":
                eq += 1
            name = value[i:eq].strip().lower()
            i = eq
            param = ""
            if i < n and value[i] == "=":
                i += 1
                while i < n and value[i] in " \t":
                    i += 1
                if i < n and value[i] == '"':
                    i += 1
                    chars: list[str] = []
                    while i < n and value[i] != '"':
                        if value[i] == "\\" and i + 1 < n:
                            i += 1
                        chars.append(value[i])
                        i += 1
                    i += 1  # closing quote
                    param = "".join(chars)
                else:
                    stop = i
                    while stop < n and value[stop] not in ";,":
                        stop += 1
                    param = value[i:stop].strip()
                    i = stop
            if name == "rel":
                rels.extend(param.lower().split())
        # Skip to the comma separating this link from the next.
        while i < n and value[i] != ",":
            i += 1
        i += 1
        for rel in rels:
            links.setdefault(rel, target)
    return links
