"""A list that shifts while an ``offset`` or ``page`` crawl reads it (DESIGN.md §12).

A record removed from a list addressed by position (or moved to its end: Jira's ``ORDER BY
updated ASC`` moves every edited issue there) moves each record after it back by one, and
the next request, at the next position, skips the one that crossed the boundary. These are
the pure rules that see it happen and read again rather than skip; the styles'
runtime (:mod:`~syncd.sources.http.pagination`) applies them.

``offset``: each request after the first starts ``overlap`` records early, and the records
there must include one of the last ``overlap`` ids read (:func:`continues`). They are the
same records when nothing moved, one of them further back or further on when records before
them were removed or inserted; when none of them is in the page, the list lost more than
``overlap`` records before the boundary, and the crawl steps back (twice as far each time,
down to offset 0, where nothing can be missed) and reads again. The limit stays the one
configured: each request brings ``limit - overlap`` new records, and no request is added
when nothing moved. The records a page starts with that the page before ended with are not
handed on again (:func:`leading_known`); other records read twice (after a step back) are
duplicates the page commit already handles.

``page``: page numbers cannot start early, so the records' total does the work. The
position before which every record was read falls by what the total fell; when the next page
starts after it, the crawl goes back to the page holding it (:func:`page_covered`). What a
total cannot show: a removal and an insertion between the same two requests.

The state of either lives in the cursor (JSON text; a plain number is the cursor of a crawl
that checks nothing, as before), so a resumed crawl checks as the interrupted one did. A
counter of the reads again (``shifts``) keeps every cursor of a crawl unique.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from syncd.errors import SourceError
from syncd.http.paginator import describe_cursor
from syncd.rules.records import external_id_of

__all__ = [
    "OffsetCursor",
    "PageCursor",
    "continues",
    "default_overlap",
    "ids_of",
    "leading_known",
    "page_covered",
]

#: The overlap when the config sets none: three records, at most a third of the limit.
OVERLAP = 3


def default_overlap(limit: int) -> int:
    """The overlap of an offset crawl with ``limit`` records per request and none configured."""
    return min(OVERLAP, limit // 3)


def ids_of(records: Sequence[Any], id_path: Sequence[str]) -> list[str | None]:
    """The external id of each record (``None`` for a record without a usable one)."""
    found: list[str | None] = []
    for record in records:
        try:
            found.append(external_id_of(record, id_path))
        except ValueError:
            found.append(None)
    return found


def _state(cursor: str, keys: frozenset[str]) -> dict[str, Any] | None:
    """The JSON object of a cursor holding one (``None``: a plain number, or no cursor of
    ours); ``SourceError`` for an object of the wrong shape."""
    if not cursor.startswith("{"):
        return None
    try:
        state = json.loads(cursor)
    except ValueError:
        state = None
    if not isinstance(state, dict) or not keys.issuperset(state):
        raise SourceError(f"invalid cursor {describe_cursor(cursor)}")
    return state


def _whole(value: Any, cursor: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SourceError(f"invalid cursor {describe_cursor(cursor)}")
    return value


def _number(cursor: str) -> int:
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


def _text(state: dict[str, Any]) -> str:
    return json.dumps(state, ensure_ascii=False, separators=(",", ":"))


# --- offset ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetCursor:
    """Where an offset crawl stands: the offset to ask for, the ids of the last records read
    (expected in the page, ``()``: nothing to check), how many times in a row it stepped back,
    its reads again so far, and whether an end status was already checked once."""

    offset: int
    known: tuple[str, ...] = ()
    back: int = 0
    shifts: int = 0
    ended: bool = False

    @classmethod
    def read(cls, cursor: str | None) -> OffsetCursor:
        """The cursor as the style wrote it (``None``: the first page)."""
        if cursor is None:
            return cls(0)
        state = _state(cursor, _OFFSET_KEYS)
        if state is None:
            return cls(_number(cursor))
        known = state.get("known", [])
        if not isinstance(known, list) or not all(isinstance(k, str) for k in known):
            raise SourceError(f"invalid cursor {describe_cursor(cursor)}")
        return cls(
            _whole(state.get("offset"), cursor),
            tuple(known),
            _whole(state.get("back", 0), cursor),
            _whole(state.get("shifts", 0), cursor),
            state.get("ended") is True,
        )

    def text(self) -> str:
        """The cursor's text: the plain offset when there is nothing else to keep."""
        if not (self.known or self.back or self.shifts or self.ended):
            return str(self.offset)
        state: dict[str, Any] = {"offset": self.offset, "known": list(self.known)}
        for key, value in (("back", self.back), ("shifts", self.shifts)):
            if value:
                state[key] = value
        if self.ended:
            state["ended"] = True
        return _text(state)

    def after(self, position: int, ids: Sequence[str | None], overlap: int) -> OffsetCursor:
        """The cursor of the request after a page that continued the crawl and ended at
        ``position``, whose records have ``ids``: ``overlap`` records early (fewer when the
        page held fewer, so that every request moves on), expecting their ids."""
        used = min(overlap, len(ids) - 1) if ids else 0
        known = tuple(i for i in ids[len(ids) - used :] if i is not None) if used > 0 else ()
        return OffsetCursor(
            position - used if known else position, known, 0, self.shifts, self.ended
        )

    def step_back(self, limit: int, overlap: int, *, ended: bool = False) -> OffsetCursor:
        """The cursor that reads again from further back, still expecting the ids it
        expected: ``limit - overlap`` records back, twice that the next time in a row, and
        so on, down to offset 0."""
        step = max(1, limit - overlap) * 2**self.back
        return OffsetCursor(
            max(0, self.offset - step),
            self.known,
            self.back + 1,
            self.shifts + 1,
            self.ended or ended,
        )


