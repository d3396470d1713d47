"""The five pagination styles of the ``http`` source (DESIGN.md §8).

A style turns a cursor into a request (its query parameters, JSON body and headers) and a
response into the next cursor, with the reason it continues or ends (:class:`Next`, shown by
a preview). Cursors are opaque strings to the rest of syncd — a token for ``cursor`` (the
JSON text of the value when it goes in the body, so that a number or a sort tuple is sent
back as it came), an absolute URL for ``next_url`` and ``link_header``, a number for
``offset`` and ``page`` (a JSON object when they check that the list did not shift under
them: :mod:`~syncd.sources.http.shifts`) — so a checkpoint resumes each of them exactly.

A crawl that cannot tell whether more pages exist never passes for complete: a configured
end signal (``more``, ``done``, ``total``, ``total_pages``) that a page lacks fails it, and
so does a page that says more pages follow without the means to reach them. A cursor taken
from the last record ends only on an empty page or an end signal: a last record without it
fails the page, since a wrong path would otherwise end every crawl after its first page.
A crawl that ends because the next cursor or next URL had no value says where it looked
(:attr:`Next.lacking`): the source warns when that place was absent from every page.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from syncd.errors import SourceError
from syncd.http.paginator import describe_cursor
from syncd.http.transport import Response
from syncd.paths import MISSING, get_path, parse_path, set_path
from syncd.sources.http.continuation import Lack, Next, Place, Watched
from syncd.sources.http.links import parse_link_header, same_origin_url
from syncd.sources.http.shifts import (
    OffsetCursor,
    PageCursor,
    continues,
    default_overlap,
    ids_of,
    leading_known,
    page_covered,
)

__all__ = [
    "PAGINATION_TYPES",
    "Lack",
    "Next",
    "PageRequest",
    "Pagination",
    "Watched",
    "build_pagination",
    "parse_link_header",
]

PAGINATION_TYPES = ("cursor", "next_url", "link_header", "offset", "page")

QueryParams = dict[str, str | int | float]

#: Where a style reads a value: the response body, a header, or the page's last record.

_TRUE = (True, 1, "true")
_FALSE = (False, 0, "false")


@dataclass(frozen=True)
class PageRequest:
    """What one page request sends: the URL, query parameters, JSON body (``None``: none)
    and headers of the source, with the page's pagination values placed in them."""

    url: str
    params: QueryParams = field(default_factory=dict)
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def with_value(self, where: str, name: str, value: Any) -> PageRequest:
        """This request with ``value`` at ``name`` in the query (``where="query"``), the
        JSON body (``"body"``, ``name`` a path) or the headers (``"header"``)."""
        if where == "body":
            return replace(self, body=set_path(self.body or {}, name, value))
        if where == "header":
            return replace(self, headers={**self.headers, name: _text(value, name)})
        return replace(self, params={**self.params, name: _text(value, name)})


class Pagination(Protocol):
    """One pagination style."""

    @property
    def end_status(self) -> frozenset[int]:
        """Statuses that, answered for a page after the first, end the crawl."""
        ...

    @property
    def watched(self) -> tuple[Watched, ...]:
        """The places it reads (a preview warns when the first page lacks one)."""
        ...

    def request(self, cursor: str | None, base: PageRequest) -> PageRequest:
        """The request for the page at ``cursor`` (``None``: the first page); ``base`` is the
        source's own (with the incremental mark)."""
        ...

    def next(self, cursor: str | None, response: Response, body: Any, records: list[Any]) -> Next:
        """The page after this one, and why."""
        ...

    def at_end_status(self, cursor: str, status: int) -> Next:
        """What follows a page after the first answered with one of :attr:`end_status`."""
        ...


class _Style:
    """What every style shares: an end status ends the crawl."""

    def at_end_status(self, cursor: str, status: int) -> Next:
        """See :class:`Pagination`."""
        return Next(None, f"status {status} past the last page (end_status)")


