"""A list that shifts under an ``offset`` or ``page`` crawl is read again rather than skipped
(DESIGN.md §12; :mod:`syncd.sources.http.shifts` and the styles that apply it), over fake
pages: a live list served by position, changed between two requests as a test says."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from multidict import CIMultiDict

from syncd.errors import SourceError
from syncd.http.transport import Response
from syncd.sources.http import validate_http_source
from syncd.sources.http.pagination import (
    Next,
    OffsetPagination,
    PageRequest,
    Pagination,
    build_pagination,
)
from syncd.sources.http.shifts import OffsetCursor, PageCursor, continues, default_overlap

URL = "https://api.example/items"
BASE = PageRequest(URL)

Change = Callable[["Listing"], None]


class Listing:
    """The live records ``{"id": n}``, in order, served by position; ``changes[n]`` runs
    after the ``n``-th request was answered. ``end_status`` answers a page past the end."""

    def __init__(self, ids: list[int], changes: dict[int, Change] | None = None) -> None:
        self.ids = list(ids)
        self.changes = dict(changes or {})
        self.asked: list[int] = []

    def delete(self, *ids: int) -> None:
        self.ids = [i for i in self.ids if i not in ids]

    def to_end(self, record_id: int) -> None:
        """An edit under ``ORDER BY updated``: the record moves to the end."""
        self.delete(record_id)
        self.ids.append(record_id)

    def insert(self, position: int, record_id: int) -> None:
        self.ids.insert(position, record_id)

    def crawl(
        self, style: Pagination, where: Callable[[PageRequest], tuple[int, int]]
    ) -> list[int]:
        """The ids ``style`` hands on over a whole crawl (``where``: the first position
        and the count a request asks for)."""
        cursor: str | None = None
        seen: list[int] = []
        while True:
            assert len(self.asked) < 100, self.asked
            first, count = where(style.request(cursor, BASE))
            self.asked.append(first)
            records = [{"id": i} for i in self.ids[first : first + count]]
            body = {"data": records, "total": len(self.ids)}
            response = Response(200, CIMultiDict(), URL, json.dumps(body).encode())
            found = style.next(cursor, response, body, records)
            seen += [r["id"] for r in records[found.skip :]]
            change = self.changes.pop(len(self.asked), None)
            if change is not None:
                change(self)
            if found.cursor is None:
                return seen
            cursor = found.cursor


def offsets(request: PageRequest) -> tuple[int, int]:
    return int(request.params["offset"]), int(request.params["limit"])


def pages_of(size: int, start: int = 1) -> Callable[[PageRequest], tuple[int, int]]:
    def where(request: PageRequest) -> tuple[int, int]:
        return (int(request.params["page"]) - start) * size, size

    return where


def offset_style(**config: Any) -> Pagination:
    return build_pagination({"type": "offset", "limit": 10, **config}, "id")


def page_style(**config: Any) -> Pagination:
    return build_pagination({"type": "page", "size": 10, "total": "total", **config}, "id")


IDS = list(range(1, 31))


# --- offset: the overlap --------------------------------------------------------------------


def test_the_default_overlap_is_three_and_at_most_a_third_of_the_limit() -> None:
    assert [default_overlap(n) for n in (100, 10, 9, 6, 3, 2, 1)] == [3, 3, 3, 2, 1, 0, 0]
    assert offset_style() == OffsetPagination(limit=10, overlap=3)
    assert offset_style(overlap=0) == OffsetPagination(limit=10)
    # Without the records' id path, nothing to check: none unless configured.
    assert build_pagination({"type": "offset", "limit": 10}) == OffsetPagination(limit=10)
    nested = build_pagination({"type": "offset", "overlap": 5}, "meta.key")
    assert nested == OffsetPagination(overlap=5, id_path=("meta", "key"))


def test_an_overlap_leaves_each_request_a_new_record() -> None:
    def errors(pagination: dict[str, Any]) -> dict[str, str]:
        return validate_http_source({"url": URL, "pagination": {"type": "offset", **pagination}})

    # The JSON Schema cannot compare two keys: a larger overlap is taken as limit - 1.
    assert errors({"limit": 10, "overlap": 10}) == {}
    assert offset_style(overlap=10) == OffsetPagination(limit=10, overlap=9)
    listing = Listing(IDS)
    assert listing.crawl(offset_style(overlap=50, total="total"), offsets) == IDS
    assert listing.asked == list(range(21))  # one new record a request: 0-9, 1-10 … 20-29
    assert errors({"overlap": -1}) == {
        "source.pagination.overlap": "Must be an integer between 0 and 999999"
    }
    assert errors({"overlap": "3"}) == {
        "source.pagination.overlap": "Must be an integer between 0 and 999999"
    }


def test_nothing_moved_costs_no_extra_request_and_hands_on_each_record_once() -> None:
    listing = Listing(IDS)
    assert listing.crawl(offset_style(total="total"), offsets) == IDS
    # Seven new records a request: 0, 7, 14, 21 (30 of 30: the total ends it).
    assert listing.asked == [0, 7, 14, 21]
    plain = Listing(IDS)
    assert plain.crawl(offset_style(overlap=0, total="total"), offsets) == IDS
    assert plain.asked == [0, 10, 20]


def test_the_end_rules_hold_with_an_overlap() -> None:
    # A short page ends a crawl without a total: 21 answers 9 records (21-29 of 1-29).
    short = Listing(IDS[:-1])
    assert short.crawl(offset_style(), offsets) == IDS[:-1]
    assert short.asked == [0, 7, 14, 21]
    # A full last page: the next request, three early, answers three records and ends.
    full = Listing(IDS[:24])
    assert full.crawl(offset_style(), offsets) == IDS[:24]
    assert full.asked == [0, 7, 14, 21]
    # The total ends it whatever the page size.
    empty = Listing([])
    assert empty.crawl(offset_style(total="total"), offsets) == []
    assert empty.asked == [0]


def test_a_record_removed_from_a_page_read_does_not_hide_the_next_one() -> None:
    listing = Listing(IDS, {1: lambda s: s.delete(3)})
    seen = listing.crawl(offset_style(total="total"), offsets)
    # 11 slid onto page 1: the request at 7 finds 9, 10 first (one back) and goes on.
    assert sorted(set(seen)) == IDS  # 3 too, read before it went
    assert listing.asked == [0, 7, 14, 21]
    # Without the overlap, the request at 10 starts at 12: 11 is skipped.
    plain = Listing(IDS, {1: lambda s: s.delete(3)})
    assert 11 not in plain.crawl(offset_style(overlap=0, total="total"), offsets)


def test_an_edit_that_moves_a_record_to_the_end_is_read_there() -> None:
    # Jira's ORDER BY updated ASC: record 5, read on page 1, is edited.
    listing = Listing(IDS, {1: lambda s: s.to_end(5)})
    seen = listing.crawl(offset_style(), offsets)
    assert sorted(set(seen)) == IDS
    assert seen.count(5) == 2  # read before and after its edit


def test_more_removed_than_the_overlap_steps_back_and_reads_again() -> None:
    listing = Listing(IDS, {1: lambda s: s.delete(2, 3, 4, 5, 6)})
    seen = listing.crawl(offset_style(total="total"), offsets)
    assert set(seen) == set(IDS)
    # 7: none of 8, 9, 10 (they moved back by five); back by 7 to 0, then on.
    assert listing.asked == [0, 7, 0, 7, 14, 21]


def test_a_list_that_lost_many_records_steps_back_twice_as_far_each_time() -> None:
    many = list(range(1, 101))
    listing = Listing(many, {5: lambda s: s.delete(*range(1, 36))})
    seen = listing.crawl(offset_style(total="total"), offsets)
    assert set(seen) >= set(listing.ids)
    # At 35 (five pages in), 35 records went: back 7, 14, then to 0 — at most a few
    # requests, and offset 0 misses nothing.
    assert listing.asked[:9] == [0, 7, 14, 21, 28, 35, 28, 14, 0]


def test_records_inserted_before_the_boundary_shift_the_known_ones_on() -> None:
    listing = Listing(IDS, {1: lambda s: s.insert(0, 0)})
    seen = listing.crawl(offset_style(), offsets)
    assert set(seen) == set(IDS)  # 0 came on a page read: the next crawl brings it
    assert listing.asked == [0, 7, 14, 21, 28]  # 31 records now


def test_records_without_ids_are_not_checked() -> None:
    style = offset_style()
    records = [{"name": "a"}] * 10
    body = {"data": records}
    response = Response(200, CIMultiDict(), URL, b"{}")
    assert style.next(None, response, body, records) == Next("10", "full page (10 of 10)")


def test_an_end_status_where_known_records_were_expected_steps_back_once() -> None:
    style = offset_style(end_status=[400])
    at = OffsetCursor(21, ("22", "23", "24"))
    again = style.at_end_status(at.text(), 400)
    assert again.cursor is not None
    assert OffsetCursor.read(again.cursor) == OffsetCursor(14, ("22", "23", "24"), 1, 1, True)
    assert again.reason == (
        "status 400 at offset 21, where records read last were expected: reading again from "
        "offset 14"
    )
    # The second one in the crawl is the end; and so is one with nothing to expect.
    later = OffsetCursor(28, ("29",), 0, 1, True)
    assert style.at_end_status(later.text(), 400) == Next(
        None, "status 400 past the last page (end_status)"
    )
    assert style.at_end_status("30", 400).cursor is None


def test_continuity() -> None:
    at = OffsetCursor(7, ("8", "9", "10"))
    assert continues(at, ["8", "9", "10", "11"])  # nothing moved
    assert continues(at, ["10", "11", "12"])  # two removed before the boundary
    assert continues(at, ["6", "7", "8", "9"])  # two inserted before it
    assert not continues(at, ["11", "12", "13"])  # three removed: 11 might have been skipped
    assert not continues(at, [])  # the list shrank below the offset
    assert continues(OffsetCursor(0, ("8",)), [])  # nothing comes before offset 0
    assert continues(OffsetCursor(7), ["11"])  # nothing known: nothing to check


def test_offset_cursors_resume_and_old_ones_still_work() -> None:
    at = OffsetCursor(14, ("15", "é", "x,y"), 2, 3, True)
    assert OffsetCursor.read(at.text()) == at
    assert OffsetCursor(20).text() == "20"  # a crawl that checks nothing, as before
    assert OffsetCursor.read("20") == OffsetCursor(20)  # a checkpoint from before
    assert OffsetCursor.read(None) == OffsetCursor(0)
    style = offset_style()
    assert style.request(at.text(), BASE).params == {"offset": "14", "limit": "10"}
    for bad in ('{"offset": -1}', '{"offset": 1, "known": [1]}', '{"page": 2}', "{x", "-3"):
        with pytest.raises(SourceError):
            OffsetCursor.read(bad)


# --- page: the records' total --------------------------------------------------------------


def test_a_page_crawl_with_a_total_ends_on_it_and_costs_nothing_when_nothing_moved() -> None:
    listing = Listing(IDS)
    assert listing.crawl(page_style(), pages_of(10)) == IDS
    assert listing.asked == [0, 10, 20]  # pages 1, 2, 3: 30 of 30 records


def test_a_record_removed_from_a_page_read_has_the_page_read_again() -> None:
    # The WordPress case: record 3 goes after page 1, record 11 slides onto page 1.
    listing = Listing(IDS, {1: lambda s: s.delete(3)})
    seen = listing.crawl(page_style(), pages_of(10))
    assert set(seen) == set(IDS)  # 3 too, read before it went
    assert listing.asked == [0, 10, 0, 10, 20]  # pages 1, 2, then 1 again, 2 and 3


def test_more_removed_than_a_page_goes_back_as_many_pages() -> None:
    listing = Listing(IDS, {2: lambda s: s.delete(*range(1, 16))})
    seen = listing.crawl(page_style(), pages_of(10))
    assert set(seen) >= set(listing.ids)
    # After page 2 the total fell by 15: what was read up to 20 is now read up to 5.
    assert listing.asked == [0, 10, 20, 0, 10]


def test_page_numbers_from_zero_and_the_size_learnt_from_the_first_page() -> None:
    style = build_pagination({"type": "page", "start": 0, "total": "total"}, "id")
    listing = Listing(IDS, {1: lambda s: s.delete(3)})
    assert set(listing.crawl(style, pages_of(10, start=0))) == set(IDS)
    assert listing.asked == [0, 10, 0, 10, 20]


def test_inserted_records_need_no_page_again() -> None:
    listing = Listing(IDS, {1: lambda s: s.insert(0, 0)})
    seen = listing.crawl(page_style(), pages_of(10))
    assert set(seen) == set(IDS)  # 0 came on a page read: the next crawl brings it
    assert listing.asked == [0, 10, 20, 30]  # 31 records now


def test_what_a_total_cannot_show() -> None:
    # Without a total nothing is checked, and the record that crossed the boundary is lost.
    plain = Listing(IDS, {1: lambda s: s.delete(3)})
    assert 11 not in plain.crawl(build_pagination({"type": "page", "size": 10}, "id"), pages_of(10))
    # A removal and an insertion between the same two requests leave the total as it was.
    both = Listing(IDS, {1: lambda s: (s.delete(3), s.ids.append(31))})
    assert 11 not in both.crawl(page_style(), pages_of(10))


def test_an_end_status_while_the_total_said_more_reads_the_last_page_again_once() -> None:
    style = page_style(end_status=[400])
    at = PageCursor(3, 20, 30, 10)
    again = style.at_end_status(at.text(), 400)
    assert again.cursor is not None
    assert PageCursor.read_cursor(again.cursor, 1) == PageCursor(2, 20, 30, 10, 1, True)
    assert (
        again.reason == "status 400 while the total said more records follow: reading page 2 again"
    )
    ended = PageCursor(3, 20, 30, 10, 1, True)
    assert style.at_end_status(ended.text(), 400).cursor is None
    assert style.at_end_status("3", 400).cursor is None  # a plain page number: as before


def test_a_page_read_again_after_an_end_status_follows_the_fallen_total() -> None:
    style = page_style(end_status=[400])
    # Page 2 was read (read to 20 of 30), then 15 records went: page 3 answers 400.
    again = style.at_end_status(PageCursor(3, 20, 30, 10).text(), 400)
    assert again.cursor is not None
    records = [{"id": i} for i in range(6, 16)]  # page 2 of what is left: 5 + 10 ... 15
    body = {"data": records, "total": 15}
    response = Response(200, CIMultiDict(), URL, json.dumps(body).encode())
    found = style.next(again.cursor, response, body, records)
    # Read to 20 less 15 = 5: page 2 starts after it, so back to page 1.
    assert found.cursor is not None
    assert PageCursor.read_cursor(found.cursor, 1).page == 1


def test_page_cursors_resume_and_old_ones_still_work() -> None:
    at = PageCursor(4, 27, 95, 10, 2, True)
    assert PageCursor.read_cursor(at.text(), 1) == at
    assert PageCursor.read_cursor("3", 1) == PageCursor(3, None)  # a checkpoint from before
    assert PageCursor.read_cursor(None, 0) == PageCursor(0)
    assert page_style().request(at.text(), BASE).params == {"page": "4", "per_page": "10"}
    # A crawl resumed from a plain page number takes the pages before it as read.
    records = [{"id": i} for i in range(21, 31)]
    body = {"data": records, "total": 30}
    response = Response(200, CIMultiDict(), URL, json.dumps(body).encode())
    assert page_style().next("3", response, body, records) == Next(
        None, "30 of 30 records (total 'total')"
    )
    for bad in ('{"page": "2"}', '{"page": 2, "offset": 1}', "[2]", "x"):
        with pytest.raises(SourceError):
            PageCursor.read_cursor(bad, 1)
