"""The pagination styles of the ``http`` source, pure: the request each builds for a cursor
and the next cursor (and its reason) each reads from a response
(:mod:`syncd.sources.http.pagination`); the parts of :class:`HttpSource` that judge a page
(``end_status``, the first page's warnings) over a fake transport; and where the config lets
the offset and page styles put their parameters."""

from __future__ import annotations

import json
from typing import Any, cast

import jsonschema
import pytest
from multidict import CIMultiDict

from syncd.errors import ClientError, SourceError
from syncd.http.timeouts import Timeouts
from syncd.http.transport import Response, Transport
from syncd.plugins import Registry
from syncd.schema import connector_file_schema
from syncd.sources.base import SourceContext
from syncd.sources.http import HttpSource, validate_http_source
from syncd.sources.http.pagination import (
    Lack,
    Next,
    PageRequest,
    Pagination,
    Watched,
    build_pagination,
)

URL = "https://api.example/items"
BASE = PageRequest(URL, {"q": "x"}, None, {})


def answer(body: Any = None, **headers: str) -> Response:
    """A 200 response with ``body`` as JSON and ``headers`` (names case-insensitive)."""
    return Response(200, CIMultiDict(headers), URL, json.dumps(body).encode())


def follow(style: Pagination, cursor: str | None, records: list[Any], **headers: str) -> Next:
    """``style``'s next page after one holding ``records`` (in ``{"data": ...}``)."""
    body = {"data": records}
    return style.next(cursor, answer(body, **headers), body, records)


# --- cursor ------------------------------------------------------------------------------


def test_a_cursor_from_a_header_goes_back_in_a_header() -> None:
    style = build_pagination(
        {"in": "header", "cursor_param": "X-Cursor", "next_from": "header", "next_cursor": "X-Next"}
    )
    assert style.request(None, BASE) == BASE
    # Header names are case-insensitive, as the transport's responses are.
    found = follow(style, None, [{"id": 1}], **{"x-next": "tok-2"})
    assert found == Next("tok-2", "next cursor at header X-Next")
    assert style.request(found.cursor, BASE) == PageRequest(
        URL, {"q": "x"}, None, {"X-Cursor": "tok-2"}
    )
    ended = Next(
        None,
        "no next cursor at header X-Next",
        Lack(Watched("X-Next", "header"), "next cursor", "next_cursor"),
    )
    assert follow(style, "tok-2", [{"id": 2}]) == ended
    assert style.watched == (Watched("X-Next", "header"),)


@pytest.mark.parametrize(
    ("where", "value", "cursor", "sent"),
    [
        ("query", "cus_3", "cus_3", {"params": {"q": "x", "after": "cus_3"}}),
        ("query", 42, "42", {"params": {"q": "x", "after": "42"}}),
        ("header", 42, "42", {"headers": {"after": "42"}}),
        # In the body the cursor is the value's JSON text: a sort tuple goes back as it came.
        (
            "body",
            [1704067200000, "TCK-1"],
            '[1704067200000,"TCK-1"]',
            {"body": {"after": [1704067200000, "TCK-1"]}},
        ),
        ("body", 42, "42", {"body": {"after": 42}}),
        ("body", "cus_3", '"cus_3"', {"body": {"after": "cus_3"}}),
    ],
)
def test_a_last_record_cursor_of_each_json_kind(
    where: str, value: Any, cursor: str, sent: dict[str, Any]
) -> None:
    style = build_pagination(
        {"in": where, "cursor_param": "after", "next_from": "last_record", "next_cursor": "k"}
    )
    found = follow(style, None, [{"k": "first"}, {"k": value}])
    assert found == Next(cursor, "next cursor at 'k' of the last record")
    request = style.request(found.cursor, BASE)
    shown = {"params": request.params, "body": request.body, "headers": request.headers}
    assert shown == {"params": {"q": "x"}, "body": None, "headers": {}, **sent}


def test_an_array_cursor_cannot_go_in_the_query() -> None:
    style = build_pagination(
        {"cursor_param": "after", "next_from": "last_record", "next_cursor": "sort"}
    )
    with pytest.raises(SourceError) as failed:
        follow(style, None, [{"sort": [1, "a"]}])
    assert str(failed.value) == (
        "next cursor at 'sort' of the last record: a list cannot be sent as a query parameter "
        "or header; send it in the JSON body (`in: body`)"
    )


