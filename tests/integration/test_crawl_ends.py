"""Every run says how its crawl ended (DESIGN.md §12), on both backend pairs, against the
moving source's routes (:mod:`tests.integration.movingsource`): the rule that ended each
pagination style's crawl, and the warning of a crawl that ended because a configured path was
absent from every page — a misspelt ``next_cursor`` ends a crawl after its first page, and the
run still succeeds, but says so (in the run, and in the log)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from syncd.daemon import Daemon
from syncd.models import RunOutcome
from tests.integration.movingsource import MovingSource
from tests.integration.realapis.recipes import doc_ids, sync

RECORDS, PER_PAGE = 50, 10
TYPO = "next cursor path 'cursor' was absent from every page: check `pagination.next_cursor`"


@pytest.fixture
async def moving() -> AsyncIterator[MovingSource]:
    async with MovingSource(RECORDS, per_page=PER_PAGE) as server:
        yield server


def keyset(server: MovingSource, **pagination: Any) -> dict[str, Any]:
    """A ``cursor`` source over ``/keyset``: the last id read goes back as ``after``."""
    return {
        "type": "http",
        "url": f"{server.url}/keyset",
        "records": "data",
        "pagination": {"type": "cursor", "cursor_param": "after", **pagination},
    }


def everything(server: MovingSource) -> list[str]:
    return sorted(server.expected())


def first(count: int) -> list[str]:
    """The external ids of the first ``count`` records, sorted as ``doc_ids`` sorts them."""
    return sorted(str(i) for i in range(1, count + 1))


async def test_a_misspelt_next_cursor_succeeds_with_its_end_and_a_warning(
    any_daemon: Daemon, moving: MovingSource
) -> None:
    daemon = any_daemon
    # The API answers `next_cursor`; the connector reads `cursor`.
    c = await daemon.create_connector(
        {"name": "typo", "source": keyset(moving, next_cursor="cursor")}
    )
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        run = await sync(daemon, c.id)
    # The seed's rule: the crawl ends, the run succeeds — and now says why, and warns.
    assert (run.outcome, run.pages, run.documents_seen) == (RunOutcome.SUCCEEDED, 1, PER_PAGE)
    assert (run.end_reason, run.warnings) == ("no next cursor at 'cursor'", (TYPO,))
    assert await doc_ids(daemon, c.id) == first(PER_PAGE)
    [logged] = [e for e in logs if e["event"] == "sync.crawl_warning"]
    assert (logged["log_level"], logged["warning"]) == ("warning", TYPO)
    assert (logged["run_id"], logged["end"]) == (run.id, "no next cursor at 'cursor'")
    [ended] = [e for e in logs if e["event"] == "sync.ended"]
    assert ended["end_reason"] == "no next cursor at 'cursor'"

    # The path corrected: the whole source, an end, no warning.
    await daemon.update_connector(c.id, {"source": keyset(moving, next_cursor="next_cursor")})
    fixed = await sync(daemon, c.id)
    assert (fixed.outcome, fixed.pages) == (RunOutcome.SUCCEEDED, RECORDS // PER_PAGE + 1)
    assert (fixed.end_reason, fixed.warnings) == ("no next cursor at 'next_cursor'", ())
    assert await doc_ids(daemon, c.id) == everything(moving)


# (route, records path, pagination, max_pages, pages the crawl reads, the end it records)
ENDS: list[tuple[str, str | None, dict[str, Any], int | None, int, str]] = [
    ("keyset", "data", {"cursor_param": "after"}, None, 6, "no next cursor at 'next_cursor'"),
    (
        "keyset",
        "data",
        {"cursor_param": "after", "more": "has_more"},
        None,
        6,
        "'has_more' is false",
    ),
    (
        "next",
        "data",
        {"type": "next_url", "next_url": "links.next"},
        None,
        6,
        "no next URL at 'links.next'",
    ),
    ("link", None, {"type": "link_header"}, None, 6, 'no Link rel="next"'),
    (
        "offset",
        "items",
        {"type": "offset", "limit": 20},
        None,
        3,
        # Each request after the first starts 3 records early (the overlap): 0, 17, 34.
        "short page (16 of 20), no total configured",
    ),
    (
        "offset",
        "items",
        {"type": "offset", "limit": 10, "total": "total"},
        None,
        7,  # offsets 0, 7, 14, … 42: the overlap of 3
        "50 of 50 records (total 'total')",
    ),
    (
        "pages",
        None,
        {"type": "page", "end_status": [400]},
        None,
        6,
        "status 400 past the last page (end_status)",
    ),
    (
        "pages",
        None,
        {"type": "page", "total_pages_header": "X-WP-TotalPages"},
        None,
        5,
        "page 5 of 5 (header X-WP-TotalPages)",
    ),
    ("keyset", "data", {"cursor_param": "after"}, 2, 2, "max_pages (2) reached"),
]


@pytest.mark.parametrize(
    ("route", "records", "pagination", "max_pages", "pages", "reason"),
    ENDS,
    ids=[
        "cursor",
        "has_more",
        "next_url",
        "link_header",
        "short_page",
        "total",
        "end_status",
        "total_pages",
        "max_pages",
    ],
)
async def test_each_style_records_the_rule_that_ended_its_crawl(
    any_daemon: Daemon,
    moving: MovingSource,
    route: str,
    records: str | None,
    pagination: dict[str, Any],
    max_pages: int | None,
    pages: int,
    reason: str,
) -> None:
    source: dict[str, Any] = {"type": "http", "url": f"{moving.url}/{route}"}
    source["pagination"] = pagination
    if records is not None:
        source["records"] = records
    if max_pages is not None:
        source["max_pages"] = max_pages
    c = await any_daemon.create_connector({"name": f"ends-{route}", "source": source})
    run = await sync(any_daemon, c.id)
    assert (run.outcome, run.pages, run.warnings) == (RunOutcome.SUCCEEDED, pages, ())
    assert run.end_reason == reason
    # The documents are the source's; with max_pages, those of the pages read.
    expected = everything(moving)
    if max_pages is not None:
        expected = first(max_pages * PER_PAGE)
    assert await doc_ids(any_daemon, c.id) == expected