_OFFSET_KEYS = frozenset({"offset", "known", "back", "shifts", "ended"})


def continues(at: OffsetCursor, ids: Sequence[str | None]) -> bool:
    """Whether the page read at ``at``, holding ``ids``, continues what the crawl read: at
    offset 0 nothing comes before it; otherwise one of the ids read last is in it — first
    when nothing moved, further on when records were inserted before them, further back (by
    fewer than the overlap) when records before them were removed. None of them: the list
    lost more records before the boundary than the overlap covers, and what crossed it would
    be skipped."""
    if at.offset == 0 or not at.known:
        return True
    known = set(at.known)
    return any(i in known for i in ids)


def leading_known(at: OffsetCursor, ids: Sequence[str | None]) -> int:
    """How many records at the start of a page that continues the crawl are ones it read
    last (the overlap, where nothing moved or the list moved back): read with the page
    before, they need not be handed on again. A known id further on (after an insertion,
    or moved to the end by an edit) is handed on."""
    known = set(at.known)
    count = 0
    for found in ids:
        if found is None or found not in known:
            break
        count += 1
    return count


# --- page --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageCursor:
    """Where a page crawl that follows the records' total stands: the page number to ask
    for; the position (in the list as of ``total``) before which every record was read
    (``None``: the pages before this one, a crawl resumed from a plain page number); the
    total the last page gave; the records per page; its reads again so far; whether an end
    status was already checked once."""

    page: int
    read: int | None = 0
    total: int | None = None
    size: int | None = None
    shifts: int = 0
    ended: bool = False

    @classmethod
    def read_cursor(cls, cursor: str | None, start: int) -> PageCursor:
        """The cursor as the style wrote it (``None``: the first page, numbered ``start``)."""
        if cursor is None:
            return cls(start)
        state = _state(cursor, _PAGE_KEYS)
        if state is None:
            return cls(_number(cursor), None)
        total, size = state.get("total"), state.get("size")
        return cls(
            _whole(state.get("page"), cursor),
            None if state.get("read") is None else _whole(state["read"], cursor),
            None if total is None else _whole(total, cursor),
            None if size is None else max(1, _whole(size, cursor)),
            _whole(state.get("shifts", 0), cursor),
            state.get("ended") is True,
        )

    def text(self) -> str:
        """The cursor's text (JSON: a page number alone is a crawl that checks nothing)."""
        state: dict[str, Any] = {"page": self.page}
        if self.read is not None:
            state["read"] = self.read
        if self.total is not None:
            state["total"] = self.total
        if self.size is not None:
            state["size"] = self.size
        if self.shifts:
            state["shifts"] = self.shifts
        if self.ended:
            state["ended"] = True
        return _text(state)

    def following(self, start: int, covered: Covered, total: int, size: int) -> PageCursor:
        """The cursor after this page read ``covered`` (:func:`page_covered`), with the
        records' ``total`` and ``size`` a page: after a gap, the page holding the read
        position again; else the next page (or the one holding the read position, when a
        page read again caught up)."""
        if covered.gap:
            page = start + covered.read // size
            return PageCursor(page, covered.read, total, size, self.shifts + 1, self.ended)
        page = max(self.page + 1, start + covered.read // size)
        return PageCursor(page, covered.read, total, size, self.shifts, self.ended)

    def last_page_again(self, start: int) -> PageCursor | None:
        """After an end status where the total said more records follow: the last page read,
        again, to see the total now (``None``: once a crawl, or nothing read to go back to)."""
        if self.ended or not self.read or not self.size:
            return None
        page = start + (self.read - 1) // self.size
        return PageCursor(page, self.read, self.total, self.size, self.shifts + 1, True)


_PAGE_KEYS = frozenset({"page", "read", "total", "size", "shifts", "ended"})


@dataclass(frozen=True)
class Covered:
    """What a page of a page crawl read: the position before which every record is now
    read, and whether the page started after it (records before it were removed, and the
    ones that crossed its boundary must be read again)."""

    read: int
    gap: bool


def page_covered(at: PageCursor, start: int, total: int, size: int, received: int) -> Covered:
    """What the page asked for at ``at`` read, answered with the records' ``total`` and
    ``received`` records of ``size`` a page: the read position moves back by what the total
    fell since the page before (the records after it moved back as far), then forward to the
    page's end when the page starts at or before it."""
    first = (at.page - start) * size
    read = first if at.read is None else at.read
    if at.total is not None and total < at.total:
        read = max(0, read - (at.total - total))
    if first > read:
        return Covered(read, True)
    return Covered(max(read, first + received), False)