def _text(value: Any, name: str) -> str:
    """A pagination value as query or header text (a body takes any JSON value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise SourceError(
        f"{name}: a {type(value).__name__} cannot be sent as a query parameter or header; "
        "send it in the JSON body (`in: body`)"
    )


def _flag(body: Any, path: str) -> bool:
    """The boolean at ``path``: a page without it fails, as does anything but a boolean
    (or 0/1, "true"/"false")."""
    value = get_path(body, path)
    if value is MISSING:
        raise SourceError(
            f"end signal {path!r} not found in the response: cannot tell whether more pages follow"
        )
    if any(value is t or (type(value) is type(t) and value == t) for t in _TRUE):
        return True
    if any(value is f or (type(value) is type(f) and value == f) for f in _FALSE):
        return False
    raise SourceError(f"end signal {path!r} is {json.dumps(value)[:60]}, expected true or false")


def _count(value: Any, where: str) -> int:
    """A total read from the body or a header: a non-negative integer."""
    if value is MISSING or value is None:
        raise SourceError(f"{where} not found in the response: cannot tell where the crawl ends")
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise SourceError(f"{where} is {json.dumps(value)[:60]}, expected a whole number")


@dataclass(frozen=True)
class _Ends(_Style):
    """The explicit end signals every style but ``link_header`` may have."""

    more: str | None = None
    done: str | None = None
    end_status: frozenset[int] = frozenset()

    @property
    def watched(self) -> tuple[Watched, ...]:
        """See :class:`Pagination`."""
        return tuple(Watched(p) for p in (self.more, self.done) if p is not None)

    def said(self, body: Any) -> tuple[bool | None, str]:
        """What the end signals say: ``(True, why)`` the crawl ends, ``(False, why)`` more
        pages follow, ``(None, "")`` none is configured."""
        if self.done is not None and _flag(body, self.done):
            return True, f"{self.done!r} is true"
        if self.more is not None:
            if not _flag(body, self.more):
                return True, f"{self.more!r} is false"
            return False, f"{self.more!r} is true"
        if self.done is not None:
            return False, f"{self.done!r} is false"
        return None, ""

    def announced(self, why: str, missing: str) -> SourceError:
        """A page that says more follow, without the next one's place."""
        return SourceError(f"{why}: more pages follow, but {missing}")


@dataclass(frozen=True)
class CursorPagination(_Ends):
    """A token from the body, a header or the last record, sent back as a query parameter,
    in the JSON body or as a header."""

    cursor_param: str = "cursor"
    where: str = "query"
    next_cursor: str = "next_cursor"
    next_from: Place = "body"

    @property
    def watched(self) -> tuple[Watched, ...]:
        """See :class:`Pagination`."""
        return (Watched(self.next_cursor, self.next_from), *super().watched)

    @property
    def _lack(self) -> Lack:
        return Lack(Watched(self.next_cursor, self.next_from), "next cursor", "next_cursor")

    def request(self, cursor: str | None, base: PageRequest) -> PageRequest:
        """See :class:`Pagination`."""
        if cursor is None:
            return base
        value: Any = cursor
        if self.where == "body":
            try:
                value = json.loads(cursor)
            except ValueError:
                raise SourceError(f"invalid cursor {describe_cursor(cursor)}") from None
        return base.with_value(self.where, self.cursor_param, value)

    def next(self, cursor: str | None, response: Response, body: Any, records: list[Any]) -> Next:
        """See :class:`Pagination`."""
        ended, why = self.said(body)
        if ended:
            return Next(None, why)
        value, place = self._found(response, body, records)
        if value is MISSING or value is None or value == "":
            if ended is False:
                raise self.announced(why, f"no next cursor at {place}")
            if self.next_from == "last_record":
                if not records:
                    return Next(None, "empty page")
                # Only an empty page or an end signal ends such a crawl: a last record
                # without the value is a wrong path or a broken record, never "no more".
                if value is MISSING:
                    raise SourceError(f"next cursor {self.next_cursor!r} not in the last record")
                raise SourceError(
                    f"next cursor {self.next_cursor!r} is {json.dumps(value)} in the last record"
                )
            return Next(None, f"no next cursor at {place}", self._lack)
        if self.where == "body":
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        else:
            text = _text(value, f"next cursor at {place}")
        return Next(text, f"next cursor at {place}" + (f" ({why})" if why else ""))

    def _found(self, response: Response, body: Any, records: list[Any]) -> tuple[Any, str]:
        if self.next_from == "header":
            return response.headers.get(self.next_cursor, MISSING), f"header {self.next_cursor}"
        if self.next_from == "last_record":
            last = records[-1] if records else None
            return get_path(last, self.next_cursor), f"{self.next_cursor!r} of the last record"
        return get_path(body, self.next_cursor), repr(self.next_cursor)