def test_a_last_record_without_the_cursor_fails_the_page() -> None:
    # A wrong path must not end every crawl after its first page, reported complete.
    style = build_pagination(
        {"cursor_param": "after", "next_from": "last_record", "next_cursor": "idd"}
    )
    with pytest.raises(SourceError) as failed:
        follow(style, None, [{"id": "a"}, {"id": "b"}])
    assert str(failed.value) == "next cursor 'idd' not in the last record"
    with pytest.raises(SourceError) as null:
        follow(style, None, [{"id": "a"}, {"idd": None}])
    assert str(null.value) == "next cursor 'idd' is null in the last record"
    # Only the last record counts: an earlier one may lack it.
    assert follow(style, None, [{"id": "a"}, {"idd": "b"}]).cursor == "b"
    assert follow(style, "b", []) == Next(None, "empty page")
    assert style.watched == (Watched("idd", "last_record"),)


def test_a_last_record_crawl_ends_on_its_end_signals() -> None:
    done = build_pagination({"next_from": "last_record", "next_cursor": "idd", "done": "end"})
    records = [{"id": "a"}]
    body = {"data": records, "end": True}
    assert done.next(None, answer(body), body, records) == Next(None, "'end' is true")
    more = build_pagination({"next_from": "last_record", "next_cursor": "idd", "more": "has_more"})
    body = {"data": records, "has_more": False}
    assert more.next(None, answer(body), body, records) == Next(None, "'has_more' is false")
    body = {"data": records, "has_more": True}
    with pytest.raises(SourceError) as failed:
        more.next(None, answer(body), body, records)
    assert str(failed.value) == (
        "'has_more' is true: more pages follow, but no next cursor at 'idd' of the last record"
    )
    # An empty page that says more follow cannot be the end either.
    body = {"data": [], "has_more": True}
    with pytest.raises(SourceError) as empty:
        more.next(None, answer(body), body, [])
    assert str(empty.value).startswith("'has_more' is true: more pages follow, but ")


# --- offset ------------------------------------------------------------------------------


def test_offset_parameters_in_the_body() -> None:
    style = build_pagination(
        {
            "type": "offset",
            "in": "body",
            "offset_param": "paging.start",
            "limit_param": "paging.size",
            "limit": 10,
        }
    )
    base = PageRequest(URL, {"q": "x"}, {"query": "q", "paging": {"sort": "id"}}, {})
    first = style.request(None, base)
    assert first.body == {"query": "q", "paging": {"sort": "id", "start": 0, "size": 10}}
    assert (first.params, first.headers) == ({"q": "x"}, {})
    assert style.request("7", base).body == {
        "query": "q",
        "paging": {"sort": "id", "start": 7, "size": 10},
    }
    assert base.body == {"query": "q", "paging": {"sort": "id"}}  # not changed in place


def test_offset_parameters_in_headers() -> None:
    style = build_pagination(
        {
            "type": "offset",
            "in": "header",
            "offset_param": "X-Offset",
            "limit_param": "X-Limit",
            "limit": 10,
        }
    )
    assert style.request(None, BASE) == PageRequest(
        URL, {"q": "x"}, None, {"X-Offset": "0", "X-Limit": "10"}
    )
    assert style.request("20", BASE).headers == {"X-Offset": "20", "X-Limit": "10"}


def test_offset_ends_on_a_total_header_whatever_the_page_size() -> None:
    style = build_pagination({"type": "offset", "limit": 10, "total_header": "X-Total-Count"})
    seven = [{"id": i} for i in range(7)]
    # The server gives fewer than asked: a short page is not the end while the total says so.
    assert follow(style, None, seven, **{"x-total-count": "25"}) == Next(
        "7", "7 of 25 records (header X-Total-Count)"
    )
    assert follow(style, "21", seven[:4], **{"X-Total-Count": "25"}) == Next(
        None, "25 of 25 records (header X-Total-Count)"
    )
    assert style.watched == (Watched("X-Total-Count", "header"),)


