"""How a crawl ended, as the ``http`` source tells it (:meth:`HttpSource.crawl_end`) over a
fake transport: the last page's reason, and the warning of a crawl that ended because a
configured next-page place was absent from every page (what a misspelt path looks like);
and the end a run records for a source that does not say (:func:`crawl_end`)."""

from __future__ import annotations

from typing import Any, cast

from syncd.errors import ClientError
from syncd.http.transport import Response, Transport
from syncd.models import CrawlEnd, Page
from syncd.pipeline.pages import SOURCE_ENDED, crawl_end
from syncd.sources.base import SourceContext
from syncd.sources.http import HttpSource
from syncd.sources.threaded import as_async
from tests.unit.test_pagination_styles import URL, FakeTransport, answer

CURSOR_TYPO = "next cursor path 'cursor' was absent from every page: check `pagination.next_cursor`"


def source(
    pagination: dict[str, Any], *answers: Response | Exception, resuming: bool = False, **extra: Any
) -> HttpSource:
    config = {"type": "http", "url": URL, "records": "data", "pagination": pagination, **extra}
    context = SourceContext("c1", cast(Transport, FakeTransport(*answers)), resuming=resuming)
    return HttpSource(config, context)


async def crawl(s: HttpSource, cursor: str | None = None) -> int:
    """Fetch pages from ``cursor`` until one has no next cursor; how many were fetched."""
    pages = 0
    while True:
        page = await s.fetch_page(cursor)
        pages += 1
        if page.next_cursor is None:
            return pages
        assert s.crawl_end() is None  # not before the page that ends the crawl
        cursor = page.next_cursor


def records(*ids: int) -> list[dict[str, Any]]:
    return [{"id": i} for i in ids]


async def test_a_misspelt_next_cursor_ends_the_crawl_with_a_warning() -> None:
    # The API answers `next_cursor`; the connector reads `cursor`.
    s = source({"next_cursor": "cursor"}, answer({"data": records(1, 2), "next_cursor": "p2"}))
    assert await crawl(s) == 1
    assert s.crawl_end() == CrawlEnd("no next cursor at 'cursor'", (CURSOR_TYPO,))


async def test_a_correct_path_ends_the_crawl_without_a_warning() -> None:
    s = source(
        {"next_cursor": "next_cursor"},
        answer({"data": records(1, 2), "next_cursor": "p2"}),
        answer({"data": records(3), "next_cursor": None}),
    )
    assert await crawl(s) == 2
    assert s.crawl_end() == CrawlEnd("no next cursor at 'next_cursor'")


async def test_a_key_left_out_of_the_last_page_only_is_no_warning() -> None:
    s = source(
        {"next_cursor": "next_cursor"},
        answer({"data": records(1, 2), "next_cursor": "p2"}),
        answer({"data": records(3)}),
    )
    assert await crawl(s) == 2
    assert s.crawl_end() == CrawlEnd("no next cursor at 'next_cursor'")


async def test_null_or_empty_is_not_absent() -> None:
    for value in (None, ""):
        s = source({"next_cursor": "next"}, answer({"data": records(1), "next": value}))
        await crawl(s)
        assert s.crawl_end() == CrawlEnd("no next cursor at 'next'")


async def test_an_empty_first_page_gets_no_warning() -> None:
    # An empty list commonly comes without a cursor: nothing says the path is wrong.
    s = source({"next_cursor": "cursor"}, answer({"data": []}))
    await crawl(s)
    assert s.crawl_end() == CrawlEnd("no next cursor at 'cursor'")


async def test_a_resumed_crawl_gets_no_warning() -> None:
    # Its resume cursor came from the place on an earlier page of the crawl.
    s = source({"next_cursor": "cursor"}, answer({"data": records(9)}), resuming=True)
    await crawl(s, "p3")
    assert s.crawl_end() == CrawlEnd("no next cursor at 'cursor'")


async def test_an_end_signal_that_ended_the_crawl_is_no_warning_about_the_cursor() -> None:
    # `has_more` false ended it: the absent cursor did not.
    s = source(
        {"next_cursor": "cursor", "more": "has_more"},
        answer({"data": records(1), "has_more": False}),
    )
    await crawl(s)
    assert s.crawl_end() == CrawlEnd("'has_more' is false")


