"""A run's pages on their way to the commit (DESIGN.md §4): read ahead of the commit of the
page before, a resume cursor the source rejects, the source's checkpoint after each page, and
how the crawl ended after the last one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from syncd.errors import ClientError, SyncdError
from syncd.models import CrawlEnd, DocumentInput, Page, Rejection
from syncd.runtime.tasks import cancel_and_wait
from syncd.sources.base import EndingSource, Source, StatefulSource

_END = object()

#: How the crawl of a source that does not say ended (a plugin without ``crawl_end``).
SOURCE_ENDED = "the source returned no next cursor"


@dataclass(frozen=True)
class PreparedPage:
    """A fetched page, ready to commit: its documents and what the commit records with them."""

    next_cursor: str | None
    documents: list[DocumentInput]
    state: Mapping[str, Any]
    rejected: tuple[Rejection, ...] = ()  # records that did not become documents
    deletions: tuple[str, ...] = ()  # external ids of tombstones
    end: CrawlEnd | None = None  # on the page that ended the crawl: how it ended
    filtered: int = 0  # records the source left out (Page.filtered)


async def read_ahead(
    items: AsyncIterator[PreparedPage], *, name: str
) -> AsyncGenerator[PreparedPage, None]:
    """Yield ``items`` while the next one is already being fetched and prepared.

    The paginator's own rules still decide every request (cancel token checked before each,
    throttle between pages); this only lets the request for page N+1 overlap the commit of
    page N. At most one page waits here uncommitted; an abort discards it, and the next run
    resumes from the last committed cursor.
    """
    ready: asyncio.Queue[object] = asyncio.Queue(maxsize=1)

    async def reader() -> None:
        try:
            async for item in items:
                await ready.put(item)
        except Exception as exc:
            await ready.put(exc)
        else:
            await ready.put(_END)

    task = asyncio.create_task(reader(), name=name)
    try:
        while True:
            item = await ready.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, PreparedPage)
            yield item
    finally:
        await cancel_and_wait(task)


class CursorRejected(SyncdError):
    """The source answered the resume cursor with a 4xx: the crawl starts over."""

    def __init__(self, status: int) -> None:
        super().__init__(f"resume cursor rejected with HTTP {status}")
        self.status = status


#: 4xx answers that say nothing about the cursor: retried or failed, never a restart.
_NOT_A_CURSOR_REJECTION = frozenset({401, 403, 407, 408, 429})


def guard_resume(
    source: Source, resume_cursor: str | None, retry_on_status: Collection[int]
) -> Callable[[str | None], Any]:
    """``fetch_page`` that turns a 4xx answer to the resume cursor into ``CursorRejected``
    (until the first page arrives), except for statuses that are retried or that are about
    credentials or rate limits rather than the cursor."""
    resumed = False

    async def fetch(cursor: str | None) -> Page:
        nonlocal resumed
        if resumed or resume_cursor is None or cursor != resume_cursor:
            return await source.fetch_page(cursor)
        try:
            page = await source.fetch_page(cursor)
        except ClientError as exc:
            if exc.status in retry_on_status or exc.status in _NOT_A_CURSOR_REJECTION:
                raise
            raise CursorRejected(exc.status) from exc
        resumed = True
        return page

    return fetch


def checkpoint(source: Source) -> Mapping[str, Any]:
    """The state a stateful source saves after its latest page (``{}`` for any other)."""
    if isinstance(source, StatefulSource):
        value = source.checkpoint()
        if isinstance(value, Mapping):
            return value
    return {}


def crawl_end(source: Source) -> CrawlEnd:
    """How the crawl ended, read after its last page: what the source says
    (:class:`~syncd.sources.base.EndingSource`), else :data:`SOURCE_ENDED`."""
    if isinstance(source, EndingSource):
        end = source.crawl_end()
        if end is not None:
            return end
    return CrawlEnd(SOURCE_ENDED)
