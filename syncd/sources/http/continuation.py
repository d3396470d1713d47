"""What a page says of the crawl's continuation: the next cursor and why (:class:`Next`), the
places a pagination style reads (:class:`Watched`), and the one whose lack ended a crawl
(:class:`Lack`). Shared by the styles (:mod:`~syncd.sources.http.pagination`) and the
source that reports how a crawl ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Lack", "Next", "Place", "Watched"]

Place = Literal["body", "header", "last_record"]
"""Where a style reads a value: the response body, a header, or the page's last record."""


@dataclass(frozen=True)
class Watched:
    """A place a style reads, which a preview warns of when the first page lacks it: a path
    in the response body (``where="body"``) or in the page's last record
    (``"last_record"``), or a header name (``"header"``)."""

    name: str
    where: Place = "body"


@dataclass(frozen=True)
class Lack:
    """A configured place that held no value (absent, null or empty) on the page that ended
    the crawl, so that its absence ended it: ``what`` it holds ("next cursor") and the
    ``key`` of the pagination config that names it (``next_cursor``)."""

    place: Watched
    what: str
    key: str


@dataclass(frozen=True)
class Next:
    """The cursor of the page after this one (``None``: this was the last) and why; for a
    crawl ended by a place without a value, that place (``lacking``); ``skip``: how many
    records at the page's start the crawl read with the page before (an offset crawl's
    overlap), which the page need not hand on again."""

    cursor: str | None
    reason: str
    lacking: Lack | None = None
    skip: int = 0