async def test_a_missing_cursor_header_and_next_url_are_named() -> None:
    header = source({"next_from": "header", "next_cursor": "X-Next"}, answer({"data": records(1)}))
    await crawl(header)
    assert header.crawl_end() == CrawlEnd(
        "no next cursor at header X-Next",
        ("next cursor header X-Next was absent from every page: check `pagination.next_cursor`",),
    )
    # A key holding dots, written as a dotted path: the warning says how to write it.
    body = {"data": records(1), "@odata.nextLink": f"{URL}?page=2"}
    nested = source({"type": "next_url", "next_url": "@odata.nextLink"}, answer(body))
    await crawl(nested)
    assert nested.crawl_end() == CrawlEnd(
        "no next URL at '@odata.nextLink'",
        (
            "next URL path '@odata.nextLink' (the key '@odata.nextLink' is: write the JSON "
            "Pointer '/@odata.nextLink') was absent from every page: check `pagination.next_url`",
        ),
    )


async def test_each_style_names_the_rule_that_ended_it() -> None:
    ends: list[tuple[dict[str, Any], list[Response | Exception], str]] = [
        (
            {"type": "offset", "limit": 2},
            [answer({"data": records(1, 2)}), answer({"data": records(3)})],
            "short page (1 of 2), no total configured",
        ),
        (
            {"type": "offset", "limit": 2, "total": "total"},
            [answer({"data": records(1, 2), "total": 3}), answer({"data": records(3), "total": 3})],
            "3 of 3 records (total 'total')",
        ),
        (
            {"type": "page", "end_status": [400]},
            [answer({"data": records(1)}), ClientError(400, "HTTP 400")],
            "status 400 past the last page (end_status)",
        ),
        (
            {"type": "page"},
            [answer({"data": records(1)}), answer({"data": []})],
            "empty page",
        ),
        (
            {"type": "link_header"},
            [answer({"data": records(1)})],
            'no Link rel="next"',
        ),
        (
            {"next_cursor": "next", "more": "has_more"},
            [answer({"data": records(1), "next": "p2", "has_more": False})],
            "'has_more' is false",
        ),
    ]
    for pagination, answers, reason in ends:
        s = source(pagination, *answers)
        await crawl(s)
        assert s.crawl_end() == CrawlEnd(reason), pagination


async def test_max_pages_ends_only_a_crawl_that_would_go_on() -> None:
    cut = source(
        {"next_cursor": "next"},
        answer({"data": records(1), "next": "p2"}),
        answer({"data": records(2), "next": "p3"}),
        max_pages=2,
    )
    assert await crawl(cut) == 2
    assert cut.crawl_end() == CrawlEnd("max_pages (2) reached")
    # The style ended it on that very page: its own reason is kept.
    ended = source(
        {"next_cursor": "next"},
        answer({"data": records(1), "next": "p2"}),
        answer({"data": records(2), "next": None}),
        max_pages=2,
    )
    await crawl(ended)
    assert ended.crawl_end() == CrawlEnd("no next cursor at 'next'")


class PluginSource:
    async def fetch_page(self, cursor: str | None) -> Page:
        return Page([], None)


class TellingPlugin(PluginSource):
    def crawl_end(self) -> CrawlEnd | None:
        return CrawlEnd("the export said it was complete")


class BlockingPlugin:
    def fetch_page(self, cursor: str | None) -> Page:
        return Page([], None)


class TellingBlockingPlugin(BlockingPlugin):
    def crawl_end(self) -> CrawlEnd | None:
        return CrawlEnd("the SDK's iterator was exhausted")


def test_a_source_that_does_not_say_gets_the_generic_end() -> None:
    assert crawl_end(PluginSource()) == CrawlEnd(SOURCE_ENDED)
    assert SOURCE_ENDED == "the source returned no next cursor"
    assert crawl_end(TellingPlugin()) == CrawlEnd("the export said it was complete")
    # A blocking plugin, run in a worker thread, says it the same way.
    assert crawl_end(as_async(BlockingPlugin())) == CrawlEnd(SOURCE_ENDED)
    assert crawl_end(as_async(TellingBlockingPlugin())) == CrawlEnd(
        "the SDK's iterator was exhausted"
    )
