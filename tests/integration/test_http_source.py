"""The ``http`` source end to end against the fake source server, and its pure parts."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from syncd.config.secrets import check_refs, redact_source, resolve_refs
from syncd.errors import (
    Aborted,
    ClientTimeoutError,
    PaginationLoopError,
    SourceError,
)
from syncd.http.paginator import AsyncCursorPaginator, CancelToken
from syncd.http.timeouts import Timeouts
from syncd.http.transport import Response, Transport
from syncd.models import Page
from syncd.observability.logs import MASK
from syncd.paths import MSG_PATH, get_path
from syncd.plugins import Registry
from syncd.sources import StatefulSource
from syncd.sources.base import SourceContext
from syncd.sources.http import HttpSource, validate_http_source
from syncd.sources.http.pagination import NextUrlPagination, parse_link_header
from tests.integration.sourceserver import SourceServer, make_records


@pytest.fixture
async def transport() -> AsyncIterator[Transport]:
    async def no_sleep(seconds: float) -> None:
        return None

    async with Transport(sleep=no_sleep, timeouts=Timeouts(read=5.0, connect=2.0)) as t:
        yield t


@pytest.fixture
async def server() -> AsyncIterator[SourceServer]:
    async with SourceServer(25, page_size=10) as s:
        yield s


#: The clock of the sources made here: a crawl's start is exact.
NOW = datetime(2024, 6, 1, 12, 0, 0, 250000, tzinfo=UTC)
STARTED = "2024-06-01T12:00:00.250000Z"


def make_source(
    config: Mapping[str, Any],
    transport: Transport,
    *,
    state: Mapping[str, Any] | None = None,
    resuming: bool = False,
) -> HttpSource:
    context = SourceContext(
        "c1", transport, state=dict(state or {}), resuming=resuming, now=lambda: NOW
    )
    return HttpSource(config, context)


async def crawl(source: HttpSource, **kwargs: Any) -> list[Page]:
    return [page async for page in AsyncCursorPaginator(source.fetch_page, **kwargs)]


def ids(pages: list[Page]) -> list[str]:
    return [record["id"] for page in pages for record in page.records]


ALL_IDS = [f"item-{i:05d}" for i in range(25)]


# --- pagination styles end to end -----------------------------------------------------


async def test_cursor_pagination(transport: Transport, server: SourceServer) -> None:
    config = {
        "type": "http",
        "url": server.items_url,
        "records": "data",
        "pagination": {"type": "cursor", "cursor_param": "cursor", "next_cursor": "next_cursor"},
    }
    pages = await crawl(make_source(config, transport))
    assert [len(p.records) for p in pages] == [10, 10, 5]
    assert ids(pages) == ALL_IDS
    assert [p.next_cursor for p in pages] == ["page-1", "page-2", None]
    assert server.cursors == [None, "page-1", "page-2"]


async def test_cursor_is_the_default_and_params_are_sent(
    transport: Transport, server: SourceServer
) -> None:
    config = {"url": server.items_url, "records": "data", "params": {"limit": 5, "x": True}}
    pages = await crawl(make_source(config, transport))
    assert len(pages) == 5
    assert ids(pages) == ALL_IDS
    assert all(r.query["limit"] == "5" and r.query["x"] == "true" for r in server.requests)


async def test_next_url_pagination_resolves_relative_urls(
    transport: Transport, server: SourceServer
) -> None:
    config = {
        "url": f"{server.url}/next",
        "params": {"limit": 10},
        "records": "data",
        "pagination": {"type": "next_url", "next_url": "links.next"},
    }
    pages = await crawl(make_source(config, transport))
    assert ids(pages) == ALL_IDS
    assert pages[0].next_cursor == f"{server.url}/next?page=1&limit=10"
    assert [r.query for r in server.requests] == [
        {"limit": "10"},
        {"page": "1", "limit": "10"},
        {"page": "2", "limit": "10"},
    ]


async def test_link_header_pagination_with_a_bare_array_body(
    transport: Transport, server: SourceServer
) -> None:
    config = {
        "url": f"{server.url}/link",
        "params": {"limit": 10},
        "pagination": {"type": "link_header"},
    }
    pages = await crawl(make_source(config, transport))
    assert ids(pages) == ALL_IDS
    assert [r.query.get("page") for r in server.requests] == [None, "1", "2"]


@pytest.mark.parametrize(("count", "sizes"), [(25, [10, 10, 5]), (20, [10, 10, 0]), (0, [0])])
async def test_offset_pagination_ends_on_a_short_or_empty_page(
    transport: Transport, server: SourceServer, count: int, sizes: list[int]
) -> None:
    server.set_records(count)
    config = {
        "url": f"{server.url}/offset",
        "records": "items",
        "pagination": {
            "type": "offset",
            "offset_param": "offset",
            "limit_param": "limit",
            "limit": 10,
            "overlap": 0,  # the requests of the plain rule, none of them early
        },
    }
    pages = await crawl(make_source(config, transport))
    assert [len(p.records) for p in pages] == sizes
    assert [r.query["offset"] for r in server.requests] == [str(10 * i) for i in range(len(sizes))]
    assert [p.next_cursor for p in pages] == [
        *[str(10 * (i + 1)) for i in range(len(sizes) - 1)],
        None,
    ]


@pytest.mark.parametrize(
    ("count", "offsets", "sizes"),
    [(25, [0, 7, 14, 21], [10, 7, 7, 1]), (20, [0, 7, 14], [10, 7, 3]), (0, [0], [0])],
)
async def test_offset_pagination_with_its_default_overlap_ends_on_a_short_or_empty_page(
    transport: Transport, server: SourceServer, count: int, offsets: list[int], sizes: list[int]
) -> None:
    # Three records early from the second request on (a third of the limit at most): each
    # request brings seven new ones, the three read already are not handed on again; the
    # end is still the first short page (21: four records, 21-24).
    server.set_records(count)
    config = {
        "url": f"{server.url}/offset",
        "records": "items",
        "pagination": {"type": "offset", "limit": 10},
    }
    pages = await crawl(make_source(config, transport))
    assert [len(p.records) for p in pages] == sizes
    assert [r.query["offset"] for r in server.requests] == [str(o) for o in offsets]
    assert ids(pages) == ALL_IDS[:count]
    assert pages[-1].next_cursor is None


async def test_page_pagination_ends_on_an_empty_page(
    transport: Transport, server: SourceServer
) -> None:
    config = {
        "url": f"{server.url}/pages",
        "params": {"per_page": 10},
        "records": "results",
        "pagination": {"type": "page", "page_param": "page", "start": 1},
    }
    pages = await crawl(make_source(config, transport))
    assert [len(p.records) for p in pages] == [10, 10, 5, 0]
    assert [r.query["page"] for r in server.requests] == ["1", "2", "3", "4"]
    assert ids(pages) == ALL_IDS


async def test_empty_source_is_one_empty_page(transport: Transport, server: SourceServer) -> None:
    server.set_records(0)
    pages = await crawl(make_source({"url": server.items_url, "records": "data"}, transport))
    assert pages == [Page([], None)]


async def test_looping_cursor_is_detected(transport: Transport, server: SourceServer) -> None:
    source = make_source({"url": f"{server.url}/loop", "records": "data"}, transport)
    with pytest.raises(PaginationLoopError, match="'a'"):
        await crawl(source)
    assert [r.cursor for r in server.requests] == [None, "a", "b"]


async def test_max_pages_stops_early(transport: Transport, server: SourceServer) -> None:
    source = make_source({"url": server.items_url, "records": "data", "max_pages": 2}, transport)
    pages = await crawl(source)
    assert [p.next_cursor for p in pages] == ["page-1", None]
    assert server.cursors == [None, "page-1"]


# --- records, headers, secrets --------------------------------------------------------


async def test_missing_records_path_is_a_source_error(
    transport: Transport, server: SourceServer
) -> None:
    source = make_source({"url": server.items_url, "records": "payload.items"}, transport)
    with pytest.raises(SourceError, match=r"'payload\.items' not found"):
        await source.fetch_page(None)


async def test_body_that_is_not_an_array_needs_a_records_path(
    transport: Transport, server: SourceServer
) -> None:
    source = make_source({"url": server.items_url}, transport)
    with pytest.raises(SourceError, match="expected an array"):
        await source.fetch_page(None)


async def test_header_references_are_resolved_per_request(
    transport: Transport, server: SourceServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_file = tmp_path / "key"
    secret_file.write_text("file-secret-1\n")
    monkeypatch.setenv("SYNCD_TEST_TOKEN", "env-secret")
    config = {
        "url": server.items_url,
        "records": "data",
        "headers": {
            "Authorization": "Bearer ${env:SYNCD_TEST_TOKEN}",
            "X-Key": f"${{file:{secret_file}}}",
            "X-Plain": "plain",
        },
    }
    original = copy.deepcopy(config)
    source = make_source(config, transport)
    await source.fetch_page(None)
    secret_file.write_text("file-secret-2\n")
    await source.fetch_page("page-1")
    assert config == original  # never stored resolved
    seen = [
        (r.headers["Authorization"], r.headers["X-Key"], r.headers["X-Plain"])
        for r in server.requests
    ]
    assert seen == [
        ("Bearer env-secret", "file-secret-1", "plain"),
        ("Bearer env-secret", "file-secret-2", "plain"),
    ]


async def test_missing_reference_is_an_error_naming_it(
    transport: Transport, server: SourceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SYNCD_TEST_MISSING", raising=False)
    config = {
        "url": server.items_url,
        "headers": {"Authorization": "Bearer ${env:SYNCD_TEST_MISSING}"},
    }
    source = make_source(config, transport)
    with pytest.raises(SourceError, match=r"\$\{env:SYNCD_TEST_MISSING\}"):
        await source.fetch_page(None)
    assert server.requests == []


async def test_resolved_header_with_a_line_break_is_refused(
    transport: Transport, server: SourceServer, tmp_path: Path
) -> None:
    secret_file = tmp_path / "key"
    secret_file.write_text("line1\nX-Injected: yes\n")
    config = {"url": server.items_url, "headers": {"X-Key": f"${{file:{secret_file}}}"}}
    with pytest.raises(SourceError, match="X-Key: resolved value contains a line break") as info:
        await make_source(config, transport).fetch_page(None)
    assert "line1" not in str(info.value)
    assert server.requests == []


# --- incremental ----------------------------------------------------------------------

INCREMENTAL = {"field": "updated_at", "param": "updated_since"}


async def test_incremental_high_water_mark(transport: Transport, server: SourceServer) -> None:
    config = {"url": server.items_url, "records": "data", "incremental": INCREMENTAL}
    first = make_source(config, transport)
    assert isinstance(first, StatefulSource)
    await crawl(first)
    assert "updated_since" not in server.requests[0].query
    last = server.records[-1]["updated_at"]
    assert first.checkpoint() == {"since": None, "high_water": last, "started": STARTED}

    # Next run: sends the high-water mark; sees the boundary record and the new ones.
    server.set_records(make_records(30))
    server.requests.clear()
    second = make_source(config, transport, state=first.checkpoint())
    pages = await crawl(second)
    assert server.requests[0].query["updated_since"] == last
    assert ids(pages) == [f"item-{i:05d}" for i in range(24, 30)]
    assert second.checkpoint() == {
        "since": last,
        "high_water": server.records[-1]["updated_at"],
        "started": STARTED,
    }
    # The parameter is sent with every page, not only the first.
    assert all(r.query["updated_since"] == last for r in server.requests)


async def test_incremental_resume_keeps_the_interrupted_crawls_since(
    transport: Transport, server: SourceServer
) -> None:
    config = {"url": server.items_url, "records": "data", "incremental": INCREMENTAL}
    since = server.records[3]["updated_at"]
    state = {"since": since, "high_water": server.records[12]["updated_at"]}
    source = make_source(config, transport, state=state, resuming=True)
    assert source.checkpoint() == state
    await source.fetch_page("page-1")
    assert server.requests[0].query == {"cursor": "page-1", "updated_since": since}
    # A crawl begun before starts were kept has none: its mark stays the largest seen.
    assert source.checkpoint() == {"since": since, "high_water": server.records[22]["updated_at"]}
    # One that has one keeps it, though its clock reads later now.
    kept = {**state, "started": "2024-05-31T23:00:00.000000Z"}
    resumed = make_source(config, transport, state=kept, resuming=True)
    await resumed.fetch_page("page-1")
    assert resumed.checkpoint()["started"] == "2024-05-31T23:00:00.000000Z"


async def test_incremental_numeric_field(transport: Transport, server: SourceServer) -> None:
    server.set_records([{"id": str(i), "version": v} for i, v in enumerate([3, 10, 9])])
    config = {
        "url": server.items_url,
        "records": "data",
        "incremental": {"field": "version", "param": "v"},
    }
    source = make_source(config, transport, state={"high_water": 2})
    await crawl(source)
    assert server.requests[0].query["v"] == "2"
    # Numeric comparison: 10 > 9 (as text, "9" > "10").
    assert source.checkpoint() == {"since": 2, "high_water": 10, "started": STARTED}


# --- timeouts, retries and abort through the whole stack -------------------------------


async def test_explicit_timeout_overrides_the_transport_default(
    transport: Transport, server: SourceServer
) -> None:
    server.hang_on(None)
    source = make_source(
        {"url": server.items_url, "records": "data", "timeout": {"read": 0.2}}, transport
    )
    started = time.monotonic()
    with pytest.raises(ClientTimeoutError):
        await source.fetch_page(None)
    assert time.monotonic() - started < 2.0


async def test_paginator_retries_server_errors_from_the_source(server: SourceServer) -> None:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    server.fail_next(503, times=2)
    async with Transport(retries=0) as transport:
        source = make_source({"url": server.items_url, "records": "data"}, transport)
        pages = await crawl(source, max_retries=3, sleep=sleep)
    assert ids(pages) == ALL_IDS
    assert sleeps == [2.0, 4.0]
    assert server.cursors == [None, None, None, "page-1", "page-2"]


async def test_abort_interrupts_a_hung_page_request(
    transport: Transport, server: SourceServer
) -> None:
    server.hang_on("page-1")
    token = CancelToken()
    source = make_source({"url": server.items_url, "records": "data"}, transport)
    paginator = AsyncCursorPaginator(source.fetch_page, max_retries=3, cancel_token=token)
    first = await paginator.__anext__()
    assert len(first.records) == 10
    task = asyncio.create_task(paginator.__anext__(), name="test-hung-page")
    await server.requested("page-1").wait()
    started = time.monotonic()
    token.cancel()
    with pytest.raises(Aborted):
        await task
    assert time.monotonic() - started < 0.5
    assert server.cursors == [None, "page-1"]


def test_builtin_sources_registry() -> None:
    registry = Registry.builtin()
    assert registry.source_names == {"http"}
    kind = registry.find_source("http")
    assert kind is not None and kind.factory is HttpSource


# --- validation -----------------------------------------------------------------------


def test_a_full_valid_config() -> None:
    config = {
        "type": "http",
        "url": "https://api.example.com/v1/items",
        "params": {"limit": 100, "archived": False, "key": "${env:API_KEY}"},
        "headers": {"Authorization": "Bearer ${env:TOKEN}", "X-Key": "${file:/run/secrets/k}"},
        "records": "data.items",
        "id_field": "meta.id",
        "pagination": {"type": "offset", "offset_param": "o", "limit_param": "l", "limit": 50},
        "incremental": {"field": "updated_at", "param": "updated_since"},
        "timeout": {"read": 60, "connect": 2.5},
        "max_pages": 10,
    }
    assert validate_http_source(config) == {}
    for style in ("cursor", "next_url", "link_header", "page"):
        assert validate_http_source({"url": "http://h/x", "pagination": {"type": style}}) == {}


U = {"url": "http://h"}
REF_HELP = "use ${env:NAME} or ${file:/path}"


@pytest.mark.parametrize(
    ("config", "field", "message"),
    [
        ("nope", "source", "Must be a JSON object"),
        ({}, "source.url", "Field required"),
        ({"url": "ftp://h/x"}, "source.url", "Must be an http:// or https:// URL"),
        ({**U, "urll": 1}, "source.urll", "Unknown field"),
        ({**U, "type": "ftp"}, "source.type", "Must be 'http'"),
        ({**U, "params": {"a": None}}, "source.params.a", "Must be a string, number or boolean"),
        ({**U, "headers": {"A": 1}}, "source.headers.A", "Must be a string"),
        ({**U, "headers": {"A B": "x"}}, "source.headers.A B", "Invalid header name"),
        ({**U, "headers": {"A": "x\r\nB: y"}}, "source.headers.A", "Must not contain line breaks"),
        (
            {**U, "pagination": {"type": "offset", "total_header": "X Total"}},
            "source.pagination.total_header",
            "Invalid header name",
        ),
        (
            {**U, "pagination": {"type": "page", "total_pages_header": "X-WP-TotalPages:"}},
            "source.pagination.total_pages_header",
            "Invalid header name",
        ),
        (
            {**U, "headers": {"A": "${vault:x}"}},
            "source.headers.A",
            f"unsupported reference ${{vault:x}}: {REF_HELP}",
        ),
        (
            {**U, "records": ""},
            "source.records",
            MSG_PATH,
        ),
        (
            {**U, "pagination": {"type": "scroll"}},
            "source.pagination.type",
            "Unknown pagination type 'scroll'; known: cursor, link_header, next_url, offset, page",
        ),
        (
            {**U, "pagination": {"type": "offset", "limit": 0}},
            "source.pagination.limit",
            "Must be an integer between 1 and 1000000",
        ),
        (
            {**U, "pagination": {"type": "page", "limit": 5}},
            "source.pagination.limit",
            "Unknown field for pagination type 'page'",
        ),
        (
            {**U, "pagination": {"next_cursor": "a..b"}},
            "source.pagination.next_cursor",
            MSG_PATH,
        ),
        ({**U, "incremental": {"field": "u"}}, "source.incremental.param", "Field required"),
        (
            {**U, "timeout": {"read": 0}},
            "source.timeout.read",
            "Must be a number of seconds > 0 and <= 3600",
        ),
        (
            {**U, "timeout": {"read": True}},
            "source.timeout.read",
            "Must be a number of seconds > 0 and <= 3600",
        ),
        ({**U, "max_pages": 0}, "source.max_pages", "Must be an integer between 1 and 1000000000"),
    ],
)
def test_invalid_configs(config: Any, field: str, message: str) -> None:
    assert validate_http_source(config) == {field: message}


def test_invalid_config_refused_by_the_constructor() -> None:
    context = SourceContext("c1", Transport())
    with pytest.raises(SourceError, match=r"source\.url: Field required"):
        HttpSource({"records": "data"}, context)


# --- secrets --------------------------------------------------------------------------


def test_resolve_refs(tmp_path: Path) -> None:
    path = tmp_path / "s"
    path.write_text("from-file\r\n")
    env = {"A": "alpha"}
    assert resolve_refs("no refs", environ=env) == "no refs"
    assert (
        resolve_refs("x ${env:A} ${file:" + str(path) + "} y", environ=env) == "x alpha from-file y"
    )
    with pytest.raises(SourceError, match=r"\$\{env:B\}: environment variable B is not set"):
        resolve_refs("${env:B}", environ=env)
    missing = tmp_path / "missing"
    with pytest.raises(SourceError, match="cannot read") as info:
        resolve_refs(f"${{file:{missing}}}", environ=env)
    assert str(missing) in str(info.value)
    assert check_refs("${env:A}") is None
    assert check_refs("${env:}") == "empty reference ${env:}"


def test_redact_source() -> None:
    config: dict[str, Any] = {
        "type": "http",
        "url": "https://user:hunter2@api.example.com/items?api_key=k1&limit=5",
        "params": {"limit": 5, "api_key": "k2", "access_token": "${env:T}"},
        "headers": {"Authorization": "Bearer ${env:TOKEN}", "Accept": "application/json"},
        "pagination": {"type": "cursor", "next_cursor": "meta.next_token"},
        "auth": {"client_secret": "s", "username": "bob", "password": "p"},
        "records": "data",
    }
    redacted = redact_source(config)
    assert redacted == {
        "type": "http",
        "url": f"https://user:{MASK}@api.example.com/items?api_key={MASK}&limit=5",
        "params": {"limit": 5, "api_key": MASK, "access_token": MASK},
        "headers": {"Authorization": MASK, "Accept": MASK},
        "pagination": {"type": "cursor", "next_cursor": "meta.next_token"},
        # No known type: every value is masked (secrets.shown_auth).
        "auth": {"client_secret": MASK, "username": MASK, "password": MASK},
        "records": "data",
    }
    assert config["headers"]["Authorization"] == "Bearer ${env:TOKEN}"  # input untouched


# --- pure pagination helpers ----------------------------------------------------------


def test_parse_link_header() -> None:
    value = (
        '<https://api.example.com/items?page=2>; rel="next", '
        '<https://api.example.com/items?page=9>; title="a, b; c"; rel="last prev", '
        "<https://api.example.com/other>; rel=next"
    )
    assert parse_link_header(value) == {
        "next": "https://api.example.com/items?page=2",
        "last": "https://api.example.com/items?page=9",
        "prev": "https://api.example.com/items?page=9",
    }
    assert parse_link_header("") == {}
    assert parse_link_header("<broken") == {}


def test_get_path() -> None:
    body = {"a": {"b": [{"c": 1}]}}
    assert get_path(body, "a.b.0.c") == 1
    assert get_path(body, "a.x") is get_path(body, "a.b.5")


def test_next_url_on_another_origin_is_refused() -> None:
    response = Response(200, {}, "https://api.example.com/items", b"")
    style = NextUrlPagination(next_url_path="next")
    assert style.next(None, response, {"next": "/items?p=2"}, []).cursor == (
        "https://api.example.com/items?p=2"
    )
    with pytest.raises(SourceError, match="another origin"):
        style.next(None, response, {"next": "https://evil.example.net/x"}, [])


def test_next_url_is_held_to_the_requested_origin_after_a_redirect() -> None:
    # The response came from elsewhere (a redirect): a link relative to it is on that other
    # origin, not the one the source's credentials belong to.
    response = Response(
        200, {}, "https://cdn.example.net/items", b"", "https://reader:pw@api.example.com/items"
    )
    style = NextUrlPagination(next_url_path="next")
    with pytest.raises(SourceError, match=r"another origin than https://api\.example\.com/items"):
        style.next(None, response, {"next": "/items?p=2"}, [])
    same = Response(200, {}, "https://api.example.com:443/a", b"", "https://api.example.com/a")
    assert style.next(None, same, {"next": "/b"}, []).cursor == "https://api.example.com:443/b"


async def test_invalid_resume_cursor_does_not_quote_a_url_query(transport: Transport) -> None:
    # A cursor left by a next_url crawl, after the pagination style changed to offset.
    source = make_source(
        {"url": "http://127.0.0.1:9/items", "pagination": {"type": "offset"}}, transport
    )
    with pytest.raises(SourceError, match="invalid cursor") as info:
        await source.fetch_page("http://u:pw-1@127.0.0.1:9/items?api_key=k-secret-1&page=2")
    assert str(info.value).startswith(
        "invalid cursor http://127.0.0.1:9/items?api_key=***&page=***:"
    )