@dataclass(frozen=True)
class _UrlPagination(_Style):
    """Shared by ``next_url`` and ``link_header``: the cursor is the next page's URL."""

    def request(self, cursor: str | None, base: PageRequest) -> PageRequest:
        """See :class:`Pagination`. A next URL is used as given: it carries its own query."""
        if cursor is None:
            return base
        return replace(base, url=cursor, params={})

    @staticmethod
    def _absolute(response: Response, link: str) -> str:
        # The origin is the one the source asked (a redirect elsewhere does not move it).
        return same_origin_url(link, response.url, response.requested_url or response.url)


@dataclass(frozen=True)
class NextUrlPagination(_Ends, _UrlPagination):
    """An absolute or relative URL in the body."""

    next_url_path: str = "next"

    @property
    def watched(self) -> tuple[Watched, ...]:
        """See :class:`Pagination`."""
        return (Watched(self.next_url_path), *super().watched)

    def next(self, cursor: str | None, response: Response, body: Any, records: list[Any]) -> Next:
        """See :class:`Pagination`."""
        ended, why = self.said(body)
        if ended:
            return Next(None, why)
        value = get_path(body, self.next_url_path)
        if value is MISSING or value is None or value == "":
            if ended is False:
                raise self.announced(why, f"no next URL at {self.next_url_path!r}")
            lack = Lack(Watched(self.next_url_path), "next URL", "next_url")
            return Next(None, f"no next URL at {self.next_url_path!r}", lack)
        if not isinstance(value, str):
            raise SourceError(
                f"next URL at {self.next_url_path!r} is a {type(value).__name__}, expected a string"
            )
        return Next(self._absolute(response, value), f"next URL at {self.next_url_path!r}")


@dataclass(frozen=True)
class LinkHeaderPagination(_UrlPagination):
    """RFC 8288 ``Link: <…>; rel="next"``."""

    end_status: frozenset[int] = frozenset()
    watched: tuple[Watched, ...] = ()

    def next(self, cursor: str | None, response: Response, body: Any, records: list[Any]) -> Next:
        """See :class:`Pagination`."""
        headers = response.headers
        getall = getattr(headers, "getall", None)
        values: list[str] = (
            list(getall("Link", [])) if callable(getall) else [headers.get("Link", "")]
        )
        link = parse_link_header(", ".join(v for v in values if v)).get("next")
        if not link:
            return Next(None, 'no Link rel="next"')
        return Next(self._absolute(response, link), 'Link rel="next"')