def test_offset_ends_on_a_total_in_the_body() -> None:
    style = build_pagination({"type": "offset", "limit": 10, "total": "meta.count"})
    records = [{"id": i} for i in range(7)]
    body = {"data": records, "meta": {"count": 14}}
    assert style.next("7", answer(body), body, records) == Next(
        None, "14 of 14 records (total 'meta.count')"
    )
    assert style.watched == (Watched("meta.count"),)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"type": "offset", "total_header": "X-Total-Count"},
            "header X-Total-Count not found in the response: cannot tell where the crawl ends",
        ),
        (
            {"type": "offset", "total": "meta.count"},
            "total 'meta.count' not found in the response: cannot tell where the crawl ends",
        ),
        (
            {"type": "page", "total_pages_header": "X-WP-TotalPages"},
            "header X-WP-TotalPages not found in the response: cannot tell where the crawl ends",
        ),
        (
            {"type": "page", "total_pages": "info.pages"},
            "total pages 'info.pages' not found in the response: cannot tell where the crawl ends",
        ),
    ],
)
def test_a_configured_total_missing_from_a_page_fails_it_naming_the_total(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(SourceError) as failed:
        follow(build_pagination(config), None, [{"id": 1}])
    assert str(failed.value) == message


def test_a_total_that_is_not_a_count_fails_the_page() -> None:
    style = build_pagination({"type": "offset", "total_header": "X-Total-Count"})
    with pytest.raises(SourceError) as failed:
        follow(style, None, [{"id": 1}], **{"X-Total-Count": "many"})
    assert str(failed.value) == 'header X-Total-Count is "many", expected a whole number'


# --- page --------------------------------------------------------------------------------


def test_page_parameters_in_the_body_and_in_headers() -> None:
    body = build_pagination(
        {
            "type": "page",
            "in": "body",
            "page_param": "page.number",
            "size": 50,
            "size_param": "page.size",
        }
    )
    base = PageRequest(URL, {}, {"filter": "open"}, {})
    assert body.request(None, base).body == {"filter": "open", "page": {"number": 1, "size": 50}}
    assert body.request("3", base).body == {"filter": "open", "page": {"number": 3, "size": 50}}
    headers = build_pagination({"type": "page", "in": "header", "page_param": "X-Page", "start": 0})
    assert headers.request(None, BASE) == PageRequest(URL, {"q": "x"}, None, {"X-Page": "0"})
    assert headers.request("4", BASE).headers == {"X-Page": "4"}


def test_page_ends_on_the_last_of_its_total_pages() -> None:
    style = build_pagination({"type": "page", "total_pages": "info.pages"})
    records = [{"id": 1}]
    body = {"data": records, "info": {"pages": 3}}
    assert style.next(None, answer(body), body, records) == Next(
        "2", "page 1 of 3 (total pages 'info.pages')"
    )
    assert style.next("3", answer(body), body, records) == Next(
        None, "page 3 of 3 (total pages 'info.pages')"
    )
    header = build_pagination({"type": "page", "start": 0, "total_pages_header": "X-WP-TotalPages"})
    assert follow(header, "1", records, **{"X-WP-TotalPages": "2"}) == Next(
        None, "page 2 of 2 (header X-WP-TotalPages)"
    )
    assert header.watched == (Watched("X-WP-TotalPages", "header"),)


def test_page_ends_on_a_short_page_only_with_a_size() -> None:
    sized = build_pagination({"type": "page", "size": 10})
    full, short = [{"id": i} for i in range(10)], [{"id": i} for i in range(5)]
    assert follow(sized, None, full) == Next("2", "page not empty")
    assert follow(sized, "2", short) == Next(None, "short page (5 of 10)")
    assert follow(sized, "3", []) == Next(None, "empty page")
    # Without a size, no page is short: only an empty one ends.
    assert follow(build_pagination({"type": "page"}), "2", short) == Next("3", "page not empty")


# --- the http source: end_status and the first page's warnings -------------------------


class FakeTransport:
    """Answers each request with the next of ``answers`` (a Response, or an error raised),
    and keeps what was asked."""

    timeouts = Timeouts()

    def __init__(self, *answers: Response | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []

    async def request(self, method: str, url: str, **kwargs: Any) -> Response:
        self.asked.append({"method": method, "url": url, **kwargs})
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def http_source(pagination: dict[str, Any], transport: FakeTransport) -> HttpSource:
    config = {"type": "http", "url": URL, "records": "data", "pagination": pagination}
    return HttpSource(config, SourceContext("c1", cast(Transport, transport)))


async def test_end_status_ends_a_crawl_after_its_first_page_only() -> None:
    pagination = {"type": "page", "end_status": [400]}
    refused = ClientError(400, "HTTP 400: rest_post_invalid_page_number")
    first = http_source(pagination, FakeTransport(refused))
    # On the first page the status is an error: the API has not shown any page exists.
    with pytest.raises(ClientError) as failed:
        await first.fetch_page(None)
    assert failed.value is refused
    later = http_source(pagination, FakeTransport(refused))
    page = await later.fetch_page("4")
    assert (page.records, page.next_cursor) == ([], None)
    assert later.last_page is not None
    assert later.last_page.reason == "status 400 past the last page (end_status)"
    # A status it does not name stays an error after the first page too.
    other = http_source(pagination, FakeTransport(ClientError(404)))
    with pytest.raises(ClientError):
        await other.fetch_page("4")


async def test_the_first_page_warns_of_a_missing_cursor_header() -> None:
    pagination = {"next_from": "header", "next_cursor": "X-Next"}
    source = http_source(pagination, FakeTransport(answer({"data": [{"id": 1}]})))
    page = await source.fetch_page(None)
    assert page.next_cursor is None
    assert source.last_page is not None
    assert source.last_page.reason == "no next cursor at header X-Next"
    assert source.last_page.warnings == ("header X-Next is not in the first page's response",)
    present = http_source(
        pagination, FakeTransport(answer({"data": [{"id": 1}]}, **{"x-next": "t"}))
    )
    await present.fetch_page(None)
    assert present.last_page is not None and present.last_page.warnings == ()


@pytest.mark.parametrize(
    "pagination",
    [
        {"type": "offset", "done": "end", "total_header": "X-Total"},
        {"type": "page", "done": "end", "total_pages_header": "X-Total"},
    ],
)
async def test_the_first_page_warns_of_a_missing_total_header(pagination: dict[str, Any]) -> None:
    # `done` ends the crawl before the total is read: only the warning tells of the header.
    source = http_source(pagination, FakeTransport(answer({"data": [{"id": 1}], "end": True})))
    await source.fetch_page(None)
    assert source.last_page is not None
    assert source.last_page.reason == "'end' is true"
    assert source.last_page.warnings == ("header X-Total is not in the first page's response",)


async def test_the_first_page_warns_of_a_cursor_missing_from_its_last_record() -> None:
    pagination = {"next_from": "last_record", "next_cursor": "@odata.id", "done": "end"}
    records = [{"@odata.id": "a"}, {"id": "b"}]
    source = http_source(pagination, FakeTransport(answer({"data": records, "end": True})))
    await source.fetch_page(None)
    assert source.last_page is not None
    assert source.last_page.warnings == ("'@odata.id' is not in the first page's last record",)
    # A key holding dots: the warning says how to write it.
    dotted = [{"id": "a"}, {"@odata.id": "b"}]
    hinted = http_source(pagination, FakeTransport(answer({"data": dotted, "end": True})))
    await hinted.fetch_page(None)
    assert hinted.last_page is not None
    assert hinted.last_page.warnings == (
        "'@odata.id' is not in the first page's last record (the key '@odata.id' is: write "
        "the JSON Pointer '/@odata.id')",
    )
    # An empty first page has no last record to judge.
    empty = http_source(pagination, FakeTransport(answer({"data": [], "end": True})))
    await empty.fetch_page(None)
    assert empty.last_page is not None and empty.last_page.warnings == ()


# --- the config: `in: header` for offset and page ----------------------------------------


@pytest.mark.parametrize(
    ("pagination", "errors"),
    [
        ({"type": "offset", "in": "header", "offset_param": "X-Offset"}, {}),
        ({"type": "page", "in": "header", "page_param": "X-Page", "size": 5}, {}),
        (
            {"type": "offset", "in": "header", "offset_param": "X Offset"},
            {"source.pagination.offset_param": "Invalid header name"},
        ),
        (
            {"type": "page", "in": "header", "size_param": "/page/size"},
            {"source.pagination.size_param": "Invalid header name"},
        ),
        # The same names are fine where they are a path or a query parameter.
        ({"type": "page", "in": "body", "size_param": "/page/size"}, {}),
        ({"type": "offset", "offset_param": "X Offset"}, {}),
    ],
)
def test_offset_and_page_names_in_headers_are_header_names(
    pagination: dict[str, Any], errors: dict[str, str]
) -> None:
    connector = {"name": "n", "source": {"type": "http", "url": URL, "pagination": pagination}}
    assert validate_http_source(connector["source"]) == errors
    # The editors' JSON Schema says the same.
    valid = jsonschema.Draft202012Validator(connector_file_schema(Registry.builtin()))
    assert valid.is_valid(connector) == (not errors)