@dataclass(frozen=True)
class OffsetPagination(_Ends):
    """``offset``/``limit`` parameters; the offset advances by the records received. With an
    ``overlap``, each request after the first starts that many records early, and a list
    that moved back under the crawl is read again (:mod:`~syncd.sources.http.shifts`)."""

    offset_param: str = "offset"
    limit_param: str = "limit"
    limit: int = 100
    where: str = "query"
    total: str | None = None
    total_header: str | None = None
    overlap: int = 0
    id_path: tuple[str, ...] = ("id",)

    @property
    def watched(self) -> tuple[Watched, ...]:
        """See :class:`Pagination`."""
        return (*_totals(self.total, self.total_header), *super().watched)

    def request(self, cursor: str | None, base: PageRequest) -> PageRequest:
        """See :class:`Pagination`."""
        offset = OffsetCursor.read(cursor).offset
        placed = base.with_value(self.where, self.offset_param, offset)
        return placed.with_value(self.where, self.limit_param, self.limit)

    def next(self, cursor: str | None, response: Response, body: Any, records: list[Any]) -> Next:
        """See :class:`Pagination`."""
        at = OffsetCursor.read(cursor)
        ids = ids_of(records, self.id_path) if self.overlap else []
        if not continues(at, ids):
            back = at.step_back(self.limit, self.overlap)
            return Next(
                back.text(),
                f"none of the records read last is in the page at offset {at.offset}: the "
                f"list moved back; reading again from offset {back.offset}",
            )
        found = self._ends(at.offset, response, body, records)
        skip = leading_known(at, ids)
        if found.cursor is None:
            return Next(None, found.reason, skip=skip)
        return Next(at.after(int(found.cursor), ids, self.overlap).text(), found.reason, skip=skip)

    def at_end_status(self, cursor: str, status: int) -> Next:
        """See :class:`Pagination`. Where the records read last were expected, an end
        status means the list lost records: read again from further back, once a crawl."""
        at = OffsetCursor.read(cursor)
        if not self.overlap or not at.known or at.offset == 0 or at.ended:
            return super().at_end_status(cursor, status)
        back = at.step_back(self.limit, self.overlap, ended=True)
        return Next(
            back.text(),
            f"status {status} at offset {at.offset}, where records read last were expected: "
            f"reading again from offset {back.offset}",
        )

    def _ends(self, offset: int, response: Response, body: Any, records: list[Any]) -> Next:
        """The page after the one at ``offset`` (its cursor: the plain offset), and why."""
        ended, why = self.said(body)
        if ended:
            return Next(None, why)
        received = len(records)
        after = offset + received
        total, where = self._total(response, body)
        if total is not None:
            if after >= total:
                return Next(None, f"{after} of {total} records ({where})")
            if not received:
                raise SourceError(
                    f"the page at offset {offset} is empty, but {where} says {total} records: "
                    "cannot tell whether the crawl is complete"
                )
            return Next(str(after), f"{after} of {total} records ({where})")
        if ended is False:
            if not received:
                raise self.announced(why, f"the page at offset {offset} is empty")
            return Next(str(after), why)
        if not received:
            return Next(None, "empty page")
        if received < self.limit:
            return Next(None, f"short page ({received} of {self.limit}), no total configured")
        return Next(str(after), f"full page ({received} of {self.limit})")

    def _total(self, response: Response, body: Any) -> tuple[int | None, str]:
        if self.total is None and self.total_header is None:
            return None, ""
        return _records_total(self.total, self.total_header, response, body)


@dataclass(frozen=True)
class PagePagination(_Ends):
    """A page-number parameter. With the records' total (``total``, ``total_header``), a
    list that lost records under the crawl is read again (:mod:`~syncd.sources.http.shifts`)."""

    page_param: str = "page"
    start: int = 1
    where: str = "query"
    size: int | None = None
    size_param: str = "per_page"
    total_pages: str | None = None
    total_pages_header: str | None = None
    total: str | None = None
    total_header: str | None = None

    @property
    def watched(self) -> tuple[Watched, ...]:
        """See :class:`Pagination`."""
        pages = _totals(self.total_pages, self.total_pages_header)
        return (*pages, *_totals(self.total, self.total_header), *super().watched)

    def request(self, cursor: str | None, base: PageRequest) -> PageRequest:
        """See :class:`Pagination`."""
        page = PageCursor.read_cursor(cursor, self.start).page
        placed = base.with_value(self.where, self.page_param, page)
        if self.size is None:
            return placed
        return placed.with_value(self.where, self.size_param, self.size)

    def next(self, cursor: str | None, response: Response, body: Any, records: list[Any]) -> Next:
        """See :class:`Pagination`."""
        at = PageCursor.read_cursor(cursor, self.start)
        if self.total is None and self.total_header is None:
            return self._ends(at.page, response, body, records)
        total, where = _records_total(self.total, self.total_header, response, body)
        size = self.size or at.size or len(records)
        if not size:  # an empty first page, nothing to check
            return self._ends(at.page, response, body, records)
        covered = page_covered(at, self.start, total, size, len(records))
        following = at.following(self.start, covered, total, size)
        if covered.gap:
            return Next(
                following.text(),
                f"{where} fell from {at.total} to {total}: records moved back over the pages "
                f"read; reading again from page {following.page}",
            )
        found = self._ends(at.page, response, body, records)
        if found.cursor is None:
            return found
        if covered.read >= total:
            return Next(None, f"{covered.read} of {total} records ({where})")
        return Next(following.text(), found.reason)

    def at_end_status(self, cursor: str, status: int) -> Next:
        """See :class:`Pagination`. Asked for while the total said more records follow, an
        end status means the list lost records: read the last page again, once a crawl."""
        again = PageCursor.read_cursor(cursor, self.start).last_page_again(self.start)
        if again is None:
            return super().at_end_status(cursor, status)
        return Next(
            again.text(),
            f"status {status} while the total said more records follow: reading page "
            f"{again.page} again",
        )

    def _ends(self, page: int, response: Response, body: Any, records: list[Any]) -> Next:
        """The page after page number ``page`` (its cursor: the plain number), and why."""
        ended, why = self.said(body)
        if ended:
            return Next(None, why)
        received = len(records)
        if not received:
            if ended is False:
                raise self.announced(why, f"page {page} is empty")
            return Next(None, "empty page")
        pages, where = self._pages(response, body)
        if pages is not None:
            index = page - self.start + 1
            following = str(page + 1) if index < pages else None
            return Next(following, f"page {index} of {pages} ({where})")
        if ended is False:
            return Next(str(page + 1), why)
        if self.size is not None and received < self.size:
            return Next(None, f"short page ({received} of {self.size})")
        return Next(str(page + 1), "page not empty")

    def _pages(self, response: Response, body: Any) -> tuple[int | None, str]:
        if self.total_pages is not None:
            where = f"total pages {self.total_pages!r}"
            return _count(get_path(body, self.total_pages), where), where
        if self.total_pages_header is not None:
            where = f"header {self.total_pages_header}"
            return _count(response.headers.get(self.total_pages_header, MISSING), where), where
        return None, ""


def _records_total(
    path: str | None, header: str | None, response: Response, body: Any
) -> tuple[int, str]:
    """The records' total, from the body at ``path`` or from ``header`` (one is set), and
    where it was read."""
    if path is not None:
        where = f"total {path!r}"
        return _count(get_path(body, path), where), where
    where = f"header {header}"
    return _count(response.headers.get(str(header), MISSING), where), where


def _totals(path: str | None, header: str | None) -> tuple[Watched, ...]:
    """The places of a total: a body path, a header, or neither."""
    if path is not None:
        return (Watched(path),)
    return (Watched(header, "header"),) if header is not None else ()


def build_pagination(config: Mapping[str, Any] | None, id_field: str | None = None) -> Pagination:
    """The style described by a ``pagination`` config, validated by its model
    (:mod:`~syncd.sources.http.pagination_config`); cursor by default. ``id_field``: the
    path of the records' ids, which an ``offset`` crawl checks its overlap with (without
    it, and without ``overlap`` configured, it has none)."""
    cfg = dict(config or {})
    kind = cfg.get("type", "cursor")
    ends: dict[str, Any] = {"end_status": frozenset(cfg.get("end_status") or ())}
    if kind != "link_header":
        ends.update(more=cfg.get("more"), done=cfg.get("done"))
    if kind == "cursor":
        return CursorPagination(
            cursor_param=cfg.get("cursor_param", "cursor"),
            where=cfg.get("in", "query"),
            next_cursor=cfg.get("next_cursor", "next_cursor"),
            next_from=cfg.get("next_from", "body"),
            **ends,
        )
    if kind == "next_url":
        return NextUrlPagination(next_url_path=cfg.get("next_url", "next"), **ends)
    if kind == "link_header":
        return LinkHeaderPagination(**ends)
    if kind == "offset":
        limit = int(cfg.get("limit", 100))
        overlap = cfg.get("overlap")
        if overlap is None:
            overlap = default_overlap(limit) if id_field is not None else 0
        return OffsetPagination(
            offset_param=cfg.get("offset_param", "offset"),
            limit_param=cfg.get("limit_param", "limit"),
            limit=limit,
            where=cfg.get("in", "query"),
            total=cfg.get("total"),
            total_header=cfg.get("total_header"),
            overlap=min(int(overlap), limit - 1),
            id_path=parse_path(id_field or "id"),
            **ends,
        )
    if kind == "page":
        size = cfg.get("size")
        return PagePagination(
            page_param=cfg.get("page_param", "page"),
            start=int(cfg.get("start", 1)),
            where=cfg.get("in", "query"),
            size=int(size) if size is not None else None,
            size_param=cfg.get("size_param", "per_page"),
            total_pages=cfg.get("total_pages"),
            total_pages_header=cfg.get("total_pages_header"),
            total=cfg.get("total"),
            total_header=cfg.get("total_header"),
            **ends,
        )
    raise SourceError(f"unknown pagination type {kind!r}")
